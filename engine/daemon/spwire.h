/* spwire.h - the bytes of nng's SP protocols as the daemon's server reads
 * and writes them (SPEC.md, "Sockets"): the connection header, the framing
 * of messages, a request's backtrace. No I/O and no allocation: the
 * decoder is a struct the caller owns, fed the bytes a peer sends in
 * pieces of any size; it hands a message's body back as pieces of what it
 * was given, never copied. sp.c is its one user on the server side; the
 * clients are nng's.
 *
 * The wire (nng 1.5):
 *   connection header, each way: 00 53 50 00, the sender's protocol (16-bit
 *     big-endian), 00 00;
 *   a message over a unix socket: 01, its length (64-bit big-endian), its
 *     bytes; over TLS: its length (64-bit big-endian), its bytes;
 *   a request: a backtrace of 32-bit big-endian words, the last with its
 *     top bit set (the request id; at most SB_SPWIRE_BT_MAX words), then
 *     the body; the reply carries the same backtrace, then its body.
 * A subscriber sends nothing after its header that a publisher reads.
 */
#ifndef SB_SPWIRE_H
#define SB_SPWIRE_H

#include <stddef.h>
#include <stdint.h>

#define SB_SP_PROTO_PUB 0x20
#define SB_SP_PROTO_SUB 0x21
#define SB_SP_PROTO_REQ 0x30
#define SB_SP_PROTO_REP 0x31

#define SB_SPWIRE_HEADER 8 /* bytes of a connection header */
#define SB_SPWIRE_BT_MAX 8 /* words of a backtrace, as nng allows */
/* bytes before a reply's body: its message header and backtrace */
#define SB_SPWIRE_REPLY_HEAD (9 + 4 * SB_SPWIRE_BT_MAX)

/* What sb_spwire_next found. */
enum sb_spwire_ev {
	SB_SPWIRE_MORE,	  /* every byte given is taken: more are needed */
	SB_SPWIRE_HELLO,  /* the peer's header is in and names the protocol
			   * expected */
	SB_SPWIRE_HEAD,	  /* a request's message header and backtrace are in:
			   * bt, bt_len and body_len say what they hold */
	SB_SPWIRE_BODY,	  /* piece: bytes of the body; more are to come */
	SB_SPWIRE_END,	  /* piece: the last bytes of the body (none for an
			   * empty body); the request is whole */
	SB_SPWIRE_BAD,	  /* the peer broke the protocol; err says how */
	SB_SPWIRE_TOOBIG, /* a request's body is declared longer than
			   * max_body; body_len holds the length (for a
			   * length refused before its backtrace is read:
			   * the declared length less one word) */
};

/* A decoder of one connection's incoming bytes: its header, then, from a
 * REQ peer, requests; from a SUB peer, bytes taken and ignored. The fields
 * above the line are for the caller to read, as each says; those below are
 * the decoder's. */
struct sb_spwire_dec {
	uint8_t bt[4 * SB_SPWIRE_BT_MAX]; /* after HEAD: the backtrace, until
					   * the next HEAD */
	size_t bt_len;			  /* its bytes, a multiple of 4 */
	uint64_t body_len;		  /* after HEAD: the body's length */
	const char *err;		  /* after BAD: a static line */
	/* --- */
	int tls, peer, state;
	uint64_t max_body;
	uint8_t hold[SB_SPWIRE_HEADER + 1]; /* a header being read */
	size_t got;
	uint64_t msg_len, left; /* declared; bytes still to come */
};

/* Readies d for a connection whose peer speaks protocol peer
 * (SB_SP_PROTO_REQ or SB_SP_PROTO_SUB), over TLS (tls 1: no type byte in
 * a message header) or a unix socket, and whose request bodies may be up
 * to max_body bytes. */
void sb_spwire_dec_init(struct sb_spwire_dec *d, int tls, int peer, uint64_t max_body);

/* One step of decoding the n bytes at p (n may be 0): takes *used of them
 * (*used <= n) and says what it found. Call again with the bytes not
 * taken until it returns SB_SPWIRE_MORE, then again when more bytes come.
 * For BODY and END, *piece (*len bytes, inside the n at p) is the body's
 * next bytes; after HEAD the next step gives END at once for an empty
 * body, even with n 0. BAD and TOOBIG are final: every later call returns
 * them again and takes nothing. Whatever the bytes and however they are
 * cut, the events (pieces joined) and the byte at which each is decided
 * are the same; no byte outside the n given is read. */
enum sb_spwire_ev sb_spwire_next(struct sb_spwire_dec *d, const uint8_t *p, size_t n,
				 size_t *used, const uint8_t **piece, size_t *len);

/* 1 when d has taken part of a request (or a message header) and not yet
 * all of it; 0 between requests, before the header is done, and for a SUB
 * peer. */
int sb_spwire_dec_begun(const struct sb_spwire_dec *d);

/* Writes the connection header of protocol proto to h. */
void sb_spwire_header_put(uint8_t h[SB_SPWIRE_HEADER], int proto);

/* Writes the message header of a len-byte message to p, for TLS (8 bytes)
 * or a unix socket (9), and returns its size. */
size_t sb_spwire_msg_put(uint8_t *p, int tls, uint64_t len);

/* Writes what goes before the body of a reply of body_len bytes to p (at
 * least SB_SPWIRE_REPLY_HEAD bytes of room): its message header, then the
 * backtrace bt of the request (bt_len bytes, at most 4 *
 * SB_SPWIRE_BT_MAX). Returns the bytes written. */
size_t sb_spwire_reply_put(uint8_t *p, int tls, const uint8_t *bt, size_t bt_len,
			   uint64_t body_len);

#endif
