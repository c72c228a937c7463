/* tools_wait.c - the MCP tools that follow runs: events_read (a page of a
 * run's record) and wait (until runs end, bounded by the caller, with
 * progress notifications). wait reads as `sanbox wait` does: the log's
 * last offset L first, the runs' states second, then the whole log's ends
 * of runs from L + 1 folded into them (sb_runstate_fold), so an end is
 * seen once and none is missed. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/error.h"
#include "engine/payload.h"
#include "mcp/toolkit.h"
#include "mcp/tools.h"

#define EVENTS_TEXT_MAX (256u << 10) /* bytes of events one events_read returns */
#define WAIT_DEFAULT_S	30

int mcp_tool_events_read(struct sb_mcp_call *call, const json_t *args, json_t **out)
{
	const json_t *types = json_object_get(args, "types"), *t;
	const msgpack_object *evs;
	struct sb_reply rep = {0};
	char run[SB_RUN_MAX];
	struct cli_req r;
	sb_client *c = NULL;
	json_t *list;
	uint64_t next;
	size_t bytes = 0, i;
	int rc, cut = 0;

	if ((rc = mcp_connect(&c)) ||
	    (rc = mcp_resolve(c, "run", mcp_arg_str(args, "run"), run)))
		goto done;
	cli_req_begin(&r, "events.read");
	sb_mapw_str(&r.m, "run", run);
	sb_mapw_u64(&r.m, "from", mcp_arg_u64(args, "from", 1));
	sb_mapw_u64(&r.m, "limit", mcp_arg_u64(args, "limit", 100));
	if (types) {
		msgpack_packer *pk = sb_mapw_key(&r.m, "types");
		msgpack_pack_array(pk, json_array_size(types));
		json_array_foreach(types, i, t)
			sb_pack_str(pk, json_string_value(t));
	}
	if ((rc = mcp_call(c, &r, &rep)))
		goto done;
	evs = sb_map_get(&rep.map, "events");
	next = sb_map_u64(&rep.map, "next", 0);
	list = json_array();
	for (uint32_t k = 0; evs && evs->type == MSGPACK_OBJECT_ARRAY && k < evs->via.array.size; k++) {
		json_t *e = sb_msgpack_to_json(&evs->via.array.ptr[k]);
		char *s = e ? json_dumps(e, JSON_COMPACT) : NULL;
		bytes += s ? strlen(s) : 0;
		free(s);
		if (k && bytes > EVENTS_TEXT_MAX) { /* the rest on the next read */
			next = sb_map_u64(&evs->via.array.ptr[k], "offset", next);
			json_decref(e);
			cut = 1;
			break;
		}
		json_array_append_new(list, e);
	}
	*out = json_pack("{s:s, s:o, s:I, s:b, s:I}", "run", run, "events", list, "next",
			 (json_int_t)next, "end", !cut && sb_map_bool(&rep.map, "end", 0),
			 "last_offset", (json_int_t)sb_map_u64(&rep.map, "last_offset", 0));
done:
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}

/* ---- wait ---- */

struct waiter {
	struct sb_mcp_call *call;
	struct sb_runstate *runs;
	size_t n, live, ended_max;
	volatile sig_atomic_t stop; /* the deadline passed or the call was cancelled */
	int done;		    /* the follow is over: the timer goes */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	time_t deadline;
};

/* Adds the run state map (once). Errors: SB_ERR_PROTO, SB_ERR_NOMEM. */
static int wait_add(struct waiter *w, const msgpack_object *map)
{
	struct sb_runstate rs;
	void *p;

	if (!map || sb_runstate_unpack(map, &rs) || !rs.run[0])
		return sb_seterr(SB_ERR_PROTO, "sanboxd: malformed reply");
	for (size_t i = 0; i < w->n; i++)
		if (!strcmp(w->runs[i].run, rs.run))
			return SB_OK;
	if (!(p = realloc(w->runs, (w->n + 1) * sizeof *w->runs)))
		return SB_ERR_NOMEM;
	w->runs = p;
	w->runs[w->n++] = rs;
	w->live += sb_runstate_is_live(&rs);
	return SB_OK;
}

/* Reads the states of the runs (or the group's) args names, and the log's
 * last offset before them into *last. */
static int wait_states(sb_client *c, struct waiter *w, const json_t *args, uint64_t *last)
{
	const char *group = mcp_arg_str(args, "group");
	const json_t *runs = json_object_get(args, "runs"), *e;
	struct sb_reply rep = {0};
	struct cli_req r;
	char run[SB_RUN_MAX], field[32];
	size_t i;
	int rc, live;

	cli_req_begin(&r, "health");
	if ((rc = mcp_call(c, &r, &rep)))
		return rc;
	*last = sb_map_u64(&rep.map, "last_offset", 0);
	sb_reply_free(&rep);
	if (group) {
		cli_req_begin(&r, "group.get");
		sb_mapw_str(&r.m, "group", group);
		if ((rc = mcp_call(c, &r, &rep)))
			rc = mcp_field_err(rc, "group");
		const msgpack_object *l = sb_map_get(&rep.map, "runs");
		for (uint32_t k = 0; rc == SB_OK && l && l->type == MSGPACK_OBJECT_ARRAY &&
				     k < l->via.array.size;
		     k++)
			rc = wait_add(w, &l->via.array.ptr[k]);
		sb_reply_free(&rep);
	}
	if (rc)
		return rc;
	json_array_foreach(runs, i, e) {
		snprintf(field, sizeof field, "runs[%zu]", i);
		if ((rc = mcp_resolve(c, field, json_string_value(e), run)) == SB_OK &&
		    (rc = cli_run_get(c, run, &rep, &live)) == SB_OK)
			rc = wait_add(w, sb_map_get(&rep.map, "run"));
		sb_reply_free(&rep);
		if (rc)
			return rc;
	}
	return SB_OK;
}

/* Tells the client how many runs have ended (progress: that count). */
static void wait_progress(struct waiter *w, const struct sb_runstate *rs)
{
	char msg[256], st[32];
	size_t ended = w->n - w->live;

	if (ended < w->ended_max || (rs && ended == w->ended_max))
		return;
	w->ended_max = ended;
	if (rs) {
		cli_status(rs, st, sizeof st);
		snprintf(msg, sizeof msg, "%zu of %zu runs ended (%s%s%s%s: %s)", ended, w->n, rs->run,
			 rs->name[0] ? " " : "", rs->name, "", st);
	} else {
		snprintf(msg, sizeof msg, "%zu of %zu runs ended", ended, w->n);
	}
	sb_mcp_progress(w->call, (double)ended, (double)w->n, msg);
}

static int on_event(void *ctx, const struct sb_event *ev, const msgpack_object *p)
{
	struct waiter *w = ctx;
	struct sb_runstate *rs = cli_wait_fold(w->runs, w->n, &w->live, ev, p);

	if (rs)
		wait_progress(w, rs);
	return w->live == 0;
}

/* Sets w->stop at the deadline or when the call is cancelled. */
static void *wait_timer(void *arg)
{
	struct waiter *w = arg;
	struct timespec t;

	pthread_mutex_lock(&w->mu);
	while (!w->done) {
		if (w->call->stop || time(NULL) >= w->deadline)
			w->stop = 1;
		clock_gettime(CLOCK_REALTIME, &t);
		t.tv_nsec += 100000000;
		if (t.tv_nsec >= 1000000000) {
			t.tv_sec++;
			t.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&w->cv, &w->mu, &t);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

static int wait_follow(sb_client *c, struct waiter *w, uint64_t from)
{
	static const char *const types[] = {"run.stopped", "run.exited", "run.failed",
					    "run.resumed", NULL};
	struct sb_follow_opts fo = {0};
	pthread_t th;
	int rc;

	if (!w->live)
		return SB_OK;
	if (pthread_create(&th, NULL, wait_timer, w))
		return sb_seterr(SB_ERR_NOMEM, "cannot start a thread");
	cli_follow_init(&fo);
	fo.run = "";
	fo.from = from;
	fo.follow = 1;
	fo.types = types;
	fo.stop = &w->stop;
	rc = sb_follow(c, &fo, on_event, w);
	pthread_mutex_lock(&w->mu);
	w->done = 1;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(th, NULL);
	return rc < 0 ? rc : SB_OK;
}

static json_t *wait_result(const struct waiter *w, uint64_t timeout)
{
	json_t *runs = json_array(), *live = json_array();
	char hint[160];

	for (size_t i = 0; i < w->n; i++) {
		json_array_append_new(runs, mcp_run_json(&w->runs[i]));
		if (sb_runstate_is_live(&w->runs[i]))
			json_array_append_new(live, json_string(w->runs[i].run));
	}
	snprintf(hint, sizeof hint,
		 "%zu run%s still live after %llu s: call wait again with the same arguments "
		 "to keep waiting",
		 w->live, w->live == 1 ? "" : "s", (unsigned long long)timeout);
	return json_pack("{s:b, s:o, s:o, s:s}", "done", w->live == 0, "runs", runs, "still_live",
			 live, "next", w->live ? hint : "every run has ended");
}

int mcp_tool_wait(struct sb_mcp_call *call, const json_t *args, json_t **out)
{
	struct waiter w = {.call = call};
	uint64_t timeout = mcp_arg_u64(args, "timeout_s", WAIT_DEFAULT_S), last = 0;
	sb_client *c = NULL;
	int rc;

	if (!json_object_get(args, "group") == !json_object_get(args, "runs"))
		return sb_seterr(SB_ERR_INVAL, "runs: give runs or a group, one of them");
	pthread_mutex_init(&w.mu, NULL);
	pthread_cond_init(&w.cv, NULL);
	w.deadline = time(NULL) + (time_t)timeout;
	if ((rc = mcp_connect(&c)) == SB_OK && (rc = wait_states(c, &w, args, &last)) == SB_OK) {
		wait_progress(&w, NULL);
		rc = wait_follow(c, &w, last + 1);
		wait_progress(&w, NULL); /* the last count, as the result gives it */
		if (rc == SB_OK && !(*out = wait_result(&w, timeout)))
			rc = SB_ERR_NOMEM;
	}
	sb_client_close(c);
	free(w.runs);
	pthread_cond_destroy(&w.cv);
	pthread_mutex_destroy(&w.mu);
	return rc;
}
