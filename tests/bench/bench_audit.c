/* bench_audit.c - benchmarks of the audit tree and bundles.
 *
 * Appends 1,100,000 events (agent.tool.completed, about 190 bytes of
 * payload) in durable batches of 1000: run A has 1,000,000 of them, run B
 * every 11th, so B's 100,000 events lie scattered in the tree. Each batch's
 * stored record bytes are also put into a raw LMDB environment (the
 * baseline, tests/bench/benchraw.h), and every 10 batches the new events
 * are folded into the tree (projection `tree`) in one write transaction,
 * as the projector folds up to 10,000 at a time: appends with the tree
 * kept caught up against raw LMDB puts, measured interleaved. Then it
 * exports B and A and verifies each bundle, each in a process of its own
 * (this program run again as `bench_audit export|verify ...`), and reports
 * their rates, their peak memory (the child's own, sampled: not the pages
 * of the log it maps, which are the page cache's), and
 * the bundle's and its proof's bytes. Works in a temporary directory under
 * /tmp and removes it. Prints only lines "bench NAME VALUE UNIT"; errors
 * go to stderr with exit status 1.
 */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "audit/bundle.h"
#include "engine/error.h"
#include "engine/log/log.h"
#include "engine/payload.h"
#include "projections/projection.h"
#include "projections/tree.h"
#include "tests/bench/benchraw.h"
#include "tests/bench/benchutil.h"

#define EVENTS 1100000
#define BATCH BENCHRAW_BATCH
#define FOLD_EVERY 10 /* batches a tree fold takes, as the projector's 10,000 */
#define B_EVERY 11    /* run B's events: one in this many */

static char tmpdir[] = "/tmp/sb-bench-audit-XXXXXX";
static const char run_a[] = "a0a0a0a0a0a0", run_b[] = "b0b0b0b0b0b0";
static msgpack_sbuffer payload;
static uint64_t bytes_total;

static void die(const char *what, int rc)
{
	fprintf(stderr, "bench_audit: %s: %s\n", what, rc ? sb_errmsg(rc) : "failed");
	bench_rmrf(tmpdir);
	exit(1);
}

static void report(const char *name, double value, const char *unit)
{
	printf("bench %s %.*f %s\n", name, value < 100 ? 2 : 0, value, unit);
	fflush(stdout);
}

static void make_payload(void)
{
	char args[151];
	msgpack_packer pk;

	memset(args, 'x', sizeof args - 1);
	args[sizeof args - 1] = 0;
	msgpack_sbuffer_init(&payload);
	msgpack_packer_init(&pk, &payload, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 4);
	sb_pack_kstr(&pk, "tool", "bash");
	sb_pack_kstr(&pk, "args", args);
	sb_pack_ki64(&pk, "exit", 0);
	sb_pack_ku64(&pk, "duration_ms", 1234);
}

/* Folds the log's events from offset from on into the tree, in one write
 * transaction. */
static void tree_fold(sb_log *log, uint64_t from)
{
	struct sb_proj_txn t = {.log = log};
	struct sb_event ev;
	sb_log_iter *it;
	int rc;

	if ((rc = mdb_txn_begin(sb_log_env(log), NULL, 0, &t.txn)) ||
	    (rc = mdb_dbi_open(t.txn, "p.tree", MDB_CREATE, &t.dbi)))
		die("tree: begin", SB_ERR_IO);
	if ((rc = sb_log_iter_open(log, from, &it)))
		die("iter", rc);
	while ((rc = sb_log_iter_next(it, &ev)) == SB_OK)
		if ((rc = sb_proj_tree.apply_record(&t, &ev, NULL, 0)))
			die("tree: fold", rc);
	sb_log_iter_close(it);
	if (rc != SB_END)
		die("iter", rc);
	if ((rc = sb_proj_tree.end(&t, 1)))
		die("tree: end", rc);
	if (mdb_txn_commit(t.txn))
		die("tree: commit", SB_ERR_IO);
}

/* Appends the events, each batch also put raw into env's dbi, folding
 * them into the tree every FOLD_EVERY batches; the seconds each took go
 * to t[0] (appends), t[1] (tree folds) and t[2] (raw puts). */
static void append_all(sb_log *log, MDB_env *env, MDB_dbi dbi, double t[3])
{
	static struct sb_event evs[BATCH];
	static struct bench_records r;
	uint64_t fold_from = 1;
	double t0;
	int rc;

	if (!r.data && !(r.data = malloc(r.cap = (size_t)BATCH * 512)))
		die("memory", SB_ERR_NOMEM);
	t[0] = t[1] = t[2] = 0;
	for (uint64_t b = 0; b < EVENTS / BATCH; b++) {
		for (uint64_t i = 0; i < BATCH; i++)
			if ((rc = sb_event_init(&evs[i], "agent.tool.completed",
						(b * BATCH + i) % B_EVERY ? run_a : run_b,
						SB_SRC_HARNESS, payload.data, payload.size)))
				die("event", rc);
		t0 = bench_now();
		if ((rc = sb_log_append(log, evs, BATCH)))
			die("append", rc);
		t[0] += bench_now() - t0;
		if (bench_raw_copy(sb_log_env(log), evs[0].offset, &r))
			die("copy records", SB_ERR_IO);
		t0 = bench_now();
		if (bench_raw_put(env, dbi, &r))
			die("raw put", SB_ERR_IO);
		t[2] += bench_now() - t0;
		if ((b + 1) % FOLD_EVERY && b + 1 < EVENTS / BATCH)
			continue;
		t0 = bench_now();
		tree_fold(log, fold_from);
		t[1] += bench_now() - t0;
		fold_from = evs[BATCH - 1].offset + 1;
	}
	free(r.data);
}

static int add_size(const char *path, const struct stat *st, int flag)
{
	if (flag == FTW_F)
		bytes_total += (uint64_t)st->st_size;
	return 0;
}

/* The anonymous memory process pid has resident now (RssAnon), in KiB;
 * 0 when it cannot be read. */
static unsigned long long rss_anon(pid_t pid)
{
	char path[64], line[256];
	unsigned long long kib = 0;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	if (!(f = fopen(path, "re")))
		return 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "RssAnon: %llu", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

/* Runs this program again as `argv0 what ARGS...` and waits for it: its
 * seconds go to *secs, the peak of its own memory (RssAnon, sampled every
 * 5 ms: the log it maps is the page cache's, not its own) to *mib. */
static void child_run(const char *argv0, char *const args[], double *secs, double *mib)
{
	unsigned long long peak = 0, now;
	double t0 = bench_now();
	int status;
	pid_t pid, got;

	if ((pid = fork()) < 0)
		die("fork", SB_ERR_IO);
	if (pid == 0) {
		execv(argv0, args);
		_exit(127);
	}
	while ((got = waitpid(pid, &status, WNOHANG)) == 0) {
		if ((now = rss_anon(pid)) > peak)
			peak = now;
		usleep(5000);
	}
	if (got != pid || !WIFEXITED(status) || WEXITSTATUS(status))
		die(args[1], SB_ERR_IO);
	*secs = bench_now() - t0;
	*mib = (double)peak / 1024;
}

/* Exports run (nevents of it) in a child and verifies the bundle in
 * another; reports rates, peak memory, and the bundle's and proof's bytes. */
static void export_one(const char *argv0, const char *run, uint64_t nevents, const char *label)
{
	char dir[256], path[300], name[64];
	char *exp[] = {(char *)argv0, "export", tmpdir, (char *)run, dir, NULL};
	char *ver[] = {(char *)argv0, "verify", tmpdir, dir, NULL};
	double secs, mib;
	struct stat st;

	snprintf(dir, sizeof dir, "%s/%s", tmpdir, label);
	if (mkdir(dir, 0700))
		die(dir, SB_ERR_IO);
	child_run(argv0, exp, &secs, &mib);
	snprintf(name, sizeof name, "audit.export_%s", label);
	report(name, (double)nevents / secs, "events/s");
	snprintf(name, sizeof name, "audit.export_peak_%s", label);
	report(name, mib, "MiB");
	bytes_total = 0;
	ftw(dir, add_size, 8);
	snprintf(path, sizeof path, "%s/proof", dir);
	if (stat(path, &st))
		die(path, SB_ERR_IO);
	snprintf(name, sizeof name, "audit.bundle_bytes_%s", label);
	report(name, (double)bytes_total, "bytes");
	snprintf(name, sizeof name, "audit.proof_bytes_%s", label);
	report(name, (double)st.st_size, "bytes");
	snprintf(name, sizeof name, "audit.proof_bytes_per_event_%s", label);
	report(name, (double)st.st_size / (double)nevents, "bytes");
	child_run(argv0, ver, &secs, &mib);
	snprintf(name, sizeof name, "audit.verify_%s", label);
	report(name, (double)nevents / secs, "events/s");
	snprintf(name, sizeof name, "audit.verify_peak_%s", label);
	report(name, mib, "MiB");
}

/* The children: `export WORK RUN DIR` and `verify WORK DIR`. */
static int child_main(int argc, char **argv)
{
	struct sb_note_key key;
	struct sb_bundle_info info;
	char logdir[300];
	sb_log *log;
	int rc;

	if ((rc = sb_key_load(argv[2], 0, &key)))
		return fprintf(stderr, "bench_audit: key: %s\n", sb_errmsg(rc)), 1;
	if (!strcmp(argv[1], "verify") && argc == 4) {
		rc = sb_bundle_verify(argv[3], &key, NULL, 0, &info);
	} else if (!strcmp(argv[1], "export") && argc == 5) {
		const char *runs[] = {argv[3]};
		struct sb_export x = {.runs = runs, .nruns = 1, .key = &key};
		snprintf(logdir, sizeof logdir, "%s/log", argv[2]);
		if (!(rc = sb_log_open(logdir, SB_LOG_RDONLY, &log))) {
			rc = sb_bundle_export(log, &x, argv[4], &info);
			sb_log_close(log);
		}
	} else {
		return fprintf(stderr, "bench_audit: bad arguments\n"), 2;
	}
	if (rc)
		fprintf(stderr, "bench_audit %s: %s\n", argv[1], sb_errmsg(rc));
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct sb_note_key key;
	char logdir[256], rawdir[256];
	double t[3];
	sb_log *log;
	MDB_env *env;
	MDB_dbi dbi;
	int rc;

	if (argc > 1)
		return child_main(argc, argv);
	if (!mkdtemp(tmpdir))
		die("mkdtemp", SB_ERR_IO);
	make_payload();
	snprintf(logdir, sizeof logdir, "%s/log", tmpdir);
	snprintf(rawdir, sizeof rawdir, "%s/raw", tmpdir);
	if (mkdir(logdir, 0700) || mkdir(rawdir, 0700))
		die(logdir, SB_ERR_IO);
	if ((rc = sb_log_open(logdir, 0, &log)))
		die("open", rc);
	if ((rc = sb_key_load(tmpdir, 1, &key)))
		die("key", rc);
	if (bench_raw_open(rawdir, 0, &env, &dbi))
		die("raw env", SB_ERR_IO);
	append_all(log, env, dbi, t);
	mdb_env_close(env);
	report("audit.append", EVENTS / t[0], "events/s");
	report("audit.tree_fold", EVENTS / t[1], "events/s");
	report("lmdb.put_batched", EVENTS / t[2], "events/s");
	report("audit.append_with_tree_vs_without", t[0] / (t[0] + t[1]), "ratio");
	report("audit.append_with_tree_vs_lmdb", t[2] / (t[0] + t[1]), "ratio");
	sb_log_close(log);
	export_one("/proc/self/exe", run_b, EVENTS / B_EVERY, "100k");
	export_one("/proc/self/exe", run_a, EVENTS - EVENTS / B_EVERY, "1m");
	msgpack_sbuffer_destroy(&payload);
	bench_rmrf(tmpdir);
	return 0;
}
