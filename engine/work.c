/* work.c - the worker pool (see work.h). */
#include "engine/work.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/error.h"

struct job {
	void (*fn)(void *ctx);
	void *ctx;
	struct job *next;
};

struct sb_work {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct job *head, **tail;
	unsigned pending; /* queued or running */
	int closing;
	pthread_t *threads;
	unsigned nthreads;
};

static void *worker(void *arg)
{
	sb_work *w = arg;
	struct job *j;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (!w->head && !w->closing)
			pthread_cond_wait(&w->cv, &w->mu);
		if (!(j = w->head))
			break; /* closing, and nothing left */
		w->head = j->next;
		if (!w->head)
			w->tail = &w->head;
		pthread_mutex_unlock(&w->mu);
		j->fn(j->ctx);
		free(j);
		pthread_mutex_lock(&w->mu);
		w->pending--;
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

int sb_work_open(const char *name, unsigned nthreads, sb_work **out)
{
	sb_work *w;
	char tname[16];
	int rc = SB_OK;

	if (nthreads < 1 || nthreads > 64)
		return sb_seterr(SB_ERR_INVAL, "a pool has 1 to 64 threads, not %u",
				 nthreads);
	if (!(w = calloc(1, sizeof *w)) ||
	    !(w->threads = calloc(nthreads, sizeof *w->threads))) {
		free(w);
		return SB_ERR_NOMEM;
	}
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	w->tail = &w->head;
	snprintf(tname, sizeof tname, "sb:%.12s", name);
	for (; w->nthreads < nthreads; w->nthreads++) {
		if (pthread_create(&w->threads[w->nthreads], NULL, worker, w)) {
			rc =
			    sb_seterr(SB_ERR_IO, "cannot start a %s worker thread", name);
			break;
		}
		pthread_setname_np(w->threads[w->nthreads], tname);
	}
	if (rc) {
		sb_work_close(w);
		return rc;
	}
	*out = w;
	return SB_OK;
}

int sb_work_submit(sb_work *w, void (*fn)(void *ctx), void *ctx)
{
	struct job *j = malloc(sizeof *j);

	if (!j)
		return SB_ERR_NOMEM;
	j->fn = fn;
	j->ctx = ctx;
	j->next = NULL;
	pthread_mutex_lock(&w->mu);
	if (w->closing) {
		pthread_mutex_unlock(&w->mu);
		free(j);
		return sb_seterr(SB_ERR_STATE, "the worker pool is closing");
	}
	*w->tail = j;
	w->tail = &j->next;
	w->pending++;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	return SB_OK;
}

unsigned sb_work_pending(sb_work *w)
{
	unsigned n;

	pthread_mutex_lock(&w->mu);
	n = w->pending;
	pthread_mutex_unlock(&w->mu);
	return n;
}

void sb_work_close(sb_work *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->closing = 1;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	for (unsigned i = 0; i < w->nthreads; i++)
		pthread_join(w->threads[i], NULL);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	free(w->threads);
	free(w);
}
