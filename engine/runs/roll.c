/* roll.c - what a roll-forward writes, deletes and omits. */
#include "engine/runs/roll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "vmm/chan.h"

/* Whether path a is a directory on path b ("d" of "d/x"). */
static int path_above(const char *a, const char *b)
{
	size_t n = strlen(a);

	return n && !strncmp(a, b, n) && b[n] == '/';
}

/* What became of f by the end of the range: 0 it is as recorded, 1 a
 * later change of a directory above it replaced it (it is gone: nothing
 * to roll), 2 a link was made above it first (the guest wrote through the
 * link: the record cannot say where). */
static int file_fate(const struct sb_roll_file *files, size_t n,
		     const struct sb_roll_file *f)
{
	int fate = 0;

	for (size_t i = 0; i < n; i++) {
		if (!path_above(files[i].path, f->path))
			continue;
		if (files[i].offset > f->offset)
			return 1;
		if (files[i].link)
			fate = 2;
	}
	return fate;
}

/* Whether files change path or a directory above it. */
static int file_changed(const struct sb_roll_file *files, size_t n, const char *path)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(files[i].path, path) || path_above(files[i].path, path))
			return 1;
	return 0;
}

/* Whether every directory on f's way that the record leaves as it was is
 * one on the snapshot's disk (/workspace included), as probe says. */
static int way_clear(const struct sb_roll_file *files, size_t n,
		     const struct sb_roll_file *f, sb_roll_probe_fn probe, void *ctx)
{
	char prefix[sizeof f->path];
	const char *slash;

	if (!probe(ctx, ""))
		return 0;
	for (slash = strchr(f->path, '/'); slash; slash = strchr(slash + 1, '/')) {
		size_t len = (size_t)(slash - f->path);
		memcpy(prefix, f->path, len);
		prefix[len] = 0;
		if (file_changed(files, n, prefix))
			return 1; /* the record says what it became; below it, its own */
		if (!probe(ctx, prefix))
			return 0;
	}
	return 1;
}

static void omit(struct sb_roll *out, const struct sb_roll_file *f)
{
	if (out->nnamed < SB_ROLL_NAMED)
		snprintf(out->named[out->nnamed++], sizeof out->named[0],
			 "/workspace/%.*s%s", (int)sizeof out->named[0] - 15, f->path,
			 f->toolong || strlen(f->path) > sizeof out->named[0] - 15 ? "…"
										   : "");
	out->omitted++;
}

int sb_roll_plan(const struct sb_roll_file *files, size_t n, int keep,
		 sb_roll_probe_fn probe, void *probe_ctx, struct sb_plan *p,
		 struct sb_roll *out)
{
	struct sb_plan_input *kept = p->inputs;
	size_t nkept = keep ? p->ninputs : 0, first;
	uint64_t bytes = 0;

	memset(out, 0, sizeof *out);
	p->ninputs = p->nremoves = 0;
	free(p->removes);
	p->removes = NULL;
	if (!(p->inputs = calloc(n + nkept + 1, sizeof *p->inputs)) ||
	    !(p->removes = calloc(n + 1, sizeof *p->removes))) {
		free(kept);
		return SB_ERR_NOMEM;
	}
	for (size_t i = 0; i < nkept; i++)
		if (!file_changed(files, n, kept[i].path)) {
			p->inputs[p->ninputs++] = kept[i];
			bytes += kept[i].size;
		}
	first = p->ninputs;
	for (size_t i = 0; i < n; i++) {
		const struct sb_roll_file *f = &files[i];
		int ok = !f->toolong && /* the guest's word */
			 sb_plan_path_ok(f->path, strlen(f->path));
		int fate = file_fate(files, n, f);

		if (fate == 1)
			continue;
		if (ok && fate == 0 && probe && !way_clear(files, n, f, probe, probe_ctx))
			fate = 2; /* the agent would meet a link on its way */
		if (ok && fate == 0 && f->deleted) {
			snprintf(p->removes[p->nremoves++], sizeof *p->removes, "%s",
				 f->path);
		} else if (ok && fate == 0 && f->content &&
			   (!f->link || f->size <= SB_PLAN_LINK_MAX) &&
			   bytes + f->size <= SB_CHAN_INPUTS_MAX &&
			   p->ninputs < SB_CHAN_INPUT_FILES) {
			struct sb_plan_input *x = &p->inputs[p->ninputs++];
			snprintf(x->path, sizeof x->path, "%s", f->path);
			x->mode = f->link ? SB_PLAN_LINK | 0777 : 0644;
			x->size = f->size;
			memcpy(x->blob, f->blob, sizeof x->blob);
			bytes += f->size;
		} else {
			omit(out, f);
		}
	}
	p->input_bytes = bytes;
	out->rolled = p->ninputs - first;
	free(kept);
	return SB_OK;
}
