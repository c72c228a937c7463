/* history.h - what a run's record says, read in one pass over its events:
 * what a daemon taking up a live run, a fork and a resume need of it.
 *
 * The run's events are folded in order by type (history.c holds one fold
 * per type), as the projections fold theirs; unlike them it reads one run
 * and keeps what only the run manager needs (its plan's payloads, the
 * files a roll-forward follows, the live changes of its grants).
 */
#ifndef SB_HISTORY_H
#define SB_HISTORY_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/log/event.h"
#include "engine/log/log.h"
#include "engine/runs/roll.h"
#include "netpolicy/netpolicy.h"
#include "vmm/chan.h"

#define SB_HISTORY_FILES_MAX SB_CHAN_INPUT_FILES /* paths a roll-forward follows */

/* A change of a run's grants (net.grant.added or .removed). */
struct sb_grant_change {
	struct sb_net_grant g;
	int allow; /* 1: added */
	uint64_t offset;
};

struct sb_history {
	msgpack_sbuffer created, policy; /* run.created's and run.policy.resolved's
					  * payloads (size 0: none) */
	uint64_t started_ns; /* the current start's run.started, or 0 */
	msgpack_sbuffer queued; /* the current start's run.queued payload, while
				 * no run.started follows it (size 0: none) */
	uint64_t queued_offset;
	int exited, ready;   /* the current start's run.exited, harness.input.ready */
	char forked_from[SB_RUN_MAX]; /* run.forked of a memory snapshot: its parent */
	int resumed;		      /* a run.resumed is in it */
	uint64_t budget_nusd;	      /* the budget the last run.resumed that set
				       * one gave it, or 0: run.policy.resolved's */
	/* the offset of the first event that shows its harness had begun a
	 * session of its own on the disk (agent.turn.started,
	 * agent.usage.updated, or a run.forked or run.resumed with session
	 * true), or 0: none */
	uint64_t session_at;
	uint64_t guest_seq;	      /* the largest guest_seq of its current start */
	long saved; /* the newest layer a snapshot.saved names, or -1 */
	/* asked for (set before sb_history_read): the files changed in
	 * (from_offset, offset_at] (offset_at 0: not asked) */
	uint64_t from_offset, offset_at;
	/* found: how many changes there, and each file's last state */
	uint64_t changed_after;
	struct sb_roll_file *files;
	size_t nfiles;
	int files_over; /* more paths than SB_HISTORY_FILES_MAX, or one unreadable */
	/* a re-run (its run.forked with rerun true): the run it re-runs, the
	 * offset it started from, 1 or 2 as sb_runs_from.rerun (0: not a
	 * re-run); the model calls its gateway recorded, and whether it
	 * departed from its record (a rerun.diverged) */
	struct {
		char of[SB_RUN_MAX];
		uint64_t at, calls;
		int mode, diverged;
	} rerun;
	struct sb_grant_change *grants; /* in the record's order */
	size_t ngrants;
};

/* Reads run's events from log into *h, whose from_offset and offset_at
 * say which files to follow (both 0: none); everything else of *h is
 * overwritten. An event that cannot be read back (SB_ERR_CORRUPT) is
 * skipped. *h is the caller's to free with sb_history_free, on error too.
 * Errors: the log's (SB_ERR_NOTFOUND: no such run). */
int sb_history_read(sb_log *log, const char *run, struct sb_history *h);

/* Frees what *h holds (not h). */
void sb_history_free(struct sb_history *h);

/* Applies to p h's changes of grants at offsets up to upto (0: all): the
 * grants the run had then. */
void sb_history_grants_apply(const struct sb_history *h, uint64_t upto,
			     struct sb_netpolicy *p);

#endif
