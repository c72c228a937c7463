/* roll.h - the roll-forward of a fork or resume --at an offset past its
 * snapshot (see SPEC.md, "Snapshots"): from the last recorded change of
 * each path in (snapshot, offset], what the new machine's agent deletes
 * (the plan's removes), writes (its inputs) and what cannot be rolled
 * (omitted). Pure: reads and writes memory only.
 */
#ifndef SB_ROLL_H
#define SB_ROLL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/log/blob.h"
#include "engine/runs/plan.h"

#define SB_ROLL_NAMED 8 /* omitted paths named, at most */

/* A path's last recorded change (agent.file.changed) in the range. */
struct sb_roll_file {
	char path[256]; /* relative to /workspace: the first 255 bytes */
	int toolong;	/* the path is longer than that */
	int deleted;
	int link;    /* a symbolic link was made (blob: its target) */
	int content; /* blob holds its content */
	uint8_t blob[SB_HASH_LEN];
	uint64_t size;
	uint64_t offset; /* of this last change */
};

/* What a roll-forward did. */
struct sb_roll {
	size_t rolled;		       /* inputs written from the record */
	size_t omitted;		       /* changes not rolled forward */
	char named[SB_ROLL_NAMED][80]; /* the first of those, "/workspace/..." */
	size_t nnamed;
};

/* Says whether prefix (a path relative to /workspace, "" for /workspace
 * itself) is, on the snapshot's disk, a directory or nothing: 1, or 0
 * when it is a link or another non-directory (the agent would not go
 * through it). */
typedef int (*sb_roll_probe_fn)(void *ctx, const char *prefix);

/* Makes p's inputs and removes from files (n, distinct paths), by the
 * rules of SPEC.md: a path under a directory changed later is gone, one
 * under a link made is omitted, a deletion is a remove, a file with its
 * content an input (mode 0644, within the inputs' limits), a link with
 * its target an input of mode SB_PLAN_LINK | 0777, the rest omitted. With
 * keep, p's own inputs stay (a fork from its run's start) but those a
 * change in files replaces; else p's inputs are dropped. With probe
 * (NULL: none), a path one of whose directories the record leaves alone
 * and probe says is not one is omitted: the agent would skip it. out gets
 * what was done. Errors: SB_ERR_NOMEM (p's inputs then gone). */
int sb_roll_plan(const struct sb_roll_file *files, size_t n, int keep,
		 sb_roll_probe_fn probe, void *probe_ctx, struct sb_plan *p,
		 struct sb_roll *out);

#endif
