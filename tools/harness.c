/* harness.c - sanbox-harness: the reference agent loop run inside a guest.
 *
 *   sanbox-harness [--model M] [--max-turns N] PROMPT...
 *
 * The prompt is the arguments joined by spaces, else $SANBOX_PROMPT. The
 * model is --model, else $SANBOX_MODEL, else stub/scripted. It talks to the
 * OpenAI-compatible endpoint $OPENAI_BASE_URL (default
 * http://127.0.0.1:4000/v1, the guest's tunnel to the model gateway) with
 * the key $OPENAI_API_KEY (sent as `Authorization: Bearer`).
 *
 * Each turn POSTs /chat/completions (non-stream) with four tools: shell
 * {command}, read_file {path}, write_file {path, content}, report_progress
 * {label, count, total?}. The tool calls of
 * the answer run in the current directory (shell: /bin/sh -c, 60 s timeout,
 * output capped at 64 KiB) and their results go back as `tool` messages.
 * The loop ends with an answer without tool calls (printed on stdout) or
 * after --max-turns turns (default 20).
 *
 * When $SANBOX_CONVERSATION is set (the guest agent sets it to
 * /var/lib/sanbox/conversation.json, on the run's disk but outside
 * /workspace), the conversation (the messages sent to the model) is kept
 * there after each turn, written whole and renamed into place. A harness
 * that finds one there when it starts (a run resumed or forked from a
 * snapshot) continues it: the prompt it is given is the next user message.
 *
 * When $SANBOX_EVENTS is set, the harness writes one JSON line per event
 * there (one write(2) per line): agent.turn.started, agent.tool.started,
 * agent.tool.completed, agent.turn.completed, agent.message; and for each
 * report_progress call agent.progress {label, count, total} in place of
 * the tool events (its label escaped as the CLI escapes text, and cut to
 * the 64 bytes the host takes), so a model can say how far it is.
 *
 * Exit status: 0 final answer given; 2 usage error, HTTP error, bad answer
 * or model unreachable after 3 retries; 3 budget exhausted (HTTP 402);
 * 4 stopped at --max-turns without a final answer.
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/log/schema.h"
#include "engine/text.h"

#ifndef TOOL_TIMEOUT_MS
#define TOOL_TIMEOUT_MS 60000 /* shell tool timeout; -D for tests */
#endif
#define TOOL_OUTPUT_MAX (64 * 1024)
#define EVENT_ARGS_MAX	200
#define EVENT_TEXT_MAX	4096
#define HTTP_BODY_MAX	(64u << 20)
#define HTTP_RETRIES	3

enum {
	EXIT_OK = 0,
	EXIT_FAIL = 2,
	EXIT_BUDGET = 3,
	EXIT_MAX_TURNS = 4,
};

static const char TOOLS_JSON[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"shell\","
    " \"description\": \"Run a command with /bin/sh -c in the working "
    "directory. Returns its stdout and stderr (at most 64 KiB) and its exit "
    "status. Times out after 60 s.\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"command\":"
    " {\"type\": \"string\"}}, \"required\": [\"command\"]}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"read_file\","
    " \"description\": \"Read a text file (path relative to the working "
    "directory; at most 64 KiB).\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"path\":"
    " {\"type\": \"string\"}}, \"required\": [\"path\"]}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"write_file\","
    " \"description\": \"Create or replace a file (path relative to the "
    "working directory; parent directories are created).\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"path\":"
    " {\"type\": \"string\"}, \"content\": {\"type\": \"string\"}},"
    " \"required\": [\"path\", \"content\"]}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"report_progress\","
    " \"description\": \"Say how far the task is: count items of label done "
    "so far, out of total when known (e.g. 18 of 40 reports checked). Whoever "
    "watches the run sees the latest report.\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"label\":"
    " {\"type\": \"string\"}, \"count\": {\"type\": \"integer\"},"
    " \"total\": {\"type\": \"integer\"}},"
    " \"required\": [\"label\", \"count\"]}}}]";

static const char SYSTEM_PROMPT[] =
    "You are an agent working in a sandbox. Use the tools to inspect and "
    "change files in the working directory. When the task is done, answer "
    "with a short summary and no tool call.";

/* The agent's state for one run. */
struct harness {
	char url[2048];	 /* .../chat/completions */
	const char *key; /* may be NULL */
	const char *model;
	int max_turns;
	int events_fd;	  /* -1 when $SANBOX_EVENTS is not set */
	const char *conv; /* where the conversation is kept, or NULL */
	CURL *curl;
	json_t *tools;
	json_t *messages;
};

/* The tool process group, killed when the harness itself is signalled. */
static volatile sig_atomic_t tool_pgid;

/* A growing byte buffer. */
struct buf {
	char *data;
	size_t len, total; /* total counts bytes dropped past the cap too */
	size_t cap_max;
};

static int buf_add(struct buf *b, const char *p, size_t n)
{
	size_t keep = n;
	char *d;

	b->total += n;
	if (b->len + keep > b->cap_max)
		keep = b->cap_max - b->len;
	if (!keep)
		return 0;
	d = realloc(b->data, b->len + keep + 1);
	if (!d)
		return SB_ERR_NOMEM;
	b->data = d;
	memcpy(b->data + b->len, p, keep);
	b->len += keep;
	b->data[b->len] = '\0';
	return 0;
}

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* ---- text ---- */

/* A JSON string of s[0..len) with each byte that is not part of valid
 * UTF-8 as U+FFFD (jansson refuses invalid UTF-8), cut to at most max bytes
 * on a character boundary. NULL when out of memory. */
static json_t *text_json(const char *s, size_t len, size_t max)
{
	size_t n;
	char *clean = sb_utf8_lossy(s, len, &n);
	json_t *j;

	if (!clean)
		return NULL;
	j = json_stringn(clean, sb_utf8_cut(clean, n, max));
	free(clean);
	return j;
}

/* ---- events ---- */

/* Writes {"type": type, "payload": payload} as one line to $SANBOX_EVENTS
 * (takes the reference to payload). */
static void emit(struct harness *h, const char *type, json_t *payload)
{
	json_t *ev = json_pack("{s:s, s:o}", "type", type, "payload", payload);
	char *s = ev ? json_dumps(ev, JSON_COMPACT) : NULL, *line = NULL;
	size_t off = 0, len;
	ssize_t n;

	json_decref(ev);
	if (h->events_fd < 0 || !s || asprintf(&line, "%s\n", s) < 0)
		goto done;
	len = strlen(line);
	while (off < len) {
		n = write(h->events_fd, line + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fprintf(stderr, "sanbox-harness: events: %s\n", strerror(errno));
			break;
		}
		off += (size_t)n;
	}
	free(line);
done:
	free(s);
}

/* ---- tools ---- */

static void on_signal(int sig)
{
	if (tool_pgid > 0)
		kill(-tool_pgid, SIGKILL);
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Runs cmd with /bin/sh -c in its own process group; out gets its stdout
 * and stderr (capped), *status its exit code (124 after the timeout,
 * 128+N when killed by signal N). */
static int tool_shell(const char *cmd, struct buf *out, int *status)
{
	struct pollfd pfd = {.events = POLLIN};
	long deadline = now_ms() + TOOL_TIMEOUT_MS, ms;
	int p[2], st = 0, reaped = 0, eof = 0, idle = 0, timed_out = 0;
	char chunk[8192];
	ssize_t n;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return sb_seterr(SB_ERR_IO, "pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return sb_seterr(SB_ERR_IO, "fork: %s", strerror(errno));
	}
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY);

		setpgid(0, 0);
		signal(SIGPIPE, SIG_DFL);
		if (null >= 0)
			dup2(null, 0);
		dup2(p[1], 1);
		dup2(p[1], 2);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	setpgid(pid, pid);
	tool_pgid = pid;
	close(p[1]);
	pfd.fd = p[0];
	/* Read until the shell is reaped and the pipe is drained (a
	 * background job may keep the pipe open: do not wait for its EOF). */
	while (!(reaped && (eof || idle))) {
		ms = deadline - now_ms();
		if (ms <= 0) {
			kill(-pid, SIGKILL);
			waitpid(pid, &st, 0);
			timed_out = reaped = 1;
			break;
		}
		if (!eof) {
			int r = poll(&pfd, 1, reaped ? 0 : (int)(ms < 50 ? ms : 50));

			if (r > 0) {
				n = read(p[0], chunk, sizeof(chunk));
				if (n > 0) {
					if (buf_add(out, chunk, (size_t)n) < 0)
						eof = 1;
				} else if (n == 0 || errno != EINTR) {
					eof = 1;
				}
			} else if (r == 0 && reaped) {
				idle = 1;
			}
		} else if (!reaped) {
			poll(NULL, 0, ms < 20 ? (int)ms : 20);
		}
		if (!reaped && waitpid(pid, &st, WNOHANG) == pid)
			reaped = 1;
	}
	tool_pgid = 0;
	close(p[0]);
	if (timed_out)
		*status = 124;
	else if (WIFSIGNALED(st))
		*status = 128 + WTERMSIG(st);
	else
		*status = WEXITSTATUS(st);
	return 0;
}

/* Creates the parent directories of path. */
static void make_parents(const char *path)
{
	char *copy = strdup(path), *p;

	if (!copy)
		return;
	for (p = strchr(copy + 1, '/'); p; p = strchr(p + 1, '/')) {
		*p = '\0';
		mkdir(copy, 0755);
		*p = '/';
	}
	free(copy);
}

static int tool_read_file(const char *path, struct buf *out)
{
	char chunk[8192];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	while ((n = read(fd, chunk, sizeof(chunk))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || buf_add(out, chunk, (size_t)n) < 0) {
			close(fd);
			return -1;
		}
	}
	close(fd);
	return 0;
}

static int tool_write_file(const char *path, const char *data, size_t len)
{
	size_t off = 0;
	ssize_t n;
	int fd;

	make_parents(path);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	while (off < len) {
		n = write(fd, data + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			close(fd);
			return -1;
		}
		off += (size_t)n;
	}
	return close(fd);
}

/* Appends a printf-style note to out, past its cap if need be, and returns
 * status (so a tool can end with `return tool_note(out, 1, ...)`). */
static int tool_note(struct buf *out, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int tool_note(struct buf *out, int status, const char *fmt, ...)
{
	char note[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(note, sizeof(note), fmt, ap);
	va_end(ap);
	if (n > 0) {
		out->cap_max = out->len + sizeof(note);
		buf_add(out, note, strlen(note));
	}
	return status;
}

/* Executes tool name with its arguments; out gets the result text.
 * Returns the tool's exit status. */
static int tool_exec(const char *name, json_t *args, struct buf *out)
{
	const char *path = json_string_value(json_object_get(args, "path"));
	const char *cmd = json_string_value(json_object_get(args, "command"));
	json_t *content = json_object_get(args, "content");
	int status = 0, err;

	if (!json_is_object(args))
		return tool_note(out, 2, "error: arguments are not a JSON object");
	if (strcmp(name, "shell") == 0 && cmd) {
		err = tool_shell(cmd, out, &status);
		if (err)
			return tool_note(out, 126, "error: %s", sb_errmsg(err));
		return status;
	}
	if (strcmp(name, "read_file") == 0 && path) {
		if (tool_read_file(path, out) == 0)
			return 0;
		out->len = out->total = 0;
		return tool_note(out, 1, "error: %.100s: %s", path, strerror(errno));
	}
	if (strcmp(name, "write_file") == 0 && path && json_is_string(content)) {
		if (tool_write_file(path, json_string_value(content),
				    json_string_length(content)) < 0)
			return tool_note(out, 1, "error: %.100s: %s", path,
					 strerror(errno));
		return tool_note(out, 0, "wrote %zu bytes", json_string_length(content));
	}
	if (strcmp(name, "shell") && strcmp(name, "read_file") &&
	    strcmp(name, "write_file"))
		return tool_note(out, 127, "error: unknown tool %.64s", name);
	return tool_note(out, 2, "error: missing arguments for %s", name);
}

/* A whole number of 0 or more, or NULL for none. */
static int is_count(const json_t *v)
{
	return json_is_integer(v) && json_integer_value(v) >= 0;
}

/* The report_progress tool: emits agent.progress {label, count, total}.
 * The label is escaped (sb_text_escape) and cut to SB_LABEL_MAX bytes, so
 * the host takes whatever label the model gave. Returns the exit status. */
static int tool_progress(struct harness *h, json_t *args, struct buf *out)
{
	const char *label = json_string_value(json_object_get(args, "label"));
	json_t *count = json_object_get(args, "count"), *total = json_object_get(args, "total");
	json_t *payload;
	char esc[4 * SB_LABEL_MAX + 16];

	if (!label || !*label || !is_count(count) ||
	    (total && !json_is_null(total) && !is_count(total)))
		return tool_note(out, 2, "error: report_progress takes label (text), count and "
					 "total (whole numbers of 0 or more; total optional)");
	sb_text_escape(label, strlen(label), esc, sizeof esc);
	payload = json_pack("{s:s%, s:O}", "label", esc, sb_utf8_cut(esc, strlen(esc), SB_LABEL_MAX),
			    "count", count);
	if (payload && is_count(total))
		json_object_set(payload, "total", total);
	emit(h, "agent.progress", payload);
	return tool_note(out, 0, "reported");
}

/* A tool that works (not report_progress): runs it between its
 * agent.tool.started and agent.tool.completed; out gets its result. */
static void tool_run(struct harness *h, const char *name, json_t *args, struct buf *out)
{
	const char *summary = json_string_value(
	    json_object_get(args, strcmp(name, "shell") ? "path" : "command"));
	long start = now_ms();
	int status;

	if (!summary)
		summary = "";
	emit(h, "agent.tool.started",
	     json_pack("{s:s, s:o}", "tool", name, "args",
		       text_json(summary, strlen(summary), EVENT_ARGS_MAX)));
	status = tool_exec(name, args, out);
	if (out->total > out->len)
		tool_note(out, 0, "\n[output truncated: %zu of %zu bytes]", out->len,
			  out->total);
	if (strcmp(name, "shell") == 0 && status)
		tool_note(out, 0, "\n[exit status %d%s]", status,
			  status == 124 ? ": timed out" : "");
	emit(h, "agent.tool.completed",
	     json_pack("{s:s, s:o, s:i, s:I}", "tool", name, "args",
		       text_json(summary, strlen(summary), EVENT_ARGS_MAX), "exit",
		       status, "duration_ms", (json_int_t)(now_ms() - start)));
}

/* Runs one tool call of the model's answer, emits its events and appends
 * the `tool` message with its result. */
static int run_tool(struct harness *h, json_t *call)
{
	json_t *fn = json_object_get(call, "function"), *args = NULL, *msg;
	const char *id = json_string_value(json_object_get(call, "id"));
	const char *name = json_string_value(json_object_get(fn, "name"));
	const char *astr = json_string_value(json_object_get(fn, "arguments"));
	struct buf out = {.cap_max = TOOL_OUTPUT_MAX};

	if (!name)
		name = "?";
	if (astr)
		args = json_loads(astr, JSON_DECODE_ANY, NULL);
	else if (json_is_object(json_object_get(fn, "arguments")))
		args = json_incref(json_object_get(fn, "arguments"));
	if (!strcmp(name, "report_progress"))
		tool_progress(h, args, &out);
	else
		tool_run(h, name, args, &out);
	msg = json_pack("{s:s, s:s, s:o}", "role", "tool", "tool_call_id", id ? id : "",
			"content",
			text_json(out.data ? out.data : "", out.len, (size_t)-1));
	free(out.data);
	json_decref(args);
	if (!msg)
		return SB_ERR_NOMEM;
	return json_array_append_new(h->messages, msg) < 0 ? SB_ERR_NOMEM : 0;
}

/* ---- model calls ---- */

static size_t on_body(char *p, size_t size, size_t n, void *ctx)
{
	struct buf *b = ctx;

	if (b->len + n > b->cap_max || buf_add(b, p, n) < 0)
		return 0; /* aborts the transfer */
	return n;
}

static int is_connect_error(CURL *c, CURLcode rc)
{
	curl_off_t t = 0;

	switch (rc) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING: return 1;
	case CURLE_OPERATION_TIMEDOUT:
		curl_easy_getinfo(c, CURLINFO_CONNECT_TIME_T, &t);
		return t == 0;
	default: return 0;
	}
}

/* The error message of an OpenAI or Anthropic error body, or its start. */
static void error_message(const struct buf *b, char *msg, size_t size)
{
	json_t *j = json_loadb(b->data ? b->data : "", b->len, 0, NULL);
	json_t *e = json_object_get(j, "error");
	const char *m =
	    json_string_value(json_is_object(e) ? json_object_get(e, "message") : e);

	if (m)
		snprintf(msg, size, "%s", m);
	else
		snprintf(msg, size, "%.200s", b->data ? b->data : "");
	msg[strcspn(msg, "\r\n")] = '\0';
	json_decref(j);
}

/* Sends the conversation; *answer gets the parsed response (the caller
 * frees). Returns an exit status; on failure it has printed why. */
static int model_call(struct harness *h, json_t **answer)
{
	json_t *req = json_pack("{s:s, s:O, s:O}", "model", h->model, "messages",
				h->messages, "tools", h->tools);
	struct curl_slist *hdrs = NULL;
	struct buf body = {.cap_max = HTTP_BODY_MAX};
	char *data = req ? json_dumps(req, JSON_COMPACT) : NULL, *auth = NULL;
	char msg[512];
	long status = 0;
	CURLcode rc = CURLE_OK;
	int attempt, ret = EXIT_FAIL;

	json_decref(req);
	if (!data) {
		fprintf(stderr, "sanbox-harness: out of memory\n");
		return EXIT_FAIL;
	}
	hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
	if (h->key && asprintf(&auth, "Authorization: Bearer %s", h->key) >= 0)
		hdrs = curl_slist_append(hdrs, auth);
	curl_easy_reset(h->curl);
	curl_easy_setopt(h->curl, CURLOPT_URL, h->url);
	curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h->curl, CURLOPT_POSTFIELDS, data);
	curl_easy_setopt(h->curl, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h->curl, CURLOPT_WRITEDATA, &body);
	curl_easy_setopt(h->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h->curl, CURLOPT_CONNECTTIMEOUT, 10L);
	curl_easy_setopt(h->curl, CURLOPT_TIMEOUT, 900L);
	for (attempt = 0; attempt <= HTTP_RETRIES; attempt++) {
		if (attempt)
			poll(NULL, 0, 500 << (attempt - 1)); /* 0.5, 1, 2 s */
		body.len = body.total = 0;
		rc = curl_easy_perform(h->curl);
		if (rc == CURLE_OK || !is_connect_error(h->curl, rc))
			break;
	}
	if (rc != CURLE_OK) {
		fprintf(
		    stderr, "sanbox-harness: %s: %s%s\n", h->url, curl_easy_strerror(rc),
		    is_connect_error(h->curl, rc) ? " (gave up after 3 retries)" : "");
		goto done;
	}
	curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &status);
	if (status == 402) {
		fprintf(stderr, "sanbox-harness: budget exhausted\n");
		ret = EXIT_BUDGET;
		goto done;
	}
	if (status != 200) {
		error_message(&body, msg, sizeof(msg));
		fprintf(stderr, "sanbox-harness: HTTP %ld: %s\n", status, msg);
		goto done;
	}
	*answer = json_loadb(body.data ? body.data : "", body.len, 0, NULL);
	if (!*answer) {
		fprintf(stderr, "sanbox-harness: the model's answer is not JSON\n");
		goto done;
	}
	ret = EXIT_OK;
done:
	curl_slist_free_all(hdrs);
	free(auth);
	free(data);
	free(body.data);
	return ret;
}

/* ---- the conversation on disk ---- */

/* Creates the directories above path (mode 0700). */
static void mkdirs_above(const char *path)
{
	char dir[PATH_MAX];
	char *p;

	snprintf(dir, sizeof dir, "%s", path);
	for (p = dir + 1; (p = strchr(p, '/')); p++) {
		*p = 0;
		mkdir(dir, 0700);
		*p = '/';
	}
}

/* Writes the conversation to h->conv, if set (a new file renamed over
 * the old: a snapshot never holds half of it). Failing is not fatal. */
static void conv_save(struct harness *h)
{
	char tmp[PATH_MAX + 8];

	if (!h->conv)
		return;
	snprintf(tmp, sizeof tmp, "%s.new", h->conv);
	mkdirs_above(h->conv);
	if (json_dump_file(h->messages, tmp, JSON_COMPACT) || rename(tmp, h->conv)) {
		fprintf(stderr,
			"sanbox-harness: cannot keep the conversation in %s: %s\n",
			h->conv, strerror(errno));
		unlink(tmp);
	}
}

/* The conversation kept by an earlier run of this disk, or NULL: an
 * array of messages that begins with the system message. */
static json_t *conv_load(const char *path)
{
	json_t *m = json_load_file(path, 0, NULL);
	json_t *first = json_array_get(m, 0);

	if (!json_is_array(m) || json_array_size(m) < 2 ||
	    !json_is_string(json_object_get(first, "role")) ||
	    strcmp(json_string_value(json_object_get(first, "role")), "system")) {
		json_decref(m);
		return NULL;
	}
	return m;
}

/* ---- the loop ---- */

static int run(struct harness *h)
{
	json_t *answer = NULL, *choice, *msg, *calls, *content, *call, *keep;
	const char *text;
	size_t i;
	int turn, ret;

	for (turn = 1;; turn++) {
		emit(h, "agent.turn.started", json_pack("{s:i}", "turn", turn));
		ret = model_call(h, &answer);
		if (ret)
			return ret;
		choice = json_array_get(json_object_get(answer, "choices"), 0);
		msg = json_object_get(choice, "message");
		if (!json_is_object(msg)) {
			fprintf(stderr, "sanbox-harness: the model's answer has "
					"no choices[0].message\n");
			json_decref(answer);
			return EXIT_FAIL;
		}
		content = json_object_get(msg, "content");
		calls = json_object_get(msg, "tool_calls");
		if (!json_is_array(calls) || json_array_size(calls) == 0)
			calls = NULL;
		/* Keep only the fields a chat API accepts back. */
		keep = json_pack("{s:s, s:O}", "role", "assistant", "content",
				 json_is_string(content) ? content : json_null());
		if (keep && calls)
			json_object_set(keep, "tool_calls", calls);
		if (!keep || json_array_append_new(h->messages, keep) < 0) {
			json_decref(answer);
			return EXIT_FAIL;
		}
		json_array_foreach(calls, i, call)
		{
			if (run_tool(h, call) < 0) {
				fprintf(stderr, "sanbox-harness: out of memory\n");
				json_decref(answer);
				return EXIT_FAIL;
			}
		}
		if (!calls) {
			text = json_string_value(content);
			if (text && *text)
				printf("%s\n", text);
			emit(h, "agent.message",
			     json_pack("{s:s, s:o*}", "role", "assistant", "text",
				       text && *text
					   ? text_json(text, strlen(text), EVENT_TEXT_MAX)
					   : NULL));
		}
		conv_save(h);
		emit(h, "agent.turn.completed", json_pack("{s:i}", "turn", turn));
		json_decref(answer);
		answer = NULL;
		if (!calls)
			return EXIT_OK;
		if (turn >= h->max_turns) {
			fprintf(stderr,
				"sanbox-harness: stopped after %d turns "
				"without a final answer\n",
				turn);
			return EXIT_MAX_TURNS;
		}
	}
}

static void usage(void)
{
	fprintf(stderr, "usage: sanbox-harness [--model M] [--max-turns N] "
			"PROMPT...\n");
	exit(EXIT_FAIL);
}

int main(int argc, char **argv)
{
	struct harness h = {.events_fd = -1, .max_turns = 20};
	const char *base = getenv("OPENAI_BASE_URL");
	const char *events = getenv("SANBOX_EVENTS");
	struct buf prompt = {.cap_max = (size_t)-1};
	char *end;
	int i, ret = EXIT_FAIL;

	h.model = getenv("SANBOX_MODEL");
	for (i = 1; i < argc; i++) {
		if (i + 1 < argc && strcmp(argv[i], "--model") == 0) {
			h.model = argv[++i];
		} else if (i + 1 < argc && strcmp(argv[i], "--max-turns") == 0) {
			h.max_turns = (int)strtol(argv[++i], &end, 10);
			if (*end || h.max_turns < 1)
				usage();
		} else if (strcmp(argv[i], "--") == 0) {
			i++;
			break;
		} else if (argv[i][0] == '-' && argv[i][1] == '-') {
			usage();
		} else {
			break;
		}
	}
	for (; i < argc; i++) {
		if (prompt.len)
			buf_add(&prompt, " ", 1);
		buf_add(&prompt, argv[i], strlen(argv[i]));
	}
	if (!prompt.len && getenv("SANBOX_PROMPT"))
		buf_add(&prompt, getenv("SANBOX_PROMPT"),
			strlen(getenv("SANBOX_PROMPT")));
	if (!prompt.len)
		usage();
	if (!h.model || !*h.model)
		h.model = "stub/scripted";
	if (!base || !*base)
		base = "http://127.0.0.1:4000/v1";
	snprintf(h.url, sizeof(h.url), "%.*s/chat/completions",
		 (int)(strlen(base) - (base[strlen(base) - 1] == '/')), base);
	h.key = getenv("OPENAI_API_KEY");
	if (h.key && !*h.key)
		h.key = NULL;
	if (events && *events) {
		h.events_fd =
		    open(events, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
		if (h.events_fd < 0)
			fprintf(stderr, "sanbox-harness: %s: %s (no events)\n", events,
				strerror(errno));
	}
	signal(SIGPIPE, SIG_IGN);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	signal(SIGHUP, on_signal);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	h.curl = curl_easy_init();
	h.tools = json_loads(TOOLS_JSON, 0, NULL);
	h.conv = getenv("SANBOX_CONVERSATION");
	if (h.conv && !*h.conv)
		h.conv = NULL;
	if (h.conv && (h.messages = conv_load(h.conv))) {
		/* a run resumed or forked: the conversation goes on */
		fprintf(stderr,
			"sanbox-harness: continuing a conversation of %zu messages\n",
			json_array_size(h.messages));
		json_array_append_new(
		    h.messages,
		    json_pack("{s:s, s:o}", "role", "user", "content",
			      text_json(prompt.data, prompt.len, (size_t)-1)));
	} else {
		h.messages =
		    json_pack("[{s:s, s:s}, {s:s, s:o}]", "role", "system", "content",
			      SYSTEM_PROMPT, "role", "user", "content",
			      text_json(prompt.data, prompt.len, (size_t)-1));
	}
	if (!h.curl || !h.tools || !h.messages)
		fprintf(stderr, "sanbox-harness: cannot initialise\n");
	else
		ret = run(&h);
	fflush(stdout);
	json_decref(h.messages);
	json_decref(h.tools);
	if (h.curl)
		curl_easy_cleanup(h.curl);
	curl_global_cleanup();
	free(prompt.data);
	if (h.events_fd >= 0)
		close(h.events_fd);
	return ret;
}
