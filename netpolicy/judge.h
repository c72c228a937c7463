/* judge.h - a TLS connection to a granted name's address judged by its
 * ClientHello's server name while its packets go through the host, segment
 * by segment, with no TCP endpoint of the host's own in between.
 *
 * The enforcer hands each TCP segment of such a connection (both ways)
 * here while the connection is judged, and does what the answer says with
 * the packet: let it through, keep it waiting, drop it, or reset the
 * connection. Once the server has acknowledged every byte the name was
 * read from, the connection needs no more judging and the kernel forwards
 * it. The rules, all of which a hostile guest's TCP stack is held to:
 *   - The guest's stream is kept from its first byte (the one after its
 *     SYN's sequence number) up to the end of its ClientHello's records,
 *     and judged only in order: a segment that leaves a gap is dropped (the
 *     guest sends the missing bytes again), and until the ClientHello is
 *     complete its segments wait, so nothing of it reaches the server
 *     before its name is granted.
 *   - A segment that carries kept bytes again must carry the same bytes:
 *     one that differs resets the connection. A server that missed a
 *     segment the judge saw gets only what the judge saw.
 *   - The judge lets the connection go only when the server acknowledges
 *     all of the ClientHello: from then on the server ignores any other
 *     copy of those bytes, whatever the guest sends.
 *   - Urgent data, data on a SYN or an RST, a second SYN with another sequence
 *     number, data before the stream starts, a stream that is not TLS, a
 *     FIN or a ClientHello over SB_SNIFF_HOLD bytes before the name is
 *     read: each resets the connection.
 *
 * Pure: no allocation, no I/O; memory is the struct alone. One struct per
 * connection, used by one thread at a time.
 */
#ifndef SB_JUDGE_H
#define SB_JUDGE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/error.h"
#include "netpolicy/netpolicy.h"
#include "netpolicy/sniff.h"

/* TCP header flags, as in the header's 14th byte. */
#define SB_TCP_FIN 0x01
#define SB_TCP_SYN 0x02
#define SB_TCP_RST 0x04
#define SB_TCP_ACK 0x10
#define SB_TCP_URG 0x20

enum sb_judge_verdict {
	SB_JUDGE_ACCEPT, /* let the segment through */
	SB_JUDGE_HOLD,	 /* keep it waiting: the ClientHello is not complete */
	SB_JUDGE_DROP,	 /* drop it; the connection goes on */
	SB_JUDGE_NAME,	 /* the ClientHello is complete and names j->name:
			  * check it, then sb_judge_allow and let the waiting
			  * segments through, oldest first, then this one; or
			  * refuse as for SB_JUDGE_KILL */
	SB_JUDGE_PASS,	 /* the server acknowledged all of the ClientHello: let
			  * this and every later segment through unjudged */
	SB_JUDGE_KILL = SB_ERR_DENIED, /* drop it and the waiting ones, reset
					* the connection; why is in
					* sb_errmsg(SB_ERR_DENIED) */
};

/* One TCP segment, as the judge reads it. */
struct sb_judge_seg {
	int from_guest;	     /* 1: the guest sent it, 0: the server (by the
			      * link it came in on, never by its addresses) */
	uint32_t seq, ack;   /* its sequence and acknowledgment numbers */
	uint8_t flags;	     /* SB_TCP_* */
	const uint8_t *data; /* its payload, len bytes */
	size_t len;
};

enum sb_judge_state {
	SB_JUDGE_NEW,	  /* no SYN from the guest seen */
	SB_JUDGE_READING, /* reading the ClientHello */
	SB_JUDGE_ALLOWED, /* named and granted: awaiting the server's ACK */
	SB_JUDGE_PASSED,  /* the kernel forwards it */
	SB_JUDGE_KILLED,
};

/* One connection's judge. The caller embeds it; state and name are
 * public, the rest private to judge.c. */
struct sb_judge {
	enum sb_judge_state state;
	char name[SB_NET_HOST_MAX]; /* after SB_JUDGE_NAME: the server name ("":
				     * none) */
	uint32_t isn;		    /* private: the guest's SYN's sequence number */
	size_t nkept;		    /* private: stream bytes kept, from its first */
	size_t judged;		    /* private: the ClientHello's records' bytes */
	struct sb_sniff sn;
	uint8_t kept[SB_SNIFF_HOLD];
};

/* Readies j for a new connection. */
void sb_judge_init(struct sb_judge *j);

/* Judges segment s of j's connection: one of enum sb_judge_verdict. After
 * SB_JUDGE_KILL j stays killed: every later segment is SB_JUDGE_KILL. */
int sb_judge_seg(struct sb_judge *j, const struct sb_judge_seg *s);

/* Says that the name of SB_JUDGE_NAME is granted: the connection waits for
 * the server's ACK from here. */
void sb_judge_allow(struct sb_judge *j);

#endif
