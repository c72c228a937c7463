/* qmp.h - a QMP client (QEMU's JSON control protocol), asynchronous at its
 * core, with a blocking API on top.
 *
 * The core is a protocol engine the caller drives, tied to no event loop:
 * it owns a connected non-blocking socket, the caller watches the socket
 * for what sb_qmp_wants() asks and calls sb_qmp_io() when it is ready, and
 * arms one timer for sb_qmp_deadline() that calls sb_qmp_tick(). Time is
 * the caller's: every call that needs it takes now_ms, milliseconds on any
 * monotonic clock, the same one throughout. After any call into the
 * client, wants and deadline may have changed.
 *
 * The client reads QEMU's greeting and negotiates capabilities itself;
 * commands sent before that is done wait for it. Commands are pipelined,
 * each with an id: a reply is matched to its command by id, whatever the
 * order, and a reply to a command that timed out (or to no command) is
 * dropped. Each command sent gets exactly one call of its callback: its
 * reply, QEMU's error, its timeout, or the connection's end. A line that is
 * not a JSON object fails every command waiting (any of them may have lost
 * its reply) and the stream goes on; a connection closed by QEMU, a write
 * that fails or a message longer than SB_QMP_LINE_MAX ends the connection
 * (the socket is shut down) and fails every command waiting. Callbacks run
 * inside sb_qmp_io, sb_qmp_tick and sb_qmp_close, never inside sb_qmp_send;
 * they may send commands and may close the handle.
 *
 * The blocking API (sb_qmp_open, sb_qmp_command, sb_qmp_event_next/wait)
 * drives the same core with poll(); on a handle from sb_qmp_open events are
 * queued, at most SB_QMP_EVENTS_MAX (the oldest are dropped). Every
 * blocking call takes a timeout in milliseconds (-1 = none) and never
 * blocks longer. On a handle from sb_qmp_open_async the blocking calls work
 * too (events still go to ops->event, and callbacks of other commands may
 * run inside them, but must not close the handle then). A handle is used
 * by one thread at a time.
 */
#ifndef SB_VMM_QMP_H
#define SB_VMM_QMP_H

#include <jansson.h>
#include <stdint.h>

typedef struct sb_qmp sb_qmp;

#define SB_QMP_READ  1 /* sb_qmp_wants / sb_qmp_io: the socket is readable */
#define SB_QMP_WRITE 2 /* ... writable */

#define SB_QMP_LINE_MAX   (1u << 20) /* longest message accepted, newline included */
#define SB_QMP_OUT_MAX    (1u << 20) /* bytes of commands waiting to be written */
#define SB_QMP_EVENTS_MAX 1024       /* events the blocking API queues */

/* A command's outcome: rc 0 with ret the reply's "return" value (NULL for
 * "quit" answered by the connection closing), or rc < 0 with ret NULL:
 * SB_ERR_PROTO (QEMU's error, its desc in the detail; or a garbage line or
 * an answer without a result), SB_ERR_TIMEOUT, SB_ERR_IO (connection
 * ended, or the handle closed). ret is valid during the call only (incref
 * to keep it); sb_errmsg(rc) gives the detail during the call. */
typedef void (*sb_qmp_reply_fn)(void *ctx, int rc, json_t *ret);

/* What the core tells its owner; every callback gets the ctx given to
 * sb_qmp_open_async. Either may be NULL. */
struct sb_qmp_ops {
	/* An event (an object with "event", "data", "timestamp"), valid
	 * during the call only. */
	void (*event)(void *ctx, json_t *ev);
	/* The connection ended with err (sb_errmsg(err) says why, during the
	 * call): after the commands waiting were failed. Called once, and
	 * not for sb_qmp_close. The caller stops watching and closes. */
	void (*down)(void *ctx, int err);
};

/* Starts a QMP session on the connected socket fd without waiting: the
 * greeting and capabilities come through sb_qmp_io, and must be done
 * within timeout_ms from now_ms (-1 = no limit), or the connection ends
 * with SB_ERR_TIMEOUT. Takes fd in every case (sb_qmp_close closes it, and
 * so does a failing call); makes it non-blocking. ops (may be NULL) and
 * ctx must outlive the handle. *out is freed with sb_qmp_close().
 * Errors: SB_ERR_IO (fcntl), SB_ERR_NOMEM. */
int sb_qmp_open_async(int fd, int64_t now_ms, int timeout_ms, const struct sb_qmp_ops *ops,
		      void *ctx, sb_qmp **out);

/* Queues command cmd with args (borrowed, may be NULL); its reply, error
 * or timeout (timeout_ms from now_ms, -1 = none) goes to cb(cb_ctx, ...)
 * exactly once, later. On an error cb is never called. Errors: SB_ERR_IO
 * (the connection has ended; the detail says how), SB_ERR_FULL (more than
 * SB_QMP_OUT_MAX bytes wait to be written: QEMU does not read),
 * SB_ERR_NOMEM. */
int sb_qmp_send(sb_qmp *q, int64_t now_ms, const char *cmd, json_t *args, int timeout_ms,
		sb_qmp_reply_fn cb, void *cb_ctx);

/* Returns what the client waits for on its socket: SB_QMP_READ, plus
 * SB_QMP_WRITE while commands wait to be written; 0 once the connection
 * has ended. */
unsigned sb_qmp_wants(const sb_qmp *q);

/* Does the reading and writing the socket is ready for (ready: SB_QMP_*
 * bits), handling every complete message: replies and events go to their
 * callbacks. Reads a bounded amount per call, so a flooding peer cannot
 * hold the caller; the socket stays readable and the caller calls again. */
void sb_qmp_io(sb_qmp *q, unsigned ready);

/* Returns the earliest deadline (ms, the caller's clock) of the handshake
 * or of a command waiting, or -1 when there is none. */
int64_t sb_qmp_deadline(const sb_qmp *q);

/* Fails, with SB_ERR_TIMEOUT, each command whose deadline is at or before
 * now_ms, and ends the connection when the handshake's has passed. */
void sb_qmp_tick(sb_qmp *q, int64_t now_ms);

/* Opens a QMP session on the connected socket fd: reads QEMU's greeting and
 * negotiates capabilities, all within timeout_ms. Takes fd in every case
 * (sb_qmp_close() closes it, and so does a failing sb_qmp_open()); makes it
 * non-blocking. *out is freed with sb_qmp_close(). Errors: SB_ERR_TIMEOUT,
 * SB_ERR_PROTO (no QMP greeting, bad JSON, capabilities refused), SB_ERR_IO
 * (connection closed), SB_ERR_NOMEM. */
int sb_qmp_open(int fd, int timeout_ms, sb_qmp **out);

/* Runs QMP command cmd with args (borrowed, may be NULL) and waits up to
 * timeout_ms for its reply. *ret (ret may be NULL) gets the reply's
 * "return" value; the caller decrefs it. Events arriving meanwhile are
 * queued. The connection closing before the reply to "quit" counts as
 * success (*ret NULL). Errors: SB_ERR_PROTO (QEMU answered with an error:
 * its desc is the detail; or it sent garbage), SB_ERR_TIMEOUT, SB_ERR_IO
 * (connection closed or failed), SB_ERR_FULL, SB_ERR_NOMEM. */
int sb_qmp_command(sb_qmp *q, const char *cmd, json_t *args, int timeout_ms,
		   json_t **ret);

/* Pops the oldest queued event into *ev after reading, without waiting,
 * whatever QEMU has already sent; the caller decrefs *ev (an object with
 * "event", "data", "timestamp"). Returns SB_END when no event is queued.
 * Errors: SB_ERR_IO (connection ended, and no event left). */
int sb_qmp_event_next(sb_qmp *q, json_t **ev);

/* Like sb_qmp_event_next() but waits up to timeout_ms for an event.
 * Errors: as sb_qmp_event_next(), and SB_ERR_TIMEOUT. */
int sb_qmp_event_wait(sb_qmp *q, int timeout_ms, json_t **ev);

/* Returns the socket's descriptor, for poll or an event loop; owned by
 * the handle. */
int sb_qmp_fd(sb_qmp *q);

/* Fails every command still waiting (SB_ERR_IO, "closed by the client"),
 * closes the socket and frees q and its queued events; NULL is allowed.
 * Called from a callback, it takes effect when the client's call that
 * ran the callback returns. */
void sb_qmp_close(sb_qmp *q);

#endif
