/* bench_log.c - benchmarks of the event log and projections.
 *
 * On 1,000,000 events of realistic size (agent.tool.completed with a
 * 150-character args string, about 190 bytes of payload, over 100 runs):
 * durable batched appends against raw LMDB puts of the same record bytes,
 * durable single-event appends from 1, 4 and 16 threads, replay (iterate,
 * check and decode) against a raw LMDB cursor walk (reading one byte of
 * each record; and, to show where replay's time goes, reading every byte
 * and checking every record's checksum, plainly: without the log's hint to
 * fetch the next records ahead), in 5 rounds taking turns, medians; and a
 * projection rebuild; then
 * the blob key's speed (BLAKE2b-256 over 1 MiB) and durable appends of an
 * event with two 64 KiB bodies (a model call's record). Works in
 * a temporary directory under /tmp and removes it. Prints only lines
 * "bench NAME VALUE UNIT"; errors go to stderr with exit status 1.
 *
 * The machine may be busy with other work and a disk's sync time drifts, so
 * what is compared in a ratio is measured interleaved: log and raw batches
 * alternate, and the writer counts take turns in short windows.
 */
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "engine/error.h"
#include "engine/log/log.h"
#include "engine/payload.h"
#include "tests/bench/benchraw.h"
#include "tests/bench/benchutil.h"
#include "projections/projection.h"

#define EVENTS 1000000
#define BATCH BENCHRAW_BATCH
#define RUNS 100
#define ARGS_LEN 150
#define COMMIT_SECONDS 2.0 /* per writer count, in all */
#define COMMIT_ROUNDS 8
#define REPLAY_ROUNDS 5 /* reads: the median of this many, each kind in turn */

static char tmpdir[] = "/tmp/sb-bench-XXXXXX";
static char run_ids[RUNS][SB_RUN_MAX];
static msgpack_sbuffer payloads[BATCH]; /* payload of event i is payloads[i % BATCH] */

static void cleanup(void)
{
	bench_rmrf(tmpdir);
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "bench_log: %s: %s\n", what, rc ? sb_errmsg(rc) : "failed");
	cleanup();
	exit(1);
}

static void die_mdb(const char *what, int rc)
{
	fprintf(stderr, "bench_log: %s: %s\n", what, mdb_strerror(rc));
	cleanup();
	exit(1);
}

static void report(const char *name, double value, const char *unit)
{
	printf("bench %s %.*f %s\n", name, value < 100 ? 2 : 0, value, unit);
	fflush(stdout);
}

/* Makes a subdirectory of the temporary directory; returns its path. */
static char *subdir(const char *name)
{
	static char paths[4][512];
	static int n;
	char *p = paths[n++ % 4];

	snprintf(p, sizeof paths[0], "%s/%s", tmpdir, name);
	if (mkdir(p, 0700))
		die(p, SB_ERR_IO);
	return p;
}

static void make_payloads(void)
{
	char args[ARGS_LEN + 1];

	for (int i = 0; i < RUNS; i++)
		snprintf(run_ids[i], sizeof run_ids[i], "%012x", 0xa0b0c0u + (unsigned)i * 7919u);
	for (int i = 0; i < BATCH; i++) {
		msgpack_packer pk;
		int n = snprintf(args, sizeof args, "rg -n --hidden 'TODO|FIXME' src/module_%04d ", i);
		for (int k = n; k < ARGS_LEN; k++)
			args[k] = (char)('a' + (k * 7 + i) % 26);
		args[ARGS_LEN] = 0;
		msgpack_sbuffer_init(&payloads[i]);
		msgpack_packer_init(&pk, &payloads[i], msgpack_sbuffer_write);
		msgpack_pack_map(&pk, 4);
		sb_pack_kstr(&pk, "tool", "bash");
		sb_pack_kstr(&pk, "args", args);
		sb_pack_ki64(&pk, "exit", i % 3 - 1);
		sb_pack_ku64(&pk, "duration_ms", 1000u + (unsigned)i * 37u);
	}
}

static void event_fill(struct sb_event *ev, uint64_t i)
{
	const msgpack_sbuffer *pl = &payloads[i % BATCH];
	int rc = sb_event_init(ev, "agent.tool.completed", run_ids[i % RUNS], SB_SRC_HARNESS,
			       pl->data, pl->size);

	if (rc)
		die("event", rc);
}

/* bench log.append_batched and lmdb.put_batched: 1000 batches of 1000
 * durable events, each batch appended to the log and then its stored record
 * bytes put into a raw LMDB environment (one synced transaction of
 * MDB_APPEND puts, no run index) on the same disk. The two alternate batch
 * by batch, so both see the same disk and the same load from other work;
 * *append and *put get events/s of each. */
static void bench_append_vs_put(sb_log *log, const char *rawdir, double *append, double *put)
{
	struct sb_event *evs = calloc(BATCH, sizeof *evs);
	struct bench_records *r = malloc(sizeof *r);
	double t_log = 0, t_raw = 0, t0;
	MDB_env *env;
	MDB_dbi dbi;
	uint64_t last;
	int rc;

	if (!evs || !r || !(r->data = malloc(r->cap = (size_t)BATCH * 512)))
		die("memory", SB_ERR_NOMEM);
	if ((rc = bench_raw_open(rawdir, 0, &env, &dbi)))
		die_mdb("raw env", rc);
	for (uint64_t b = 0; b < EVENTS / BATCH; b++) {
		for (uint64_t i = 0; i < BATCH; i++)
			event_fill(&evs[i], b * BATCH + i);
		t0 = bench_now();
		if ((rc = sb_log_append(log, evs, BATCH)))
			die("append", rc);
		t_log += bench_now() - t0;
		if ((rc = bench_raw_copy(sb_log_env(log), evs[0].offset, r)))
			die_mdb("copy records", rc);
		t0 = bench_now();
		if ((rc = bench_raw_put(env, dbi, r)))
			die_mdb("raw put", rc);
		t_raw += bench_now() - t0;
	}
	mdb_env_close(env);
	free(r->data);
	free(r);
	free(evs);
	if (sb_log_last_offset(log, &last) || last != EVENTS)
		die("append: wrong number of events", 0);
	*append = EVENTS / t_log;
	*put = EVENTS / t_raw;
}

/* Durable single-event appends from several threads for a fixed time. */
struct committer {
	sb_log *log;
	int id;
	atomic_int *stop;
	uint64_t appends;
};

static void *commit_loop(void *arg)
{
	struct committer *c = arg;
	struct sb_event ev;
	uint64_t i = (uint64_t)c->id;
	int rc;

	while (!atomic_load(c->stop)) {
		event_fill(&ev, i);
		if ((rc = sb_log_append(c->log, &ev, 1)))
			die("commit", rc);
		c->appends++;
		i += 16;
	}
	return NULL;
}

/* What one writer count did over all its windows. */
struct commit_total {
	int threads;
	uint64_t appends, commits;
	double secs;
};

/* Runs tot->threads writers for one window of secs and adds to *tot. */
static void commit_window(sb_log *log, struct commit_total *tot, double secs)
{
	struct committer c[16];
	pthread_t tid[16];
	atomic_int stop = 0;
	MDB_envinfo info;
	size_t txn0;
	double t0;

	mdb_env_info(sb_log_env(log), &info);
	txn0 = info.me_last_txnid;
	t0 = bench_now();
	for (int i = 0; i < tot->threads; i++) {
		c[i] = (struct committer){log, i, &stop, 0};
		if (pthread_create(&tid[i], NULL, commit_loop, &c[i]))
			die("thread", SB_ERR_NOMEM);
	}
	while (bench_now() - t0 < secs)
		usleep(10000);
	atomic_store(&stop, 1);
	for (int i = 0; i < tot->threads; i++) {
		pthread_join(tid[i], NULL);
		tot->appends += c[i].appends;
	}
	tot->secs += bench_now() - t0;
	mdb_env_info(sb_log_env(log), &info);
	tot->commits += info.me_last_txnid - txn0;
}

/* bench log.commit_durable_w*: 1, 4 and 16 writers take turns in windows
 * of COMMIT_SECONDS / COMMIT_ROUNDS, COMMIT_ROUNDS times each, so the
 * ratios between them compare the same disk under the same load. */
static void bench_commits(sb_log *log, struct commit_total *tot, int n)
{
	for (int r = 0; r < COMMIT_ROUNDS; r++)
		for (int i = 0; i < n; i++)
			commit_window(log, &tot[i], COMMIT_SECONDS / COMMIT_ROUNDS);
}

/* bench log.replay: iterate and decode (checksum included) every event. */
static double bench_replay(sb_log *log)
{
	sb_log_iter *it;
	struct sb_event ev;
	uint64_t n = 0, bytes = 0;
	double t0, t;
	int rc;

	t0 = bench_now();
	if ((rc = sb_log_iter_open(log, 1, &it)))
		die("replay", rc);
	while ((rc = sb_log_iter_next(it, &ev)) == SB_OK) {
		bytes += ev.payload_len + ev.seq;
		n++;
	}
	sb_log_iter_close(it);
	t = bench_now() - t0;
	if (rc != SB_END || n != EVENTS || !bytes)
		die("replay: wrong count", rc < 0 ? rc : 0);
	return EVENTS / t;
}

/* What a raw cursor walk does with each record: reads its first byte (the
 * baseline: what LMDB's walk costs), reads every byte (the least a reader
 * that hands out the payload, or checks it, must do), or computes the
 * record's checksum as the log's reader does (XXH3 over all but its last 8
 * bytes). */
enum walk { WALK_FIRST, WALK_ALL, WALK_CHECKSUM };

static uint64_t walk_record(enum walk how, const MDB_val *v)
{
	const uint8_t *p = v->mv_data;
	uint64_t sum = 0, w;

	switch (how) {
	case WALK_FIRST: return v->mv_size + p[0];
	case WALK_ALL:
		for (size_t i = 0; i + 8 <= v->mv_size; i += 8) {
			memcpy(&w, p + i, 8);
			sum += w;
		}
		return sum + 1;
	case WALK_CHECKSUM: return XXH3_64bits(p, v->mv_size - 8) | 1;
	}
	return 0;
}

/* bench lmdb.replay*: a raw cursor walk over the same records. */
static double bench_lmdb_replay(MDB_env *env, enum walk how)
{
	MDB_txn *txn;
	MDB_cursor *c;
	MDB_dbi dbi;
	MDB_val k, v;
	uint64_t n = 0, bytes = 0;
	double t0, t;
	int rc;

	t0 = bench_now();
	if ((rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn)) ||
	    (rc = mdb_dbi_open(txn, "events", 0, &dbi)) || (rc = mdb_cursor_open(txn, dbi, &c)))
		die_mdb("raw replay", rc);
	while (!mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		bytes += walk_record(how, &v);
		n++;
	}
	mdb_cursor_close(c);
	mdb_txn_abort(txn);
	t = bench_now() - t0;
	if (n != EVENTS || !bytes)
		die("raw replay: wrong count", 0);
	return EVENTS / t;
}

/* The read rates, events/s: the log's replay and the raw walks. */
struct reads {
	double replay, first, all, checksum;
};

/* bench log.replay and lmdb.replay*: REPLAY_ROUNDS rounds, each a raw walk
 * reading first bytes, a replay, a raw walk reading every byte and one
 * checking every checksum, in turn, so all see the same load; out gets
 * each one's median. Reads run on a warm page cache: walks once untimed. */
static void bench_reads(sb_log *log, struct reads *out)
{
	double first[REPLAY_ROUNDS], replay[REPLAY_ROUNDS], all[REPLAY_ROUNDS],
	    checksum[REPLAY_ROUNDS];

	bench_lmdb_replay(sb_log_env(log), WALK_FIRST);
	for (int r = 0; r < REPLAY_ROUNDS; r++) {
		first[r] = bench_lmdb_replay(sb_log_env(log), WALK_FIRST);
		replay[r] = bench_replay(log);
		all[r] = bench_lmdb_replay(sb_log_env(log), WALK_ALL);
		checksum[r] = bench_lmdb_replay(sb_log_env(log), WALK_CHECKSUM);
	}
	out->first = bench_median(first, REPLAY_ROUNDS);
	out->replay = bench_median(replay, REPLAY_ROUNDS);
	out->all = bench_median(all, REPLAY_ROUNDS);
	out->checksum = bench_median(checksum, REPLAY_ROUNDS);
}

/* bench blob.hash: sb_blob_hash over 1 MiB, in MiB/s. */
static double bench_blob_hash(void)
{
	size_t len = 1u << 20;
	uint8_t *buf = malloc(len), h[SB_HASH_LEN];
	double t0, t;
	int n = 0;

	if (!buf)
		die("blob hash", SB_ERR_NOMEM);
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(i * 131 + 7);
	t0 = bench_now();
	do {
		buf[0] = (uint8_t)n++;
		sb_blob_hash(buf, len, h);
	} while ((t = bench_now() - t0) < 0.5);
	free(buf);
	return n / t;
}

/* bench log.append_blobs_64k: durable appends of one event with two
 * distinct 64 KiB blobs, one writer, for a second. */
static double bench_append_blobs(sb_log *log)
{
	size_t len = 64u << 10;
	char *a = malloc(len), *b = malloc(len);
	struct sb_blob bl[2] = {{a, len}, {b, len}};
	struct sb_event ev;
	uint64_t n = 0;
	double t0, t;
	int rc;

	if (!a || !b)
		die("append blobs", SB_ERR_NOMEM);
	memset(a, 'q', len);
	memset(b, 'r', len);
	t0 = bench_now();
	do {
		memcpy(a, &n, sizeof n);
		memcpy(b, &n, sizeof n);
		event_fill(&ev, n++);
		if ((rc = sb_log_append_blobs(log, bl, 2, &ev, 1)))
			die("append blobs", rc);
	} while ((t = bench_now() - t0) < 1.0);
	free(a);
	free(b);
	return (double)n / t;
}

int main(void)
{
	sb_log *log, *clog;
	sb_projector *p;
	struct commit_total w[3] = {{.threads = 1}, {.threads = 4}, {.threads = 16}};
	struct reads rd;
	double append, put, rate[3], t0, rebuild;
	char *logdir, *rawdir, *commitdir, *blobdir;
	int rc;

	if (!mkdtemp(tmpdir))
		die("mkdtemp", SB_ERR_IO);
	make_payloads();
	logdir = subdir("log");
	rawdir = subdir("raw");
	commitdir = subdir("commit");
	blobdir = subdir("blobs");

	if ((rc = sb_log_open(logdir, 0, &log)))
		die("open", rc);
	bench_append_vs_put(log, rawdir, &append, &put);
	report("log.append_batched", append, "events/s");
	report("lmdb.put_batched", put, "events/s");
	report("log.append_batched_vs_lmdb", append / put, "ratio");

	if ((rc = sb_log_open(commitdir, 0, &clog)))
		die("open", rc);
	bench_commits(clog, w, 3);
	for (int i = 0; i < 3; i++)
		rate[i] = (double)w[i].appends / w[i].secs;
	report("log.commit_durable_w1", rate[0], "commits/s");
	report("log.commit_durable_w4", rate[1], "commits/s");
	report("log.commit_durable_w16", rate[2], "commits/s");
	report("log.commit_w16_vs_w1", rate[2] / rate[0], "ratio");
	report("log.commit_group_w1", (double)w[0].appends / (double)w[0].commits, "appends/commit");
	report("log.commit_group_w4", (double)w[1].appends / (double)w[1].commits, "appends/commit");
	report("log.commit_group_w16", (double)w[2].appends / (double)w[2].commits, "appends/commit");
	sb_log_close(clog);

	bench_reads(log, &rd);
	report("log.replay", rd.replay, "events/s");
	report("lmdb.replay", rd.first, "events/s");
	report("log.replay_vs_lmdb", rd.replay / rd.first, "ratio");
	/* where the rest goes: reading every byte, then checking them */
	report("lmdb.replay_read_all", rd.all, "events/s");
	report("lmdb.replay_checksum", rd.checksum, "events/s");
	report("lmdb.replay_read_all_vs_lmdb", rd.all / rd.first, "ratio");
	report("log.replay_vs_checksum_walk", rd.replay / rd.checksum, "ratio");

	if ((rc = sb_projector_open(log, &p)))
		die("projector", rc);
	t0 = bench_now();
	if ((rc = sb_projector_rebuild(p)))
		die("rebuild", rc);
	rebuild = EVENTS / (bench_now() - t0);
	if (sb_projector_checkpoint(p) != EVENTS)
		die("rebuild: wrong checkpoint", 0);
	report("projections.rebuild", rebuild, "events/s");
	sb_projector_close(p);
	sb_log_close(log);

	report("blob.hash", bench_blob_hash(), "MiB/s");
	if ((rc = sb_log_open(blobdir, 0, &clog)))
		die("open", rc);
	report("log.append_blobs_64k", bench_append_blobs(clog), "appends/s");
	sb_log_close(clog);
	for (int i = 0; i < BATCH; i++)
		msgpack_sbuffer_destroy(&payloads[i]);
	cleanup();
	return 0;
}
