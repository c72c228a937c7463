/* fuzz_sp.c - libFuzzer target for the SP wire decoder (engine/daemon/
 * spwire.h), which reads every byte a local or remote peer sends the
 * daemon's sockets.
 *
 * The input is a hostile peer: byte 0 chooses the framing (bit 0: TLS),
 * the peer (bit 1: SUB, else REQ), whether a right connection header goes
 * first (bit 2), and the body limit with byte 1 (bit 3: UINT64_MAX less
 * byte 1, else byte 1); bytes 2-3 seed how the stream is cut; the rest is
 * the stream. It is decoded twice, whole and cut in pieces of 0 to 600
 * bytes, each piece in its own buffer of its exact size (so ASan sees a
 * read past it), and each run's events, with the byte at which each is
 * decided, must be those of a model that reads the whole stream at once.
 * Also: a body never exceeds the limit, a piece lies inside the bytes just
 * taken, BAD and TOOBIG stay, and each request whole is read back the same
 * from the reply sb_spwire_reply_put frames for it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/bytes.h"
#include "engine/daemon/spwire.h"
#include "tests/fuzz/fuzz.h"

#define STREAM_MAX 8192
#define TR_MAX	   (4 * STREAM_MAX)

/* What a run says: events with the stream offset of each, and the bodies'
 * bytes, joined. */
struct tr {
	uint8_t b[TR_MAX];
	size_t n;
};

static void tr_put(struct tr *t, const void *p, size_t n)
{
	CHECK(t->n + n <= TR_MAX);
	memcpy(t->b + t->n, p, n);
	t->n += n;
}

/* An event: its letter and the offset of the byte that decided it. */
static void tr_ev(struct tr *t, char what, uint64_t off)
{
	uint8_t e[9];

	e[0] = (uint8_t)what;
	sb_be64_put(e + 1, off);
	tr_put(t, e, 9);
}

static void tr_head(struct tr *t, uint64_t off, const uint8_t *bt, size_t bt_len,
		    uint64_t body_len)
{
	uint8_t l[8];

	tr_ev(t, 'H', off);
	tr_put(t, bt, bt_len);
	sb_be64_put(l, body_len);
	tr_put(t, l, 8);
}

static void tr_bad(struct tr *t, uint64_t off, const char *why)
{
	tr_ev(t, 'X', off);
	tr_put(t, why, strlen(why));
}

static void tr_toobig(struct tr *t, uint64_t off, uint64_t len)
{
	uint8_t l[8];

	tr_ev(t, 'T', off);
	sb_be64_put(l, len);
	tr_put(t, l, 8);
}

/* The model: reads the whole stream s (n bytes) from a peer of protocol
 * peer, as SPEC.md says, into t. */
static void model(const uint8_t *s, size_t n, int tls, int peer, uint64_t max,
		  struct tr *t)
{
	const size_t hl = tls ? 8 : 9;
	size_t pos = 8, bt_len;
	uint64_t len, body;

	if (n < 8) {
		tr_ev(t, 'M', 0);
		return;
	}
	if (memcmp(s, "\0SP\0", 4) || s[6] || s[7] || (s[4] << 8 | s[5]) != peer) {
		tr_bad(t, 8, "not an SP client of this socket (bad header)");
		return;
	}
	tr_ev(t, 'O', 8);
	if (peer == SB_SP_PROTO_SUB) {
		tr_ev(t, 'M', 0);
		return;
	}
	for (;;) {
		if (pos == n) {
			tr_ev(t, 'M', 0);
			return;
		}
		if (n - pos < hl) {
			tr_ev(t, 'M', 1);
			return;
		}
		if (!tls && s[pos] != 1) {
			tr_bad(t, pos + hl, "not an SP message (bad type byte)");
			return;
		}
		len = sb_be64_get(s + pos + hl - 8);
		pos += hl;
		if (len < 4) {
			tr_bad(t, pos, "a request without its id");
			return;
		}
		if (len > 32 && len - 32 > max) {
			tr_toobig(t, pos, len - 4);
			return;
		}
		for (bt_len = 4;; bt_len += 4) {
			if (n - pos < bt_len) {
				tr_ev(t, 'M', 1);
				return;
			}
			if (s[pos + bt_len - 4] & 0x80)
				break;
			if (bt_len == 32) {
				tr_bad(t, pos + bt_len,
				       "a request with more than 8 hops");
				return;
			}
			if (bt_len + 4 > len) {
				tr_bad(t, pos + bt_len, "a request shorter than its id");
				return;
			}
		}
		body = len - bt_len;
		if (body > max) {
			tr_toobig(t, pos + bt_len, body);
			return;
		}
		tr_head(t, pos + bt_len, s + pos, bt_len, body);
		pos += bt_len;
		if (n - pos < body) {
			tr_put(t, s + pos, n - pos);
			{
				tr_ev(t, 'M', 1);
				return;
			}
		}
		tr_put(t, s + pos, (size_t)body);
		pos += (size_t)body;
		tr_ev(t, 'E', pos);
	}
}

/* Frames the reply to a request (backtrace bt, body), as the server does,
 * and checks that a REQ decoder reads it back as the same request. */
static void check_reply(int tls, const uint8_t *bt, size_t bt_len, const uint8_t *body,
			size_t len)
{
	static uint8_t msg[SB_SPWIRE_HEADER + SB_SPWIRE_REPLY_HEAD + STREAM_MAX];
	struct sb_spwire_dec d;
	const uint8_t *piece;
	size_t n, used, plen;

	sb_spwire_header_put(msg, SB_SP_PROTO_REQ);
	n = SB_SPWIRE_HEADER;
	n += sb_spwire_reply_put(msg + n, tls, bt, bt_len, len);
	memcpy(msg + n, body, len);
	n += len;
	sb_spwire_dec_init(&d, tls, SB_SP_PROTO_REQ, len);
	CHECK(sb_spwire_next(&d, msg, n, &used, &piece, &plen) == SB_SPWIRE_HELLO);
	CHECK(used == SB_SPWIRE_HEADER);
	CHECK(sb_spwire_next(&d, msg + used, n - used, &used, &piece, &plen) ==
	      SB_SPWIRE_HEAD);
	CHECK(d.bt_len == bt_len && !memcmp(d.bt, bt, bt_len) && d.body_len == len);
	CHECK(sb_spwire_next(&d, msg + n - len, len, &used, &piece, &plen) ==
	      SB_SPWIRE_END);
	CHECK(used == len && plen == len && !memcmp(piece, body, len));
}

/* The decoder's state across a run. */
struct run {
	struct sb_spwire_dec d;
	struct tr *t;
	uint64_t max, taken; /* the stream's bytes taken so far */
	uint8_t body[STREAM_MAX];
	size_t body_len;
	int over; /* BAD or TOOBIG came */
};

/* Feeds the n bytes at p to r's decoder until it wants more. */
static void run_feed(struct run *r, const uint8_t *p, size_t n)
{
	struct sb_spwire_dec *d = &r->d;
	const uint8_t *piece;
	size_t off = 0, used, len;
	enum sb_spwire_ev ev;

	while (!r->over) {
		ev = sb_spwire_next(d, p + off, n - off, &used, &piece, &len);
		CHECK(used <= n - off);
		if (ev == SB_SPWIRE_BODY || ev == SB_SPWIRE_END) {
			CHECK(piece == p + off &&
			      len == used); /* inside the bytes taken */
			CHECK(r->body_len + len <= d->body_len);
			memcpy(r->body + r->body_len, piece, len);
			r->body_len += len;
			tr_put(r->t, piece, len);
		}
		off += used;
		r->taken += used;
		switch (ev) {
		case SB_SPWIRE_MORE: CHECK(off == n); return;
		case SB_SPWIRE_HELLO: tr_ev(r->t, 'O', r->taken); break;
		case SB_SPWIRE_HEAD:
			CHECK(d->body_len <= r->max);
			CHECK(d->bt_len >= 4 && d->bt_len <= 32 && d->bt_len % 4 == 0);
			tr_head(r->t, r->taken, d->bt, d->bt_len, d->body_len);
			r->body_len = 0;
			break;
		case SB_SPWIRE_BODY: CHECK(len > 0 && r->body_len < d->body_len); break;
		case SB_SPWIRE_END:
			CHECK(r->body_len == d->body_len);
			CHECK(!sb_spwire_dec_begun(d));
			tr_ev(r->t, 'E', r->taken);
			check_reply(d->tls, d->bt, d->bt_len, r->body, r->body_len);
			break;
		case SB_SPWIRE_BAD:
		case SB_SPWIRE_TOOBIG:
			if (ev == SB_SPWIRE_BAD)
				tr_bad(r->t, r->taken, d->err);
			else
				tr_toobig(r->t, r->taken, d->body_len);
			CHECK(sb_spwire_next(d, p + off, n - off, &used, &piece, &len) ==
			      ev);
			CHECK(used == 0);
			r->over = 1;
			break;
		}
	}
}

/* Decodes stream (n bytes) cut by seed (0: whole) into t. */
static void run(const uint8_t *stream, size_t n, int tls, int peer, uint64_t max,
		uint32_t seed, struct tr *t)
{
	static struct run r;
	static const size_t cuts[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 13, 17, 33, 64, 600};
	size_t pos = 0;

	memset(&r, 0, sizeof r);
	sb_spwire_dec_init(&r.d, tls, peer, max);
	r.t = t;
	r.max = max;
	while (pos < n && !r.over) {
		size_t c = n - pos;
		uint8_t *piece;
		if (seed) {
			seed = seed * 1103515245u + 12345u;
			c = cuts[(seed >> 16) % (sizeof cuts / sizeof cuts[0])];
			c = c < n - pos ? c : n - pos;
		}
		CHECK((piece = malloc(c ? c : 1)));
		memcpy(piece, stream + pos, c);
		run_feed(&r, piece, c);
		free(piece);
		pos += c;
	}
	if (!r.over) {
		run_feed(&r, stream + n, 0); /* what needs no more bytes */
		tr_ev(t, 'M', (uint64_t)sb_spwire_dec_begun(&r.d));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct tr want, whole, cut;
	static uint8_t stream[SB_SPWIRE_HEADER + STREAM_MAX];
	int tls, peer;
	uint64_t max;
	uint32_t seed;
	size_t n = 0;

	if (size < 4 || size - 4 > STREAM_MAX)
		return 0;
	tls = data[0] & 1;
	peer = data[0] & 2 ? SB_SP_PROTO_SUB : SB_SP_PROTO_REQ;
	max = data[0] & 8 ? UINT64_MAX - data[1] : data[1];
	seed = (uint32_t)(data[2] << 8 | data[3]) | 1;
	if (data[0] & 4) {
		sb_spwire_header_put(stream, peer);
		n = SB_SPWIRE_HEADER;
	}
	memcpy(stream + n, data + 4, size - 4);
	n += size - 4;
	want.n = whole.n = cut.n = 0;
	model(stream, n, tls, peer, max, &want);
	run(stream, n, tls, peer, max, 0, &whole);
	run(stream, n, tls, peer, max, seed, &cut);
	CHECK(whole.n == want.n && !memcmp(whole.b, want.b, want.n));
	CHECK(cut.n == want.n && !memcmp(cut.b, want.b, want.n));
	return 0;
}
