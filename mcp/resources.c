/* resources.c - the MCP resources: sanbox://run/ID (the run's state, as
 * run.get answers) and sanbox://run/ID/events (its first events), and
 * their subscriptions: one thread follows the whole log's run.* events
 * (sb_follow) and tells the client notifications/resources/updated for
 * each subscribed uri whose run changed status. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/error.h"
#include "mcp/jsonrpc.h"
#include "mcp/toolkit.h"
#include "mcp/tools.h"

#define URI_PREFIX    "sanbox://run/"
#define SUBS_MAX      1024 /* subscriptions of one client */
#define LIST_MAX      100  /* runs resources/list names */
#define EVENTS_MAX    200  /* events a read of the events resource holds */

struct sb_mcp_subs {
	struct sb_mcp_notify *notify; /* the server's */
	pthread_mutex_t mu;
	char *uri[SUBS_MAX];
	size_t n;
	pthread_t th;
	int started;
	volatile sig_atomic_t stop;
};

json_t *sb_mcp_resource_templates(void)
{
	return json_pack("{s:[{s:s, s:s, s:s, s:s}, {s:s, s:s, s:s, s:s}]}", "resourceTemplates",
			 "uriTemplate", URI_PREFIX "{run}", "name", "run", "description",
			 "a run's state: status, cost, plan (run.get)", "mimeType",
			 "application/json", "uriTemplate", URI_PREFIX "{run}/events", "name",
			 "run-events", "description", "a run's first events (events_read pages on)",
			 "mimeType", "application/json");
}

int sb_mcp_resource_run(const char *uri, char *run, size_t cap)
{
	size_t n = strlen(URI_PREFIX), k;

	if (strncmp(uri, URI_PREFIX, n))
		return sb_seterr(SB_ERR_INVAL, "not a sanbox run resource: %.100s", uri);
	k = strcspn(uri + n, "/");
	if (!k || k >= cap || (uri[n + k] && strcmp(uri + n + k, "/events")))
		return sb_seterr(SB_ERR_INVAL, "not a sanbox run resource: %.100s", uri);
	memcpy(run, uri + n, k);
	run[k] = 0;
	return SB_OK;
}

json_t *sb_mcp_resources_list(int *code, char *err, size_t cap)
{
	json_t *args = json_pack("{s:i}", "limit", LIST_MAX), *out = NULL, *list, *r;
	size_t i;
	int rc;

	rc = mcp_tool_runs_list(NULL, args, &out);
	json_decref(args);
	if (rc) {
		*code = SB_RPC_INTERNAL;
		snprintf(err, cap, "%s", sb_errmsg(rc));
		return NULL;
	}
	list = json_array();
	json_array_foreach(json_object_get(out, "runs"), i, r) {
		const char *id = json_string_value(json_object_get(r, "run"));
		const char *name = json_string_value(json_object_get(r, "name"));
		char uri[64], title[160];
		snprintf(uri, sizeof uri, URI_PREFIX "%s", id);
		snprintf(title, sizeof title, "run %s%s%s (%s)", id, name && *name ? " " : "",
			 name ? name : "", json_string_value(json_object_get(r, "shown")));
		json_array_append_new(list, json_pack("{s:s, s:s, s:s, s:s}", "uri", uri, "name", id,
						      "title", title, "mimeType", "application/json"));
	}
	json_decref(out);
	return json_pack("{s:o}", "resources", list);
}

json_t *sb_mcp_resource_read(const char *uri, int *code, char *err, size_t cap)
{
	const char *tail = strstr(uri, "/events");
	char want[SB_RUN_MAX + 8], run[SB_RUN_MAX];
	json_t *args, *out = NULL;
	sb_client *c = NULL;
	char *text;
	int rc;

	*code = SB_RPC_NO_RESOURCE;
	if ((rc = sb_mcp_resource_run(uri, want, sizeof want)) == SB_OK &&
	    (rc = mcp_connect(&c)) == SB_OK && (rc = mcp_resolve(c, "uri", want, run)) == SB_OK) {
		if (tail) {
			args = json_pack("{s:s, s:i}", "run", run, "limit", EVENTS_MAX);
			rc = mcp_tool_events_read(NULL, args, &out);
			json_decref(args);
		} else {
			struct sb_reply rep = {0};
			int live;
			if ((rc = cli_run_get(c, run, &rep, &live)) == SB_OK && !(out = mcp_reply_json(&rep)))
				rc = SB_ERR_NOMEM;
			sb_reply_free(&rep);
		}
	}
	sb_client_close(c);
	if (rc) {
		if (rc != SB_ERR_NOTFOUND && rc != SB_ERR_INVAL)
			*code = SB_RPC_INTERNAL;
		snprintf(err, cap, "%s", sb_errmsg(rc));
		return NULL;
	}
	text = json_dumps(out, JSON_COMPACT);
	json_decref(out);
	out = json_pack("{s:[{s:s, s:s, s:s}]}", "contents", "uri", uri, "mimeType",
			"application/json", "text", text ? text : "null");
	free(text);
	return out;
}

/* ---- subscriptions ---- */

/* A run.* event: tells every uri of its run that it changed. */
static int subs_event(void *ctx, const struct sb_event *ev, const msgpack_object *p)
{
	struct sb_mcp_subs *s = ctx;
	char run[SB_RUN_MAX];

	pthread_mutex_lock(&s->mu);
	for (size_t i = 0; i < s->n; i++)
		if (sb_mcp_resource_run(s->uri[i], run, sizeof run) == SB_OK &&
		    !strcmp(ev->run, run))
			sb_mcp_notify_send(s->notify, sb_mcp_notification_new(
							      "notifications/resources/updated",
							      json_pack("{s:s}", "uri", s->uri[i])));
	pthread_mutex_unlock(&s->mu);
	return 0;
}

/* Follows the log's run status events from its end, connecting again
 * after a lost daemon, until stopped. */
static void *subs_main(void *arg)
{
	static const char *const types[] = {"run.created", "run.queued", "run.started",
					    "run.exited",  "run.failed", "run.stopped",
					    "run.resumed", NULL};
	struct sb_mcp_subs *s = arg;
	const struct timespec pause = {1, 0};

	while (!s->stop) {
		struct sb_follow_opts fo = {0};
		struct sb_reply rep = {0};
		struct cli_req r;
		sb_client *c = NULL;
		int rc;

		if ((rc = mcp_connect(&c)) == SB_OK) {
			cli_req_begin(&r, "health");
			if ((rc = mcp_call(c, &r, &rep)) == SB_OK) {
				cli_follow_init(&fo);
				fo.run = "";
				fo.from = sb_map_u64(&rep.map, "last_offset", 0) + 1;
				fo.follow = 1;
				fo.types = types;
				fo.stop = &s->stop;
				rc = sb_follow(c, &fo, subs_event, s);
			}
			sb_reply_free(&rep);
			sb_client_close(c);
		}
		if (rc && !s->stop) {
			fprintf(stderr, "sanbox mcp: subscriptions: %s; again in 1 s\n", sb_errmsg(rc));
			nanosleep(&pause, NULL);
		}
	}
	return NULL;
}

/* *sp, made (telling notify) when it is NULL; NULL without memory. */
static struct sb_mcp_subs *subs_get(struct sb_mcp_subs **sp, struct sb_mcp_notify *notify)
{
	if (!*sp && (*sp = calloc(1, sizeof **sp))) {
		(*sp)->notify = notify;
		pthread_mutex_init(&(*sp)->mu, NULL);
	}
	return *sp;
}

/* The uri with its run resolved (an id, a unique prefix or a name, as the
 * CLI takes them) to the run's whole id, into full (cap bytes). Errors:
 * SB_ERR_INVAL (not a run resource), those of mcp_resolve. */
static int uri_resolve(const char *uri, char *full, size_t cap)
{
	char want[SB_RUN_MAX + 8], run[SB_RUN_MAX];
	sb_client *c = NULL;
	int rc;

	if ((rc = sb_mcp_resource_run(uri, want, sizeof want)) ||
	    (rc = mcp_connect(&c)) || (rc = mcp_resolve(c, "uri", want, run)))
		goto out;
	snprintf(full, cap, URI_PREFIX "%s%s", run, strstr(uri + strlen(URI_PREFIX), "/events")
							  ? "/events"
							  : "");
out:
	sb_client_close(c);
	return rc;
}

int sb_mcp_subscribe(struct sb_mcp_subs **subs, struct sb_mcp_notify *notify,
		     const char *uri)
{
	struct sb_mcp_subs *s = subs_get(subs, notify);
	char full[sizeof URI_PREFIX + SB_RUN_MAX + 8];
	int rc = SB_OK;

	if (!s)
		return SB_ERR_NOMEM;
	if ((rc = uri_resolve(uri, full, sizeof full)))
		return rc;
	pthread_mutex_lock(&s->mu);
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->uri[i], full))
			goto out;
	if (s->n == SUBS_MAX)
		rc = sb_seterr(SB_ERR_FULL, "over %d subscriptions", SUBS_MAX);
	else if (!(s->uri[s->n] = strdup(full)))
		rc = SB_ERR_NOMEM;
	else
		s->n++;
	if (rc == SB_OK && !s->started) {
		if (pthread_create(&s->th, NULL, subs_main, s))
			rc = sb_seterr(SB_ERR_NOMEM, "cannot start a thread");
		else
			s->started = 1;
	}
out:
	pthread_mutex_unlock(&s->mu);
	return rc;
}

void sb_mcp_unsubscribe(struct sb_mcp_subs *s, const char *uri)
{
	char full[sizeof URI_PREFIX + SB_RUN_MAX + 8];

	if (!s)
		return;
	if (uri_resolve(uri, full, sizeof full)) /* a run since removed: as given */
		snprintf(full, sizeof full, "%s", uri);
	pthread_mutex_lock(&s->mu);
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->uri[i], full)) {
			free(s->uri[i]);
			s->uri[i] = s->uri[--s->n];
			break;
		}
	pthread_mutex_unlock(&s->mu);
}

void sb_mcp_subs_stop(struct sb_mcp_subs **sp)
{
	struct sb_mcp_subs *s = *sp;

	if (!s)
		return;
	if (s->started) {
		s->stop = 1;
		pthread_join(s->th, NULL);
	}
	for (size_t i = 0; i < s->n; i++)
		free(s->uri[i]);
	pthread_mutex_destroy(&s->mu);
	free(s);
	*sp = NULL;
}
