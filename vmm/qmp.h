/* qmp.h - a blocking QMP client (QEMU's JSON control protocol).
 *
 * Every call takes an explicit timeout in milliseconds (-1 = none) and
 * never blocks longer. Asynchronous events that arrive while a command
 * waits for its reply are queued; the daemon can watch sb_qmp_fd() for
 * readability and drain them with sb_qmp_event_next(). Commands carry an
 * id, so a late reply to a command that timed out is recognised and
 * dropped. One handle is used by one thread at a time.
 */
#ifndef SB_VMM_QMP_H
#define SB_VMM_QMP_H

#include <jansson.h>

typedef struct sb_qmp sb_qmp;

/* Opens a QMP session on the connected socket fd: reads QEMU's greeting and
 * negotiates capabilities, all within timeout_ms. Takes fd in every case
 * (sb_qmp_close() closes it, and so does a failing sb_qmp_open()); makes it
 * non-blocking. *out is freed with sb_qmp_close(). Errors: SB_ERR_TIMEOUT,
 * SB_ERR_PROTO (no QMP greeting, bad JSON), SB_ERR_IO (connection closed),
 * SB_ERR_NOMEM. */
int sb_qmp_open(int fd, int timeout_ms, sb_qmp **out);

/* Runs QMP command cmd with args (borrowed, may be NULL) and waits up to
 * timeout_ms for its reply. *ret (ret may be NULL) gets the reply's
 * "return" value; the caller decrefs it. Events arriving meanwhile are
 * queued. The connection closing before the reply to "quit" counts as
 * success. Errors: SB_ERR_PROTO (QEMU answered with an error: its desc is
 * the detail; or it sent garbage), SB_ERR_TIMEOUT, SB_ERR_IO (connection
 * closed or failed), SB_ERR_NOMEM. */
int sb_qmp_command(sb_qmp *q, const char *cmd, json_t *args, int timeout_ms,
		   json_t **ret);

/* Pops the oldest queued event into *ev after reading, without waiting,
 * whatever QEMU has already sent; the caller decrefs *ev (an object with
 * "event", "data", "timestamp"). Returns SB_END when no event is queued.
 * Errors: SB_ERR_PROTO (garbage; the bad line is skipped), SB_ERR_IO
 * (connection closed, and no event left). */
int sb_qmp_event_next(sb_qmp *q, json_t **ev);

/* Like sb_qmp_event_next() but waits up to timeout_ms for an event.
 * Errors: as sb_qmp_event_next(), and SB_ERR_TIMEOUT. */
int sb_qmp_event_wait(sb_qmp *q, int timeout_ms, json_t **ev);

/* Returns the socket's descriptor, for poll/libev; owned by the handle. */
int sb_qmp_fd(sb_qmp *q);

/* Closes the socket and frees q and its queued events; NULL is allowed. */
void sb_qmp_close(sb_qmp *q);

#endif
