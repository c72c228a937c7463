/* sniff.h - the name a guest's TCP connection asks for, read before any of
 * its bytes reach the server.
 *
 * A hostname grant's TLS and HTTP ports go through the judge (judge.h).
 * It holds the client's bytes and gives them here; this parser says where
 * each request starts and which host it names (TLS SNI, HTTP Host), so
 * the judge lets a request go only once its name is checked against the
 * grants. That stops domain fronting
 * on shared CDN addresses.
 *
 * The stream is one of:
 *   TLS   (first byte 0x16): handshake records holding one ClientHello;
 *         its server_name is the name. After it the stream is opaque.
 *         With encrypted_client_hello the name checked is the outer SNI
 *         (the public name); the inner one is encrypted and not visible.
 *   HTTP  HTTP/1.0 or 1.1 requests, each checked: request line, header
 *         lines, then a body framed by Content-Length or chunked coding
 *         (RFC 9112). The name is Host's, or the absolute-form target's
 *         when HTTP/1.0 has no Host. CONNECT, obs-fold, bare LF, control
 *         bytes, a missing or repeated Host (1.1), Transfer-Encoding other
 *         than "chunked", Transfer-Encoding with Content-Length, repeated
 *         Content-Length, a target that is not origin-form, "*" or an
 *         http(s) absolute-form naming the Host's host are refused. After
 *         a request with Upgrade the stream is opaque.
 * Anything else (an SSH banner, SSLv2) is refused.
 *
 * Names are returned in lower case with no trailing dot or port; they hold
 * letters, digits, '-', '_' and '.' (no empty label), or are an IPv4
 * address, or an IPv6 one (from "[v6]" in Host, returned without brackets).
 *
 * Pure: no allocation, no I/O; memory is the struct alone. One struct per
 * connection, used by one thread at a time.
 */
#ifndef SB_SNIFF_H
#define SB_SNIFF_H

#include <stddef.h>
#include <stdint.h>

#include "engine/error.h"

#define SB_SNIFF_HOLD	  (16384 + 5) /* bytes the caller holds at most */
#define SB_SNIFF_HEAD_MAX 16384	      /* an HTTP request head, with its CRLFs */

enum sb_sniff_verdict {
	SB_SNIFF_MORE,	 /* undecided: hold the bytes, feed again with more */
	SB_SNIFF_NAME,	 /* a request naming `name` starts: check, then pass */
	SB_SNIFF_PASS,	 /* *pass bytes need no check (body, chunk framing) */
	SB_SNIFF_OPAQUE, /* forward everything from here on, feed no more */
	SB_SNIFF_BAD = SB_ERR_PROTO, /* refused: close the connection */
};

/* One connection's parser state. The caller embeds it; every field but ech
 * is private to sniff.c. */
struct sb_sniff {
	uint8_t mode; /* private: what the next bytes are */
	/* private, TLS: bytes of whole records read, the handshake bytes in
	 * them, the ClientHello's length with its header (0: not yet known) */
	size_t off, got, hello;
	/* private, HTTP head: (off: where the next line starts) the request
	 * target's and the Host value's places in the held bytes */
	size_t target_at, target_len, host_at, host_len;
	/* private, HTTP head: 1.1 or 1.0; Host, Content-Length and
	 * Transfer-Encoding headers seen; an Upgrade header seen */
	uint8_t http11, hosts, lengths, chunked, upgrade;
	uint64_t left; /* private: body or chunk bytes not yet passed */
	uint8_t ech;   /* public: the ClientHello had encrypted_client_hello */
};

/* Readies s for a new connection's client-to-server bytes. */
void sb_sniff_init(struct sb_sniff *s);

/* Reads the client's bytes not yet forwarded: buf holds all n of them,
 * oldest first (the same bytes again, plus any new, after SB_SNIFF_MORE;
 * n <= SB_SNIFF_HOLD). Never reads past n, never keeps buf. Returns
 *   SB_SNIFF_MORE    no decision yet; *pass is 0.
 *   SB_SNIFF_NAME    a request starts here, naming name (a NUL-terminated
 *                    string of name_cap bytes at most; "" for TLS without
 *                    SNI or HTTP/1.0 without a host). If the name is
 *                    granted, forward *pass bytes (the ClientHello's
 *                    records, or the request line and headers), drop them,
 *                    and feed the rest. SB_NET_HOST_MAX bytes always fit.
 *   SB_SNIFF_PASS    forward and drop *pass bytes (> 0), feed the rest.
 *   SB_SNIFF_OPAQUE  forward these bytes and all later ones unread.
 *   SB_SNIFF_BAD     refused: close. A one-line detail (holding no guest
 *                    bytes) is in sb_errmsg(SB_SNIFF_BAD). Also when n
 *                    reaches SB_SNIFF_HOLD undecided, or the name does not
 *                    fit in name_cap.
 * s->ech is valid after a TLS SB_SNIFF_NAME.
 * Caution: after Upgrade the stream is opaque even if the server declines
 * the upgrade and goes on reading requests; a caller that must check those
 * has to see the server's 101 first. */
int sb_sniff_feed(struct sb_sniff *s, const uint8_t *buf, size_t n, size_t *pass,
		  char *name, size_t name_cap);

/* Bytes the caller may forward unread now: the rest of a Content-Length
 * body or of a chunk's data, once nothing is held (0 elsewhere). */
uint64_t sb_sniff_unread(const struct sb_sniff *s);

/* Says that k of those bytes (k <= sb_sniff_unread) went on unread. */
void sb_sniff_skip(struct sb_sniff *s, uint64_t k);

#endif
