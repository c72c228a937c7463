/* fdio.h - blocking reads of a whole count of bytes, for the test and
 * benchmark programs' own servers and clients. Header-only. */
#ifndef SB_FDIO_H
#define SB_FDIO_H

#include <stddef.h>
#include <sys/types.h>
#include <unistd.h>

/* Reads exactly n bytes of fd into buf; 0, or -1 on end of file or an
 * error (what was read is then incomplete). */
static inline int fdio_read_full(int fd, void *buf, size_t n)
{
	for (size_t got = 0; got < n;) {
		ssize_t k = read(fd, (char *)buf + got, n - got);
		if (k <= 0)
			return -1;
		got += (size_t)k;
	}
	return 0;
}

#endif
