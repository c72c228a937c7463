/* judge.h - a connection to a granted name's address judged by the name
 * it asks for while its packets go through the host, segment by segment,
 * with no TCP endpoint of the host's own in between: a TLS ClientHello's
 * server name, or every HTTP request's Host.
 *
 * The enforcer hands each TCP segment of such a connection here while the
 * connection is judged (TLS: both ways; HTTP: the guest's segments that
 * carry data or SYN, FIN, RST or URG, and the server's SYN-ACK and, while
 * an Upgrade awaits its answer, all of its), and does what the answer says with the
 * packet: let it through, keep it waiting, drop it, or reset the
 * connection. The rules, all of which a hostile guest's TCP stack is held
 * to:
 *   - The guest's stream is read from its first byte (the one after its
 *     SYN's sequence number), in order: a segment that leaves a gap is
 *     dropped (the guest sends the missing bytes again), and a segment
 *     that carries bytes of a name not yet read whole waits, so nothing of
 *     a ClientHello or request head reaches the server before its name is
 *     granted.
 *   - A segment that carries checked bytes again must carry the same
 *     bytes: one that differs resets the connection. A server that missed
 *     a segment the judge saw gets only what the judge saw. Checked bytes
 *     are a ClientHello's records, and an HTTP stream's framing: request
 *     heads, chunk-size lines, the CRLF after a chunk's data, trailers. A
 *     body's bytes are not: whatever the guest sends in them, the server
 *     reads them as body, as the checked framing says; nor need they come
 *     in order, so a gap within a body is none.
 *   - TLS: the judge lets the connection go only when the server
 *     acknowledges all of the ClientHello: from then on the server ignores
 *     any other copy of those bytes, whatever the guest sends.
 *   - HTTP: the connection is judged while it lasts. The judge keeps the
 *     last SB_JUDGE_PROTECT bytes of framing (in SB_JUDGE_PROTECTED runs
 *     at most); a segment that carries again bytes older than those resets
 *     the connection. An Upgrade (its connection's first request, nothing
 *     after it before the answer) waits for the server's answer: 101 lets
 *     the connection go; any other ends it for the guest, which may send
 *     no more data.
 *   - Urgent data, data on a SYN or an RST, a second SYN with another sequence
 *     number, data before the stream starts, a stream that is not what the
 *     port is for (TLS on 443 and 8443, HTTP on 80 and 8080), a FIN or a
 *     ClientHello or request head over SB_SNIFF_HOLD bytes before its name
 *     is read: each resets the connection.
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

#define SB_JUDGE_PROTECTED  64		/* HTTP: runs of framing kept */
#define SB_JUDGE_PROTECT    (2 * 16384) /* HTTP: bytes of framing kept */
#define SB_JUDGE_ANSWER_MAX 4096	/* HTTP: an Upgrade's interim answers */

enum sb_judge_verdict {
	SB_JUDGE_ACCEPT, /* let the segment through (and, after SB_JUDGE_NAME,
			  * the waiting ones first, oldest first) */
	SB_JUDGE_HOLD,	 /* keep it waiting: a name is not read whole (after
			  * SB_JUDGE_NAME, the waiting ones go first) */
	SB_JUDGE_DROP,	 /* drop it; the connection goes on */
	SB_JUDGE_NAME,	 /* a ClientHello or request head is read whole and
			  * names j->name: check it, then call sb_judge_allow
			  * with the same segment and do what it says; or
			  * refuse as for SB_JUDGE_KILL */
	SB_JUDGE_PASS,	 /* let this and every later segment through unjudged:
			  * TLS: the server acknowledged all of the
			  * ClientHello; HTTP: the server took an Upgrade */
	SB_JUDGE_AWAIT,	 /* HTTP: let it through (it ends an Upgrade request)
			  * and hand the server's segments here too, until
			  * SB_JUDGE_PASS or the end */
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
	SB_JUDGE_NEW,	   /* no SYN from the guest seen */
	SB_JUDGE_READING,  /* reading the ClientHello, or HTTP requests */
	SB_JUDGE_ALLOWED,  /* TLS: named and granted: awaiting the server's ACK */
	SB_JUDGE_ANSWER,   /* HTTP: an Upgrade awaits the server's answer */
	SB_JUDGE_DECLINED, /* HTTP: the server declined it: no more data */
	SB_JUDGE_PASSED,   /* the kernel forwards it */
	SB_JUDGE_KILLED,
};

/* One connection's judge. The caller embeds it; state, name and requests
 * are public, the rest private to judge.c. */
struct sb_judge {
	enum sb_judge_state state;
	char name[SB_NET_HOST_MAX]; /* after SB_JUDGE_NAME: the name asked for
				     * ("": none) */
	uint64_t requests;	    /* HTTP requests granted */
	int http;		    /* private: the port is one of HTTP */
	uint32_t isn;		    /* private: the guest's SYN's sequence number */
	size_t nkept;		    /* private: bytes in kept */
	size_t judged;		    /* private, TLS: the ClientHello's records' bytes */
	/* private, HTTP: stream bytes read (kept holds the last nkept); bytes
	 * of the segment in hand read; the server's sequence number of its
	 * answer's first byte, and answer bytes read */
	uint64_t front;
	size_t at;
	uint32_t answer_seq;
	size_t answer_got, nanswer;
	/* private, HTTP: the framing kept, oldest first, its bytes in prot;
	 * offsets below floor may hold framing no longer kept */
	struct sb_judge_range {
		uint64_t off;
		size_t len, at;
	} ranges[SB_JUDGE_PROTECTED];
	size_t nranges, nprot;
	uint64_t floor;
	uint64_t fence; /* private, HTTP: new bytes from here on are dropped */
	struct sb_sniff sn;
	uint8_t kept[SB_SNIFF_HOLD];	     /* private: TLS: the stream from its first
					      * byte; HTTP: bytes not yet checked */
	uint8_t answer[SB_JUDGE_ANSWER_MAX]; /* private, HTTP: an Upgrade's
					      * answer, from its status line */
	uint8_t prot[SB_JUDGE_PROTECT];
};

/* Readies j for a new connection to a TLS port (http 0) or an HTTP one. */
void sb_judge_init(struct sb_judge *j, int http);

/* Judges segment s of j's connection: one of enum sb_judge_verdict. After
 * SB_JUDGE_KILL j stays killed: every later segment is SB_JUDGE_KILL. */
int sb_judge_seg(struct sb_judge *j, const struct sb_judge_seg *s);

/* Says that the name of SB_JUDGE_NAME is granted, and goes on judging the
 * segment s it came with (the same one): one of enum sb_judge_verdict, as
 * for sb_judge_seg. TLS: SB_JUDGE_ACCEPT (the connection waits for the
 * server's ACK from here). HTTP: the segment may hold more requests. */
int sb_judge_allow(struct sb_judge *j, const struct sb_judge_seg *s);

/* HTTP: 1 when the bytes the judge reads next, from the guest's sequence
 * number *seq on, are *len bytes of a body it need not read (a segment
 * that lies within them may go past the judge); else 0. */
int sb_judge_body(const struct sb_judge *j, uint32_t *seq, uint64_t *len);

/* HTTP: on 1, drops the guest's new bytes from 2^31 bytes past what it
 * read so far on (while a body's bytes go past the judge, as
 * sb_judge_body allowed, its sequence numbers must not come round
 * again); on 0, no longer. */
void sb_judge_fence(struct sb_judge *j, int on);

#endif
