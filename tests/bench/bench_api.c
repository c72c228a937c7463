/* bench_api.c - benchmarks of the control API and live attach, against a
 * real sanboxd (found beside the bench directory: BUILD/sanboxd).
 *
 * Latency is publish-to-receive: the writer stamps CLOCK_MONOTONIC into each
 * event's payload just before its events.append request; a subscriber
 * (sb_follow) takes now - stamp on receipt. 2000 events at 500/s to 1
 * subscriber, to 64 subscriber threads in one process (one shared
 * connection, see engine/bus.c) and to 64 subscriber processes (64
 * connections). The state directory is on /dev/shm when there is one, so
 * the figures are the control plane's and not the disk's fsync; the _disk
 * lines repeat the 1-subscriber case with the state on /tmp (each append is
 * a durable LMDB commit).
 *
 * Catch-up: 1,000,000 events (agent.tool.completed, about 190 bytes of
 * payload) written straight into the log before the daemon starts, then
 * sb_follow without follow from offset 0, for the run (what attach does)
 * and for the whole log; the best of three of each.
 *
 * Under load: health and events.read (RUN_READ's records, 100 at a time,
 * as sb_follow asks for them), each from a prober thread of its own at
 * PROBE_HZ requests/s, idle for IDLE_S, then while LOAD_RUNS run.create
 * requests go out at once from as many connections (real microVMs under
 * TCG, template shell) and FLOODERS of those guests print as fast as they
 * can; p50 and p99 of each phase and the ratio load/idle. Latency counts
 * from when a request was due, so a stall also counts for the requests it
 * delayed. Beside them, in both phases, the baseline: a third prober
 * (same client library, same schedule) sends health to a server in this
 * process that answers every request at once with {ok: true} on its own
 * thread (api.echo_*), so the daemon's share of a figure is its ratio to
 * the echo's in the same phase (api.*_p99_idle|load_vs_echo): the rest is
 * this machine's scheduling of the client's and the server's threads. The
 * rate one flooding guest gets recorded (agent.output events and their
 * bytes, by their timestamps, over FLOOD_S) and, with the
 * daemon's guest event limits raised in sanboxd.json, the rate of one
 * guest writing event lines to $SANBOX_EVENTS (not limited by the agent):
 * the daemon's own ceiling. The microVM figures need BUILD/templates/shell
 * (built with BUILD/sanbox when missing); without it they are skipped,
 * with one line on stderr. State on /tmp, a disk, as a real daemon's.
 *
 * Arguments name the parts to run (latency, disk, catchup, load), all by
 * default. Prints only lines "bench NAME VALUE UNIT"; errors go to stderr
 * with exit status 1.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/bytes.h"
#include "engine/daemon/bus.h"
#include "engine/daemon/client.h"
#include "engine/daemon/spwire.h"
#include "engine/error.h"
#include "engine/proc.h"
#include "engine/home.h"
#include "engine/log/log.h"
#include "engine/payload.h"
#include "engine/runs/runner.h"
#include "engine/sock.h"
#include "tests/bench/benchutil.h"
#include "tests/fdio.h"
#include "vmm/qemu.h"

#define LAT_EVENTS 2000
#define LAT_GAP_US 2000 /* 500 events/s */
#define DISK_EVENTS 300
#define SUBS 64
#define CATCHUP_EVENTS 1000000
#define BATCH 1000
#define RUN_LAT1 "a1a1a1a1a1a1"
#define RUN_LAT64 "b2b2b2b2b2b2"
#define RUN_PROC "c3c3c3c3c3c3"
#define RUN_BIG "d4d4d4d4d4d4"
#define RUN_READ "e5e5e5e5e5e5"

#define PROBE_HZ 50	     /* requests/s of each prober */
#define PROBE_SAMPLES 30000  /* kept per phase: 600 s at PROBE_HZ */
#define IDLE_S 20
#define LOAD_RUNS 8
#define FLOODERS 4	     /* of LOAD_RUNS; the others sleep */
#define FLOOD_SKIP_S 1	     /* from a guest's first event: its agent's burst */
#define FLOOD_S 10	     /* the window its events are counted in */
#define READ_EVENTS 1000     /* agent.output events seeded into RUN_READ */
#define READ_LIMIT 100
#define LOAD_GROUP "benchload"
#define FLOOD_CMD "yes flood | head -c 50000000"
#define IDLE_CMD "sleep 600"
#define LINES_CMD                                                          \
	"yes '{\"type\":\"agent.turn.started\",\"payload\":{\"turn\":1}}' " \
	">\"$SANBOX_EVENTS\""

static char homes[2][64];   /* removed at exit */
static pid_t daemons[2];    /* killed at exit */
static pid_t subs_pids[SUBS]; /* subscriber processes, killed at exit */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Kills each QEMU of home's runs that is still alive; returns how many. */
static int qemu_reap(const char *home)
{
	char dir[PATH_MAX];
	struct dirent *de;
	DIR *d;
	int n = 0;

	snprintf(dir, sizeof dir, "%s/runs", home);
	if (!(d = opendir(dir)))
		return 0;
	while ((de = readdir(d))) {
		pid_t pid;
		if (de->d_name[0] != '.' && (pid = sb_local_qemu_pid(home, de->d_name))) {
			sb_proc_kill(pid, SIGKILL);
			n++;
		}
	}
	closedir(d);
	return n;
}

static void cleanup(void)
{
	char log[PATH_MAX];

	for (int i = 0; i < SUBS; i++) {
		if (subs_pids[i] > 0) {
			kill(subs_pids[i], SIGKILL);
			waitpid(subs_pids[i], NULL, 0);
			subs_pids[i] = 0;
		}
	}
	for (int i = 0; i < 2; i++) {
		if (daemons[i] > 0) {
			kill(daemons[i], SIGKILL);
			waitpid(daemons[i], NULL, 0);
			daemons[i] = 0;
		}
		if (homes[i][0]) {
			qemu_reap(homes[i]);
			bench_rmrf(homes[i]);
			snprintf(log, sizeof log, "%s.log", homes[i]);
			unlink(log);
			homes[i][0] = 0;
		}
	}
}

/* Prints "bench_api: " and the message on stderr, cleans up and exits 1. */
static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
	va_list ap;

	fputs("bench_api: ", stderr);
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

/* The signals that end the benchmark: blocked in every thread but
 * signal_thread, which cleans up (cleanup) and exits. */
static sigset_t stop_sigs;

static void *signal_thread(void *arg)
{
	int sig = SIGTERM;

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

/* The build directory: this program is BUILD/bench/bench_api. */
static void build_dir(char *buf, size_t cap)
{
	ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
	char *slash;

	if (n <= 0)
		die("readlink", SB_ERR_IO);
	buf[n] = 0;
	for (int k = 0; k < 2; k++) {
		if (!(slash = strrchr(buf, '/')))
			die("exe path", SB_ERR_IO);
		*slash = 0;
	}
}

/* Starts argv[0] (a path) with argv, stdout and stderr appended to log and
 * the stop signals unblocked; returns its pid. */
static pid_t spawn(const char *log, char *const argv[])
{
	pid_t pid = fork();

	if (pid < 0)
		die("fork", SB_ERR_IO);
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		sigprocmask(SIG_UNBLOCK, &stop_sigs, NULL);
		execv(argv[0], argv);
		_exit(127);
	}
	return pid;
}

static void report(const char *name, double value, const char *unit)
{
	printf("bench %s %.*f %s\n", name, value < 100 ? 2 : 0, value, unit);
	fflush(stdout);
}

static char *home_new(int i, const char *base)
{
	snprintf(homes[i], sizeof homes[i], "%s/sbb-XXXXXX", base);
	if (!mkdtemp(homes[i]))
		die("mkdtemp", SB_ERR_IO);
	return homes[i];
}

/* Appends n copies of (type, payload) to run in the log of home, whose
 * daemon is not running, in batches, without syncing. */
static void seed(const char *home, const char *run, const char *type, const msgpack_sbuffer *pl,
		 size_t n)
{
	struct sb_event *evs = calloc(BATCH, sizeof *evs);
	char dir[PATH_MAX];
	sb_log *log;
	int rc;

	if (!evs)
		die("memory", SB_ERR_NOMEM);
	if ((rc = sb_home_init(home)) || (rc = sb_home_path(home, "log", dir, sizeof dir)) ||
	    (rc = sb_log_open(dir, SB_LOG_NOSYNC, &log)))
		die("seed: open", rc);
	for (size_t done = 0; done < n;) {
		size_t k = n - done < BATCH ? n - done : BATCH;
		for (size_t i = 0; i < k; i++)
			if ((rc = sb_event_init(&evs[i], type, run, SB_SRC_HOST, pl->data, pl->size)))
				die("seed: event", rc);
		if ((rc = sb_log_append(log, evs, k)))
			die("seed: append", rc);
		done += k;
	}
	sb_log_close(log);
	free(evs);
}

static void seed_run(const char *home, const char *run)
{
	msgpack_sbuffer pl;
	msgpack_packer pk;

	msgpack_sbuffer_init(&pl);
	msgpack_packer_init(&pk, &pl, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 3);
	sb_pack_kstr(&pk, "name", run);
	sb_pack_kstr(&pk, "template", "shell");
	sb_pack_kstr(&pk, "group", "bench");
	seed(home, run, "run.created", &pl, 1);
	msgpack_sbuffer_destroy(&pl);
}

/* Starts sanboxd for home (slot i); the caller waits for it to answer. */
static void daemon_spawn(int i)
{
	char exe[PATH_MAX], log[PATH_MAX + 8];
	char *argv[] = {exe, "--home", homes[i], NULL};

	build_dir(exe, sizeof exe - 16);
	strcat(exe, "/sanboxd");
	if (access(exe, X_OK))
		die(exe, SB_ERR_NOTFOUND);
	snprintf(log, sizeof log, "%s.log", homes[i]);
	daemons[i] = spawn(log, argv);
}

/* Waits (at most secs) until the daemon of home answers health. */
static int daemon_wait(const char *home, double secs)
{
	double t0 = bench_now();
	msgpack_sbuffer req;
	msgpack_packer pk;
	int rc = SB_ERR_UNAVAIL;

	msgpack_sbuffer_init(&req);
	msgpack_packer_init(&pk, &req, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 1);
	sb_pack_kstr(&pk, "op", "health");
	while (bench_now() - t0 < secs) {
		sb_client *c;
		struct sb_reply rep;
		if (sb_client_open(home, NULL, &c) == SB_OK) {
			rc = sb_request(c, &req, 1000, &rep);
			sb_reply_free(&rep);
			sb_client_close(c);
			if (rc == SB_OK)
				break;
		}
		usleep(20000);
	}
	msgpack_sbuffer_destroy(&req);
	return rc;
}

static void daemon_stop(int i)
{
	kill(daemons[i], SIGTERM);
	waitpid(daemons[i], NULL, 0);
	daemons[i] = 0;
}

/* --- latency --- */

/* What one subscriber collects: latencies in microseconds. */
struct lat {
	const char *home, *run;
	uint32_t *us;      /* LAT_EVENTS or DISK_EVENTS slots */
	size_t want, got;
	_Atomic int *ready; /* set once the subscription is open */
	int rc;
	pthread_t th;
};

static int lat_cb(void *ctx, const struct sb_event *ev, const msgpack_object *payload)
{
	struct lat *l = ctx;
	uint64_t stamp = sb_map_u64(payload, "stamp", 0), t = now_ns();

	/* the backlog comes first, so the subscription is open by now */
	atomic_store(l->ready, 1);
	if (!stamp)
		return 0;
	l->us[l->got++] = (uint32_t)((t - stamp) / 1000u);
	return l->got == l->want;
}

static void lat_follow(struct lat *l)
{
	struct sb_follow_opts o = {0};
	sb_client *c;

	if ((l->rc = sb_client_open(l->home, NULL, &c)))
		return;
	o.home = l->home;
	o.run = l->run;
	o.follow = 1;
	l->rc = sb_follow(c, &o, lat_cb, l);
	sb_client_close(c);
}

static void *lat_thread(void *arg)
{
	lat_follow(arg);
	return NULL;
}

/* Appends n stamped events to run, one every gap_us; returns appends/s. */
static double lat_write(const char *home, const char *run, size_t n, unsigned gap_us)
{
	msgpack_sbuffer req;
	msgpack_packer pk;
	sb_client *c;
	double t0 = bench_now(), next = t0;
	int rc;

	if ((rc = sb_client_open(home, NULL, &c)))
		die("writer", rc);
	msgpack_sbuffer_init(&req);
	msgpack_packer_init(&pk, &req, msgpack_sbuffer_write);
	for (size_t i = 0; i < n; i++) {
		struct sb_reply rep;
		while (bench_now() < next)
			usleep(100);
		next += gap_us / 1e6;
		req.size = 0;
		msgpack_pack_map(&pk, 4);
		sb_pack_kstr(&pk, "op", "events.append");
		sb_pack_kstr(&pk, "run", run);
		sb_pack_kstr(&pk, "type", "operator.note"); /* what an operator may append */
		sb_pack_str(&pk, "payload");
		msgpack_pack_map(&pk, 3);
		sb_pack_kstr(&pk, "text", "bench");
		sb_pack_ku64(&pk, "turn", i);
		sb_pack_ku64(&pk, "stamp", now_ns());
		rc = sb_request(c, &req, 10000, &rep);
		sb_reply_free(&rep);
		if (rc)
			die("append", rc);
	}
	msgpack_sbuffer_destroy(&req);
	sb_client_close(c);
	return n / (bench_now() - t0);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Sorts the n latencies (microseconds) and reports p50 and p99 as
 * api.WHAT_p50_SUFFIX and api.WHAT_p99_SUFFIX, in ms when in_ms, else in
 * us; returns the p99 as reported. */
static double report_lat(const char *what, uint32_t *us, size_t n, const char *suffix,
			 int in_ms)
{
	double scale = in_ms ? 1e-3 : 1;
	const char *unit = in_ms ? "ms" : "us";
	char name[96];

	if (!n)
		fail("no %s latencies measured (%s)", what, suffix);
	qsort(us, n, sizeof *us, cmp_u32);
	snprintf(name, sizeof name, "api.%s_p50_%s", what, suffix);
	report(name, us[n / 2] * scale, unit);
	snprintf(name, sizeof name, "api.%s_p99_%s", what, suffix);
	report(name, us[n * 99 / 100] * scale, unit);
	return us[n * 99 / 100] * scale;
}

static void wait_ready(_Atomic int *ready, int n)
{
	double t0 = bench_now();

	for (int i = 0; i < n; i++)
		while (!atomic_load(&ready[i]))
			if (bench_now() - t0 > 60)
				die("subscribers did not start", SB_ERR_TIMEOUT);
			else
				usleep(1000);
	usleep(100000); /* let the last one reach its live loop */
}

/* Runs nthreads subscriber threads on run and the writer. */
static void bench_latency_threads(const char *home, const char *run, int nthreads, size_t n,
				  const char *suffix)
{
	struct lat *l = calloc((size_t)nthreads, sizeof *l);
	_Atomic int *ready = calloc((size_t)nthreads, sizeof *ready);
	uint32_t *all = calloc((size_t)nthreads * n, sizeof *all);

	if (!l || !ready || !all)
		die("memory", SB_ERR_NOMEM);
	for (int i = 0; i < nthreads; i++) {
		l[i] = (struct lat){home, run, all + (size_t)i * n, n, 0, &ready[i], 0, 0};
		if (pthread_create(&l[i].th, NULL, lat_thread, &l[i]))
			die("thread", SB_ERR_NOMEM);
	}
	wait_ready(ready, nthreads);
	lat_write(home, run, n, LAT_GAP_US);
	for (int i = 0; i < nthreads; i++) {
		pthread_join(l[i].th, NULL);
		if (l[i].rc < 0 || l[i].got != n)
			die("subscriber", l[i].rc < 0 ? l[i].rc : 0);
	}
	report_lat("latency", all, (size_t)nthreads * n, suffix, 0);
	free(all);
	free(ready);
	free(l);
}

/* Forks SUBS subscriber processes on RUN_PROC. This must run before this
 * process first uses nng (nng's threads do not survive a fork). Their
 * latencies and ready flags go to shared memory. */
struct procs {
	_Atomic int *ready;
	uint32_t *us;
};

static void procs_fork(const char *home, struct procs *p)
{
	size_t bytes = SUBS * sizeof(_Atomic int) + (size_t)SUBS * LAT_EVENTS * sizeof(uint32_t);
	void *shm = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (shm == MAP_FAILED)
		die("mmap", SB_ERR_NOMEM);
	memset(shm, 0, bytes);
	p->ready = shm;
	p->us = (uint32_t *)((char *)shm + SUBS * sizeof(_Atomic int));
	for (int i = 0; i < SUBS; i++) {
		subs_pids[i] = fork();
		if (subs_pids[i] < 0)
			die("fork", SB_ERR_IO);
		if (subs_pids[i] == 0) {
			struct lat l = {home, RUN_PROC, p->us + (size_t)i * LAT_EVENTS, LAT_EVENTS, 0,
					&p->ready[i], 0, 0};
			if (daemon_wait(home, 60))
				_exit(2);
			lat_follow(&l);
			_exit(l.rc < 0 || l.got != LAT_EVENTS ? 1 : 0);
		}
	}
}

static void procs_finish(struct procs *p)
{
	int status;

	for (int i = 0; i < SUBS; i++) {
		pid_t pid = subs_pids[i];
		if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
			die("subscriber process failed", 0);
		subs_pids[i] = 0;
	}
	report_lat("latency", p->us, (size_t)SUBS * LAT_EVENTS, "64proc", 0);
}

/* --- catch-up --- */

struct count {
	uint64_t n, last;
};

static int count_cb(void *ctx, const struct sb_event *ev, const msgpack_object *payload)
{
	struct count *c = ctx;

	if (ev->offset <= c->last || !payload)
		return SB_ERR_PROTO; /* out of order */
	c->last = ev->offset;
	c->n++;
	return 0;
}

/* Follows run (or the whole log) from the start without follow: events/s. */
static double catchup(const char *home, const char *run, uint64_t want)
{
	struct sb_follow_opts o = {0};
	struct count cnt = {0, 0};
	sb_client *c;
	double t0;
	int rc;

	if ((rc = sb_client_open(home, NULL, &c)))
		die("catchup", rc);
	o.home = home;
	o.run = run;
	t0 = bench_now();
	if ((rc = sb_follow(c, &o, count_cb, &cnt)))
		die("catchup", rc);
	t0 = bench_now() - t0;
	sb_client_close(c);
	if (cnt.n != want) {
		fprintf(stderr, "bench_api: catchup of '%s': %llu events, want %llu\n", run,
			(unsigned long long)cnt.n, (unsigned long long)want);
		die("catchup", 0);
	}
	return (double)want / t0;
}

/* The best of three catch-ups: the machine may be busy with other work. */
static double catchup_best(const char *home, const char *run, uint64_t want)
{
	double best = 0;

	for (int i = 0; i < 3; i++) {
		double r = catchup(home, run, want);
		best = r > best ? r : best;
	}
	return best;
}

static void make_tool_payload(msgpack_sbuffer *pl)
{
	char args[151];
	msgpack_packer pk;
	int n = snprintf(args, sizeof args, "rg -n --hidden 'TODO|FIXME' src/module_0042 ");

	for (int k = n; k < 150; k++)
		args[k] = (char)('a' + k * 7 % 26);
	args[150] = 0;
	msgpack_sbuffer_init(pl);
	msgpack_packer_init(&pk, pl, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 4);
	sb_pack_kstr(&pk, "tool", "bash");
	sb_pack_kstr(&pk, "args", args);
	sb_pack_ki64(&pk, "exit", 0);
	sb_pack_ku64(&pk, "duration_ms", 1234);
}

/* --- under load --- */

enum phase { PH_WARM, PH_IDLE, PH_LOAD, PH_END };
static _Atomic int phase; /* what the probers' samples are filed under */

/* One prober: a connection and a thread of its own, one request due every
 * 1/PROBE_HZ s; each latency (microseconds) counts from when its request
 * was due, so a stall also counts for the requests it delayed. */
struct probe {
	const char *home;
	int read;        /* events.read of RUN_READ, else health */
	uint32_t *us[2]; /* samples of PH_IDLE and PH_LOAD */
	size_t n[2];
	int rc;
	char err[256];   /* rc's detail (details are per thread) */
	pthread_t th;
};

/* Packs the prober's i-th request into req (emptied first). */
static void probe_pack(const struct probe *p, msgpack_sbuffer *req, uint64_t i)
{
	msgpack_packer pk;

	req->size = 0;
	msgpack_packer_init(&pk, req, msgpack_sbuffer_write);
	if (!p->read) {
		msgpack_pack_map(&pk, 1);
		sb_pack_kstr(&pk, "op", "health");
		return;
	}
	/* stored records, as sb_follow asks; from walks over the run's
	 * offsets 2..READ_EVENTS+1 (1 is its run.created) */
	msgpack_pack_map(&pk, 5);
	sb_pack_kstr(&pk, "op", "events.read");
	sb_pack_kstr(&pk, "run", RUN_READ);
	sb_pack_ku64(&pk, "from", 2 + i * READ_LIMIT % (READ_EVENTS - READ_LIMIT));
	sb_pack_ku64(&pk, "limit", READ_LIMIT);
	sb_pack_kbool(&pk, "records", 1);
}

/* Checks a reply: an events.read brings READ_LIMIT records. */
static int probe_check(const struct probe *p, const struct sb_reply *rep)
{
	const msgpack_object *recs = sb_map_get(&rep->map, "records");

	if (p->read && (!recs || recs->type != MSGPACK_OBJECT_ARRAY ||
			recs->via.array.size != READ_LIMIT))
		return sb_seterr(SB_ERR_PROTO, "events.read of %s did not bring %d records",
				 RUN_READ, READ_LIMIT);
	return SB_OK;
}

static void *probe_thread(void *arg)
{
	struct probe *p = arg;
	struct timespec due;
	msgpack_sbuffer req;
	sb_client *c = NULL;
	int ph;

	msgpack_sbuffer_init(&req);
	if ((p->rc = sb_client_open(p->home, NULL, &c)))
		goto done;
	clock_gettime(CLOCK_MONOTONIC, &due);
	for (uint64_t i = 0; atomic_load(&phase) != PH_END; i++) {
		struct sb_reply rep = {0};
		uint64_t due_ns = (uint64_t)due.tv_sec * 1000000000u + (uint64_t)due.tv_nsec, t;

		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL);
		probe_pack(p, &req, i);
		ph = atomic_load(&phase);
		p->rc = req.data ? sb_request(c, &req, 10000, &rep) : SB_ERR_NOMEM;
		t = now_ns();
		if (p->rc == SB_OK)
			p->rc = probe_check(p, &rep);
		sb_reply_free(&rep);
		if (p->rc)
			break;
		if ((ph == PH_IDLE || ph == PH_LOAD) && p->n[ph - PH_IDLE] < PROBE_SAMPLES) {
			size_t *n = &p->n[ph - PH_IDLE];
			p->us[ph - PH_IDLE][(*n)++] = (uint32_t)((t - due_ns) / 1000u);
		}
		due.tv_nsec += 1000000000 / PROBE_HZ;
		if (due.tv_nsec >= 1000000000) {
			due.tv_sec++;
			due.tv_nsec -= 1000000000;
		}
	}
done:
	if (p->rc)
		snprintf(p->err, sizeof p->err, "%s: %s", p->read ? "events.read" : "health",
			 sb_errmsg(p->rc));
	sb_client_close(c);
	msgpack_sbuffer_destroy(&req);
	return NULL;
}

/* One run.create of the load, from a connection of its own. */
struct creator {
	const char *home, *cmd;
	char run[SB_RUN_MAX];
	double secs; /* until answered, that is until its VM started */
	int rc;
	char err[256];
	pthread_t th;
};

/* Packs run.create of template shell running sh -c cmd under TCG into req. */
static void create_pack(msgpack_sbuffer *req, const char *cmd)
{
	msgpack_packer pk;

	msgpack_packer_init(&pk, req, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 2);
	sb_pack_kstr(&pk, "op", "run.create");
	sb_pack_str(&pk, "spec");
	msgpack_pack_map(&pk, 6);
	sb_pack_kstr(&pk, "template", "shell");
	sb_pack_kstr(&pk, "group", LOAD_GROUP);
	sb_pack_kstr(&pk, "accel", "tcg");
	sb_pack_str(&pk, "argv");
	msgpack_pack_array(&pk, 3);
	sb_pack_str(&pk, "sh");
	sb_pack_str(&pk, "-c");
	sb_pack_str(&pk, cmd);
	sb_pack_ku64(&pk, "memory_mib", 256);
	sb_pack_ku64(&pk, "timeout_s", 600); /* in case this program dies */
}

static void *create_thread(void *arg)
{
	struct creator *cr = arg;
	struct sb_reply rep = {0};
	msgpack_sbuffer req;
	sb_client *c = NULL;
	double t0 = bench_now();

	msgpack_sbuffer_init(&req);
	create_pack(&req, cr->cmd);
	if ((cr->rc = sb_client_open(cr->home, NULL, &c)) == SB_OK)
		cr->rc = req.data ? sb_request(c, &req, 300000, &rep) : SB_ERR_NOMEM;
	cr->secs = bench_now() - t0;
	if (cr->rc == SB_OK && sb_map_str(&rep.map, "run", cr->run, sizeof cr->run) <= 0)
		cr->rc = sb_seterr(SB_ERR_PROTO, "no run in the reply");
	if (cr->rc)
		snprintf(cr->err, sizeof cr->err, "run.create: %s", sb_errmsg(cr->rc));
	sb_reply_free(&rep);
	sb_client_close(c);
	msgpack_sbuffer_destroy(&req);
	return NULL;
}

/* Waits (at most secs) for run's first event of type; a run that ends
 * before it is an error that says why. */
static int run_wait_event(sb_client *c, const char *run, const char *type, double secs)
{
	double t0 = bench_now();
	msgpack_sbuffer req;
	msgpack_packer pk;
	int rc;

	msgpack_sbuffer_init(&req);
	msgpack_packer_init(&pk, &req, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 4);
	sb_pack_kstr(&pk, "op", "events.read");
	sb_pack_kstr(&pk, "run", run);
	sb_pack_ku64(&pk, "limit", 1);
	sb_pack_str(&pk, "types");
	msgpack_pack_array(&pk, 3);
	sb_pack_str(&pk, type);
	sb_pack_str(&pk, "run.failed");
	sb_pack_str(&pk, "run.stopped");
	for (;;) {
		struct sb_reply rep = {0};
		const msgpack_object *evs;
		char got[SB_TYPE_MAX] = "", why[256] = "";

		rc = req.data ? sb_request(c, &req, 10000, &rep) : SB_ERR_NOMEM;
		evs = rc ? NULL : sb_map_get(&rep.map, "events");
		if (evs && evs->type == MSGPACK_OBJECT_ARRAY && evs->via.array.size) {
			sb_map_str(&evs->via.array.ptr[0], "type", got, sizeof got);
			sb_map_str(sb_map_get(&evs->via.array.ptr[0], "payload"), "reason", why,
				   sizeof why);
		}
		sb_reply_free(&rep);
		if (rc || !strcmp(got, type))
			break;
		if (got[0]) {
			rc = sb_seterr(SB_ERR_STATE, "run %s ended before its first %s: %s", run,
				       type, why[0] ? why : got);
			break;
		}
		if (bench_now() - t0 > secs) {
			rc = sb_seterr(SB_ERR_TIMEOUT, "run %s: no %s within %.0f s", run, type,
				       secs);
			break;
		}
		usleep(200000);
	}
	msgpack_sbuffer_destroy(&req);
	return rc;
}

/* Sends {op} (with key: val when key is not NULL) through c and waits at
 * most timeout_ms for *rep (the caller frees it). Errors: sb_request's,
 * SB_ERR_NOMEM. */
static int request_kv(sb_client *c, const char *op, const char *key, const char *val,
		      int timeout_ms, struct sb_reply *rep)
{
	msgpack_sbuffer req;
	msgpack_packer pk;
	sb_mapw m;
	int rc;

	msgpack_sbuffer_init(&req);
	msgpack_packer_init(&pk, &req, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	sb_mapw_str(&m, "op", op);
	if (key)
		sb_mapw_str(&m, key, val);
	if ((rc = sb_mapw_end(&m)) == SB_OK)
		rc = sb_request(c, &req, timeout_ms, rep);
	msgpack_sbuffer_destroy(&req);
	return rc;
}

/* "STATUS (REASON)" of run as run.get says it, or why it could not be
 * read; in a static buffer. */
static const char *run_state(sb_client *c, const char *run)
{
	static char out[256];
	char status[16] = "", reason[128] = "";
	struct sb_reply rep = {0};
	const msgpack_object *r;
	int rc = request_kv(c, "run.get", "run", run, 10000, &rep);

	r = rc ? NULL : sb_map_get(&rep.map, "run");
	if (r) {
		sb_map_str(r, "status", status, sizeof status);
		sb_map_str(r, "reason", reason, sizeof reason);
	}
	if (rc)
		snprintf(out, sizeof out, "state unknown: %s", sb_errmsg(rc));
	else
		snprintf(out, sizeof out, "%s%s%s%s", status[0] ? status : "?",
			 reason[0] ? " (" : "", reason, reason[0] ? ")" : "");
	sb_reply_free(&rep);
	return out;
}

/* A run's events of one type in a window, by their timestamps: FLOOD_S
 * from FLOOD_SKIP_S after the first. */
struct window {
	uint64_t lo, hi; /* wall clock ns, [lo, hi) */
	uint64_t n, bytes; /* events in it, and the bytes of their "data" */
	uint64_t seen, last; /* events read in all, and the last one's time */
	int closed;      /* an event after the window was seen */
};

static int window_cb(void *ctx, const struct sb_event *ev, const msgpack_object *payload)
{
	struct window *w = ctx;
	const msgpack_object *data = sb_map_get(payload, "data");

	if (!w->lo) {
		w->lo = ev->ts_ns + FLOOD_SKIP_S * 1000000000ull;
		w->hi = w->lo + FLOOD_S * 1000000000ull;
	}
	w->seen++;
	w->last = ev->ts_ns;
	if (ev->ts_ns >= w->hi) {
		w->closed = 1;
		return 1;
	}
	if (ev->ts_ns >= w->lo) {
		w->n++;
		w->bytes += data && data->type == MSGPACK_OBJECT_STR ? data->via.str.size : 0;
	}
	return 0;
}

static volatile sig_atomic_t count_late; /* the window's count gave up */

static void on_count_alarm(int sig)
{
	(void)sig;
	count_late = 1;
}

/* Counts run's events of type in its window (see struct window), read
 * from the log and then live until one past the window arrives (a busy
 * daemon may record them later than they came), for at most a minute; the
 * guest must still be sending when the window ends. */
static void window_count(sb_client *c, const char *home, const char *run, const char *type,
			 struct window *w)
{
	const char *types[] = {type, NULL};
	struct sb_follow_opts o = {0};
	struct sigaction sa = {0};
	int rc;

	memset(w, 0, sizeof *w);
	o.home = home;
	o.run = run;
	o.types = types;
	o.follow = 1;
	o.stop = &count_late;
	count_late = 0;
	sa.sa_handler = on_count_alarm; /* no SA_RESTART: the wait ends */
	sigaction(SIGALRM, &sa, NULL);
	alarm(60);
	rc = sb_follow(c, &o, window_cb, w);
	alarm(0);
	if (rc < 0)
		die("counting a guest's events", rc);
	if (!w->closed)
		fail("run %s: no %s event after its %d s window came within a minute "
		     "(%llu read, the last %.2f s into the window, %llu gaps; run %s)",
		     run, type, FLOOD_S, (unsigned long long)w->seen,
		     w->seen ? ((double)w->last - (double)w->lo) / 1e9 : 0.0,
		     (unsigned long long)o.gaps, run_state(c, run));
}

/* Whether the shell template is in SANBOX_TEMPLATES (BUILD/templates, set
 * by main), building it with BUILD/sanbox when it is missing (output in
 * home/template-build.log); else why holds the build's last line. */
static int template_ready(const char *home, char *why, size_t cap)
{
	char tpl[PATH_MAX + 32], sb[PATH_MAX], log[PATH_MAX + 32], line[512];
	char *argv[] = {sb, "--home", (char *)home, "template", "build", "shell", NULL};
	int status;
	FILE *f;
	pid_t pid;

	snprintf(tpl, sizeof tpl, "%s/shell/template.json", getenv("SANBOX_TEMPLATES"));
	if (!access(tpl, R_OK))
		return 1;
	build_dir(sb, sizeof sb - 16);
	strcat(sb, "/sanbox");
	snprintf(log, sizeof log, "%s/template-build.log", home);
	pid = spawn(log, argv);
	if (waitpid(pid, &status, 0) == pid && WIFEXITED(status) && !WEXITSTATUS(status) &&
	    !access(tpl, R_OK))
		return 1;
	snprintf(why, cap, "its build failed");
	if ((f = fopen(log, "r"))) {
		while (fgets(line, sizeof line, f))
			if (line[0] != '\n')
				snprintf(why, cap, "%.*s", (int)strcspn(line, "\n"), line);
		fclose(f);
	}
	return 0;
}

/* Sends {op} (with key: val when key is not NULL) to the daemon of home
 * and ignores the answer: for stopping, where a daemon gone is fine. */
static void request_op(const char *home, const char *op, const char *key, const char *val)
{
	struct sb_reply rep = {0};
	sb_client *c;

	if (sb_client_open(home, NULL, &c))
		return;
	request_kv(c, op, key, val, 30000, &rep);
	sb_reply_free(&rep);
	sb_client_close(c);
}

/* Ends the daemon of slot i and its runs: group.stop of the load's group,
 * daemon.stop, then waits for its pid (SIGKILL after 30 s); a QEMU still
 * named by runs/ * /qemu.pid afterwards is killed and said on stderr. */
static void daemon_stop_runs(int i)
{
	double t0;
	int n;

	request_op(homes[i], "group.stop", "group", LOAD_GROUP);
	request_op(homes[i], "daemon.stop", NULL, NULL);
	for (t0 = bench_now(); waitpid(daemons[i], NULL, WNOHANG) == 0; usleep(50000)) {
		if (bench_now() - t0 > 30) {
			fprintf(stderr, "bench_api: sanboxd did not stop within 30 s: killed\n");
			kill(daemons[i], SIGKILL);
			waitpid(daemons[i], NULL, 0);
			break;
		}
	}
	daemons[i] = 0;
	if ((n = qemu_reap(homes[i])))
		fprintf(stderr, "bench_api: %d QEMU left running after daemon.stop: killed\n", n);
}

static void make_output_payload(msgpack_sbuffer *pl)
{
	char data[513];
	msgpack_packer pk;

	for (int k = 0; k < 512; k++)
		data[k] = k % 64 == 63 ? '\n' : (char)('a' + k * 7 % 26);
	data[512] = 0;
	msgpack_sbuffer_init(pl);
	msgpack_packer_init(&pk, pl, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 2);
	sb_pack_kstr(&pk, "stream", "stdout");
	sb_pack_kstr(&pk, "data", data);
}

/* The probers, side by side: health and events.read of the daemon in
 * home, and health of the echo server in echo_home. */
#define PROBES 3
static const char *const probe_names[PROBES] = {"health", "events_read", "echo"};

static void probes_start(struct probe *p, const char *home, const char *echo_home,
			 uint32_t *buf)
{
	for (int k = 0; k < PROBES; k++) {
		p[k] = (struct probe){.home = k < 2 ? home : echo_home, .read = k == 1};
		p[k].us[0] = buf + (size_t)(2 * k) * PROBE_SAMPLES;
		p[k].us[1] = buf + (size_t)(2 * k + 1) * PROBE_SAMPLES;
		if (pthread_create(&p[k].th, NULL, probe_thread, &p[k]))
			die("thread", SB_ERR_NOMEM);
	}
}

static void probes_join(struct probe *p)
{
	atomic_store(&phase, PH_END);
	for (int k = 0; k < PROBES; k++)
		pthread_join(p[k].th, NULL);
	for (int k = 0; k < PROBES; k++)
		if (p[k].rc)
			fail("%s: %s", probe_names[k], p[k].err);
}

/* What load_runs measured besides the probers' latencies. */
struct load {
	double create_s;   /* the slowest run.create to be answered */
	double events_s;   /* agent.output events/s recorded per flooding guest */
	double bytes_s;    /* their bytes of output/s */
};

/* Starts LOAD_RUNS runs at once (the first FLOODERS flood their output),
 * waits for every flood to begin and lasts through the window; fills l. */
static void load_runs(const char *home, struct load *l)
{
	struct creator cr[LOAD_RUNS];
	struct window w;
	sb_client *c;
	int rc;

	for (int k = 0; k < LOAD_RUNS; k++) {
		cr[k] = (struct creator){.home = home, .cmd = k < FLOODERS ? FLOOD_CMD : IDLE_CMD};
		if (pthread_create(&cr[k].th, NULL, create_thread, &cr[k]))
			die("thread", SB_ERR_NOMEM);
	}
	for (int k = 0; k < LOAD_RUNS; k++)
		pthread_join(cr[k].th, NULL);
	for (int k = 0; k < LOAD_RUNS; k++) {
		if (cr[k].rc)
			fail("%s", cr[k].err);
		l->create_s = cr[k].secs > l->create_s ? cr[k].secs : l->create_s;
	}
	if ((rc = sb_client_open(home, NULL, &c)))
		die("client", rc);
	for (int k = 0; k < FLOODERS; k++)
		if ((rc = run_wait_event(c, cr[k].run, "agent.output", 300)))
			die("flood", rc);
	usleep((FLOOD_SKIP_S + FLOOD_S) * 1000000u + 500000u);
	atomic_store(&phase, PH_WARM); /* the load is over: samples no longer kept */
	for (int k = 0; k < FLOODERS; k++) {
		window_count(c, home, cr[k].run, "agent.output", &w);
		l->events_s += (double)w.n / FLOOD_S / FLOODERS;
		l->bytes_s += (double)w.bytes / FLOOD_S / FLOODERS;
	}
	sb_client_close(c);
}

/* The baseline's server: accepts on a unix socket and answers each
 * request of nng's req/rep wire (SPEC.md, "Sockets") with {ok: true}, one
 * connection at a time, until the socket is shut down. */
struct echo {
	int lfd;
	pthread_t th;
};

/* Serves one connection: the 8-byte header, then request frames (type 1,
 * 8-byte length, the request id, the body) each answered in place. */
static void echo_serve(int fd)
{
	static const uint8_t ok[] = {0x81, 0xa2, 'o', 'k', 0xc3};
	uint8_t hdr[SB_SPWIRE_HEADER], peer[SB_SPWIRE_HEADER], head[9];
	uint8_t out[SB_SPWIRE_REPLY_HEAD + sizeof ok], *body = NULL;
	size_t n;

	sb_spwire_header_put(hdr, SB_SP_PROTO_REP);
	if (write(fd, hdr, sizeof hdr) != sizeof hdr || fdio_read_full(fd, peer, sizeof peer))
		return;
	while (fdio_read_full(fd, head, sizeof head) == 0 && head[0] == 1) {
		uint64_t len = sb_be64_get(head + 1);
		if (len < 4 || len > 1 << 20 || !(body = realloc(body, len)) ||
		    fdio_read_full(fd, body, len))
			break;
		/* the request id is the backtrace: one hop */
		n = sb_spwire_reply_put(out, 0, body, 4, sizeof ok);
		memcpy(out + n, ok, sizeof ok);
		if (write(fd, out, n + sizeof ok) != (ssize_t)(n + sizeof ok))
			break;
	}
	free(body);
}

static void *echo_thread(void *arg)
{
	struct echo *e = arg;
	int fd;

	while (sb_unix_accept(e->lfd, -1, &fd) == SB_OK) {
		echo_serve(fd);
		close(fd);
	}
	return NULL;
}

/* Starts the echo server on home/api.sock (home: a directory of this
 * bench). */
static void echo_start(struct echo *e, const char *home)
{
	char path[PATH_MAX + 16];
	int rc;

	snprintf(path, sizeof path, "%s/api.sock", home);
	if ((rc = sb_unix_listen(path, &e->lfd)))
		die("echo socket", rc);
	if (pthread_create(&e->th, NULL, echo_thread, e))
		die("thread", SB_ERR_NOMEM);
}

static void echo_stop(struct echo *e)
{
	shutdown(e->lfd, SHUT_RDWR); /* ends the accept */
	pthread_join(e->th, NULL);
	close(e->lfd);
}

/* Latency of health and events.read of a daemon, and of the echo server
 * beside them, idle and under load (see the top of this file); the load
 * only when the shell template can be had. Returns whether it could. */
static int bench_load(void)
{
	uint32_t *buf = calloc(2 * PROBES * (size_t)PROBE_SAMPLES, sizeof *buf);
	struct load l = {0};
	struct probe p[PROBES];
	struct echo e;
	msgpack_sbuffer pl;
	char why[512], name[64];
	double idle[PROBES], load[PROBES];
	char *home, echo_dir[PATH_MAX];
	int vm, rc;

	if (!buf)
		die("memory", SB_ERR_NOMEM);
	home = home_new(0, "/tmp");
	snprintf(echo_dir, sizeof echo_dir, "%s/echo", home);
	if (mkdir(echo_dir, 0700))
		die(echo_dir, SB_ERR_IO);
	echo_start(&e, echo_dir);
	seed_run(home, RUN_READ);
	make_output_payload(&pl);
	seed(home, RUN_READ, "agent.output", &pl, READ_EVENTS);
	msgpack_sbuffer_destroy(&pl);
	vm = template_ready(home, why, sizeof why);
	sync(); /* what earlier parts left for the disk is not this part's idle */
	daemon_spawn(0);
	if ((rc = daemon_wait(home, 60)))
		die("sanboxd did not start", rc);
	atomic_store(&phase, PH_WARM);
	probes_start(p, home, echo_dir, buf);
	sleep(1);
	atomic_store(&phase, PH_IDLE);
	sleep(IDLE_S);
	if (vm) {
		atomic_store(&phase, PH_LOAD);
		load_runs(home, &l);
	}
	probes_join(p);
	echo_stop(&e);
	for (int k = 0; k < PROBES; k++)
		idle[k] = report_lat(probe_names[k], p[k].us[0], p[k].n[0], "idle", 1);
	for (int k = 0; vm && k < PROBES; k++)
		load[k] = report_lat(probe_names[k], p[k].us[1], p[k].n[1], "load", 1);
	for (int k = 0; k < 2; k++) {
		snprintf(name, sizeof name, "api.%s_p99_idle_vs_echo", probe_names[k]);
		report(name, idle[k] / idle[2], "x");
		if (!vm)
			continue;
		snprintf(name, sizeof name, "api.%s_p99_load_vs_echo", probe_names[k]);
		report(name, load[k] / load[2], "x");
		snprintf(name, sizeof name, "api.%s_p99_load_vs_idle", probe_names[k]);
		report(name, load[k] / idle[k], "x");
	}
	if (vm) {
		report("api.run_create_slowest_of_8", l.create_s, "s");
		report("api.guest_events_per_s", l.events_s, "events/s");
		report("api.guest_output_bytes_per_s", l.bytes_s, "B/s");
	}

	if (!vm)
		fprintf(stderr, "bench_api: no shell template (%s): the load figures are skipped\n",
			why);
	daemon_stop_runs(0);
	cleanup();
	free(buf);
	return vm;
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

/* One guest writing event lines to $SANBOX_EVENTS as fast as it can, with
 * the daemon's guest event limits raised: the daemon's own ceiling, or the
 * guest's; the daemon's CPU over the window says which. */
static void bench_guest_ceiling(void)
{
	struct creator cr = {0};
	char path[PATH_MAX + 16];
	struct window w;
	double cpu;
	sb_client *c;
	FILE *f;
	int rc;

	cr.home = home_new(0, "/tmp");
	cr.cmd = LINES_CMD;
	snprintf(path, sizeof path, "%s/sanboxd.json", cr.home);
	if (!(f = fopen(path, "w")))
		die(path, SB_ERR_IO);
	fprintf(f, "{\"runs\": {\"guest_events_per_s\": 1000000, "
		   "\"guest_events_burst\": 10000000}}\n");
	fclose(f);
	daemon_spawn(0);
	if ((rc = daemon_wait(cr.home, 60)))
		die("sanboxd did not start", rc);
	create_thread(&cr);
	if (cr.rc)
		fail("%s", cr.err);
	if ((rc = sb_client_open(cr.home, NULL, &c)))
		die("client", rc);
	if ((rc = run_wait_event(c, cr.run, "agent.turn.started", 300)))
		die("event lines", rc);
	usleep(FLOOD_SKIP_S * 1000000u);
	cpu = cpu_secs(daemons[0]);
	usleep(FLOOD_S * 1000000u);
	cpu = cpu_secs(daemons[0]) - cpu;
	usleep(500000);
	window_count(c, cr.home, cr.run, "agent.turn.started", &w);
	sb_client_close(c);
	report("api.guest_events_per_s_raised_limits", (double)w.n / FLOOD_S, "events/s");
	report("api.guest_events_raised_limits_daemon_cpu", 100 * cpu / FLOOD_S, "%");
	daemon_stop_runs(0);
	cleanup();
}

static int argc_;
static char **argv_;

/* Whether part is to run: named in the arguments, or there are none. */
static int part(const char *name)
{
	for (int i = 1; i < argc_; i++)
		if (!strcmp(argv_[i], name))
			return 1;
	return argc_ < 2;
}

/* Publish-to-receive latency, the state in memory (fast: a directory on
 * /dev/shm, or /tmp). The subscriber processes are forked before this
 * process touches nng. */
static void part_latency(const char *fast)
{
	struct procs procs;
	char *home = home_new(0, fast);
	int rc;

	seed_run(home, RUN_LAT1);
	seed_run(home, RUN_LAT64);
	seed_run(home, RUN_PROC);
	daemon_spawn(0);
	procs_fork(home, &procs);
	if ((rc = daemon_wait(home, 60)))
		die("sanboxd did not start", rc);
	wait_ready(procs.ready, SUBS);
	lat_write(home, RUN_PROC, LAT_EVENTS, LAT_GAP_US);
	procs_finish(&procs);
	bench_latency_threads(home, RUN_LAT1, 1, LAT_EVENTS, "1sub");
	bench_latency_threads(home, RUN_LAT64, SUBS, LAT_EVENTS, "64sub");
	daemon_stop(0);
	cleanup();
}

/* Latency and append rate with the state on disk. */
static void part_disk(void)
{
	char *home = home_new(0, "/tmp");
	int rc;

	seed_run(home, RUN_LAT1);
	daemon_spawn(0);
	if ((rc = daemon_wait(home, 60)))
		die("sanboxd did not start", rc);
	bench_latency_threads(home, RUN_LAT1, 1, DISK_EVENTS, "1sub_disk");
	report("api.append_durable_disk", lat_write(home, RUN_LAT1, DISK_EVENTS, 0), "events/s");
	daemon_stop(0);
	cleanup();
}

/* Catch-up over 1,000,000 events. */
static void part_catchup(void)
{
	char *home = home_new(1, "/tmp");
	msgpack_sbuffer pl;
	int rc;

	seed_run(home, RUN_BIG);
	make_tool_payload(&pl);
	seed(home, RUN_BIG, "agent.tool.completed", &pl, CATCHUP_EVENTS - 1);
	msgpack_sbuffer_destroy(&pl);
	daemon_spawn(1);
	if ((rc = daemon_wait(home, 600)))
		die("sanboxd did not start", rc);
	/* the daemon's reconciliation adds run.failed and run.stopped */
	catchup(home, RUN_BIG, CATCHUP_EVENTS + 2); /* warm the page cache */
	report("api.catchup", catchup_best(home, RUN_BIG, CATCHUP_EVENTS + 2), "events/s");
	report("api.catchup_all", catchup_best(home, "", CATCHUP_EVENTS + 2), "events/s");
	daemon_stop(1);
	cleanup();
}

int main(int argc, char **argv)
{
	struct stat st;
	const char *fast = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
	char exe[PATH_MAX];

	argc_ = argc;
	argv_ = argv;
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "latency") && strcmp(argv[i], "disk") &&
		    strcmp(argv[i], "catchup") && strcmp(argv[i], "load"))
			fail("no part %s: the parts are latency, disk, catchup and load", argv[i]);
	signals_init();
	build_dir(exe, sizeof exe - 16);
	strcat(exe, "/templates");
	setenv("SANBOX_TEMPLATES", exe, 1); /* for the daemons and template build */
	if (part("latency"))
		part_latency(fast);
	if (part("disk"))
		part_disk();
	if (part("catchup"))
		part_catchup();
	/* health and events.read idle and under load; guest event rates */
	if (part("load") && bench_load())
		bench_guest_ceiling();
	return 0;
}
