/* batch.c - recording the runs' events without the loop waiting for the
 * disk (see run.h, "batch.c").
 *
 * What the guests and the machines report during a loop turn is gathered
 * in rs->cur. At the end of the turn cur becomes rs->commit and is
 * appended (one synced group commit, events and blobs durable together)
 * on the recorder thread, while the loop goes on filling a new cur. Only
 * one batch is committed at a time, so batches reach the log in the order
 * they were gathered. When a commit is durable the loop tells each guest
 * (ACK) the frames it had taken when the commit began; a failed commit
 * leaves the guests' frames unacknowledged for good (they send them again
 * to the next daemon).
 *
 * An event recorded "at once" (sb_runs_record) waits for the batch being
 * committed, commits cur itself, then its own events: it follows every
 * event gathered before it. rec_mu guards cur, commit and the flags; it is
 * held across those synced appends only, never by the recorder.
 */
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "engine/runs/guest.h"
#include "engine/runs/run.h"

static void rec_log(struct sb_runs *rs, const char *what, size_t n, int rc)
{
	char line[400];

	snprintf(line, sizeof line, "cannot record %s (%zu events): %s", what, n,
		 sb_errmsg(rc));
	if (rs->env.log_line)
		rs->env.log_line(rs->env.ctx, line);
}

static void batch_reset(struct sb_batch *b)
{
	b->n = 0;
	b->payloads.size = 0;
	if (b->blobs.data)
		sodium_memzero(b->blobs.data, b->blobs.size);
	b->blobs.size = 0;
}

/* Appends what b holds, in one append. Any thread. Errors: the log's. */
static int batch_append(struct sb_log *log, const struct sb_batch *b)
{
	struct sb_event *evs = calloc(b->n, sizeof *evs);
	struct sb_blob *blobs = calloc(b->n, sizeof *blobs);
	size_t nblobs = 0;
	int rc = evs && blobs ? SB_OK : SB_ERR_NOMEM;

	for (size_t i = 0; rc == SB_OK && i < b->n; i++) {
		const struct sb_batch_item *it = &b->items[i];
		rc = sb_event_init(&evs[i], it->type, it->run, it->src,
				   b->payloads.data + it->off, it->len);
		if (it->has_blob) {
			blobs[nblobs].data = it->blob_len ? b->blobs.data + it->blob_off : "";
			blobs[nblobs++].len = it->blob_len;
		}
	}
	if (rc == SB_OK)
		rc = sb_log_append_blobs(log, blobs, nblobs, evs, b->n);
	free(evs);
	free(blobs);
	return rc;
}

/* Under rec_mu: waits until no batch is being committed, then appends cur
 * (synced) and empties it. */
static void batch_settle(struct sb_runs *rs)
{
	int rc;

	while (rs->committing)
		pthread_cond_wait(&rs->rec_cv, &rs->rec_mu);
	if (!rs->cur.n)
		return;
	if ((rc = batch_append(rs->env.log, &rs->cur))) {
		rec_log(rs, "the runs' events", rs->cur.n, rc);
		rs->unrecorded = 1;
	}
	batch_reset(&rs->cur);
}

/* On the recorder: commit is appended; the loop hears of it. */
static void commit_work(void *ctx)
{
	struct sb_runs *rs = ctx;
	int rc = batch_append(rs->env.log, &rs->commit);

	pthread_mutex_lock(&rs->rec_mu);
	rs->commit_rc = rc;
	rs->committing = 0;
	rs->committed = 1;
	pthread_cond_broadcast(&rs->rec_cv);
	pthread_mutex_unlock(&rs->rec_mu);
	sb_watch_wake(rs->committed_w);
}

/* Under rec_mu, on the loop: cur, when it holds events, goes to the
 * recorder; the guests' frames taken until now are acknowledged when it is
 * durable. With nothing gathered and nothing being committed, every frame
 * taken is durable (or dropped for good): the guests hear so now. */
static void batch_submit(struct sb_runs *rs)
{
	struct sb_batch b;

	if (rs->committing || rs->committed)
		return;
	if (!rs->cur.n) {
		for (struct run *r = rs->live; r && !rs->unrecorded; r = r->next)
			if (r->g)
				sb_guest_ack(r->g, sb_guest_taken(r->g));
		return;
	}
	for (struct run *r = rs->live; r; r = r->next)
		r->ack_at = r->g ? sb_guest_taken(r->g) : 0;
	b = rs->commit; /* empty: swapped, so both keep their buffers */
	rs->commit = rs->cur;
	rs->cur = b;
	rs->committing = 1;
	if (sb_work_submit(rs->recorder, commit_work, rs)) {
		/* no memory for the job: recorded here, as before the loop went on */
		rs->committing = 0;
		b = rs->cur;
		rs->cur = rs->commit;
		rs->commit = b;
		batch_settle(rs);
	}
}

static void on_committed(void *ctx)
{
	struct sb_runs *rs = ctx;

	pthread_mutex_lock(&rs->rec_mu);
	if (rs->committed) {
		if (rs->commit_rc) {
			rec_log(rs, "the runs' events", rs->commit.n, rs->commit_rc);
			rs->unrecorded = 1;
		}
		for (struct run *r = rs->live; r && !rs->unrecorded; r = r->next)
			if (r->g)
				sb_guest_ack(r->g, r->ack_at);
		batch_reset(&rs->commit);
		rs->committed = 0;
		batch_submit(rs); /* what gathered meanwhile */
	}
	pthread_mutex_unlock(&rs->rec_mu);
}

static void on_turn_end(void *ctx)
{
	struct sb_runs *rs = ctx;

	pthread_mutex_lock(&rs->rec_mu);
	batch_submit(rs);
	pthread_mutex_unlock(&rs->rec_mu);
}

void sb_runs_batch_add(struct sb_runs *rs, const char *run, const char *type,
		       enum sb_source src, const void *payload, size_t len,
		       const void *blob, size_t blob_len)
{
	struct sb_batch *b = &rs->cur;
	struct sb_batch_item *it;
	int rc = SB_OK;

	pthread_mutex_lock(&rs->rec_mu);
	if (b->n == b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 64;
		struct sb_batch_item *n = realloc(b->items, cap * sizeof *n);
		if (n) {
			b->items = n;
			b->cap = cap;
		}
		rc = n ? SB_OK : SB_ERR_NOMEM;
	}
	if (rc == SB_OK) {
		it = &b->items[b->n];
		snprintf(it->run, sizeof it->run, "%s", run);
		snprintf(it->type, sizeof it->type, "%s", type);
		it->src = src;
		it->off = b->payloads.size;
		it->len = len;
		it->has_blob = blob != NULL;
		it->blob_off = b->blobs.size;
		it->blob_len = blob ? blob_len : 0;
		if (msgpack_sbuffer_write(&b->payloads, payload, len) ||
		    (blob_len && msgpack_sbuffer_write(&b->blobs, blob, blob_len))) {
			b->payloads.size = it->off;
			b->blobs.size = it->blob_off;
			rc = SB_ERR_NOMEM;
		}
	}
	if (rc == SB_OK)
		b->n++;
	if (rc == SB_OK && b->blobs.size > SB_RUNS_BATCH_BLOBS_MAX)
		batch_settle(rs); /* a batch of big files: not all in memory */
	pthread_mutex_unlock(&rs->rec_mu);
	if (rc)
		rec_log(rs, type, 1, rc);
}

int sb_runs_record_blobs(struct sb_runs *rs, const struct sb_blob *blobs, size_t nblobs,
			 struct sb_event *evs, size_t n)
{
	int rc;

	pthread_mutex_lock(&rs->rec_mu);
	batch_settle(rs);
	rc = sb_log_append_blobs(rs->env.log, blobs, nblobs, evs, n);
	pthread_mutex_unlock(&rs->rec_mu);
	return rc;
}

void sb_runs_settle(struct sb_runs *rs)
{
	pthread_mutex_lock(&rs->rec_mu);
	batch_settle(rs);
	pthread_mutex_unlock(&rs->rec_mu);
}

int sb_runs_record(struct sb_runs *rs, struct sb_event *evs, size_t n)
{
	return sb_runs_record_blobs(rs, NULL, 0, evs, n);
}

int sb_runs_batch_open(struct sb_runs *rs)
{
	int rc;

	pthread_mutex_init(&rs->rec_mu, NULL);
	pthread_cond_init(&rs->rec_cv, NULL);
	msgpack_sbuffer_init(&rs->cur.payloads);
	msgpack_sbuffer_init(&rs->cur.blobs);
	msgpack_sbuffer_init(&rs->commit.payloads);
	msgpack_sbuffer_init(&rs->commit.blobs);
	if ((rc = sb_work_open("record", 1, &rs->recorder)))
		return rc;
	if (!(rs->committed_w = sb_loop_async(rs->env.loop, on_committed, rs)) ||
	    !(rs->flush_w = sb_loop_idle_end(rs->env.loop, on_turn_end, rs)))
		return SB_ERR_NOMEM;
	return SB_OK;
}

void sb_runs_batch_close(struct sb_runs *rs)
{
	pthread_mutex_lock(&rs->rec_mu);
	batch_settle(rs); /* its ACKs are not sent: the guests resend to the next daemon */
	pthread_mutex_unlock(&rs->rec_mu);
	sb_work_close(rs->recorder);
	sb_watch_stop(rs->flush_w);
	sb_watch_stop(rs->committed_w);
	pthread_mutex_destroy(&rs->rec_mu);
	pthread_cond_destroy(&rs->rec_cv);
	for (struct sb_batch *b = &rs->cur; b; b = b == &rs->cur ? &rs->commit : NULL) {
		batch_reset(b);
		msgpack_sbuffer_destroy(&b->payloads);
		msgpack_sbuffer_destroy(&b->blobs);
		free(b->items);
	}
}
