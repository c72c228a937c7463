/* spwire.c - the bytes of nng's SP protocols (see spwire.h).
 *
 * The decoder keeps the one header it is reading (a connection header, a
 * message header or a backtrace word) in hold; a body is never held, only
 * pointed at in the bytes given. Each decision (a bad header, a length,
 * the backtrace's end) is made on the byte that completes what it
 * depends on, so it falls on the same byte however the input is cut.
 */
#include "engine/daemon/spwire.h"

#include <string.h>

#include "engine/bytes.h"

enum dstate { D_HEADER, D_IGNORE, D_MSGHDR, D_BT, D_BODY, D_EMPTY, D_BAD, D_TOOBIG };

static const uint8_t sp_magic[4] = {0, 'S', 'P', 0};

void sb_spwire_dec_init(struct sb_spwire_dec *d, int tls, int peer, uint64_t max_body)
{
	memset(d, 0, sizeof *d);
	d->tls = tls;
	d->peer = peer;
	d->max_body = max_body;
	d->state = D_HEADER;
}

int sb_spwire_dec_begun(const struct sb_spwire_dec *d)
{
	return d->state == D_BT || d->state == D_BODY || d->state == D_EMPTY ||
	       (d->state == D_MSGHDR && d->got);
}

/* Moves bytes from p (n of them) into hold until it has want; adds what it
 * took to *used. Returns 1 when hold is full (and empties it for the
 * next), else 0 with every byte taken. */
static int dec_hold(struct sb_spwire_dec *d, const uint8_t *p, size_t n, size_t *used,
		    size_t want)
{
	size_t k = want - d->got < n ? want - d->got : n;

	memcpy(d->hold + d->got, p, k);
	d->got += k;
	*used += k;
	if (d->got < want)
		return 0;
	d->got = 0;
	return 1;
}

static enum sb_spwire_ev dec_bad(struct sb_spwire_dec *d, const char *why)
{
	d->state = D_BAD;
	d->err = why;
	return SB_SPWIRE_BAD;
}

static enum sb_spwire_ev dec_toobig(struct sb_spwire_dec *d, uint64_t len)
{
	d->state = D_TOOBIG;
	d->body_len = len;
	return SB_SPWIRE_TOOBIG;
}

/* The peer's header is in hold. */
static enum sb_spwire_ev dec_header(struct sb_spwire_dec *d)
{
	const uint8_t *h = d->hold;

	if (memcmp(h, sp_magic, 4) || h[6] || h[7] || (h[4] << 8 | h[5]) != d->peer)
		return dec_bad(d, "not an SP client of this socket (bad header)");
	d->state = d->peer == SB_SP_PROTO_SUB ? D_IGNORE : D_MSGHDR;
	return SB_SPWIRE_HELLO;
}

/* A message header is in hold. Returns MORE when the backtrace comes next. */
static enum sb_spwire_ev dec_msghdr(struct sb_spwire_dec *d)
{
	const size_t bt_max = 4 * SB_SPWIRE_BT_MAX;

	if (!d->tls && d->hold[0] != 1)
		return dec_bad(d, "not an SP message (bad type byte)");
	d->msg_len = sb_be64_get(d->hold + !d->tls);
	if (d->msg_len < 4)
		return dec_bad(d, "a request without its id");
	/* the body is at least the length less the longest backtrace */
	if (d->msg_len > bt_max && d->msg_len - bt_max > d->max_body)
		return dec_toobig(d, d->msg_len - 4);
	d->bt_len = 0;
	d->state = D_BT;
	return SB_SPWIRE_MORE;
}

/* A backtrace word is in hold. Returns MORE when another word comes next. */
static enum sb_spwire_ev dec_word(struct sb_spwire_dec *d)
{
	memcpy(d->bt + d->bt_len, d->hold, 4);
	d->bt_len += 4;
	if (d->hold[0] & 0x80) { /* the request id: the last word */
		d->body_len = d->left = d->msg_len - d->bt_len;
		if (d->body_len > d->max_body)
			return dec_toobig(d, d->body_len);
		d->state = d->left ? D_BODY : D_EMPTY;
		return SB_SPWIRE_HEAD;
	}
	if (d->bt_len == sizeof d->bt)
		return dec_bad(d, "a request with more than 8 hops");
	if (d->bt_len + 4 > d->msg_len)
		return dec_bad(d, "a request shorter than its id");
	return SB_SPWIRE_MORE;
}

/* The body's next bytes from p (n > 0 of them). */
static enum sb_spwire_ev dec_body(struct sb_spwire_dec *d, const uint8_t *p, size_t n,
				  size_t *used, const uint8_t **piece, size_t *len)
{
	size_t k = d->left < n ? (size_t)d->left : n;

	*piece = p;
	*len = k;
	*used += k;
	d->left -= k;
	if (d->left)
		return SB_SPWIRE_BODY;
	d->state = D_MSGHDR;
	return SB_SPWIRE_END;
}

enum sb_spwire_ev sb_spwire_next(struct sb_spwire_dec *d, const uint8_t *p, size_t n,
				 size_t *used, const uint8_t **piece, size_t *len)
{
	enum sb_spwire_ev ev = SB_SPWIRE_MORE;

	*used = 0;
	*piece = NULL;
	*len = 0;
	switch (d->state) { /* what needs no more bytes */
	case D_EMPTY:
		d->state = D_MSGHDR;
		*piece = p;
		return SB_SPWIRE_END;
	case D_BAD: return SB_SPWIRE_BAD;
	case D_TOOBIG: return SB_SPWIRE_TOOBIG;
	default: break;
	}
	while (ev == SB_SPWIRE_MORE && *used < n) {
		const uint8_t *q = p + *used;
		size_t m = n - *used;
		switch (d->state) {
		case D_HEADER:
			if (dec_hold(d, q, m, used, SB_SPWIRE_HEADER))
				ev = dec_header(d);
			break;
		case D_IGNORE: *used = n; break;
		case D_MSGHDR:
			if (dec_hold(d, q, m, used, d->tls ? 8 : 9))
				ev = dec_msghdr(d);
			break;
		case D_BT:
			if (dec_hold(d, q, m, used, 4))
				ev = dec_word(d);
			break;
		default: return dec_body(d, q, m, used, piece, len); /* D_BODY */
		}
	}
	return ev;
}

void sb_spwire_header_put(uint8_t h[SB_SPWIRE_HEADER], int proto)
{
	memcpy(h, sp_magic, 4);
	h[4] = (uint8_t)(proto >> 8);
	h[5] = (uint8_t)proto;
	h[6] = h[7] = 0;
}

size_t sb_spwire_msg_put(uint8_t *p, int tls, uint64_t len)
{
	if (tls) {
		sb_be64_put(p, len);
		return 8;
	}
	p[0] = 1;
	sb_be64_put(p + 1, len);
	return 9;
}

size_t sb_spwire_reply_put(uint8_t *p, int tls, const uint8_t *bt, size_t bt_len,
			   uint64_t body_len)
{
	size_t n = sb_spwire_msg_put(p, tls, bt_len + body_len);

	memcpy(p + n, bt, bt_len);
	return n + bt_len;
}
