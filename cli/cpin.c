/* cpin.c - sanbox cp HOSTPATH RUN:PATH: copy a file, a symlink or (-r) a
 * directory tree of this host into a live run's /workspace, through the
 * daemon (run.put) and the guest agent, which writes it there never
 * through a link. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "vmm/chan.h"

#define CPIN_DEPTH_MAX 64

/* The files of one copy, packed as run.put's files as they are read. */
struct cpin {
	msgpack_sbuffer files;
	msgpack_packer fpk;
	size_t n;
	uint64_t bytes;
};

/* Reads regular file fd (of st) whole into a new buffer. Errors:
 * SB_ERR_TOOBIG past what is left of the copy's limit, SB_ERR_IO. */
static int file_read(int fd, const struct stat *st, uint64_t left, char **out)
{
	size_t n = 0;
	ssize_t got;
	char *b;

	if ((uint64_t)st->st_size > left)
		return sb_seterr(SB_ERR_TOOBIG, "over 48 MiB in all");
	if (!(b = malloc((size_t)st->st_size + 1)))
		return sb_seterr(SB_ERR_NOMEM, "out of memory");
	while (n < (size_t)st->st_size && (got = read(fd, b + n, (size_t)st->st_size - n)) > 0)
		n += (size_t)got;
	if (n != (size_t)st->st_size) {
		free(b);
		return sb_seterr(SB_ERR_IO, "%s", n ? "it changed while read" : strerror(errno));
	}
	*out = b;
	return SB_OK;
}

/* Adds one entry: rel's mode and data (n bytes). */
static int entry_add(struct cpin *c, const char *rel, uint64_t mode, const char *data, size_t n)
{
	sb_mapw m;

	if (c->n == SB_CHAN_INPUT_FILES)
		return sb_seterr(SB_ERR_TOOBIG, "over 1024 files");
	sb_mapw_begin(&m, &c->fpk);
	sb_mapw_str(&m, "path", rel);
	sb_mapw_u64(&m, "mode", mode);
	if (data)
		sb_mapw_bin(&m, "data", n ? data : "", n);
	if (sb_mapw_end(&m))
		return sb_seterr(SB_ERR_NOMEM, "out of memory");
	c->n++;
	c->bytes += n;
	return SB_OK;
}

static int walk(struct cpin *c, int dirfd, const char *name, const char *rel, int recurse,
		int depth);

/* Adds the entries of directory fd under rel. */
static int walk_dir(struct cpin *c, int fd, const char *rel, int depth)
{
	char sub[PATH_MAX];
	struct dirent *d;
	DIR *dir = fdopendir(fd);
	int rc = SB_OK;

	if (!dir) {
		close(fd);
		return sb_seterr(SB_ERR_IO, "%s: %s", rel, strerror(errno));
	}
	while (rc == SB_OK && (d = readdir(dir))) {
		if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
			continue;
		if ((size_t)snprintf(sub, sizeof sub, "%s/%s", rel, d->d_name) >= sizeof sub)
			rc = sb_seterr(SB_ERR_TOOBIG, "%s/%s: name too long", rel, d->d_name);
		else
			rc = walk(c, dirfd(dir), d->d_name, sub, 1, depth + 1);
	}
	closedir(dir);
	return rc;
}

/* Adds name (under dirfd, never followed) as rel; a directory with all in
 * it when recurse. Errors name rel. */
static int walk(struct cpin *c, int dirfd, const char *name, const char *rel, int recurse,
		int depth)
{
	char target[PATH_MAX], *data = NULL;
	struct stat st;
	ssize_t n;
	int fd, rc;

	if (depth > CPIN_DEPTH_MAX)
		return sb_seterr(SB_ERR_TOOBIG, "%s: over %d levels deep", rel, CPIN_DEPTH_MAX);
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW))
		return sb_seterr(errno == ENOENT ? SB_ERR_NOTFOUND : SB_ERR_IO, "%s: %s", rel,
				 strerror(errno));
	if (S_ISLNK(st.st_mode)) {
		if ((n = readlinkat(dirfd, name, target, sizeof target)) <= 0 ||
		    (size_t)n >= sizeof target)
			return sb_seterr(SB_ERR_IO, "%s: cannot read the link", rel);
		return entry_add(c, rel, S_IFLNK | 0777, target, (size_t)n);
	}
	if (S_ISDIR(st.st_mode) && !recurse)
		return sb_seterr(SB_ERR_INVAL, "%s is a directory (cp -r copies one)", rel);
	if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
		return sb_seterr(SB_ERR_INVAL, "%s is not a file, a link or a directory", rel);
	if ((fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return sb_seterr(SB_ERR_IO, "%s: %s", rel, strerror(errno));
	if (S_ISDIR(st.st_mode)) {
		if ((rc = entry_add(c, rel, S_IFDIR | (st.st_mode & 0777), NULL, 0)))
			close(fd);
		return rc ? rc : walk_dir(c, fd, rel, depth);
	}
	rc = file_read(fd, &st, SB_CHAN_INPUTS_MAX - c->bytes, &data);
	close(fd);
	if (rc)
		return sb_seterr(rc, "%s: %s", rel, sb_errmsg(rc));
	rc = entry_add(c, rel, st.st_mode & 0777, data, (size_t)st.st_size);
	free(data);
	return rc;
}

/* The path under /workspace that guest names (absolute under
 * /workspace, or relative to it), into rel; 0, or -1 when it is outside
 * /workspace or has a "", "." or ".." part. */
static int guest_rel(const char *guest, char *rel, size_t cap)
{
	const char *p = guest;
	size_t n;

	if (p[0] == '/') {
		if (strncmp(p, "/workspace/", 11))
			return -1;
		p += 11;
	}
	n = strlen(p);
	while (n && p[n - 1] == '/') /* a directory's trailing slash */
		n--;
	if (!n || n >= cap)
		return -1;
	memcpy(rel, p, n);
	rel[n] = 0;
	for (char *s = rel, *e;; s = e + 1) {
		e = strchr(s, '/');
		size_t len = e ? (size_t)(e - s) : strlen(s);
		if (!len || (len == 1 && s[0] == '.') || (len == 2 && !strncmp(s, "..", 2)))
			return -1;
		if (!e)
			return 0;
	}
}

/* Sends the files packed in c to run as run.put and says how it went. */
static int cpin_send(const char *run, const char *rel, struct cpin *c, int json)
{
	struct sb_reply rep = {0};
	struct cli_req r;
	sb_client *cl;
	char err[256];
	int rc;

	if ((rc = cli_connect(1, &cl)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	cli_req_begin(&r, "run.put");
	sb_mapw_str(&r.m, "run", run);
	msgpack_pack_array(sb_mapw_key(&r.m, "files"), c->n);
	rc = sb_pack_raw(&r.m.pk, c->files.data, c->files.size);
	rc = rc ? rc : cli_call(cl, &r, &rep);
	if (rc) {
		rc = cli_fail_request(rc);
	} else if (json) {
		cli_print_reply(&rep.map);
	}
	if (rc == SB_OK && sb_map_str(&rep.map, "error", err, sizeof err) > 0)
		rc = cli_fail(SB_ERR_IO, "cp to %s:/workspace/%s: %s", run, rel, err);
	else if (rc == SB_OK && sb_map_u64(&rep.map, "skipped", 0))
		rc = cli_fail(SB_ERR_DENIED,
			      "cp to %s:/workspace/%s: %llu paths skipped: a link or a "
			      "non-directory of the guest is on their way",
			      run, rel, (unsigned long long)sb_map_u64(&rep.map, "skipped", 0));
	sb_reply_free(&rep);
	sb_client_close(cl);
	return rc;
}

int cli_cp_in(const char *local, const char *run, const char *guest, int recurse, int json)
{
	char rel[SB_FS_PATH_MAX];
	struct cpin c = {0};
	int rc;

	if (guest_rel(guest, rel, sizeof rel))
		return cli_fail_code(CLI_EXIT_USAGE,
				     "cp: %s: a copy into a run goes under /workspace, without "
				     "'.' or '..' parts",
				     guest);
	msgpack_sbuffer_init(&c.files);
	msgpack_packer_init(&c.fpk, &c.files, msgpack_sbuffer_write);
	if (access(local, F_OK) && errno == ENOENT)
		rc = sb_seterr(SB_ERR_NOTFOUND, "%s: %s", local, strerror(errno));
	else
		rc = walk(&c, AT_FDCWD, local, rel, recurse, 0);
	if (rc == SB_OK)
		rc = cpin_send(run, rel, &c, json);
	else
		rc = rc == SB_ERR_INVAL ? cli_fail_code(CLI_EXIT_USAGE, "cp: %s", sb_errmsg(rc))
					: cli_fail(rc, "cp: %s", sb_errmsg(rc));
	msgpack_sbuffer_destroy(&c.files);
	return rc;
}
