/* connect.c - finding the daemon, starting it on demand, connecting.
 *
 * A daemon holds the lock of STATE_DIR/sanboxd.pid (flock) while it runs.
 * Who holds it is read from /proc/locks, never by taking the lock: a probe
 * that held it for a moment could make a daemon that starts at that moment
 * give up. A holder that is exiting (a zombie whose threads still end
 * after a kill -9) is waited for briefly; one that is alive but does not
 * answer is reported, never joined by a second daemon.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/home.h"
#include "engine/payload.h"
#include "engine/proc.h"
#include "engine/units.h"

#define EXIT_WAIT_MS 2000 /* for a dying daemon to let go of the lock */

static int health(sb_client *c, int timeout_ms)
{
	struct cli_req r;
	struct sb_reply rep;
	int rc;

	cli_req_begin(&r, "health");
	memset(&rep, 0, sizeof rep);
	if ((rc = sb_mapw_end(&r.m)) == SB_OK)
		rc = sb_request(c, &r.buf, timeout_ms, &rep);
	msgpack_sbuffer_destroy(&r.buf);
	sb_reply_free(&rep);
	return rc;
}

/* Opens a client to the local daemon and asks health; sets *out when it
 * answers. Returns the error of the open or of health. */
static int ask(int timeout_ms, sb_client **out)
{
	sb_client *c = NULL;
	int rc;

	if ((rc = sb_client_open(cli_home, NULL, &c)) == SB_OK &&
	    (rc = health(c, timeout_ms)) == SB_OK) {
		*out = c;
		return SB_OK;
	}
	sb_client_close(c);
	return rc;
}

/* Returns 1 when a process holds the pid file lock of cli_home, with its
 * pid in *pid (0 when not known), else 0. */
static int lock_holder(int *pid)
{
	char path[PATH_MAX], line[256], kind[16], buf[32];
	struct stat st;
	unsigned maj, min;
	unsigned long ino;
	int fd, p, held = 0;
	ssize_t n;
	FILE *f;

	*pid = 0;
	sb_home_path(cli_home, "sanboxd.pid", path, sizeof path);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	if (fstat(fd, &st) == 0 && (f = fopen("/proc/locks", "re"))) {
		while (!held && fgets(line, sizeof line, f))
			held = sscanf(line, "%*d: %15s %*s %*s %d %x:%x:%lu", kind, &p,
				      &maj, &min, &ino) == 5 &&
			       !strcmp(kind, "FLOCK") && ino == st.st_ino &&
			       maj == major(st.st_dev) && min == minor(st.st_dev);
		fclose(f);
		if (held)
			*pid = p;
	} else if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
		flock(fd, LOCK_UN); /* no /proc/locks: the lock itself has to tell */
	} else if (errno == EWOULDBLOCK) {
		held = 1;
		n = read(fd, buf, sizeof buf - 1);
		buf[n > 0 ? n : 0] = 0;
		*pid = atoi(buf);
	}
	close(fd);
	return held;
}

/* The state letter of process pid in /proc/PID/stat ('R', 'S', 'T', 'Z'...),
 * or 0 when there is no such process. */
static char proc_state(int pid)
{
	char path[64], buf[512], *paren;
	ssize_t n;
	int fd;

	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	paren = strrchr(buf, ')'); /* the name in parentheses may hold anything */
	return paren && paren[1] == ' ' ? paren[2] : 0;
}

int cli_daemon_wait_gone(int ms)
{
	int pid;

	for (uint64_t end = (uint64_t)sb_now_ms() + (uint64_t)ms; lock_holder(&pid); usleep(20000))
		if ((uint64_t)sb_now_ms() >= end)
			return 0;
	return 1;
}

enum cli_daemon cli_daemon_find(int wait_ms, sb_client **out, int *pid)
{
	uint64_t end = (uint64_t)sb_now_ms() + (uint64_t)wait_ms;
	int held, waited = 0, left;
	char st;

	*out = NULL;
	for (;;) {
		held = lock_holder(pid);
		st = held && *pid ? proc_state(*pid) : 'R';
		if (held && !waited && (st == 0 || st == 'Z' || st == 'X')) {
			/* dying: its lock goes with its last thread; then look again */
			waited = 1;
			if (cli_daemon_wait_gone(EXIT_WAIT_MS))
				continue;
			return CLI_DAEMON_ABSENT; /* go on: starting one will tell */
		}
		if (held && (st == 'T' || st == 't'))
			return CLI_DAEMON_SILENT; /* stopped (SIGSTOP): it cannot answer
						   */
		left = (int)(end > (uint64_t)sb_now_ms() ? end - (uint64_t)sb_now_ms() : 0);
		if (ask(left > 3000 ? 3000 : left > 200 ? left : 200, out) == SB_OK)
			return CLI_DAEMON_ANSWERS;
		if (!held)
			return CLI_DAEMON_ABSENT;
		if ((uint64_t)sb_now_ms() >= end)
			return CLI_DAEMON_SILENT;
		usleep(50000); /* a daemon that is starting: catching up, not listening
				  yet */
	}
}

/* Finds sanboxd beside this program, else on PATH. */
static void daemon_path(char *buf, size_t cap)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);

	if (n > 0) {
		self[n] = 0;
		char *slash = strrchr(self, '/');
		if (slash && (size_t)(slash - self) + sizeof "/sanboxd" <= cap) {
			memcpy(slash, "/sanboxd", sizeof "/sanboxd");
			memcpy(buf, self, strlen(self) + 1);
			if (access(buf, X_OK) == 0)
				return;
		}
	}
	snprintf(buf, cap, "sanboxd");
}

/* Starts sanboxd for cli_home, detached (not this process's child, in a
 * session of its own), logging to sanboxd.log. */
static int spawn_daemon(void)
{
	char exe[PATH_MAX], logpath[PATH_MAX];
	char *argv[] = {exe, "--home", cli_home, NULL};
	struct sb_spawn sp = {.argv = argv, .in = -1, .out = -1, .err = -1, .new_session = 1,
			      .detach = 1};
	pid_t pid;
	int rc, log;

	if ((rc = sb_home_init(cli_home)))
		return rc;
	daemon_path(exe, sizeof exe);
	sb_home_path(cli_home, "sanboxd.log", logpath, sizeof logpath);
	if ((log = open(logpath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600)) < 0)
		return sb_seterr(SB_ERR_IO, "%s: %s", logpath, strerror(errno));
	sp.out = sp.err = log;
	rc = sb_spawn(&sp, &pid);
	close(log);
	return rc;
}

int cli_daemon_silent(int pid)
{
	char p[32];

	snprintf(p, sizeof p, pid ? "pid %d" : "pid unknown", pid);
	return sb_seterr(
	    SB_ERR_UNAVAIL,
	    "sanboxd (%s) holds %s/sanboxd.pid but does not answer; see %s/sanboxd.log",
	    p, cli_home, cli_home);
}

int cli_connect(int autostart, sb_client **out)
{
	sb_client *c = NULL;
	uint64_t end;
	int pid, rc;

	if (cli_remote) {
		/* a remote daemon is never started from here */
		if ((rc = sb_client_open(cli_remote, cli_ca, &c)) ||
		    (rc = health(c, 10000))) {
			const char *m = sb_errmsg(rc);
			sb_client_close(c);
			/* the detail names the url once */
			return sb_seterr(rc == SB_ERR_DENIED ? rc : SB_ERR_UNAVAIL,
					 "%s%s%s",
					 strstr(m, cli_remote) ? "" : cli_remote,
					 strstr(m, cli_remote) ? "" : ": ", m);
		}
		*out = c;
		return SB_OK;
	}
	switch (cli_daemon_find(CLI_START_WAIT_MS, out, &pid)) {
	case CLI_DAEMON_ANSWERS: return SB_OK;
	case CLI_DAEMON_SILENT: return cli_daemon_silent(pid);
	case CLI_DAEMON_ABSENT: break;
	}
	if (!autostart)
		return sb_seterr(SB_ERR_UNAVAIL, "no daemon runs for %s", cli_home);
	if ((rc = spawn_daemon()))
		return rc;
	for (end = (uint64_t)sb_now_ms() + CLI_START_WAIT_MS; (uint64_t)sb_now_ms() < end; usleep(50000))
		if (ask(1000, out) == SB_OK)
			return SB_OK;
	if (lock_holder(&pid) && proc_state(pid) != 0)
		return cli_daemon_silent(pid);
	return sb_seterr(SB_ERR_UNAVAIL, "the daemon did not start; see %s/sanboxd.log",
			 cli_home);
}
