/* test_api.c - the control API and live attach, against a real sanboxd.
 *
 * Each test starts build/<dir>/sanboxd (found beside this program) as a
 * child process in a fresh state directory, drives it through engine/bus.h
 * and engine/client.h, and stops it. Runs are seeded straight into the log
 * before the daemon starts, so the tests do not depend on run.create (which
 * resolves templates and boots microVMs). State directories live on
 * /dev/shm when there is one: there the daemon's fsyncs cost nothing, so the
 * tests measure the control plane and not the disk.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "engine/daemon/bus.h"
#include "engine/daemon/client.h"
#include "engine/home.h"
#include "engine/log/log.h"
#include "engine/daemon/wire.h"
#include "tests/unit/testutil.h"

#define RUN_A "a0a0a0a0a0a0"
#define RUN_B "b1b1b1b1b1b1"
#define CALL_MS 10000

struct daemon {
	char *home;
	pid_t pid;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* sanboxd lives beside this program's directory: BUILD/tests/.. */
static void daemon_exe(char *buf, size_t cap)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	char *slash;

	assert_true(n > 0);
	self[n] = 0;
	for (int i = 0; i < 2; i++) {
		slash = strrchr(self, '/');
		assert_non_null(slash);
		*slash = 0;
	}
	if (snprintf(buf, cap, "%s/sanboxd", self) >= (int)cap || access(buf, X_OK))
		fail_msg("%s not built", buf);
}

/* A short state directory (ipc socket paths are limited to ~100 bytes). */
static char *home_new(void)
{
	struct stat st;
	char *d = strdup(stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm/sbt-XXXXXX"
									      : "/tmp/sbt-XXXXXX");

	assert_non_null(d);
	assert_non_null(mkdtemp(d));
	return d;
}

static int health(const char *home, int timeout_ms, uint64_t *last_offset)
{
	msgpack_sbuffer sb;
	struct sb_reply rep;
	sb_client *c;
	int rc;

	if ((rc = sb_client_open(home, NULL, &c)))
		return rc;
	tu_json(&sb, "{'op':'health'}");
	rc = sb_request(c, &sb, timeout_ms, &rep);
	if (rc == SB_OK && last_offset)
		*last_offset = sb_map_u64(&rep.map, "last_offset", 0);
	sb_reply_free(&rep);
	msgpack_sbuffer_destroy(&sb);
	sb_client_close(c);
	return rc;
}

/* Starts sanboxd for d->home and waits until it answers health. */
static void daemon_start(struct daemon *d)
{
	char exe[PATH_MAX], logpath[PATH_MAX];
	int status;

	daemon_exe(exe, sizeof exe);
	snprintf(logpath, sizeof logpath, "%s.log", d->home);
	d->pid = fork();
	assert_true(d->pid >= 0);
	if (d->pid == 0) {
		int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl(exe, "sanboxd", "--home", d->home, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 600; i++) {
		if (health(d->home, 1000, NULL) == SB_OK)
			return;
		if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
			d->pid = 0;
			fail_msg("sanboxd exited (status %d); see %s", status, logpath);
		}
		sleep_ms(50);
	}
	fail_msg("sanboxd did not answer within 30 s; see %s", logpath);
}

/* Sends sig to the daemon and reaps it. */
static void daemon_kill(struct daemon *d, int sig)
{
	int status;

	if (d->pid <= 0)
		return;
	kill(d->pid, sig);
	waitpid(d->pid, &status, 0);
	d->pid = 0;
}

/* Appends events to the log of a home whose daemon is not running: type and
 * JSON payload pairs (single quotes for double quotes), NULL-terminated. */
static void seed(const char *home, const char *run, enum sb_source src, ...)
{
	char dir[PATH_MAX];
	const char *type;
	sb_log *log;
	va_list ap;

	assert_int_equal(sb_home_init(home), SB_OK);
	assert_int_equal(sb_home_path(home, "log", dir, sizeof dir), SB_OK);
	assert_int_equal(sb_log_open(dir, 0, &log), SB_OK);
	va_start(ap, src);
	while ((type = va_arg(ap, const char *))) {
		msgpack_sbuffer sb;
		struct sb_event ev;
		tu_json(&sb, va_arg(ap, const char *));
		assert_int_equal(sb_event_init(&ev, type, run, src, sb.data, sb.size), SB_OK);
		if (sb_log_append(log, &ev, 1))
			fail_msg("seed %s: %s", type, sb_errmsg(-1));
		msgpack_sbuffer_destroy(&sb);
	}
	va_end(ap);
	sb_log_close(log);
}

/* Seeds a finished run (created, then stopped). */
static void seed_run(const char *home, const char *run)
{
	seed(home, run, SB_SRC_HOST, "run.created", "{'name':'n','template':'shell','group':'g'}",
	     "run.stopped", "{'reason':'exited'}", NULL);
}

/* Appends n agent.turn.started events alternating between runs a and b,
 * in batches, to the log of a home whose daemon is not running. */
static void seed_turns(const char *home, const char *a, const char *b, size_t n)
{
	struct sb_event evs[500];
	msgpack_sbuffer sb;
	char dir[PATH_MAX];
	sb_log *log;

	tu_json(&sb, "{'turn':7}");
	assert_int_equal(sb_home_path(home, "log", dir, sizeof dir), SB_OK);
	assert_int_equal(sb_log_open(dir, SB_LOG_NOSYNC, &log), SB_OK);
	for (size_t done = 0; done < n; done += 500) {
		for (size_t i = 0; i < 500; i++)
			assert_int_equal(sb_event_init(&evs[i], "agent.turn.started", (done + i) % 2 ? b : a,
						       SB_SRC_HOST, sb.data, sb.size),
					 SB_OK);
		assert_int_equal(sb_log_append(log, evs, 500), SB_OK);
	}
	sb_log_close(log);
	msgpack_sbuffer_destroy(&sb);
}

static int setup_two_runs(void **state)
{
	struct daemon *d = calloc(1, sizeof *d);

	assert_non_null(d);
	d->home = home_new();
	seed_run(d->home, RUN_A);
	seed_run(d->home, RUN_B);
	daemon_start(d);
	*state = d;
	return 0;
}

static int setup_long_runs(void **state)
{
	struct daemon *d = calloc(1, sizeof *d);

	assert_non_null(d);
	d->home = home_new();
	seed_run(d->home, RUN_A);
	seed_run(d->home, RUN_B);
	seed_turns(d->home, RUN_A, RUN_B, 25000);
	daemon_start(d);
	*state = d;
	return 0;
}

static int teardown(void **state)
{
	struct daemon *d = *state;
	char logpath[PATH_MAX];

	daemon_kill(d, SIGTERM);
	snprintf(logpath, sizeof logpath, "%s.log", d->home);
	unlink(logpath);
	tu_rmrf(d->home);
	free(d);
	return 0;
}

static sb_client *client(const char *home)
{
	sb_client *c = NULL;

	assert_int_equal(sb_client_open(home, NULL, &c), SB_OK);
	return c;
}

/* Sends the request written as JSON text (printf format; single quotes for
 * double quotes) and parses the reply into rep (the caller frees it). */
static int call(sb_client *c, struct sb_reply *rep, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int call(sb_client *c, struct sb_reply *rep, const char *fmt, ...)
{
	char js[4096];
	msgpack_sbuffer sb;
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(js, sizeof js, fmt, ap);
	va_end(ap);
	tu_json(&sb, js);
	rc = sb_request(c, &sb, CALL_MS, rep);
	msgpack_sbuffer_destroy(&sb);
	return rc;
}

/* Sends raw bytes as a request: the reply's rc (the daemon's error code). */
static int call_raw(sb_client *c, const void *buf, size_t len, int timeout_ms)
{
	struct sb_reply rep;
	msgpack_sbuffer sb = {len, (char *)buf, len};
	int rc = sb_request(c, &sb, timeout_ms, &rep);

	sb_reply_free(&rep);
	return rc;
}

/* Appends operator.note {text, turn: i} to run; returns the offset. */
static int append_turn(sb_client *c, const char *run, uint64_t i, int timeout_ms, uint64_t *off)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	struct sb_reply rep;
	int rc;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 4);
	sb_pack_kstr(&pk, "op", "events.append");
	sb_pack_kstr(&pk, "run", run);
	sb_pack_kstr(&pk, "type", "operator.note");
	sb_pack_str(&pk, "payload");
	msgpack_pack_map(&pk, 2);
	sb_pack_kstr(&pk, "text", "a note");
	sb_pack_ku64(&pk, "turn", i);
	rc = sb_request(c, &sb, timeout_ms, &rep);
	if (rc == SB_OK)
		*off = sb_map_u64(&rep.map, "offset", 0);
	sb_reply_free(&rep);
	msgpack_sbuffer_destroy(&sb);
	return rc;
}

/* A growing array of offsets. */
struct offs {
	uint64_t *v;
	size_t n, cap;
};

static void offs_push(struct offs *o, uint64_t x)
{
	if (o->n == o->cap) {
		o->cap = o->cap ? 2 * o->cap : 1024;
		o->v = realloc(o->v, o->cap * sizeof *o->v);
		if (!o->v)
			abort();
	}
	o->v[o->n++] = x;
}

/* The offsets of run's events with offset >= from, read with plain
 * events.read requests (not through sb_follow). */
static void read_offsets(sb_client *c, const char *run, uint64_t from, struct offs *out)
{
	int end = 0;

	memset(out, 0, sizeof *out);
	while (!end) {
		struct sb_reply rep;
		const msgpack_object *evs;
		assert_int_equal(call(c, &rep, "{'op':'events.read','run':'%s','from':%llu,'limit':10000}",
				      run, (unsigned long long)from),
				 SB_OK);
		evs = sb_map_get(&rep.map, "events");
		assert_non_null(evs);
		assert_int_equal(evs->type, MSGPACK_OBJECT_ARRAY);
		for (uint32_t i = 0; i < evs->via.array.size; i++) {
			struct sb_event ev;
			const msgpack_object *p;
			assert_int_equal(sb_wire_unpack_event(&evs->via.array.ptr[i], &ev, &p), SB_OK);
			assert_string_equal(ev.run, run);
			assert_true(ev.offset >= from);
			offs_push(out, ev.offset);
		}
		end = sb_map_get(&rep.map, "end")->via.boolean;
		from = sb_map_u64(&rep.map, "next", from);
		sb_reply_free(&rep);
	}
}

/* --- the writer: appends to one or two runs as fast as the API allows --- */

struct writer {
	const char *home;
	const char *runs[2];     /* appends alternate between them (runs[1] may be NULL) */
	size_t n;                /* events to append */
	int timeout_ms;          /* per request */
	struct offs acked[2];    /* acknowledged offsets, per run */
	_Atomic size_t done;     /* events acknowledged so far */
	_Atomic uint64_t last;   /* newest acknowledged offset */
	double secs;             /* time taken */
	double end_at;           /* when the last append was acknowledged (now_s) */
	int rc;
	pthread_t th;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	sb_client *c;
	double t0 = now_s();

	if ((w->rc = sb_client_open(w->home, NULL, &c)))
		return NULL;
	for (size_t i = 0; i < w->n; i++) {
		int k = w->runs[1] ? (int)(i % 2) : 0;
		uint64_t off;
		if ((w->rc = append_turn(c, w->runs[k], i, w->timeout_ms, &off)))
			break;
		offs_push(&w->acked[k], off);
		atomic_store(&w->last, off);
		atomic_store(&w->done, i + 1);
	}
	w->end_at = now_s();
	w->secs = w->end_at - t0;
	sb_client_close(c);
	return NULL;
}

static void writer_start(struct writer *w, const char *home, const char *r0, const char *r1,
			 size_t n)
{
	memset(w, 0, sizeof *w);
	w->home = home;
	w->runs[0] = r0;
	w->runs[1] = r1;
	w->n = n;
	w->timeout_ms = CALL_MS;
	assert_int_equal(pthread_create(&w->th, NULL, writer_main, w), 0);
}

static void writer_join(struct writer *w)
{
	pthread_join(w->th, NULL);
	if (w->rc)
		fail_msg("writer: %s", sb_strerror(w->rc));
	assert_int_equal(atomic_load(&w->done), w->n);
}

static void writer_free(struct writer *w)
{
	free(w->acked[0].v);
	free(w->acked[1].v);
}

/* Waits until at least n events are acknowledged. */
static void writer_wait(struct writer *w, size_t n)
{
	for (int i = 0; i < 30000 && atomic_load(&w->done) < n && !w->rc; i++)
		sleep_ms(1);
	assert_true(atomic_load(&w->done) >= n);
}

/* --- followers: sb_follow in a thread, recording what they get --- */

struct follower {
	const char *home;
	const char *run;
	uint64_t from;
	unsigned sleep_us;          /* sleep in the callback (a slow subscriber) */
	_Atomic int *slow_while;    /* ... only while *slow_while is set (NULL: always) */
	size_t stop_after;          /* return 1 from the callback after this many (0: never) */
	volatile sig_atomic_t stop;
	struct offs got;
	uint64_t *seqs;             /* per-run sequence of each event, parallel to got */
	size_t seqs_cap;
	_Atomic uint64_t last;      /* newest offset received */
	double last_at;             /* when it arrived (now_s) */
	uint64_t gaps;
	int rc;
	pthread_t th;
};

static int follow_cb(void *ctx, const struct sb_event *ev, const msgpack_object *payload)
{
	struct follower *f = ctx;

	(void)payload;
	if (f->got.n == f->seqs_cap) {
		f->seqs_cap = f->seqs_cap ? 2 * f->seqs_cap : 1024;
		f->seqs = realloc(f->seqs, f->seqs_cap * sizeof *f->seqs);
		if (!f->seqs)
			abort();
	}
	f->seqs[f->got.n] = ev->seq;
	offs_push(&f->got, ev->offset);
	f->last_at = now_s();
	atomic_store(&f->last, ev->offset);
	if (f->sleep_us && (!f->slow_while || atomic_load(f->slow_while)))
		usleep(f->sleep_us);
	return f->stop_after && f->got.n >= f->stop_after;
}

static void *follower_main(void *arg)
{
	struct follower *f = arg;
	struct sb_follow_opts o = {0};
	sb_client *c;

	if ((f->rc = sb_client_open(f->home, NULL, &c)))
		return NULL;
	o.home = f->home;
	o.run = f->run;
	o.from = f->from;
	o.follow = 1;
	o.stop = &f->stop;
	f->rc = sb_follow(c, &o, follow_cb, f);
	f->gaps = o.gaps;
	sb_client_close(c);
	return NULL;
}

static void follower_start(struct follower *f, const char *home, const char *run, uint64_t from)
{
	f->home = home;
	f->run = run;
	f->from = from;
	assert_int_equal(pthread_create(&f->th, NULL, follower_main, f), 0);
}

/* Waits (at most secs) until the follower has received offset `until`,
 * then stops it. */
static void follower_finish(struct follower *f, uint64_t until, double secs)
{
	double t0 = now_s();

	while (atomic_load(&f->last) < until && now_s() - t0 < secs)
		sleep_ms(2);
	f->stop = 1;
	pthread_join(f->th, NULL);
	if (f->rc < 0)
		fail_msg("follower: %s", sb_strerror(f->rc));
	if (atomic_load(&f->last) < until)
		fail_msg("follower got offsets up to %llu, not %llu, within %.0f s",
			 (unsigned long long)atomic_load(&f->last), (unsigned long long)until, secs);
}

static void follower_free(struct follower *f)
{
	free(f->got.v);
	free(f->seqs);
}

/* The follower got exactly want, in order, once each, with per-run
 * sequence numbers that go up by one (when run is not ""). */
static void assert_got(const struct follower *f, const struct offs *want)
{
	size_t n = f->got.n < want->n ? f->got.n : want->n;

	for (size_t i = 0; i < n; i++)
		if (f->got.v[i] != want->v[i])
			fail_msg("event %zu: got offset %llu, want %llu", i,
				 (unsigned long long)f->got.v[i], (unsigned long long)want->v[i]);
	if (f->got.n != want->n)
		fail_msg("got %zu events, want %zu", f->got.n, want->n);
	for (size_t i = 1; f->run[0] && i < f->got.n; i++)
		assert_true(f->seqs[i] == f->seqs[i - 1] + 1);
}

/* The offsets of o that are >= from. */
static void offs_from(const struct offs *o, uint64_t from, struct offs *out)
{
	memset(out, 0, sizeof *out);
	for (size_t i = 0; i < o->n; i++)
		if (o->v[i] >= from)
			offs_push(out, o->v[i]);
}

/* A writer alternates between two runs, so a run's offsets are not
 * contiguous; followers start mid-stream, one on RUN_A from an offset in
 * the middle, one on the whole log. Each sees every offset from its start
 * to the last, once, in order. */
static void test_attach_under_load(void **state)
{
	struct daemon *d = *state;
	struct writer w;
	struct follower fa = {0}, fall = {0};
	struct offs want_a, want_all;
	sb_client *c = client(d->home);
	uint64_t from;

	writer_start(&w, d->home, RUN_A, RUN_B, 8000);
	writer_wait(&w, 2000);
	from = w.acked[0].v[400]; /* acknowledged, so already in the log */
	follower_start(&fa, d->home, RUN_A, from);
	follower_start(&fall, d->home, "", w.acked[1].v[500]);
	writer_join(&w);
	follower_finish(&fa, w.acked[0].v[w.acked[0].n - 1], 30);
	follower_finish(&fall, atomic_load(&w.last), 30);

	read_offsets(c, RUN_A, from, &want_a);
	assert_int_equal(want_a.n, w.acked[0].n - 400);
	assert_got(&fa, &want_a);
	/* the whole log from there: every offset, none skipped */
	memset(&want_all, 0, sizeof want_all);
	for (uint64_t o = w.acked[1].v[500]; o <= atomic_load(&w.last); o++)
		offs_push(&want_all, o);
	assert_got(&fall, &want_all);
	print_message("attach under load: %zu appends in %.2f s (%.0f/s); gaps %llu (run) %llu (all)\n",
		      w.n, w.secs, w.n / w.secs, (unsigned long long)fa.gaps,
		      (unsigned long long)fall.gaps);
	free(want_a.v);
	free(want_all.v);
	follower_free(&fa);
	follower_free(&fall);
	writer_free(&w);
	sb_client_close(c);
}

/* Eight subscribers on one run, started before and during the writes, all
 * see the same complete sequence. */
static void test_many_subscribers(void **state)
{
	struct daemon *d = *state;
	struct follower f[8];
	struct writer w;
	struct offs want;
	sb_client *c = client(d->home);

	memset(f, 0, sizeof f);
	for (int i = 0; i < 4; i++)
		follower_start(&f[i], d->home, RUN_A, 0);
	writer_start(&w, d->home, RUN_A, NULL, 5000);
	for (int i = 4; i < 8; i++) {
		writer_wait(&w, 1000 * (size_t)(i - 3));
		follower_start(&f[i], d->home, RUN_A, 0);
	}
	writer_join(&w);
	read_offsets(c, RUN_A, 0, &want);
	assert_int_equal(want.n, 2 + w.n); /* created, stopped, then the writer's */
	for (int i = 0; i < 8; i++) {
		follower_finish(&f[i], atomic_load(&w.last), 30);
		assert_got(&f[i], &want);
		follower_free(&f[i]);
	}
	free(want.v);
	writer_free(&w);
	sb_client_close(c);
}

/* Follow, stop after k events (the callback's value comes back), then
 * follow again from an offset X: exactly the offsets >= X, also when X is
 * an offset of another run. */
static void test_reattach_from_offset(void **state)
{
	struct daemon *d = *state;
	struct follower f1 = {0}, f2 = {0}, f3 = {0};
	struct offs all, want;
	struct writer w;
	sb_client *c = client(d->home);
	uint64_t x;

	writer_start(&w, d->home, RUN_A, RUN_B, 1000);
	writer_join(&w);
	f1.stop_after = 100;
	follower_start(&f1, d->home, RUN_A, 0);
	pthread_join(f1.th, NULL);
	assert_int_equal(f1.rc, 1);
	read_offsets(c, RUN_A, 0, &all);
	assert_int_equal(f1.got.n, 100);
	assert_memory_equal(f1.got.v, all.v, 100 * sizeof *all.v);

	/* reattach from an offset of RUN_A while the writer goes on */
	x = all.v[250];
	writer_free(&w);
	writer_start(&w, d->home, RUN_A, RUN_B, 1000);
	follower_start(&f2, d->home, RUN_A, x);
	/* and from an offset of RUN_B: RUN_A's next event comes first */
	follower_start(&f3, d->home, RUN_A, x + 1);
	writer_join(&w);
	follower_finish(&f2, w.acked[0].v[w.acked[0].n - 1], 30);
	follower_finish(&f3, w.acked[0].v[w.acked[0].n - 1], 30);
	free(all.v);
	read_offsets(c, RUN_A, 0, &all);
	offs_from(&all, x, &want);
	assert_true(want.v[0] == x);
	assert_got(&f2, &want);
	free(want.v);
	offs_from(&all, x + 1, &want);
	assert_true(want.v[0] == x + 2); /* x + 1 is RUN_B's */
	assert_got(&f3, &want);
	free(want.v);
	free(all.v);
	follower_free(&f1);
	follower_free(&f2);
	follower_free(&f3);
	writer_free(&w);
	sb_client_close(c);
}

struct collect {
	struct offs got;
	size_t turns;
};

static int collect_cb(void *ctx, const struct sb_event *ev, const msgpack_object *payload)
{
	struct collect *c = ctx;

	(void)payload;
	offs_push(&c->got, ev->offset);
	c->turns += !strcmp(ev->type, "agent.turn.started");
	return 0;
}

/* sb_follow without follow over run (or the whole log) from offset from. */
static void backlog(const char *home, const char *run, uint64_t from, const char *const *types,
		    struct collect *c)
{
	struct sb_follow_opts o = {0};
	sb_client *cl = client(home);

	memset(c, 0, sizeof *c);
	o.home = home;
	o.run = run;
	o.from = from;
	o.types = types;
	assert_int_equal(sb_follow(cl, &o, collect_cb, c), SB_OK);
	sb_client_close(cl);
}

/* A backlog longer than one events.read reply (10000 events) is delivered
 * whole: per run, from an offset, for the whole log, and filtered by type
 * (where the daemon skips most of what it reads). */
static void test_backlog_pages(void **state)
{
	static const char *const turns[] = {"agent.turn", NULL};
	static const char *const runs_only[] = {"run", NULL};
	struct daemon *d = *state;
	sb_client *c = client(d->home);
	struct collect got;
	struct offs want, from_mid;

	read_offsets(c, RUN_A, 0, &want);
	assert_int_equal(want.n, 12502); /* created, stopped, 12500 turns */
	backlog(d->home, RUN_A, 0, NULL, &got);
	assert_int_equal(got.got.n, want.n);
	assert_memory_equal(got.got.v, want.v, want.n * sizeof *want.v);
	free(got.got.v);

	offs_from(&want, want.v[7000], &from_mid);
	backlog(d->home, RUN_A, want.v[7000], NULL, &got);
	assert_int_equal(got.got.n, from_mid.n);
	assert_memory_equal(got.got.v, from_mid.v, from_mid.n * sizeof *from_mid.v);
	free(got.got.v);
	free(from_mid.v);

	backlog(d->home, "", 0, NULL, &got);
	assert_int_equal(got.got.n, 25004);
	for (size_t i = 0; i < got.got.n; i++)
		assert_true(got.got.v[i] == i + 1);
	free(got.got.v);

	backlog(d->home, RUN_A, 0, turns, &got);
	assert_int_equal(got.got.n, 12500);
	assert_int_equal(got.turns, 12500);
	free(got.got.v);

	backlog(d->home, "", 0, runs_only, &got);
	assert_int_equal(got.got.n, 4); /* created and stopped of each run */
	assert_int_equal(got.turns, 0);
	free(got.got.v);
	free(want.v);
	sb_client_close(c);
}

/* A subscriber that sleeps in its callback while tens of thousands of
 * events are appended loses live messages; it still ends with every event
 * once (the gaps are filled from the log). A fast subscriber at the same
 * time keeps up, and the writer is not held back by the slow one. */
static void test_slow_subscriber(void **state)
{
	struct daemon *d = *state;
	struct follower slow = {0}, fast = {0};
	struct writer w;
	struct offs want;
	_Atomic int writing = 1;
	sb_client *c = client(d->home);
	double base_rate, rate, fast_lag;

	/* the writer alone */
	writer_start(&w, d->home, RUN_B, NULL, 4000);
	writer_join(&w);
	base_rate = w.n / w.secs;
	writer_free(&w);

	slow.sleep_us = 1000;
	slow.slow_while = &writing;
	follower_start(&slow, d->home, RUN_A, 0);
	follower_start(&fast, d->home, RUN_A, 0);
	writer_start(&w, d->home, RUN_A, NULL, 30000);
	writer_join(&w);
	rate = w.n / w.secs;
	atomic_store(&writing, 0);
	follower_finish(&fast, atomic_load(&w.last), 30);
	fast_lag = fast.last_at - w.end_at;
	follower_finish(&slow, atomic_load(&w.last), 60);

	read_offsets(c, RUN_A, 0, &want);
	assert_int_equal(want.n, 2 + w.n);
	assert_got(&fast, &want);
	assert_got(&slow, &want);
	print_message("slow subscriber: writer %.0f/s alone, %.0f/s with a slow and a fast "
		      "subscriber; slow one had %llu gaps, fast one %llu\n",
		      base_rate, rate, (unsigned long long)slow.gaps, (unsigned long long)fast.gaps);
	print_message("fast subscriber got the last event %.1f ms after it was acknowledged\n",
		      fast_lag * 1e3);
	if (fast_lag > 1.0)
		fail_msg("the fast subscriber lagged %.2f s behind the writer", fast_lag);
	if (rate < base_rate / 5)
		fail_msg("writer slowed from %.0f/s to %.0f/s", base_rate, rate);
	free(want.v);
	follower_free(&slow);
	follower_free(&fast);
	writer_free(&w);
	sb_client_close(c);
}

/* A follower that starts at the end of a run while the run's next event is
 * appended at the same moment gets that event, whichever of the log read
 * and the live feed it comes through (no event may fall between them). */
static void test_attach_at_the_edge(void **state)
{
	struct daemon *d = *state;
	sb_client *c = client(d->home);
	int late = 0, slow = 0;

	for (int i = 0; i < 1000; i++) {
		struct follower f = {0};
		uint64_t last, off;
		double t0;
		assert_int_equal(health(d->home, 5000, &last), SB_OK);
		f.stop_after = 1;
		follower_start(&f, d->home, RUN_A, last + 1);
		if (i % 3)
			usleep((useconds_t)(i * 7 % 300));
		assert_int_equal(append_turn(c, RUN_A, (uint64_t)i, CALL_MS, &off), SB_OK);
		t0 = now_s();
		while (atomic_load(&f.last) < off && now_s() - t0 < 3)
			sleep_ms(1);
		late += atomic_load(&f.last) < off;
		slow += now_s() - t0 > 0.2;
		f.stop = 1;
		pthread_join(f.th, NULL);
		assert_true(f.got.n <= 1);
		follower_free(&f);
	}
	if (late)
		fail_msg("%d of 1000 followers missed an event appended as they started", late);
	print_message("attach at the edge: %d of 1000 got the event only after 200 ms\n", slow);
	sb_client_close(c);
}

struct churn {
	const char *home;
	int n, done, rc;
};

static void *churn_main(void *arg)
{
	struct churn *ch = arg;

	for (ch->done = 0; ch->done < ch->n; ch->done++) {
		sb_sub *s;
		void *msg;
		size_t len;
		if ((ch->rc = sb_sub_open(ch->home, NULL, ch->done % 2 ? RUN_A : "", &s)))
			return NULL;
		if (sb_sub_next(s, 1, &msg, &len) == SB_OK)
			sb_bus_free(msg);
		sb_sub_close(s);
	}
	return NULL;
}

/* Subscriptions opened and closed while the daemon publishes: none of the
 * closes may hang (nng 1.5.2 hangs closing a socket while a message
 * arrives on its ipc pipe; see bus.c). A hang cannot be interrupted, so the
 * test ends the program when it sees one. */
static void test_subscribe_churn(void **state)
{
	struct daemon *d = *state;
	struct churn ch = {d->home, 2000, 0, 0};
	struct writer w;
	struct timespec until;
	pthread_t th;

	writer_start(&w, d->home, RUN_A, RUN_B, 15000);
	writer_wait(&w, 500);
	assert_int_equal(pthread_create(&th, NULL, churn_main, &ch), 0);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 60;
	if (pthread_timedjoin_np(th, NULL, &until)) {
		printf("FAIL test_subscribe_churn: closing a subscription hung after %d of %d\n",
		       ch.done, ch.n);
		fflush(stdout);
		kill(d->pid, SIGKILL);
		_exit(1);
	}
	assert_int_equal(ch.rc, SB_OK);
	print_message("subscribe churn: %d subscriptions opened and closed during %zu appends\n",
		      ch.n, atomic_load(&w.done));
	writer_join(&w);
	writer_free(&w);
}

/* Sends the request written as JSON and returns the raw reply bytes (the
 * caller frees them with sb_bus_free). */
static void *call_bytes(sb_client *c, size_t *len, const char *js)
{
	msgpack_sbuffer sb;
	void *rep = NULL;

	tu_json(&sb, js);
	assert_int_equal(sb_client_call(c, sb.data, sb.size, CALL_MS, &rep, len), SB_OK);
	msgpack_sbuffer_destroy(&sb);
	return rep;
}

/* The type and "reason" of the last two events of run. */
static void last_two(sb_client *c, const char *run, char types[2][SB_TYPE_MAX],
		     char reasons[2][64])
{
	struct sb_reply rep;
	const msgpack_object *evs;
	uint32_t n;

	assert_int_equal(call(c, &rep, "{'op':'events.read','run':'%s','limit':10000}", run), SB_OK);
	evs = sb_map_get(&rep.map, "events");
	n = evs->via.array.size;
	assert_true(n >= 2);
	for (int i = 0; i < 2; i++) {
		struct sb_event ev;
		const msgpack_object *p;
		assert_int_equal(sb_wire_unpack_event(&evs->via.array.ptr[n - 2 + i], &ev, &p), SB_OK);
		memcpy(types[i], ev.type, SB_TYPE_MAX);
		reasons[i][0] = 0;
		sb_map_str(p, "reason", reasons[i], 64);
	}
	sb_reply_free(&rep);
}

static void assert_run_status(sb_client *c, const char *run, const char *status,
			      const char *reason)
{
	struct sb_reply rep;
	const msgpack_object *rs;
	char buf[128];

	assert_int_equal(call(c, &rep, "{'op':'run.get','run':'%s'}", run), SB_OK);
	rs = sb_map_get(&rep.map, "run");
	assert_non_null(rs);
	assert_true(sb_map_str(rs, "status", buf, sizeof buf) > 0);
	assert_string_equal(buf, status);
	if (reason) {
		assert_true(sb_map_str(rs, "reason", buf, sizeof buf) > 0);
		assert_string_equal(buf, reason);
	}
	sb_reply_free(&rep);
}

/* events.read with records: true gives, for the same arguments, the same
 * events as the event maps (the run's and the whole log's, with a type
 * filter and from an offset in the middle), each as its stored record,
 * which decodes and passes its checksum; a damaged one is refused. */
static void test_read_records(void **state)
{
	static const char *const reqs[] = {
		"{'op':'events.read','run':'" RUN_A "','from':%llu,'limit':700%s}",
		"{'op':'events.read','from':%llu,'limit':900%s}",
		"{'op':'events.read','from':%llu,'limit':50,'types':['run']%s}",
	};
	struct daemon *d = *state;
	sb_client *c = client(d->home);
	msgpack_zone zone;

	assert_true(msgpack_zone_init(&zone, 4096));
	for (size_t q = 0; q < sizeof reqs / sizeof reqs[0]; q++) {
		for (uint64_t from = 1; from < 30000; from += 9973) {
			struct sb_reply a, b;
			const msgpack_object *evs, *recs;
			assert_int_equal(call(c, &a, reqs[q], (unsigned long long)from, ""), SB_OK);
			assert_int_equal(call(c, &b, reqs[q], (unsigned long long)from, ",'records':true"),
					 SB_OK);
			evs = sb_map_get(&a.map, "events");
			recs = sb_map_get(&b.map, "records");
			assert_true(evs && recs && !sb_map_get(&b.map, "events"));
			assert_int_equal(recs->type, MSGPACK_OBJECT_ARRAY);
			assert_int_equal(evs->via.array.size, recs->via.array.size);
			assert_true(sb_map_u64(&a.map, "next", 0) == sb_map_u64(&b.map, "next", 1));
			assert_int_equal(sb_map_get(&a.map, "end")->via.boolean,
					 sb_map_get(&b.map, "end")->via.boolean);
			for (uint32_t i = 0; i < evs->via.array.size; i++) {
				struct sb_event e1, e2;
				const msgpack_object *p1, *r = &recs->via.array.ptr[i];
				msgpack_object p2;
				msgpack_sbuffer s1, s2;
				msgpack_packer pk1, pk2;

				msgpack_zone_clear(&zone);
				assert_int_equal(sb_wire_unpack_event(&evs->via.array.ptr[i], &e1, &p1), SB_OK);
				assert_int_equal(r->type, MSGPACK_OBJECT_BIN);
				assert_int_equal(sb_wire_unpack_record(r, &e2, &zone, &p2), SB_OK);
				assert_true(e1.offset == e2.offset && e1.seq == e2.seq && e1.ts_ns == e2.ts_ns);
				assert_true(e1.offset >= from);
				assert_string_equal(e1.type, e2.type);
				assert_string_equal(e1.run, e2.run);
				assert_int_equal(e1.source, e2.source);
				msgpack_sbuffer_init(&s1);
				msgpack_sbuffer_init(&s2);
				msgpack_packer_init(&pk1, &s1, msgpack_sbuffer_write);
				msgpack_packer_init(&pk2, &s2, msgpack_sbuffer_write);
				msgpack_pack_object(&pk1, *p1);
				msgpack_pack_object(&pk2, p2);
				assert_int_equal(s1.size, s2.size);
				assert_memory_equal(s1.data, s2.data, s1.size);
				assert_int_equal(s2.size, e2.payload_len);
				msgpack_sbuffer_destroy(&s1);
				msgpack_sbuffer_destroy(&s2);
			}
			/* a flipped byte in a record: the client refuses it */
			if (recs->via.array.size) {
				const msgpack_object *r = &recs->via.array.ptr[0];
				struct sb_event ev;
				msgpack_object p;
				((char *)r->via.bin.ptr)[r->via.bin.size / 2] ^= 0x10;
				assert_int_equal(sb_wire_unpack_record(r, &ev, &zone, &p), SB_ERR_PROTO);
				assert_int_equal(sb_wire_unpack_record(evs->via.array.ptr, &ev, &zone, &p),
						 SB_ERR_PROTO); /* not a bin */
			}
			sb_reply_free(&a);
			sb_reply_free(&b);
		}
	}
	msgpack_zone_destroy(&zone);
	sb_client_close(c);
}

/* Subscriptions of one process share its connection: each sees the
 * messages of its own topic only, in order, from when it was opened; one
 * to "" sees all; closing one leaves the others (also of the same topic)
 * as they were, and a later one starts with what comes after it. */
static void test_sub_topics(void **state)
{
	enum { N = 300 };
	struct daemon *d = *state;
	sb_client *c = client(d->home);
	sb_sub *sa1, *sa2, *sb1, *sall, *late = NULL;
	uint64_t offs[2 * N], off;
	msgpack_zone zone;

	assert_true(msgpack_zone_init(&zone, 4096));
	assert_int_equal(sb_sub_open(d->home, NULL, RUN_A, &sa1), SB_OK);
	assert_int_equal(sb_sub_open(d->home, NULL, RUN_A, &sa2), SB_OK);
	assert_int_equal(sb_sub_open(d->home, NULL, RUN_B, &sb1), SB_OK);
	assert_int_equal(sb_sub_open(d->home, NULL, "", &sall), SB_OK);
	/* the daemon attaches the connection in its own time: ping until the
	 * feed carries something (pings are skipped below, by offset) */
	for (int got = 0, i = 0; !got; i++) {
		void *msg;
		size_t len;
		assert_true(i < 300);
		assert_int_equal(append_turn(c, RUN_A, 0, CALL_MS, &off), SB_OK);
		if (sb_sub_next(sall, 100, &msg, &len) == SB_OK) {
			sb_bus_free(msg);
			got = 1;
		}
	}
	for (int i = 0; i < 2 * N; i++) {
		assert_int_equal(append_turn(c, i % 2 ? RUN_B : RUN_A, (uint64_t)i, CALL_MS, &offs[i]),
				 SB_OK);
		if (i == N)
			assert_int_equal(sb_sub_open(d->home, NULL, RUN_A, &late), SB_OK);
	}
	sb_sub_close(sa2);
	struct {
		sb_sub *s;
		int parity; /* 0: A only, 1: B only, 2: both */
		int first;  /* the first append it sees */
	} subs[] = {{sa1, 0, 0}, {sb1, 1, 1}, {sall, 2, 0}, {late, 0, N + 1}};
	/* An append is acknowledged when committed and published after: the
	 * late one may or may not get append N, acknowledged before it opened
	 * (a follower tells by offset). It gets every one after. */
	for (size_t k = 0; k < sizeof subs / sizeof subs[0]; k++) {
		uint64_t from = subs[k].s == late ? offs[N] + 1 : offs[0];

		for (int i = subs[k].first; i < 2 * N; i++) {
			void *msg;
			size_t len;
			msgpack_object map;
			const msgpack_object *p;
			struct sb_event ev;

			if (subs[k].parity != 2 && i % 2 != subs[k].parity)
				continue;
			do {
				assert_int_equal(sb_sub_next(subs[k].s, 5000, &msg, &len), SB_OK);
				msgpack_zone_clear(&zone);
				assert_int_equal(sb_payload_parse(msg, len, &zone, &map), SB_OK);
				assert_int_equal(sb_wire_unpack_event(&map, &ev, &p), SB_OK);
				if (ev.offset < from)
					sb_bus_free(msg); /* a ping, or append N */
			} while (ev.offset < from);
			assert_string_equal(ev.run, i % 2 ? RUN_B : RUN_A);
			assert_true(ev.offset == offs[i]);
			sb_bus_free(msg);
		}
		/* nothing more: not the other topic's, not twice */
		{
			void *msg;
			size_t len;
			assert_int_equal(sb_sub_next(subs[k].s, 100, &msg, &len), SB_ERR_TIMEOUT);
		}
		sb_sub_close(subs[k].s);
	}
	msgpack_zone_destroy(&zone);
	sb_client_close(c);
}

#define RUN_C "c2c2c2c2c2c2"
#define RUN_D "d3d3d3d3d3d3"
#define USAGE "{'model':'m1','input_tokens':1000,'output_tokens':50,'cost_nusd':1234567,'total_nusd':1234567}"

/* Kill -9 the daemon while a writer appends: after a restart every
 * acknowledged event is in the log, the projections equal a full rebuild
 * byte for byte, and runs left created or running are marked failed with
 * reason daemon-restart (run.failed, then run.stopped). */
static void test_sigkill_restart(void **state)
{
	static const char *const views[] = {
		"{'op':'runs.list'}",
		"{'op':'costs.get','scope':'run','id':'" RUN_A "'}",
		"{'op':'costs.get','scope':'group','id':'g'}",
		"{'op':'costs.get','scope':'model','id':'m1'}",
	};
	struct daemon *d = *state;
	struct writer w;
	struct offs got;
	char types[2][SB_TYPE_MAX], reasons[2][64];
	void *before[4], *after[4];
	size_t blen[4], alen[4];
	uint64_t last, last2;
	sb_client *c;

	/* usage from the gateway, so the cost views hold something */
	daemon_kill(d, SIGTERM);
	seed(d->home, RUN_A, SB_SRC_GATEWAY, "agent.usage.updated", USAGE, "agent.usage.updated",
	     USAGE, NULL);
	daemon_start(d);

	writer_start(&w, d->home, RUN_A, RUN_B, 1000000);
	w.timeout_ms = 2000;
	writer_wait(&w, 3000);
	daemon_kill(d, SIGKILL);
	pthread_join(w.th, NULL);
	assert_true(w.rc < 0); /* it saw the daemon go */

	/* runs the dead daemon "left" created and running */
	seed(d->home, RUN_C, SB_SRC_HOST, "run.created", "{'name':'c','template':'shell','group':'g'}",
	     NULL);
	seed(d->home, RUN_D, SB_SRC_HOST, "run.created", "{'name':'d','template':'shell','group':'g'}",
	     "run.started", "{'accel':'tcg'}", NULL);
	daemon_start(d);
	c = client(d->home);

	for (int k = 0; k < 2; k++) {
		const char *run = k ? RUN_B : RUN_A;
		size_t j = 0;
		read_offsets(c, run, 0, &got);
		for (size_t i = 0; i < got.n && j < w.acked[k].n; i++)
			if (got.v[i] == w.acked[k].v[j])
				j++;
		if (j != w.acked[k].n)
			fail_msg("run %s: acknowledged offset %llu lost after kill -9", run,
				 (unsigned long long)w.acked[k].v[j]);
		/* seeded events + acknowledged + at most the one in flight */
		assert_true(got.n - (k ? 2 : 4) - w.acked[k].n <= 1);
		free(got.v);
	}
	print_message("kill -9 after %zu acknowledged appends: all there\n", atomic_load(&w.done));

	assert_run_status(c, RUN_A, "exited", NULL);
	assert_run_status(c, RUN_C, "failed", "daemon-restart");
	assert_run_status(c, RUN_D, "failed", "daemon-restart");
	for (int k = 0; k < 2; k++) {
		last_two(c, k ? RUN_D : RUN_C, types, reasons);
		assert_string_equal(types[0], "run.failed");
		assert_string_equal(reasons[0], "daemon-restart");
		assert_string_equal(types[1], "run.stopped");
	}

	/* projections equal a rebuild from offset 0, byte for byte */
	for (int i = 0; i < 4; i++)
		before[i] = call_bytes(c, &blen[i], views[i]);
	free(call_bytes(c, &alen[0], "{'op':'admin.reproject'}"));
	for (int i = 0; i < 4; i++) {
		after[i] = call_bytes(c, &alen[i], views[i]);
		if (blen[i] != alen[i] || memcmp(before[i], after[i], blen[i]))
			fail_msg("%s differs after admin.reproject", views[i]);
		sb_bus_free(before[i]);
		sb_bus_free(after[i]);
	}
	{
		struct sb_reply rep;
		const msgpack_object *cost;
		assert_int_equal(call(c, &rep, "{'op':'costs.get','scope':'run','id':'%s'}", RUN_A), SB_OK);
		cost = sb_map_get(&rep.map, "cost");
		assert_true(sb_map_u64(cost, "cost_nusd", 0) == 2 * 1234567);
		assert_true(sb_map_u64(cost, "calls", 0) == 2);
		sb_reply_free(&rep);
	}

	/* a clean restart reconciles nothing more */
	assert_int_equal(health(d->home, 5000, &last), SB_OK);
	sb_client_close(c);
	daemon_kill(d, SIGTERM);
	daemon_start(d);
	assert_int_equal(health(d->home, 5000, &last2), SB_OK);
	assert_true(last == last2);
	writer_free(&w);
}

static void assert_healthy(const char *home)
{
	int rc = health(home, 5000, NULL);

	if (rc)
		fail_msg("health after bad requests: %s", sb_errmsg(rc));
}

/* Expects the request (JSON) to be refused with code want. */
static void refused(sb_client *c, int want, const char *js)
{
	struct sb_reply rep;
	int rc = call(c, &rep, "%s", js);

	if (rc != want)
		fail_msg("%s: got %d (%s), want %d", js, rc, rc ? sb_errmsg(rc) : "ok", want);
	assert_null(strchr(sb_errmsg(rc), '\n'));
	sb_reply_free(&rep);
}

/* Packs a raw request into sb (fresh) with the packer given to fn. */
static void refused_packed(sb_client *c, int want, void (*fn)(msgpack_packer *pk))
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	int rc;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	fn(&pk);
	rc = call_raw(c, sb.data, sb.size, CALL_MS);
	if (rc != want)
		fail_msg("packed request %zu bytes: got %d (%s), want %d", sb.size, rc,
			 rc ? sb_errmsg(rc) : "ok", want);
	msgpack_sbuffer_destroy(&sb);
}

static void pk_op_bin(msgpack_packer *pk)
{
	msgpack_pack_map(pk, 1);
	sb_pack_str(pk, "op");
	msgpack_pack_bin_with_body(pk, "health", 6);
}

static void pk_op_nul(msgpack_packer *pk)
{
	msgpack_pack_map(pk, 1);
	sb_pack_str(pk, "op");
	msgpack_pack_str_with_body(pk, "health\0x", 8);
}

static void pk_run_nul(msgpack_packer *pk)
{
	msgpack_pack_map(pk, 2);
	sb_pack_kstr(pk, "op", "run.get");
	sb_pack_str(pk, "run");
	msgpack_pack_str_with_body(pk, RUN_A "\0zz", 15);
}

/* a fork's name is checked as run.create's: no terminal escapes */
static void pk_fork_name_esc(msgpack_packer *pk)
{
	msgpack_pack_map(pk, 3);
	sb_pack_kstr(pk, "op", "run.fork");
	sb_pack_kstr(pk, "run", RUN_A);
	sb_pack_kstr(pk, "name", "a\x1b[2Jb");
}

static void pk_key_int(msgpack_packer *pk)
{
	msgpack_pack_map(pk, 2);
	msgpack_pack_int(pk, 1);
	sb_pack_str(pk, "health");
	sb_pack_kstr(pk, "x", "y");
}

/* map32 declaring 2^32-1 pairs with none there */
static void pk_huge_map(msgpack_packer *pk)
{
	static const char b[] = {(char)0xdf, (char)0xff, (char)0xff, (char)0xff, (char)0xff};

	msgpack_sbuffer_write(pk->data, b, sizeof b);
}

static void pk_deep(msgpack_packer *pk)
{
	msgpack_pack_map(pk, 2);
	sb_pack_kstr(pk, "op", "health");
	sb_pack_str(pk, "x");
	for (int i = 0; i < 100000; i++)
		msgpack_pack_array(pk, 1);
	msgpack_pack_nil(pk);
}

static void pk_extra(msgpack_packer *pk)
{
	msgpack_pack_map(pk, 1);
	sb_pack_kstr(pk, "op", "health");
	msgpack_pack_nil(pk); /* trailing bytes after the map */
}

/* Bad requests of every kind get an error reply (or, when too big, no
 * reply), and the daemon keeps answering. */
static void test_malformed(void **state)
{
	static const size_t sizes[] = {0, 1, 2, 3, 5, 8, 13, 31, 64, 100, 255, 256, 1000, 4096, 65536};
	struct daemon *d = *state;
	sb_client *c = client(d->home);
	uint64_t seed = 42;
	struct sb_reply rep;
	char *buf;
	size_t big = SB_REQ_MAX + 1;
	int rc;

	/* random bytes */
	buf = malloc(1 << 20);
	assert_non_null(buf);
	for (int i = 0; i < 400; i++) {
		size_t n = i < 300 ? sizes[i % 15] : tu_rand(&seed) % (1 << 20);
		for (size_t k = 0; k < n; k++)
			buf[k] = (char)tu_rand(&seed);
		if (i % 3 == 1 && n)
			buf[0] = (char)(0x80 | (tu_rand(&seed) & 0x0f)); /* a fixmap header */
		rc = call_raw(c, buf, n, CALL_MS);
		if (rc != SB_ERR_INVAL)
			fail_msg("random request %d (%zu bytes): got %d (%s)", i, n, rc, sb_errmsg(rc));
	}
	assert_healthy(d->home);
	/* a valid request with random bytes changed: any reply, but a reply */
	for (int i = 0; i < 300; i++) {
		msgpack_sbuffer sb;
		tu_json(&sb, "{'op':'events.read','run':'" RUN_A "','from':1,'limit':5,'types':['run']}");
		for (int k = 0; k < 1 + i % 4; k++)
			sb.data[tu_rand(&seed) % sb.size] = (char)tu_rand(&seed);
		rc = call_raw(c, sb.data, sb.size, CALL_MS);
		if (rc == SB_ERR_TIMEOUT || rc == SB_ERR_IO || rc == SB_ERR_PROTO)
			fail_msg("mutated request %d: %s", i, sb_errmsg(rc));
		msgpack_sbuffer_destroy(&sb);
	}
	assert_healthy(d->home);

	/* valid msgpack that is not a map */
	refused(c, SB_ERR_INVAL, "[1,2,3]");
	refused(c, SB_ERR_INVAL, "'health'");
	refused(c, SB_ERR_INVAL, "42");
	refused(c, SB_ERR_INVAL, "null");
	refused(c, SB_ERR_INVAL, "['op','health']");
	/* no op, or an op that is not a string */
	refused(c, SB_ERR_INVAL, "{}");
	refused(c, SB_ERR_INVAL, "{'OP':'health'}");
	refused(c, SB_ERR_INVAL, "{'op':5}");
	refused(c, SB_ERR_INVAL, "{'op':null}");
	refused(c, SB_ERR_INVAL, "{'op':['health']}");
	refused(c, SB_ERR_INVAL, "{'op':{'health':1}}");
	refused(c, SB_ERR_INVAL, "{'op':true}");
	refused_packed(c, SB_ERR_INVAL, pk_op_bin);
	refused_packed(c, SB_ERR_INVAL, pk_op_nul);
	refused_packed(c, SB_ERR_INVAL, pk_key_int);
	refused_packed(c, SB_ERR_INVAL, pk_huge_map);
	refused_packed(c, SB_ERR_INVAL, pk_deep);
	refused_packed(c, SB_ERR_INVAL, pk_extra);
	/* unknown ops */
	refused(c, SB_ERR_INVAL, "{'op':'nope'}");
	refused(c, SB_ERR_INVAL, "{'op':''}");
	refused(c, SB_ERR_INVAL, "{'op':'healthhealthhealthhealthhealthhealthhealth'}");
	/* arguments of the wrong type */
	refused(c, SB_ERR_INVAL, "{'op':'events.read','run':5}");
	refused(c, SB_ERR_INVAL, "{'op':'events.read','run':'" RUN_A "','from':'5'}");
	refused(c, SB_ERR_INVAL, "{'op':'events.read','run':'" RUN_A "','from':-1}");
	refused(c, SB_ERR_INVAL, "{'op':'events.read','run':'" RUN_A "','limit':'all'}");
	refused(c, SB_ERR_INVAL, "{'op':'events.read','run':'" RUN_A "','types':'run'}");
	refused(c, SB_ERR_INVAL, "{'op':'events.read','run':'" RUN_A "','types':[1]}");
	refused(c, SB_ERR_INVAL, "{'op':'events.read','run':'" RUN_A "','records':1}");
	refused(c, SB_ERR_INVAL, "{'op':'run.get','run':['" RUN_A "']}");
	refused(c, SB_ERR_INVAL, "{'op':'run.get'}");
	refused(c, SB_ERR_INVAL, "{'op':'runs.list','group':7}");
	refused(c, SB_ERR_INVAL, "{'op':'costs.get','scope':'planet','id':'x'}");
	refused(c, SB_ERR_INVAL, "{'op':'costs.get','scope':1,'id':'x'}");
	refused(c, SB_ERR_INVAL, "{'op':'run.create','spec':5}");
	refused(c, SB_ERR_INVAL, "{'op':'events.append','run':'" RUN_A "','type':7,'payload':{}}");
	refused(c, SB_ERR_INVAL, "{'op':'events.append','run':'" RUN_A "','type':'run.warning','payload':[]}");
	refused(c, SB_ERR_SCHEMA, "{'op':'events.append','run':'" RUN_A "','type':'run.warning','payload':{}}");
	refused(c, SB_ERR_SCHEMA, "{'op':'events.append','run':'" RUN_A "','type':'no.such','payload':{}}");
	refused(c, SB_ERR_SCHEMA, "{'op':'events.append','run':'" RUN_A "','type':'agent.usage.updated',"
				  "'payload':" USAGE "}"); /* only the gateway may */
	/* operators write their own events, never the host's */
	refused(c, SB_ERR_SCHEMA, "{'op':'events.append','run':'" RUN_A "','type':'run.stopped',"
				  "'payload':{'reason':'exited'}}");
	refused(c, SB_ERR_SCHEMA, "{'op':'events.append','run':'" RUN_A "','type':'run.exited',"
				  "'payload':{'status':0}}");
	refused(c, SB_ERR_SCHEMA, "{'op':'events.append','run':'" RUN_A "','type':'operator.note',"
				  "'payload':{'text':7}}");
	refused(c, SB_ERR_NOTFOUND, "{'op':'run.get','run':'ffffffffffff'}");
	refused(c, SB_ERR_NOTFOUND, "{'op':'events.read','run':'nope'}");
	refused_packed(c, SB_ERR_INVAL, pk_run_nul);
	refused_packed(c, SB_ERR_INVAL, pk_fork_name_esc);
	refused(c, SB_ERR_INVAL, "{'op':'run.fork','run':'" RUN_A "','snapshot':''}");
	refused(c, SB_ERR_INVAL, "{'op':'run.resume','run':'" RUN_A "','snapshot':''}");
	/* blob.get: a key of 64 hex digits, that is there */
	refused(c, SB_ERR_INVAL, "{'op':'blob.get'}");
	refused(c, SB_ERR_INVAL, "{'op':'blob.get','blob':7}");
	refused(c, SB_ERR_INVAL, "{'op':'blob.get','blob':'../../etc/passwd'}");
	refused(c, SB_ERR_INVAL, "{'op':'blob.get','blob':'0123456789abcdef'}");
	refused(c, SB_ERR_NOTFOUND, "{'op':'blob.get','blob':'"
				    "11111111111111111111111111111111"
				    "11111111111111111111111111111111'}");
	refused(c, SB_ERR_INVAL,
		"{'op':'run.get','run':'" RUN_A RUN_A RUN_A RUN_A RUN_A RUN_A RUN_A RUN_A RUN_A "'}");
	/* a huge limit is capped, not refused */
	assert_int_equal(call(c, &rep, "{'op':'events.read','run':'" RUN_A "','limit':9223372036854775807}"),
			 SB_OK);
	assert_true(sb_map_get(&rep.map, "events")->via.array.size == 2);
	sb_reply_free(&rep);
	assert_healthy(d->home);

	/* larger than SB_REQ_MAX: refused by the client, not sent (the
	 * daemon's own limit is test_sp's) */
	free(buf);
	buf = calloc(1, big);
	assert_non_null(buf);
	rc = call_raw(c, buf, big, 3000);
	assert_int_equal(rc, SB_ERR_TOOBIG);
	tu_errmsg_has(SB_ERR_TOOBIG, "above the 67108864-byte limit");
	free(buf);
	assert_healthy(d->home);
	/* the same client works again */
	assert_int_equal(call(c, &rep, "{'op':'health'}"), SB_OK);
	sb_reply_free(&rep);
	/* and the log is as it was: nothing bad was appended */
	assert_int_equal(call(c, &rep, "{'op':'health'}"), SB_OK);
	assert_true(sb_map_u64(&rep.map, "last_offset", 0) == 4);
	sb_reply_free(&rep);
	sb_client_close(c);
}

/* --- the loop while the projections are rebuilt --- */

#define REBUILD_EVENTS 1000000 /* seconds of admin.reproject */

static int setup_big_log(void **state)
{
	struct daemon *d = calloc(1, sizeof *d);

	assert_non_null(d);
	d->home = home_new();
	seed_run(d->home, RUN_A);
	seed_run(d->home, RUN_B);
	seed_turns(d->home, RUN_A, RUN_B, REBUILD_EVENTS);
	daemon_start(d);
	*state = d;
	return 0;
}

/* A request in a thread of its own, on a client of its own. */
struct bg_call {
	const char *home;
	const char *js;
	int rc;
	char err[256];
	struct sb_reply rep;
	double took;
	pthread_t th;
};

static void *bg_call_main(void *arg)
{
	struct bg_call *b = arg;
	msgpack_sbuffer sb;
	sb_client *c;
	double t0 = now_s();

	if ((b->rc = sb_client_open(b->home, NULL, &c)))
		return NULL;
	tu_json(&sb, b->js);
	b->rc = sb_request(c, &sb, 120000, &b->rep);
	if (b->rc)
		snprintf(b->err, sizeof b->err, "%s", sb_errmsg(b->rc));
	msgpack_sbuffer_destroy(&sb);
	sb_client_close(c);
	b->took = now_s() - t0;
	return NULL;
}

static void bg_call_start(struct bg_call *b, const char *home, const char *js)
{
	memset(b, 0, sizeof *b);
	b->home = home;
	b->js = js;
	assert_int_equal(pthread_create(&b->th, NULL, bg_call_main, b), 0);
}

/* The rebuild's progress: 1 while admin.reproject has not caught up. */
static int rebuilding(sb_client *c)
{
	struct sb_reply rep;
	int r;

	assert_int_equal(call(c, &rep, "{'op':'health'}"), SB_OK);
	r = sb_map_u64(&rep.map, "checkpoint", 0) < sb_map_u64(&rep.map, "last_offset", 0);
	sb_reply_free(&rep);
	return r;
}

/* The daemon's loop never waits for the projections. admin.reproject holds
 * them for seconds (REBUILD_EVENTS from offset 0); meanwhile group.stop and
 * run.stop, ops of the run manager that read them, wait off the loop, and
 * run.create, whose answer comes through the loop, is answered at once (a
 * template that is not there: its error), as is health. Then group.stop
 * answers with the group's live runs (none), run.stop that its run is not
 * running, and the rebuild ends. With a fourth request waiting, every API
 * worker is held, and health is still answered during the rebuild: on the
 * socket server's thread. */
static void test_loop_during_reproject(void **state)
{
	struct daemon *d = *state;
	struct bg_call rebuild, gstop, rstop, rstop2;
	struct sb_reply rep;
	sb_client *c = client(d->home);
	double t0, took;
	int rc, i;

	bg_call_start(&rebuild, d->home, "{'op':'admin.reproject'}");
	for (i = 0; i < 5000 && !rebuilding(c); i++)
		sleep_ms(1);
	assert_true(rebuilding(c));
	bg_call_start(&gstop, d->home, "{'op':'group.stop','group':'g'}");
	bg_call_start(&rstop, d->home, "{'op':'run.stop','run':'" RUN_A "'}");
	sleep_ms(100); /* they wait for the projections now */
	t0 = now_s();
	rc = call(c, &rep, "{'op':'run.create','spec':{'template':'no-such-template',"
		  "'argv':['true']}}");
	took = now_s() - t0;
	assert_int_equal(rc, SB_ERR_NOTFOUND);
	sb_reply_free(&rep);
	assert_int_equal(call(c, &rep, "{'op':'health'}"), SB_OK);
	sb_reply_free(&rep);
	if (!rebuilding(c))
		fail_msg("run.create was answered in %.2f s, after the rebuild", took);
	print_message("run.create answered in %.3f s during the rebuild\n", took);
	bg_call_start(&rstop2, d->home, "{'op':'run.stop','run':'" RUN_B "'}");
	sleep_ms(100); /* the four workers wait for the projections now */
	if (!rebuilding(c))
		fail_msg("health was not answered while every worker waited");
	pthread_join(gstop.th, NULL);
	pthread_join(rstop.th, NULL);
	pthread_join(rstop2.th, NULL);
	if (rstop2.rc != SB_ERR_STATE || !strstr(rstop2.err, "not running"))
		fail_msg("run.stop of a stopped run: %d %s", rstop2.rc, rstop2.err);
	sb_reply_free(&rstop2.rep);
	pthread_join(rebuild.th, NULL);
	if (rebuild.rc)
		fail_msg("admin.reproject: %s", rebuild.err);
	if (gstop.rc)
		fail_msg("group.stop: %s", gstop.err);
	assert_int_equal(sb_map_get(&gstop.rep.map, "runs")->via.array.size, 0);
	if (rstop.rc != SB_ERR_STATE || !strstr(rstop.err, "not running"))
		fail_msg("run.stop of a stopped run: %d %s", rstop.rc, rstop.err);
	print_message("rebuild %.2f s, group.stop answered after %.2f s\n", rebuild.took,
		      gstop.took);
	sb_reply_free(&gstop.rep);
	sb_reply_free(&rstop.rep);
	sb_reply_free(&rebuild.rep);
	sb_client_close(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_attach_under_load, setup_two_runs, teardown),
		cmocka_unit_test_setup_teardown(test_many_subscribers, setup_two_runs, teardown),
		cmocka_unit_test_setup_teardown(test_reattach_from_offset, setup_two_runs, teardown),
		cmocka_unit_test_setup_teardown(test_backlog_pages, setup_long_runs, teardown),
		cmocka_unit_test_setup_teardown(test_read_records, setup_long_runs, teardown),
		cmocka_unit_test_setup_teardown(test_sub_topics, setup_two_runs, teardown),
		cmocka_unit_test_setup_teardown(test_slow_subscriber, setup_two_runs, teardown),
		cmocka_unit_test_setup_teardown(test_attach_at_the_edge, setup_two_runs, teardown),
		cmocka_unit_test_setup_teardown(test_subscribe_churn, setup_two_runs, teardown),
		cmocka_unit_test_setup_teardown(test_sigkill_restart, setup_two_runs, teardown),
		cmocka_unit_test_setup_teardown(test_malformed, setup_two_runs, teardown),
		cmocka_unit_test_setup_teardown(test_loop_during_reproject, setup_big_log, teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	if (getenv("TEST_FILTER")) /* e.g. TEST_FILTER='*edge*' */
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
