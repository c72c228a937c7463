/* proc.c - child processes (see proc.h). */
#include "engine/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/units.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

int sb_exe_find(const char *name, char *buf, size_t len)
{
	const char *path, *p, *end;
	size_t dl;

	if (strchr(name, '/')) {
		if (access(name, X_OK) < 0)
			return sb_seterr(SB_ERR_UNAVAIL, "%s: %s", name, strerror(errno));
		if ((size_t)snprintf(buf, len, "%s", name) >= len)
			return sb_seterr(SB_ERR_INVAL, "path too long: %s", name);
		return 0;
	}
	path = getenv("PATH");
	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	for (p = path; *p; p = *end ? end + 1 : end) {
		end = strchrnul(p, ':');
		dl = end - p;
		if ((size_t)snprintf(buf, len, "%.*s/%s", (int)dl, dl ? p : ".", name) >=
		    len)
			continue;
		if (access(buf, X_OK) == 0)
			return 0;
	}
	return sb_seterr(SB_ERR_UNAVAIL, "%s not found in PATH", name);
}

/* Moves fd to a number >= 3 with close-on-exec, so dup2() onto 0..2 in the
 * child always makes a fresh, inheritable descriptor. */
static int fd_high(int fd)
{
	int nfd;

	if (fd < 0 || fd > 2)
		return fd;
	nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	close(fd);
	return nfd;
}

/* In the child: descriptors, signals, session, then exec path; a failure
 * is reported as errno on errfd. Only async-signal-safe calls. */
static void __attribute__((noreturn))
child(const char *path, const struct sb_spawn *s, int in, int out, int err, int errfd)
{
	sigset_t none;
	int i, e;

	if (s->detach) {
		pid_t p = fork();
		if (p < 0)
			goto fail;
		if (p > 0)
			_exit(0); /* the grandchild is nobody's child but init's */
	}
	if (s->new_session || s->detach)
		setsid();
	if (s->die_with_parent && !s->detach &&
	    (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() == 1))
		goto fail; /* the parent is gone already */
	if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
		goto fail;
	for (i = 1; i < NSIG; i++)
		signal(i, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
		long max = sysconf(_SC_OPEN_MAX);

		for (i = 3; i < (max > 0 && max < 65536 ? max : 65536); i++)
			if (i != errfd)
				fcntl(i, F_SETFD, FD_CLOEXEC);
	}
	execv(path, s->argv);
fail:
	e = errno;
	if (write(errfd, &e, sizeof e) < 0)
		_exit(127);
	_exit(127);
}

/* Starts exe as s says with posix_spawn(3), which does not copy the
 * caller's page tables and returns as soon as the exec is done: cheap
 * for a large daemon, whose loop starts QEMU. It does all sb_spawn does
 * but die_with_parent and detach. fds: the child's 0, 1 and 2. */
static int spawn_light(const char *exe, const struct sb_spawn *s, const int fds[3],
		       pid_t *pid)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t all, none;
	int e, flags = POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK;

	if (s->new_session)
		flags |= POSIX_SPAWN_SETSID;
	sigfillset(&all);
	sigemptyset(&none);
	if ((e = posix_spawn_file_actions_init(&fa)))
		return sb_seterr(SB_ERR_IO, "posix_spawn: %s", strerror(e));
	if ((e = posix_spawnattr_init(&at))) {
		posix_spawn_file_actions_destroy(&fa);
		return sb_seterr(SB_ERR_IO, "posix_spawn: %s", strerror(e));
	}
	if (!(e = posix_spawn_file_actions_adddup2(&fa, fds[0], 0)) &&
	    !(e = posix_spawn_file_actions_adddup2(&fa, fds[1], 1)) &&
	    !(e = posix_spawn_file_actions_adddup2(&fa, fds[2], 2)) &&
	    !(e = posix_spawn_file_actions_addclosefrom_np(&fa, 3)) &&
	    !(e = posix_spawnattr_setflags(&at, (short)flags)) &&
	    !(e = posix_spawnattr_setsigdefault(&at, &all)) &&
	    !(e = posix_spawnattr_setsigmask(&at, &none)))
		e = posix_spawn(pid, exe, &fa, &at, s->argv, environ);
	posix_spawnattr_destroy(&at);
	posix_spawn_file_actions_destroy(&fa);
	if (e)
		return sb_seterr(SB_ERR_UNAVAIL, "cannot execute %s: %s", exe,
				 strerror(e));
	return SB_OK;
}

int sb_spawn(const struct sb_spawn *s, pid_t *pid)
{
	int ep[2] = {-1, -1}, fds[3] = {-1, -1, -1}, mine[3] = {0}, e = 0, rc;
	const int want[3] = {s->in, s->out, s->err};
	char exe[PATH_MAX];
	ssize_t n;
	pid_t p;

	*pid = 0;
	if ((rc = sb_exe_find(s->argv[0], exe, sizeof exe)))
		return rc;
	for (int i = 0; i < 3; i++) {
		if (want[i] >= 0) {
			/* above 2, so dup2 onto 0..2 always makes a fresh one */
			fds[i] = fcntl(want[i], F_DUPFD_CLOEXEC, 3);
		} else {
			fds[i] = fd_high(open("/dev/null", i ? O_WRONLY | O_CLOEXEC
							     : O_RDONLY | O_CLOEXEC));
		}
		mine[i] = 1;
		if (fds[i] < 0) {
			rc = sb_seterr(SB_ERR_IO, "%s: descriptors: %s", s->argv[0],
				       strerror(errno));
			goto out;
		}
	}
	if (!s->detach && !s->die_with_parent) {
		rc = spawn_light(exe, s, fds, pid);
		goto out;
	}
	if (pipe2(ep, O_CLOEXEC) < 0 || (ep[0] = fd_high(ep[0])) < 0 ||
	    (ep[1] = fd_high(ep[1])) < 0) {
		rc = sb_seterr(SB_ERR_IO, "pipe: %s", strerror(errno));
		goto out;
	}
	if ((p = fork()) < 0) {
		rc = sb_seterr(SB_ERR_IO, "fork: %s", strerror(errno));
		goto out;
	}
	if (p == 0)
		child(exe, s, fds[0], fds[1], fds[2], ep[1]);
	close(ep[1]);
	ep[1] = -1;
	if (s->detach)
		waitpid(p, NULL, 0); /* the middle child, gone at once */
	do
		n = read(ep[0], &e, sizeof e);
	while (n < 0 && errno == EINTR);
	if (n == sizeof e) {
		if (!s->detach)
			waitpid(p, NULL, 0);
		rc = sb_seterr(SB_ERR_UNAVAIL, "cannot execute %s: %s", exe, strerror(e));
		goto out;
	}
	*pid = s->detach ? 0 : p;
	rc = SB_OK;
out:
	/* best effort: a child at the caller's priority works all the same */
	if (rc == SB_OK && *pid > 0 && s->nice)
		setpriority(PRIO_PROCESS, (id_t)*pid,
			    getpriority(PRIO_PROCESS, 0) + s->nice);
	for (int i = 0; i < 3; i++)
		if (mine[i] && fds[i] >= 0)
			close(fds[i]);
	if (ep[0] >= 0)
		close(ep[0]);
	if (ep[1] >= 0)
		close(ep[1]);
	return rc;
}

int sb_proc_wait(pid_t pid, int timeout_ms, int *status)
{
	int64_t deadline = sb_deadline(timeout_ms);
	struct pollfd pfd = {.events = POLLIN};
	int st = -1, rc;

	if (pid <= 1)
		return sb_seterr(SB_ERR_INVAL, "bad pid %d", (int)pid);
	pfd.fd = syscall(SYS_pidfd_open, pid, 0);
	if (pfd.fd < 0) {
		if (errno != ESRCH)
			return sb_seterr(SB_ERR_IO, "pidfd_open %d: %s", (int)pid,
					 strerror(errno));
		/* Gone and reaped by someone else. */
		if (status)
			*status = -1;
		return 0;
	}
	for (;;) {
		rc = poll(&pfd, 1, sb_ms_left(deadline));
		if (rc > 0)
			break;
		if (rc == 0) {
			close(pfd.fd);
			return sb_seterr(SB_ERR_TIMEOUT,
					 "process %d still running after %d ms", (int)pid,
					 timeout_ms);
		}
		if (errno != EINTR) {
			rc = errno;
			close(pfd.fd);
			return sb_seterr(SB_ERR_IO, "poll: %s", strerror(rc));
		}
	}
	close(pfd.fd);
	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR) {
			st = -1; /* not our child */
			break;
		}
	}
	if (status)
		*status = st;
	return 0;
}

int sb_proc_kill(pid_t pid, int sig)
{
	if (pid <= 1)
		return sb_seterr(SB_ERR_INVAL, "bad pid %d", (int)pid);
	if (kill(-pid, sig) == 0)
		return 0;
	if (errno == ESRCH && (kill(pid, sig) == 0 || errno == ESRCH))
		return 0;
	return sb_seterr(SB_ERR_IO, "kill %d: %s", (int)pid, strerror(errno));
}

int sb_proc_run(char *const argv[], int timeout_ms, char *out, size_t outlen, int *status)
{
	int64_t deadline = sb_deadline(timeout_ms);
	struct pollfd pfd = {.events = POLLIN};
	struct sb_spawn sp = {.argv = argv,
			      .in = -1,
			      .out = -1,
			      .err = -1,
			      .new_session = 1,
			      .die_with_parent = 1};
	char scratch[4096];
	int pp[2] = {-1, -1}, rc;
	size_t used = 0;
	ssize_t n;
	pid_t pid = 0;

	if (outlen)
		out[0] = 0;
	if (pipe2(pp, O_CLOEXEC) < 0)
		return sb_seterr(SB_ERR_IO, "pipe: %s", strerror(errno));
	sp.out = sp.err = pp[1];
	if ((rc = sb_spawn(&sp, &pid)))
		goto fail;
	close(pp[1]);
	pp[1] = -1;
	pfd.fd = pp[0];
	for (;;) {
		rc = poll(&pfd, 1, sb_ms_left(deadline));
		if (rc == 0) {
			sb_proc_kill(pid, SIGKILL);
			sb_proc_wait(pid, -1, NULL);
			rc = sb_seterr(SB_ERR_TIMEOUT, "%s: still running after %d ms",
				       argv[0], timeout_ms);
			goto fail;
		}
		if (rc < 0 && errno == EINTR)
			continue;
		if (used + 1 < outlen)
			n = read(pp[0], out + used, outlen - 1 - used);
		else
			n = read(pp[0], scratch, sizeof scratch);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (used + 1 < outlen) {
			used += n;
			out[used] = 0;
		}
	}
	rc = sb_proc_wait(pid, sb_ms_left(deadline), status);
	if (rc == SB_ERR_TIMEOUT) {
		sb_proc_kill(pid, SIGKILL);
		sb_proc_wait(pid, -1, NULL);
	}
fail:
	if (pp[0] >= 0)
		close(pp[0]);
	if (pp[1] >= 0)
		close(pp[1]);
	return rc;
}

int sb_write_full(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sb_seterr(SB_ERR_IO, "writing: %s", strerror(errno));
		p += n;
		len -= (size_t)n;
	}
	return SB_OK;
}

int sb_proc_cmdline_has(pid_t pid, const char *needle)
{
	char path[64], cmd[8192];
	ssize_t n;
	int fd;

	if (pid <= 1)
		return 0;
	snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	n = read(fd, cmd, sizeof cmd - 1);
	close(fd);
	if (n <= 0)
		return 0;
	for (ssize_t i = 0; i < n; i++)
		if (!cmd[i])
			cmd[i] = ' ';
	cmd[n] = 0;
	return strstr(cmd, needle) != NULL;
}
