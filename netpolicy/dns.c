/* dns.c - the DNS stub's message codec (see dns.h). */
#include "netpolicy/dns.h"

#include <stdio.h>
#include <string.h>

#include "engine/error.h"

#define HDR_LEN	    12	 /* the header */
#define OPT_LEN	    11	 /* an OPT record without options */
#define OPT_PAYLOAD 1232 /* the UDP payload size the stub advertises */
#define T_OPT	    41
#define C_IN	    1

/* Header flags. */
#define F_QR	 0x8000
#define F_OPCODE 0x7800
#define F_AA	 0x0400
#define F_TC	 0x0200
#define F_RD	 0x0100

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static uint8_t *put16(uint8_t *p, unsigned v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
	return p + 2;
}

static uint8_t *put32(uint8_t *p, uint32_t v)
{
	return put16(put16(p, v >> 16), v & 0xffff);
}

/* Appends the k bytes of s to name (length *o). Returns -1 when they do
 * not fit with the NUL. */
static int name_add(char *name, size_t *o, const char *s, size_t k)
{
	if (*o + k >= SB_DNS_NAME_MAX)
		return -1;
	memcpy(name + *o, s, k);
	*o += k;
	return 0;
}

/* Appends byte c of a label to name (length *o) in presentation form. */
static int name_put(char *name, size_t *o, uint8_t c)
{
	char esc[5];
	size_t k = 1;

	if (c >= 'A' && c <= 'Z') {
		esc[0] = (char)(c + 'a' - 'A');
	} else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
		   c == '_') {
		esc[0] = (char)c;
	} else if (c == '.' || c == '\\') {
		esc[0] = '\\';
		esc[1] = (char)c;
		k = 2;
	} else {
		k = (size_t)snprintf(esc, sizeof esc, "\\%03u", c);
	}
	return name_add(name, o, esc, k);
}

/* Reads the uncompressed name at msg[*off..n) into name in presentation
 * form and moves *off past it. */
static int name_read(const uint8_t *msg, size_t n, size_t *off, char *name)
{
	size_t p = *off, o = 0, len;

	for (;;) {
		if (p >= n)
			return sb_seterr(SB_ERR_PROTO, "dns: question cut short");
		len = msg[p];
		if (len == 0)
			break;
		if ((len & 0xc0) == 0xc0)
			return sb_seterr(SB_ERR_PROTO,
					 "dns: compression pointer in the question");
		if (len > 63)
			return sb_seterr(SB_ERR_PROTO, "dns: label longer than 63 bytes");
		if (p + 1 + len + 1 - *off > 255)
			return sb_seterr(SB_ERR_PROTO, "dns: name longer than 255 bytes");
		if (p + 1 + len >= n)
			return sb_seterr(SB_ERR_PROTO, "dns: question cut short");
		if (o > 0 && name_add(name, &o, ".", 1) < 0)
			goto too_long;
		for (size_t i = 0; i < len; i++)
			if (name_put(name, &o, msg[p + 1 + i]) < 0)
				goto too_long;
		p += 1 + len;
	}
	name[o] = 0;
	*off = p + 1;
	return SB_OK;
too_long: /* cannot happen: 255 wire bytes present in 1013 at most */
	return sb_seterr(SB_ERR_PROTO, "dns: name too long to present");
}

/* Reads the one additional record at msg[*off..n), which must be an OPT
 * record, into q and moves *off past it. */
static int opt_read(const uint8_t *msg, size_t n, size_t *off, struct sb_dns_query *q)
{
	const uint8_t *r = msg + *off;
	size_t rdlen;

	if (n - *off < OPT_LEN)
		return sb_seterr(SB_ERR_PROTO, "dns: additional record cut short");
	if (r[0] != 0 || get16(r + 1) != T_OPT)
		return sb_seterr(SB_ERR_PROTO,
				 "dns: additional record is not an OPT record");
	rdlen = get16(r + 9);
	if (n - *off - OPT_LEN < rdlen)
		return sb_seterr(SB_ERR_PROTO, "dns: OPT record cut short");
	q->edns = 1;
	q->udp_size = get16(r + 3) < 512 ? 512 : get16(r + 3);
	*off += OPT_LEN + rdlen;
	return SB_OK;
}

int sb_dns_parse_query(const uint8_t *msg, size_t n, struct sb_dns_query *q)
{
	size_t off = HDR_LEN;
	unsigned qd, an, ns, ar;
	int rc;

	memset(q, 0, sizeof *q);
	if (n < HDR_LEN)
		return sb_seterr(SB_ERR_PROTO, "dns: %zu bytes, less than a header", n);
	q->id = get16(msg);
	q->flags = get16(msg + 2);
	qd = get16(msg + 4);
	an = get16(msg + 6);
	ns = get16(msg + 8);
	ar = get16(msg + 10);
	if (q->flags & F_QR)
		return sb_seterr(SB_ERR_PROTO, "dns: a response, not a query");
	if (q->flags & F_OPCODE)
		return sb_seterr(SB_ERR_PROTO, "dns: opcode %u, not QUERY",
				 (q->flags & F_OPCODE) >> 11);
	if (qd != 1)
		return sb_seterr(SB_ERR_PROTO, "dns: %u questions, not 1", qd);
	if (an || ns)
		return sb_seterr(SB_ERR_PROTO, "dns: %u answer and %u authority records",
				 an, ns);
	if (ar > 1)
		return sb_seterr(SB_ERR_PROTO, "dns: %u additional records, more than 1",
				 ar);
	if ((rc = name_read(msg, n, &off, q->name)) != SB_OK)
		return rc;
	if (n - off < 4)
		return sb_seterr(SB_ERR_PROTO, "dns: question cut short");
	q->qtype = get16(msg + off);
	q->qclass = get16(msg + off + 2);
	off += 4;
	q->question_len = off - HDR_LEN;
	q->udp_size = 512;
	if (ar && (rc = opt_read(msg, n, &off, q)) != SB_OK)
		return rc;
	if (off != n)
		return sb_seterr(SB_ERR_PROTO,
				 "dns: data after the message (%zu of %zu bytes)",
				 n - off, n);
	return SB_OK;
}

int sb_dns_header_id(const uint8_t *msg, size_t n, uint16_t *id)
{
	if (n < HDR_LEN)
		return sb_seterr(SB_ERR_PROTO, "dns: %zu bytes, less than a header", n);
	if (get16(msg + 2) & F_QR)
		return sb_seterr(SB_ERR_PROTO, "dns: a response, not a query");
	*id = get16(msg);
	return SB_OK;
}

/* Writes a header with the given flags and counts; returns the end. */
static uint8_t *header_put(uint8_t *p, uint16_t id, unsigned flags, unsigned qd,
			   unsigned an, unsigned ar)
{
	p = put16(put16(p, id), flags);
	return put16(put16(put16(put16(p, qd), an), 0), ar);
}

size_t sb_dns_answer(const struct sb_dns_query *q, const uint8_t *msg, int rcode,
		     const struct sb_dns_rr *rrs, size_t nrr, size_t max, uint8_t *out,
		     size_t cap)
{
	size_t len = HDR_LEN + q->question_len + (q->edns ? OPT_LEN : 0), all = len;
	unsigned flags = F_QR | F_AA | (q->flags & F_RD) | ((unsigned)rcode & 0xf);
	uint8_t *p;

	for (size_t i = 0; i < nrr; i++) {
		if (rrs[i].type != SB_DNS_A && rrs[i].type != SB_DNS_AAAA)
			return 0;
		all += 12 + (rrs[i].type == SB_DNS_A ? 4 : 16);
	}
	if (all > max || all > 65535) {
		flags |= F_TC;
		nrr = 0;
	} else {
		len = all;
	}
	if (len > cap)
		return 0;
	p = header_put(out, q->id, flags, 1, (unsigned)nrr, q->edns ? 1 : 0);
	memcpy(p, msg + HDR_LEN, q->question_len);
	p += q->question_len;
	for (size_t i = 0; i < nrr; i++) {
		size_t rdlen = rrs[i].type == SB_DNS_A ? 4 : 16;
		p = put16(put16(put16(p, 0xc000 | HDR_LEN), rrs[i].type), C_IN);
		p = put16(put32(p, rrs[i].ttl), (unsigned)rdlen);
		memcpy(p, rrs[i].addr, rdlen);
		p += rdlen;
	}
	if (q->edns) {
		*p++ = 0; /* the root */
		p = put16(put32(put16(put16(p, T_OPT), OPT_PAYLOAD), 0), 0);
	}
	return (size_t)(p - out);
}

size_t sb_dns_formerr(uint16_t id, uint8_t *out, size_t cap)
{
	if (cap < HDR_LEN)
		return 0;
	header_put(out, id, F_QR | SB_DNS_FORMERR, 0, 0, 0);
	return HDR_LEN;
}

int sb_dns_name_match(const char *grant, const char *name)
{
	size_t gn = strlen(grant), nn = strlen(name);

	if (strchr(name, '\\'))
		return 0;
	if (strncmp(grant, "*.", 2) != 0)
		return strcmp(grant, name) == 0;
	/* "*.example.com": name ends with ".example.com" after a label or more */
	return nn > gn - 1 && !strcmp(name + nn - (gn - 1), grant + 1);
}
