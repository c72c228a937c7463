/* bench_watch.c - sanbox watch against a real sanboxd (BUILD/sanboxd, and
 * the CLI BUILD/sanbox as the watchers), with RUNS live runs of one group
 * and no microVM: the runs' QEMU is a stand-in that sleeps, so each run is
 * "running" until it is stopped (the bootless set-up of the CLI tests).
 *
 * Load: APPENDERS threads, each with a connection of its own, append
 * operator.note events (events.append) to random runs, RATE a second in
 * all, from before the first window to the end. State on /tmp, a disk:
 * every append is a durable commit.
 *
 * The daemon's CPU (user and system, /proc/PID/stat) over WINDOW_S with no
 * watcher, then with one `sanbox watch GROUP --plain` and then with
 * WATCHERS of them, each started and past its first lines (one per run)
 * before its window; ROUNDS times in turn (the watchers ended after each),
 * so the machine's other load falls on all three alike. Each figure is the
 * median of its windows, what watchers add the median of each round's
 * difference to its window without one.
 *
 * Latency: with one watcher left, the runs are stopped one after another
 * (STOP_GAP_MS apart) under the same load; each run.stopped makes the
 * watcher print the run's line. Each line is stamped (CLOCK_REALTIME) as
 * this program reads it from the watcher's pipe, and set against the
 * event's own time (ts, taken by the daemon as it appends, before the
 * commit): the delay from an event's append to the watcher's row update,
 * p50 and p99. The watcher must then print the totals and exit 0.
 *
 * Prints only lines "bench NAME VALUE UNIT"; errors go to stderr with exit
 * status 1. The daemon, the watchers and the stand-ins are ended and the
 * state directory removed at the end, also on failure or SIGTERM.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/daemon/client.h"
#include "engine/daemon/bus.h"
#include "engine/error.h"
#include "engine/payload.h"
#include "engine/proc.h"
#include "engine/runs/runner.h"
#include "engine/daemon/wire.h"
#include "tests/bench/benchutil.h"

#define RUNS	    100
#define RATE	    500 /* notes a second, over all runs */
#define APPENDERS   4
#define WINDOW_S    5
#define ROUNDS	    5 /* of the three windows, in turn */
#define WATCHERS    10
#define STOP_GAP_MS 30
#define GROUP	    "bench"

static char home[PATH_MAX], build[PATH_MAX];
static pid_t daemon_pid;
static char ids[RUNS][SB_RUN_MAX];
static atomic_int load_stop;
static atomic_ulong appended;

/* A watcher: its process, and what it printed (the first one keeps each
 * line's run name, status and when it was read). */
struct watcher {
	pid_t pid;
	int fd;
	pthread_t th;
	int keep;
	atomic_ulong lines;
	pthread_mutex_t mu;
	struct seen {
		char name[16], status[16];
		double at; /* s since the epoch */
	} *seen;
	size_t nseen;
	int total; /* printed its totals line */
};
static struct watcher watchers[WATCHERS];

static void cleanup(void)
{
	char dir[PATH_MAX + 8];
	struct dirent *de;
	DIR *d;
	pid_t q;

	for (int i = 0; i < WATCHERS; i++)
		if (watchers[i].pid > 0) {
			kill(watchers[i].pid, SIGKILL);
			waitpid(watchers[i].pid, NULL, 0);
			watchers[i].pid = 0;
		}
	if (daemon_pid > 0) {
		kill(daemon_pid, SIGKILL);
		waitpid(daemon_pid, NULL, 0);
		daemon_pid = 0;
	}
	if (!home[0])
		return;
	snprintf(dir, sizeof dir, "%s/runs", home);
	if ((d = opendir(dir))) {
		while ((de = readdir(d)))
			if (de->d_name[0] != '.' && (q = sb_local_qemu_pid(home, de->d_name)))
				sb_proc_kill(q, SIGKILL);
		closedir(d);
	}
	bench_rmrf(home);
	home[0] = 0;
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
	va_list ap;

	fputs("bench_watch: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	cleanup();
	exit(1);
}

static void die(const char *what, int rc)
{
	fail("%s: %s", what, rc ? sb_errmsg(rc) : "failed");
}

static sigset_t stop_sigs;

/* Takes the signals that end the benchmark (blocked in every other
 * thread), cleans up and exits. */
static void *signal_thread(void *arg)
{
	int sig = SIGTERM;

	(void)arg;
	sigwait(&stop_sigs, &sig);
	cleanup();
	_exit(128 + sig);
}

static void signals_init(void)
{
	pthread_t th;

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&stop_sigs);
	sigaddset(&stop_sigs, SIGINT);
	sigaddset(&stop_sigs, SIGTERM);
	sigaddset(&stop_sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL);
	if (pthread_create(&th, NULL, signal_thread, NULL))
		die("thread", SB_ERR_NOMEM);
	pthread_detach(th);
}

static void report(const char *name, double value, const char *unit)
{
	printf("bench %s %.*f %s\n", name, value < 100 ? 2 : 0, value, unit);
	fflush(stdout);
}

static double wall_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* CPU seconds (user and system) that process pid has used so far. */
static double cpu_secs(pid_t pid)
{
	unsigned long long ut = 0, st = 0;
	char path[64], buf[1024], *p;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	if (!(f = fopen(path, "r")))
		return 0;
	p = fgets(buf, sizeof buf, f) ? strrchr(buf, ')') : NULL;
	fclose(f);
	/* after "pid (comm)": state is field 3, utime and stime 14 and 15 */
	if (!p || sscanf(p + 2, "%*c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu %llu", &ut,
			 &st) != 2)
		return 0;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Writes text to home/name. */
static void put(const char *name, const char *text, mode_t mode)
{
	char path[PATH_MAX + 64];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", home, name);
	if (!(f = fopen(path, "w")) || fputs(text, f) < 0 || fclose(f))
		fail("cannot write %s", path);
	chmod(path, mode);
}

/* The state directory, a template whose QEMU stand-in sleeps (the runs
 * stay running), room for RUNS runs, and the environment that says so. */
static void home_make(void)
{
	char path[PATH_MAX + 64];

	snprintf(home, sizeof home, "/tmp/sbbench-watch.XXXXXX");
	if (!mkdtemp(home))
		fail("mkdtemp: %s", strerror(errno));
	snprintf(path, sizeof path, "%s/tpl", home);
	mkdir(path, 0700);
	snprintf(path, sizeof path, "%s/tpl/shell", home);
	mkdir(path, 0700);
	put("fake-qemu",
	    "#!/bin/sh\n"
	    "case \" $* \" in\n"
	    "*\" -version \"*) echo \"QEMU emulator version 7.2.0 (stand-in)\"; exit 0 ;;\n"
	    "*sanbox.probe=1*) exit 1 ;;\n"
	    "esac\n"
	    "exec sleep 3600\n",
	    0755);
	put("tpl/shell/template.json",
	    "{\"name\":\"shell\",\"hash\":\"00\",\"harness\":\"/bin/sh\",\"cpus\":1,"
	    "\"memory_mib\":128,\"timeout_s\":3600}",
	    0644);
	put("tpl/shell/vmlinux", "", 0644);
	put("tpl/shell/initrd.img", "", 0644);
	put("tpl/shell/rootfs.img", "", 0644);
	put("sanboxd.json",
	    "{\"runs\": {\"capacity_cpus\": 1024, \"capacity_memory_mib\": 1048576}}\n", 0644);
	snprintf(path, sizeof path, "%s/tpl", home);
	setenv("SANBOX_TEMPLATES", path, 1);
	snprintf(path, sizeof path, "%s/fake-qemu", home);
	setenv("SANBOX_QEMU", path, 1);
	setenv("SANBOX_BOOT_TIMEOUT", "3600", 1);
	setenv("SANBOX_WARM_START", "0", 1);
	setenv("SANBOX_HOME", home, 1);
}

/* The build directory: this program is BUILD/bench/bench_watch. */
static void build_find(void)
{
	ssize_t n = readlink("/proc/self/exe", build, sizeof build - 32);
	char *slash;

	if (n <= 0)
		fail("readlink /proc/self/exe");
	build[n] = 0;
	for (int k = 0; k < 2; k++) {
		if (!(slash = strrchr(build, '/')))
			fail("no build directory above %s", build);
		*slash = 0;
	}
}

/* Sends the request packed in req (freed) and returns the reply in rep. */
static int call(sb_client *c, msgpack_sbuffer *req, struct sb_reply *rep)
{
	int rc = sb_request(c, req, 60000, rep);

	msgpack_sbuffer_destroy(req);
	return rc;
}

/* Starts a request of op with n more pairs into req, pk. */
static void req_begin(msgpack_sbuffer *req, msgpack_packer *pk, const char *op, size_t n)
{
	msgpack_sbuffer_init(req);
	msgpack_packer_init(pk, req, msgpack_sbuffer_write);
	msgpack_pack_map(pk, n + 1);
	sb_pack_kstr(pk, "op", op);
}

/* Starts sanboxd on home and waits until it answers; returns a client. */
static sb_client *daemon_start(void)
{
	char exe[PATH_MAX + 16], log[PATH_MAX + 16];
	char *argv[] = {exe, "--home", home, NULL};
	struct sb_spawn sp = {.argv = argv, .in = -1};
	struct sb_reply rep;
	msgpack_sbuffer req;
	msgpack_packer pk;
	sb_client *c;
	int rc;

	snprintf(exe, sizeof exe, "%s/sanboxd", build);
	snprintf(log, sizeof log, "%s/sanboxd.out", home);
	if ((sp.out = sp.err = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600)) < 0)
		fail("%s: %s", log, strerror(errno));
	rc = sb_spawn(&sp, &daemon_pid);
	close(sp.out);
	if (rc)
		die(exe, rc);
	for (int i = 0; i < 600; i++, sleep_s(0.05)) {
		if (sb_client_open(home, NULL, &c))
			continue;
		req_begin(&req, &pk, "health", 0);
		rc = call(c, &req, &rep);
		sb_reply_free(&rep);
		if (rc == SB_OK)
			return c;
		sb_client_close(c);
	}
	fail("sanboxd did not answer within 30 s");
}

/* Creates RUNS runs of GROUP (w000, w001, ...), then waits until every one
 * is running. */
static void runs_create(sb_client *c)
{
	struct sb_reply rep;
	msgpack_sbuffer req;
	msgpack_packer pk;
	char name[16];
	int rc, running = 0;

	for (int i = 0; i < RUNS; i++) {
		snprintf(name, sizeof name, "w%03d", i);
		req_begin(&req, &pk, "run.create", 1);
		sb_pack_str(&pk, "spec");
		msgpack_pack_map(&pk, 5);
		sb_pack_kstr(&pk, "template", "shell");
		sb_pack_kstr(&pk, "name", name);
		sb_pack_kstr(&pk, "group", GROUP);
		sb_pack_ku64(&pk, "timeout_s", 3600);
		sb_pack_str(&pk, "argv");
		msgpack_pack_array(&pk, 1);
		sb_pack_str(&pk, "true");
		if ((rc = call(c, &req, &rep)) ||
		    sb_map_str(&rep.map, "run", ids[i], sizeof ids[i]) <= 0)
			die("run.create", rc ? rc : SB_ERR_PROTO);
		sb_reply_free(&rep);
	}
	for (int t = 0; t < 600 && running < RUNS; t++, sleep_s(0.1)) {
		const msgpack_object *runs;
		char status[16];
		req_begin(&req, &pk, "group.get", 1);
		sb_pack_kstr(&pk, "group", GROUP);
		if ((rc = call(c, &req, &rep)))
			die("group.get", rc);
		runs = sb_map_get(&rep.map, "runs");
		running = 0;
		for (uint32_t i = 0; runs && i < runs->via.array.size; i++)
			running += sb_map_str(&runs->via.array.ptr[i], "status", status,
					      sizeof status) > 0 &&
				   !strcmp(status, "running");
		sb_reply_free(&rep);
	}
	if (running < RUNS)
		fail("%d of %d runs running after 60 s", running, RUNS);
}

/* ---- the load ---- */

/* Appends operator notes to random runs, RATE / APPENDERS a second, on a
 * schedule (behind it, as fast as it can), until load_stop. */
static void *appender(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg * 7919u + 1;
	double due = bench_now(), gap = (double)APPENDERS / RATE;
	struct sb_reply rep;
	msgpack_sbuffer req;
	msgpack_packer pk;
	sb_client *c;
	int rc;

	if ((rc = sb_client_open(home, NULL, &c)))
		die("appender: connect", rc);
	while (!atomic_load(&load_stop)) {
		due += gap;
		if (due > bench_now())
			sleep_s(due - bench_now());
		req_begin(&req, &pk, "events.append", 3);
		sb_pack_kstr(&pk, "run", ids[rand_r(&seed) % RUNS]);
		sb_pack_kstr(&pk, "type", "operator.note");
		sb_pack_str(&pk, "payload");
		msgpack_pack_map(&pk, 1);
		sb_pack_kstr(&pk, "text", "a note of the load");
		if ((rc = call(c, &req, &rep)))
			die("events.append", rc);
		sb_reply_free(&rep);
		atomic_fetch_add(&appended, 1);
	}
	sb_client_close(c);
	return NULL;
}

/* ---- the watchers ---- */

/* Keeps what line "HH:MM:SS NAME STATUS ..." of w says, read at at. */
static void seen_add(struct watcher *w, const char *line, double at)
{
	char name[16], status[16];
	struct seen *v;

	if (sscanf(line, "%*s %15s %15s", name, status) != 2)
		return;
	if (w->nseen % 256 == 0) {
		if (!(v = realloc(w->seen, (w->nseen + 256) * sizeof *v)))
			return;
		w->seen = v;
	}
	snprintf(w->seen[w->nseen].name, sizeof w->seen[0].name, "%s", name);
	snprintf(w->seen[w->nseen].status, sizeof w->seen[0].status, "%s", status);
	w->seen[w->nseen++].at = at;
}

/* Reads watcher w's lines as they come; the one that keeps them notes each
 * line's run name, status and when it was read. */
static void *watcher_read(void *arg)
{
	struct watcher *w = arg;
	FILE *f = fdopen(w->fd, "r");
	char *line = NULL;
	size_t cap = 0;
	double at;

	while (f && getline(&line, &cap, f) > 0) {
		at = wall_now();
		atomic_fetch_add(&w->lines, 1);
		pthread_mutex_lock(&w->mu);
		if (strstr(line, " total: "))
			w->total = 1;
		else if (w->keep)
			seen_add(w, line, at);
		pthread_mutex_unlock(&w->mu);
	}
	free(line);
	if (f)
		fclose(f);
	return NULL;
}

/* Starts watcher i, `sanbox watch GROUP --plain` on a pipe, and waits until
 * it has printed a line for every run. */
static void watcher_start(int i, int keep)
{
	char exe[PATH_MAX + 16], err[PATH_MAX + 32];
	char *argv[] = {exe, "--home", home, "watch", GROUP, "--plain", NULL};
	struct watcher *w = &watchers[i];
	struct sb_spawn sp = {.argv = argv, .in = -1};
	int fds[2], rc;

	snprintf(exe, sizeof exe, "%s/sanbox", build);
	snprintf(err, sizeof err, "%s/watch-%d.err", home, i);
	if (pipe2(fds, O_CLOEXEC) ||
	    (sp.err = open(err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
		fail("watcher %d: %s", i, strerror(errno));
	sp.out = fds[1];
	rc = sb_spawn(&sp, &w->pid);
	close(fds[1]);
	close(sp.err);
	if (rc)
		die(exe, rc);
	w->fd = fds[0];
	w->keep = keep;
	atomic_store(&w->lines, 0);
	w->total = 0;
	w->nseen = 0;
	pthread_mutex_init(&w->mu, NULL);
	if (pthread_create(&w->th, NULL, watcher_read, w))
		die("thread", SB_ERR_NOMEM);
	for (int t = 0; t < 600 && atomic_load(&w->lines) < RUNS; t++)
		sleep_s(0.05);
	if (atomic_load(&w->lines) < RUNS)
		fail("watcher %d printed %lu lines of %d in 30 s", i, atomic_load(&w->lines), RUNS);
}

/* Ends watcher i (SIGTERM) and reaps it. */
static void watcher_end(int i)
{
	kill(watchers[i].pid, SIGTERM);
	waitpid(watchers[i].pid, NULL, 0);
	watchers[i].pid = 0;
	pthread_join(watchers[i].th, NULL);
}

/* The daemon's CPU over WINDOW_S, in percent of one core. */
static double cpu_window(void)
{
	double c0 = cpu_secs(daemon_pid), t0 = bench_now();

	sleep_s(WINDOW_S);
	return 100 * (cpu_secs(daemon_pid) - c0) / (bench_now() - t0);
}

/* ---- latency ---- */

/* The time (s since the epoch) of run's run.stopped, or 0. */
static double stopped_at(sb_client *c, const char *run)
{
	const msgpack_object *evs, *payload;
	struct sb_reply rep;
	msgpack_sbuffer req;
	msgpack_packer pk;
	struct sb_event ev;
	double at = 0;

	req_begin(&req, &pk, "events.read", 3);
	sb_pack_kstr(&pk, "run", run);
	sb_pack_ku64(&pk, "from", 0);
	sb_pack_str(&pk, "types");
	msgpack_pack_array(&pk, 1);
	sb_pack_str(&pk, "run.stopped");
	if (call(c, &req, &rep) == SB_OK && (evs = sb_map_get(&rep.map, "events")) &&
	    evs->type == MSGPACK_OBJECT_ARRAY && evs->via.array.size &&
	    sb_wire_unpack_event(&evs->via.array.ptr[0], &ev, &payload) == SB_OK)
		at = ev.ts_ns / 1e9;
	sb_reply_free(&rep);
	return at;
}

/* Stops the runs one after another, STOP_GAP_MS apart, waits for watcher
 * 0 to print the totals and end, and reports the delays from each
 * run.stopped to the watcher's line saying so. */
static void latency(sb_client *c)
{
	struct watcher *w = &watchers[0];
	double delay[RUNS], at;
	struct sb_reply rep;
	msgpack_sbuffer req;
	msgpack_packer pk;
	size_t n = 0;
	int rc, st = -1;

	for (int i = 0; i < RUNS; i++) {
		req_begin(&req, &pk, "run.stop", 1);
		sb_pack_kstr(&pk, "run", ids[i]);
		if ((rc = call(c, &req, &rep)))
			die("run.stop", rc);
		sb_reply_free(&rep);
		sleep_s(STOP_GAP_MS / 1000.0);
	}
	if (sb_proc_wait(w->pid, 30000, &st) || !WIFEXITED(st) || WEXITSTATUS(st))
		fail("the watcher did not end with exit 0 once every run had ended");
	w->pid = 0;
	pthread_join(w->th, NULL);
	if (!w->total)
		fail("the watcher printed no totals");
	for (size_t k = 0; k < w->nseen; k++) {
		int i = atoi(w->seen[k].name + 1);
		if (strcmp(w->seen[k].status, "stopped") || i < 0 || i >= RUNS ||
		    !(at = stopped_at(c, ids[i])))
			continue;
		delay[n++] = 1000 * (w->seen[k].at - at);
	}
	if (n != RUNS)
		fail("the watcher printed %zu stops of %d runs", n, RUNS);
	qsort(delay, n, sizeof delay[0], bench_cmp_double);
	report("watch.update_p50", delay[n / 2], "ms");
	report("watch.update_p99", delay[(n * 99) / 100], "ms");
}

/* The daemon's CPU in ROUNDS rounds of three windows: no watcher, one,
 * WATCHERS; reports the medians and what the watchers add. */
static void cpu_rounds(void)
{
	double c0[ROUNDS], c1[ROUNDS], c10[ROUNDS], d1[ROUNDS], d10[ROUNDS];

	for (int r = 0; r < ROUNDS; r++) {
		c0[r] = cpu_window();
		watcher_start(0, 0);
		c1[r] = cpu_window();
		for (int i = 1; i < WATCHERS; i++)
			watcher_start(i, 0);
		c10[r] = cpu_window();
		for (int i = 0; i < WATCHERS; i++)
			watcher_end(i);
		d1[r] = c1[r] - c0[r];
		d10[r] = c10[r] - c0[r];
	}
	report("watch.daemon_cpu_no_watcher", bench_median(c0, ROUNDS), "%");
	report("watch.daemon_cpu_1_watcher", bench_median(c1, ROUNDS), "%");
	report("watch.daemon_cpu_10_watchers", bench_median(c10, ROUNDS), "%");
	report("watch.daemon_cpu_added_1", bench_median(d1, ROUNDS), "%");
	report("watch.daemon_cpu_added_10", bench_median(d10, ROUNDS), "%");
}

int main(void)
{
	pthread_t app[APPENDERS];
	double t0;
	sb_client *c;

	signals_init();
	build_find();
	home_make();
	c = daemon_start();
	runs_create(c);
	t0 = bench_now();
	for (int i = 0; i < APPENDERS; i++)
		if (pthread_create(&app[i], NULL, appender, (void *)(uintptr_t)i))
			die("thread", SB_ERR_NOMEM);
	sleep_s(1); /* the load going */
	cpu_rounds();
	watcher_start(0, 1);
	latency(c);
	atomic_store(&load_stop, 1);
	for (int i = 0; i < APPENDERS; i++)
		pthread_join(app[i], NULL);
	report("watch.load_events_per_s", (double)atomic_load(&appended) / (bench_now() - t0),
	       "events/s");
	sb_client_close(c);
	cleanup();
	return 0;
}
