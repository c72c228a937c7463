/* sock.c - unix stream sockets (see sock.h). */
#include "engine/sock.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/units.h"

int sb_unix_listen(const char *path, int *fd)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct stat st;
	int s = -1, rc;

	if (strlen(path) >= sizeof sa.sun_path)
		return sb_seterr(SB_ERR_INVAL, "socket path longer than %zu bytes: %s",
				 sizeof sa.sun_path - 1, path);
	strcpy(sa.sun_path, path);
	s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0)
		return sb_seterr(SB_ERR_IO, "socket: %s", strerror(errno));
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			rc = sb_seterr(SB_ERR_EXISTS, "%s exists and is not a socket",
				       path);
			goto fail;
		}
		/* Someone still listening there owns it; else it is stale. */
		if (connect(s, (struct sockaddr *)&sa, sizeof sa) == 0 ||
		    errno == EAGAIN) {
			rc = sb_seterr(SB_ERR_EXISTS, "socket %s is in use", path);
			goto fail;
		}
		if (unlink(path) < 0 && errno != ENOENT) {
			rc = sb_seterr(SB_ERR_IO, "unlink %s: %s", path, strerror(errno));
			goto fail;
		}
		close(s);
		s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (s < 0)
			return sb_seterr(SB_ERR_IO, "socket: %s", strerror(errno));
	}
	/* The socket inode's mode (less the umask) becomes the file's. */
	if (fchmod(s, 0600) < 0 || bind(s, (struct sockaddr *)&sa, sizeof sa) < 0 ||
	    chmod(path, 0600) < 0 || listen(s, 128) < 0) {
		rc = sb_seterr(SB_ERR_IO, "listen on %s: %s", path, strerror(errno));
		goto fail;
	}
	*fd = s;
	return 0;
fail:
	close(s);
	return rc;
}

int sb_unix_accept(int lfd, int timeout_ms, int *fd)
{
	int64_t deadline = sb_deadline(timeout_ms);
	struct pollfd pfd = {.fd = lfd, .events = POLLIN};
	int s, rc;

	for (;;) {
		s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (s >= 0) {
			*fd = s;
			return 0;
		}
		if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
			return sb_seterr(SB_ERR_IO, "accept: %s", strerror(errno));
		rc = poll(&pfd, 1, sb_ms_left(deadline));
		if (rc == 0)
			return sb_seterr(SB_ERR_TIMEOUT, "no connection within %d ms",
					 timeout_ms);
		if (rc < 0 && errno != EINTR)
			return sb_seterr(SB_ERR_IO, "poll: %s", strerror(errno));
		/* a listener shut down stays readable with nothing to accept */
		if (rc > 0 && (pfd.revents & (POLLHUP | POLLERR | POLLNVAL)))
			return sb_seterr(SB_ERR_IO, "accept: the socket was shut down");
	}
}
