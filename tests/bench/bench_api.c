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
 * Prints only lines "bench NAME VALUE UNIT"; errors go to stderr with exit
 * status 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/daemon/bus.h"
#include "engine/client.h"
#include "engine/error.h"
#include "engine/home.h"
#include "engine/log/log.h"
#include "engine/payload.h"
#include "tests/bench/benchutil.h"

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

static char homes[2][64];   /* removed at exit */
static pid_t daemons[2];    /* killed at exit */
static pid_t subs_pids[SUBS]; /* subscriber processes, killed at exit */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
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
			bench_rmrf(homes[i]);
			snprintf(log, sizeof log, "%s.log", homes[i]);
			unlink(log);
			homes[i][0] = 0;
		}
	}
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "bench_api: %s: %s\n", what, rc ? sb_errmsg(rc) : "failed");
	cleanup();
	exit(1);
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
	char exe[PATH_MAX], log[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	char *slash;

	if (n <= 0)
		die("readlink", SB_ERR_IO);
	exe[n] = 0;
	for (int k = 0; k < 2; k++) {
		if (!(slash = strrchr(exe, '/')))
			die("exe path", SB_ERR_IO);
		*slash = 0;
	}
	strcat(exe, "/sanboxd");
	if (access(exe, X_OK))
		die(exe, SB_ERR_NOTFOUND);
	snprintf(log, sizeof log, "%s.log", homes[i]);
	daemons[i] = fork();
	if (daemons[i] < 0)
		die("fork", SB_ERR_IO);
	if (daemons[i] == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl(exe, "sanboxd", "--home", homes[i], (char *)NULL);
		_exit(127);
	}
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
		sb_pack_kstr(&pk, "type", "agent.turn.started");
		sb_pack_str(&pk, "payload");
		msgpack_pack_map(&pk, 2);
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

/* Sorts the n latencies and reports p50 and p99 as NAME_p50_SUFFIX etc. */
static void report_lat(uint32_t *us, size_t n, const char *suffix)
{
	char name[64];

	qsort(us, n, sizeof *us, cmp_u32);
	snprintf(name, sizeof name, "api.latency_p50_%s", suffix);
	report(name, us[n / 2], "us");
	snprintf(name, sizeof name, "api.latency_p99_%s", suffix);
	report(name, us[n * 99 / 100], "us");
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
	report_lat(all, (size_t)nthreads * n, suffix);
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
	report_lat(p->us, (size_t)SUBS * LAT_EVENTS, "64proc");
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

int main(void)
{
	struct stat st;
	struct procs procs;
	msgpack_sbuffer pl;
	const char *fast = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
	char *home;
	int rc;

	signal(SIGPIPE, SIG_IGN);

	/* latency, state in memory */
	home = home_new(0, fast);
	seed_run(home, RUN_LAT1);
	seed_run(home, RUN_LAT64);
	seed_run(home, RUN_PROC);
	daemon_spawn(0);
	procs_fork(home, &procs); /* before this process touches nng */
	if ((rc = daemon_wait(home, 60)))
		die("sanboxd did not start", rc);
	wait_ready(procs.ready, SUBS);
	lat_write(home, RUN_PROC, LAT_EVENTS, LAT_GAP_US);
	procs_finish(&procs);
	bench_latency_threads(home, RUN_LAT1, 1, LAT_EVENTS, "1sub");
	bench_latency_threads(home, RUN_LAT64, SUBS, LAT_EVENTS, "64sub");
	daemon_stop(0);
	cleanup();

	/* latency and append rate with the state on disk */
	home = home_new(0, "/tmp");
	seed_run(home, RUN_LAT1);
	daemon_spawn(0);
	if ((rc = daemon_wait(home, 60)))
		die("sanboxd did not start", rc);
	bench_latency_threads(home, RUN_LAT1, 1, DISK_EVENTS, "1sub_disk");
	report("api.append_durable_disk", lat_write(home, RUN_LAT1, DISK_EVENTS, 0), "events/s");
	daemon_stop(0);
	cleanup();

	/* catch-up over 1,000,000 events */
	home = home_new(1, "/tmp");
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
	return 0;
}
