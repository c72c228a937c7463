/* tunnel.h - the host end of a run's tunnelled streams.
 *
 * The guest agent carries each TCP connection made to its tunnel port
 * inside the guest (127.0.0.1:4000) as a channel stream: OPEN, then DATA
 * both ways, then CLOSE from each side (vmm/chan.h). For each stream the
 * host opens a TCP connection to the model gateway on 127.0.0.1 and copies
 * bytes both ways, so the guest reaches the gateway and nothing else.
 * Bounded: at most SB_TUNNEL_STREAMS streams per run, SB_TUNNEL_BUFFER bytes
 * waiting for the gateway per stream (more ends the stream), and no reading
 * from the gateway while the bytes waiting for the guest exceed
 * SB_TUNNEL_BACKLOG. Everything runs on the daemon's loop.
 */
#ifndef SB_TUNNEL_H
#define SB_TUNNEL_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/daemon/loop.h"

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
	/* A connection to the gateway from 127.0.0.1:port was opened (open 1)
	 * or closed (open 0): the run ties it to its key (sb_gateway_bind). */
	void (*tie)(void *ctx, uint16_t port, int open);
};

/* Makes a tunnel to 127.0.0.1:port on loop. ops and ctx must outlive it.
 * Errors: SB_ERR_NOMEM. */
int sb_tunnel_open(sb_loop *loop, uint16_t port, const struct sb_tunnel_ops *ops,
		   void *ctx, sb_tunnel **out);

/* Handles an OPEN, DATA or CLOSE frame of stream from the guest (body as
 * decoded; DATA carries bin). Frames of unknown or ended streams are
 * dropped; an OPEN that cannot be served is answered with CLOSE. */
void sb_tunnel_frame(sb_tunnel *t, int kind, uint64_t stream, const msgpack_object *body);

/* Tells the tunnel the guest's backlog went down: reading resumes. */
void sb_tunnel_drained(sb_tunnel *t);

/* Number of open streams. */
size_t sb_tunnel_streams(const sb_tunnel *t);

/* Closes every stream and frees the tunnel (NULL is fine). */
void sb_tunnel_close(sb_tunnel *t);

#endif
