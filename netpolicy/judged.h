/* judged.h - the TLS and HTTP connections of hostname grants, read by the
 * judge (judge.h) from the enforcer's queue (nfq.h) on the enforcer's
 * loop.
 *
 * nftables queues (nft.h's chain judge) the packets of a connection to a
 * granted name's address on a TLS or HTTP port; one queue (sb_judged)
 * serves every run, and a packet's run (sb_judged_run) is the one whose
 * link it came in on (the guest's) or whose guest it goes to (the
 * server's). Each connection's verdicts come from its judge; a long HTTP
 * body goes past it through the run's set b4/b6 (a bypass). A packet of no
 * run being judged is dropped.
 *
 * A run's judge knows nothing of grants or reports: it asks and tells its
 * run through the ops it is opened with (net.c gives them).
 *
 * Threads: one loop, the enforcer's (the config's loop). sb_judged_open
 * runs off it; sb_judged_close on it or after it ended; every other
 * function on it, and so does every callback. nftables calls go to the
 * config's workers.
 */
#ifndef SB_JUDGED_H
#define SB_JUDGED_H

#include <stddef.h>
#include <stdint.h>

#include "engine/loop.h"
#include "engine/work.h"
#include "netpolicy/nft.h"

typedef struct sb_judged sb_judged;
typedef struct sb_judged_run sb_judged_run;

struct sb_judged_config {
	sb_loop *loop; /* the enforcer's */
	sb_work *work; /* for nftables calls (a bypass) */
	sb_nft *nft;   /* the table holding the runs' sets b4/b6 */
};

/* Binds the enforcer's queue (the first free number of the
 * SB_NFQ_ENFORCER_* range) and starts reading it on the loop; opens the
 * raw sockets the judge resets connections with (without them, it does
 * not). c's loop, work and nft must outlive it. The caller points the
 * table's chain judge at sb_judged_queue. Errors: SB_ERR_UNAVAIL (no
 * NFQUEUE, or no number free: the detail says), SB_ERR_NOMEM. */
int sb_judged_open(const struct sb_judged_config *c, sb_judged **out);

/* The number of queue q. */
uint16_t sb_judged_queue(const sb_judged *q);

/* Frees q (NULL is fine) once every run's judge is closed; the kernel
 * drops what the queue still holds. */
void sb_judged_close(sb_judged *q);

/* What a run's judge asks and tells its run; ctx is the run's. Every
 * callback comes on the loop, from the judge's own handlers or from
 * sb_judged_run_recheck, _sweep and _stop (hold only). ops and ctx must
 * stay valid until sb_judged_run_close. Once sb_judged_run_stop has
 * returned, release is the only callback that comes (once for each hold
 * not released yet). */
struct sb_judged_ops {
	/* 1 when a grant of the run names name for proto (udp 1, tcp 0) and
	 * port, else 0. The judge asks for tcp only. */
	int (*granted)(void *ctx, const char *name, int udp, uint16_t port);
	/* A connection refused or ended: dst and port (its server), proto
	 * ("tcp"), name (the name it asked for, or ""), why. The strings are
	 * valid during the call. */
	void (*denied)(void *ctx, const char *dst, uint16_t port, const char *proto,
		       const char *name, const char *why);
	/* A bypass's nftables job begins: the run, ctx and ops must stay
	 * until its release. */
	void (*hold)(void *ctx);
	/* It ended. It may free the run's judge (sb_judged_run_close): the
	 * judge touches nothing of its own after calling it. */
	void (*release)(void *ctx);
};

/* Starts judging the connections of run nr (its id, tap and guest's
 * addresses are read; its tap must exist). Errors: SB_ERR_NOMEM. */
int sb_judged_run_open(sb_judged *q, const struct sb_nft_run *nr,
		       const struct sb_judged_ops *ops, void *ctx, sb_judged_run **out);

/* After a change of the run's grants: the connections whose name is no
 * longer granted are forgotten (their packets from now on are dropped)
 * and reported. */
void sb_judged_run_recheck(sb_judged_run *jr);

/* Gives up on the connections of jr that are past their time at now (the
 * loop's clock): reported and reset when they named no host in time,
 * forgotten when idle. Bypasses past their timeout go. */
void sb_judged_run_sweep(sb_judged_run *jr, double now);

/* Stops judging: the connections are forgotten (their held packets
 * dropped), the run's packets from now on are dropped; bypass jobs under
 * way end later, each with its release. */
void sb_judged_run_stop(sb_judged_run *jr);

/* Frees jr (NULL is fine), stopped, once release came for every hold; on
 * any thread. */
void sb_judged_run_close(sb_judged_run *jr);

#endif
