/* common.c - helpers shared by the subcommands. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/home.h"
#include "engine/payload.h"
#include "engine/wire.h"

int cli_fail(int err, const char *fmt, ...)
{
	va_list ap;

	fputs("sanbox: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	switch (err) {
	case SB_ERR_NOTFOUND: return EXIT_NOTFOUND;
	case SB_ERR_UNAVAIL: return EXIT_UNAVAIL;
	}
	return 1;
}

int cli_usage(const char *cmd)
{
	const struct cli_cmd *c = cli_find(cmd);

	if (c)
		fputs(c->usage, stderr);
	return EXIT_USAGE;
}

int cli_wants_help(int argc, char **argv, const char *cmd)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--"))
			break;
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			fputs(cli_find(cmd)->usage, stdout);
			return 1;
		}
	}
	return 0;
}

void cli_req_begin(struct cli_req *r, const char *op, size_t nargs)
{
	msgpack_sbuffer_init(&r->buf);
	msgpack_packer_init(&r->pk, &r->buf, msgpack_sbuffer_write);
	msgpack_pack_map(&r->pk, nargs + 1 + (cli_token ? 1 : 0));
	sb_pack_kstr(&r->pk, "op", op);
	if (cli_token)
		sb_pack_kstr(&r->pk, "token", cli_token);
}

void cli_follow_init(struct sb_follow_opts *fo)
{
	fo->home = cli_remote ? cli_remote : cli_home;
	fo->ca_pem = cli_ca;
	fo->token = cli_token;
}

volatile sig_atomic_t cli_detached;

static void on_sigint(int sig)
{
	(void)sig;
	cli_detached = 1;
}

void cli_follow_live(struct sb_follow_opts *fo, const char *run)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sigint;
	sigaction(SIGINT, &sa, NULL);
	cli_follow_init(fo);
	fo->run = run;
	fo->follow = 1;
	fo->stop = &cli_detached;
}

int cli_call(sb_client *c, struct cli_req *r, struct sb_reply *rep)
{
	int rc = sb_request(c, &r->buf, 60000, rep);

	msgpack_sbuffer_destroy(&r->buf);
	return rc;
}

static int health(sb_client *c, int timeout_ms)
{
	struct cli_req r;
	struct sb_reply rep;
	int rc;

	cli_req_begin(&r, "health", 0);
	rc = sb_request(c, &r.buf, timeout_ms, &rep);
	msgpack_sbuffer_destroy(&r.buf);
	sb_reply_free(&rep);
	return rc;
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

/* Starts sanboxd for cli_home, detached, logging to sanboxd.log. */
static int spawn_daemon(void)
{
	char exe[PATH_MAX], logpath[PATH_MAX];
	pid_t pid;
	int status, rc;

	if ((rc = sb_home_init(cli_home)))
		return rc;
	daemon_path(exe, sizeof exe);
	sb_home_path(cli_home, "sanboxd.log", logpath, sizeof logpath);
	pid = fork();
	if (pid < 0)
		return sb_seterr(SB_ERR_IO, "fork: %s", strerror(errno));
	if (pid == 0) {
		if (fork() != 0)
			_exit(0);
		setsid();
		int in = open("/dev/null", O_RDONLY);
		int out = open(logpath, O_WRONLY | O_APPEND | O_CREAT, 0600);
		if (in < 0 || out < 0)
			_exit(127);
		dup2(in, 0);
		dup2(out, 1);
		dup2(out, 2);
		for (int fd = 3; fd < 1024; fd++)
			close(fd);
		execlp(exe, "sanboxd", "--home", cli_home, (char *)NULL);
		fprintf(stderr, "sanbox: cannot run %s: %s\n", exe, strerror(errno));
		_exit(127);
	}
	waitpid(pid, &status, 0);
	return SB_OK;
}

int cli_connect(int autostart, sb_client **out)
{
	sb_client *c = NULL;
	int rc;

	if (cli_remote) {
		/* a remote daemon is never started from here */
		if ((rc = sb_client_open(cli_remote, cli_ca, &c)) || (rc = health(c, 10000))) {
			sb_client_close(c);
			return sb_seterr(rc == SB_ERR_DENIED ? rc : SB_ERR_UNAVAIL, "%s: %s", cli_remote,
					 sb_errmsg(rc));
		}
		*out = c;
		return SB_OK;
	}
	if (sb_client_open(cli_home, NULL, &c) == SB_OK && health(c, 3000) == SB_OK) {
		*out = c;
		return SB_OK;
	}
	sb_client_close(c);
	c = NULL;
	if (!autostart)
		return sb_seterr(SB_ERR_UNAVAIL, "no daemon runs for %s", cli_home);
	if ((rc = spawn_daemon()))
		return rc;
	for (int i = 0; i < 200; i++) {
		usleep(50000);
		if (!c && sb_client_open(cli_home, NULL, &c))
			continue;
		if (health(c, 1000) == SB_OK) {
			*out = c;
			return SB_OK;
		}
	}
	sb_client_close(c);
	return sb_seterr(SB_ERR_UNAVAIL, "the daemon did not start; see %s/sanboxd.log", cli_home);
}

int cli_resolve(sb_client *c, const char *want, char run[SB_RUN_MAX])
{
	struct cli_req r;
	struct sb_reply rep;
	int rc;

	cli_req_begin(&r, "run.resolve", 1);
	sb_pack_kstr(&r.pk, "run", want);
	if ((rc = cli_call(c, &r, &rep)) == SB_OK &&
	    sb_map_str(&rep.map, "run", run, SB_RUN_MAX) <= 0)
		rc = sb_seterr(SB_ERR_PROTO, "malformed reply");
	sb_reply_free(&rep);
	return rc;
}

void cli_usd(uint64_t nusd, char *buf, size_t cap)
{
	snprintf(buf, cap, "$%llu.%04llu", (unsigned long long)(nusd / 1000000000u),
		 (unsigned long long)(nusd % 1000000000u / 100000u));
}

void cli_duration(double secs, char *buf, size_t cap)
{
	long s = secs < 0 ? 0 : (long)secs;

	if (s < 60)
		snprintf(buf, cap, "%lds", s);
	else if (s < 3600)
		snprintf(buf, cap, "%ldm%02lds", s / 60, s % 60);
	else
		snprintf(buf, cap, "%ldh%02ldm", s / 3600, s / 60 % 60);
}

void cli_print_json(json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;

	if (s) {
		puts(s);
		free(s);
	}
	json_decref(j);
}

/* Appends s to buf (cut at cap), without newlines. */
static void put_flat(char *buf, size_t cap, size_t *len, const char *s, size_t n)
{
	for (size_t i = 0; i < n && *len + 1 < cap; i++)
		buf[(*len)++] = s[i] == '\n' || s[i] == '\r' || s[i] == '\t' ? ' ' : s[i];
	buf[*len] = 0;
}

static void thousands(uint64_t v, char *buf, size_t cap)
{
	char tmp[32];
	int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v), o = 0;

	for (int i = 0; i < n && (size_t)o + 2 < cap; i++) {
		if (i && (n - i) % 3 == 0)
			buf[o++] = ',';
		buf[o++] = tmp[i];
	}
	buf[o] = 0;
}

void cli_event_summary(const struct sb_event *ev, const msgpack_object *p, char *buf, size_t cap)
{
	char a[256], b[256], c[64], d[64];
	const char *t = ev->type;
	size_t len = 0;

	buf[0] = 0;
	if (!strcmp(t, "agent.tool.completed") || !strcmp(t, "agent.tool.started")) {
		sb_map_str(p, "tool", a, sizeof a);
		sb_map_str(p, "args", b, sizeof b);
		snprintf(buf, cap, "%s %s", a, b);
		len = strlen(buf);
		if (t[11] == 'c') {
			snprintf(c, sizeof c, " (exit %lld, %llums)", (long long)sb_map_i64(p, "exit", 0),
				 (unsigned long long)sb_map_u64(p, "duration_ms", 0));
			put_flat(buf, cap, &len, c, strlen(c));
		}
	} else if (!strcmp(t, "agent.file.changed")) {
		sb_map_str(p, "kind", a, sizeof a);
		sb_map_str(p, "path", b, sizeof b);
		snprintf(buf, cap, "%s %s (%llu bytes)", a, b, (unsigned long long)sb_map_u64(p, "size", 0));
	} else if (!strcmp(t, "agent.usage.updated")) {
		thousands(sb_map_u64(p, "input_tokens", 0), c, sizeof c);
		thousands(sb_map_u64(p, "output_tokens", 0), d, sizeof d);
		cli_usd(sb_map_u64(p, "cost_nusd", 0), a, sizeof a);
		sb_map_str(p, "model", b, sizeof b);
		snprintf(buf, cap, "%s input · %s output · %s (%s)", c, d, a, b);
	} else if (!strcmp(t, "agent.message") && ev->source == SB_SRC_GATEWAY) {
		sb_map_str(p, "model", a, sizeof a);
		thousands(sb_map_u64(p, "input_tokens", 0), c, sizeof c);
		thousands(sb_map_u64(p, "output_tokens", 0), d, sizeof d);
		snprintf(buf, cap, "%s %s: HTTP %llu, %s input · %s output, %llums%s", a,
			 sb_map_get(p, "stream") && sb_map_get(p, "stream")->via.boolean ? "stream" : "call",
			 (unsigned long long)sb_map_u64(p, "status", 0), c, d,
			 (unsigned long long)sb_map_u64(p, "duration_ms", 0),
			 sb_map_get(p, "cut") ? " (cut: past the budget)" : "");
	} else if (!strcmp(t, "budget.exceeded")) {
		cli_usd(sb_map_u64(p, "spent_nusd", 0), a, sizeof a);
		cli_usd(sb_map_u64(p, "budget_nusd", 0), b, sizeof b);
		snprintf(buf, cap, "spent %s of %s", a, b);
	} else if (!strcmp(t, "secret.granted")) {
		sb_map_str(p, "name", a, sizeof a);
		sb_map_str(p, "scope", b, sizeof b);
		snprintf(buf, cap, "%s (scope %s)", a, b);
	} else if (!strcmp(t, "agent.output")) {
		const msgpack_object *data = sb_map_get(p, "data");
		sb_map_str(p, "stream", a, sizeof a);
		snprintf(buf, cap, "%s: ", a);
		len = strlen(buf);
		if (data && data->type == MSGPACK_OBJECT_STR) {
			size_t n = data->via.str.size;

			while (n && (data->via.str.ptr[n - 1] == '\n' || data->via.str.ptr[n - 1] == '\r'))
				n--; /* a line's end is not shown as a trailing space */
			put_flat(buf, cap, &len, data->via.str.ptr, n);
		}
	} else if (!strcmp(t, "run.created")) {
		sb_map_str(p, "name", a, sizeof a);
		sb_map_str(p, "template", b, sizeof b);
		snprintf(buf, cap, "%s (template %s)", a, b);
	} else if (!strcmp(t, "run.policy.resolved")) {
		sb_map_str(p, "network", a, sizeof a);
		cli_usd(sb_map_u64(p, "budget_nusd", 0), b, sizeof b);
		sb_map_str(p, "model", c, sizeof c);
		snprintf(buf, cap, "%llu cpu, %llu MiB, timeout %llus, network %s, model %s, budget %s",
			 (unsigned long long)sb_map_u64(p, "cpus", 0),
			 (unsigned long long)sb_map_u64(p, "memory_mib", 0),
			 (unsigned long long)sb_map_u64(p, "timeout_s", 0), a, c,
			 sb_map_u64(p, "budget_nusd", 0) ? b : "none");
	} else if (!strcmp(t, "run.exited")) {
		snprintf(buf, cap, "status %lld", (long long)sb_map_i64(p, "status", 0));
	} else if (!strcmp(t, "run.started")) {
		sb_map_str(p, "accel", a, sizeof a);
		snprintf(buf, cap, "accel %s", a);
	} else if (!strcmp(t, "harness.input.ready")) {
		thousands(sb_map_u64(p, "bytes", 0), c, sizeof c);
		snprintf(buf, cap, "%llu input files, %s bytes",
			 (unsigned long long)sb_map_u64(p, "files", 0), c);
	} else if (!strcmp(t, "agent.turn.started") || !strcmp(t, "agent.turn.completed")) {
		snprintf(buf, cap, "turn %llu", (unsigned long long)sb_map_u64(p, "turn", 0));
	} else if (!strcmp(t, "agent.message")) {
		sb_map_str(p, "role", a, sizeof a);
		snprintf(buf, cap, "%s", a);
		len = strlen(buf);
		if (sb_map_str(p, "text", b, sizeof b) > 0) {
			put_flat(buf, cap, &len, ": ", 2);
			put_flat(buf, cap, &len, b, strlen(b));
		}
	} else if (!strcmp(t, "snapshot.saved")) {
		sb_map_str(p, "snapshot", a, sizeof a);
		sb_map_str(p, "kind", b, sizeof b);
		snprintf(buf, cap, "%s (%s)", a, b);
	} else if (!strcmp(t, "run.resumed")) {
		sb_map_str(p, "from_run", a, sizeof a);
		snprintf(buf, cap, "from %s at offset %llu", a,
			 (unsigned long long)sb_map_u64(p, "from_offset", 0));
	} else if (!strcmp(t, "run.forked")) {
		sb_map_str(p, "from_run", a, sizeof a);
		sb_map_str(p, "snapshot", b, sizeof b);
		snprintf(buf, cap, "from %s at snapshot %s", a, b);
	} else if (!strcmp(t, "net.denied")) {
		sb_map_str(p, "dst", a, sizeof a);
		snprintf(buf, cap, "%s (%llu times)", a, (unsigned long long)sb_map_u64(p, "count", 0));
	} else if (sb_map_str(p, "reason", a, sizeof a) >= 0 ||
		   sb_map_str(p, "message", a, sizeof a) >= 0) {
		put_flat(buf, cap, &len, a, strlen(a));
	} else {
		json_t *j = sb_msgpack_to_json(p);
		char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
		if (s)
			put_flat(buf, cap, &len, s, strlen(s));
		free(s);
		json_decref(j);
	}
}

void cli_print_event(const struct sb_event *ev, const msgpack_object *payload, int json)
{
	char sum[1024], when[32];
	time_t secs = (time_t)(ev->ts_ns / 1000000000u);
	struct tm tm;

	if (json) {
		cli_print_json(sb_event_json(ev, payload));
		fflush(stdout);
		return;
	}
	localtime_r(&secs, &tm);
	strftime(when, sizeof when, "%H:%M:%S", &tm);
	cli_event_summary(ev, payload, sum, sizeof sum);
	printf("%s.%03u %6llu  %-22s %s\n", when, (unsigned)(ev->ts_ns / 1000000u % 1000u),
	       (unsigned long long)ev->offset, ev->type, sum);
	fflush(stdout);
}

int cli_parse_duration(const char *s, uint64_t *secs)
{
	char *end;
	double v = strtod(s, &end);
	double mul = 1;

	if (end == s || v < 0 || !isfinite(v))
		return sb_seterr(SB_ERR_INVAL, "'%s' is not a duration (e.g. 90s, 10m, 8h)", s);
	if (!strcmp(end, "") || !strcmp(end, "s"))
		mul = 1;
	else if (!strcmp(end, "m"))
		mul = 60;
	else if (!strcmp(end, "h"))
		mul = 3600;
	else if (!strcmp(end, "d"))
		mul = 86400;
	else
		return sb_seterr(SB_ERR_INVAL, "'%s' is not a duration (e.g. 90s, 10m, 8h)", s);
	*secs = (uint64_t)(v * mul + 0.5);
	if (*secs == 0)
		return sb_seterr(SB_ERR_INVAL, "duration '%s' must be positive", s);
	return SB_OK;
}

int cli_parse_size_mib(const char *s, uint64_t *mib)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || v <= 0 || !isfinite(v))
		return sb_seterr(SB_ERR_INVAL, "'%s' is not a size (e.g. 256M, 2G)", s);
	if (!strcmp(end, "") || !strcasecmp(end, "m") || !strcasecmp(end, "mib") || !strcasecmp(end, "mb"))
		*mib = (uint64_t)v;
	else if (!strcasecmp(end, "g") || !strcasecmp(end, "gib") || !strcasecmp(end, "gb"))
		*mib = (uint64_t)(v * 1024);
	else
		return sb_seterr(SB_ERR_INVAL, "'%s' is not a size (e.g. 256M, 2G)", s);
	if (*mib < 64)
		return sb_seterr(SB_ERR_INVAL, "memory %s is below the 64 MiB minimum", s);
	return SB_OK;
}

int cli_parse_usd(const char *s, uint64_t *nusd)
{
	char *end;
	double v = strtod(s[0] == '$' ? s + 1 : s, &end);

	if (end == s || *end || v <= 0 || !isfinite(v) || v > 1e6)
		return sb_seterr(SB_ERR_INVAL, "budget '%s' must be a positive amount of USD", s);
	*nusd = (uint64_t)llround(v * 1e9);
	return SB_OK;
}
