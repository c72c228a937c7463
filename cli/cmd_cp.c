/* cmd_cp.c - sanbox cp [--force] RUN:PATH LOCAL: copy a file or a symlink
 * out of a run's disk; cp -r RUN:DIR LOCAL: a directory with all in it. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/text.h"
#include "engine/error.h"
#include "vmm/fsread.h"

/* Creates at (which must not exist): the guest's symlink e with the same
 * target, or its regular file gp with its bytes and permission bits
 * (less the umask and the set-id bits). Never follows anything at at;
 * removes what it created when it fails. Local errors name name.
 * Errors: SB_ERR_EXISTS (something is at at), SB_ERR_IO, and those of
 * cli_disk_read_fd. */
static int cp_create(const char *at, const char *name, cli_disk *f, const char *gp,
		     const struct sb_fs_entry *e)
{
	int fd, rc;

	if (e->type == SB_FS_SYMLINK)
		fd = symlink(e->target, at) ? -1 : 0;
	else
		fd = open(at, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			  (mode_t)(e->mode & 0777));
	if (fd < 0)
		return sb_seterr(errno == EEXIST ? SB_ERR_EXISTS : SB_ERR_IO, "%s: %s",
				 name, strerror(errno));
	if (e->type == SB_FS_SYMLINK)
		return SB_OK;
	rc = cli_disk_read_fd(f, gp, fd);
	if (close(fd) && !rc)
		rc = sb_seterr(SB_ERR_IO, "%s: %s", name, strerror(errno));
	if (rc)
		unlink(at);
	return rc;
}

/* Makes dest from the guest's entry: created in place, or with force
 * created under a fresh name beside dest and renamed over it (so what was
 * at dest, a symlink included, is replaced and never written through). */
static int cp_place(const char *dest, int force, cli_disk *f, const char *gp,
		    const struct sb_fs_entry *e)
{
	char tmp[PATH_MAX];
	int rc = SB_ERR_EXISTS;

	if (!force)
		return cp_create(dest, dest, f, gp, e);
	for (unsigned i = 0; i < 100 && rc == SB_ERR_EXISTS; i++) {
		if ((size_t)snprintf(tmp, sizeof tmp, "%s.sanbox-%d-%u", dest,
				     (int)getpid(), i) >= sizeof tmp)
			return sb_seterr(SB_ERR_INVAL, "%s: name too long", dest);
		rc = cp_create(tmp, dest, f, gp, e);
	}
	if (rc)
		return rc;
	if (rename(tmp, dest)) {
		rc = sb_seterr(SB_ERR_IO, "%s: %s", dest, strerror(errno));
		unlink(tmp);
	}
	return rc;
}

#define CP_DEPTH_MAX 64 /* directories in directories cp -r follows */

/* The names of a guest directory's entries, as listed. */
struct cp_names {
	char **v;
	size_t n, cap;
	size_t refused; /* names no local file can have ('/', NUL, "..") */
};

static int cp_name(const struct sb_fs_entry *e, void *ctx)
{
	struct cp_names *l = ctx;
	char **v;

	if (e->name_len != strlen(e->name) || strchr(e->name, '/') || !strcmp(e->name, ".") ||
	    !strcmp(e->name, "..") || !e->name_len) {
		l->refused++;
		return SB_OK;
	}
	if (l->n == l->cap) {
		if (!(v = realloc(l->v, (l->cap ? 2 * l->cap : 32) * sizeof *v)))
			return SB_ERR_NOMEM;
		l->v = v;
		l->cap = l->cap ? 2 * l->cap : 32;
	}
	return (l->v[l->n] = strdup(e->name)) ? (l->n++, SB_OK) : SB_ERR_NOMEM;
}

static int cp_tree(cli_disk *f, const char *gp, const char *dest, unsigned depth,
		   size_t *skipped);

/* Copies the guest's entry gp to dest (which must not exist): a file or
 * a symlink as cp copies one, a directory with all in it; anything else
 * (a device, a FIFO, a socket) is counted in *skipped. */
static int cp_entry(cli_disk *f, const char *gp, const char *dest, unsigned depth,
		    size_t *skipped)
{
	struct sb_fs_entry e;
	mode_t mode;
	int rc;

	if ((rc = cli_disk_stat(f, gp, &e)))
		return rc;
	if (e.type == SB_FS_FILE || (e.type == SB_FS_SYMLINK && e.target &&
				     !memchr(e.target, 0, e.target_len)))
		return cp_create(dest, dest, f, gp, &e);
	if (e.type != SB_FS_DIR) {
		++*skipped;
		return SB_OK;
	}
	if (depth >= CP_DEPTH_MAX)
		return sb_seterr(SB_ERR_TOOBIG, "%s: more than %d directories deep", gp,
				 CP_DEPTH_MAX);
	mode = (mode_t)(e.mode & 0777);
	if (mkdir(dest, 0700))
		return sb_seterr(errno == EEXIST ? SB_ERR_EXISTS : SB_ERR_IO, "%s: %s", dest,
				 strerror(errno));
	if ((rc = cp_tree(f, gp, dest, depth + 1, skipped)) == SB_OK && chmod(dest, mode))
		rc = sb_seterr(SB_ERR_IO, "%s: %s", dest, strerror(errno));
	return rc;
}

/* Copies the entries of the guest's directory gp into dest, made. */
static int cp_tree(cli_disk *f, const char *gp, const char *dest, unsigned depth,
		   size_t *skipped)
{
	struct cp_names l = {0};
	char g[SB_FS_PATH_MAX + 16], d[PATH_MAX];
	int rc = cli_disk_list(f, gp, cp_name, &l);

	*skipped += l.refused;
	for (size_t i = 0; rc == SB_OK && i < l.n; i++) {
		if ((size_t)snprintf(g, sizeof g, "%s/%s", strcmp(gp, "/") ? gp : "", l.v[i]) >=
			sizeof g ||
		    (size_t)snprintf(d, sizeof d, "%s/%s", dest, l.v[i]) >= sizeof d) {
			++*skipped; /* too long a path to name */
			continue;
		}
		rc = cp_entry(f, g, d, depth, skipped);
	}
	for (size_t i = 0; i < l.n; i++)
		free(l.v[i]);
	free(l.v);
	return rc;
}

/* cp -r RUN:DIR LOCAL: the directory gp of the run's disk into LOCAL,
 * which must not exist. */
static int cp_out_tree(const char *want, const char *gp, const char *dest)
{
	struct sb_fs_entry e;
	size_t skipped = 0;
	cli_disk *f;
	int rc;

	if ((rc = cli_fs_open(want, NULL, &f)))
		return rc;
	if ((rc = cli_disk_stat(f, gp, &e))) {
		rc = cli_fs_fail(rc);
	} else if (e.type != SB_FS_DIR) {
		rc = cli_fs_refuse(gp, &e, " (cp -r copies a directory)");
	} else if ((rc = cp_entry(f, gp, dest, 0, &skipped)) == SB_ERR_EXISTS) {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
	} else if (rc) {
		rc = cli_fs_fail(rc);
	} else if (skipped) {
		cli_note("%zu entr%s not copied (a device, a FIFO, a socket, or a name no "
			 "local file can have)",
			 skipped, skipped == 1 ? "y" : "ies");
	}
	cli_disk_close(f);
	return rc;
}

/* The run of a RUN:PATH operand into want (cap bytes) and its PATH into
 * *path; 0 when s is not one (no ':', or a '/' before it: a local path). */
static int run_operand(const char *s, char *want, size_t cap, const char **path)
{
	const char *colon = strchr(s, ':');

	if (!colon || colon == s || memchr(s, '/', (size_t)(colon - s)) ||
	    (size_t)(colon - s) >= cap)
		return 0;
	memcpy(want, s, (size_t)(colon - s));
	want[colon - s] = 0;
	*path = colon + 1;
	return 1;
}

/* cp RUN:PATH LOCAL --at OFFSET: the file as the record has it at
 * OFFSET (fs cat --at's), into LOCAL made as cp_place makes a file (mode
 * 0666 less the umask). */
static int cp_at(const char *want, struct cli_fs_at *sel, const char *path, const char *dest,
		 int force)
{
	char tmp[PATH_MAX];
	const char *at = dest;
	int fd, rc;

	if (force && (size_t)snprintf(tmp, sizeof tmp, "%s.sanbox-%d", dest, (int)getpid()) >=
			 sizeof tmp)
		return cli_fail_code(CLI_EXIT_USAGE, "%s: name too long", dest);
	if (force)
		at = tmp;
	if ((fd = open(at, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666)) < 0)
		return errno == EEXIST && !force
			   ? cli_fail(SB_ERR_EXISTS, "%s already exists (--force replaces it)", dest)
			   : cli_fail(SB_ERR_IO, "%s: %s", dest, strerror(errno));
	rc = cli_fs_cat(want, sel, path, fd);
	if (close(fd) && !rc)
		rc = cli_fail(SB_ERR_IO, "%s: %s", dest, strerror(errno));
	if (!rc && force && rename(tmp, dest))
		rc = cli_fail(SB_ERR_IO, "%s: %s", dest, strerror(errno));
	if (rc)
		unlink(at);
	return rc;
}

int cmd_cp(int argc, char **argv)
{
	static const struct option opts[] = {
	    CLI_OPT_HELP,
	    {"force", no_argument, NULL, 'f'},
	    {"recursive", no_argument, NULL, 'r'},
	    {"json", no_argument, NULL, 'j'},
	    {"at", required_argument, NULL, 'a'},
	    {NULL, 0, NULL, 0},
	};
	struct cli_fs_at sel = {0};
	int at = 0;
	char want[128], gp[SB_FS_PATH_MAX + 16];
	const char *src, *dest, *colon, *path;
	struct sb_fs_entry e;
	int force = 0, recurse = 0, json = 0, ch, rc;
	cli_disk *f;

	while ((ch = getopt_long(argc, argv, ":hfr", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("cp");
		case 'f': force = 1; break;
		case 'r': recurse = 1; break;
		case 'j': json = 1; break;
		case 'a':
			if ((rc = cli_parse_u64("--at", optarg, 0, UINT64_MAX, &sel.at)))
				return rc;
			at = 1;
			break;
		default: return cli_badopt("cp", argv, ch);
		}
	}
	if (argc - optind != 2)
		return cli_usage("cp");
	src = argv[optind];
	dest = argv[optind + 1];
	if (!run_operand(src, want, sizeof want, &path) &&
	    run_operand(dest, want, sizeof want, &path)) /* into a live run */
		return path[0] && src[0] && !force && !at ? cli_cp_in(src, want, path, recurse, json)
						   : cli_usage("cp");
	if (json || (recurse && (at || force)))
		return cli_fail_code(CLI_EXIT_USAGE,
				     "cp: --json is for a copy into a run; -r out of a run "
				     "takes neither --at nor --force");
	if (!(colon = strchr(src, ':')) || colon == src ||
	    (size_t)(colon - src) >= sizeof want || !colon[1] || !dest[0])
		return cli_usage("cp");
	memcpy(want, src, (size_t)(colon - src));
	want[colon - src] = 0;
	if (!strcmp(dest, "-"))
		return cli_fs_cat(want, at ? &sel : NULL, colon + 1, STDOUT_FILENO);
	if (at)
		return cp_at(want, &sel, colon + 1, dest, force);
	cli_guest_path(colon + 1, gp, sizeof gp);
	if (recurse)
		return cp_out_tree(want, gp, dest);
	if ((rc = cli_fs_open(want, NULL, &f)))
		return rc;
	if ((rc = cli_disk_stat(f, gp, &e))) {
		rc = cli_fs_fail(rc);
	} else if (e.type != SB_FS_FILE && e.type != SB_FS_SYMLINK) {
		rc = cli_fs_refuse(gp, &e, " (cp copies a file or a symlink)");
	} else if (e.type == SB_FS_SYMLINK && memchr(e.target, 0, e.target_len)) {
		rc = cli_fs_refuse(gp, &e, " whose target holds a NUL byte");
	} else if ((rc = cp_place(dest, force, f, gp, &e)) == SB_ERR_EXISTS) {
		rc = cli_fail(rc, "%s already exists (--force replaces it)", dest);
	} else if (rc) {
		rc = cli_fs_fail(rc);
	}
	cli_disk_close(f);
	return rc;
}
