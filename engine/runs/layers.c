/* layers.c - a run's disk layers and snapshots (see layers.h). */
#include "engine/runs/layers.h"

#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/home.h"
#include "engine/template.h"
#include "vmm/disk.h"

#define LAYERS_MAX 4096 /* layers of one run this reads */

/* Formats a path into buf; 0, or -1 when it does not fit. */
static int pathf(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int pathf(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
	return n < 0 || (size_t)n >= cap ? -1 : 0;
}

static int layers_dir(const char *home, const char *run, char *buf, size_t cap)
{
	if ((size_t)snprintf(buf, cap, "%s/runs/%s/layers", home, run) >= cap)
		return sb_seterr(SB_ERR_TOOBIG, "state directory path too long");
	return SB_OK;
}

int sb_layers_path(const char *home, const char *run, unsigned n, char *buf, size_t cap)
{
	if ((size_t)snprintf(buf, cap, "%s/runs/%s/layers/%u.qcow2", home, run, n) >= cap)
		return sb_seterr(SB_ERR_TOOBIG, "state directory path too long");
	return SB_OK;
}

/* Parses "N.qcow2" (N decimal, no sign or leading zero) into *n. */
static int layer_name(const char *name, unsigned *n)
{
	char *end;
	unsigned long v;

	if (name[0] < '0' || name[0] > '9' || (name[0] == '0' && name[1] != '.'))
		return 0;
	errno = 0;
	v = strtoul(name, &end, 10);
	if (errno || v > LAYERS_MAX * 1024u || strcmp(end, ".qcow2"))
		return 0;
	*n = (unsigned)v;
	return 1;
}

/* Lists the numbers of the layers in dir into a new array *ns (sorted),
 * *count of them. A missing dir is SB_ERR_NOTFOUND. */
static int layers_list(const char *dir, unsigned **ns, size_t *count)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	unsigned *v = NULL, n;
	size_t k = 0;

	*ns = NULL;
	*count = 0;
	if (!d)
		return sb_seterr(errno == ENOENT ? SB_ERR_NOTFOUND : SB_ERR_IO, "%s: %s",
				 dir, strerror(errno));
	if (!(v = malloc(LAYERS_MAX * sizeof *v))) {
		closedir(d);
		return SB_ERR_NOMEM;
	}
	while ((e = readdir(d)) && k < LAYERS_MAX)
		if (layer_name(e->d_name, &n))
			v[k++] = n;
	closedir(d);
	for (size_t i = 1; i < k; i++) /* insertion sort: k is small */
		for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
			unsigned t = v[j];
			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	*ns = v;
	*count = k;
	return SB_OK;
}

/* The newest layer file of run (or SB_ERR_NOTFOUND). */
static int layers_max(const char *home, const char *run, unsigned *max)
{
	char dir[SB_LAYER_PATH_MAX];
	unsigned *ns;
	size_t k;
	int rc;

	if ((rc = layers_dir(home, run, dir, sizeof dir)) ||
	    (rc = layers_list(dir, &ns, &k)))
		return rc;
	if (k)
		*max = ns[k - 1];
	free(ns);
	return k ? SB_OK : sb_seterr(SB_ERR_NOTFOUND, "run %s has no disk layer", run);
}

int sb_layers_top(const char *home, const char *run, unsigned *top)
{
	char link[SB_LAYER_PATH_MAX], target[64];
	ssize_t n;

	/* the top is what disk.qcow2 names: a newer file is a snapshot that
	 * failed half-way */
	if (pathf(link, sizeof link, "%s/runs/%s/disk.qcow2", home, run))
		return sb_seterr(SB_ERR_TOOBIG, "state directory path too long");
	n = readlink(link, target, sizeof target - 1);
	if (n > 7 && !strncmp(target, "layers/", 7)) {
		target[n] = 0;
		if (layer_name(target + 7, top))
			return SB_OK;
	}
	return layers_max(home, run, top);
}

/* Points home/runs/RUN/disk.qcow2 at layer n (a new link renamed over). */
static int link_top(const char *home, const char *run, unsigned n)
{
	char link[SB_LAYER_PATH_MAX], tmp[SB_LAYER_PATH_MAX + 8], target[32];

	snprintf(target, sizeof target, "layers/%u.qcow2", n);
	if ((size_t)snprintf(link, sizeof link, "%s/runs/%s/disk.qcow2", home, run) >=
	    sizeof link)
		return sb_seterr(SB_ERR_TOOBIG, "state directory path too long");
	snprintf(tmp, sizeof tmp, "%s.new", link);
	unlink(tmp);
	if (symlink(target, tmp) || rename(tmp, link))
		return sb_seterr(SB_ERR_IO, "%s: %s", link, strerror(errno));
	return SB_OK;
}

int sb_layers_create(const char *home, const char *run, const char *base,
		     const char *base_fmt, unsigned *n)
{
	char dir[SB_LAYER_PATH_MAX], path[SB_LAYER_PATH_MAX];
	unsigned top;
	int rc;

	if ((rc = layers_dir(home, run, dir, sizeof dir)) || (rc = sb_mkdirs(dir, 0700)))
		return rc;
	rc = sb_layers_top(home, run, &top);
	if (rc && rc != SB_ERR_NOTFOUND)
		return rc;
	*n = rc ? 0 : top + 1;
	if ((rc = sb_layers_path(home, run, *n, path, sizeof path)) ||
	    (rc = sb_disk_layer_create(base, base_fmt, path)))
		return rc;
	return link_top(home, run, *n);
}

static const char *file_format(const char *file)
{
	char b[PATH_MAX];

	return sb_disk_backing(file, b, sizeof b) == SB_OK ? "qcow2" : "raw";
}

/* Counts the qcow2 files of the chain base begins (base included) into
 * *len, and names its bottom file (a raw root file system, or a qcow2
 * layer without a backing file) in bottom. */
static int chain_length(const char *base, unsigned *len, char *bottom, size_t cap)
{
	char cur[PATH_MAX], next[PATH_MAX];
	int rc;

	*len = 0;
	if ((size_t)snprintf(cur, sizeof cur, "%s", base) >= sizeof cur)
		return sb_seterr(SB_ERR_TOOBIG, "%s: path too long", base);
	for (;;) {
		rc = sb_disk_backing(cur, next, sizeof next);
		if (rc == SB_ERR_CORRUPT) /* not qcow2: the raw root (checked first) */
			break;
		if (rc)
			return rc;
		if (++*len > SB_LAYERS_CHAIN_LIMIT)
			return sb_seterr(SB_ERR_CORRUPT, "%s: a chain of more than %u files",
					 base, SB_LAYERS_CHAIN_LIMIT);
		if (!next[0]) /* a layer without a backing file */
			break;
		memcpy(cur, next, sizeof cur);
	}
	if ((size_t)snprintf(bottom, cap, "%s", cur) >= cap)
		return sb_seterr(SB_ERR_TOOBIG, "%s: path too long", cur);
	return SB_OK;
}

int sb_layers_fork(const char *home, const char *run, const char *base, unsigned chain_max,
		   unsigned *n)
{
	char bottom[PATH_MAX], flat[SB_LAYER_PATH_MAX], tmp[SB_LAYER_PATH_MAX + 8];
	unsigned len;
	int rc;

	if ((rc = sb_layers_check(home, base)) ||
	    (rc = chain_length(base, &len, bottom, sizeof bottom)))
		return rc;
	if (len <= chain_max)
		return sb_layers_create(home, run, base, "qcow2", n);
	/* its own base: a layer over base whose data the chain's layers above
	 * the bottom are copied into (safe rebase), made under a temporary
	 * name, then frozen as layer 0 */
	if ((rc = layers_dir(home, run, flat, sizeof flat)) || (rc = sb_mkdirs(flat, 0700)) ||
	    (rc = sb_layers_path(home, run, 0, flat, sizeof flat)))
		return rc;
	if (!access(flat, F_OK))
		return sb_seterr(SB_ERR_EXISTS, "%s exists: run %s has layers already", flat,
				 run);
	pathf(tmp, sizeof tmp, "%s.tmp", flat);
	unlink(tmp);
	if ((rc = sb_disk_layer_create(base, "qcow2", tmp)) ||
	    (rc = sb_disk_layer_rebase(tmp, bottom, file_format(bottom))))
		goto fail;
	if (chmod(tmp, 0444) || rename(tmp, flat)) {
		rc = sb_seterr(SB_ERR_IO, "%s: %s", tmp, strerror(errno));
		goto fail;
	}
	if ((rc = sb_layers_create(home, run, flat, "qcow2", n)))
		goto fail;
	return SB_OK;
fail:
	unlink(tmp);
	unlink(flat); /* not there before (checked above) */
	return rc;
}

int sb_layers_next(const char *home, const char *run, unsigned *n, char *path, size_t cap)
{
	char dir[SB_LAYER_PATH_MAX], real[PATH_MAX];
	unsigned top, max;
	int rc;

	if ((rc = sb_layers_top(home, run, &top)) || (rc = layers_max(home, run, &max)) ||
	    (rc = layers_dir(home, run, dir, sizeof dir)))
		return rc;
	/* the files of snapshots that failed half-way */
	for (unsigned k = top + 1; k <= max; k++)
		if (!sb_layers_path(home, run, k, path, cap) && unlink(path) &&
		    errno != ENOENT)
			return sb_seterr(SB_ERR_EXISTS, "%s is in the way: %s", path,
					 strerror(errno));
	/* QEMU writes this name into the next layer as its backing file's:
	 * canonical, so that the chain is found by name */
	if (!realpath(dir, real))
		return sb_seterr(SB_ERR_IO, "%s: %s", dir, strerror(errno));
	if (pathf(path, cap, "%s/%u.qcow2", real, top + 1))
		return sb_seterr(SB_ERR_TOOBIG, "state directory path too long");
	*n = top + 1;
	return SB_OK;
}

int sb_layers_freeze(const char *home, const char *run, unsigned n)
{
	char path[SB_LAYER_PATH_MAX];
	int rc;

	if ((rc = sb_layers_path(home, run, n, path, sizeof path)))
		return rc;
	if (chmod(path, 0444))
		return sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
	return SB_OK;
}

int sb_layers_advance(const char *home, const char *run, unsigned n)
{
	char path[SB_LAYER_PATH_MAX];
	struct stat st;
	unsigned top;
	int rc;

	if ((rc = sb_layers_path(home, run, n, path, sizeof path)))
		return rc;
	if (stat(path, &st))
		return sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
	if (sb_layers_top(home, run, &top) == SB_OK && top != n &&
	    (rc = sb_layers_freeze(home, run, top)))
		return rc;
	return link_top(home, run, n);
}

int sb_layers_settle(const char *home, const char *run, const char *active)
{
	char dir[SB_LAYER_PATH_MAX], real[PATH_MAX];
	unsigned n, top;
	size_t dl;
	int rc;

	if ((rc = layers_dir(home, run, dir, sizeof dir)))
		return rc;
	if (!realpath(dir, real))
		return sb_seterr(SB_ERR_IO, "%s: %s", dir, strerror(errno));
	dl = strlen(real);
	if (strncmp(active, real, dl) || active[dl] != '/' ||
	    !layer_name(active + dl + 1, &n))
		return sb_seterr(SB_ERR_PROTO,
				 "QEMU writes %.200s, not a layer of run %s", active,
				 run);
	if ((rc = sb_layers_top(home, run, &top)))
		return rc;
	if (n == top)
		return SB_OK;
	return n > top ? sb_layers_advance(home, run, n) : link_top(home, run, n);
}

/* --- the chain a reader follows --- */

/* Is real (a real path) runs/RUN/layers/N.qcow2 for some RUN, or
 * runs/RUN/disk.qcow2 (the one layer of a run made before layers)? */
static int is_layer_in(const char *real, const char *runs)
{
	size_t rl = strlen(runs);
	const char *run = real + rl + 1, *slash;
	unsigned n;

	if (strncmp(real, runs, rl) || real[rl] != '/' || !(slash = strchr(run, '/')) ||
	    slash == run)
		return 0;
	if (!strcmp(slash, "/disk.qcow2"))
		return 1;
	return !strncmp(slash, "/layers/", 8) && layer_name(slash + 8, &n);
}

/* Is real (a real path) the root file system of a template of the store
 * (STORE/NAME/rootfs.img, resolved: a template may be a symbolic link)? */
static int is_template_root(const char *real, const char *store)
{
	char path[SB_LAYER_PATH_MAX], r[PATH_MAX];
	struct dirent *e;
	int found = 0;
	DIR *d;

	if (!store[0] || !(d = opendir(store)))
		return 0;
	while (!found && (e = readdir(d)))
		found = e->d_name[0] != '.' &&
			!pathf(path, sizeof path, "%s/%s/rootfs.img", store, e->d_name) &&
			realpath(path, r) && !strcmp(r, real);
	closedir(d);
	return found;
}

int sb_layers_check(const char *home, const char *path)
{
	char runs[PATH_MAX], given[SB_LAYER_PATH_MAX], buf[SB_LAYER_PATH_MAX],
	    real[PATH_MAX], backing[PATH_MAX];
	int rc;

	if (pathf(buf, sizeof buf, "%s/runs", home) || !realpath(buf, runs))
		return sb_seterr(SB_ERR_IO, "%s/runs: %s", home, strerror(errno));
	if ((rc = sb_template_store(home, given, sizeof given)))
		return rc;
	if (!realpath(path, real))
		return sb_seterr(errno == ENOENT ? SB_ERR_NOTFOUND : SB_ERR_IO, "%s: %s",
				 path, strerror(errno));
	for (unsigned depth = 0;; depth++) {
		if (depth > LAYERS_MAX)
			return sb_seterr(SB_ERR_CORRUPT,
					 "%s: a chain of more than %u layers", path,
					 LAYERS_MAX);
		if (!is_layer_in(real, runs))
			return sb_seterr(SB_ERR_CORRUPT,
					 "%s reads %s: not a layer of a run of %s", path,
					 real, home);
		if ((rc = sb_disk_backing(real, backing, sizeof backing)))
			return rc;
		if (!backing[0])
			return SB_OK;
		if (!realpath(backing, real))
			return sb_seterr(SB_ERR_CORRUPT, "%s reads %s: %s", path, backing,
					 strerror(errno));
		if (is_template_root(real, given))
			return SB_OK;
	}
}

/* --- who reads a layer --- */

/* A run's layers, each with the layer of the same run it was made on. */
struct chain {
	char dir[PATH_MAX]; /* the real path of the run's layers directory */
	unsigned *ns;
	long *below; /* index into ns of the layer below, -1 for another file */
	char (*backing)[PATH_MAX];
	size_t k;
};

/* Parses path as a layer of c (dir/N.qcow2) into its index in c->ns. */
static long chain_index(const struct chain *c, const char *path)
{
	size_t dl = strlen(c->dir);
	unsigned n;

	if (strncmp(path, c->dir, dl) || path[dl] != '/' ||
	    !layer_name(path + dl + 1, &n))
		return -1;
	for (size_t i = 0; i < c->k; i++)
		if (c->ns[i] == n)
			return (long)i;
	return -1;
}

static void chain_free(struct chain *c)
{
	free(c->ns);
	free(c->below);
	free(c->backing);
}

static int chain_load(const char *home, const char *run, struct chain *c)
{
	char dir[SB_LAYER_PATH_MAX], path[SB_LAYER_PATH_MAX];
	int rc;

	memset(c, 0, sizeof *c);
	if ((rc = layers_dir(home, run, dir, sizeof dir)))
		return rc;
	if (!realpath(dir, c->dir))
		return sb_seterr(errno == ENOENT ? SB_ERR_NOTFOUND : SB_ERR_IO, "%s: %s",
				 dir, strerror(errno));
	if ((rc = layers_list(dir, &c->ns, &c->k)))
		return rc;
	c->below = calloc(c->k + 1, sizeof *c->below);
	c->backing = calloc(c->k + 1, sizeof *c->backing);
	if (!c->below || !c->backing) {
		chain_free(c);
		return SB_ERR_NOMEM;
	}
	for (size_t i = 0; i < c->k; i++) {
		pathf(path, sizeof path, "%s/%u.qcow2", dir, c->ns[i]);
		if ((rc = sb_disk_backing(path, c->backing[i], sizeof c->backing[i]))) {
			chain_free(c);
			return rc;
		}
	}
	for (size_t i = 0; i < c->k; i++) {
		char real[PATH_MAX];
		c->below[i] =
		    chain_index(c, realpath(c->backing[i], real) ? real : c->backing[i]);
	}
	return SB_OK;
}

/* 1 when reading layer index i of c reads layer index want. */
static int chain_reads(const struct chain *c, long i, long want)
{
	for (size_t hops = 0; i >= 0 && hops <= c->k; hops++, i = c->below[i])
		if (i == want)
			return 1;
	return 0;
}

/* Finds the index of layer n in c, or -1. */
static long chain_find(const struct chain *c, unsigned n)
{
	for (size_t i = 0; i < c->k; i++)
		if (c->ns[i] == n)
			return (long)i;
	return -1;
}

int sb_layers_users(const char *home, const char *run, unsigned n,
		    char (*users)[SB_RUN_MAX], size_t max, size_t *count)
{
	char runs[SB_LAYER_PATH_MAX], path[SB_LAYER_PATH_MAX], backing[PATH_MAX];
	struct chain c;
	struct dirent *e;
	DIR *d;
	long want;
	int rc;

	*count = 0;
	if ((rc = chain_load(home, run, &c)))
		return rc;
	if ((want = chain_find(&c, n)) < 0) {
		chain_free(&c);
		return sb_seterr(SB_ERR_NOTFOUND, "run %s has no layer %u", run, n);
	}
	snprintf(runs, sizeof runs, "%s/runs", home);
	if (!(d = opendir(runs))) {
		chain_free(&c);
		return sb_seterr(SB_ERR_IO, "%s: %s", runs, strerror(errno));
	}
	while ((e = readdir(d))) {
		char dir[SB_LAYER_PATH_MAX];
		unsigned *ns;
		size_t k;
		int uses = 0;

		if (e->d_name[0] == '.' || !strcmp(e->d_name, run) ||
		    strlen(e->d_name) >= SB_RUN_MAX)
			continue;
		if (pathf(dir, sizeof dir, "%s/%s/layers", runs, e->d_name) ||
		    layers_list(dir, &ns, &k))
			continue; /* no layers: reads nothing */
		for (size_t i = 0; i < k && !uses; i++) {
			char real[PATH_MAX];
			uses = !pathf(path, sizeof path, "%s/%u.qcow2", dir, ns[i]) &&
			       sb_disk_backing(path, backing, sizeof backing) == SB_OK &&
			       realpath(backing, real) &&
			       chain_reads(&c, chain_index(&c, real), want);
		}
		free(ns);
		if (uses) {
			if (*count < max)
				memcpy(users[*count], e->d_name, strlen(e->d_name) + 1);
			(*count)++;
		}
	}
	closedir(d);
	chain_free(&c);
	return SB_OK;
}

/* "qcow2" when file is a qcow2 file, else "raw" (a template's root). */
int sb_layers_remove(const char *home, const char *run, unsigned n)
{
	char path[SB_LAYER_PATH_MAX], user[1][SB_RUN_MAX];
	struct chain c;
	struct stat st;
	unsigned top = UINT_MAX;
	size_t count;
	long want;
	int rc;

	if ((rc = sb_layers_users(home, run, n, user, 1, &count)))
		return rc;
	if (count)
		return sb_seterr(SB_ERR_STATE, "run %s%s reads it", user[0],
				 count > 1 ? " (and others)" : "");
	if ((rc = chain_load(home, run, &c)))
		return rc;
	want = chain_find(&c, n);
	if (want < 0) {
		chain_free(&c);
		return sb_seterr(SB_ERR_NOTFOUND, "run %s has no layer %u", run, n);
	}
	pathf(path, sizeof path, "%s/%u.qcow2", c.dir, n);
	if ((rc = sb_layers_check(home, path))) { /* qemu-img rebase follows it */
		chain_free(&c);
		return rc;
	}
	if (sb_layers_top(home, run, &top) == SB_OK && top == n &&
	    (stat(path, &st) || (st.st_mode & 0222))) {
		chain_free(&c);
		return sb_seterr(SB_ERR_STATE,
				 "layer %u is the top of run %s: the run writes it", n,
				 run);
	}
	/* the layers made on it read its backing file instead */
	for (size_t i = 0; i < c.k && rc == SB_OK; i++) {
		if (c.below[i] != want)
			continue;
		pathf(path, sizeof path, "%s/%u.qcow2", c.dir, c.ns[i]);
		if (stat(path, &st)) {
			rc = sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
			break;
		}
		chmod(path, 0644);
		rc = sb_disk_layer_rebase(path, c.backing[want],
					  file_format(c.backing[want]));
		chmod(path, st.st_mode & 07777); /* frozen stays frozen */
	}
	/* a frozen top (the run ended): disk.qcow2 names the layer below */
	if (rc == SB_OK && top == n && c.below[want] >= 0)
		rc = link_top(home, run, c.ns[c.below[want]]);
	if (rc == SB_OK) {
		pathf(path, sizeof path, "%s/%u.qcow2", c.dir, n);
		if (unlink(path))
			rc = sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
		pathf(path, sizeof path, "%s/%u.mem", c.dir, n); /* a memory snapshot's */
		if (rc == SB_OK && unlink(path) && errno != ENOENT)
			rc = sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
	}
	chain_free(&c);
	return rc;
}

int sb_layers_drop(const char *home, const char *run, unsigned n)
{
	char path[SB_LAYER_PATH_MAX], dir[SB_LAYER_PATH_MAX];
	unsigned max;
	int rc;

	if ((rc = sb_layers_path(home, run, n, path, sizeof path)))
		return rc;
	if (unlink(path) && errno != ENOENT)
		return sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
	if (layers_max(home, run, &max) == SB_OK)
		return link_top(home, run, max);
	/* it was the run's only layer: nothing of the run's disk is left */
	if (!pathf(path, sizeof path, "%s/runs/%s/disk.qcow2", home, run))
		unlink(path);
	if (!layers_dir(home, run, dir, sizeof dir))
		rmdir(dir);
	return SB_OK;
}

/* Adds one layer directory's files to u; top is the layer in use. */
static void usage_layers(const char *dir, unsigned top, int has_top, struct sb_layers_usage *u)
{
	char path[PATH_MAX];
	struct dirent *e;
	struct stat st;
	unsigned n;
	char ext[8];
	DIR *d = opendir(dir);

	while (d && (e = readdir(d))) {
		if (sscanf(e->d_name, "%u.%7s", &n, ext) != 2 ||
		    (size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path ||
		    lstat(path, &st) || !S_ISREG(st.st_mode))
			continue;
		if (!strcmp(ext, "mem")) {
			u->memory += (unsigned long long)st.st_blocks * 512;
			u->nmemory++;
		} else if (has_top && n == top) {
			u->runs += (unsigned long long)st.st_blocks * 512;
		} else {
			u->snapshots += (unsigned long long)st.st_blocks * 512;
			u->nsnapshots++;
		}
	}
	if (d)
		closedir(d);
}

int sb_layers_usage(const char *home, struct sb_layers_usage *u)
{
	char runs[PATH_MAX], dir[PATH_MAX];
	struct dirent *e;
	unsigned top;
	DIR *d;
	int rc;

	memset(u, 0, sizeof *u);
	if ((rc = sb_home_path(home, "runs", runs, sizeof runs)))
		return rc;
	if (!(d = opendir(runs)))
		return errno == ENOENT ? SB_OK
				       : sb_seterr(SB_ERR_IO, "%s: %s", runs, strerror(errno));
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' ||
		    (size_t)snprintf(dir, sizeof dir, "%s/%s", runs, e->d_name) >= sizeof dir)
			continue;
		u->nruns++;
		/* what is not a layer (logs, the layers' own directory) is the run's */
		u->runs += sb_du(dir);
		rc = sb_layers_top(home, e->d_name, &top);
		strncat(dir, "/layers", sizeof dir - strlen(dir) - 1);
		u->runs -= sb_du(dir);
		usage_layers(dir, top, rc == SB_OK, u);
	}
	closedir(d);
	return SB_OK;
}

/* --- releasing a removed run's files --- */

/* Deletes (dry: only counts) name in directory fd and, for a directory,
 * all in it, never following a link; adds the allocated bytes of the
 * regular files to *bytes. Errors: SB_ERR_IO. */
static int release_tree(int fd, const char *name, int dry, unsigned long long *bytes)
{
	struct stat st;
	struct dirent *e;
	DIR *d;
	int sub, rc = SB_OK;

	if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW))
		return errno == ENOENT ? SB_OK : sb_seterr(SB_ERR_IO, "%s: %s", name, strerror(errno));
	if (S_ISREG(st.st_mode))
		*bytes += (unsigned long long)st.st_blocks * 512;
	if (!S_ISDIR(st.st_mode))
		return dry || !unlinkat(fd, name, 0) || errno == ENOENT
			   ? SB_OK
			   : sb_seterr(SB_ERR_IO, "%s: %s", name, strerror(errno));
	if ((sub = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
	    !(d = fdopendir(sub))) {
		if (sub >= 0)
			close(sub);
		return sb_seterr(SB_ERR_IO, "%s: %s", name, strerror(errno));
	}
	while (rc == SB_OK && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			rc = release_tree(dirfd(d), e->d_name, dry, bytes);
	closedir(d);
	if (rc == SB_OK && !dry && unlinkat(fd, name, AT_REMOVEDIR) && errno != ENOENT)
		rc = sb_seterr(SB_ERR_IO, "%s: %s", name, strerror(errno));
	return rc;
}

/* Sets kept[i] for each layer ns[i] of run another run reads. */
static int release_kept(const char *home, const char *run, const unsigned *ns, size_t k,
			unsigned char *kept, struct sb_layers_freed *out)
{
	size_t count;
	int rc;

	for (size_t i = 0; i < k; i++) {
		if ((rc = sb_layers_users(home, run, ns[i], NULL, 0, &count)))
			return rc;
		kept[i] = count > 0;
		out->kept += kept[i];
		out->layers += !kept[i];
	}
	return SB_OK;
}

/* Releases the entries of run's layers directory (fd) but the kept
 * layers' files (N.qcow2, N.mem). */
static int release_layers(int fd, const unsigned *ns, size_t k, const unsigned char *kept,
			  int dry, unsigned long long *bytes)
{
	DIR *d = fdopendir(fd);
	struct dirent *e;
	unsigned n;
	char ext[8];
	int rc = SB_OK, keep;

	if (!d) {
		close(fd);
		return sb_seterr(SB_ERR_IO, "layers: %s", strerror(errno));
	}
	while (rc == SB_OK && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		keep = 0;
		if (sscanf(e->d_name, "%u.%7s", &n, ext) == 2 &&
		    (!strcmp(ext, "qcow2") || !strcmp(ext, "mem")))
			for (size_t i = 0; i < k && !keep; i++)
				keep = kept[i] && ns[i] == n;
		if (!keep)
			rc = release_tree(dirfd(d), e->d_name, dry, bytes);
	}
	closedir(d);
	return rc;
}

/* Releases everything in run directory fd but layers/. */
static int release_others(int fd, int dry, unsigned long long *bytes)
{
	DIR *d = fdopendir(fd);
	struct dirent *e;
	int rc = SB_OK;

	if (!d) {
		close(fd);
		return sb_seterr(SB_ERR_IO, "run directory: %s", strerror(errno));
	}
	while (rc == SB_OK && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		    strcmp(e->d_name, "layers"))
			rc = release_tree(dirfd(d), e->d_name, dry, bytes);
	closedir(d);
	return rc;
}

int sb_layers_release(const char *home, const char *run, int dry,
		      struct sb_layers_freed *out)
{
	char dir[SB_LAYER_PATH_MAX], ldir[SB_LAYER_PATH_MAX];
	unsigned *ns = NULL;
	unsigned char *kept = NULL;
	size_t k = 0;
	int fd, rc;

	memset(out, 0, sizeof *out);
	if (pathf(dir, sizeof dir, "%s/runs/%s", home, run) ||
	    (rc = layers_dir(home, run, ldir, sizeof ldir)))
		return sb_seterr(SB_ERR_TOOBIG, "state directory path too long");
	if (access(dir, F_OK))
		return SB_OK; /* nothing left */
	rc = layers_list(ldir, &ns, &k);
	if (rc && rc != SB_ERR_NOTFOUND)
		return rc;
	if (!(kept = calloc(k + 1, 1))) {
		rc = SB_ERR_NOMEM;
		goto out;
	}
	if ((rc = release_kept(home, run, ns, k, kept, out)))
		goto out;
	if (k && (fd = open(ldir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) >= 0 &&
	    (rc = release_layers(fd, ns, k, kept, dry, &out->bytes)))
		goto out;
	if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		rc = sb_seterr(SB_ERR_IO, "%s: %s", dir, strerror(errno));
		goto out;
	}
	if ((rc = release_others(fd, dry, &out->bytes)) || out->kept || dry)
		goto out;
	if ((rmdir(ldir) && errno != ENOENT) || rmdir(dir))
		rc = sb_seterr(SB_ERR_IO, "%s: %s", dir, strerror(errno));
out:
	free(ns);
	free(kept);
	return rc;
}
