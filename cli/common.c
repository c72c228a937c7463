/* common.c - helpers shared by the subcommands. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <wchar.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/home.h"
#include "engine/log/summary.h"
#include "engine/payload.h"
#include "engine/text.h"
#include "engine/units.h"
#include "engine/daemon/wire.h"
#include "projections/views.h"

/* Prints "sanbox: <msg>" on stderr, the message escaped. */
static void vsay(const char *fmt, va_list ap)
{
	char msg[4096], out[8192];
	int n = vsnprintf(msg, sizeof msg, fmt, ap);

	if (n < 0)
		n = 0;
	sb_text_escape(msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1, out,
		       sizeof out);
	fprintf(stderr, "sanbox: %s\n", out);
}

int cli_fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsay(fmt, ap);
	va_end(ap);
	return cli_exit_for(err);
}

int cli_local_only(const char *what)
{
	if (!cli_remote)
		return CLI_EXIT_OK;
	return cli_fail_code(CLI_EXIT_USAGE,
			     "%s works on this host's state directory: not with --remote", what);
}

int cli_exit_for_request(int err)
{
	return err == SB_ERR_INVAL || err == SB_ERR_SCHEMA ? CLI_EXIT_USAGE : cli_exit_for(err);
}

int cli_fail_request(int err)
{
	return cli_fail_code(cli_exit_for_request(err), "%s", sb_errmsg(err));
}

int cli_fail_code(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsay(fmt, ap);
	va_end(ap);
	return code;
}

void cli_note(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsay(fmt, ap);
	va_end(ap);
}

int cli_usage(const char *cmd)
{
	const struct cli_cmd *c = cli_find(cmd);

	if (c)
		fputs(c->usage, stderr);
	return CLI_EXIT_USAGE;
}

int cli_help(const char *cmd)
{
	const struct cli_cmd *c = cli_find(cmd);

	if (c)
		fputs(c->usage, stdout);
	return CLI_EXIT_OK;
}

int cli_no_command(const char *name)
{
	const struct cli_cmd *cmds;
	struct cli_suggest s;
	char hint[96];
	size_t n;

	cmds = cli_commands(&n);
	cli_suggest_init(&s, name);
	for (size_t i = 0; i < n; i++)
		cli_suggest_add(&s, cmds[i].name, strlen(cmds[i].name));
	return cli_fail_code(CLI_EXIT_USAGE, "no command '%s'%s (see 'sanbox help')", name,
			     cli_suggest_hint(&s, hint, sizeof hint));
}

/* The long option of cmd's usage text nearest to name ("--jsno"), as a
 * hint ("; did you mean '--json'?") in buf, or "". */
static const char *option_hint(const char *cmd, const char *name, char *buf, size_t cap)
{
	const struct cli_cmd *c = cli_find(cmd);
	struct cli_suggest s;

	cli_suggest_init(&s, name);
	for (const char *p = c ? c->usage : ""; (p = strstr(p, "--"));) {
		size_t n = 2 + strspn(p + 2, "abcdefghijklmnopqrstuvwxyz-");
		if (n > 2)
			cli_suggest_add(&s, p, n);
		p += n;
	}
	cli_suggest_add(&s, "--help", 6);
	return cli_suggest_hint(&s, buf, cap);
}

int cli_badopt(const char *cmd, char **argv, int ch)
{
	const char *arg = optind > 0 ? argv[optind - 1] : "";
	char name[64], hint[96];

	if (!strncmp(arg, "--", 2))
		snprintf(name, sizeof name, "%.*s", (int)strcspn(arg, "="), arg);
	else if (optopt)
		snprintf(name, sizeof name, "-%c", optopt);
	else
		snprintf(name, sizeof name, "%s", arg);
	cli_note("%s: %s '%s'%s%s", cmd, ch == ':' ? "option" : "unknown option", name,
		 ch == ':' ? " needs a value" : "",
		 ch == ':' || strncmp(name, "--", 2) ? ""
						   : option_hint(cmd, name, hint, sizeof hint));
	return cli_usage(cmd);
}

int cli_parse_opts(int argc, char **argv, const char *cmd, int *json)
{
	static const struct option with_json[] = {
	    CLI_OPT_HELP,
	    {"json", no_argument, NULL, 'j'},
	    {NULL, 0, NULL, 0},
	};
	int ch;

	while ((ch = getopt_long(argc, argv, ":h", json ? with_json : with_json + 1,
				 NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help(cmd);
		case 'j': *json = 1; break;
		default: return cli_badopt(cmd, argv, ch);
		}
	}
	return CLI_GO_ON;
}

int cli_sub_run(int argc, char **argv, const char *cmd, const struct cli_sub *subs,
		size_t n)
{
	struct cli_suggest sg;
	char hint[96];
	int json = 0, rc;

	if ((rc = cli_parse_opts(argc, argv, cmd, &json)) != CLI_GO_ON)
		return rc;
	if (optind >= argc)
		return cli_usage(cmd);
	for (size_t i = 0; i < n; i++) {
		if (strcmp(subs[i].name, argv[optind]))
			continue;
		if (argc - optind - 1 < subs[i].nargs ||
		    argc - optind - 1 > subs[i].nargs + subs[i].more) {
			cli_note("%s %s takes %d operand%s%s", cmd, subs[i].name,
				 subs[i].nargs, subs[i].nargs == 1 ? "" : "s",
				 subs[i].more ? " or more" : "");
			return cli_usage(cmd);
		}
		if (json && !subs[i].json) {
			cli_note("%s %s prints no data: it takes no --json", cmd,
				 subs[i].name);
			return cli_usage(cmd);
		}
		return subs[i].fn(argv + optind + 1, json);
	}
	cli_suggest_init(&sg, argv[optind]);
	for (size_t i = 0; i < n; i++)
		cli_suggest_add(&sg, subs[i].name, strlen(subs[i].name));
	cli_note("%s: no subcommand '%s'%s", cmd, argv[optind],
		 cli_suggest_hint(&sg, hint, sizeof hint));
	return cli_usage(cmd);
}

int cli_parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max,
		  uint64_t *out)
{
	if (cli_parse_num(s, min, max, out))
		return cli_fail_code(CLI_EXIT_USAGE,
				     "%s takes a number from %llu to %llu, not '%s'", opt,
				     (unsigned long long)min, (unsigned long long)max, s);
	return CLI_EXIT_OK;
}

int cli_check_name(const char *opt, const char *s)
{
	int rc = sb_text_check(s, strlen(s), opt);

	return rc ? cli_fail_code(CLI_EXIT_USAGE, "%s", sb_errmsg(rc)) : CLI_EXIT_OK;
}

/* The first unit of escaped text s (len bytes, not 0): an escape
 * ("\\n", "\\xNN", "\\u{NNNN}"), never to be split, or one UTF-8
 * character. Returns its byte length and sets *cols to the columns it takes
 * on a terminal (wcwidth's; 1 for what it does not know). */
static size_t unit_len(const char *s, size_t len, int *cols)
{
	mbstate_t st;
	wchar_t wc;
	size_t n;

	if (s[0] == '\\' && len > 1) {
		n = s[1] == 'x' ? 4 : s[1] == 'u' ? strcspn(s, "}") + 1 : 2;
		n = n < len ? n : len;
		*cols = (int)n;
		return n;
	}
	memset(&st, 0, sizeof st);
	n = mbrtowc(&wc, s, len, &st);
	if (n == 0 || n > len) {
		*cols = 1;
		return 1;
	}
	*cols = wcwidth(wc) < 0 ? 1 : wcwidth(wc);
	return n;
}

/* The columns escaped text s (len bytes) takes on a terminal. */
static size_t text_cols(const char *s, size_t len)
{
	size_t cols = 0;
	int w;

	for (size_t i = 0; i < len; cols += (size_t)w)
		i += unit_len(s + i, len - i, &w);
	return cols;
}

int cli_term_width(void)
{
	struct winsize ws;
	const char *c = getenv("COLUMNS");

	if (!ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) && ws.ws_col > 0)
		return ws.ws_col;
	return c && atoi(c) > 20 ? atoi(c) : 80;
}

size_t cli_text_cols(const char *s)
{
	char esc[4096];

	sb_text_escape(s, strlen(s), esc, sizeof esc);
	return text_cols(esc, strlen(esc));
}

void cli_fit(const char *esc, int width, char *buf, size_t cap)
{
	static const char ellipsis[] = "\u2026";
	size_t len = strlen(esc), i = 0, out = 0, cols = 0, room, n;
	int cut, w;

	cut = width > 0 && text_cols(esc, len) > (size_t)width;
	room = width <= 0 ? (size_t)-1 : (size_t)width - (size_t)cut;
	while (i < len) {
		n = unit_len(esc + i, len - i, &w);
		if (cols + (size_t)w > room || out + n + sizeof ellipsis >= cap)
			break;
		memcpy(buf + out, esc + i, n);
		out += n;
		cols += (size_t)w;
		i += n;
	}
	if (cut && out + sizeof ellipsis <= cap) {
		memcpy(buf + out, ellipsis, sizeof ellipsis - 1);
		out += sizeof ellipsis - 1;
		cols++;
	}
	while (width > 0 && cols < (size_t)width && out + 1 < cap) {
		buf[out++] = ' ';
		cols++;
	}
	buf[out] = 0;
}

void cli_cell(const char *s, int width, char *buf, size_t cap)
{
	char esc[4096];

	sb_text_escape(s, strlen(s), esc, sizeof esc);
	cli_fit(esc, width, buf, cap);
}

void cli_req_begin(struct cli_req *r, const char *op)
{
	msgpack_packer pk;

	msgpack_sbuffer_init(&r->buf);
	msgpack_packer_init(&pk, &r->buf, msgpack_sbuffer_write);
	sb_mapw_begin(&r->m, &pk);
	sb_mapw_str(&r->m, "op", op);
	snprintf(r->op, sizeof r->op, "%s", op);
	if (cli_token)
		sb_mapw_str(&r->m, "token", cli_token);
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

/* A call the daemon takes its time over (a group started, a fork, a VM
 * made): on a terminal, a line on stderr that counts the seconds from the
 * first, cleared when the answer comes; nothing when stderr is not one. */
struct wait_line {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int done, shown;
	const char *op;
};

static void *wait_line_main(void *arg)
{
	struct wait_line *w = arg;
	struct timespec t0, t;
	int secs = 0;

	clock_gettime(CLOCK_REALTIME, &t0);
	pthread_mutex_lock(&w->mu);
	while (!w->done) {
		t = t0;
		t.tv_sec += ++secs;
		if (pthread_cond_timedwait(&w->cv, &w->mu, &t) == 0 || w->done)
			break;
		fprintf(stderr, "\r%s: waiting for sanboxd, %ds ", w->op, secs);
		w->shown = 1;
	}
	if (w->shown)
		fprintf(stderr, "\r%*s\r", (int)strlen(w->op) + 40, "");
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

int cli_call(sb_client *c, struct cli_req *r, struct sb_reply *rep)
{
	struct wait_line w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, r->op};
	pthread_t th;
	int line = 0, rc = sb_mapw_end(&r->m);

	memset(rep, 0, sizeof *rep);
	if (rc == SB_OK) {
		line = isatty(2) && pthread_create(&th, NULL, wait_line_main, &w) == 0;
		rc = sb_request(c, &r->buf, 60000, rep);
	}
	if (line) {
		pthread_mutex_lock(&w.mu);
		w.done = 1;
		pthread_cond_signal(&w.cv);
		pthread_mutex_unlock(&w.mu);
		pthread_join(th, NULL);
	}
	msgpack_sbuffer_destroy(&r->buf);
	return rc;
}

int cli_first_event(sb_client *c, const char *run, const char *type, struct sb_reply *rep,
		    const msgpack_object **ev)
{
	struct cli_req r;
	const msgpack_object *evs;
	int rc;

	*ev = NULL;
	cli_req_begin(&r, "events.read");
	sb_mapw_str(&r.m, "run", run);
	sb_mapw_u64(&r.m, "from", 1);
	sb_mapw_u64(&r.m, "limit", 1);
	msgpack_pack_array(sb_mapw_key(&r.m, "types"), 1);
	sb_pack_str(&r.m.pk, type);
	if ((rc = cli_call(c, &r, rep)))
		return rc;
	evs = sb_map_get(&rep->map, "events");
	if (evs && evs->type == MSGPACK_OBJECT_ARRAY && evs->via.array.size)
		*ev = &evs->via.array.ptr[0];
	return SB_OK;
}

int cli_call_ms(sb_client *c, struct cli_req *r, int timeout_ms, struct sb_reply *rep)
{
	int rc = sb_mapw_end(&r->m);

	memset(rep, 0, sizeof *rep);
	if (rc == SB_OK)
		rc = sb_request(c, &r->buf, timeout_ms, rep);
	msgpack_sbuffer_destroy(&r->buf);
	return rc;
}

int cli_resolve(sb_client *c, const char *want, char run[SB_RUN_MAX])
{
	struct cli_req r;
	struct sb_reply rep;
	int rc;

	cli_req_begin(&r, "run.resolve");
	sb_mapw_str(&r.m, "run", want);
	if ((rc = cli_call(c, &r, &rep)) == SB_OK &&
	    sb_map_str(&rep.map, "run", run, SB_RUN_MAX) <= 0)
		rc = sb_seterr(SB_ERR_PROTO, "malformed reply");
	sb_reply_free(&rep);
	return rc;
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

void cli_age(double secs, char *buf, size_t cap)
{
	long s = secs < 0 ? 0 : (long)secs;

	if (s < 60)
		snprintf(buf, cap, "%lds", s);
	else if (s < 3600)
		snprintf(buf, cap, "%ldm", s / 60);
	else if (s < 86400)
		snprintf(buf, cap, "%ldh", s / 3600);
	else
		snprintf(buf, cap, "%ldd", s / 86400);
}

double cli_run_elapsed(const struct sb_runstate *rs)
{
	struct timespec ts;
	double now;

	clock_gettime(CLOCK_REALTIME, &ts);
	now = rs->started_ns && !rs->ended_ns
		      ? (double)ts.tv_sec + ts.tv_nsec / 1e9 - rs->started_ns / 1e9
		      : 0;
	return rs->active_ns / 1e9 + (now > 0 ? now : 0);
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

void cli_print_reply(const msgpack_object *reply)
{
	json_t *j = sb_msgpack_to_json(reply);

	json_object_del(j, "ok");
	cli_print_json(j);
}

void cli_event_line(const struct sb_event *ev, const msgpack_object *payload, int flags,
		    char *buf, size_t cap)
{
	char sum[1024], type[4 * SB_TYPE_MAX], when[32], run[64] = "";
	time_t secs = (time_t)(ev->ts_ns / 1000000000u), now = time(NULL);
	struct tm tm, today;

	localtime_r(&secs, &tm);
	localtime_r(&now, &today);
	/* an event of another day than today says which */
	strftime(when, sizeof when,
		 tm.tm_yday == today.tm_yday && tm.tm_year == today.tm_year ? "%H:%M:%S"
									  : "%Y-%m-%d %H:%M:%S",
		 &tm);
	if (flags & CLI_EV_RUN)
		snprintf(run, sizeof run, "%-12.12s ", ev->run);
	cli_cell(ev->type, 0, type, sizeof type); /* padded below, never cut */
	sb_event_summary(ev, payload, sum, sizeof sum);
	snprintf(buf, cap, "%s.%03u %6llu  %s%-22s %s", when,
		 (unsigned)(ev->ts_ns / 1000000u % 1000u), (unsigned long long)ev->offset, run,
		 type, sum);
}

void cli_print_event(const struct sb_event *ev, const msgpack_object *payload, int flags)
{
	char line[1536];

	if (flags & CLI_EV_JSON) {
		cli_print_json(sb_event_json(ev, payload));
	} else {
		cli_event_line(ev, payload, flags, line, sizeof line);
		puts(line);
	}
	fflush(stdout);
}

/* Parses an absolute time, YYYY-MM-DD[THH:MM[:SS]] in local time or
 * with Z after it in UTC, into *ns. Returns 0, or -1 when s is none. */
static int when_parse(const char *s, uint64_t *ns)
{
	static const char *const forms[] = {"%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"};
	struct tm tm;
	const char *end = NULL;
	time_t t;

	for (size_t i = 0; i < sizeof forms / sizeof forms[0] && !end; i++) {
		memset(&tm, 0, sizeof tm);
		end = strptime(s, forms[i], &tm);
		if (end && *end && strcmp(end, "Z"))
			end = NULL;
	}
	if (!end)
		return -1;
	tm.tm_isdst = -1;
	t = *end == 'Z' ? timegm(&tm) : mktime(&tm);
	if (t < 0)
		return -1;
	*ns = (uint64_t)t * 1000000000u;
	return 0;
}

int cli_parse_when(const char *opt, const char *s, uint64_t *ns)
{
	struct timespec now;
	uint64_t secs;
	int rc;

	if (!when_parse(s, ns))
		return CLI_EXIT_OK;
	if ((rc = cli_parse_duration(s, &secs)))
		return cli_fail_code(CLI_EXIT_USAGE, "%s: %s (or a time: 2026-05-01T14:30[:00][Z])",
				     opt, sb_errmsg(rc));
	clock_gettime(CLOCK_REALTIME, &now);
	*ns = (uint64_t)now.tv_sec > secs ? ((uint64_t)now.tv_sec - secs) * 1000000000u : 0;
	return CLI_EXIT_OK;
}

int cli_parse_since(const char *s, uint64_t *since_ns)
{
	return cli_parse_when("--since", s, since_ns);
}

int cli_run_get(sb_client *c, const char *run, struct sb_reply *rep, int *live)
{
	struct cli_req r;
	char status[32] = "";
	int rc;

	cli_req_begin(&r, "run.get");
	sb_mapw_str(&r.m, "run", run);
	if ((rc = cli_call(c, &r, rep)))
		return rc;
	sb_map_str(sb_map_get(&rep->map, "run"), "status", status, sizeof status);
	*live = !strcmp(status, "created") || !strcmp(status, "queued") ||
		!strcmp(status, "running");
	return SB_OK;
}

void cli_progress(const struct sb_runstate *rs, char *buf, size_t cap)
{
	if (rs->progress_label[0])
		sb_progress_text(rs->progress_count, rs->progress_total, rs->progress_label,
				 strlen(rs->progress_label), buf, cap);
	else if (rs->turns || rs->tool_calls)
		snprintf(buf, cap, "%llu turn%s, %llu tool%s", (unsigned long long)rs->turns,
			 rs->turns == 1 ? "" : "s", (unsigned long long)rs->tool_calls,
			 rs->tool_calls == 1 ? "" : "s");
	else
		snprintf(buf, cap, "-");
}

void cli_size(unsigned long long b, char *buf, size_t cap)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)b;
	int u = 0;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

void cli_status(const struct sb_runstate *rs, char *buf, size_t cap)
{
	if (rs->removed)
		snprintf(buf, cap, "removed");
	else if (rs->has_exit && !strcmp(rs->status, "exited"))
		snprintf(buf, cap, "exited %lld", (long long)rs->exit_status);
	else
		snprintf(buf, cap, "%s", rs->status);
}
