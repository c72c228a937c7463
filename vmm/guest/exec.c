/* exec.c - commands the host runs beside the harness (EXEC frames).
 *
 * Each command is its own session and process group, in the run's root
 * (the agent is chrooted there), with the harness's environment, in
 * /workspace; its stdin is what the EXEC carried (in a memfd: never a
 * pipe the agent would have to feed) or /dev/null. Its stdout and stderr
 * are pipes the agent's loop reads: up to output_max bytes of each go to
 * the host as EXEC_OUT frames, the rest is read and counted only, so a
 * command that prints without end neither blocks nor floods the host. At
 * its deadline its process group is killed (timed_out). Once it exited
 * and its pipes are drained (what it left behind holding them gets
 * EXEC_DRAIN_MS, then is killed), EXEC_EXIT says how it ended.
 */
#include "vmm/guest/agent.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXEC_READ      16384 /* bytes read from a pipe at once */
#define EXEC_DRAIN_MS  1000  /* after the command exited, for its pipes */
#define EXEC_ARGS_MAX  1024  /* arguments of one command */

static const char *const stream_names[2] = {"stdout", "stderr"};

/* Sends EXEC_EXIT for x (or, with err, for a command that never ran). */
static void exit_send(struct agent_port *p, uint64_t id, const struct exec_proc *x,
		      const char *err)
{
	struct agent_frame f;
	sb_mapw *m;

	agent_frame_begin(&f, SB_CHAN_EXEC_EXIT, id);
	m = agent_frame_map(&f);
	sb_mapw_i64(m, "status", x ? x->status : -1);
	sb_mapw_u64(m, "signal", x ? (uint64_t)x->sig : 0);
	sb_mapw_bool(m, "timed_out", x ? x->timed_out : 0);
	sb_mapw_u64(m, "stdout_bytes", x ? x->bytes[0] : 0);
	sb_mapw_u64(m, "stderr_bytes", x ? x->bytes[1] : 0);
	if (err)
		sb_mapw_str(m, "error", err);
	agent_frame_send(p, &f);
}

/* A memfd holding the n bytes of data, at offset 0; -1 on failure. */
static int stdin_fd(const void *data, size_t n)
{
	int fd = memfd_create("sanbox-exec-stdin", MFD_CLOEXEC);

	if (fd < 0)
		return -1;
	if (agent_write_all(fd, data, n) || lseek(fd, 0, SEEK_SET)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* In the child: the command's session, descriptors and environment. */
static void child(char **argv, char *const env[], int in, const int out[2],
		  const int err[2])
{
	sigset_t none;

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	setsid();
	if (in < 0)
		in = open("/dev/null", O_RDONLY);
	if (in >= 0)
		dup2(in, 0);
	dup2(out[1], 1);
	dup2(err[1], 2);
	if (chdir(AGENT_WORKSPACE))
		dprintf(2, "sanbox-agent: chdir " AGENT_WORKSPACE ": %s\n", strerror(errno));
	if (env)
		environ = (char **)env;
	execvp(argv[0], argv);
	dprintf(2, "sanbox-agent: exec %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

/* Copies the EXEC's argv (1 to EXEC_ARGS_MAX strings without NUL) into a
 * NULL-terminated vector the caller frees with argv_free; NULL when it
 * is not one. */
static char **argv_dup(const msgpack_object *o)
{
	char **v;

	if (!o || o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size == 0 ||
	    o->via.array.size > EXEC_ARGS_MAX || !(v = calloc(o->via.array.size + 1, sizeof *v)))
		return NULL;
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		const msgpack_object *a = &o->via.array.ptr[i];
		if (a->type != MSGPACK_OBJECT_STR || memchr(a->via.str.ptr, 0, a->via.str.size) ||
		    !(v[i] = strndup(a->via.str.ptr, a->via.str.size))) {
			for (uint32_t j = 0; j < i; j++)
				free(v[j]);
			free(v);
			return NULL;
		}
	}
	return v;
}

static void argv_free(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

/* Forks the command of body into x; returns an error message or NULL. */
static const char *spawn(struct exec_proc *x, const msgpack_object *body, char *const env[])
{
	const msgpack_object *in = sb_map_get(body, "stdin");
	char **argv = argv_dup(sb_map_get(body, "argv"));
	int out[2] = {-1, -1}, err[2] = {-1, -1}, fd = -1;
	const char *why = NULL;

	if (!argv)
		return "EXEC argv must be 1 to 1024 strings";
	if (in && (in->type != MSGPACK_OBJECT_BIN || in->via.bin.size > SB_CHAN_EXEC_STDIN_MAX))
		why = "EXEC stdin must be a bin of at most 1 MiB";
	else if (in && (fd = stdin_fd(in->via.bin.ptr, in->via.bin.size)) < 0)
		why = "cannot hold the command's stdin";
	else if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC))
		why = "pipe failed";
	else if ((x->pid = fork()) < 0)
		why = "fork failed";
	else if (x->pid == 0)
		child(argv, env, fd, out, err);
	for (int i = 0; i < 2; i++) {
		x->fd[i] = i ? err[0] : out[0];
		if (x->fd[i] >= 0)
			fcntl(x->fd[i], F_SETFL, O_NONBLOCK);
	}
	if (out[1] >= 0)
		close(out[1]);
	if (err[1] >= 0)
		close(err[1]);
	if (fd >= 0)
		close(fd);
	argv_free(argv);
	return why;
}

void exec_start(struct agent_port *p, struct execs *xs, uint64_t id,
		const msgpack_object *body, char *const env[])
{
	struct exec_proc *x = NULL;
	const char *why = NULL;

	for (size_t i = 0; i < SB_CHAN_EXECS_MAX; i++)
		if (xs->v[i].id == id && id)
			why = "an EXEC of that id runs already";
	for (size_t i = 0; !why && !x && i < SB_CHAN_EXECS_MAX; i++)
		if (!xs->v[i].id)
			x = &xs->v[i];
	if (!id)
		why = "EXEC id must be positive";
	else if (!why && !x)
		why = "too many commands at once (8)";
	if (!why) {
		*x = (struct exec_proc){.id = id, .fd = {-1, -1}, .status = -1};
		x->max = sb_map_u64(body, "output_max", SB_CHAN_DATA_MAX);
		x->deadline = agent_now_ms() + (int64_t)sb_map_u64(body, "timeout_ms", 60000);
		if ((why = spawn(x, body, env))) {
			for (int i = 0; i < 2; i++)
				if (x->fd[i] >= 0)
					close(x->fd[i]);
			if (x->pid > 0) /* a failure after the fork: not ours to wait */
				kill(-x->pid, SIGKILL);
			*x = (struct exec_proc){0};
		}
	}
	if (why) {
		agent_log(p, "exec %llu: %s", (unsigned long long)id, why);
		exit_send(p, id, NULL, why);
	}
}

/* Reads what stream i of x has: sends up to x->max bytes in all, counts
 * the rest; closes it at its end. */
static void out_read(struct agent_port *p, struct exec_proc *x, int i)
{
	char buf[EXEC_READ];
	struct agent_frame f;
	ssize_t n = read(x->fd[i], buf, sizeof buf);
	size_t send;
	sb_mapw *m;

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		close(x->fd[i]);
		x->fd[i] = -1;
		return;
	}
	send = x->sent[i] >= x->max ? 0 : x->max - x->sent[i];
	if (send > (size_t)n)
		send = (size_t)n;
	x->bytes[i] += (uint64_t)n;
	if (!send)
		return;
	x->sent[i] += send;
	agent_frame_begin(&f, SB_CHAN_EXEC_OUT, x->id);
	m = agent_frame_map(&f);
	sb_mapw_str(m, "stream", stream_names[i]);
	sb_mapw_bin(m, "data", buf, send);
	agent_frame_send(p, &f);
}

size_t exec_poll_fill(const struct execs *xs, struct pollfd *pfd)
{
	size_t n = 0;

	for (size_t i = 0; i < SB_CHAN_EXECS_MAX; i++)
		for (int k = 0; k < 2; k++)
			pfd[n++] = (struct pollfd){.fd = xs->v[i].id ? xs->v[i].fd[k] : -1,
						   .events = POLLIN};
	return n;
}

void exec_poll_handle(struct agent_port *p, struct execs *xs, const struct pollfd *pfd)
{
	for (size_t i = 0; i < SB_CHAN_EXECS_MAX; i++)
		for (int k = 0; k < 2; k++)
			if (xs->v[i].id && xs->v[i].fd[k] >= 0 && pfd[2 * i + k].revents)
				out_read(p, &xs->v[i], k);
}

int exec_reaped(struct execs *xs, pid_t pid, int st)
{
	for (size_t i = 0; i < SB_CHAN_EXECS_MAX; i++) {
		struct exec_proc *x = &xs->v[i];
		if (!x->id || x->pid != pid || x->exited)
			continue;
		x->exited = 1;
		x->drain_until = agent_now_ms() + EXEC_DRAIN_MS;
		if (WIFSIGNALED(st)) {
			x->sig = WTERMSIG(st);
			x->status = 128 + x->sig;
		} else {
			x->status = WEXITSTATUS(st);
		}
		return 1;
	}
	return 0;
}

void exec_tick(struct agent_port *p, struct execs *xs, int64_t now)
{
	for (size_t i = 0; i < SB_CHAN_EXECS_MAX; i++) {
		struct exec_proc *x = &xs->v[i];
		if (!x->id)
			continue;
		if (!x->exited && !x->timed_out && now >= x->deadline) {
			x->timed_out = 1;
			kill(-x->pid, SIGKILL);
		}
		if (x->exited && now >= x->drain_until)
			for (int k = 0; k < 2; k++) /* what holds them is left behind */
				if (x->fd[k] >= 0) {
					kill(-x->pid, SIGKILL);
					close(x->fd[k]);
					x->fd[k] = -1;
				}
		if (x->exited && x->fd[0] < 0 && x->fd[1] < 0) {
			exit_send(p, x->id, x, NULL);
			*x = (struct exec_proc){0};
		}
	}
}

int64_t exec_wait_ms(const struct execs *xs, int64_t now)
{
	int64_t wait = -1, at;

	for (size_t i = 0; i < SB_CHAN_EXECS_MAX; i++) {
		const struct exec_proc *x = &xs->v[i];
		if (!x->id)
			continue;
		at = x->exited ? x->drain_until : x->timed_out ? -1 : x->deadline;
		if (x->exited && x->fd[0] < 0 && x->fd[1] < 0)
			at = now; /* EXEC_EXIT is due */
		if (at >= 0 && (wait < 0 || at - now < wait))
			wait = at - now < 0 ? 0 : at - now;
	}
	return wait;
}

void exec_kill_all(struct execs *xs)
{
	for (size_t i = 0; i < SB_CHAN_EXECS_MAX; i++) {
		struct exec_proc *x = &xs->v[i];
		if (!x->id)
			continue;
		if (!x->exited)
			kill(-x->pid, SIGKILL);
		for (int k = 0; k < 2; k++)
			if (x->fd[k] >= 0)
				close(x->fd[k]);
		*x = (struct exec_proc){0};
	}
}
