/* test_roll.c - what a roll-forward writes, deletes and omits, from the
 * last changes a hostile guest recorded: a link replaced by a directory
 * and a file below it, files under a directory deleted later, files
 * written through a link, a link made, a file over a link, paths too long
 * or malformed, control bytes, more files and bytes than the inputs take,
 * and a run's own inputs kept from its start but where the record changed
 * them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "engine/runs/roll.h"
#include "vmm/chan.h"

static struct sb_roll_file files[SB_CHAN_INPUT_FILES + 100];
static size_t nfiles;

/* Adds a change: kind 'c' a file with content, 'n' a file without (over a
 * cap), 'd' a deletion, 'l' a link made. */
static void change(const char *path, char kind, uint64_t offset)
{
	struct sb_roll_file *f = &files[nfiles++];

	memset(f, 0, sizeof *f);
	snprintf(f->path, sizeof f->path, "%.*s", (int)sizeof f->path - 1, path);
	f->toolong = strlen(path) >= sizeof f->path;
	f->deleted = kind == 'd';
	f->link = kind == 'l';
	f->content = kind == 'c' || kind == 'l';
	f->size = kind == 'd' ? 0 : 5;
	f->offset = offset;
	memset(f->blob, (int)offset, sizeof f->blob);
}

static int has_input(const struct sb_plan *p, const char *path)
{
	for (size_t i = 0; i < p->ninputs; i++)
		if (!strcmp(p->inputs[i].path, path))
			return 1;
	return 0;
}

static int has_remove(const struct sb_plan *p, const char *path)
{
	for (size_t i = 0; i < p->nremoves; i++)
		if (!strcmp(p->removes[i], path))
			return 1;
	return 0;
}

static int has_named(const struct sb_roll *r, const char *path)
{
	for (size_t i = 0; i < r->nnamed; i++)
		if (!strcmp(r->named[i], path))
			return 1;
	return 0;
}

static void plan_clear(struct sb_plan *p)
{
	free(p->inputs);
	free(p->removes);
	memset(p, 0, sizeof *p);
	nfiles = 0;
}

static void test_links(void **state)
{
	struct sb_plan p = {0};
	struct sb_roll r;

	/* d was a link to /etc: deleted, made a directory, d/evil written */
	change("d", 'd', 10);
	change("d/evil", 'c', 12);
	/* a/x written, then a moved away: a/x went with it */
	change("a/x", 'c', 5);
	change("a", 'd', 8);
	/* l made a link, then l/x written through it */
	change("l", 'l', 3);
	change("l/x", 'c', 4);
	/* f replaced by a link; g, a link, replaced by a file */
	change("f", 'l', 20);
	change("g", 'c', 21);
	assert_int_equal(sb_roll_plan(files, nfiles, 0, NULL, NULL, &p, &r), SB_OK);
	assert_int_equal(p.nremoves, 2);
	assert_true(has_remove(&p, "d") && has_remove(&p, "a"));
	/* the links made are links, their targets their contents */
	assert_int_equal(p.ninputs, 4);
	assert_true(has_input(&p, "d/evil") && has_input(&p, "g") && has_input(&p, "l") &&
		    has_input(&p, "f"));
	for (size_t i = 0; i < p.ninputs; i++)
		assert_int_equal(p.inputs[i].mode, strcmp(p.inputs[i].path, "l") &&
							   strcmp(p.inputs[i].path, "f")
						       ? 0644
						       : SB_PLAN_LINK | 0777);
	assert_int_equal(r.rolled, 4);
	/* what was written through the link l cannot be placed */
	assert_int_equal(r.omitted, 1);
	assert_int_equal(r.nnamed, 1);
	assert_true(has_named(&r, "/workspace/l/x"));
	assert_false(has_input(&p, "a/x") || has_named(&r, "/workspace/a/x"));
	plan_clear(&p);
}

static void test_bad_paths(void **state)
{
	struct sb_plan p = {0};
	struct sb_roll r;
	char longp[600];

	memset(longp, 'x', sizeof longp - 1);
	longp[sizeof longp - 1] = 0;
	change(longp, 'c', 1);
	change("../etc/passwd", 'c', 2);
	change("a//b", 'd', 3);
	change("", 'c', 4);
	change("big", 'n', 5);
	change("ctl\n\x1b[2J\xff", 'c', 6);
	change("longlink", 'l', 7); /* a target longer than a link takes */
	files[nfiles - 1].size = SB_PLAN_LINK_MAX + 1;
	assert_int_equal(sb_roll_plan(files, nfiles, 0, NULL, NULL, &p, &r), SB_OK);
	/* names with control bytes are names: the agent writes them */
	assert_int_equal(p.ninputs, 1);
	assert_string_equal(p.inputs[0].path, "ctl\n\x1b[2J\xff");
	assert_int_equal(p.nremoves, 0);
	assert_int_equal(r.omitted, 6);
	/* the long one named cut, and said to be */
	assert_int_equal(strncmp(r.named[0], "/workspace/xxxx", 15), 0);
	assert_non_null(strstr(r.named[0], "…"));
	assert_true(strlen(r.named[0]) < sizeof r.named[0]);
	assert_true(has_named(&r, "/workspace/../etc/passwd") &&
		    has_named(&r, "/workspace/big"));
	plan_clear(&p);
}

static void test_limits(void **state)
{
	struct sb_plan p = {0};
	struct sb_roll r;
	char path[32];

	for (unsigned i = 0; i < SB_CHAN_INPUT_FILES + 100; i++) {
		snprintf(path, sizeof path, "f%u", i);
		change(path, 'c', i + 1);
	}
	assert_int_equal(sb_roll_plan(files, nfiles, 0, NULL, NULL, &p, &r), SB_OK);
	assert_int_equal(p.ninputs, SB_CHAN_INPUT_FILES);
	assert_int_equal(r.rolled, SB_CHAN_INPUT_FILES);
	assert_int_equal(r.omitted, 100);
	assert_int_equal(r.nnamed, SB_ROLL_NAMED);
	plan_clear(&p);

	change("a", 'c', 1);
	change("b", 'c', 2);
	files[0].size = SB_CHAN_INPUTS_MAX - 3;
	assert_int_equal(sb_roll_plan(files, nfiles, 0, NULL, NULL, &p, &r), SB_OK);
	assert_int_equal(p.ninputs, 1);
	assert_int_equal(p.input_bytes, SB_CHAN_INPUTS_MAX - 3);
	assert_int_equal(r.omitted, 1);
	assert_string_equal(r.named[0], "/workspace/b");
	plan_clear(&p);
}

static void test_from_start(void **state)
{
	struct sb_plan p = {0};
	struct sb_roll r;
	const char *own[] = {"x", "d/y", "keep", "dd"};

	p.inputs = calloc(4, sizeof *p.inputs);
	for (size_t i = 0; i < 4; i++) {
		snprintf(p.inputs[i].path, sizeof p.inputs[i].path, "%s", own[i]);
		p.inputs[i].size = 100;
		p.inputs[i].mode = 0755;
	}
	p.ninputs = 4;
	change("x", 'c', 7);	/* changed: the record's */
	change("d", 'd', 8);	/* d/y went with d */
	change("dd/z", 'c', 9); /* dd is not above dd/z's sibling: "dd" stays */
	assert_int_equal(sb_roll_plan(files, nfiles, 1, NULL, NULL, &p, &r), SB_OK);
	assert_int_equal(p.ninputs, 4);
	assert_true(has_input(&p, "keep") && has_input(&p, "dd") && has_input(&p, "x") &&
		    has_input(&p, "dd/z"));
	assert_false(has_input(&p, "d/y"));
	assert_int_equal(r.rolled, 2);
	assert_int_equal(p.input_bytes, 100 + 100 + 5 + 5);
	for (size_t i = 0; i < p.ninputs; i++)
		if (!strcmp(p.inputs[i].path, "x"))
			assert_int_equal(p.inputs[i].mode, 0644);
	plan_clear(&p);

	/* without keep, the plan's own inputs are gone */
	p.inputs = calloc(1, sizeof *p.inputs);
	snprintf(p.inputs[0].path, sizeof p.inputs[0].path, "own");
	p.ninputs = 1;
	assert_int_equal(sb_roll_plan(files, 0, 0, NULL, NULL, &p, &r), SB_OK);
	assert_int_equal(p.ninputs, 0);
	assert_int_equal(r.rolled + r.omitted, 0);
	plan_clear(&p);
}

/* The snapshot's disk as a probe sees it: links at these prefixes. */
static const char *const *disk_links;
static int probes;

static int probe(void *ctx, const char *prefix)
{
	(void)ctx;
	probes++;
	for (size_t i = 0; disk_links[i]; i++)
		if (!strcmp(disk_links[i], prefix))
			return 0;
	return 1;
}

static void test_links_on_the_disk(void **state)
{
	static const char *const links[] = {"a", "b", "c/d", NULL};
	static const char *const ws[] = {"", NULL};
	struct sb_plan p = {0};
	struct sb_roll r;

	disk_links = links;
	change("a/x", 'c', 1);	 /* a: a link the record does not know of */
	change("a/old", 'd', 2); /* ... a deletion through it neither */
	change("b", 'd', 3);	 /* b: the record deleted the link */
	change("b/y", 'c', 4);	 /* ... so b/y is written in a new b */
	change("c/d/z", 'c', 5); /* c a directory, c/d a link */
	change("top", 'c', 6);	 /* nothing on its way but /workspace */
	assert_int_equal(sb_roll_plan(files, nfiles, 0, probe, NULL, &p, &r), SB_OK);
	assert_int_equal(p.ninputs, 2);
	assert_true(has_input(&p, "b/y") && has_input(&p, "top"));
	assert_int_equal(p.nremoves, 1);
	assert_true(has_remove(&p, "b"));
	assert_int_equal(r.omitted, 3);
	assert_true(has_named(&r, "/workspace/a/x") &&
		    has_named(&r, "/workspace/a/old") &&
		    has_named(&r, "/workspace/c/d/z"));
	plan_clear(&p);

	/* /workspace itself a link: nothing can be rolled */
	disk_links = ws;
	change("f", 'c', 1);
	change("g", 'd', 2);
	assert_int_equal(sb_roll_plan(files, nfiles, 0, probe, NULL, &p, &r), SB_OK);
	assert_int_equal(p.ninputs + p.nremoves, 0);
	assert_int_equal(r.omitted, 2);
	plan_clear(&p);

	/* a path the record drops (under a later change) is not probed */
	disk_links = links;
	probes = 0;
	change("gone/x", 'c', 1);
	change("gone", 'd', 2);
	assert_int_equal(sb_roll_plan(files, nfiles, 0, probe, NULL, &p, &r), SB_OK);
	assert_int_equal(p.nremoves, 1);
	assert_int_equal(r.omitted, 0);
	assert_int_equal(probes, 1); /* /workspace, for the removal of gone */
	plan_clear(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_links),
	    cmocka_unit_test(test_bad_paths),
	    cmocka_unit_test(test_limits),
	    cmocka_unit_test(test_from_start),
	    cmocka_unit_test(test_links_on_the_disk),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
