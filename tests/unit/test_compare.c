/* test_compare.c - a re-run's outcome against its original's, as
 * rerun.compared records it: the same record compares the same; a file
 * added, removed or with other content, a file made and deleted again,
 * a file one side left alone, exit statuses, tool calls that differ in
 * args or count, more differing paths than are named, and malformed
 * events that are ignored. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "engine/runs/compare.h"
#include "tests/unit/testutil.h"

/* Takes an event of type with the JSON payload js (single quotes for
 * double) into s. */
static void add(struct sb_compare_side *s, const char *type, const char *js)
{
	msgpack_sbuffer sb;
	struct sb_event ev;

	tu_json(&sb, js);
	assert_int_equal(sb_event_init(&ev, type, "0123456789ab", SB_SRC_GUEST, sb.data, sb.size),
			 0);
	assert_int_equal(sb_compare_side_add(s, &ev), SB_OK);
	msgpack_sbuffer_destroy(&sb);
}

static void file(struct sb_compare_side *s, const char *path, const char *kind, const char *h)
{
	char js[512];

	snprintf(js, sizeof js, "{'path': '%s', 'kind': '%s', 'size': 1, 'xxh3': '%s'}", path,
		 kind, h);
	add(s, "agent.file.changed", js);
}

static void tool(struct sb_compare_side *s, const char *args)
{
	char js[256];

	snprintf(js, sizeof js, "{'tool': 'shell', 'args': '%s', 'exit': 0, 'duration_ms': 3}",
		 args);
	add(s, "agent.tool.completed", js);
}

/* A run that writes a.txt twice, makes and deletes tmp, runs two tools
 * and exits with status. */
static void typical(struct sb_compare_side *s, int status)
{
	char js[64];

	file(s, "/workspace/a.txt", "created", "1111111111111111");
	tool(s, "ls");
	file(s, "/workspace/tmp", "created", "2222222222222222");
	file(s, "/workspace/a.txt", "modified", "3333333333333333");
	file(s, "/workspace/tmp", "deleted", "");
	tool(s, "make");
	snprintf(js, sizeof js, "{'status': %d}", status);
	add(s, "run.exited", js);
}

/* Compares a with b into *out (the payload as a map in zone), b a re-run
 * that never_ran (NULL: it ran). */
static int compare_why(struct sb_compare_side *a, struct sb_compare_side *b,
		       const char *never_ran, msgpack_sbuffer *sb, msgpack_zone *zone,
		       msgpack_object *out)
{
	msgpack_packer pk;
	int same;

	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	assert_int_equal(sb_compare_pack(a, b, "aaaaaaaaaaaa", never_ran, &pk, &same), SB_OK);
	assert_true(msgpack_zone_init(zone, 4096));
	assert_int_equal(sb_payload_parse(sb->data, sb->size, zone, out), SB_OK);
	assert_int_equal(sb_map_bool(out, "same", -1), same);
	assert_true(!never_ran == !sb_map_get(out, "reason"));
	return same;
}

static int compare(struct sb_compare_side *a, struct sb_compare_side *b, msgpack_sbuffer *sb,
		   msgpack_zone *zone, msgpack_object *out)
{
	return compare_why(a, b, NULL, sb, zone, out);
}

/* The i-th named file's field key, into buf. */
static const char *named(const msgpack_object *p, uint32_t i, const char *key, char *buf,
			 size_t cap)
{
	const msgpack_object *fs = sb_map_get(p, "files");

	assert_non_null(fs);
	assert_true(i < fs->via.array.size);
	assert_true(sb_map_str(&fs->via.array.ptr[i], key, buf, cap) >= 0);
	return buf;
}

static void test_same_record_is_same(void **st)
{
	struct sb_compare_side a = {0}, b = {0};
	msgpack_sbuffer sb;
	msgpack_zone zone;
	msgpack_object p;
	char buf[64];

	(void)st;
	typical(&a, 0);
	typical(&b, 0);
	assert_true(compare(&a, &b, &sb, &zone, &p));
	assert_int_equal(sb_map_u64(&p, "files_differ", 9), 0);
	assert_int_equal(sb_map_get(&p, "files")->via.array.size, 0);
	assert_int_equal(sb_map_u64(&p, "tools", 0), 2);
	assert_int_equal(sb_map_u64(&p, "original_tools", 0), 2);
	assert_int_equal(sb_map_u64(&p, "tools_differ_at", 9), 0);
	assert_int_equal(sb_map_i64(&p, "status", 9), 0);
	assert_string_equal((sb_map_str(&p, "original", buf, sizeof buf), buf), "aaaaaaaaaaaa");
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&sb);
	sb_compare_side_free(&a);
	sb_compare_side_free(&b);
}

static void test_files_added_removed_different(void **st)
{
	struct sb_compare_side a = {0}, b = {0};
	msgpack_sbuffer sb;
	msgpack_zone zone;
	msgpack_object p;
	char buf[64];

	(void)st;
	typical(&a, 0);
	typical(&b, 0);
	file(&b, "/workspace/new", "created", "4444444444444444");	/* added */
	file(&a, "/workspace/only", "created", "5555555555555555");	/* removed */
	file(&b, "/workspace/a.txt", "modified", "6666666666666666"); /* different */
	file(&b, "/workspace/kept", "deleted", "");		      /* was there: removed */
	file(&a, "/workspace/old", "modified", "7777777777777777");	/* b left it: different */
	file(&b, "/workspace/gone", "created", "8888888888888888");	/* made and deleted */
	file(&b, "/workspace/gone", "deleted", "");
	assert_false(compare(&a, &b, &sb, &zone, &p));
	assert_int_equal(sb_map_u64(&p, "files_differ", 0), 5);
	/* in path order */
	assert_string_equal(named(&p, 0, "path", buf, sizeof buf), "/workspace/a.txt");
	assert_string_equal(named(&p, 0, "change", buf, sizeof buf), "different");
	assert_string_equal(named(&p, 0, "xxh3", buf, sizeof buf), "6666666666666666");
	assert_string_equal(named(&p, 0, "original_xxh3", buf, sizeof buf), "3333333333333333");
	assert_string_equal(named(&p, 1, "path", buf, sizeof buf), "/workspace/kept");
	assert_string_equal(named(&p, 1, "change", buf, sizeof buf), "removed");
	assert_string_equal(named(&p, 2, "path", buf, sizeof buf), "/workspace/new");
	assert_string_equal(named(&p, 2, "change", buf, sizeof buf), "added");
	assert_string_equal(named(&p, 2, "original_xxh3", buf, sizeof buf), "");
	assert_string_equal(named(&p, 3, "path", buf, sizeof buf), "/workspace/old");
	assert_string_equal(named(&p, 3, "change", buf, sizeof buf), "different");
	assert_string_equal(named(&p, 3, "xxh3", buf, sizeof buf), "");
	assert_string_equal(named(&p, 4, "path", buf, sizeof buf), "/workspace/only");
	assert_string_equal(named(&p, 4, "change", buf, sizeof buf), "removed");
	assert_int_equal(sb_map_u64(&p, "tools_differ_at", 9), 0);
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&sb);
	sb_compare_side_free(&a);
	sb_compare_side_free(&b);
}

static void test_exit_and_tools(void **st)
{
	struct sb_compare_side a = {0}, b = {0}, c = {0};
	msgpack_sbuffer sb;
	msgpack_zone zone;
	msgpack_object p;

	(void)st;
	typical(&a, 0);
	typical(&b, 143);
	tool(&b, "one more");
	assert_false(compare(&a, &b, &sb, &zone, &p));
	assert_int_equal(sb_map_i64(&p, "status", 0), 143);
	assert_int_equal(sb_map_i64(&p, "original_status", 9), 0);
	assert_int_equal(sb_map_u64(&p, "tools", 0), 3);
	assert_int_equal(sb_map_u64(&p, "tools_differ_at", 0), 3); /* only b has a 3rd */
	assert_int_equal(sb_map_u64(&p, "files_differ", 9), 0);
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&sb);
	/* c never exited and its first call's args differ */
	tool(&c, "ls -l");
	tool(&c, "make");
	assert_false(compare(&a, &c, &sb, &zone, &p));
	assert_int_equal(sb_map_i64(&p, "status", 0), -1);
	assert_int_equal(sb_map_u64(&p, "tools_differ_at", 0), 1);
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&sb);
	sb_compare_side_free(&a);
	sb_compare_side_free(&b);
	sb_compare_side_free(&c);
}

static void test_bounded_and_malformed(void **st)
{
	struct sb_compare_side a = {0}, b = {0};
	msgpack_sbuffer sb;
	msgpack_zone zone;
	msgpack_object p;
	char path[64];

	(void)st;
	for (int i = 0; i < 100; i++) {
		snprintf(path, sizeof path, "/workspace/f%03d", i);
		file(&b, path, "created", "9999999999999999");
	}
	/* ignored: no path, no kind, a status that is no number, other types */
	add(&a, "agent.file.changed", "{'kind': 'created', 'size': 1, 'xxh3': ''}");
	add(&a, "agent.file.changed", "{'path': '/workspace/x', 'size': 1}");
	add(&a, "run.exited", "{'status': 'zero'}");
	add(&a, "agent.output", "{'stream': 'stdout', 'data': 'x'}");
	assert_false(compare(&a, &b, &sb, &zone, &p));
	assert_int_equal(sb_map_u64(&p, "files_differ", 0), 100);
	assert_int_equal(sb_map_get(&p, "files")->via.array.size, SB_COMPARE_FILES_MAX);
	assert_int_equal(sb_map_i64(&p, "original_status", 0), -1);
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&sb);
	sb_compare_side_free(&a);
	sb_compare_side_free(&b);
}

/* A re-run stopped while queued: it differs, even from an original
 * that did nothing, no exit status, with its reason; the original's side
 * as it was. */
static void test_never_ran(void **st)
{
	struct sb_compare_side a = {0}, b = {0}, none = {0};
	msgpack_sbuffer sb;
	msgpack_zone zone;
	msgpack_object p;
	char buf[64];

	(void)st;
	assert_false(compare_why(&none, &b, "it never ran", &sb, &zone, &p));
	assert_string_equal((sb_map_str(&p, "reason", buf, sizeof buf), buf), "it never ran");
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&sb);
	typical(&a, 3);
	assert_false(compare_why(&a, &b, "it never ran", &sb, &zone, &p));
	assert_int_equal(sb_map_i64(&p, "status", 9), -1);
	assert_int_equal(sb_map_i64(&p, "original_status", 9), 3);
	assert_int_equal(sb_map_u64(&p, "tools", 9), 0);
	assert_int_equal(sb_map_u64(&p, "original_tools", 0), 2);
	assert_int_equal(sb_map_u64(&p, "tools_differ_at", 0), 1);
	assert_int_equal(sb_map_u64(&p, "files_differ", 0), 1); /* a.txt: removed */
	assert_string_equal(named(&p, 0, "change", buf, sizeof buf), "removed");
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&sb);
	sb_compare_side_free(&a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_same_record_is_same),
	    cmocka_unit_test(test_files_added_removed_different),
	    cmocka_unit_test(test_exit_and_tools),
	    cmocka_unit_test(test_bounded_and_malformed),
	    cmocka_unit_test(test_never_ran),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
