/* rerun.c - a re-run's recorded model calls (see rerun.h). */
#include "engine/gateway/rerun.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"

struct sb_rerun {
	pthread_mutex_t mu;
	struct sb_rerun_call *calls; /* their bodies owned */
	size_t n, next;		     /* next: the turn of the next call */
	uint64_t skipped;	     /* the record's calls before calls[0] */
	int live, diverged;
};

int sb_rerun_new(const struct sb_rerun_call *calls, size_t n, uint64_t skipped, int live,
		 sb_rerun **out)
{
	sb_rerun *rr = calloc(1, sizeof *rr);

	if (!rr || (n && !(rr->calls = calloc(n, sizeof *rr->calls))))
		goto fail;
	pthread_mutex_init(&rr->mu, NULL);
	rr->live = live;
	rr->skipped = skipped;
	for (; rr->n < n; rr->n++) {
		struct sb_rerun_call *c = &rr->calls[rr->n];
		*c = calls[rr->n];
		c->request = malloc(c->request_len + 1);
		c->answer = malloc(c->answer_len + 1);
		if (!c->request || !c->answer) {
			rr->n++;
			sb_rerun_free(rr);
			return SB_ERR_NOMEM;
		}
		memcpy((char *)c->request, calls[rr->n].request, c->request_len);
		memcpy((char *)c->answer, calls[rr->n].answer, c->answer_len);
	}
	*out = rr;
	return SB_OK;
fail:
	free(rr);
	return SB_ERR_NOMEM;
}

void sb_rerun_free(sb_rerun *rr)
{
	if (!rr)
		return;
	for (size_t i = 0; i < rr->n; i++) {
		free((char *)rr->calls[i].request);
		free((char *)rr->calls[i].answer);
	}
	free(rr->calls);
	pthread_mutex_destroy(&rr->mu);
	free(rr);
}

int sb_rerun_live(const sb_rerun *rr)
{
	return rr->live;
}

/* --- comparing requests --- */

/* Keys whose values are names a client may make up anew each time. */
static int key_ignored(const char *k)
{
	return !strcmp(k, "id") || !strcmp(k, "tool_call_id") ||
	       !strcmp(k, "tool_use_id");
}

static int diff_value(const json_t *a, const json_t *b, char *path, size_t at);

/* Ends the path at its length at with a part (truncated at the path's
 * size). Returns the new length. */
static size_t path_end(char *path, size_t at, int n)
{
	at += n > 0 ? (size_t)n : 0;
	return at < SB_RERUN_PATH_MAX ? at : SB_RERUN_PATH_MAX - 1;
}

static size_t path_key(char *path, size_t at, const char *key)
{
	return path_end(
	    path, at,
	    snprintf(path + at, SB_RERUN_PATH_MAX - at, at ? ".%s" : "%s", key));
}

static size_t path_index(char *path, size_t at, size_t i)
{
	return path_end(path, at,
			snprintf(path + at, SB_RERUN_PATH_MAX - at, "[%zu]", i));
}

/* 1 when a key of a is not in b or its value differs there (path: its
 * path). */
static int diff_keys(const json_t *a, const json_t *b, char *path, size_t at)
{
	const char *k;
	json_t *v;

	json_object_foreach((json_t *)a, k, v)
	{
		if (key_ignored(k))
			continue;
		size_t n = path_key(path, at, k);
		if (diff_value(v, json_object_get(b, k), path, n))
			return 1;
	}
	return 0;
}

static int diff_value(const json_t *a, const json_t *b, char *path, size_t at)
{
	size_t na, nb;

	path[at] = 0;
	if (!a && !b)
		return 0;
	if (!a || !b || json_typeof(a) != json_typeof(b))
		return 1;
	if (json_is_object(a))
		return diff_keys(a, b, path, at) || diff_keys(b, a, path, at);
	if (!json_is_array(a))
		return !json_equal((json_t *)a, (json_t *)b);
	na = json_array_size(a);
	nb = json_array_size(b);
	for (size_t i = 0; i < na && i < nb; i++)
		if (diff_value(json_array_get(a, i), json_array_get(b, i), path,
			       path_index(path, at, i)))
			return 1;
	if (na != nb) {
		path_index(path, at, na < nb ? na : nb);
		return 1;
	}
	path[at] = 0;
	return 0;
}

int sb_rerun_diff(const char *a, size_t alen, const char *b, size_t blen,
		  char path[SB_RERUN_PATH_MAX])
{
	static const char *const fields[] = {"model",	 "instructions", "system",
					     "messages", "input",	 "tools"};
	json_t *ja = json_loadb(a, alen, 0, NULL), *jb = json_loadb(b, blen, 0, NULL);
	int differ = 0;

	path[0] = 0;
	if (!json_is_object(ja) || !json_is_object(jb)) {
		differ = 1;
		goto out;
	}
	for (size_t i = 0; i < sizeof fields / sizeof fields[0] && !differ; i++) {
		size_t n = path_key(path, 0, fields[i]);
		differ = diff_value(json_object_get(ja, fields[i]),
				    json_object_get(jb, fields[i]), path, n);
	}
	if (!differ)
		path[0] = 0;
out:
	json_decref(ja);
	json_decref(jb);
	return differ;
}

int sb_rerun_take(sb_rerun *rr, unsigned api, const char *body, size_t len,
		  const struct sb_rerun_call **call, struct sb_rerun_divergence *d)
{
	const struct sb_rerun_call *c;
	int rc = SB_OK;

	memset(d, 0, sizeof *d);
	*call = NULL;
	pthread_mutex_lock(&rr->mu);
	if (rr->diverged) {
		rc = SB_ERR_STATE;
		goto out;
	}
	d->call = rr->skipped + ++rr->next;
	if (rr->next > rr->n) { /* more calls than recorded */
		rc = SB_ERR_STATE;
		goto out;
	}
	c = &rr->calls[rr->next - 1];
	if (c->api != api)
		snprintf(d->path, sizeof d->path, "api");
	else if (!sb_rerun_diff(c->request, c->request_len, body, len, d->path))
		*call = c;
	else if (!d->path[0])
		snprintf(d->path, sizeof d->path, "(body)");
	if (c->api != api || *call != c)
		rc = SB_ERR_STATE;
out:
	if (rc)
		rr->diverged = 1;
	pthread_mutex_unlock(&rr->mu);
	return rc;
}

/* --- the upstream that answers from the record --- */

struct rec_call {
	const struct sb_rerun_call *c;
	size_t (*write)(void *ctx, const char *p, size_t len);
	void *ctx;
};

static int rec_start(void *src, const struct sb_upstream_req *rq, void **call)
{
	struct rec_call *k = malloc(sizeof *k);

	if (!k)
		return SB_ERR_NOMEM;
	k->c = src;
	k->write = rq->write;
	k->ctx = rq->ctx;
	*call = k;
	return SB_OK;
}

static void rec_pump(void *call, int *done)
{
	struct rec_call *k = call;

	if (k->c->answer_len)
		k->write(k->ctx, k->c->answer, k->c->answer_len);
	*done = 1;
}

static long rec_status(void *call)
{
	return ((struct rec_call *)call)->c->status;
}

static const char *rec_content_type(void *call)
{
	return ((struct rec_call *)call)->c->stream ? "text/event-stream"
						    : "application/json";
}

static const char *rec_failure(void *call)
{
	(void)call;
	return NULL;
}

const struct sb_upstream_ops sb_upstream_record = {
    .name = "record",
    .start = rec_start,
    .pump = rec_pump,
    .status = rec_status,
    .content_type = rec_content_type,
    .failure = rec_failure,
    .end = free,
};
