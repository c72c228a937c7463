/* qemu.c - the QEMU microvm command line, spawning and reaping QEMU, and the
 * unix sockets QEMU connects to. */
#include "vmm/qemu.h"

#include "engine/error.h"
#include "vmm/accel.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* The fixed part of the kernel command line. */
#define QEMU_APPEND "console=ttyS0 quiet panic=-1"

static int64_t qemu_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Milliseconds left until deadline (-1 = none) in poll()'s convention. */
static int qemu_left(int64_t deadline)
{
	int64_t left;

	if (deadline < 0)
		return -1;
	left = deadline - qemu_now_ms();
	return left < 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
}

static int64_t qemu_deadline(int timeout_ms)
{
	return timeout_ms < 0 ? -1 : qemu_now_ms() + timeout_ms;
}

/* A growing argv; the first failure sticks and later adds do nothing. */
struct qemu_av {
	char **v;
	size_t n, cap;
	int err;
};

static void av_addf(struct qemu_av *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void av_addf(struct qemu_av *a, const char *fmt, ...)
{
	va_list ap;
	char *s, **nv;

	if (a->err)
		return;
	if (a->n + 2 > a->cap) {
		a->cap = a->cap ? a->cap * 2 : 32;
		nv = realloc(a->v, a->cap * sizeof *nv);
		if (!nv) {
			a->err = SB_ERR_NOMEM;
			return;
		}
		a->v = nv;
	}
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0) {
		a->err = SB_ERR_NOMEM;
		s = NULL;
	}
	va_end(ap);
	if (!s)
		return;
	a->v[a->n++] = s;
	a->v[a->n] = NULL;
}

static void av_add2(struct qemu_av *a, const char *opt, const char *val)
{
	av_addf(a, "%s", opt);
	av_addf(a, "%s", val);
}

/* Doubles the commas of s, as QEMU's option syntax wants inside a value.
 * The caller frees the result; NULL when out of memory. */
static char *qemu_esc(const char *s)
{
	size_t n = strlen(s), i, j = 0;
	char *e = malloc(2 * n + 1);

	if (!e)
		return NULL;
	for (i = 0; i < n; i++) {
		e[j++] = s[i];
		if (s[i] == ',')
			e[j++] = ',';
	}
	e[j] = 0;
	return e;
}

/* Quotes s for /bin/sh between single quotes. The caller frees it. */
static char *qemu_shquote(const char *s)
{
	size_t n = strlen(s), i, j = 0;
	char *q = malloc(4 * n + 3);

	if (!q)
		return NULL;
	q[j++] = '\'';
	for (i = 0; i < n; i++) {
		if (s[i] == '\'') {
			memcpy(q + j, "'\\''", 4);
			j += 4;
		} else {
			q[j++] = s[i];
		}
	}
	q[j++] = '\'';
	q[j] = 0;
	return q;
}

/* Adds opt and the value pre + val (commas doubled) + post. */
static void av_addesc(struct qemu_av *a, const char *opt, const char *pre,
		      const char *val, const char *post)
{
	char *e;

	if (a->err)
		return;
	e = qemu_esc(val);
	if (!e) {
		a->err = SB_ERR_NOMEM;
		return;
	}
	av_addf(a, "%s", opt);
	av_addf(a, "%s%s%s", pre, e, post);
	free(e);
}

static int qemu_check(const struct sb_vm_config *c)
{
	const char *strs[] = {c->qemu,	       c->kernel,      c->initrd,
			      c->append_extra, c->disk,	       c->chan_socket,
			      c->qmp_socket,   c->console_log, c->incoming};
	size_t i;

	if (!c->kernel || !*c->kernel)
		return sb_seterr(SB_ERR_INVAL, "VM config: no kernel");
	if (!c->console_log || !*c->console_log)
		return sb_seterr(SB_ERR_INVAL, "VM config: no console log");
	if (c->accel != SB_ACCEL_KVM && c->accel != SB_ACCEL_TCG)
		return sb_seterr(SB_ERR_INVAL,
				 "VM config: accelerator not resolved (kvm or tcg)");
	if (c->cpus < 1 || c->cpus > 64)
		return sb_seterr(SB_ERR_INVAL, "VM config: %u cpus (1..64)", c->cpus);
	if (c->memory_mib < 64 || c->memory_mib > 1048576)
		return sb_seterr(SB_ERR_INVAL,
				 "VM config: %u MiB of memory (64..1048576)",
				 c->memory_mib);
	for (i = 0; i < sizeof strs / sizeof strs[0]; i++)
		if (strs[i] && strpbrk(strs[i], "\n\r"))
			return sb_seterr(SB_ERR_INVAL, "VM config: newline in \"%s\"",
					 strs[i]);
	return 0;
}

const char *sb_vm_qemu(void)
{
	const char *q = getenv("SANBOX_QEMU");

	return q && *q ? q : SB_VM_QEMU_DEFAULT;
}

int sb_vm_argv(const struct sb_vm_config *c, char ***out)
{
	struct qemu_av a = {0};
	unsigned khz = c->tsc_khz;
	char tsc[32] = "", *q = NULL;
	int rc;

	*out = NULL;
	rc = qemu_check(c);
	if (rc)
		return rc;
	if (c->accel == SB_ACCEL_TCG && !khz && sb_host_tsc_khz(&khz))
		khz = 0;

	av_addf(&a, "%s", c->qemu ? c->qemu : sb_vm_qemu());
	av_add2(&a, "-M", "microvm,x-option-roms=off,rtc=on");
	if (c->accel == SB_ACCEL_KVM) {
		av_add2(&a, "-accel", "kvm");
		av_add2(&a, "-cpu", "host,-arch-capabilities");
	} else {
		av_add2(&a, "-accel", "tcg,tb-size=64"); /* the 1 GiB default fills RSS */
		av_add2(&a, "-cpu", "max");
	}
	av_addf(&a, "-m");
	av_addf(&a, "%uM", c->memory_mib);
	av_addf(&a, "-smp");
	av_addf(&a, "%u", c->cpus);
	av_addf(&a, "-nodefaults");
	av_addf(&a, "-no-user-config");
	av_addf(&a, "-nographic");
	av_addf(&a, "-no-reboot");
	av_add2(&a, "-sandbox",
		"on,obsolete=deny,elevateprivileges=deny,resourcecontrol=deny");
	av_add2(&a, "-kernel", c->kernel);
	if (c->initrd)
		av_add2(&a, "-initrd", c->initrd);
	if (khz)
		snprintf(tsc, sizeof tsc, " tsc_early_khz=%u", khz);
	av_addf(&a, "-append");
	av_addf(&a, "%s%s%s%s", QEMU_APPEND, tsc, c->append_extra ? " " : "",
		c->append_extra ? c->append_extra : "");
	av_addesc(&a, "-chardev", "file,id=con0,path=", c->console_log, ",append=on");
	av_add2(&a, "-serial", "chardev:con0");
	if (c->disk) {
		av_addesc(&a, "-blockdev", "driver=file,filename=", c->disk,
			  ",node-name=" SB_VM_DISK_FILE_NODE);
		av_add2(&a, "-blockdev",
			"driver=qcow2,file=" SB_VM_DISK_FILE_NODE
			",node-name=" SB_VM_DISK_NODE);
		av_add2(&a, "-device", "virtio-blk-device,drive=" SB_VM_DISK_NODE);
	}
	if (c->chan_socket) {
		av_add2(&a, "-device", "virtio-serial-device");
		av_addesc(&a, "-chardev", "socket,id=chan0,path=", c->chan_socket,
			  ",reconnect=1");
		av_add2(&a, "-device",
			"virtserialport,chardev=chan0,name=" SB_VM_CHAN_NAME);
	}
	if (c->qmp_socket) {
		av_addesc(&a, "-chardev", "socket,id=qmp0,path=", c->qmp_socket,
			  ",reconnect=1");
		av_add2(&a, "-mon", "chardev=qmp0,mode=control");
	}
	if (c->incoming) {
		q = qemu_shquote(c->incoming);
		if (!q)
			a.err = SB_ERR_NOMEM;
		av_addf(&a, "-S");
		av_addf(&a, "-incoming");
		av_addf(&a, "exec:cat %s", q);
	}
	free(q);
	if (a.err) {
		sb_argv_free(a.v);
		return sb_seterr(a.err, "building the QEMU command line");
	}
	*out = a.v;
	return 0;
}

void sb_argv_free(char **argv)
{
	size_t i;

	if (!argv)
		return;
	for (i = 0; argv[i]; i++)
		free(argv[i]);
	free(argv);
}

/* Finds the executable for name (a path, or a name searched in PATH) and
 * writes its path to buf. */
static int qemu_find_exe(const char *name, char *buf, size_t len)
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
static int qemu_fd_high(int fd)
{
	int nfd;

	if (fd < 0 || fd > 2)
		return fd;
	nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	close(fd);
	return nfd;
}

/* In the child: set up descriptors and signals, exec path, or report errno
 * on errfd and exit. Only async-signal-safe calls. */
static void __attribute__((noreturn))
qemu_child(const char *path, char *const argv[], int in, int out, int errfd)
{
	sigset_t none;
	int i, e;

	setsid();
	if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
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
	execv(path, argv);
fail:
	e = errno;
	if (write(errfd, &e, sizeof e) < 0)
		_exit(127);
	_exit(127);
}

/* Forks and execs path with argv in a new session; stdin from in, stdout
 * and stderr to out. Returns once exec has succeeded or failed (then
 * SB_ERR_UNAVAIL, with the child reaped). */
static int qemu_fork_exec(const char *path, char *const argv[], int in, int out,
			  pid_t *pid)
{
	int ep[2] = {-1, -1}, e = 0, rc;
	ssize_t n;
	pid_t p;

	if (pipe2(ep, O_CLOEXEC) < 0)
		return sb_seterr(SB_ERR_IO, "pipe: %s", strerror(errno));
	ep[0] = qemu_fd_high(ep[0]);
	ep[1] = qemu_fd_high(ep[1]);
	if (ep[0] < 0 || ep[1] < 0) {
		rc = sb_seterr(SB_ERR_IO, "pipe: %s", strerror(errno));
		goto fail;
	}
	p = fork();
	if (p < 0) {
		rc = sb_seterr(SB_ERR_IO, "fork: %s", strerror(errno));
		goto fail;
	}
	if (p == 0)
		qemu_child(path, argv, in, out, ep[1]);
	close(ep[1]);
	ep[1] = -1;
	do
		n = read(ep[0], &e, sizeof e);
	while (n < 0 && errno == EINTR);
	if (n == sizeof e) {
		waitpid(p, NULL, 0);
		rc =
		    sb_seterr(SB_ERR_UNAVAIL, "cannot execute %s: %s", path, strerror(e));
		goto fail;
	}
	*pid = p;
	rc = 0;
fail:
	if (ep[0] >= 0)
		close(ep[0]);
	if (ep[1] >= 0)
		close(ep[1]);
	return rc;
}

static int qemu_need_file(const char *what, const char *path)
{
	if (path && access(path, R_OK) < 0)
		return sb_seterr(SB_ERR_NOTFOUND, "%s %s: %s", what, path,
				 strerror(errno));
	return 0;
}

int sb_vm_spawn(const struct sb_vm_config *c, pid_t *pid)
{
	char exe[PATH_MAX], log[PATH_MAX], **argv = NULL;
	const char *slash;
	int in = -1, out = -1, rc;

	rc = sb_vm_argv(c, &argv);
	if (rc)
		return rc;
	rc = qemu_find_exe(argv[0], exe, sizeof exe);
	if (rc) {
		rc = strchr(argv[0], '/')
			 ? sb_seterr(SB_ERR_UNAVAIL, "QEMU binary %s", sb_errmsg(rc))
			 : sb_seterr(SB_ERR_UNAVAIL,
				     "QEMU binary %s not found in PATH (install "
				     "qemu-system-x86, or set SANBOX_QEMU)",
				     argv[0]);
		goto fail;
	}
	if ((rc = qemu_need_file("kernel", c->kernel)) ||
	    (rc = qemu_need_file("initrd", c->initrd)) ||
	    (rc = qemu_need_file("disk", c->disk)) ||
	    (rc = qemu_need_file("memory state", c->incoming)))
		goto fail;
	slash = strrchr(c->console_log, '/');
	if (!slash)
		snprintf(log, sizeof log, "qemu.log");
	else if ((size_t)snprintf(log, sizeof log, "%.*s/qemu.log",
				  (int)(slash - c->console_log),
				  c->console_log) >= sizeof log) {
		rc = sb_seterr(SB_ERR_INVAL, "console log path too long");
		goto fail;
	}
	in = qemu_fd_high(open("/dev/null", O_RDONLY | O_CLOEXEC));
	if (in < 0) {
		rc = sb_seterr(SB_ERR_IO, "/dev/null: %s", strerror(errno));
		goto fail;
	}
	out = qemu_fd_high(open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
	if (out < 0) {
		rc = sb_seterr(SB_ERR_IO, "%s: %s", log, strerror(errno));
		goto fail;
	}
	rc = qemu_fork_exec(exe, argv, in, out, pid);
fail:
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	sb_argv_free(argv);
	return rc;
}

int sb_vm_wait(pid_t pid, int timeout_ms, int *status)
{
	int64_t deadline = qemu_deadline(timeout_ms);
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
		rc = poll(&pfd, 1, qemu_left(deadline));
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

int sb_vm_kill(pid_t pid, int sig)
{
	if (pid <= 1)
		return sb_seterr(SB_ERR_INVAL, "bad pid %d", (int)pid);
	if (kill(-pid, sig) == 0)
		return 0;
	if (errno == ESRCH && (kill(pid, sig) == 0 || errno == ESRCH))
		return 0;
	return sb_seterr(SB_ERR_IO, "kill %d: %s", (int)pid, strerror(errno));
}

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
	    chmod(path, 0600) < 0 || listen(s, 8) < 0) {
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
	int64_t deadline = qemu_deadline(timeout_ms);
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
		rc = poll(&pfd, 1, qemu_left(deadline));
		if (rc == 0)
			return sb_seterr(SB_ERR_TIMEOUT, "no connection within %d ms",
					 timeout_ms);
		if (rc < 0 && errno != EINTR)
			return sb_seterr(SB_ERR_IO, "poll: %s", strerror(errno));
	}
}

int sb_proc_run(char *const argv[], int timeout_ms, char *out, size_t outlen, int *status)
{
	int64_t deadline = qemu_deadline(timeout_ms);
	struct pollfd pfd = {.events = POLLIN};
	char exe[PATH_MAX], scratch[4096];
	int pp[2] = {-1, -1}, in = -1, rc;
	size_t used = 0;
	ssize_t n;
	pid_t pid = 0;

	if (outlen)
		out[0] = 0;
	rc = qemu_find_exe(argv[0], exe, sizeof exe);
	if (rc)
		return rc;
	in = qemu_fd_high(open("/dev/null", O_RDONLY | O_CLOEXEC));
	if (in < 0 || pipe2(pp, O_CLOEXEC) < 0) {
		rc = sb_seterr(SB_ERR_IO, "%s: %s", argv[0], strerror(errno));
		goto fail;
	}
	pp[0] = qemu_fd_high(pp[0]);
	pp[1] = qemu_fd_high(pp[1]);
	if (pp[0] < 0 || pp[1] < 0) {
		rc = sb_seterr(SB_ERR_IO, "pipe: %s", strerror(errno));
		goto fail;
	}
	rc = qemu_fork_exec(exe, argv, in, pp[1], &pid);
	if (rc)
		goto fail;
	close(pp[1]);
	pp[1] = -1;
	pfd.fd = pp[0];
	for (;;) {
		rc = poll(&pfd, 1, qemu_left(deadline));
		if (rc == 0) {
			sb_vm_kill(pid, SIGKILL);
			sb_vm_wait(pid, -1, NULL);
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
	rc = sb_vm_wait(pid, qemu_left(deadline), status);
	if (rc == SB_ERR_TIMEOUT) {
		sb_vm_kill(pid, SIGKILL);
		sb_vm_wait(pid, -1, NULL);
	}
fail:
	if (in >= 0)
		close(in);
	if (pp[0] >= 0)
		close(pp[0]);
	if (pp[1] >= 0)
		close(pp[1]);
	return rc;
}
