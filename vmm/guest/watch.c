/* watch.c - recursive inotify watch of the workspace -> agent.file.changed.
 *
 * Every directory of the tree has a watch. A regular file closed after
 * writing or moved in, and a symbolic link made or moved in (type
 * "symlink", its target as its content), is reported "created" the first
 * time its path is seen and "modified" after; a file or link deleted or
 * moved away is "deleted" when it was
 * known (a file written and deleted before its close was read is known
 * without a report, so its deletion is still reported). Directories created or moved in
 * are watched and their files reported; a directory moved away is one "deleted" for its
 * own path. Known paths are a set of XXH3 hashes of the path (8 bytes a file). A new
 * directory is watched once its IN_CREATE is read: what happened in it before is found by
 * scanning it, so its files' last states are reported but changes in between (a file
 * written then moved away) may not be.
 */
#include "vmm/guest/agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define WATCH_MASK                                                                       \
	(IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CREATE |          \
	 IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)

struct wdir {
	int wd;
	char *path;
};

struct watch {
	int fd;
	struct agent_port *port;
	struct wdir *dirs;
	size_t ndirs, capdirs;
	uint64_t *known;		/* open addressing; 0 empty, 1 deleted */
	size_t nknown, nused, capknown; /* live keys, live + deleted, slots */
};

static uint64_t path_key(const char *path)
{
	uint64_t h = XXH3_64bits(path, strlen(path));

	return h < 2 ? h + 2 : h;
}

/* Finds key's slot, or the slot to insert it in. */
static size_t known_slot(const struct watch *w, uint64_t key, int *found)
{
	size_t mask = w->capknown - 1, i = key & mask, tomb = SIZE_MAX;

	for (;;) {
		if (w->known[i] == key) {
			*found = 1;
			return i;
		}
		if (w->known[i] == 0) {
			*found = 0;
			return tomb != SIZE_MAX ? tomb : i;
		}
		if (w->known[i] == 1 && tomb == SIZE_MAX)
			tomb = i;
		i = (i + 1) & mask;
	}
}

/* Adds path to the known set; returns 1 when it was already there. */
static int known_add(struct watch *w, const char *path)
{
	uint64_t key = path_key(path), *old = w->known;
	size_t i, oldcap = w->capknown, slot;
	int found;

	if ((w->nused + 1) * 2 > w->capknown) {
		w->capknown = 1024;
		while (w->capknown < (w->nknown + 1) * 4)
			w->capknown *= 2;
		w->known = calloc(w->capknown, sizeof *w->known);
		if (!w->known) {
			w->known = old;
			w->capknown = oldcap;
			return 0;
		}
		w->nknown = 0;
		for (i = 0; i < oldcap; i++) {
			if (old[i] < 2)
				continue;
			w->known[known_slot(w, old[i], &found)] = old[i];
			w->nknown++;
		}
		w->nused = w->nknown;
		free(old);
	}
	slot = known_slot(w, key, &found);
	if (found)
		return 1;
	if (w->known[slot] == 0)
		w->nused++;
	w->known[slot] = key;
	w->nknown++;
	return 0;
}

/* Removes path from the known set; returns 1 when it was there. */
static int known_del(struct watch *w, const char *path)
{
	size_t slot;
	int found;

	if (!w->capknown)
		return 0;
	slot = known_slot(w, path_key(path), &found);
	if (found) {
		w->known[slot] = 1;
		w->nknown--;
	}
	return found;
}

/* Sends agent.file.changed; content (size bytes) is NULL for a deletion
 * or a file over SB_CHAN_FILE_MAX; link is set for a symbolic link (its
 * content: the target). */
static void send_change(struct watch *w, const char *path, const char *kind,
			uint64_t size, const char *xxh3, const void *content, int link)
{
	struct agent_frame f;
	sb_mapw *m = agent_event_begin(&f, "agent.file.changed");

	sb_mapw_str(m, "path", path);
	sb_mapw_str(m, "kind", kind);
	sb_mapw_u64(m, "size", size);
	sb_mapw_str(m, "xxh3", xxh3);
	if (content)
		sb_mapw_bin(m, "content", content, (size_t)size);
	if (link)
		sb_mapw_str(m, "type", "symlink");
	agent_frame_send(w->port, &f);
}

/* Reports the symbolic link at path as created or modified, its target
 * as its content. */
static void report_link(struct watch *w, const char *path)
{
	char target[PATH_MAX], hex[17];
	ssize_t n = readlink(path, target, sizeof target);

	if (n < 0 || (size_t)n >= sizeof target) {
		if (n < 0 && errno == ENOENT)
			known_add(w, path); /* made and gone: its deletion is reported */
		return;
	}
	snprintf(hex, sizeof hex, "%016llx",
		 (unsigned long long)XXH3_64bits(target, (size_t)n));
	send_change(w, path, known_add(w, path) ? "modified" : "created", (uint64_t)n, hex,
		    target, 1);
}

/* Reports the regular file at path as created or modified, with its
 * content up to SB_CHAN_FILE_MAX bytes. */
static void report_file(struct watch *w, const char *path)
{
	static char buf[SB_CHAN_FILE_MAX + 1]; /* the content, while it fits */
	XXH3_state_t *st = NULL;
	struct stat sb;
	char hex[17];
	uint64_t size = 0;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0 && errno == ELOOP) {
		report_link(w, path);
		goto out;
	}
	if (fd < 0 && errno == ENOENT) {
		/* written and already gone (its IN_DELETE follows): known, so
		 * the deletion is reported, though its content never was */
		known_add(w, path);
		goto out;
	}
	if (fd < 0 || fstat(fd, &sb) || !S_ISREG(sb.st_mode))
		goto out;
	st = XXH3_createState();
	if (!st || XXH3_64bits_reset(st) != XXH_OK)
		goto out;
	for (;;) {
		/* into buf while the file fits, then 64 KiB at a time over its
		 * start (the content is not sent) */
		size_t at = size < sizeof buf ? (size_t)size : 0;
		size_t room = size < sizeof buf ? sizeof buf - at : 65536;
		if ((n = read(fd, buf + at, room)) <= 0)
			break;
		XXH3_64bits_update(st, buf + at, (size_t)n);
		size += (uint64_t)n;
	}
	if (n < 0) {
		agent_log(w->port, "watch: read %s: %s", path, strerror(errno));
		goto out;
	}
	snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH3_64bits_digest(st));
	send_change(w, path, known_add(w, path) ? "modified" : "created", size, hex,
		    size <= SB_CHAN_FILE_MAX ? buf : NULL, 0);
out:
	XXH3_freeState(st);
	if (fd >= 0)
		close(fd);
}

static int dir_add(struct watch *w, int wd, const char *path)
{
	struct wdir *nd;
	size_t i;

	for (i = 0; i < w->ndirs; i++) {
		if (w->dirs[i].wd == wd) { /* same directory seen again */
			free(w->dirs[i].path);
			w->dirs[i].path = strdup(path);
			return w->dirs[i].path ? 0 : -1;
		}
	}
	if (w->ndirs == w->capdirs) {
		nd = realloc(w->dirs, (w->capdirs ? w->capdirs * 2 : 64) * sizeof *nd);
		if (!nd)
			return -1;
		w->dirs = nd;
		w->capdirs = w->capdirs ? w->capdirs * 2 : 64;
	}
	w->dirs[w->ndirs].wd = wd;
	w->dirs[w->ndirs].path = strdup(path);
	if (!w->dirs[w->ndirs].path)
		return -1;
	w->ndirs++;
	return 0;
}

static const char *dir_path(const struct watch *w, int wd)
{
	size_t i;

	for (i = 0; i < w->ndirs; i++)
		if (w->dirs[i].wd == wd)
			return w->dirs[i].path;
	return NULL;
}

static void dir_drop(struct watch *w, size_t i)
{
	free(w->dirs[i].path);
	w->ndirs--;
	if (i < w->ndirs)
		w->dirs[i] = w->dirs[w->ndirs];
}

/* Stops watching path and every directory below it. */
static void dir_forget_tree(struct watch *w, const char *path)
{
	size_t i = 0, len = strlen(path);

	while (i < w->ndirs) {
		const char *p = w->dirs[i].path;

		if (strncmp(p, path, len) == 0 && (p[len] == 0 || p[len] == '/')) {
			inotify_rm_watch(w->fd, w->dirs[i].wd);
			dir_drop(w, i);
			continue;
		}
		i++;
	}
}

/* Watches the tree at path; its regular files become known, and are
 * reported when report is set. */
static void add_tree(struct watch *w, const char *path, int report)
{
	char child[PATH_MAX];
	struct dirent *de;
	struct stat sb;
	DIR *d;
	int wd, isdir;

	wd = inotify_add_watch(w->fd, path, WATCH_MASK);
	if (wd < 0) {
		if (errno != ENOENT && errno != ENOTDIR)
			agent_log(w->port, "watch: %s: %s", path, strerror(errno));
		return;
	}
	if (dir_add(w, wd, path))
		return;
	d = opendir(path);
	if (!d)
		return;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if ((size_t)snprintf(child, sizeof child, "%s/%s", path, de->d_name) >=
		    sizeof child)
			continue;
		isdir = de->d_type == DT_DIR;
		if (de->d_type == DT_UNKNOWN && !lstat(child, &sb))
			isdir = S_ISDIR(sb.st_mode);
		if (isdir)
			add_tree(w, child, report);
		else if (report)
			report_file(w, child);
		else if (de->d_type == DT_REG || de->d_type == DT_LNK ||
			 de->d_type == DT_UNKNOWN)
			known_add(w, child);
	}
	closedir(d);
}

int watch_open(const char *root, struct agent_port *p, struct watch **out)
{
	struct watch *w = calloc(1, sizeof *w);
	int fd;

	if (!w)
		return -1;
	w->port = p;
	w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (w->fd < 0)
		goto fail;
	/* Room for bursts: a harness may write thousands of files at once. */
	fd = open("/proc/sys/fs/inotify/max_queued_events", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (write(fd, "1048576", 7) < 0)
			agent_log(p, "watch: max_queued_events: %s", strerror(errno));
		close(fd);
	}
	add_tree(w, root, 0);
	if (!w->ndirs)
		goto fail;
	*out = w;
	return 0;
fail:
	watch_close(w);
	return -1;
}

int watch_fd(const struct watch *w)
{
	return w->fd;
}

static void handle(struct watch *w, const struct inotify_event *ev)
{
	char path[PATH_MAX];
	const char *dir;
	size_t i;

	if (ev->mask & IN_Q_OVERFLOW) {
		agent_log(w->port, "watch: inotify queue overflow: changes were lost");
		return;
	}
	if (ev->mask & IN_IGNORED) {
		for (i = 0; i < w->ndirs; i++)
			if (w->dirs[i].wd == ev->wd) {
				dir_drop(w, i);
				break;
			}
		return;
	}
	dir = dir_path(w, ev->wd);
	if (!dir || !ev->len)
		return;
	if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, ev->name) >= sizeof path)
		return;
	if (ev->mask & IN_ISDIR) {
		if (ev->mask & (IN_CREATE | IN_MOVED_TO))
			add_tree(w, path, 1);
		else if (ev->mask & IN_MOVED_FROM) {
			dir_forget_tree(w, path);
			send_change(w, path, "deleted", 0, "", NULL, 0);
		}
		return;
	}
	if (ev->mask & (IN_CLOSE_WRITE | IN_MOVED_TO))
		report_file(w, path);
	else if (ev->mask & IN_CREATE)
		report_link(w, path); /* a file is reported once closed; a link now */
	else if ((ev->mask & (IN_DELETE | IN_MOVED_FROM)) && known_del(w, path))
		send_change(w, path, "deleted", 0, "", NULL, 0);
}

int watch_read(struct watch *w)
{
	char buf[65536] __attribute__((aligned(__alignof__(struct inotify_event))));
	const struct inotify_event *ev;
	ssize_t n;
	char *p;

	for (;;) {
		n = read(w->fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return 0;
		if (n <= 0) {
			agent_log(w->port, "watch: read: %s",
				  n ? strerror(errno) : "EOF");
			return -1;
		}
		for (p = buf; p < buf + n; p += sizeof *ev + ev->len) {
			ev = (const struct inotify_event *)p;
			handle(w, ev);
		}
	}
}

void watch_close(struct watch *w)
{
	size_t i;

	if (!w)
		return;
	if (w->fd >= 0)
		close(w->fd);
	for (i = 0; i < w->ndirs; i++)
		free(w->dirs[i].path);
	free(w->dirs);
	free(w->known);
	free(w);
}
