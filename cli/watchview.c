/* watchview.c - sanbox watch's terminal view (ncurses): the totals, the
 * rows as a table that fits the terminal, the selected run's latest events
 * and the keys. The follow (cli_watch_follow) runs on a thread of its own,
 * folds each event into the rows under w->mu and wakes this thread through
 * a pipe; ncurses is called from this thread only, and ncurses works out
 * what changed on the screen, so nothing flickers. Every text from a run,
 * its events or the daemon is escaped (cli_cell, cli_fit).
 */
#define NCURSES_WIDECHAR 1
#include <curses.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <wchar.h>
#include <wctype.h>

#include "cli/watch.h"
#include "engine/error.h"
#include "engine/log/summary.h"
#include "engine/payload.h"
#include "engine/proc.h"
#include "engine/daemon/wire.h"

#define DRAW_MS	   50	/* at most one draw per this while events come */
#define TICK_MS	   1000 /* a draw at least this often (elapsed times) */
#define MSG_MS	   6000 /* a message stays this long in the footer */
#define JOIN_MS	   2000 /* the follow's time to end after q */
#define FILTER_MAX 128

enum mode { M_TABLE, M_FILTER, M_CONFIRM, M_HELP };

struct view {
	struct cli_watch *w;
	sb_client *c;	      /* the view's own requests */
	int wake[2];	      /* a byte: something changed (the follow, a signal) */
	int dirty;	      /* under w->mu: the follow changed something */
	char sel[SB_RUN_MAX]; /* the selected run ("": the first shown) */
	size_t top;	      /* the first row shown, of those the filter passes */
	char filter[FILTER_MAX], filter_was[FILTER_MAX];
	enum mode mode;
	char msg[512]; /* the footer's message (not escaped), and when */
	uint64_t msg_ms;
	int colors;
};

static volatile sig_atomic_t quit_sig, resized;
static int wake_fd = -1; /* the signal handlers' end of the pipe */

static void on_signal(int sig)
{
	int e = errno;

	if (sig == SIGWINCH)
		resized = 1;
	else
		quit_sig = 1;
	if (wake_fd >= 0)
		(void)!write(wake_fd, "", 1);
	errno = e;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Sets the footer's message. */
static void say(struct view *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct view *v, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(v->msg, sizeof v->msg, fmt, ap);
	va_end(ap);
	v->msg_ms = now_ms();
}

/* ---- the follow's side (w->mu held) ---- */

static int view_event(struct cli_watch *w, const struct sb_event *ev,
		      const msgpack_object *payload, struct cli_wrow *changed)
{
	struct view *v = w->ctx;
	char line[CLI_WPANE_LINE];
	int wake = !ev || changed;

	if (ev && !strcmp(ev->run, w->pane.run)) {
		cli_event_line(ev, payload, 0, line, sizeof line);
		cli_wpane_put(&w->pane, ev->run, ev->offset, line);
		wake = 1;
	}
	if (wake && !v->dirty) {
		v->dirty = 1;
		(void)!write(v->wake[1], "", 1);
	}
	return 0;
}

static void *follow_main(void *ctx)
{
	struct cli_watch *w = ctx;
	int rc = cli_watch_follow(w);

	if (rc < 0) {
		pthread_mutex_lock(&w->mu);
		snprintf(w->lost, sizeof w->lost, "the follow ended: %s", sb_errmsg(rc));
		view_event(w, NULL, NULL, NULL);
		pthread_mutex_unlock(&w->mu);
	}
	return NULL;
}

/* ---- the rows shown ---- */

/* The indexes of the rows the filter passes, in a new array (the caller
 * frees it), their number in *n; NULL when there is none or no memory. */
static size_t *shown_rows(const struct view *v, size_t *n)
{
	const struct cli_wrows *rows = &v->w->rows;
	size_t *ix = rows->n ? malloc(rows->n * sizeof *ix) : NULL;

	*n = 0;
	for (size_t i = 0; ix && i < rows->n; i++)
		if (cli_wrow_match(&rows->v[i], v->filter))
			ix[(*n)++] = i;
	return ix;
}

/* The position of the selected run among ix (n), 0 when it is not shown
 * (then it becomes the first shown). */
static size_t selected(struct view *v, const size_t *ix, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(v->w->rows.v[ix[i]].rs.run, v->sel))
			return i;
	snprintf(v->sel, sizeof v->sel, "%s", n ? v->w->rows.v[ix[0]].rs.run : "");
	return 0;
}

/* ---- the table's columns ---- */

enum col {
	C_NAME, C_MODEL, C_STATUS, C_PROGRESS, C_COST, C_TOKENS, C_ELAPSED, C_DENY, C_SNAP,
	C_OFFSET, NCOLS
};

/* Each column's header and width (0: it takes a share of the room left;
 * COST grows from its width to COST_WIDEST, when there is room, to show
 * the budget). */
static const struct {
	const char *head;
	int width;
} cols[NCOLS] = {
	[C_NAME] = {"NAME", 0},		    [C_MODEL] = {"TEMPLATE/MODEL", 18},
	[C_STATUS] = {"STATUS", 9},	    [C_PROGRESS] = {"PROGRESS", 0},
	[C_COST] = {"COST", 14},	    [C_TOKENS] = {"TOKENS IN/OUT", 13},
	[C_ELAPSED] = {"ELAPSED", 7},	    [C_DENY] = {"DENY", 4},
	[C_SNAP] = {"SNAP", 4},		    [C_OFFSET] = {"OFFSET", 7},
};

/* The fixed columns in the order they get room, while the terminal has it. */
static const enum col by_need[] = {C_STATUS, C_ELAPSED, C_OFFSET, C_TOKENS,
				   C_SNAP,   C_DENY,    C_MODEL};

#define NAME_NARROWEST	   10 /* NAME's least width, */
#define NAME_KEPT	   16 /* ... what it keeps of its need before the fixed
			       * columns take room, */
#define NAME_WIDEST	   40 /* ... and its most */
#define PROGRESS_NARROWEST 16 /* "3 turns, 7 tools" */
#define COST_WIDEST	   24 /* "$0.0000/$1.0000" and a bar of 8 */

static int clamp(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* Sets w[c] to the width of each column shown in width terminal columns
 * (0: not shown), a space between two: NAME, PROGRESS and COST always, the
 * fixed columns in by_need's order while they fit; then what is left
 * makes NAME as wide as name_need (up to NAME_WIDEST), COST as wide as
 * COST_WIDEST, and PROGRESS the rest. */
static void layout(int width, int name_need, int w[NCOLS])
{
	int used, extra, more;

	memset(w, 0, NCOLS * sizeof w[0]);
	w[C_NAME] = clamp(name_need, NAME_NARROWEST, NAME_KEPT);
	w[C_PROGRESS] = PROGRESS_NARROWEST;
	w[C_COST] = cols[C_COST].width;
	used = w[C_NAME] + 1 + w[C_PROGRESS] + 1 + w[C_COST];
	if (width < used) { /* a terminal too narrow for a table: name and status */
		w[C_NAME] = width / 2;
		w[C_PROGRESS] = w[C_COST] = 0;
		w[C_STATUS] = clamp(width - w[C_NAME] - 1, 0, cols[C_STATUS].width);
		return;
	}
	for (size_t i = 0; i < sizeof by_need / sizeof by_need[0]; i++)
		if (used + 1 + cols[by_need[i]].width <= width) {
			w[by_need[i]] = cols[by_need[i]].width;
			used += 1 + w[by_need[i]];
		}
	extra = width - used;
	more = clamp(clamp(name_need, NAME_NARROWEST, NAME_WIDEST) - w[C_NAME], 0, extra);
	w[C_NAME] += more;
	extra -= more;
	more = clamp(COST_WIDEST - w[C_COST], 0, extra);
	w[C_COST] += more;
	w[C_PROGRESS] += extra - more;
}

/* A count in four or five columns: 999, 12.3k, 4.5M, 1.2G. */
static void count_text(uint64_t n, char *buf, size_t cap)
{
	if (n < 1000)
		snprintf(buf, cap, "%llu", (unsigned long long)n);
	else if (n < 1000000)
		snprintf(buf, cap, "%.1fk", n / 1e3);
	else if (n < 1000000000)
		snprintf(buf, cap, "%.1fM", n / 1e6);
	else
		snprintf(buf, cap, "%.1fG", n / 1e9);
}

/* A bar of width columns, filled as far as part is of whole. */
static void bar_text(uint64_t part, uint64_t whole, int width, char *buf, size_t cap)
{
	int fill = whole ? (int)((double)part * width / (double)whole) : 0;
	size_t at = 0;

	if (part && !fill)
		fill = 1; /* something was spent */
	for (int i = 0; i < width && at + 4 < cap; i++) {
		const char *s = i < fill ? "\u2588" : "\u2591"; /* full block, light shade */
		memcpy(buf + at, s, strlen(s));
		at += strlen(s);
	}
	buf[at] = 0;
}

/* The cost against the budget in width columns: "$0.0123/$1.0000" and a
 * bar, or when that does not fit "$0.0123" and a bar. */
static void cost_text(uint64_t cost, uint64_t budget, int width, char *buf, size_t cap)
{
	char c[32], b[32];
	int n;

	sb_usd_format(cost, c, sizeof c);
	sb_usd_format(budget, b, sizeof b);
	n = snprintf(buf, cap, "%s/%s ", c, b);
	if (n + 3 > width)
		n = snprintf(buf, cap, "%s ", c);
	if (n > 0 && (size_t)n < cap && width - n >= 3)
		bar_text(cost, budget, width - n, buf + n, cap - (size_t)n);
}

/* Writes column c of row r as text (not escaped) into buf. */
static void cell_text(const struct cli_wrow *r, enum col c, int width, char *buf, size_t cap)
{
	const struct sb_runstate *rs = &r->rs;
	char a[64], b[64];
	struct timespec now;

	switch (c) {
	case C_NAME: snprintf(buf, cap, "%s", rs->name[0] ? rs->name : rs->run); break;
	case C_MODEL:
		snprintf(buf, cap, "%s/%s", rs->template, rs->model[0] ? rs->model : "-");
		break;
	case C_STATUS: cli_status(rs, buf, cap); break;
	case C_PROGRESS: cli_progress(rs, buf, cap); break;
	case C_COST: cost_text(rs->cost_nusd, rs->budget_nusd, width, buf, cap); break;
	case C_TOKENS:
		count_text(r->in_tokens, a, sizeof a);
		count_text(r->out_tokens, b, sizeof b);
		snprintf(buf, cap, "%s/%s", a, b);
		break;
	case C_ELAPSED: cli_duration(cli_run_elapsed(rs), buf, cap); break;
	case C_DENY:
		snprintf(buf, cap, rs->net_denied ? "%llu" : "-",
			 (unsigned long long)rs->net_denied);
		break;
	case C_SNAP:
		clock_gettime(CLOCK_REALTIME, &now);
		if (r->snap_ns)
			cli_age((double)now.tv_sec - r->snap_ns / 1e9, buf, cap);
		else
			snprintf(buf, cap, "-");
		break;
	case C_OFFSET: snprintf(buf, cap, "%llu", (unsigned long long)rs->last_offset); break;
	case NCOLS: buf[0] = 0; break;
	}
}

/* ---- drawing ---- */

enum { P_LIVE = 1, P_WAIT, P_BAD, P_DIM };

/* The colour of a run's status. */
static int status_pair(const struct sb_runstate *rs)
{
	if (!strcmp(rs->status, "running"))
		return P_LIVE;
	if (sb_runstate_is_live(rs))
		return P_WAIT;
	if (!strcmp(rs->status, "exited") && rs->has_exit && rs->exit_status == 0)
		return 0;
	return !strcmp(rs->status, "stopped") ? P_DIM : P_BAD;
}

/* Puts escaped text esc at line y, fit to width columns. */
static void put_fit(int y, const char *esc, int width, attr_t attr)
{
	char cell[4096];

	cli_fit(esc, width, cell, sizeof cell);
	attron(attr);
	mvaddstr(y, 0, cell);
	attroff(attr);
}

/* Puts untrusted text s at line y, escaped and fit to width columns. */
static void put_text(int y, const char *s, int width, attr_t attr)
{
	char cell[4096];

	cli_cell(s, width, cell, sizeof cell);
	attron(attr);
	mvaddstr(y, 0, cell);
	attroff(attr);
}

/* Draws the cells of row r (NULL: the headers) at line y. */
static void draw_row(struct view *v, int y, const struct cli_wrow *r, const int w[NCOLS],
		     int sel)
{
	char text[1024], cell[2048];
	attr_t base = sel ? A_REVERSE : r ? A_NORMAL : A_BOLD;
	int x = 0;

	if (sel) { /* the whole line, gaps included */
		attron(A_REVERSE);
		mvhline(y, 0, ' ', COLS);
		attroff(A_REVERSE);
	}
	for (int c = 0; c < NCOLS; c++) {
		attr_t a = base;
		if (!w[c])
			continue;
		if (r)
			cell_text(r, (enum col)c, w[c], text, sizeof text);
		else
			snprintf(text, sizeof text, "%s", c == C_COST && w[c] >= COST_WIDEST
								  ? "COST/BUDGET"
								  : cols[c].head);
		cli_cell(text, w[c], cell, sizeof cell);
		if (r && v->colors && c == C_STATUS)
			a |= COLOR_PAIR(status_pair(&r->rs));
		attron(a);
		mvaddstr(y, x, cell);
		attroff(a);
		x += w[c] + 1;
	}
}

/* The two lines of totals: what is watched, then its runs and cost. */
static void draw_totals(struct view *v, int width)
{
	const struct cli_watch *w = v->w;
	struct cli_wtotals t;
	char a[512], b[4096], line[8192], cost[32], budget[32], bar[128], in[16], out[16];
	uint64_t whole;

	if (w->rows.scope == CLI_WSCOPE_GROUP) {
		cli_cell(w->rows.group, 0, a, sizeof a);
		cli_cell(w->goal, 0, b, sizeof b);
		snprintf(line, sizeof line, "sanbox watch  group %s%s%s", a, b[0] ? ": " : "", b);
	} else {
		snprintf(line, sizeof line, "sanbox watch  %s",
			 w->rows.scope == CLI_WSCOPE_ALL ? "all runs" : "runs");
	}
	if (w->lost[0]) {
		cli_cell(w->lost, 0, a, sizeof a);
		snprintf(line + strlen(line), sizeof line - strlen(line), "  [%s]", a);
	}
	put_fit(0, line, width, A_BOLD);
	cli_wrows_totals(&w->rows, &t);
	whole = w->group_budget ? w->group_budget : t.budget_nusd;
	sb_usd_format(t.cost_nusd, cost, sizeof cost);
	sb_usd_format(whole, budget, sizeof budget);
	bar_text(t.cost_nusd, whole, 20, bar, sizeof bar);
	count_text(t.in_tokens, in, sizeof in);
	count_text(t.out_tokens, out, sizeof out);
	snprintf(line, sizeof line,
		 "%zu run%s: %zu live, %zu queued, %zu done, %zu failed   cost %s/%s %s   "
		 "tokens %s/%s",
		 t.runs, t.runs == 1 ? "" : "s", t.live, t.queued, t.done, t.failed, cost, budget, bar, in, out);
	put_fit(1, line, width, A_NORMAL);
}

/* The selected run's latest events: a rule naming it at line y, then
 * the newest lines of the pane that fit in h - 1 lines. */
static void draw_pane(struct view *v, int y, int h, int width)
{
	const struct cli_wpane *p = &v->w->pane;
	const struct cli_wrow *r = cli_wrows_find(&v->w->rows, v->sel);
	const char *name = !r ? "" : r->rs.name[0] ? r->rs.name : r->rs.run;
	char esc[512], rule[8192];
	size_t n = p->n, first;
	int at, used;

	if (h < 1)
		return;
	cli_cell(name, 0, esc, sizeof esc);
	at = snprintf(rule, sizeof rule, "\u2500\u2500 %s%s events ", r ? esc : "no run",
		      r ? "'s" : "");
	used = 3 + (int)cli_text_cols(name) + (r ? 2 : 6) + 8;
	for (; used < width && at > 0 && (size_t)at + 4 < sizeof rule; used++)
		at += snprintf(rule + at, sizeof rule - (size_t)at, "\u2500");
	put_fit(y, rule, width, A_DIM);
	if (strcmp(p->run, v->sel))
		n = 0; /* another run's, until the pane is filled */
	first = n > (size_t)(h - 1) ? n - (size_t)(h - 1) : 0;
	for (size_t i = first; i < n; i++)
		put_fit(y + 1 + (int)(i - first), cli_wpane_line(p, i), width, A_NORMAL);
}

static const char keys_line[] = "\u2191\u2193/jk move  / filter  \u23ce attach  s stop  "
				"S snapshot  f fork  r resume  ? help  q quit";

/* The last line: the filter being typed, a question, a message or the
 * keys. */
static void draw_footer(struct view *v, int y, int width)
{
	char a[512], line[2048];

	if (v->mode == M_FILTER) {
		cli_cell(v->filter, 0, a, sizeof a);
		snprintf(line, sizeof line, "/%s\u258f  (Enter keeps it, Esc drops it)", a);
		put_fit(y, line, width, A_BOLD);
	} else if (v->msg[0] && (v->mode == M_CONFIRM || now_ms() - v->msg_ms < MSG_MS)) {
		put_text(y, v->msg, width, A_BOLD);
	} else if (v->filter[0]) {
		cli_cell(v->filter, 0, a, sizeof a);
		snprintf(line, sizeof line, "[/%s]  %s", a, keys_line);
		put_fit(y, line, width, A_DIM);
	} else {
		put_fit(y, keys_line, width, A_DIM);
	}
}

static const char *const help_lines[] = {
	"sanbox watch: keys",
	"",
	"  \u2191 \u2193  j k        move the selection",
	"  PgUp PgDn       a page up or down",
	"  Home End  g G   the first or the last run",
	"  /               filter the runs by a part of their name",
	"                  (Enter keeps it, Esc drops it)",
	"  Enter           attach: the run's events, live; Ctrl-C comes back here",
	"                  and the run goes on",
	"  s               stop the run (asks y/n)",
	"  S               take a snapshot of the run's disk",
	"  f               fork the run from its newest snapshot",
	"  r               resume a run that ended, from its last snapshot",
	"  q  Ctrl-C       quit; the runs go on",
	"  ?               this help",
	"",
	"Press any key to go back.",
};

/* Draws the keys' help over the whole screen. */
static void draw_help(int height, int width)
{
	for (size_t i = 0; i < sizeof help_lines / sizeof help_lines[0] && (int)i < height; i++)
		put_fit((int)i, help_lines[i], width, i ? A_NORMAL : A_BOLD);
}

/* Draws the header and the rows the filter passes (ix, n) from line 2, in
 * at most avail lines (the header's not counted), scrolled to show the
 * selected one. Returns the lines the rows took. */
static int draw_table(struct view *v, const size_t *ix, size_t n, int avail, int width)
{
	size_t at = selected(v, ix, n);
	int w[NCOLS], rows_h, need = 0;

	for (size_t i = 0; i < n; i++) {
		const struct sb_runstate *rs = &v->w->rows.v[ix[i]].rs;
		int c = (int)cli_text_cols(rs->name[0] ? rs->name : rs->run);
		need = c > need ? c : need;
	}
	layout(width, need, w);
	rows_h = clamp((int)n, 1, avail - avail / 3 > 1 ? avail - avail / 3 : 1);
	if (v->top + (size_t)rows_h > n) /* no empty lines below the last row */
		v->top = n > (size_t)rows_h ? n - (size_t)rows_h : 0;
	if (at < v->top)
		v->top = at;
	if (at >= v->top + (size_t)rows_h)
		v->top = at - (size_t)rows_h + 1;
	draw_row(v, 2, NULL, w, 0);
	for (int i = 0; i < rows_h && v->top + (size_t)i < n; i++)
		draw_row(v, 3 + i, &v->w->rows.v[ix[v->top + (size_t)i]], w,
			 v->top + (size_t)i == at);
	if (!n)
		put_text(3, v->filter[0] ? "(no run passes the filter)" : "(no runs)", width,
			 A_DIM);
	return rows_h;
}

/* Draws the whole screen (w->mu held): the totals, the table, the pane
 * and the last line, or the help; ncurses sends what changed. */
static void draw(struct view *v)
{
	int height = LINES, width = COLS, avail = height - 5, rows_h;
	size_t n = 0, *ix = shown_rows(v, &n);

	erase();
	if (v->mode == M_HELP) {
		draw_help(height, width);
	} else if (avail > 0) {
		draw_totals(v, width);
		rows_h = draw_table(v, ix, n, avail, width);
		draw_pane(v, 3 + rows_h, avail - rows_h + 1, width);
		draw_footer(v, height - 1, width - 1);
	} else {
		put_text(0, "(the terminal is too small)", width, A_NORMAL);
	}
	refresh();
	free(ix);
}

/* ---- the pane's past: the selected run's events before the view began ---- */

/* Puts run's events from offset from up to last into the pane (events.read,
 * page by page) and returns how many it read, or an error. */
static int pane_read(struct view *v, const char *run, uint64_t from, uint64_t last)
{
	const msgpack_object *list, *payload;
	char line[CLI_WPANE_LINE];
	struct sb_event ev;
	struct cli_req r;
	struct sb_reply rep;
	int count = 0, end = 0, rc;

	while (!end && from <= last) {
		cli_req_begin(&r, "events.read");
		sb_mapw_str(&r.m, "run", run);
		sb_mapw_u64(&r.m, "from", from);
		sb_mapw_u64(&r.m, "limit", 10000);
		if ((rc = cli_call(v->c, &r, &rep))) {
			sb_reply_free(&rep);
			return rc;
		}
		list = sb_map_get(&rep.map, "events");
		end = sb_map_get(&rep.map, "end") && sb_map_get(&rep.map, "end")->via.boolean;
		from = sb_map_u64(&rep.map, "next", last + 1);
		pthread_mutex_lock(&v->w->mu);
		for (uint32_t i = 0; list && list->type == MSGPACK_OBJECT_ARRAY &&
				     i < list->via.array.size; i++) {
			if (sb_wire_unpack_event(&list->via.array.ptr[i], &ev, &payload) ||
			    ev.offset > last)
				continue;
			cli_event_line(&ev, payload, 0, line, sizeof line);
			cli_wpane_put(&v->w->pane, run, ev.offset, line);
			count++;
		}
		pthread_mutex_unlock(&v->w->mu);
		sb_reply_free(&rep);
	}
	return count;
}

/* Makes the pane the selected run's and fills it with its latest events
 * up to its state's last offset (those after it come from the follow):
 * windows of the log before that offset, four times larger each time,
 * until one holds a paneful or the log's start. */
static void pane_fill(struct view *v)
{
	char run[SB_RUN_MAX];
	struct cli_wrow *r;
	uint64_t last, span = 256, from;
	int got;

	pthread_mutex_lock(&v->w->mu);
	snprintf(run, sizeof run, "%s", v->sel);
	cli_wpane_select(&v->w->pane, run);
	r = cli_wrows_find(&v->w->rows, run);
	last = r ? r->rs.last_offset : 0;
	pthread_mutex_unlock(&v->w->mu);
	while (last) {
		from = last >= span ? last - span + 1 : 1;
		if ((got = pane_read(v, run, from, last)) < 0) {
			say(v, "events of %s: %s", run, sb_errmsg(got));
			return;
		}
		if (got >= CLI_WPANE_LINES || from == 1)
			return;
		span *= 4;
	}
}

/* ---- actions ---- */

/* Sends op {run} for the run named name and says what came of it
 * ("WHAT NAME: the reply's key") or the error. Returns the error. */
static int act(struct view *v, const char *op, const char *run, const char *name,
	       const char *key, const char *what)
{
	struct cli_req r;
	struct sb_reply rep;
	char val[64] = "";
	int rc;

	cli_req_begin(&r, op);
	sb_mapw_str(&r.m, "run", run);
	if ((rc = cli_call(v->c, &r, &rep)) == SB_OK) {
		sb_map_str(&rep.map, key, val, sizeof val);
		say(v, "%s %s: %s", what, name, val);
	} else {
		say(v, "%s: %s", name, sb_errmsg(rc));
	}
	sb_reply_free(&rep);
	return rc;
}

/* f: forks run from its newest snapshot; the forks get rows (with the
 * runs named, those of a group or every run come with the follow). */
static void act_fork(struct view *v, const char *run, const char *name)
{
	const msgpack_object *runs;
	char id[SB_RUN_MAX] = "";
	struct cli_req r;
	struct sb_reply rep;
	int rc;

	cli_req_begin(&r, "run.fork");
	sb_mapw_str(&r.m, "run", run);
	if ((rc = cli_call(v->c, &r, &rep))) {
		say(v, "fork %s: %s", name, sb_errmsg(rc));
		sb_reply_free(&rep);
		return;
	}
	runs = sb_map_get(&rep.map, "runs");
	if (runs && runs->type == MSGPACK_OBJECT_ARRAY && runs->via.array.size &&
	    runs->via.array.ptr[0].type == MSGPACK_OBJECT_STR)
		snprintf(id, sizeof id, "%.*s", (int)runs->via.array.ptr[0].via.str.size,
			 runs->via.array.ptr[0].via.str.ptr);
	say(v, "forked %s: %s", name, id);
	if (id[0] && v->w->rows.scope == CLI_WSCOPE_RUNS)
		cli_watch_add_run(v->c, v->w, id);
	sb_reply_free(&rep);
}

/* Leaves the screen for `sanbox attach --exit-status RUN` (this program,
 * as a child on the terminal), then comes back: at once after Ctrl-C
 * (it detaches, exit 130; this process ignores the Ctrl-C meanwhile),
 * after Enter when the attach ended by itself. */
static void act_attach(struct view *v, const char *run, const char *name)
{
	char *argv[] = {"/proc/self/exe", "--home", cli_home, "attach", "--exit-status",
			(char *)run, NULL};
	struct sb_spawn sp = {.argv = argv, .in = STDIN_FILENO, .out = STDOUT_FILENO,
			      .err = STDERR_FILENO};
	struct sigaction ign = {.sa_handler = SIG_IGN}, was;
	char buf[64];
	pid_t pid;
	int st = 0, rc;

	def_prog_mode();
	endwin();
	cli_cell(name, 0, buf, sizeof buf);
	printf("sanbox watch: attached to %s (Ctrl-C comes back; the run goes on)\n", buf);
	fflush(stdout);
	sigaction(SIGINT, &ign, &was);
	if ((rc = sb_spawn(&sp, &pid)) == SB_OK)
		sb_proc_wait(pid, -1, &st);
	sigaction(SIGINT, &was, NULL);
	if (rc)
		say(v, "attach %s: %s", name, sb_errmsg(rc));
	else if (!WIFEXITED(st) || WEXITSTATUS(st) != CLI_EXIT_DETACHED) {
		printf("sanbox watch: the attach ended; press Enter to go back\n");
		fflush(stdout);
		while (!quit_sig && read(STDIN_FILENO, buf, 1) == 1 && buf[0] != '\n')
			;
	}
	reset_prog_mode();
	clearok(curscr, TRUE);
}

/* The selected row's id, name and whether it is live, copied (NULL: no
 * row is selected). */
static const char *sel_row(struct view *v, char *name, size_t cap, int *live)
{
	struct cli_wrow *r;

	pthread_mutex_lock(&v->w->mu);
	r = cli_wrows_find(&v->w->rows, v->sel);
	if (r) {
		snprintf(name, cap, "%s", r->rs.name[0] ? r->rs.name : r->rs.run);
		*live = sb_runstate_is_live(&r->rs);
	}
	pthread_mutex_unlock(&v->w->mu);
	return r ? v->sel : NULL;
}

/* A key that acts on the selected run: Enter, s, S, f, r. */
static void key_act(struct view *v, int key)
{
	char name[80], run[SB_RUN_MAX];
	int live = 0;

	if (!sel_row(v, name, sizeof name, &live))
		return;
	snprintf(run, sizeof run, "%s", v->sel);
	if (key == '\n') {
		act_attach(v, run, name);
	} else if (key == 's') {
		say(v, "stop %s (%s)? y/n", name, run);
		v->mode = M_CONFIRM;
	} else if (key == 'S') {
		act(v, "run.snapshot", run, name, "snapshot", "snapshot of");
	} else if (key == 'f') {
		act_fork(v, run, name);
	} else if (live) {
		say(v, "%s has not ended: f forks it", name);
	} else {
		act(v, "run.resume", run, name, "run", "resumed");
	}
}

/* ---- keys ---- */

/* Moves the selection by d rows among those shown (clamped). */
static void move_sel(struct view *v, long d)
{
	size_t n, at, *ix;
	long to;

	pthread_mutex_lock(&v->w->mu);
	ix = shown_rows(v, &n);
	if (n) {
		at = selected(v, ix, n);
		to = (long)at + d;
		to = to < 0 ? 0 : to >= (long)n ? (long)n - 1 : to;
		snprintf(v->sel, sizeof v->sel, "%s", v->w->rows.v[ix[to]].rs.run);
	}
	pthread_mutex_unlock(&v->w->mu);
	free(ix);
}

/* A key while the filter is typed: it applies as it changes. */
static void key_filter(struct view *v, int is_key, wint_t wc)
{
	char mb[MB_LEN_MAX];
	size_t len = strlen(v->filter), n;
	mbstate_t st;

	if (!is_key && (wc == '\n' || wc == '\r')) {
		v->mode = M_TABLE;
	} else if (!is_key && wc == 27) { /* Esc */
		memcpy(v->filter, v->filter_was, sizeof v->filter);
		v->mode = M_TABLE;
	} else if ((is_key && wc == KEY_BACKSPACE) || (!is_key && (wc == 127 || wc == 8))) {
		while (len > 0 && (v->filter[--len] & 0xc0) == 0x80)
			;
		v->filter[len] = 0;
	} else if (!is_key && iswprint(wc)) {
		memset(&st, 0, sizeof st);
		n = wcrtomb(mb, (wchar_t)wc, &st);
		if (n != (size_t)-1 && len + n < sizeof v->filter) {
			memcpy(v->filter + len, mb, n);
			v->filter[len + n] = 0;
		}
	}
	v->top = 0;
}

/* A key of the table. Returns 1 for q. */
static int key_table(struct view *v, int is_key, wint_t wc)
{
	long page = LINES > 10 ? LINES / 2 : 5;

	if (is_key) {
		switch (wc) {
		case KEY_UP: move_sel(v, -1); break;
		case KEY_DOWN: move_sel(v, 1); break;
		case KEY_PPAGE: move_sel(v, -page); break;
		case KEY_NPAGE: move_sel(v, page); break;
		case KEY_HOME: move_sel(v, -(1L << 30)); break;
		case KEY_END: move_sel(v, 1L << 30); break;
		case KEY_ENTER: key_act(v, '\n'); break;
		}
		return 0;
	}
	switch (wc) {
	case 'q': return 1;
	case 'k': move_sel(v, -1); break;
	case 'j': move_sel(v, 1); break;
	case 'g': move_sel(v, -(1L << 30)); break;
	case 'G': move_sel(v, 1L << 30); break;
	case '/':
		memcpy(v->filter_was, v->filter, sizeof v->filter);
		v->mode = M_FILTER;
		break;
	case '?': v->mode = M_HELP; break;
	case '\r':
	case '\n': key_act(v, '\n'); break;
	case 's':
	case 'S':
	case 'f':
	case 'r': key_act(v, (int)wc); break;
	}
	return 0;
}

/* Handles one key. Returns 1 to quit. */
static int key(struct view *v, int is_key, wint_t wc)
{
	char name[80];
	int live;

	if (v->mode != M_CONFIRM)
		v->msg[0] = 0; /* read */
	switch (v->mode) {
	case M_HELP: v->mode = M_TABLE; return 0;
	case M_FILTER: key_filter(v, is_key, wc); return 0;
	case M_CONFIRM:
		v->mode = M_TABLE;
		v->msg[0] = 0;
		if (!is_key && (wc == 'y' || wc == 'Y') && sel_row(v, name, sizeof name, &live))
			act(v, "run.stop", v->sel, name, "run", "stopping");
		return 0;
	case M_TABLE: break;
	}
	return key_table(v, is_key, wc);
}

/* Reads the keys waiting. Returns 1 to quit. */
static int keys(struct view *v)
{
	wint_t wc;
	int r;

	while ((r = get_wch(&wc)) != ERR)
		if (key(v, r == KEY_CODE_YES, wc))
			return 1;
	return 0;
}

/* ---- the loop ---- */

/* Installs the handlers of SIGINT, SIGTERM and SIGWINCH (before ncurses
 * starts, so that it keeps its own off them). */
static void signals_catch(int fd)
{
	struct sigaction sa;

	wake_fd = fd;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGWINCH, &sa, NULL);
}

/* Takes the terminal's new size. */
static void resize(void)
{
	struct winsize ws;

	if (!ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) && ws.ws_row && ws.ws_col)
		resize_term(ws.ws_row, ws.ws_col);
	clearok(curscr, TRUE);
}

/* Draws when something changed (at most every DRAW_MS) and every
 * TICK_MS, and waits for keys, events and signals, until q or a signal
 * says to quit. */
static void view_loop(struct view *v)
{
	struct pollfd fds[2] = {{.fd = STDIN_FILENO, .events = POLLIN},
				{.fd = v->wake[0], .events = POLLIN}};
	uint64_t drawn = 0, now;
	int redraw = 1, dirty, wait;
	char drain[64];

	while (!quit_sig) {
		if (resized) {
			resized = 0;
			resize();
			redraw = 1;
		}
		if (strcmp(v->w->pane.run, v->sel) && v->sel[0]) {
			pane_fill(v);
			redraw = 1;
		}
		pthread_mutex_lock(&v->w->mu);
		now = now_ms();
		dirty = v->dirty;
		if (redraw || (dirty && now - drawn >= DRAW_MS) || now - drawn >= TICK_MS) {
			v->dirty = 0;
			draw(v);
			drawn = now;
			redraw = dirty = 0;
		}
		pthread_mutex_unlock(&v->w->mu);
		wait = dirty ? DRAW_MS - (int)(now - drawn) : TICK_MS - (int)(now - drawn);
		if (poll(fds, 2, wait < 0 ? 0 : wait) < 0 && errno != EINTR)
			break;
		while (read(v->wake[0], drain, sizeof drain) > 0)
			;
		if (fds[0].revents & POLLIN) {
			redraw = 1;
			if (keys(v))
				break;
		}
		if (fds[0].revents & (POLLHUP | POLLERR))
			break; /* the terminal went away */
	}
}

/* Starts ncurses on the terminal. Returns its screen, or NULL when the
 * terminal cannot be driven ($TERM unknown). */
static SCREEN *screen_open(struct view *v)
{
	SCREEN *scr = newterm(NULL, stdout, stdin);

	if (!scr)
		return NULL;
	set_term(scr);
	cbreak();
	noecho();
	nonl();
	keypad(stdscr, TRUE);
	nodelay(stdscr, TRUE);
	set_escdelay(25);
	curs_set(0);
	if (has_colors() && start_color() == OK) {
		use_default_colors();
		init_pair(P_LIVE, COLOR_GREEN, -1);
		init_pair(P_WAIT, COLOR_YELLOW, -1);
		init_pair(P_BAD, COLOR_RED, -1);
		init_pair(P_DIM, COLOR_CYAN, -1);
		v->colors = 1;
	}
	return scr;
}

/* Starts the follow on a thread of its own, which never takes the
 * signals the view handles. Errors: pthread_create's. */
static int follow_start(struct cli_watch *w, pthread_t *th)
{
	sigset_t block, was;
	int rc;

	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGWINCH);
	pthread_sigmask(SIG_BLOCK, &block, &was);
	rc = pthread_create(th, NULL, follow_main, w);
	pthread_sigmask(SIG_SETMASK, &was, NULL);
	return rc;
}

/* Ends the follow: 1 when its thread ended within JOIN_MS (else it is
 * left to end with the process). */
static int follow_end(struct cli_watch *w, pthread_t th)
{
	struct timespec until;

	w->stop = 1;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += JOIN_MS / 1000;
	return pthread_timedjoin_np(th, NULL, &until) == 0;
}

int cli_watch_view(struct cli_watch *w, sb_client *c)
{
	static struct view v;
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	SCREEN *scr;
	pthread_t th;
	int rc;

	memset(&v, 0, sizeof v);
	v.w = w;
	v.c = c;
	if (pipe2(v.wake, O_NONBLOCK | O_CLOEXEC))
		return cli_fail(SB_ERR_IO, "pipe: %s", strerror(errno));
	/* what an attach started from the view talks to */
	if (cli_remote && (setenv("SANBOX_REMOTE", cli_remote, 1) ||
			   setenv("SANBOX_TOKEN", cli_token, 1) || setenv("SANBOX_CA", cli_ca, 1)))
		return cli_fail(SB_ERR_NOMEM, "out of memory");
	signals_catch(v.wake[1]);
	if (!(scr = screen_open(&v))) {
		wake_fd = -1;
		sigaction(SIGINT, &dfl, NULL);
		sigaction(SIGTERM, &dfl, NULL);
		sigaction(SIGWINCH, &dfl, NULL);
		close(v.wake[0]);
		close(v.wake[1]);
		return CLI_GO_ON;
	}
	w->on_event = view_event;
	w->ctx = &v;
	if ((rc = follow_start(w, &th)) == 0)
		view_loop(&v);
	endwin();
	delscreen(scr);
	if (rc == 0 && !follow_end(w, th))
		w->follow_left = 1;
	if (rc)
		return cli_fail(SB_ERR_IO, "cannot start the follow: %s", strerror(rc));
	return quit_sig ? CLI_EXIT_DETACHED : CLI_EXIT_OK;
}
