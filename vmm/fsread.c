/* fsread.c - offline reads of a run's ext4 disk through debugfs. */
#include "vmm/fsread.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/error.h"
#include "vmm/qemu.h"

struct sb_fsread {
	char dir[64];
	char raw[96];
};

static int check_exit(int rc, int status, const char *what, const char *out)
{
	if (rc)
		return rc;
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		return sb_seterr(SB_ERR_IO, "%s failed: %.200s", what, out);
	return SB_OK;
}

int sb_fsread_open(const char *layer, sb_fsread **out)
{
	sb_fsread *f;
	char msg[512];
	int status, rc;

	if (access(layer, R_OK))
		return sb_seterr(SB_ERR_NOTFOUND, "%s: %s", layer, strerror(errno));
	if (!(f = calloc(1, sizeof *f)))
		return SB_ERR_NOMEM;
	snprintf(f->dir, sizeof f->dir, "/tmp/sanbox-fs.XXXXXX");
	if (!mkdtemp(f->dir)) {
		free(f);
		return sb_seterr(SB_ERR_IO, "mkdtemp: %s", strerror(errno));
	}
	snprintf(f->raw, sizeof f->raw, "%s/disk.raw", f->dir);
	char *argv[] = {"qemu-img", "convert", "-U", "-O", "raw", (char *)layer, f->raw, NULL};
	rc = sb_proc_run(argv, 120000, msg, sizeof msg, &status);
	if ((rc = check_exit(rc, status, "qemu-img convert", msg))) {
		sb_fsread_close(f);
		return rc;
	}
	*out = f;
	return SB_OK;
}

void sb_fsread_close(sb_fsread *f)
{
	if (!f)
		return;
	unlink(f->raw);
	rmdir(f->dir);
	free(f);
}

/* Refuses paths debugfs would misread (quotes, newlines). */
static int path_ok(const char *p)
{
	return p[0] == '/' && strlen(p) < 1024 && !strpbrk(p, "\"\n\r");
}

int sb_fsread_ls(sb_fsread *f, const char *path, char *out, size_t cap)
{
	char cmd[1100], raw[65536];
	int status, rc;
	size_t o = 0;

	if (!path_ok(path))
		return sb_seterr(SB_ERR_INVAL, "bad path '%s'", path);
	snprintf(cmd, sizeof cmd, "ls -p \"%s\"", path);
	char *argv[] = {"debugfs", "-R", cmd, f->raw, NULL};
	rc = sb_proc_run(argv, 60000, raw, sizeof raw, &status);
	if ((rc = check_exit(rc, status, "debugfs", raw)))
		return rc;
	if (strstr(raw, "File not found") || strstr(raw, "Ext2 inode is not a directory"))
		return sb_seterr(SB_ERR_NOTFOUND, "%s: no such directory", path);
	/* ls -p lines: /inode/mode/uid/gid/name/size/ */
	out[0] = 0;
	for (char *line = strtok(raw, "\n"); line; line = strtok(NULL, "\n")) {
		/* ls -p: /inode/mode/uid/gid/name/size/ (size empty for dirs) */
		char *fl[7] = {0};
		int nf = 0;
		for (char *p = line; *p && nf < 7; p++)
			if (*p == '/') {
				*p = 0;
				fl[nf++] = p + 1;
			}
		if (nf < 7 || !*fl[4] || !strcmp(fl[4], ".") || !strcmp(fl[4], ".."))
			continue;
		int n = snprintf(out + o, cap - o, "%s %s %s\n", fl[1], *fl[5] ? fl[5] : "0", fl[4]);
		if (n < 0 || (size_t)n >= cap - o)
			break;
		o += (size_t)n;
	}
	return SB_OK;
}

int sb_fsread_copy(sb_fsread *f, const char *path, const char *dest)
{
	char cmd[2200], msg[1024];
	struct stat st;
	int status, rc;

	if (!path_ok(path) || strpbrk(dest, "\"\n\r"))
		return sb_seterr(SB_ERR_INVAL, "bad path '%s'", path);
	unlink(dest);
	snprintf(cmd, sizeof cmd, "dump \"%s\" \"%s\"", path, dest);
	char *argv[] = {"debugfs", "-R", cmd, f->raw, NULL};
	rc = sb_proc_run(argv, 60000, msg, sizeof msg, &status);
	if ((rc = check_exit(rc, status, "debugfs", msg)))
		return rc;
	if (strstr(msg, "File not found") || stat(dest, &st))
		return sb_seterr(SB_ERR_NOTFOUND, "%s: no such file", path);
	return SB_OK;
}
