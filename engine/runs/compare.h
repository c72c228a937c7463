/* compare.h - a re-run's outcome against its original's, from the two
 * records (SPEC.md, "Re-runs"): the exit statuses, the files each changed
 * as their agent.file.changed events say, and the tool calls. What
 * rerun.compared records.
 *
 * A side is built from one run's events (sb_compare_side_add, pure, or
 * sb_compare_side_read from the log); sb_compare_pack compares two.
 */
#ifndef SB_COMPARE_H
#define SB_COMPARE_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/log/event.h"
#include "engine/log/log.h"

#define SB_COMPARE_FILES_MAX 16 /* differing paths rerun.compared names */

/* What one run did, as its comparison reads it. Zeroed to begin; its
 * memory is freed by sb_compare_side_free. */
struct sb_compare_side {
	struct sb_compare_change *changes; /* every agent.file.changed, in order */
	size_t n, cap;
	uint64_t *tools; /* XXH3-64 of each agent.tool.completed's tool and args */
	size_t ntools, tools_cap;
	int exited;	/* a run.exited was recorded */
	int64_t status; /* the last one's status */
};

/* Takes one event of a run into s (the ones that matter; any other is
 * ignored, as is a malformed one). Errors: SB_ERR_NOMEM. */
int sb_compare_side_add(struct sb_compare_side *s, const struct sb_event *ev);

/* Reads run's record after offset after (0: all of it) from the log into
 * s. Errors: the log's, SB_ERR_NOMEM. */
int sb_compare_side_read(sb_log *log, const char *run, uint64_t after,
			 struct sb_compare_side *s);

/* Frees what s holds and zeroes it. */
void sb_compare_side_free(struct sb_compare_side *s);

/* Packs rerun.compared's payload into pk: the re-run re against its
 * original orig, whose run id is orig_run; *same is set to 1 when they
 * do not differ. never_ran: NULL, or why the re-run never ran (re is then
 * empty, it differs, and the payload's reason says so). Sorts the sides'
 * changes. Errors: SB_ERR_NOMEM. */
int sb_compare_pack(struct sb_compare_side *orig, struct sb_compare_side *re,
		    const char *orig_run, const char *never_ran, msgpack_packer *pk,
		    int *same);

#endif
