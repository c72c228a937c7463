/* test_spwire.c - the SP wire codec (engine/daemon/spwire.h): a peer's
 * bytes cut at every byte, one at a time, oversized and impossible
 * lengths, bad headers, bytes after the header; and the bytes the server
 * writes. Every piece given to the decoder is its own heap buffer of its
 * exact size, so a read past it fails under ASan (make asan).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "engine/bytes.h"
#include "engine/daemon/spwire.h"

#define ID(i)	 (0x80000000u | (uint32_t)(i))
#define MSGS	 8
#define BODY_MAX 256

/* What the decoder said over all the bytes fed to it. */
struct got {
	int hello;
	unsigned heads, msgs; /* HEADs; requests whole (END) */
	uint8_t bt[MSGS][4 * SB_SPWIRE_BT_MAX];
	size_t bt_len[MSGS];
	uint8_t body[MSGS][BODY_MAX];
	size_t body_len[MSGS];
	enum sb_spwire_ev last; /* MORE, or BAD or TOOBIG (then it stopped) */
	size_t taken;		/* bytes taken in all */
};

/* Feeds the n bytes at p, copied to a buffer of exactly n bytes, to d
 * until it wants more (or is over); adds what it says to g. */
static void feed(struct sb_spwire_dec *d, const uint8_t *p, size_t n, struct got *g)
{
	uint8_t *buf = malloc(n ? n : 1);
	const uint8_t *piece;
	size_t off = 0, used, len;
	enum sb_spwire_ev ev;

	assert_non_null(buf);
	memcpy(buf, p, n);
	for (;;) {
		ev = sb_spwire_next(d, buf + off, n - off, &used, &piece, &len);
		assert_true(used <= n - off);
		off += used;
		g->taken += used;
		g->last = ev;
		if (ev == SB_SPWIRE_MORE || ev == SB_SPWIRE_BAD || ev == SB_SPWIRE_TOOBIG)
			break;
		if (ev == SB_SPWIRE_HELLO) {
			assert_false(g->hello);
			g->hello = 1;
		} else if (ev == SB_SPWIRE_HEAD) {
			assert_true(g->heads < MSGS);
			memcpy(g->bt[g->heads], d->bt, d->bt_len);
			g->bt_len[g->heads] = d->bt_len;
			g->body_len[g->heads++] = 0;
		} else { /* BODY, END: a piece of what was just taken */
			unsigned m = g->heads - 1;
			assert_ptr_equal(piece, buf + off - used);
			assert_int_equal(len, used);
			assert_true(g->body_len[m] + len <= d->body_len);
			if (g->body_len[m] + len <= BODY_MAX)
				memcpy(g->body[m] + g->body_len[m], piece, len);
			g->body_len[m] += len;
			if (ev == SB_SPWIRE_END) {
				assert_int_equal(g->body_len[m], d->body_len);
				g->msgs++;
			}
		}
	}
	if (ev == SB_SPWIRE_MORE)
		assert_int_equal(off, n);
	free(buf);
}

/* Appends a message (the nw words of bt, then body) framed for tls to
 * out at *n; *length declares the message's length (NULL: its real one). */
static void put_msg(uint8_t *out, size_t *n, int tls, const uint32_t *bt, size_t nw,
		    const char *body, const uint64_t *length)
{
	size_t len = strlen(body);

	*n += sb_spwire_msg_put(out + *n, tls, length ? *length : 4 * nw + len);
	for (size_t i = 0; i < nw; i++) {
		out[(*n)++] = (uint8_t)(bt[i] >> 24);
		out[(*n)++] = (uint8_t)(bt[i] >> 16);
		out[(*n)++] = (uint8_t)(bt[i] >> 8);
		out[(*n)++] = (uint8_t)bt[i];
	}
	memcpy(out + *n, body, len);
	*n += len;
}

/* A REQ peer's stream: its header, then three requests (two hops and an
 * id; an empty body; one word). ends[] gets the offset just past each. */
static size_t stream3(uint8_t *out, int tls, size_t ends[3])
{
	const uint32_t bt1[] = {7, 0x1234, ID(1)}, bt2[] = {ID(2)}, bt3[] = {ID(3)};
	size_t n = SB_SPWIRE_HEADER;

	sb_spwire_header_put(out, SB_SP_PROTO_REQ);
	put_msg(out, &n, tls, bt1, 3, "hello", NULL);
	ends[0] = n;
	put_msg(out, &n, tls, bt2, 1, "", NULL);
	ends[1] = n;
	put_msg(out, &n, tls, bt3, 1, "third", NULL);
	ends[2] = n;
	return n;
}

static void assert_stream3(const struct got *g, int tls)
{
	static const char *bodies[] = {"hello", "", "third"};

	assert_true(g->hello);
	assert_int_equal(g->msgs, 3);
	assert_int_equal(g->heads, 3);
	assert_int_equal(g->bt_len[0], 12);
	assert_memory_equal(g->bt[0], "\0\0\0\x07\0\0\x12\x34\x80\0\0\x01", 12);
	assert_int_equal(g->bt_len[1], 4);
	assert_memory_equal(g->bt[1], "\x80\0\0\x02", 4);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(g->body_len[i], strlen(bodies[i]));
		assert_memory_equal(g->body[i], bodies[i], g->body_len[i]);
	}
	assert_int_equal(g->last, SB_SPWIRE_MORE);
	(void)tls;
}

/* Truncation at every byte: the first k bytes give what is whole in
 * them and no more (an empty body is whole with its backtrace), the
 * decoder says whether a request is begun, and the rest completes the
 * same three requests. Over a unix socket and TLS. */
static void test_every_cut(void **state)
{
	uint8_t s[256];
	size_t ends[3];

	(void)state;
	for (int tls = 0; tls <= 1; tls++) {
		size_t n = stream3(s, tls, ends);
		for (size_t k = 0; k <= n; k++) {
			struct sb_spwire_dec d;
			struct got g = {0};
			unsigned whole = (k >= ends[0]) + (k >= ends[1]) + (k >= ends[2]);
			int boundary = k == SB_SPWIRE_HEADER || k == ends[0] ||
				       k == ends[1] || k == ends[2];
			sb_spwire_dec_init(&d, tls, SB_SP_PROTO_REQ, 1024);
			feed(&d, s, k, &g);
			assert_int_equal(g.taken, k);
			assert_int_equal(g.last, SB_SPWIRE_MORE);
			assert_int_equal(g.hello, k >= SB_SPWIRE_HEADER);
			assert_int_equal(g.msgs, whole);
			assert_int_equal(sb_spwire_dec_begun(&d),
					 k > SB_SPWIRE_HEADER && !boundary);
			feed(&d, s + k, n - k, &g);
			assert_int_equal(g.taken, n);
			assert_stream3(&g, tls);
			assert_false(sb_spwire_dec_begun(&d));
		}
	}
}

/* One byte per call, and calls with no bytes between them: the same. */
static void test_one_byte_each(void **state)
{
	uint8_t s[256];
	size_t ends[3];

	(void)state;
	for (int tls = 0; tls <= 1; tls++) {
		size_t n = stream3(s, tls, ends);
		struct sb_spwire_dec d;
		struct got g = {0};
		sb_spwire_dec_init(&d, tls, SB_SP_PROTO_REQ, 1024);
		for (size_t k = 0; k < n; k++) {
			feed(&d, s + k, 1, &g);
			feed(&d, s + k, 0, &g);
		}
		assert_int_equal(g.taken, n);
		assert_stream3(&g, tls);
	}
}

/* Declares a message of length len with the nw words of bt (at most 9),
 * then 8 bytes of body, to a fresh decoder with body limit max; returns what
 * it said. */
static struct got declare(int tls, uint64_t max, uint64_t len, const uint32_t *bt,
			  size_t nw, struct sb_spwire_dec *d)
{
	uint8_t s[SB_SPWIRE_HEADER + 9 + 4 * (SB_SPWIRE_BT_MAX + 1) + 8];
	size_t n = SB_SPWIRE_HEADER;
	struct got g = {0};

	sb_spwire_header_put(s, SB_SP_PROTO_REQ);
	put_msg(s, &n, tls, bt, nw, "12345678", &len);
	sb_spwire_dec_init(d, tls, SB_SP_PROTO_REQ, max);
	feed(d, s, n, &g);
	return g;
}

/* Lengths over the limit are refused on the byte that shows it: at the
 * message header when even the longest backtrace leaves too much body
 * (the length less one word reported), else at the backtrace's last word;
 * a body of exactly the limit passes, with one word or eight. The refusal
 * stays. No length wraps around, whatever the limit. */
static void test_oversized(void **state)
{
	const uint32_t one[] = {ID(1)}, eight[] = {1, 2, 3, 4, 5, 6, 7, ID(8)};
	const uint64_t max = 4096;
	struct sb_spwire_dec d;
	const uint8_t *piece;
	size_t used, len;
	struct got g;

	(void)state;
	for (int tls = 0; tls <= 1; tls++) {
		size_t hl = tls ? 8 : 9, at_hdr = SB_SPWIRE_HEADER + hl;
		struct {
			uint64_t len;
			size_t at;     /* bytes taken when refused */
			uint64_t body; /* the length reported */
		} big[] = {
		    {UINT64_MAX, at_hdr, UINT64_MAX - 4},
		    {1ull << 63, at_hdr, (1ull << 63) - 4},
		    {max + 33, at_hdr, max + 29},
		    {max + 32, at_hdr + 4, max + 28},
		    {max + 5, at_hdr + 4, max + 1},
		};
		for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
			g = declare(tls, max, big[i].len, one, 1, &d);
			assert_int_equal(g.last, SB_SPWIRE_TOOBIG);
			assert_int_equal(g.taken, big[i].at);
			assert_int_equal(d.body_len, big[i].body);
			assert_int_equal(g.heads, 0);
			assert_int_equal(sb_spwire_next(&d, (const uint8_t *)"x", 1,
							&used, &piece, &len),
					 SB_SPWIRE_TOOBIG);
			assert_int_equal(used, 0);
		}
		g = declare(tls, max, max + 4, one, 1, &d);
		assert_int_equal(g.last, SB_SPWIRE_MORE);
		assert_int_equal(g.heads, 1);
		assert_int_equal(d.body_len, max);
		g = declare(tls, max, max + 32, eight, 8, &d);
		assert_int_equal(g.heads, 1);
		assert_int_equal(d.bt_len, 32);
		assert_int_equal(d.body_len, max);
		/* no limit: the longest length is a body, not a wrap */
		g = declare(tls, UINT64_MAX, UINT64_MAX, one, 1, &d);
		assert_int_equal(g.heads, 1);
		assert_int_equal(d.body_len, UINT64_MAX - 4);
		assert_int_equal(g.taken, at_hdr + 4 + 8);
	}
}

/* Lengths and backtraces that cannot be: each refused on the byte that
 * shows it, with its reason. */
static void test_bad_messages(void **state)
{
	const uint32_t hop[] = {1, ID(2)}, nine[] = {1, 2, 3, 4, 5, 6, 7, 8, ID(9)};
	struct sb_spwire_dec d;
	struct got g;

	(void)state;
	for (int tls = 0; tls <= 1; tls++) {
		size_t at_hdr = SB_SPWIRE_HEADER + (tls ? 8 : 9);
		for (uint64_t len = 0; len < 4; len++) {
			g = declare(tls, 4096, len, hop, 2, &d);
			assert_int_equal(g.last, SB_SPWIRE_BAD);
			assert_int_equal(g.taken, at_hdr);
			assert_string_equal(d.err, "a request without its id");
		}
		for (uint64_t len = 4; len < 8; len++) { /* a hop, no room for the id */
			g = declare(tls, 4096, len, hop, 2, &d);
			assert_int_equal(g.last, SB_SPWIRE_BAD);
			assert_int_equal(g.taken, at_hdr + 4);
			assert_string_equal(d.err, "a request shorter than its id");
		}
		g = declare(tls, 4096, 8, hop, 2, &d); /* just room: an empty body */
		assert_int_equal(g.msgs, 1);
		assert_int_equal(g.body_len[0], 0);
		g = declare(tls, 4096, 40, nine, 9, &d);
		assert_int_equal(g.last, SB_SPWIRE_BAD);
		assert_int_equal(g.taken, at_hdr + 32);
		assert_string_equal(d.err, "a request with more than 8 hops");
	}
	/* a unix socket message's type byte must be 1 */
	for (int type = 0; type < 256; type++) {
		uint8_t s[SB_SPWIRE_HEADER + 9 + 4];
		size_t n = SB_SPWIRE_HEADER;
		g = (struct got){0};
		sb_spwire_header_put(s, SB_SP_PROTO_REQ);
		put_msg(s, &n, 0, hop + 1, 1, "", NULL);
		s[SB_SPWIRE_HEADER] = (uint8_t)type;
		sb_spwire_dec_init(&d, 0, SB_SP_PROTO_REQ, 4096);
		feed(&d, s, n, &g);
		if (type == 1) {
			assert_int_equal(g.msgs, 1);
			continue;
		}
		assert_int_equal(g.last, SB_SPWIRE_BAD);
		assert_int_equal(g.taken, SB_SPWIRE_HEADER + 9);
		assert_string_equal(d.err, "not an SP message (bad type byte)");
	}
}

/* A bad connection header: any of its 8 bytes changed, or another
 * protocol's, is refused on its 8th byte, not before, and stays refused. */
static void test_bad_handshake(void **state)
{
	const int protos[] = {SB_SP_PROTO_REP, SB_SP_PROTO_PUB, SB_SP_PROTO_SUB, 0x3030};
	uint8_t h[SB_SPWIRE_HEADER];
	struct sb_spwire_dec d;
	const uint8_t *piece;
	size_t used, len;
	struct got g;

	(void)state;
	for (int i = 0; i < SB_SPWIRE_HEADER * 8 + 4; i++) {
		int peer = i % 2 ? SB_SP_PROTO_REQ : SB_SP_PROTO_SUB;
		sb_spwire_header_put(h, peer);
		if (i < SB_SPWIRE_HEADER * 8)
			h[i / 8] ^= (uint8_t)(1u << (i % 8)); /* each bit */
		else
			sb_spwire_header_put(h, protos[i - SB_SPWIRE_HEADER * 8]);
		if (!memcmp(h, (uint8_t[]){0, 'S', 'P', 0, 0, SB_SP_PROTO_SUB, 0, 0},
			    8) &&
		    peer == SB_SP_PROTO_SUB)
			continue;
		sb_spwire_dec_init(&d, 0, peer, 4096);
		g = (struct got){0};
		feed(&d, h, SB_SPWIRE_HEADER - 1, &g);
		assert_int_equal(g.last, SB_SPWIRE_MORE);
		feed(&d, h + SB_SPWIRE_HEADER - 1, 1, &g);
		assert_int_equal(g.last, SB_SPWIRE_BAD);
		assert_int_equal(g.taken, SB_SPWIRE_HEADER);
		assert_false(g.hello);
		assert_string_equal(d.err,
				    "not an SP client of this socket (bad header)");
		assert_int_equal(sb_spwire_next(&d, h, 8, &used, &piece, &len),
				 SB_SPWIRE_BAD);
		assert_int_equal(used, 0);
		assert_false(sb_spwire_dec_begun(&d));
	}
}

/* Bytes after the header, in the same piece: HELLO takes the header's 8
 * bytes only, and the request after it is read from the rest; a SUB
 * peer's bytes after its header are taken and ignored, whatever they are. */
static void test_bytes_after_header(void **state)
{
	uint8_t s[256], junk[300];
	size_t ends[3], n = stream3(s, 0, ends), used, len;
	struct sb_spwire_dec d;
	const uint8_t *piece;
	struct got g = {0};

	(void)state;
	sb_spwire_dec_init(&d, 0, SB_SP_PROTO_REQ, 1024);
	assert_int_equal(sb_spwire_next(&d, s, n, &used, &piece, &len), SB_SPWIRE_HELLO);
	assert_int_equal(used, SB_SPWIRE_HEADER);
	g.hello = 1;
	g.taken = used;
	feed(&d, s + used, n - used, &g);
	assert_stream3(&g, 0);

	sb_spwire_header_put(junk, SB_SP_PROTO_SUB);
	for (size_t i = SB_SPWIRE_HEADER; i < sizeof junk; i++)
		junk[i] = (uint8_t)(i * 37);
	memcpy(junk + 20, s + SB_SPWIRE_HEADER, 30); /* even a request */
	sb_spwire_dec_init(&d, 0, SB_SP_PROTO_SUB, 1024);
	g = (struct got){0};
	feed(&d, junk, sizeof junk, &g);
	feed(&d, junk, sizeof junk, &g);
	assert_true(g.hello);
	assert_int_equal(g.last, SB_SPWIRE_MORE);
	assert_int_equal(g.taken, 2 * sizeof junk);
	assert_int_equal(g.heads, 0);
	assert_false(sb_spwire_dec_begun(&d));
}

/* What the server writes: its header, a published message's header, a
 * reply's header and backtrace, byte for byte. */
static void test_encode(void **state)
{
	uint8_t b[SB_SPWIRE_REPLY_HEAD];
	const uint8_t bt[8] = {0, 0, 0, 7, 0x80, 0, 0, 1};

	(void)state;
	sb_spwire_header_put(b, SB_SP_PROTO_REP);
	assert_memory_equal(b, "\0SP\0\0\x31\0\0", 8);
	sb_spwire_header_put(b, SB_SP_PROTO_PUB);
	assert_memory_equal(b, "\0SP\0\0\x20\0\0", 8);
	assert_int_equal(sb_spwire_msg_put(b, 0, 0x0102030405060708ull), 9);
	assert_memory_equal(b, "\x01\x01\x02\x03\x04\x05\x06\x07\x08", 9);
	assert_int_equal(sb_spwire_msg_put(b, 1, 5), 8);
	assert_memory_equal(b, "\0\0\0\0\0\0\0\x05", 8);
	assert_int_equal(sb_spwire_reply_put(b, 0, bt, 8, 3), 17);
	assert_memory_equal(b, "\x01\0\0\0\0\0\0\0\x0b\0\0\0\x07\x80\0\0\x01", 17);
	assert_int_equal(sb_spwire_reply_put(b, 1, bt + 4, 4, 0), 12);
	assert_memory_equal(b, "\0\0\0\0\0\0\0\x04\x80\0\0\x01", 12);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_cut),
	    cmocka_unit_test(test_one_byte_each),
	    cmocka_unit_test(test_oversized),
	    cmocka_unit_test(test_bad_messages),
	    cmocka_unit_test(test_bad_handshake),
	    cmocka_unit_test(test_bytes_after_header),
	    cmocka_unit_test(test_encode),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
