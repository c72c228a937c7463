/* tunnel.h - the host end of a run's tunnelled streams.
 *
 * The guest agent carries each TCP connection made to its tunnel port
 * inside the guest (127.0.0.1:4000) as a channel stream: OPEN, then DATA
 * both ways, then CLOSE from each side (vmm/chan.h). For each stream the
 * tunnel asks its run for a connection to the model gateway (ops->connect,
 * which the run makes with sb_gateway_connect: a socket tied to the run)
 * and copies bytes both ways, so the guest reaches the gateway and nothing
 * else. A CLOSE from the guest shuts the connection's write side once what
 * the guest sent is written; EOF from the gateway is a CLOSE to the guest.
 * When the gateway stops reading (it closed the connection), what the
 * guest still sends is dropped and what the gateway wrote still reaches
 * the guest. Bounded: at most SB_TUNNEL_STREAMS streams per run,
 * SB_TUNNEL_BUFFER bytes waiting for the gateway per stream (more ends the
 * stream), and no reading from the gateway while the bytes waiting for the
 * guest exceed SB_TUNNEL_BACKLOG. Everything runs on the daemon's loop.
 */
#ifndef SB_TUNNEL_H
#define SB_TUNNEL_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/loop.h"

#define SB_TUNNEL_STREAMS 64
#define SB_TUNNEL_BUFFER  (16u << 20)
#define SB_TUNNEL_BACKLOG (1u << 20)

typedef struct sb_tunnel sb_tunnel;

/* What the tunnel needs from its run; every callback gets ctx. */
struct sb_tunnel_ops {
	/* Queues a frame for the guest: SB_CHAN_DATA with len bytes of data,
	 * or SB_CHAN_CLOSE (data NULL, len 0), of stream. */
	void (*send)(void *ctx, int kind, uint64_t stream, const void *data, size_t len);
	/* Bytes queued for the guest and not yet written to it. */
	size_t (*backlog)(void *ctx);
	/* Opens a connection to the gateway for a new stream and writes its
	 * socket (connected, non-blocking; the tunnel closes it) into *fd.
	 * Returns 0, or a negative SB_ERR_* (the stream is then refused with
	 * CLOSE). */
	int (*connect)(void *ctx, int *fd);
};

/* Makes a tunnel on loop. ops and ctx must outlive it; the caller closes
 * it. Errors: SB_ERR_NOMEM. */
int sb_tunnel_open(sb_loop *loop, const struct sb_tunnel_ops *ops, void *ctx,
		   sb_tunnel **out);

/* Handles an OPEN, DATA or CLOSE frame of stream from the guest (body as
 * decoded; DATA carries bin). Frames of unknown or ended streams are
 * dropped; an OPEN that cannot be served is answered with CLOSE. */
void sb_tunnel_frame(sb_tunnel *t, int kind, uint64_t stream, const msgpack_object *body);

/* Tells the tunnel the guest's backlog went down: reading resumes. */
void sb_tunnel_drained(sb_tunnel *t);

/* Number of open streams. */
size_t sb_tunnel_streams(const sb_tunnel *t);

/* Closes every stream (and its gateway connection) and frees the tunnel
 * (NULL is fine). */
void sb_tunnel_close(sb_tunnel *t);

#endif
