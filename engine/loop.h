/* loop.h - event loops (libev underneath; all libev use is in loop.c).
 *
 * A loop runs on one thread; its callbacks run on that thread and carry a
 * void * context. Any number of loops may exist, one per thread (the
 * daemon's main loop, its socket servers). Watchers are made and stopped on
 * their loop's thread; only sb_watch_wake and sb_loop_post may be called
 * from other threads.
 */
#ifndef SB_LOOP_H
#define SB_LOOP_H

#include <sys/types.h>

typedef struct sb_loop sb_loop;
typedef struct sb_watch sb_watch;

#define SB_READ	 1
#define SB_WRITE 2

/* Creates a loop. No loop reaps child processes it does not watch.
 * Errors: SB_ERR_NOMEM, SB_ERR_IO. */
int sb_loop_open(sb_loop **out);

/* Runs until sb_loop_break. */
void sb_loop_run(sb_loop *l);

/* Makes sb_loop_run return after the current callbacks. Call it on the
 * loop's thread (from another thread: post a function that calls it). */
void sb_loop_break(sb_loop *l);

/* Frees the loop; every watcher must be stopped first. Functions posted
 * and not yet run are dropped. */
void sb_loop_close(sb_loop *l);

/* Watches fd for SB_READ and/or SB_WRITE; cb gets the ready events.
 * Returns NULL when out of memory. */
sb_watch *sb_loop_io(sb_loop *l, int fd, int events, void (*cb)(void *ctx, int revents),
		     void *ctx);

/* Changes the events an io watcher waits for (0: none, for now). */
void sb_watch_io_set(sb_watch *w, int events);

/* Calls cb after `after` seconds, then every `repeat` seconds (0: once).
 * Returns NULL when out of memory. */
sb_watch *sb_loop_timer(sb_loop *l, double after, double repeat, void (*cb)(void *ctx),
			void *ctx);

/* Calls cb once when process pid ends, with its wait status, or -1 when
 * pid is not the caller's child (a process this program did not start:
 * its status cannot be known) or already gone when the watch began. The
 * child is reaped. Works through a pidfd, so a child started on any
 * thread is watched. Returns NULL when out of memory. */
sb_watch *sb_loop_child(sb_loop *l, pid_t pid, void (*cb)(void *ctx, int status),
			void *ctx);

/* Calls cb on the loop thread after sb_watch_wake (from any thread); wakes
 * that come before cb runs are merged into one call. Returns NULL when out
 * of memory. */
sb_watch *sb_loop_async(sb_loop *l, void (*cb)(void *ctx), void *ctx);

/* Wakes an async watcher. Thread- and signal-safe. */
void sb_watch_wake(sb_watch *w);

/* A post's storage, kept by the caller in the object the post is about,
 * so that posting needs no memory and cannot fail. Its fields are the
 * loop's. */
struct sb_post {
	void (*fn)(void *ctx);
	void *ctx;
	struct sb_post *next;
};

/* Runs fn(ctx) on the loop's thread, once, in the order posted, with *p as
 * the post's storage. *p is the loop's from this call until fn is called,
 * then the caller's again (fn may free it or post it again): an object
 * posts through one node only while no post of that node is pending. A
 * loop closed before fn runs drops the post without calling fn. Safe from
 * any thread. */
void sb_loop_post(sb_loop *l, struct sb_post *p, void (*fn)(void *ctx), void *ctx);

/* Calls cb at the end of every loop iteration, after that iteration's
 * other callbacks and before the loop waits again: work gathered during an
 * iteration (events read from several guests) is done once. Returns NULL
 * when out of memory. */
sb_watch *sb_loop_idle_end(sb_loop *l, void (*cb)(void *ctx), void *ctx);

/* Calls cb when signal signo arrives (one loop per signal). Returns NULL
 * when out of memory. */
sb_watch *sb_loop_signal(sb_loop *l, int signo, void (*cb)(void *ctx), void *ctx);

/* Stops and frees a watcher (NULL is fine); safe inside its own callback. */
void sb_watch_stop(sb_watch *w);

/* Seconds since an arbitrary point, per the loop's clock (cached for the
 * iteration). */
double sb_loop_now(sb_loop *l);

#endif
