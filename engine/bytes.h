/* bytes.h - big-endian numbers in byte buffers (keys, record trailers). */
#ifndef SB_BYTES_H
#define SB_BYTES_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

/* Writes v at p as 8 big-endian bytes. */
static inline void sb_be64_put(void *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, 8);
}

/* Reads 8 big-endian bytes at p. */
static inline uint64_t sb_be64_get(const void *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return be64toh(v);
}

#endif
