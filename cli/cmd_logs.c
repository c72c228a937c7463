/* cmd_logs.c - sanbox logs: a run's stdout and stderr as lines. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"
#include "engine/text.h"

#define LINE_MAX_BYTES 65536 /* a longer line is shown in pieces this long */

/* A line of output, reassembled from the agent.output events it came in. */
struct line {
	int err; /* from stderr */
	uint64_t ts_ns;
	size_t len;
	char *text; /* not escaped */
};

struct logs {
	int json, follow, tail_set;
	uint64_t since_ns, resumed;
	uint64_t last;	     /* the newest offset read */
	struct line part[2]; /* the line each stream has begun */
	struct line *tail;   /* --tail: the last ntail lines, a ring */
	size_t ntail, ntailed, next;
};

/* Prints one line: escaped, stdout's to stdout and stderr's to stderr
 * (--json: {ts, stream, line} on stdout). */
static void line_print(const struct logs *l, const struct line *ln)
{
	char *esc;
	size_t cap = ln->len * 8 + 16;

	if (l->json) {
		json_t *j = json_pack("{s:I, s:s, s:s%}", "ts", (json_int_t)ln->ts_ns, "stream",
				      ln->err ? "stderr" : "stdout", "line", ln->text, ln->len);
		cli_print_json(j);
		return;
	}
	if (!(esc = malloc(cap)))
		return;
	sb_text_escape(ln->text, ln->len, esc, cap);
	fprintf(ln->err ? stderr : stdout, "%s\n", esc);
	fflush(ln->err ? stderr : stdout);
	free(esc);
}

/* A line is complete: printed now, or kept among the last ones (--tail). */
static void line_done(struct logs *l, struct line *ln)
{
	struct line *slot;

	if (!l->ntail) {
		line_print(l, ln);
		free(ln->text);
	} else {
		slot = &l->tail[l->next];
		free(slot->text);
		*slot = *ln;
		l->next = (l->next + 1) % l->ntail;
		l->ntailed += l->ntailed < l->ntail;
	}
	memset(ln, 0, sizeof *ln);
}

/* Prints the lines kept for --tail, oldest first, and keeps no more. */
static void tail_flush(struct logs *l)
{
	size_t first = (l->next + l->ntail - l->ntailed) % (l->ntail ? l->ntail : 1);

	for (size_t i = 0; i < l->ntailed; i++) {
		struct line *ln = &l->tail[(first + i) % l->ntail];
		line_print(l, ln);
		free(ln->text);
		ln->text = NULL;
	}
	l->ntailed = l->next = 0;
	l->ntail = 0; /* what follows is printed as it comes */
}

/* Adds len bytes of stream err's output to its line, ending each line
 * at a newline (or at LINE_MAX_BYTES). */
static void output_add(struct logs *l, int err, uint64_t ts, const char *p, size_t len)
{
	struct line *ln = &l->part[err];

	while (len) {
		const char *nl = memchr(p, '\n', len);
		size_t n = nl ? (size_t)(nl - p) : len, room = LINE_MAX_BYTES - ln->len;
		char *t;
		if (n > room)
			n = room;
		if (!(t = realloc(ln->text, ln->len + n + 1)))
			return;
		ln->text = t;
		memcpy(t + ln->len, p, n);
		ln->len += n;
		t[ln->len] = 0;
		if (!ln->ts_ns)
			ln->ts_ns = ts;
		ln->err = err;
		p += n;
		len -= n;
		if (nl && len && *p == '\n') {
			p++;
			len--;
			line_done(l, ln);
		} else if (ln->len == LINE_MAX_BYTES) {
			line_done(l, ln);
		}
	}
}

static int logs_cb(void *ctx, const struct sb_event *ev, const msgpack_object *p)
{
	struct logs *l = ctx;
	const msgpack_object *data = sb_map_get(p, "data");
	char stream[16] = "";

	l->last = ev->offset;
	if (!strcmp(ev->type, "run.stopped"))
		return l->follow && ev->offset > l->resumed;
	if (ev->ts_ns < l->since_ns || !data || data->type != MSGPACK_OBJECT_STR)
		return 0;
	sb_map_str(p, "stream", stream, sizeof stream);
	output_add(l, !strcmp(stream, "stderr"), ev->ts_ns, data->via.str.ptr, data->via.str.size);
	return 0;
}

/* Parses argv into l. Returns CLI_GO_ON, or the exit code (printed). */
static int logs_parse(int argc, char **argv, struct logs *l)
{
	static const struct option opts[] = {
		CLI_OPT_HELP,
		{"follow", no_argument, NULL, 'f'},
		{"since", required_argument, NULL, 's'},
		{"tail", required_argument, NULL, 't'},
		{"json", no_argument, NULL, 'j'},
		{NULL, 0, NULL, 0},
	};
	uint64_t v;
	int ch, rc;

	while ((ch = getopt_long(argc, argv, ":hf", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("logs");
		case 'f': l->follow = 1; break;
		case 's':
			if ((rc = cli_parse_since(optarg, &l->since_ns)))
				return rc;
			break;
		case 't':
			if ((rc = cli_parse_u64("--tail", optarg, 0, 1000000, &v)))
				return rc;
			l->ntail = (size_t)v;
			l->tail_set = 1;
			free(l->tail);
			if (!(l->tail = calloc(v ? v : 1, sizeof *l->tail)))
				return cli_fail(SB_ERR_NOMEM, "out of memory");
			break;
		case 'j': l->json = 1; break;
		default: return cli_badopt("logs", argv, ch);
		}
	}
	return argc - optind == 1 ? CLI_GO_ON : cli_usage("logs");
}

/* Prints the lines each stream began and did not end, then the lines
 * kept for --tail. */
static void logs_flush(struct logs *l)
{
	if (l->part[0].len)
		line_done(l, &l->part[0]);
	if (l->part[1].len)
		line_done(l, &l->part[1]);
	if (l->ntail)
		tail_flush(l);
}

/* Reads run's state: whether it is live, its last run.resumed and its
 * newest offset. Errors: those of the call. */
static int run_state(sb_client *c, const char *run, int *live, struct logs *l, uint64_t *end)
{
	struct sb_reply rep;
	int rc;

	if ((rc = cli_run_get(c, run, &rep, live)))
		return rc;
	l->resumed = sb_map_u64(sb_map_get(&rep.map, "run"), "resumed_offset", 0);
	*end = sb_map_u64(sb_map_get(&rep.map, "run"), "last_offset", 0);
	sb_reply_free(&rep);
	return SB_OK;
}

int cmd_logs(int argc, char **argv)
{
	static const char *const types[] = {"agent.output", "run.stopped", NULL};
	struct logs l = {0};
	struct sb_follow_opts fo = {0};
	char run[SB_RUN_MAX];
	uint64_t end = 0;
	sb_client *c = NULL;
	int live = 0, follow, rc;

	if ((rc = logs_parse(argc, argv, &l)) != CLI_GO_ON)
		goto out;
	follow = l.follow;
	if ((rc = cli_connect(1, &c)) || (rc = cli_resolve(c, argv[optind], run)) ||
	    (rc = run_state(c, run, &live, &l, &end))) {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
		goto out;
	}
	/* what it printed so far (none with --tail 0), then, with -f, what
	 * it prints until it ends */
	cli_follow_init(&fo);
	fo.run = run;
	fo.types = types;
	fo.from = l.tail_set && !l.ntail ? end + 1 : 0;
	l.follow = 0;
	if (!(l.tail_set && !l.ntail))
		rc = sb_follow(c, &fo, logs_cb, &l);
	if (rc >= 0 && live && follow) {
		l.follow = 1;
		cli_follow_live(&fo, run);
		fo.types = types;
		fo.from = (l.last > end ? l.last : end) + 1;
		if (l.ntail)
			tail_flush(&l);
		rc = sb_follow(c, &fo, logs_cb, &l);
	}
	logs_flush(&l);
	rc = rc < 0 ? cli_fail(rc, "%s", sb_errmsg(rc)) : CLI_EXIT_OK;
out:
	free(l.part[0].text);
	free(l.part[1].text);
	free(l.tail);
	sb_client_close(c);
	return rc;
}
