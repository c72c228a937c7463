/* nfq.h - packets the kernel queues to the enforcer (NFQUEUE), and the
 * verdicts it gives them. All libnetfilter_queue use is in nfq.c.
 *
 * A queue is bound to a number the host's netfilter rules name (nft.h's
 * judge chain): the kernel holds each packet sent to it until a verdict,
 * and drops the ones it cannot queue (no one bound, the queue full). The
 * packets are copied whole; a GSO packet comes unsegmented.
 *
 * Threads: one thread at a time per queue.
 */
#ifndef SB_NFQ_H
#define SB_NFQ_H

#include <stddef.h>
#include <stdint.h>

#include "engine/error.h"

typedef struct sb_nfq sb_nfq;

/* The numbers the enforcer's queue takes the first free of (judged.c;
 * sanbox doctor tries the same). */
#define SB_NFQ_ENFORCER_FIRST 21314
#define SB_NFQ_ENFORCER_COUNT 64

/* A queued packet, valid during the call that hands it over. */
struct sb_nfq_pkt {
	uint32_t id;	     /* the kernel's, for the verdict */
	uint32_t indev;	     /* the interface it came in on (ifindex; 0: none) */
	const uint8_t *data; /* the IPv4 or IPv6 packet, len bytes */
	size_t len;
};

enum sb_nfq_verdict {
	SB_NFQ_ACCEPT, /* on to the next hook */
	SB_NFQ_DROP,
	SB_NFQ_REPEAT, /* through the same hook again, with the verdict's mark */
};

/* Binds the first free queue number of [first, first + count) (*num gets
 * it) with room for maxlen packets. Errors: SB_ERR_UNAVAIL (no NFQUEUE in
 * this kernel), SB_ERR_EXISTS (no number could be bound: all taken, or no
 * CAP_NET_ADMIN), SB_ERR_NOMEM. */
int sb_nfq_open(uint16_t first, uint16_t count, uint32_t maxlen, sb_nfq **out,
		uint16_t *num);

/* Frees q (NULL is fine); the kernel drops what it still holds. */
void sb_nfq_close(sb_nfq *q);

/* The descriptor to poll for reading. */
int sb_nfq_fd(const sb_nfq *q);

/* Calls fn for each packet waiting, without blocking. Errors: SB_ERR_IO
 * (errno kept; ENOBUFS: the kernel dropped packets it could not hand
 * over). */
int sb_nfq_read(sb_nfq *q, void (*fn)(void *ctx, const struct sb_nfq_pkt *p), void *ctx);

/* Gives packet id its verdict (a mark only with SB_NFQ_REPEAT). Errors:
 * SB_ERR_IO. */
int sb_nfq_verdict(sb_nfq *q, uint32_t id, enum sb_nfq_verdict v, uint32_t mark);

#endif
