/* cmd_replay.c - sanbox replay: play a run's record again in the terminal,
 * with its original timing, its conversation and its file diffs.
 *
 * The events are read whole first (events after the call are not waited
 * for), then played: each event's line as attach prints it, a model call's
 * messages from its request and answer blobs, a changed file's diff from
 * its recorded contents (cli/replay.h). On a terminal (stdin and stdout)
 * keys steer it in raw mode (termios); the terminal is restored on every
 * way out, signals included.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/replay.h"
#include "engine/error.h"
#include "engine/log/blob.h"
#include "engine/payload.h"
#include "engine/text.h"
#include "engine/daemon/wire.h"

#define GAP_MAX_MS 2000 /* a longer wait between two events is cut to this */

/* One event of the record, its payload packed again (owned). */
struct rec {
	struct sb_event ev;
	char *payload;
};

/* The newest recorded content of a path. */
struct content {
	char *path;
	char key[SB_HASH_HEX];
};

enum mode { PLAY, PAUSED, TO_TURN, TO_FILE };
enum act { AGAIN, GO, QUIT };

struct play {
	sb_client *c;
	struct rec *v;
	size_t n, cap;
	struct content *files;
	size_t nfiles;
	uint64_t from;
	double speed; /* 0: --speed not given */
	int instant, json, wait, keys, width;
	enum mode mode, resume; /* resume: the mode a jump lands in */
	int oom;
};

static volatile sig_atomic_t quit_sig;
static struct termios saved_tio;
static int raw_on;

static void on_signal(int sig)
{
	quit_sig = sig;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- the terminal ---- */

static void term_restore(void)
{
	if (raw_on)
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_tio);
	raw_on = 0;
}

/* Keys one at a time without echo; output and signals (Ctrl-C) as they
 * were. */
static void term_raw(void)
{
	struct termios t;

	if (tcgetattr(STDIN_FILENO, &saved_tio))
		return;
	t = saved_tio;
	t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
	t.c_cc[VMIN] = 1;
	t.c_cc[VTIME] = 0;
	raw_on = !tcsetattr(STDIN_FILENO, TCSAFLUSH, &t);
}

static void signals_catch(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal; /* no SA_RESTART: poll returns EINTR */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

/* Waits up to ms (-1: no limit) for a key: returns it, 0 when the time
 * passed, -1 when a signal says to quit. Without keys it only waits. */
static int key_wait(const struct play *p, int ms)
{
	uint64_t end = now_ms() + (uint64_t)(ms < 0 ? 0 : ms);
	struct pollfd pf = {.fd = STDIN_FILENO, .events = POLLIN};
	unsigned char k;

	while (!quit_sig) {
		int left = ms < 0 ? -1 : (int)(end > now_ms() ? end - now_ms() : 0);
		int r = poll(&pf, p->keys ? 1 : 0, left);
		if (r == 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return 0;
		if (r > 0 && read(STDIN_FILENO, &k, 1) == 1)
			return k;
		if (r > 0) /* stdin closed: no more keys */
			return 0;
	}
	return -1;
}

/* ---- the record ---- */

static int collect_cb(void *ctx, const struct sb_event *ev, const msgpack_object *payload)
{
	struct play *p = ctx;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	struct rec *r;

	if (p->n == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 256;
		struct rec *v = realloc(p->v, cap * sizeof *v);
		if (!v)
			return SB_ERR_NOMEM;
		p->v = v;
		p->cap = cap;
	}
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	if (msgpack_pack_object(&pk, *payload)) {
		msgpack_sbuffer_destroy(&sb);
		return SB_ERR_NOMEM;
	}
	r = &p->v[p->n++];
	r->ev = *ev;
	r->payload = sb.data; /* the sbuffer's data, taken over */
	r->ev.payload = (const uint8_t *)sb.data;
	r->ev.payload_len = sb.size;
	return 0;
}

static void play_free(struct play *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->v[i].payload);
	free(p->v);
	for (size_t i = 0; i < p->nfiles; i++)
		free(p->files[i].path);
	free(p->files);
}

/* The recorded content key of path, or NULL. */
static struct content *content_of(struct play *p, const char *path)
{
	for (size_t i = 0; i < p->nfiles; i++)
		if (!strcmp(p->files[i].path, path))
			return &p->files[i];
	return NULL;
}

/* Keeps key ("" when unknown) as path's newest content. */
static void content_set(struct play *p, const char *path, const char *key)
{
	struct content *f = content_of(p, path), *v;

	if (!f) {
		if (!(v = realloc(p->files, (p->nfiles + 1) * sizeof *v)) ||
		    !(v[p->nfiles].path = strdup(path))) {
			if (v)
				p->files = v;
			p->oom = 1;
			return;
		}
		p->files = v;
		f = &v[p->nfiles++];
	}
	snprintf(f->key, sizeof f->key, "%s", key);
}

/* ---- what an event shows beyond its line ---- */

/* The diff of a file change from path's previous recorded content (NULL
 * when either is not in the record); keeps the new one. */
static char *change_diff(struct play *p, const msgpack_object *pl)
{
	char path[4096] = "", kind[16] = "", key[SB_HASH_HEX] = "";
	char *a = NULL, *b = NULL, *d = NULL;
	struct content *f;
	size_t alen, blen;

	sb_map_str(pl, "path", path, sizeof path);
	sb_map_str(pl, "kind", kind, sizeof kind);
	if (!path[0])
		return NULL;
	if (strcmp(kind, "deleted"))
		sb_map_str(pl, "content", key, sizeof key);
	if (strlen(key) != SB_HASH_HEX - 1)
		key[0] = 0;
	f = content_of(p, path);
	if (f && f->key[0] && key[0] && !cli_blob_read(p->c, f->key, &a, &alen) &&
	    !cli_blob_read(p->c, key, &b, &blen))
		d = cli_replay_diff(path, a, alen, b, blen);
	free(a);
	free(b);
	content_set(p, path, key);
	return d;
}

/* The conversation of a model call the gateway recorded (NULL: none). */
static json_t *call_items(struct play *p, const msgpack_object *pl)
{
	char api[16] = "", rk[SB_HASH_HEX] = "", ak[SB_HASH_HEX] = "";
	const msgpack_object *st = sb_map_get(pl, "stream");
	char *req = NULL, *resp = NULL;
	size_t reqlen = 0, resplen = 0;
	json_t *items;

	sb_map_str(pl, "api", api, sizeof api);
	sb_map_str(pl, "request", rk, sizeof rk);
	sb_map_str(pl, "response", ak, sizeof ak);
	if (rk[0] && cli_blob_read(p->c, rk, &req, &reqlen))
		req = NULL;
	if (ak[0] && cli_blob_read(p->c, ak, &resp, &resplen))
		resp = NULL;
	items = req || resp ? cli_replay_call(api, req, reqlen, resp, resplen,
					      st && st->type == MSGPACK_OBJECT_BOOLEAN &&
						  st->via.boolean)
			    : NULL;
	free(req);
	free(resp);
	return items;
}

/* Prints one line of detail, indented, escaped, cut to the terminal. */
static void detail_line(const struct play *p, const char *lead, const char *s, size_t len)
{
	char *esc = sb_text_escape_dup(s, len);
	char cell[8192];
	size_t n;

	if (!esc)
		return;
	cli_fit(esc, p->width ? p->width - (int)strlen(lead) : 0, cell, sizeof cell);
	n = strlen(cell);
	while (p->width && n && cell[n - 1] == ' ') /* cli_fit's padding */
		cell[--n] = 0;
	printf("%s%s\n", lead, cell);
	free(esc);
}

static void print_items(const struct play *p, const json_t *items)
{
	const json_t *it;
	char lead[64];
	size_t i;

	json_array_foreach(items, i, it)
	{
		const char *text = json_string_value(json_object_get(it, "text"));
		snprintf(lead, sizeof lead, "    %s %.20s: ",
			 strcmp(json_string_value(json_object_get(it, "side")), "answer")
			     ? ">"
			     : "<",
			 json_string_value(json_object_get(it, "role")));
		detail_line(p, lead, text, strlen(text));
	}
}

static void print_diff(const struct play *p, const char *d)
{
	for (const char *s = d, *nl; *s; s = nl + 1) {
		if (!(nl = strchr(s, '\n')))
			nl = s + strlen(s) - 1;
		detail_line(p, "    ", s, (size_t)(nl - s) + (*nl != '\n'));
	}
}

/* Prints event r and what it shows beyond its line. */
static void show(struct play *p, const struct rec *r)
{
	msgpack_unpacked u;
	json_t *items = NULL, *j;
	char *diff = NULL;

	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, r->payload, r->ev.payload_len, NULL) !=
	    MSGPACK_UNPACK_SUCCESS)
		goto out;
	if (!strcmp(r->ev.type, "agent.message") && r->ev.source == SB_SRC_GATEWAY)
		items = call_items(p, &u.data);
	else if (!strcmp(r->ev.type, "agent.file.changed"))
		diff = change_diff(p, &u.data);
	if (p->json) {
		if ((j = sb_event_json(&r->ev, &u.data))) {
			if (items)
				json_object_set(j, "conversation", items);
			if (diff && *diff)
				json_object_set_new(j, "diff", json_string(diff));
		}
		cli_print_json(j);
	} else {
		cli_print_event(&r->ev, &u.data, 0);
		print_items(p, items);
		if (diff)
			print_diff(p, diff);
	}
	fflush(stdout);
out:
	json_decref(items);
	free(diff);
	msgpack_unpacked_destroy(&u);
}

/* Keeps what a file change before --from recorded, showing nothing. */
static void track(struct play *p, const struct rec *r)
{
	msgpack_unpacked u;
	char path[4096] = "", key[SB_HASH_HEX] = "", kind[16] = "";

	if (strcmp(r->ev.type, "agent.file.changed"))
		return;
	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, r->payload, r->ev.payload_len, NULL) ==
		MSGPACK_UNPACK_SUCCESS &&
	    sb_map_str(&u.data, "path", path, sizeof path) > 0) {
		sb_map_str(&u.data, "kind", kind, sizeof kind);
		if (strcmp(kind, "deleted"))
			sb_map_str(&u.data, "content", key, sizeof key);
		content_set(p, path, strlen(key) == SB_HASH_HEX - 1 ? key : "");
	}
	msgpack_unpacked_destroy(&u);
}

/* ---- playing ---- */

static void say_keys(const char *what)
{
	fprintf(stderr,
		"sanbox: %s (space: play/pause, n: next event, t: next turn, "
		"f: next file change, q: quit)\n",
		what);
}

/* What key k does in p's mode: GO prints the pending event now. */
static enum act key_apply(struct play *p, int k)
{
	switch (k) {
	case 'q': return QUIT;
	case ' ':
		p->mode = p->mode == PAUSED ? PLAY : PAUSED;
		if (p->mode == PAUSED)
			say_keys("paused");
		return p->mode == PLAY ? GO : AGAIN;
	case 'n': p->mode = PAUSED; return GO;
	case 't':
	case 'f':
		p->resume = p->mode == PAUSED ? PAUSED : PLAY;
		p->mode = k == 't' ? TO_TURN : TO_FILE;
		return GO;
	default: return AGAIN;
	}
}

/* Waits the gap from prev to r as p plays (scaled, cut to GAP_MAX_MS,
 * saying so), taking keys. Returns GO or QUIT. */
static enum act gap_wait(struct play *p, const struct rec *prev, const struct rec *r)
{
	uint64_t gap = r->ev.ts_ns > prev->ev.ts_ns ? r->ev.ts_ns - prev->ev.ts_ns : 0;
	uint64_t ms = (uint64_t)((double)gap / 1e6 / (p->speed > 0 ? p->speed : 1));
	uint64_t end;
	char d[32];

	if (ms > GAP_MAX_MS) {
		cli_duration((double)ms / 1000, d, sizeof d);
		if (!p->json)
			printf("    (%s without events, shortened to %ds)\n", d,
			       GAP_MAX_MS / 1000);
		fflush(stdout);
		ms = GAP_MAX_MS;
	}
	end = now_ms() + ms;
	while (p->mode == PLAY) {
		uint64_t now = now_ms();
		int k = key_wait(p, now < end ? (int)(end - now) : 0);
		enum act a;
		if (k <= 0)
			return k < 0 ? QUIT : GO;
		if ((a = key_apply(p, k)) != AGAIN)
			return a;
	}
	return GO;
}

/* Holds r back as p's mode says (a gap, a pause, a jump). */
static enum act gate(struct play *p, const struct rec *prev, const struct rec *r)
{
	enum act a = GO;

	if (p->mode == PLAY && prev && p->wait && (a = gap_wait(p, prev, r)) == QUIT)
		return QUIT;
	while (p->mode == PAUSED) {
		int k = key_wait(p, -1);
		if (k < 0 || (a = key_apply(p, k)) == QUIT)
			return QUIT;
		if (a == GO)
			break;
	}
	if ((p->mode == TO_TURN && !strcmp(r->ev.type, "agent.turn.started")) ||
	    (p->mode == TO_FILE && !strcmp(r->ev.type, "agent.file.changed")))
		p->mode = p->resume;
	return GO;
}

/* Plays the record. Returns the exit code. */
static int play(struct play *p)
{
	const struct rec *prev = NULL;

	for (size_t i = 0; i < p->n && !p->oom && !quit_sig; i++) {
		const struct rec *r = &p->v[i];
		if (r->ev.offset < p->from) {
			track(p, r);
			continue;
		}
		if (gate(p, prev, r) == QUIT)
			break;
		show(p, r);
		prev = r;
	}
	if (p->oom)
		return cli_fail(SB_ERR_NOMEM, "out of memory");
	if (quit_sig)
		return quit_sig == SIGINT ? CLI_EXIT_DETACHED : 128 + quit_sig;
	return CLI_EXIT_OK;
}

static int replay_parse(int argc, char **argv, struct play *p)
{
	static const struct option opts[] = {
	    CLI_OPT_HELP,
	    {"from", required_argument, NULL, 'f'},
	    {"speed", required_argument, NULL, 's'},
	    {"instant", no_argument, NULL, 'i'},
	    {"json", no_argument, NULL, 'j'},
	    {NULL, 0, NULL, 0},
	};
	char *end;
	int ch, rc;

	while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("replay");
		case 'f':
			if ((rc = cli_parse_u64("--from", optarg, 0, UINT64_MAX,
						&p->from)))
				return rc;
			break;
		case 's':
			p->speed = strtod(optarg, &end);
			if (end == optarg || *end ||
			    !(p->speed >= 0.01 && p->speed <= 10000))
				return cli_fail_code(
				    CLI_EXIT_USAGE,
				    "--speed: '%s' is not a number from 0.01 to 10000",
				    optarg);
			break;
		case 'i': p->instant = 1; break;
		case 'j': p->json = 1; break;
		default: return cli_badopt("replay", argv, ch);
		}
	}
	if (argc - optind != 1)
		return cli_usage("replay");
	if (p->instant && p->speed > 0)
		return cli_fail_code(CLI_EXIT_USAGE,
				     "--speed and --instant go not together");
	return CLI_GO_ON;
}

/* Reads run's whole record into p. Errors: those of sb_follow. */
static int record_read(struct play *p, const char *run)
{
	struct sb_follow_opts fo = {0};
	int rc;

	cli_follow_init(&fo);
	fo.run = run;
	rc = sb_follow(p->c, &fo, collect_cb, p);
	return rc < 0 ? rc : SB_OK;
}

int cmd_replay(int argc, char **argv)
{
	struct play p = {.mode = PLAY};
	char run[SB_RUN_MAX];
	int tty, rc;

	if ((rc = replay_parse(argc, argv, &p)) != CLI_GO_ON)
		return rc;
	tty = isatty(STDOUT_FILENO);
	p.keys = tty && isatty(STDIN_FILENO);
	p.wait = !p.instant && (p.keys || p.speed > 0);
	p.width = tty ? cli_term_width() : 0;
	if ((rc = cli_connect(1, &p.c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if ((rc = cli_resolve(p.c, argv[optind], run)) || (rc = record_read(&p, run))) {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
		goto out;
	}
	signals_catch();
	if (p.keys) {
		term_raw();
		if (p.wait)
			fprintf(stderr, "sanbox: replaying %s at %gx, waits cut to %ds\n",
				run, p.speed > 0 ? p.speed : 1, GAP_MAX_MS / 1000);
		say_keys("keys");
	}
	rc = play(&p);
	term_restore();
out:
	play_free(&p);
	sb_client_close(p.c);
	return rc;
}
