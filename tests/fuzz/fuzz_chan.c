/* fuzz_chan.c - libFuzzer target for the frame decoder of the host/guest
 * channel (vmm/chan.h), which reads every byte a hostile guest writes to
 * its port (and, in the agent, every byte from the host).
 *
 * The input: byte 0 bit 0 starts the reader hunting (a channel taken up
 * in the middle: sb_chan_reader_resync), bit 1 makes it hunt again after
 * a framing error (the agent's way) instead of stopping (the host's: it
 * drops the channel); bytes 1-2 seed how the stream is cut; the rest are
 * operations that build the stream: a frame the encoder makes
 * (sb_chan_encode, of a kind, stream and body of the input's choosing), a
 * length and bytes of the input's choosing, bare bytes, a length at an
 * edge (0, SB_CHAN_MAX, SB_CHAN_MAX + 1, ...). (Frames of SB_CHAN_MAX
 * bytes, too slow to build at every run, are tests/unit/test_chan.c's.)
 *
 * The stream is decoded twice, whole and cut in pieces of 1 to 600 bytes
 * (each in its own buffer of its exact size, so ASan sees a read past it),
 * taking every frame after each piece. Both runs must say what a model
 * says that reads the whole stream at once as SPEC.md ("Host/guest
 * channel") describes it, with its own msgpack reader: the same frames,
 * skipped frames and framing errors, in order, each decided by the piece
 * holding the last byte it waits for (a hunting reader waits for each
 * candidate before it whole), and the same bytes pending at the end.
 * Each frame the decoder
 * yields, packed again (its body with msgpack_pack_object, then
 * sb_chan_encode), must be the model's canonical encoding of the frame's
 * bytes (shortest integers and headers): a frame the encoder made comes
 * out byte for byte. No length above SB_CHAN_MAX is taken or made, and
 * with no bare bytes before it every encoder's frame is decoded.
 */
#include <endian.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "tests/fuzz/fuzz.h"
#include "vmm/chan.h"

#define INPUT_MAX  8192
#define STREAM_MAX (16 * INPUT_MAX)
#define EV_MAX	   INPUT_MAX
#define DEPTH_MAX  32 /* containers nested, the frame's array included */

/* --- the model's msgpack reader: checks one object, writes it canonical --- */

struct mp {
	const uint8_t *p;
	size_t n, i; /* input and the next byte to read */
	uint8_t *o;
	size_t on; /* canonical output so far */
};

static int mp_get(struct mp *m, unsigned w, uint64_t *v)
{
	if (m->n - m->i < w)
		return -1;
	for (*v = 0; w; w--)
		*v = *v << 8 | m->p[m->i++];
	return 0;
}

static void mp_put(struct mp *m, uint8_t c, uint64_t v, unsigned w)
{
	m->o[m->on++] = c;
	while (w--)
		m->o[m->on++] = (uint8_t)(v >> (8 * w));
}

/* A header: fix form below fix_lim (c0 | v), else the first of the wide
 * forms c8, c16, c32 (0: none) that holds v. */
static void mp_head(struct mp *m, uint8_t c0, uint64_t fix_lim, uint8_t c8, uint8_t c16,
		    uint8_t c32, uint64_t v)
{
	if (v < fix_lim)
		mp_put(m, (uint8_t)(c0 | v), 0, 0);
	else if (c8 && v <= 0xff)
		mp_put(m, c8, v, 1);
	else if (v <= 0xffff)
		mp_put(m, c16, v, 2);
	else
		mp_put(m, c32, v, 4);
}

static void mp_int(struct mp *m, int64_t v)
{
	uint64_t u = (uint64_t)v;

	if (v >= 0 && u < 0x80)
		mp_put(m, (uint8_t)u, 0, 0);
	else if (v >= 0)
		mp_put(m,
		       u <= 0xff	 ? 0xcc
		       : u <= 0xffff	 ? 0xcd
		       : u <= 0xffffffff ? 0xce
					 : 0xcf,
		       u,
		       u <= 0xff	 ? 1
		       : u <= 0xffff	 ? 2
		       : u <= 0xffffffff ? 4
					 : 8);
	else if (v >= -32)
		mp_put(m, (uint8_t)v, 0, 0);
	else if (v >= INT8_MIN)
		mp_put(m, 0xd0, u, 1);
	else if (v >= INT16_MIN)
		mp_put(m, 0xd1, u, 2);
	else if (v >= INT32_MIN)
		mp_put(m, 0xd2, u, 4);
	else
		mp_put(m, 0xd3, u, 8);
}

static int mp_copy(struct mp *m, uint64_t len)
{
	if (m->n - m->i < len)
		return -1;
	memcpy(m->o + m->on, m->p + m->i, (size_t)len);
	m->on += (size_t)len;
	m->i += (size_t)len;
	return 0;
}

static int mp_ext(struct mp *m, uint64_t len)
{
	static const uint8_t fix[17] = {
	    [1] = 0xd4, [2] = 0xd5, [4] = 0xd6, [8] = 0xd7, [16] = 0xd8};
	uint64_t type;

	if (mp_get(m, 1, &type))
		return -1;
	if (len <= 16 && fix[len])
		mp_put(m, fix[len], 0, 0);
	else
		mp_head(m, 0, 0, 0xc7, 0xc8, 0xc9, len);
	mp_put(m, (uint8_t)type, 0, 0);
	return mp_copy(m, len);
}

static int mp_object(struct mp *m, unsigned depth);

/* n elements of an array (or n pairs of a map, as 2n elements). */
static int mp_container(struct mp *m, uint64_t n, int map, unsigned depth)
{
	if (depth + 1 > DEPTH_MAX)
		return -1;
	if (map)
		mp_head(m, 0x80, 16, 0, 0xde, 0xdf, n);
	else
		mp_head(m, 0x90, 16, 0, 0xdc, 0xdd, n);
	for (uint64_t k = 0; k < (map ? 2 * n : n); k++)
		if (mp_object(m, depth + 1))
			return -1;
	return 0;
}

/* A float 32 as msgpack-c keeps it: widened to a double and narrowed
 * again, which leaves every value but a signalling NaN, made quiet. */
static int mp_float32(struct mp *m)
{
	uint64_t v;

	if (mp_get(m, 4, &v))
		return -1;
	if ((v & 0x7f800000) == 0x7f800000 && (v & 0x7fffff))
		v |= 0x400000;
	mp_put(m, 0xca, v, 4);
	return 0;
}

/* The sized forms, by their first byte c (0xc4 .. 0xdf). */
static int mp_sized(struct mp *m, uint8_t c, unsigned depth)
{
	uint64_t v;

	if (c == 0xca)
		return mp_float32(m);
	if (c == 0xcb)
		return mp_get(m, 8, &v) ? -1 : (mp_put(m, 0xcb, v, 8), 0);
	if (c >= 0xd4 && c <= 0xd8)
		return mp_ext(m, 1u << (c - 0xd4));
	if (c >= 0xcc && c <= 0xd3) {
		unsigned w = 1u << ((c - 0xcc) & 3);
		if (mp_get(m, w, &v))
			return -1;
		if (c >= 0xd0 && w < 8 && v >> (8 * w - 1)) /* sign-extend */
			v |= UINT64_MAX << (8 * w);
		if (c <= 0xcf && v > INT64_MAX)
			return mp_put(m, 0xcf, v, 8), 0;
		return mp_int(m, (int64_t)v), 0;
	}
	if (c <= 0xc6 || (c >= 0xd9 && c <= 0xdb)) { /* bin, str */
		int str = c >= 0xd9;
		if (mp_get(m, 1u << (c - (str ? 0xd9 : 0xc4)), &v))
			return -1;
		if (str)
			mp_head(m, 0xa0, 32, 0xd9, 0xda, 0xdb, v);
		else
			mp_head(m, 0, 0, 0xc4, 0xc5, 0xc6, v);
		return mp_copy(m, v);
	}
	if (c <= 0xc9)
		return mp_get(m, 1u << (c - 0xc7), &v) ? -1 : mp_ext(m, v);
	if (mp_get(m, c & 1 ? 4 : 2, &v))
		return -1;
	return mp_container(m, v, c >= 0xde, depth);
}

/* One object at m->i, in a container depth deep (0: at the top). */
static int mp_object(struct mp *m, unsigned depth)
{
	uint8_t c;

	if (m->i >= m->n)
		return -1;
	c = m->p[m->i++];
	if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3)
		return mp_put(m, c, 0, 0), 0;
	if (c <= 0x8f)
		return mp_container(m, c & 0x0f, 1, depth);
	if (c <= 0x9f)
		return mp_container(m, c & 0x0f, 0, depth);
	if (c <= 0xbf) {
		m->o[m->on++] = c;
		return mp_copy(m, c & 0x1f);
	}
	if (c == 0xc1)
		return -1;
	return mp_sized(m, c, depth);
}

/* The unsigned integer whose canonical encoding is at p, or -1 when it is
 * not one. */
static int mp_uint_at(const uint8_t *p, uint64_t *v)
{
	unsigned w;

	if (*p <= 0x7f) {
		*v = *p;
		return 0;
	}
	if (*p < 0xcc || *p > 0xcf)
		return -1;
	w = 1u << (*p - 0xcc);
	for (*v = 0; w; w--)
		*v = *v << 8 | *++p;
	return 0;
}

/* The model of one frame's L bytes at p: 1 when they are one msgpack
 * array [kind 1..SB_CHAN_KIND_MAX, stream (uint), body], with its
 * canonical encoding (length first) in out. */
static int model_frame(const uint8_t *p, size_t len, uint8_t *out, size_t *out_len)
{
	struct mp m = {p, len, 0, out + 4, 0};
	size_t at[2];
	uint64_t n, kind, stream;
	uint32_t be;

	if (!len)
		return 0;
	m.i = 1;
	if ((p[0] & 0xf0) == 0x90)
		n = p[0] & 0x0f;
	else if (p[0] != 0xdc && p[0] != 0xdd)
		return 0;
	else if (mp_get(&m, p[0] == 0xdc ? 2 : 4, &n))
		return 0;
	if (n != 3)
		return 0;
	mp_put(&m, 0x93, 0, 0);
	for (int k = 0; k < 3; k++) {
		if (k < 2)
			at[k] = m.on;
		if (mp_object(&m, 1))
			return 0;
	}
	if (m.i != len || mp_uint_at(m.o + at[0], &kind) ||
	    mp_uint_at(m.o + at[1], &stream) || kind < SB_CHAN_HELLO ||
	    kind > SB_CHAN_KIND_MAX)
		return 0;
	be = htobe32((uint32_t)m.on);
	memcpy(out, &be, 4);
	*out_len = 4 + m.on;
	return 1;
}

/* --- what a run says --- */

struct ev {
	char what;	     /* F: a frame, S: one skipped, L: the framing lost */
	int err;	     /* L: the sticky error */
	uint64_t lo, hi;     /* decided by a byte in (lo, hi] (the model: lo + 1 = hi) */
	size_t enc, enc_len; /* F: its encoding, in the trace's bytes */
	size_t off;	     /* the model's F: where the frame starts */
};

struct trace {
	struct ev ev[EV_MAX];
	size_t n;
	uint8_t b[STREAM_MAX]; /* the frames' encodings */
	size_t bn;
	size_t pending;
};

static void tr_add(struct trace *t, char what, int err, uint64_t lo, uint64_t hi)
{
	CHECK(t->n < EV_MAX);
	t->ev[t->n++] = (struct ev){what, err, lo, hi, t->bn, 0, 0};
}

/* --- the model: the whole stream at once --- */

struct model {
	const uint8_t *s;
	size_t n, pos;
	int hunting, agent;
	struct trace *t;
	uint64_t at; /* the byte that decided the last event, + 1 */
};

/* An event of the model, decided once the byte before end came (and not
 * before the one before it: frames come out in order). */
static void model_ev(struct model *m, char what, int err, uint64_t end)
{
	m->at = end > m->at ? end : m->at;
	tr_add(m->t, what, err, m->at - 1, m->at);
}

/* Hunting: the next place a frame may start (SPEC: a length of 3 to
 * SB_CHAN_MAX, 0x93, a kind byte) whose frame decodes exactly. A frame
 * found is decided once it and every candidate before it are whole.
 * Returns 1 with the frame added and m->pos past it, 0 when more bytes
 * are needed. */
static int model_hunt(struct model *m)
{
	struct trace *t = m->t;
	size_t len, need = 0;

	for (; m->n - m->pos >= 6; m->pos++) {
		const uint8_t *p = m->s + m->pos;
		uint32_t l = (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3];
		if (l < 3 || l > SB_CHAN_MAX || p[4] != 0x93 || p[5] < SB_CHAN_HELLO ||
		    p[5] > SB_CHAN_KIND_MAX)
			continue;
		if (m->n - m->pos - 4 < l)
			return 0;
		need = need > m->pos + 4 + l ? need : m->pos + 4 + l;
		if (model_frame(p + 4, l, t->b + t->bn, &len)) {
			model_ev(m, 'F', 0, need);
			t->ev[t->n - 1].enc_len = len;
			t->ev[t->n - 1].off = m->pos;
			t->bn += len;
			m->pos += 4 + l;
			m->hunting = 0;
			return 1;
		}
	}
	return 0;
}

/* Reads frames from m->pos on; returns when more bytes are needed or the
 * framing is lost for good. */
static void model_run(struct model *m)
{
	struct trace *t = m->t;
	size_t len;
	uint32_t l;

	for (;;) {
		if (m->hunting) {
			if (!model_hunt(m))
				break;
			continue;
		}
		if (m->n - m->pos < 4)
			break;
		l = (uint32_t)m->s[m->pos] << 24 | m->s[m->pos + 1] << 16 |
		    m->s[m->pos + 2] << 8 | m->s[m->pos + 3];
		if (l == 0 || l > SB_CHAN_MAX) {
			model_ev(m, 'L', l ? SB_ERR_TOOBIG : SB_ERR_PROTO, m->pos + 4);
			if (!m->agent) {
				t->pending = 0;
				return;
			}
			m->hunting = 1; /* from the bad length on */
			continue;
		}
		if (m->n - m->pos - 4 < l)
			break;
		if (model_frame(m->s + m->pos + 4, l, t->b + t->bn, &len)) {
			model_ev(m, 'F', 0, m->pos + 4 + l);
			t->ev[t->n - 1].enc_len = len;
			t->ev[t->n - 1].off = m->pos;
			t->bn += len;
		} else {
			model_ev(m, 'S', 0, m->pos + 4 + l);
		}
		m->pos += 4 + l;
	}
	t->pending = m->n - m->pos;
}

/* --- the stream the input builds --- */

struct build {
	const uint8_t *d;
	size_t n, i;	      /* the operations, and the next byte */
	msgpack_sbuffer s;    /* the stream */
	size_t valid[EV_MAX]; /* where each frame the encoder made starts */
	int clean[EV_MAX];    /* 1: nothing before it could break the framing */
	int pure[EV_MAX];     /* 1: only frames the encoder made before it */
	size_t nvalid;
	int bare;   /* bytes that may break the framing came */
	int framed; /* a length and bytes of the input's choosing came */
};

/* Up to want bytes of the input at *p; returns how many. */
static size_t in_take(struct build *b, size_t want, const uint8_t **p)
{
	size_t n = b->n - b->i < want ? b->n - b->i : want;

	*p = b->d + b->i;
	b->i += n;
	return n;
}

static int in_byte(struct build *b, uint8_t *c)
{
	const uint8_t *p;

	if (!in_take(b, 1, &p))
		return -1;
	*c = *p;
	return 0;
}

static void build_put(struct build *b, const void *p, size_t n)
{
	CHECK(!msgpack_sbuffer_write(&b->s, p, n));
}

static void build_len(struct build *b, uint32_t len)
{
	uint32_t be = htobe32(len);

	build_put(b, &be, 4);
}

/* Notes that the frame the encoder made from at on is one to decode. */
static void build_valid(struct build *b, size_t at)
{
	CHECK(b->nvalid < EV_MAX);
	b->valid[b->nvalid] = at;
	b->clean[b->nvalid] = !b->bare;
	b->pure[b->nvalid++] = !b->bare && !b->framed;
}

/* A body of up to 63 input bytes, by sel: 0 bin, 1 str, 2 the bytes when
 * they are one msgpack object (written canonical), else bin, 3 an integer
 * of up to 8 of them (none: an empty body). Returns its length in out. */
static size_t build_body(struct build *b, uint8_t sel, uint8_t *out)
{
	struct mp m = {NULL, 0, 0, out, 0};
	uint64_t v = 0;
	size_t n;

	n = in_take(b, sel >> 2, &m.p);
	m.n = n;
	if ((sel & 3) == 2 && !mp_object(&m, 1) && m.i == n)
		return m.on;
	m.on = 0;
	if ((sel & 3) == 3) {
		for (size_t k = 0; k < n && k < 8; k++)
			v = v << 8 | m.p[k];
		if (n)
			mp_int(&m, (int64_t)v);
	} else if ((sel & 3) == 1) {
		mp_head(&m, 0xa0, 32, 0xd9, 0xda, 0xdb, n);
	} else {
		mp_head(&m, 0, 0, 0xc4, 0xc5, 0xc6, n);
	}
	if ((sel & 3) != 3) {
		memcpy(out + m.on, m.p, n);
		m.on += n;
	}
	return m.on;
}

/* A frame the encoder makes: kind byte (0xf0 and up: kinds out of range,
 * which it refuses), stream (bits 0-2 of its byte: how many more bytes),
 * body (see build_body; an empty one it refuses). */
static void op_frame(struct build *b)
{
	static const int bad_kinds[] = {0, SB_CHAN_KIND_MAX + 1, 255, -1};
	uint8_t kb, ss, bs, c, body[128];
	uint64_t stream;
	size_t at = b->s.size, blen;
	int kind, rc;

	if (in_byte(b, &kb) || in_byte(b, &ss) || in_byte(b, &bs))
		return;
	kind = kb < 0xf0 ? kb % SB_CHAN_KIND_MAX + 1 : bad_kinds[kb % 4];
	stream = ss >> 3;
	for (int k = 0; k < ((ss & 7) == 7 ? 8 : (ss & 7)) && !in_byte(b, &c); k++)
		stream = stream << 8 | c;
	blen = build_body(b, bs, body);
	rc = sb_chan_encode(kind, stream, body, blen, &b->s);
	if (kind < SB_CHAN_HELLO || kind > SB_CHAN_KIND_MAX || !blen) {
		CHECK(rc == SB_ERR_INVAL && b->s.size == at);
		return;
	}
	CHECK(rc == SB_OK && b->s.size - at - 4 <= SB_CHAN_MAX);
	build_valid(b, at);
}

static void build(struct build *b, const uint8_t *d, size_t n)
{
	static const uint32_t edges[] = {
	    0, 1, 2, 3, SB_CHAN_MAX, SB_CHAN_MAX + 1, 0x80000000u, 0xffffffffu};
	const uint8_t *p;
	uint8_t op, c, h;

	b->d = d;
	b->n = n;
	b->i = b->nvalid = 0;
	b->bare = b->framed = 0;
	b->s.size = 0;
	while (!in_byte(b, &op)) {
		switch (op % 4) {
		case 0: op_frame(b); break;
		case 1: /* a length and as many bytes (fewer at the input's end) */
			if (in_byte(b, &c) || in_byte(b, &h))
				break;
			build_len(b, (uint32_t)(h & 0x0f) << 8 | c);
			b->bare |= !((h & 0x0f) << 8 | c);
			b->framed = 1;
			build_put(b, b->d + b->i,
				  in_take(b, (size_t)(h & 0x0f) << 8 | c, &p));
			break;
		case 2: /* bare bytes */
			if (in_byte(b, &c))
				break;
			b->bare = 1;
			build_put(b, b->d + b->i, in_take(b, c, &p));
			break;
		default:
			if (in_byte(b, &c))
				break;
			b->bare = 1;
			build_len(b, edges[c % (sizeof edges / sizeof edges[0])]);
			break;
		}
	}
}

/* --- the decoder's runs --- */

struct run {
	sb_chan_reader *r;
	struct trace *t;
	uint64_t before, fed; /* bytes fed before the last piece, and in all */
	int agent, stopped;
};

/* Packs the frame f again and adds it to the trace. */
static void run_frame(struct run *u, const struct sb_chan_frame *f)
{
	static msgpack_sbuffer body, enc;
	struct trace *t = u->t;
	msgpack_packer pk;

	CHECK(f->kind >= SB_CHAN_HELLO && f->kind <= SB_CHAN_KIND_MAX);
	body.size = enc.size = 0;
	msgpack_packer_init(&pk, &body, msgpack_sbuffer_write);
	CHECK(!msgpack_pack_object(&pk, f->body));
	CHECK(!sb_chan_encode(f->kind, f->stream, body.data, body.size, &enc));
	CHECK(enc.size - 4 <= SB_CHAN_MAX && enc.size <= STREAM_MAX - t->bn);
	tr_add(t, 'F', 0, u->before, u->fed);
	memcpy(t->b + t->bn, enc.data, enc.size);
	t->ev[t->n - 1].enc_len = enc.size;
	t->bn += enc.size;
}

/* Takes every frame the reader holds. */
static void run_take(struct run *u)
{
	struct sb_chan_frame f;
	int rc, err;

	for (;;) {
		rc = sb_chan_reader_next(u->r, &f);
		err = sb_chan_reader_error(u->r);
		if (rc == SB_END) {
			CHECK(!err);
			return;
		}
		if (rc == SB_OK) {
			run_frame(u, &f);
			continue;
		}
		if (!err) { /* a frame with a bad content, skipped */
			CHECK(rc == SB_ERR_PROTO);
			tr_add(u->t, 'S', 0, u->before, u->fed);
			continue;
		}
		CHECK(rc == err && (err == SB_ERR_PROTO || err == SB_ERR_TOOBIG));
		CHECK(sb_chan_reader_pending(u->r) == 0);
		CHECK(sb_chan_reader_next(u->r, &f) == err); /* it stays */
		tr_add(u->t, 'L', err, u->before, u->fed);
		if (!u->agent) {
			CHECK(sb_chan_reader_feed(u->r, "x", 1) == err);
			u->stopped = 1;
			return;
		}
		sb_chan_reader_resync(u->r);
	}
}

/* Decodes the n bytes at s, cut by seed (0: whole), into t. */
static void run(const uint8_t *s, size_t n, int hunt, int agent, uint32_t seed,
		struct trace *t)
{
	static const size_t cuts[] = {1, 2, 3, 4, 5, 6, 7, 9, 13, 17, 33, 64, 600};
	struct run u = {.t = t, .agent = agent};
	size_t pos = 0, c;
	uint8_t *piece;

	t->n = t->bn = 0;
	CHECK(!sb_chan_reader_new(&u.r));
	if (hunt)
		sb_chan_reader_resync(u.r);
	while (pos < n && !u.stopped) {
		c = n - pos;
		if (seed) {
			seed = seed * 1103515245u + 12345u;
			c = cuts[(seed >> 16) % (sizeof cuts / sizeof cuts[0])];
			c = c < n - pos ? c : n - pos;
		}
		CHECK((piece = malloc(c)));
		memcpy(piece, s + pos, c);
		CHECK(sb_chan_reader_feed(u.r, piece, c) == SB_OK);
		free(piece); /* the reader keeps a copy */
		u.before = u.fed;
		u.fed += c;
		run_take(&u);
		pos += c;
	}
	t->pending = sb_chan_reader_pending(u.r);
	sb_chan_reader_free(u.r);
}

/* A run says what the model says. */
static void trace_check(const struct trace *want, const struct trace *got)
{
	CHECK(got->n == want->n && got->pending == want->pending);
	for (size_t k = 0; k < want->n; k++) {
		const struct ev *w = &want->ev[k], *g = &got->ev[k];
		CHECK(g->what == w->what && g->err == w->err);
		CHECK(g->lo < w->hi && w->hi <= g->hi); /* decided by its last byte */
		CHECK(g->enc_len == w->enc_len &&
		      !memcmp(got->b + g->enc, want->b + w->enc, w->enc_len));
	}
}

/* Each frame the encoder made is decoded byte for byte where the model
 * reaches it in step, and always when nothing before it could break the
 * framing (a hunting reader: when only such frames came before it). */
static void valid_check(const struct build *b, const struct trace *want, int hunt)
{
	size_t k = 0;

	for (size_t v = 0; v < b->nvalid; v++) {
		while (k < want->n &&
		       (want->ev[k].what != 'F' || want->ev[k].off < b->valid[v]))
			k++;
		if (k < want->n && want->ev[k].off == b->valid[v]) {
			const struct ev *w = &want->ev[k];
			CHECK(w->enc_len <= b->s.size - b->valid[v]);
			CHECK(!memcmp(want->b + w->enc, b->s.data + b->valid[v],
				      w->enc_len));
		} else {
			CHECK(!(hunt ? b->pure[v] : b->clean[v]));
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct trace want, whole, cut;
	static struct build b;
	struct model m;
	int hunt, agent;
	uint32_t seed;

	if (size < 3 || size > INPUT_MAX)
		return 0;
	hunt = data[0] & 1;
	agent = !!(data[0] & 2);
	seed = (uint32_t)(data[1] << 8 | data[2]) | 1;
	build(&b, data + 3, size - 3);
	if (b.s.size > STREAM_MAX)
		return 0;
	m = (struct model){(const uint8_t *)b.s.data, b.s.size, 0, hunt, agent, &want, 0};
	want.n = want.bn = 0;
	model_run(&m);
	valid_check(&b, &want, hunt);
	run((const uint8_t *)b.s.data, b.s.size, hunt, agent, 0, &whole);
	run((const uint8_t *)b.s.data, b.s.size, hunt, agent, seed, &cut);
	trace_check(&want, &whole);
	trace_check(&want, &cut);
	return 0;
}
