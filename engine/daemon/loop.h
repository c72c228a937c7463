/* loop.h - the daemon's event loop (libev underneath; all libev use is in
 * loop.c). Callbacks run on the loop's thread and carry a void * context.
 */
#ifndef SB_LOOP_H
#define SB_LOOP_H

#include <sys/types.h>

typedef struct sb_loop sb_loop;
typedef struct sb_watch sb_watch;

#define SB_READ  1
#define SB_WRITE 2

/* Creates the loop (the process's default loop, so child watchers work).
 * Errors: SB_ERR_NOMEM, SB_ERR_IO. */
int sb_loop_open(sb_loop **out);

/* Runs until sb_loop_break. */
void sb_loop_run(sb_loop *l);

/* Makes sb_loop_run return after the current callbacks. */
void sb_loop_break(sb_loop *l);

/* Frees the loop; every watcher must be stopped first. */
void sb_loop_close(sb_loop *l);

/* Watches fd for SB_READ and/or SB_WRITE; cb gets the ready events.
 * Returns NULL when out of memory. */
sb_watch *sb_loop_io(sb_loop *l, int fd, int events, void (*cb)(void *ctx, int revents),
		     void *ctx);

/* Changes the events an io watcher waits for. */
void sb_watch_io_set(sb_watch *w, int events);

/* Calls cb after `after` seconds, then every `repeat` seconds (0: once). */
sb_watch *sb_loop_timer(sb_loop *l, double after, double repeat, void (*cb)(void *ctx),
			void *ctx);

/* Calls cb when child pid ends, with its wait status. */
sb_watch *sb_loop_child(sb_loop *l, pid_t pid, void (*cb)(void *ctx, int status), void *ctx);

/* Calls cb on the loop thread after sb_watch_wake (from any thread). */
sb_watch *sb_loop_async(sb_loop *l, void (*cb)(void *ctx), void *ctx);

/* Wakes an async watcher. Thread- and signal-safe. */
void sb_watch_wake(sb_watch *w);

/* Calls cb when signal signo arrives. */
sb_watch *sb_loop_signal(sb_loop *l, int signo, void (*cb)(void *ctx), void *ctx);

/* Stops and frees a watcher (NULL is fine). */
void sb_watch_stop(sb_watch *w);

/* Seconds since an arbitrary point, per the loop's clock. */
double sb_loop_now(sb_loop *l);

#endif
