/* beneath.c - paths under a directory, never through a symbolic link. */
#include "vmm/beneath.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define REMOVE_DEPTH_MAX 64

/* Opens directory name under dir, never following a link; made first
 * when create is set. */
static int dir_step(int dir, const char *name, int create)
{
	int fd;

	if (create && mkdirat(dir, name, 0755) && errno != EEXIST)
		return -1;
	fd = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOTDIR) {
		struct stat sb; /* say ELOOP for a link, as RESOLVE_NO_SYMLINKS does */
		if (!fstatat(dir, name, &sb, AT_SYMLINK_NOFOLLOW) && S_ISLNK(sb.st_mode))
			errno = ELOOP;
	}
	return fd;
}

/* 0 when rel is a relative path of good components (see beneath.h). */
static int rel_check(const char *rel)
{
	const char *p = rel, *slash;
	size_t len;

	if (strnlen(rel, PATH_MAX) >= PATH_MAX) {
		errno = ENAMETOOLONG;
		return -1;
	}
	do {
		slash = strchr(p, '/');
		len = slash ? (size_t)(slash - p) : strlen(p);
		if (!len || (len == 1 && p[0] == '.') ||
		    (len == 2 && p[0] == '.' && p[1] == '.')) {
			errno = EINVAL;
			return -1;
		}
		if (len > NAME_MAX) {
			errno = ENAMETOOLONG;
			return -1;
		}
		p = slash + 1;
	} while (slash);
	return 0;
}

int sb_beneath_parent(int root, const char *rel, int create, const char **last)
{
	char name[NAME_MAX + 1];
	const char *p = rel, *slash;
	int fd, next;

	if (rel_check(rel) || (fd = fcntl(root, F_DUPFD_CLOEXEC, 0)) < 0)
		return -1;
	while ((slash = strchr(p, '/'))) {
		memcpy(name, p, (size_t)(slash - p));
		name[slash - p] = 0;
		if ((next = dir_step(fd, name, create)) < 0) {
			next = errno;
			close(fd);
			errno = next;
			return -1;
		}
		close(fd);
		fd = next;
		p = slash + 1;
	}
	*last = p;
	return fd;
}

static int remove_at(int dir, const char *name);

/* Deletes what is at name in dir unless it is a regular file (a link is
 * deleted, never followed; a directory with all in it). */
static int clear_special(int dir, const char *name)
{
	struct stat sb;

	if (fstatat(dir, name, &sb, AT_SYMLINK_NOFOLLOW))
		return errno == ENOENT ? 0 : -1;
	return S_ISREG(sb.st_mode) ? 0 : remove_at(dir, name);
}

static int close_keep_errno(int fd, int rc)
{
	int e = errno;

	close(fd);
	errno = e;
	return rc;
}

int sb_beneath_create(int root, const char *rel, mode_t mode)
{
	const char *last;
	int dir = sb_beneath_parent(root, rel, 1, &last), fd;

	if (dir < 0)
		return -1;
	if (clear_special(dir, last))
		return close_keep_errno(dir, -1);
	fd = openat(dir, last, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
		    mode);
	return close_keep_errno(dir, fd);
}

int sb_beneath_symlink(int root, const char *rel, const char *target)
{
	const char *last;
	int dir = sb_beneath_parent(root, rel, 1, &last), rc;

	if (dir < 0)
		return -1;
	rc = remove_at(dir, last) || symlinkat(target, dir, last) ? -1 : 0;
	return close_keep_errno(dir, rc);
}

/* Deletes everything in directory fd, depth levels below the first. */
static int remove_in(int fd, int depth)
{
	DIR *d;
	struct dirent *de;
	int rc = 0, sub;

	if (depth > REMOVE_DEPTH_MAX) {
		close(fd);
		errno = ELOOP;
		return -1;
	}
	if (!(d = fdopendir(fd)))
		return close_keep_errno(fd, -1);
	while (!rc && (errno = 0, de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (!unlinkat(fd, de->d_name, 0) || errno == ENOENT)
			continue;
		if (errno != EISDIR && errno != EPERM) /* EPERM: POSIX's word for a dir */
			rc = -1;
		else if ((sub = dir_step(fd, de->d_name, 0)) < 0 ||
			 remove_in(sub, depth + 1) ||
			 (unlinkat(fd, de->d_name, AT_REMOVEDIR) && errno != ENOENT))
			rc = -1;
	}
	if (!rc && errno)
		rc = -1;
	sub = errno;
	closedir(d);
	errno = sub;
	return rc;
}

/* Deletes name in dir: a file, a link, or a directory with all in it. */
static int remove_at(int dir, const char *name)
{
	int sub;

	if (!unlinkat(dir, name, 0) || errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM)
		return -1;
	if ((sub = dir_step(dir, name, 0)) < 0 || remove_in(sub, 1))
		return -1;
	return unlinkat(dir, name, AT_REMOVEDIR);
}

int sb_beneath_remove(int root, const char *rel)
{
	const char *last;
	int dir = sb_beneath_parent(root, rel, 0, &last);

	if (dir < 0)
		return errno == ENOENT ? 0 : -1;
	return close_keep_errno(dir, remove_at(dir, last));
}
