/* adapt.c - sanbox-adapt, the harness translator in the guest.
 *
 * Usage: sanbox-adapt ADAPTER -- PROGRAM [ARG...]
 *
 * Runs PROGRAM (its own stdin and stderr, in this process group, so the
 * agent's signals reach it), passes everything it prints on stdout through
 * unchanged, and hands each line of it (up to LINE_MAX bytes; a longer one
 * is passed through, not read) to ADAPTER's translator
 * (engine/harness/adapter.h), writing each event it makes to
 * $SANBOX_EVENTS as one line {"type": T, "payload": {...}}. Exits with
 * PROGRAM's status (128 + N when signal N ended it); 127 when it cannot be
 * started, 2 on bad usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/harness/adapter.h"
#include "engine/proc.h"

#define LINE_MAX_BYTES (1u << 20)

struct adapt {
	const struct sb_harness_ops *ops;
	void *st;
	int events; /* $SANBOX_EVENTS, or -1 */
	char *line;
	size_t len;
	int over; /* the line passed LINE_MAX_BYTES: skipped to its end */
};

static void emit(void *ctx, const char *type, json_t *payload)
{
	struct adapt *a = ctx;
	json_t *ev = payload ? json_pack("{s:s, s:O}", "type", type, "payload", payload) : NULL;
	char *s = ev ? json_dumps(ev, JSON_COMPACT) : NULL;

	if (s && a->events >= 0) {
		size_t n = strlen(s);
		s[n] = '\n'; /* json_dumps's NUL becomes the line's end */
		sb_write_full(a->events, s, n + 1);
	}
	free(s);
	json_decref(ev);
	json_decref(payload);
}

/* Feeds n bytes of the harness's stdout to the translator, line by line. */
static void feed(struct adapt *a, const char *p, size_t n)
{
	while (n) {
		const char *nl = memchr(p, '\n', n);
		size_t k = nl ? (size_t)(nl - p) : n;
		if (!a->over && a->len + k <= LINE_MAX_BYTES) {
			memcpy(a->line + a->len, p, k);
			a->len += k;
		} else {
			a->over = 1;
		}
		if (nl) {
			if (!a->over)
				a->ops->read_line(a->st, a->line, a->len, emit, a);
			a->len = 0;
			a->over = 0;
			k++;
		}
		p += k;
		n -= k;
	}
}

/* Starts argv with its stdout into a pipe; *out gets the read end. */
static pid_t start(char **argv, int *out)
{
	int fd[2];
	pid_t pid;

	if (pipe2(fd, O_CLOEXEC))
		return -1;
	if ((pid = fork()) == 0) {
		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		dup2(fd[1], 1);
		execvp(argv[0], argv);
		fprintf(stderr, "sanbox-adapt: %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(fd[1]);
	if (pid < 0)
		close(fd[0]);
	*out = fd[0];
	return pid;
}

int main(int argc, char **argv)
{
	struct adapt a = {0};
	const char *path = getenv("SANBOX_EVENTS");
	char buf[65536];
	int fd, status = 0;
	ssize_t n;
	pid_t pid;

	if (argc < 4 || strcmp(argv[2], "--")) {
		fprintf(stderr, "usage: sanbox-adapt ADAPTER -- PROGRAM [ARG...]\n");
		return 2;
	}
	a.ops = sb_harness_find(argv[1]);
	if (!a.ops || !a.ops->read_line) {
		fprintf(stderr, "sanbox-adapt: no translator for adapter '%s'\n", argv[1]);
		return 2;
	}
	a.line = malloc(LINE_MAX_BYTES);
	a.st = a.ops->reader_new();
	if (!a.line || !a.st) {
		fprintf(stderr, "sanbox-adapt: out of memory\n");
		return 127;
	}
	a.events = path && *path ? open(path, O_WRONLY | O_CLOEXEC) : -1;
	/* the signals for the harness reach it too: it reads on to the end */
	signal(SIGTERM, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	if ((pid = start(argv + 3, &fd)) < 0) {
		fprintf(stderr, "sanbox-adapt: cannot start %s: %s\n", argv[3], strerror(errno));
		return 127;
	}
	while ((n = read(fd, buf, sizeof buf)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		sb_write_full(1, buf, (size_t)n);
		feed(&a, buf, (size_t)n);
	}
	if (a.len && !a.over) /* a last line without its newline */
		a.ops->read_line(a.st, a.line, a.len, emit, &a);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	a.ops->read_end(a.st, status, emit, &a);
	a.ops->reader_free(a.st);
	free(a.line);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
