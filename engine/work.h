/* work.h - a pool of worker threads for work that may block (a child
 * process, file I/O, a synced commit), so the loops never wait for it.
 *
 * A job is a function run once on some worker thread; it reports back by
 * posting to a loop (sb_loop_post) itself. Jobs start in the order they
 * were submitted; up to the pool's thread count run at once.
 */
#ifndef SB_WORK_H
#define SB_WORK_H

typedef struct sb_work sb_work;

/* Starts a pool of nthreads (1..64) threads named "sb:NAME".
 * Errors: SB_ERR_INVAL, SB_ERR_NOMEM, SB_ERR_IO (a thread could not start). */
int sb_work_open(const char *name, unsigned nthreads, sb_work **out);

/* Queues fn(ctx) to run on a worker. Safe from any thread.
 * Errors: SB_ERR_NOMEM, SB_ERR_STATE (the pool is closing): fn will not run. */
int sb_work_submit(sb_work *w, void (*fn)(void *ctx), void *ctx);

/* Jobs queued or running. */
unsigned sb_work_pending(sb_work *w);

/* Runs the jobs still queued, waits for them and the running ones, and
 * joins the threads (NULL is fine). Jobs may not submit to w from then on. */
void sb_work_close(sb_work *w);

#endif
