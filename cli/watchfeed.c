/* watchfeed.c - what keeps sanbox watch's rows up to date, for its plain
 * lines (cli/cmd_watch.c) and its terminal view (cli/watchview.c) alike: a
 * run's row added from its state, and the follow of the whole log that
 * folds every event into the rows, connecting again when the daemon is
 * lost. */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "cli/watch.h"
#include "engine/error.h"

int cli_watch_add_run(sb_client *c, struct cli_watch *w, const char *run)
{
	const msgpack_object *cost;
	struct sb_runstate rs;
	struct cli_wrow *row;
	struct sb_reply rep;
	int live, rc;

	memset(&rs, 0, sizeof rs);
	if ((rc = cli_run_get(c, run, &rep, &live)) == SB_OK &&
	    (rc = sb_runstate_unpack(sb_map_get(&rep.map, "run"), &rs)) == SB_OK) {
		pthread_mutex_lock(&w->mu);
		if ((rc = cli_wrows_add(&w->rows, &rs, &row)) == SB_OK) {
			cost = sb_map_get(&rep.map, "cost");
			row->in_tokens = sb_map_u64(cost, "input_tokens", 0);
			row->out_tokens = sb_map_u64(cost, "output_tokens", 0);
		}
		pthread_mutex_unlock(&w->mu);
	}
	sb_reply_free(&rep);
	return rc;
}

static int follow_cb(void *ctx, const struct sb_event *ev, const msgpack_object *payload)
{
	struct cli_watch *w = ctx;
	struct cli_wrow *r;
	int rc;

	pthread_mutex_lock(&w->mu);
	w->from = ev->offset + 1;
	if ((rc = cli_wrows_apply(&w->rows, ev, payload, &r)) == SB_OK)
		rc = w->on_event(w, ev, payload, r);
	pthread_mutex_unlock(&w->mu);
	return rc;
}

/* 1 when err says the daemon went away: worth connecting again. */
static int is_lost(int err)
{
	return err == SB_ERR_UNAVAIL || err == SB_ERR_TIMEOUT || err == SB_ERR_IO ||
	       err == SB_ERR_RESET;
}

/* Records why the follow is reconnecting (NULL: it is connected again)
 * and tells on_event. */
static void set_lost(struct cli_watch *w, const char *why)
{
	pthread_mutex_lock(&w->mu);
	if (strcmp(w->lost, why ? why : "")) {
		snprintf(w->lost, sizeof w->lost, "%s", why ? why : "");
		w->on_event(w, NULL, NULL, NULL);
	}
	pthread_mutex_unlock(&w->mu);
}

int cli_watch_follow(struct cli_watch *w)
{
	const struct timespec tick = {0, 100000000};
	struct sb_follow_opts fo;
	sb_client *c = NULL;
	int rc = SB_OK;

	while (!w->stop) {
		if ((rc = cli_connect(0, &c)) == SB_OK) {
			set_lost(w, NULL);
			memset(&fo, 0, sizeof fo);
			cli_follow_init(&fo);
			fo.run = "";
			pthread_mutex_lock(&w->mu);
			fo.from = w->from;
			pthread_mutex_unlock(&w->mu);
			fo.follow = 1;
			fo.stop = &w->stop;
			rc = sb_follow(c, &fo, follow_cb, w);
			sb_client_close(c);
			c = NULL;
		}
		if (rc >= 0 || !is_lost(rc))
			break;
		set_lost(w, sb_errmsg(rc));
		for (int i = 0; i < 10 && !w->stop; i++)
			nanosleep(&tick, NULL);
	}
	return w->stop && rc < 0 ? SB_OK : rc;
}
