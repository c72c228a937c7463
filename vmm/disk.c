/* disk.c - qcow2 disk layers: written here, rebased with qemu-img. */
#include "vmm/disk.h"

#include "engine/error.h"
#include "engine/proc.h"
#include "vmm/qemu.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define DISK_REBASE_MS 600000 /* copies data: may take long */

/* Points at the last non-empty line of s (which it trims). */
static const char *disk_last_line(char *s)
{
	char *p;
	size_t n = strlen(s);

	while (n && strchr("\r\n ", s[n - 1]))
		s[--n] = 0;
	p = strrchr(s, '\n');
	return p ? p + 1 : s;
}

/* Runs qemu-img with argv (for path) within ms. */
static int disk_qemu_img(char *const argv[], const char *what, const char *path, int ms)
{
	char out[4096];
	int rc, status;

	rc = sb_proc_run(argv, ms, out, sizeof out, &status);
	if (rc == SB_ERR_UNAVAIL)
		return sb_seterr(rc, "qemu-img not found (install qemu-utils)");
	if (rc)
		return rc;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return sb_seterr(SB_ERR_IO, "qemu-img %s %s: %s", what, path,
				 out[0] ? disk_last_line(out) : "failed");
	return SB_OK;
}

/* Checks base_fmt and resolves base into abs. */
static int disk_base(const char *base, const char *base_fmt, char abs[PATH_MAX])
{
	if (!base_fmt || (strcmp(base_fmt, "raw") && strcmp(base_fmt, "qcow2")))
		return sb_seterr(SB_ERR_INVAL, "disk base format \"%s\" (raw or qcow2)",
				 base_fmt ? base_fmt : "");
	if (!realpath(base, abs))
		return sb_seterr(errno == ENOENT ? SB_ERR_NOTFOUND : SB_ERR_IO,
				 "disk base %s: %s", base, strerror(errno));
	return SB_OK;
}

int sb_disk_layer_rebase(const char *path, const char *base, const char *base_fmt)
{
	char abs[PATH_MAX];
	char *argv[] = {"qemu-img", "rebase",	      "-q", "-f", "qcow2", "-b",
			abs,	    (char *)"-F", (char *)base_fmt, (char *)path, NULL};
	int rc;

	if ((rc = disk_base(base, base_fmt, abs)))
		return rc;
	return disk_qemu_img(argv, "rebase", path, DISK_REBASE_MS);
}

/* The qcow2 header's fields this reads: magic, version, then the backing
 * file name's offset (64 bits) and size (32 bits), all big-endian. */
#define QCOW2_MAGIC 0x514649fbu /* "QFI\xfb" */

static uint64_t be(const unsigned char *p, int n)
{
	uint64_t v = 0;

	while (n--)
		v = v << 8 | *p++;
	return v;
}

int sb_disk_backing(const char *path, char *buf, size_t cap)
{
	unsigned char h[80];
	uint64_t off;
	uint32_t len;
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc = SB_OK;
	ssize_t n;

	if (fd < 0)
		return sb_seterr(errno == ENOENT ? SB_ERR_NOTFOUND : SB_ERR_IO, "%s: %s", path,
				 strerror(errno));
	n = pread(fd, h, sizeof h, 0);
	if (n < 20 || be(h, 4) != QCOW2_MAGIC) {
		rc = sb_seterr(SB_ERR_CORRUPT, "%s: not a qcow2 file", path);
		goto out;
	}
	/* version 3: incompatible feature bit 2, an external data file (a
	 * header naming any host file as the disk's data) */
	if (be(h + 4, 4) >= 3 && (n < 80 || be(h + 72, 8) & 4)) {
		rc = sb_seterr(SB_ERR_CORRUPT, "%s: its data is in another file", path);
		goto out;
	}
	off = be(h + 8, 8);
	len = (uint32_t)be(h + 16, 4);
	if (!off || !len) {
		buf[0] = 0;
		goto out;
	}
	if (len >= cap || off > (uint64_t)INT64_MAX ||
	    pread(fd, buf, len, (off_t)off) != (ssize_t)len || memchr(buf, 0, len)) {
		rc = sb_seterr(SB_ERR_CORRUPT, "%s: bad backing file name in its header", path);
		goto out;
	}
	buf[len] = 0;
out:
	close(fd);
	return rc;
}

/* A new layer, written here rather than by qemu-img (which took 30 ms a
 * layer to start): qcow2 version 3, 64 KiB clusters, 16-bit refcounts.
 *   cluster 0    the header (104 bytes), its extensions (the backing
 *                file's format, then the end) and the backing file's name
 *   cluster 1    the refcount table: one entry, cluster 2
 *   cluster 2    the refcount block: clusters 0 to 2 and the L1 table's
 *                are used once
 *   cluster 3..  the L1 table, all zero: nothing is allocated, every read
 *                goes to the backing file
 * The L1 table has an entry per 512 MiB (an L2 table's reach); a disk of
 * size 0 has none (offset 0, as qemu-img makes it). */
#define LAYER_CLUSTER_BITS 16
#define LAYER_CLUSTER	   (1u << LAYER_CLUSTER_BITS)
#define LAYER_L2_REACH	   ((uint64_t)LAYER_CLUSTER * (LAYER_CLUSTER / 8))
#define LAYER_HEADER_LEN   104
#define LAYER_EXT_FORMAT   0xe2792acau
#define LAYER_MAX_SIZE	   ((uint64_t)1 << 50) /* 1 PiB: QEMU's own limit is 32 */

static void put_be(unsigned char *p, uint64_t v, int n)
{
	while (n--) {
		p[n] = (unsigned char)v;
		v >>= 8;
	}
}

/* The virtual size of the disk a new layer goes over: a raw file's length,
 * or a qcow2 header's size field. */
static int disk_size(const char *base, const char *base_fmt, uint64_t *size)
{
	unsigned char h[32];
	struct stat st;
	int fd = open(base, O_RDONLY | O_CLOEXEC), rc = SB_OK;

	if (fd < 0)
		return sb_seterr(SB_ERR_IO, "disk base %s: %s", base, strerror(errno));
	if (fstat(fd, &st))
		rc = sb_seterr(SB_ERR_IO, "disk base %s: %s", base, strerror(errno));
	else if (!strcmp(base_fmt, "raw"))
		*size = (uint64_t)st.st_size;
	else if (pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h ||
		 be(h, 4) != QCOW2_MAGIC || be(h + 4, 4) < 2 || be(h + 4, 4) > 3)
		rc = sb_seterr(SB_ERR_IO, "disk base %s: not a qcow2 image", base);
	else
		*size = be(h + 24, 8);
	close(fd);
	if (rc == SB_OK && *size > LAYER_MAX_SIZE)
		rc = sb_seterr(SB_ERR_INVAL, "disk base %s: a size of %llu bytes", base,
			       (unsigned long long)*size);
	return rc;
}

int sb_disk_layer_create(const char *base, const char *base_fmt, const char *path)
{
	char abs[PATH_MAX];
	unsigned char *c;
	uint64_t size = 0, l1_size, l1_clusters, i;
	size_t name_off, blen;
	int fd = -1, rc;

	if ((rc = disk_base(base, base_fmt, abs)) ||
	    (rc = disk_size(abs, base_fmt, &size)))
		return rc;
	l1_size = (size + LAYER_L2_REACH - 1) / LAYER_L2_REACH;
	l1_clusters = (l1_size * 8 + LAYER_CLUSTER - 1) / LAYER_CLUSTER;
	blen = strlen(abs);
	name_off = LAYER_HEADER_LEN + 8 + 8 + 8; /* the format's extension, the end */
	if (!(c = calloc(3, LAYER_CLUSTER)))
		return SB_ERR_NOMEM;
	/* cluster 0: the header */
	put_be(c, QCOW2_MAGIC, 4);
	put_be(c + 4, 3, 4);		       /* version */
	put_be(c + 8, name_off, 8);	       /* backing file name's offset */
	put_be(c + 16, blen, 4);	       /* ... and length */
	put_be(c + 20, LAYER_CLUSTER_BITS, 4); /* cluster bits */
	put_be(c + 24, size, 8);	       /* virtual size */
	put_be(c + 36, l1_size, 4);	       /* L1 entries */
	put_be(c + 40, l1_size ? 3 * LAYER_CLUSTER : 0, 8); /* L1 table's offset */
	put_be(c + 48, LAYER_CLUSTER, 8);      /* refcount table's offset */
	put_be(c + 56, 1, 4);		       /* ... its clusters */
	put_be(c + 96, 4, 4);		       /* refcount order: 16 bits */
	put_be(c + 100, LAYER_HEADER_LEN, 4);  /* header length */
	put_be(c + LAYER_HEADER_LEN, LAYER_EXT_FORMAT, 4); /* backing format */
	put_be(c + LAYER_HEADER_LEN + 4, strlen(base_fmt), 4);
	/* the format's name ("raw", "qcow2") fits its 8 bytes; the end
	 * extension after it is all zero, then the backing file's name */
	memcpy(c + LAYER_HEADER_LEN + 8, base_fmt, strlen(base_fmt));
	memcpy(c + name_off, abs, blen);
	/* cluster 1: the refcount table; cluster 2: its block */
	put_be(c + LAYER_CLUSTER, 2 * LAYER_CLUSTER, 8);
	for (i = 0; i < 3 + l1_clusters; i++)
		put_be(c + 2 * LAYER_CLUSTER + 2 * i, 1, 2);
	if ((fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0) {
		rc = sb_seterr(errno == EEXIST ? SB_ERR_EXISTS : SB_ERR_IO,
			       "disk layer %s: %s", path,
			       errno == EEXIST ? "already exists" : strerror(errno));
		goto out;
	}
	if (pwrite(fd, c, 3 * LAYER_CLUSTER, 0) != (ssize_t)(3 * LAYER_CLUSTER) ||
	    ftruncate(fd, (off_t)((3 + l1_clusters) * LAYER_CLUSTER))) {
		rc = sb_seterr(SB_ERR_IO, "disk layer %s: %s", path, strerror(errno));
		unlink(path);
	}
out:
	if (fd >= 0)
		close(fd);
	free(c);
	return rc;
}
