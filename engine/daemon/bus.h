/* bus.h - a client's sockets to the daemon (nng): control API and live
 * events.
 *
 * Control: req/rep; each request and reply is one msgpack map (see SPEC.md,
 * "Control API"). Live events: pub/sub; each message is the run id, a
 * newline, then the event as a msgpack map (sb_wire_event). Subscribing to
 * "RUN\n" gives one run's events; subscribing to "" gives all.
 * Local sockets are ipc:// in the state directory; a remote daemon is
 * tls+tcp:// and every request carries a token. The daemon's end of these
 * sockets is engine/daemon/sp.h. All nng use is confined to bus.c.
 */
#ifndef SB_BUS_H
#define SB_BUS_H

#include <stddef.h>

#define SB_REQ_MAX (64u << 20) /* larger requests are refused */

typedef struct sb_client sb_client;
typedef struct sb_call sb_call;
typedef struct sb_sub sb_sub;

/* Frees a buffer returned by this module. */
void sb_bus_free(void *p);

/* --- client side --- */

/* Connects to the daemon: dir is a state directory (ipc) or a
 * tls+tcp://HOST:PORT url (then ca_pem names the CA file). Errors:
 * SB_ERR_UNAVAIL (nothing listens), SB_ERR_IO. */
int sb_client_open(const char *dir, const char *ca_pem, sb_client **out);

/* Sends req and waits at most timeout_ms for the reply (*rep, the caller
 * frees with sb_bus_free). Errors: SB_ERR_TOOBIG (req over SB_REQ_MAX: not
 * sent), SB_ERR_TIMEOUT, SB_ERR_UNAVAIL, SB_ERR_IO. */
int sb_client_call(sb_client *c, const void *req, size_t len, int timeout_ms,
		   void **rep, size_t *replen);

/* Sends req and returns at once with *call, to be waited for with
 * sb_client_wait (or dropped with sb_client_cancel); several calls may be
 * in flight on one client, answered in order. Errors: SB_ERR_TOOBIG,
 * SB_ERR_TIMEOUT, SB_ERR_UNAVAIL, SB_ERR_IO, SB_ERR_NOMEM. */
int sb_client_send(sb_client *c, const void *req, size_t len, int timeout_ms, sb_call **call);

/* Waits for the reply of call (*rep, the caller frees with sb_bus_free) and
 * frees call. Waits at most the call's timeout and 2 s more, whatever nng
 * does (see bus.c). Errors: as sb_client_call. */
int sb_client_wait(sb_call *call, void **rep, size_t *replen);

/* Drops a call: waits for its reply (or its error or timeout) and throws
 * it away (NULL is fine). */
void sb_client_cancel(sb_call *call);

/* Closes the connection (NULL is fine). Returns within about 2 s even when
 * nng does not (see bus.c): the socket is then left to nng. */
void sb_client_close(sb_client *c);

/* Subscribes to topic (a run id, or "" for every run) on the daemon in dir.
 * Messages published after this returns are received. The subscriptions of
 * a process to one daemon share one connection, opened by the first and
 * kept until the process ends, and one receiver that hands each message to
 * all of them (see bus.c); one that falls more than 8192 messages behind
 * loses the oldest. Errors: as sb_client_open, SB_ERR_INVAL (topic too
 * long). */
int sb_sub_open(const char *dir, const char *ca_pem, const char *topic, sb_sub **out);

/* Waits at most timeout_ms (-1: forever, 0: not at all) for the next
 * message of the subscription's topic (*msg, the caller frees with
 * sb_bus_free), without the topic prefix. SB_ERR_RESET, at once, when the
 * connection to the daemon was made again since the last call (a restarted
 * daemon): what it published in between is lost, the log has it. Errors:
 * SB_ERR_TIMEOUT, SB_ERR_PROTO, SB_ERR_NOMEM. */
int sb_sub_next(sb_sub *s, int timeout_ms, void **msg, size_t *len);

/* Closes the subscription (NULL is fine). */
void sb_sub_close(sb_sub *s);

#endif
