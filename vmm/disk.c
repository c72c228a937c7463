/* disk.c - qcow2 disk layers, made with qemu-img. */
#include "vmm/disk.h"

#include "engine/error.h"
#include "engine/proc.h"
#include "vmm/qemu.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define DISK_QEMU_IMG_MS 30000

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

int sb_disk_layer_create(const char *base, const char *base_fmt, const char *path)
{
	char abs[PATH_MAX], out[4096];
	char *argv[] = {"qemu-img",	  "create",	"-q", "-f",
			"qcow2",	  "-b",		abs,  "-F",
			(char *)base_fmt, (char *)path, NULL};
	struct stat st;
	int rc, status;

	if (!base_fmt || (strcmp(base_fmt, "raw") && strcmp(base_fmt, "qcow2")))
		return sb_seterr(SB_ERR_INVAL, "disk base format \"%s\" (raw or qcow2)",
				 base_fmt ? base_fmt : "");
	if (!realpath(base, abs))
		return sb_seterr(errno == ENOENT ? SB_ERR_NOTFOUND : SB_ERR_IO,
				 "disk base %s: %s", base, strerror(errno));
	if (lstat(path, &st) == 0)
		return sb_seterr(SB_ERR_EXISTS, "disk layer %s already exists", path);
	rc = sb_proc_run(argv, DISK_QEMU_IMG_MS, out, sizeof out, &status);
	if (rc == SB_ERR_UNAVAIL)
		return sb_seterr(rc, "qemu-img not found (install qemu-utils)");
	if (rc)
		return rc;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return sb_seterr(SB_ERR_IO, "qemu-img create %s: %s", path,
				 out[0] ? disk_last_line(out) : "failed");
	return 0;
}
