/* tlshello.h - TLS ClientHello records built for the unit tests of the
 * name checks (sniff.h, judge.h). Header-only. */
#ifndef SB_TLSHELLO_H
#define SB_TLSHELLO_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline void put16(uint8_t *p, size_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

/* Writes a record holding a ClientHello with the extensions block
 * ext[0..elen) (no block at all when ext is NULL); returns its length. */
static inline size_t hello(uint8_t *out, const uint8_t *ext, size_t elen)
{
	static const uint8_t head[] = {0x03, 0x03};
	static const uint8_t tail[] = {0x00, 0x00, 0x02, 0x13, 0x01, 0x01, 0x00};
	size_t n = 9;

	memcpy(out + n, head, sizeof head);
	n += sizeof head;
	memset(out + n, 0x5a, 32); /* random */
	n += 32;
	memcpy(out + n, tail, sizeof tail);
	n += sizeof tail;
	if (ext) {
		put16(out + n, elen);
		memcpy(out + n + 2, ext, elen);
		n += 2 + elen;
	}
	out[0] = 0x16;
	out[1] = 3;
	out[2] = 1;
	put16(out + 3, n - 5);
	out[5] = 1;
	out[6] = 0;
	put16(out + 7, n - 9);
	return n;
}

/* Writes an extension of type with data[0..len); returns its length. */
static inline size_t ext(uint8_t *p, unsigned type, const void *data, size_t len)
{
	put16(p, type);
	put16(p + 2, len);
	memcpy(p + 4, data, len);
	return 4 + len;
}

/* Writes a server_name extension with one host_name; returns its length. */
static inline size_t sni(uint8_t *p, const char *name)
{
	uint8_t d[300];
	size_t n = strlen(name);

	put16(d, n + 3);
	d[2] = 0;
	put16(d + 3, n);
	memcpy(d + 5, name, n);
	return ext(p, 0, d, n + 5);
}

#endif
