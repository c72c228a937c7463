/* nslock.c - the enforcer lock of a network namespace (see nslock.h). */
#include "netpolicy/nslock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/error.h"

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71 /* asm-generic/socket.h, Linux 5.14 */
#endif

/* This network namespace's lock file in dir into path. */
static int ns_lock_path(const char *dir, char *path, size_t cap)
{
	uint64_t cookie = 0;
	socklen_t clen = sizeof cookie;
	struct stat st;
	int fd, rc = SB_OK;

	if ((fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) >= 0 &&
	    getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &clen) == 0)
		/* a namespace's cookie is never another's, unlike its inode */
		snprintf(path, cap, "%s/net-c%llu.lock", dir, (unsigned long long)cookie);
	else if (stat("/proc/self/ns/net", &st) == 0)
		snprintf(path, cap, "%s/net-%llu.lock", dir,
			 (unsigned long long)st.st_ino);
	else
		rc = sb_seterr(SB_ERR_UNAVAIL, "network acl: /proc/self/ns/net: %s",
			       strerror(errno));
	if (fd >= 0)
		close(fd);
	return rc;
}

int sb_net_lock_take(const char *dir, int *fd_out, int *fence, char *path, size_t cap)
{
	char buf[PATH_MAX + 64];
	struct stat st, held;
	int fd, len, rc;

	if ((rc = ns_lock_path(dir, path, cap)))
		return rc;
	mkdir(dir, 0700);
	for (int tries = 0;; tries++) {
		if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0)
			return sb_seterr(SB_ERR_UNAVAIL, "network acl: %s: %s", path,
					 strerror(errno));
		len = (int)pread(fd, buf, sizeof buf - 1, 0);
		buf[len > 0 ? len : 0] = 0;
		if (flock(fd, LOCK_EX | LOCK_NB)) {
			int pid = 0;
			char home[PATH_MAX] = "?";
			sscanf(buf, "pid %d fence %*d home %4095[^\n]", &pid, home);
			close(fd);
			return sb_seterr(
			    SB_ERR_UNAVAIL,
			    "network acl: the daemon of %s (pid %d) enforces it in this "
			    "network namespace; one daemon a namespace",
			    home, pid);
		}
		/* the file the path names now: its holder may have removed
		 * this one as it let go (sb_net_lock_drop) */
		if (fstat(fd, &held) == 0 && stat(path, &st) == 0 &&
		    st.st_ino == held.st_ino && st.st_dev == held.st_dev)
			break;
		close(fd);
		if (tries == 8)
			return sb_seterr(SB_ERR_UNAVAIL,
					 "network acl: %s keeps going away", path);
	}
	*fence = 0;
	sscanf(buf, "pid %*d fence %d", fence);
	*fd_out = fd;
	return SB_OK;
}

void sb_net_lock_drop(int fd, const char *path, int fence)
{
	if (fd < 0)
		return;
	if (!fence) /* it carries nothing for the next holder */
		unlink(path);
	close(fd);
}
