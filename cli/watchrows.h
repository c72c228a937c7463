/* watchrows.h - the row model of `sanbox watch`: one row per watched run,
 * holding its state as the runstate projection keeps it
 * (projections/views.h), kept up to date by folding the events that follow
 * that state (sb_runstate_fold), and what the state does not hold: the
 * run's tokens and the time of its newest snapshot. Beside the rows: their
 * totals, the name filter, and the pane of one run's latest events.
 *
 * Nothing here prints, connects or locks: the caller serialises access
 * (the terminal view folds on one thread and draws on another).
 */
#ifndef SB_CLI_WATCHROWS_H
#define SB_CLI_WATCHROWS_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/log/event.h"
#include "projections/views.h"

/* Which runs are watched. */
enum cli_wscope {
	CLI_WSCOPE_ALL,	  /* every run, and each run created later */
	CLI_WSCOPE_GROUP, /* the runs of one group, and each created in it later */
	CLI_WSCOPE_RUNS,  /* the runs added, no other */
};

struct cli_wrow {
	struct sb_runstate rs;		/* as runstate has it, events folded */
	uint64_t in_tokens, out_tokens; /* its gateway usage */
	uint64_t snap_ns;		/* its newest snapshot.saved's time (0: none known) */
	char shown[512];		/* free for the caller: what it last showed */
};

struct cli_wrows {
	enum cli_wscope scope;
	char group[64];	    /* the group's name, with CLI_WSCOPE_GROUP */
	uint64_t planned;   /* runs the group was made with (group.created), or 0 */
	struct cli_wrow *v; /* the rows in the order added; owned */
	size_t n, cap;
};

/* Sets w up, empty, for scope (group: the group's name with
 * CLI_WSCOPE_GROUP, else ignored). */
void cli_wrows_init(struct cli_wrows *w, enum cli_wscope scope, const char *group);

/* Frees what w holds (safe on an initialised or zeroed w). */
void cli_wrows_free(struct cli_wrows *w);

/* Adds a row for the run of state rs (copied), the events up to
 * rs->last_offset folded into it, and sets *out to it (may be NULL).
 * Rows stay where they are until w is freed, but a later add may move the
 * array: a pointer is valid until the next add. A run that has a row
 * already keeps it (*out is that row). Errors: SB_ERR_NOMEM. */
int cli_wrows_add(struct cli_wrows *w, const struct sb_runstate *rs, struct cli_wrow **out);

/* Returns the row of run, or NULL. */
struct cli_wrow *cli_wrows_find(struct cli_wrows *w, const char *run);

/* Folds event ev (payload its map, NULL: none) into the row of its run,
 * and sets *changed to that row, or to NULL when the event is not a
 * watched run's or is in its state already (its offset at or before the
 * row's last_offset). A run.created of a run without a row adds one when
 * the scope takes it (every run; or its group's, named in its payload),
 * its state made as the projection starts it. Errors: SB_ERR_NOMEM (the
 * event is not folded). */
int cli_wrows_apply(struct cli_wrows *w, const struct sb_event *ev, const msgpack_object *payload,
		    struct cli_wrow **changed);

/* The totals of the rows. Live runs are those created or running, queued
 * those waiting for capacity; done those whose harness exited 0, failed
 * every other end (as group.get counts them). */
struct cli_wtotals {
	size_t runs, live, queued, done, failed;
	uint64_t cost_nusd, budget_nusd; /* the sums of the rows' */
	uint64_t in_tokens, out_tokens;
};
void cli_wrows_totals(const struct cli_wrows *w, struct cli_wtotals *t);

/* Returns 1 when every watched run has ended: no row is live (created,
 * queued or running) and, for a group, it has as many rows as it was
 * made with. */
int cli_wrows_ended(const struct cli_wrows *w);

/* Returns 1 when row r passes filter: a part of its name (of its id when
 * it has none), letters of any case (ASCII); an empty filter passes every
 * row. */
int cli_wrow_match(const struct cli_wrow *r, const char *filter);

/* ---- the pane: the latest events of one run, as text lines ---- */

#define CLI_WPANE_LINES 64   /* lines kept */
#define CLI_WPANE_LINE	1536 /* bytes kept of a line (cut at a character) */

struct cli_wpane {
	char run[SB_RUN_MAX]; /* whose events ("": none) */
	size_t n;	      /* lines held */
	uint64_t offset[CLI_WPANE_LINES];     /* each line's, oldest first */
	unsigned char slot[CLI_WPANE_LINES];  /* ... and where its text is */
	char text[CLI_WPANE_LINES][CLI_WPANE_LINE];
};

/* Makes the pane run's (empty), unless it is run's already. */
void cli_wpane_select(struct cli_wpane *p, const char *run);

/* Keeps line, the text of run's event at offset, in offset order: ignored
 * when the pane is another run's or holds that offset; when it is full the
 * oldest line goes (a line older than all it holds is not kept). */
void cli_wpane_put(struct cli_wpane *p, const char *run, uint64_t offset, const char *line);

/* The text of line i (0: the oldest held) of p, valid until p changes. */
const char *cli_wpane_line(const struct cli_wpane *p, size_t i);

#endif
