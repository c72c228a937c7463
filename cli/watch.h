/* watch.h - what sanbox watch's command (cli/cmd_watch.c: loading the rows,
 * plain lines), its feed (cli/watchfeed.c: adding a run's row, following
 * the log) and its terminal view (cli/watchview.c) share. The rows are
 * cli/watchrows.h's.
 */
#ifndef SB_CLI_WATCH_H
#define SB_CLI_WATCH_H

#include <pthread.h>
#include <signal.h>

#include "cli/cli.h"
#include "cli/watchrows.h"

struct cli_watch;

/* Called by the follow for each event, after it is folded into the rows
 * (changed: the row it changed, or NULL), with w->mu held; and with ev
 * NULL when w->lost changed. Returns non-zero to end the follow. */
typedef int (*cli_watch_fn)(struct cli_watch *w, const struct sb_event *ev,
			    const msgpack_object *payload, struct cli_wrow *changed);

struct cli_watch {
	pthread_mutex_t mu;    /* guards what follows while a follow runs */
	struct cli_wrows rows;
	struct cli_wpane pane; /* the latest events of the selected run */
	char goal[4096];       /* the group's goal ("": none) */
	uint64_t group_budget; /* the group's shared budget (0: none) */
	uint64_t from;	       /* the next offset to follow from */
	char lost[256];	       /* why the follow is reconnecting ("": it is not) */
	cli_watch_fn on_event;
	void *ctx; /* on_event's */
	volatile sig_atomic_t stop; /* set to end the follow */
	int follow_left; /* 1: the view's follow did not end in time: what it
			  * reads stays allocated until the process ends */
};

/* Follows the whole log from w->from, folding each event into w->rows and
 * calling w->on_event, until that returns non-zero (returned) or w->stop
 * is set (0). A lost daemon is connected to again, every second, and the
 * follow goes on from the offset after the last event seen, with w->lost
 * saying why meanwhile. Errors: SB_ERR_NOMEM, SB_ERR_PROTO and the other
 * errors a reconnection does not mend. */
int cli_watch_follow(struct cli_watch *w);

/* Adds the row of run (its id) to w from its state (run.get), with its
 * tokens, taking w->mu. Errors: those of the call, SB_ERR_NOMEM. */
int cli_watch_add_run(sb_client *c, struct cli_watch *w, const char *run);

/* Writes the text of row r for plain output into buf: "NAME STATUS
 * PROGRESS COST/BUDGET", the name escaped. */
void cli_watch_plain_text(const struct cli_wrow *r, char *buf, size_t cap);

/* Runs the terminal view over w until q (exit 0), Ctrl-C or SIGTERM
 * (CLI_EXIT_DETACHED), the terminal restored every way; the follow runs on
 * a thread of its own meanwhile. c is the connection for the view's
 * requests. Returns the exit code, or CLI_GO_ON when the terminal cannot
 * be driven (then nothing was drawn: the caller prints plain lines). */
int cli_watch_view(struct cli_watch *w, sb_client *c);

#endif
