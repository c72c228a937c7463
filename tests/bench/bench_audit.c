/* bench_audit.c - benchmarks of the audit tree and bundles.
 *
 * Appends 11,000 events (agent.tool.completed, about 190 bytes of payload)
 * in batches of 1000: run A has 10,000 of them, run B every 11th, so B's
 * 1,000 events lie scattered in the tree. Each batch's durable append is
 * timed, then its fold into the tree (projection `tree`, in a write
 * transaction of its own, as the projector does), interleaved, in this one
 * process: their ratio is what the tree adds to an append. Then it exports
 * B (1,000 events) and A (10,000) and reports each bundle's bytes, its
 * proof's bytes and the time `verify` takes. Works in a temporary
 * directory under /tmp and removes it. Prints only lines "bench NAME VALUE
 * UNIT"; errors go to stderr with exit status 1.
 */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/error.h"
#include "engine/log/bundle.h"
#include "engine/log/log.h"
#include "engine/payload.h"
#include "projections/projection.h"
#include "projections/tree.h"
#include "tests/bench/benchutil.h"

#define EVENTS 11000
#define BATCH 1000
#define B_EVERY 11 /* run B's events: one in this many */

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
	if (mdb_txn_commit(t.txn))
		die("tree: commit", SB_ERR_IO);
}

/* Appends the events; returns the seconds spent appending and, in *tree,
 * folding them into the tree. */
static double append_all(sb_log *log, double *tree)
{
	static struct sb_event evs[BATCH];
	double t_app = 0, t0;
	int rc;

	*tree = 0;
	for (uint64_t b = 0; b < EVENTS / BATCH; b++) {
		for (uint64_t i = 0; i < BATCH; i++)
			if ((rc = sb_event_init(&evs[i], "agent.tool.completed",
						(b * BATCH + i) % B_EVERY ? run_a : run_b,
						SB_SRC_HARNESS, payload.data, payload.size)))
				die("event", rc);
		t0 = bench_now();
		if ((rc = sb_log_append(log, evs, BATCH)))
			die("append", rc);
		t_app += bench_now() - t0;
		t0 = bench_now();
		tree_fold(log, evs[0].offset);
		*tree += bench_now() - t0;
	}
	return t_app;
}

static int add_size(const char *path, const struct stat *st, int flag)
{
	if (flag == FTW_F)
		bytes_total += (uint64_t)st->st_size;
	return 0;
}

/* Exports run, reports its bundle's and proof's bytes and verify's time. */
static void export_one(sb_log *log, const struct sb_note_key *key, const char *run,
		       const char *label)
{
	const char *runs[] = {run};
	struct sb_export x = {.runs = runs, .nruns = 1, .key = key};
	struct sb_bundle_info info;
	char dir[256], path[300], name[64];
	struct stat st;
	double t0;
	int rc;

	snprintf(dir, sizeof dir, "%s/%s", tmpdir, label);
	if (mkdir(dir, 0700))
		die(dir, SB_ERR_IO);
	if ((rc = sb_bundle_export(log, &x, dir, &info)))
		die("export", rc);
	bytes_total = 0;
	ftw(dir, add_size, 8);
	snprintf(path, sizeof path, "%s/proof", dir);
	if (stat(path, &st))
		die(path, SB_ERR_IO);
	snprintf(name, sizeof name, "audit.bundle_bytes_%s", label);
	report(name, (double)bytes_total, "bytes");
	snprintf(name, sizeof name, "audit.proof_bytes_%s", label);
	report(name, (double)st.st_size, "bytes");
	t0 = bench_now();
	if ((rc = sb_bundle_verify(dir, key, NULL, 0, &info)))
		die("verify", rc);
	snprintf(name, sizeof name, "audit.verify_%s", label);
	report(name, (bench_now() - t0) * 1000, "ms");
}

int main(void)
{
	struct sb_note_key key;
	char logdir[256];
	double app, tree;
	sb_log *log;
	int rc;

	if (!mkdtemp(tmpdir))
		die("mkdtemp", SB_ERR_IO);
	make_payload();
	snprintf(logdir, sizeof logdir, "%s/log", tmpdir);
	if (mkdir(logdir, 0700))
		die(logdir, SB_ERR_IO);
	if ((rc = sb_log_open(logdir, 0, &log)))
		die("open", rc);
	if ((rc = sb_key_load(tmpdir, 1, &key)))
		die("key", rc);
	app = append_all(log, &tree);
	report("audit.append", EVENTS / app, "events/s");
	report("audit.tree_fold", EVENTS / tree, "events/s");
	report("audit.append_with_tree_vs_without", (app + tree) / app, "ratio");
	export_one(log, &key, run_b, "1000");
	export_one(log, &key, run_a, "10000");
	sb_log_close(log);
	msgpack_sbuffer_destroy(&payload);
	bench_rmrf(tmpdir);
	return 0;
}
