/* disk.c - qcow2 disk layers, made with qemu-img. */
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

#define DISK_QEMU_IMG_MS 30000
#define DISK_REBASE_MS	 600000 /* copies data: may take long */

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

int sb_disk_layer_create(const char *base, const char *base_fmt, const char *path)
{
	char abs[PATH_MAX];
	char *argv[] = {"qemu-img",	  "create",	"-q", "-f",
			"qcow2",	  "-b",		abs,  "-F",
			(char *)base_fmt, (char *)path, NULL};
	struct stat st;
	int rc;

	if ((rc = disk_base(base, base_fmt, abs)))
		return rc;
	if (lstat(path, &st) == 0)
		return sb_seterr(SB_ERR_EXISTS, "disk layer %s already exists", path);
	return disk_qemu_img(argv, "create", path, DISK_QEMU_IMG_MS);
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
