/* log.c - the LMDB event log with group commit, and its format upgrade. */
#include "engine/log/log.h"

#include <errno.h>
#include <sys/statvfs.h>
#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/bytes.h"
#include "engine/error.h"
#include "engine/log/mdb.h"
#include "engine/log/record.h"
#include "engine/log/schema.h"

#define LOG_FORMAT 3
#define LOG_FORMAT_BLOBS_XXH3 2 /* upgraded on a writable open */
#define KEYS_INLINE 4 /* blob keys a batch holds without allocating */
#define BLOCK 64 /* offsets per run index block */
#define TAIL_MAX (8 + 8 * BLOCK)
#define TAILS_MAX 256              /* runs a commit keeps in memory at once */
#define SLOTS (2 * TAILS_MAX)      /* their hash table */
#define GATHER_MAX_NS 2000000ull   /* the longest a leader waits for writers */
#define PREFETCH_MAX 1024          /* bytes a read hints ahead of the cursor */

/* One caller's batch waiting for a group commit. Its state moves from
 * WAITING to DONE (committed, or failed with rc) or LEAD (commit the next
 * group); the leader sets it under done_mu and wakes all waiters at once. */
enum { WAITING, DONE, LEAD };

struct pending {
	struct sb_event *evs;
	size_t n;
	const struct sb_blob *blobs; /* stored in the same commit, */
	const uint8_t *keys;         /* under these keys (SB_HASH_LEN each) */
	size_t nblobs;
	int rc;
	int state;
	struct pending *next;
};

/* A run's open index block while a group commits: the runtail value
 * (block number, then n offsets, all BE64), written back once per group. */
struct tail {
	char run[SB_RUN_MAX];
	unsigned n;
	uint8_t val[TAIL_MAX];
};

struct sb_log {
	MDB_env *env;
	MDB_dbi events, runtail, runidx, meta;
	MDB_dbi salts;  /* offset -> the record's leaf salt */
	int has_salts;  /* salts is open (a read-only open of a log without it: not) */
	struct sb_blob_table bt;
	unsigned flags;
	struct sb_log_upgrade upgrade; /* what the open did (from 0: nothing) */
	pthread_mutex_t mu;          /* the queue and the leader's role */
	pthread_mutex_t done_mu;     /* the states of queued batches */
	pthread_cond_t done_cv;      /* broadcast when states change */
	struct pending *head, *tail; /* waiting for the next commit */
	size_t queued;               /* batches in the queue */
	int committing;              /* a leader gathers, commits or has the role */
	int gathering;               /* it waits until queued reaches expect */
	uint64_t gathers;            /* gathers begun (which one is on) */
	size_t expect;               /* writers active at the end of the last commit */
	uint64_t commit_ns;          /* moving average of a commit's duration */
	uint64_t last_end;           /* when the last commit ended (monotonic) */
	struct tail *tails;          /* the leader's run tails (TAILS_MAX) */
	int16_t *slots;              /* hash of run -> tails index, -1 free */
	unsigned ntails;
	sb_log_hook hook;
	void *hook_ctx;
};

struct sb_log_iter {
	sb_log *log;
	MDB_txn *txn;
	MDB_cursor *cur;  /* events */
	int by_run;       /* iterating one run through its index */
	int own_txn;      /* txn was begun here and ends with the iterator */
	char run[SB_RUN_MAX];
	uint64_t block;   /* by_run: the loaded index block, its offsets, */
	uint64_t offs[BLOCK]; /* how many it holds, and the next one to read */
	unsigned nblock, pos;
	uint64_t at;      /* by_run: offset under the cursor (0: none) */
	uint64_t from;
	int started;
};


/* 1 when the file system of the log has (next to) no room left. */
static int disk_full(sb_log *log)
{
	const char *dir = NULL;
	struct statvfs st;

	if (mdb_env_get_path(log->env, &dir) || !dir || statvfs(dir, &st))
		return 0;
	return (uint64_t)st.f_bavail * st.f_frsize < (1u << 20);
}

static size_t map_size(void)
{
	const char *s = getenv("SANBOX_MAP_MIB");
	unsigned long long mib = s ? strtoull(s, NULL, 10) : 0;

	return (size_t)(mib ? mib : 64ull << 10) << 20; /* default 64 GiB, sparse */
}

/* Reads the format version into *fmt; a log without one is new: *fmt 0. */
static int format_get(sb_log *log, MDB_txn *txn, uint64_t *fmt)
{
	MDB_val k = {7, "version"}, v;
	int rc = mdb_get(txn, log->meta, &k, &v);

	*fmt = 0;
	if (rc == MDB_NOTFOUND)
		return SB_OK;
	if (rc)
		return sb_log_mdb_err(rc, "log: read format");
	if (v.mv_size != 8 || !sb_be64_get(v.mv_data))
		return sb_seterr(SB_ERR_CORRUPT, "log: format version malformed");
	*fmt = sb_be64_get(v.mv_data);
	return SB_OK;
}

static int format_put(sb_log *log, MDB_txn *txn, uint64_t fmt)
{
	uint8_t b[8];
	MDB_val k = {7, "version"}, v = {8, b};

	sb_be64_put(b, fmt);
	return sb_log_mdb_err(mdb_put(txn, log->meta, &k, &v, 0), "log: write format");
}

/* Opens the salts table (made when create is MDB_CREATE); a read-only
 * open of a log that has none goes on without it. */
static int salts_open(sb_log *log, MDB_txn *txn, unsigned create)
{
	int rc = mdb_dbi_open(txn, "salts", create, &log->salts);

	if (rc == MDB_NOTFOUND && !create)
		return SB_OK;
	log->has_salts = !rc;
	return sb_log_mdb_err(rc, "log: open salts");
}

/* Opens the databases and brings the log to LOG_FORMAT: a new log gets it,
 * a format-2 log opened for writing is upgraded in the same transaction
 * (its blobs re-keyed, nothing else touched), anything else is refused. */
static int open_dbs(sb_log *log)
{
	int rdonly = !!(log->flags & SB_LOG_RDONLY);
	unsigned create = rdonly ? 0 : MDB_CREATE;
	MDB_txn *txn = NULL;
	uint64_t fmt;
	int rc;

	if ((rc = mdb_txn_begin(log->env, NULL, rdonly ? MDB_RDONLY : 0, &txn))) {
		txn = NULL;
		rc = sb_log_mdb_err(rc, "log: begin");
		goto out;
	}
	if ((rc = mdb_dbi_open(txn, "events", create, &log->events)) ||
	    (rc = mdb_dbi_open(txn, "runtail", create, &log->runtail)) ||
	    (rc = mdb_dbi_open(txn, "runidx", create, &log->runidx)) ||
	    (rc = mdb_dbi_open(txn, "meta", create, &log->meta))) {
		rc = sb_log_mdb_err(rc, "log: open databases");
		goto out;
	}
	if ((rc = salts_open(log, txn, create)) || (rc = format_get(log, txn, &fmt)))
		goto out;
	if (fmt > LOG_FORMAT) {
		rc = sb_seterr(SB_ERR_CORRUPT, "log format %llu is newer than this build reads (%d)",
			       (unsigned long long)fmt, LOG_FORMAT);
		goto out;
	}
	if (fmt && fmt < LOG_FORMAT_BLOBS_XXH3) {
		rc = sb_seterr(SB_ERR_CORRUPT, "log format %llu is older than this build reads (%d and %d)",
			       (unsigned long long)fmt, LOG_FORMAT_BLOBS_XXH3, LOG_FORMAT);
		goto out;
	}
	if (!fmt && rdonly) {
		rc = sb_seterr(SB_ERR_CORRUPT, "log has no format version");
		goto out;
	}
	if (fmt == LOG_FORMAT_BLOBS_XXH3 && rdonly) {
		rc = sb_seterr(SB_ERR_STATE,
			       "log format %d cannot be read until it is upgraded to format %d: "
			       "sanboxd upgrades it on its next start",
			       LOG_FORMAT_BLOBS_XXH3, LOG_FORMAT);
		goto out;
	}
	if (fmt == LOG_FORMAT_BLOBS_XXH3) {
		/* blobmap is new in format 3 */
		if ((rc = sb_blob_table_open(txn, MDB_CREATE, &log->bt)) ||
		    (rc = sb_blob_table_upgrade(txn, &log->bt, &log->upgrade.blobs)))
			goto out;
		log->upgrade.from = LOG_FORMAT_BLOBS_XXH3;
		log->upgrade.to = LOG_FORMAT;
	} else if ((rc = sb_blob_table_open(txn, create, &log->bt))) {
		goto out;
	}
	if (fmt != LOG_FORMAT && (rc = format_put(log, txn, LOG_FORMAT)))
		goto out;
	rc = sb_log_mdb_err(mdb_txn_commit(txn), "log: commit");
	txn = NULL;
out:
	if (txn)
		mdb_txn_abort(txn);
	if (rc)
		log->upgrade.from = 0;
	return rc;
}

int sb_log_upgrade_get(sb_log *log, struct sb_log_upgrade *u)
{
	if (!log->upgrade.from)
		return 0;
	*u = log->upgrade;
	return 1;
}

int sb_log_open(const char *dir, unsigned flags, sb_log **out)
{
	unsigned envflags = MDB_NOTLS | MDB_NORDAHEAD;
	pthread_mutexattr_t ma;
	pthread_condattr_t ca;
	sb_log *log;
	int rc;

	log = calloc(1, sizeof *log);
	if (!log)
		return SB_ERR_NOMEM;
	log->flags = flags;
	/* Both mutexes are held for a few instructions, by many threads at
	 * once when a group is released: a waiter spins briefly instead of
	 * sleeping at once (and costing the holder a wake-up). */
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
	pthread_mutex_init(&log->mu, &ma);
	pthread_mutex_init(&log->done_mu, &ma);
	pthread_mutexattr_destroy(&ma);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* gather deadlines */
	pthread_cond_init(&log->done_cv, &ca);
	pthread_condattr_destroy(&ca);
	log->expect = 1;
	if (!(flags & SB_LOG_RDONLY) &&
	    (!(log->tails = malloc(TAILS_MAX * sizeof *log->tails)) ||
	     !(log->slots = malloc(SLOTS * sizeof *log->slots)))) {
		rc = SB_ERR_NOMEM;
		goto fail;
	}
	if (flags & SB_LOG_RDONLY)
		envflags |= MDB_RDONLY;
	if (flags & SB_LOG_NOSYNC)
		envflags |= MDB_NOSYNC;
	if ((rc = mdb_env_create(&log->env))) {
		log->env = NULL;
		rc = sb_log_mdb_err(rc, "log: create environment");
		goto fail;
	}
	mdb_env_set_maxdbs(log->env, 32);
	mdb_env_set_maxreaders(log->env, 1024);
	mdb_env_set_mapsize(log->env, map_size());
	if ((rc = mdb_env_open(log->env, dir, envflags, 0600))) {
		rc = sb_log_mdb_err(rc, dir);
		goto fail;
	}
	if ((rc = open_dbs(log)))
		goto fail;
	*out = log;
	return SB_OK;
fail:
	sb_log_close(log);
	return rc;
}

void sb_log_close(sb_log *log)
{
	if (!log)
		return;
	if (log->env)
		mdb_env_close(log->env);
	free(log->tails);
	free(log->slots);
	pthread_cond_destroy(&log->done_cv);
	pthread_mutex_destroy(&log->done_mu);
	pthread_mutex_destroy(&log->mu);
	free(log);
}

void sb_log_set_hook(sb_log *log, sb_log_hook hook, void *ctx)
{
	log->hook = hook;
	log->hook_ctx = ctx;
}

MDB_env *sb_log_env(sb_log *log)
{
	return log->env;
}

/* Fills out with a new salt: random bytes drawn from a pool refilled
 * SALT_POOL bytes at a time, so that folding a batch makes one call into
 * the system's random source, not one a record. */
#define SALT_POOL 4096
static void salt_new(uint8_t out[SB_SALT_LEN])
{
	static __thread uint8_t pool[SALT_POOL];
	static __thread size_t left;

	if (left < SB_SALT_LEN) {
		randombytes_buf(pool, sizeof pool);
		left = sizeof pool;
	}
	left -= SB_SALT_LEN;
	memcpy(out, pool + left, SB_SALT_LEN);
	sodium_memzero(pool + left, SB_SALT_LEN); /* used once */
}

/* Looks up offset's salt in txn; with create, makes one when missing. */
static int salt_txn(sb_log *log, MDB_txn *txn, uint64_t offset, int create,
		    uint8_t out[SB_SALT_LEN])
{
	uint8_t key[8];
	MDB_val k = {8, key}, v;
	int rc;

	sb_be64_put(key, offset);
	if (!log->has_salts)
		return sb_seterr(SB_ERR_NOTFOUND, "offset %llu has no salt (the log has none yet)",
				 (unsigned long long)offset);
	rc = mdb_get(txn, log->salts, &k, &v);
	if (rc == 0 && v.mv_size == SB_SALT_LEN) {
		memcpy(out, v.mv_data, SB_SALT_LEN);
		return SB_OK;
	}
	if (rc == 0)
		return sb_seterr(SB_ERR_CORRUPT, "offset %llu: salt malformed",
				 (unsigned long long)offset);
	if (rc != MDB_NOTFOUND)
		return sb_log_mdb_err(rc, "log: read salt");
	if (!create)
		return sb_seterr(SB_ERR_NOTFOUND, "offset %llu has no salt",
				 (unsigned long long)offset);
	salt_new(out);
	v = (MDB_val){SB_SALT_LEN, out};
	return sb_log_mdb_err(mdb_put(txn, log->salts, &k, &v, 0), "log: write salt");
}

int sb_log_salt(sb_log *log, MDB_txn *txn, uint64_t offset, int create,
		uint8_t out[SB_SALT_LEN])
{
	MDB_txn *own = NULL;
	int rc;

	if (!txn && (rc = mdb_txn_begin(log->env, NULL, MDB_RDONLY, &own)))
		return sb_log_mdb_err(rc, "log: read salt");
	rc = salt_txn(log, txn ? txn : own, offset, create && txn, out);
	if (own)
		mdb_txn_abort(own);
	return rc;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The run index. Each run's offsets are kept in blocks of BLOCK, in seq
 * order: the open block in "runtail" (run -> block number BE64, then up to
 * BLOCK offsets BE64), full blocks in "runidx" (run, NUL, block number BE64
 * -> BLOCK offsets). A commit touches the small runtail table and adds a
 * full block now and then, so its cost does not grow with the number of
 * runs written at once. Seq s lives in block (s-1)/BLOCK at (s-1)%BLOCK. */

/* Reads run's open block into *block and offs (n of them). A run with no
 * events has block 0 and n 0. */
static int tail_get(MDB_txn *txn, MDB_dbi dbi, const char *run, uint64_t *block, uint64_t *offs,
		    unsigned *n)
{
	MDB_val k = {strlen(run), (void *)run}, v;
	int rc = mdb_get(txn, dbi, &k, &v);

	*block = 0;
	*n = 0;
	if (rc == MDB_NOTFOUND)
		return SB_OK;
	if (rc)
		return sb_log_mdb_err(rc, "log: run index");
	if (v.mv_size < 8 || v.mv_size > TAIL_MAX || (v.mv_size - 8) % 8)
		return sb_seterr(SB_ERR_CORRUPT, "run index of run %s malformed", run);
	*block = sb_be64_get(v.mv_data);
	*n = (unsigned)((v.mv_size - 8) / 8);
	for (unsigned i = 0; offs && i < *n; i++)
		offs[i] = sb_be64_get((uint8_t *)v.mv_data + 8 + 8 * i);
	return SB_OK;
}

static size_t idx_key(uint8_t *key, const char *run, uint64_t block)
{
	size_t rl = strlen(run);

	memcpy(key, run, rl);
	key[rl] = 0;
	sb_be64_put(key + rl + 1, block);
	return rl + 9;
}

/* The leader's run tails: each run a group touches is read from runtail
 * once, grown in memory (full blocks filed to runidx as they fill) and
 * written back once when the group is done, so a group of many events
 * costs one runtail update per run instead of one per event. */

static unsigned run_hash(const char *run)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (; *run; run++)
		h = (h ^ (uint8_t)*run) * 16777619u;
	return h & (SLOTS - 1);
}

/* Writes every cached tail back to runtail and empties the cache. */
static int tails_flush(sb_log *log, MDB_txn *txn)
{
	int rc = SB_OK;

	for (unsigned i = 0; i < log->ntails && rc == SB_OK; i++) {
		struct tail *t = &log->tails[i];
		MDB_val k = {strlen(t->run), t->run}, v = {8 + 8 * (size_t)t->n, t->val};
		rc = sb_log_mdb_err(mdb_put(txn, log->runtail, &k, &v, 0), "log: run index");
	}
	log->ntails = 0;
	memset(log->slots, 0xff, SLOTS * sizeof *log->slots);
	return rc;
}

/* Finds run's tail in the cache, loading it from runtail if needed. */
static int tail_find(sb_log *log, MDB_txn *txn, const char *run, struct tail **out)
{
	unsigned h = run_hash(run);
	struct tail *t;
	MDB_val k, v;
	size_t rl;
	int rc;

	for (; log->slots[h] >= 0; h = (h + 1) & (SLOTS - 1)) {
		t = &log->tails[log->slots[h]];
		if (!strcmp(t->run, run)) {
			*out = t;
			return SB_OK;
		}
	}
	if (log->ntails == TAILS_MAX) {
		if ((rc = tails_flush(log, txn)))
			return rc;
		h = run_hash(run);
	}
	rl = strlen(run);
	k.mv_size = rl;
	k.mv_data = (void *)run;
	t = &log->tails[log->ntails];
	if ((rc = mdb_get(txn, log->runtail, &k, &v)) == MDB_NOTFOUND) {
		v.mv_size = 8;
		v.mv_data = memset(t->val, 0, 8);
	} else if (rc) {
		return sb_log_mdb_err(rc, "log: run index");
	}
	/* a full block is never left open: it is filed at once */
	if (v.mv_size < 8 || v.mv_size >= TAIL_MAX || (v.mv_size - 8) % 8)
		return sb_seterr(SB_ERR_CORRUPT, "run index of run %s malformed", run);
	memmove(t->val, v.mv_data, v.mv_size);
	memcpy(t->run, run, rl + 1);
	t->n = (unsigned)((v.mv_size - 8) / 8);
	log->slots[h] = (int16_t)log->ntails++;
	*out = t;
	return SB_OK;
}

/* Adds offset as run's next seq; returns that seq in *seq. */
static int runindex_add(sb_log *log, MDB_txn *txn, const char *run, uint64_t offset,
			uint64_t *seq)
{
	uint8_t key[SB_RUN_MAX + 9];
	struct tail *t = NULL;
	uint64_t block;
	MDB_val k, v;
	int rc;

	if ((rc = tail_find(log, txn, run, &t)))
		return rc;
	block = sb_be64_get(t->val);
	sb_be64_put(t->val + 8 + 8 * t->n, offset);
	*seq = block * BLOCK + ++t->n;
	if (t->n < BLOCK)
		return SB_OK;
	/* the block is full: file it and open the next */
	k.mv_size = idx_key(key, run, block);
	k.mv_data = key;
	v.mv_size = 8 * BLOCK;
	v.mv_data = t->val + 8;
	if ((rc = mdb_put(txn, log->runidx, &k, &v, MDB_NOOVERWRITE)))
		return sb_log_mdb_err(rc, "log: run index");
	sb_be64_put(t->val, block + 1);
	t->n = 0;
	return SB_OK;
}

/* Writes one group of batches in one transaction. Called by one thread at a
 * time (the leader). Each record is written straight into its LMDB page. */
static int commit_group(sb_log *log, struct pending *group)
{
	MDB_txn *txn = NULL;
	MDB_cursor *ec = NULL;
	MDB_val k, v;
	uint8_t key[8];
	uint64_t last = 0, ts = now_ns();
	int rc;

	log->ntails = 0;
	memset(log->slots, 0xff, SLOTS * sizeof *log->slots);
	if ((rc = mdb_txn_begin(log->env, NULL, 0, &txn))) {
		txn = NULL;
		goto fail;
	}
	if ((rc = mdb_cursor_open(txn, log->events, &ec)))
		goto fail;
	rc = mdb_cursor_get(ec, &k, &v, MDB_LAST);
	if (rc == 0)
		last = sb_be64_get(k.mv_data);
	else if (rc != MDB_NOTFOUND)
		goto fail;
	for (struct pending *p = group; p; p = p->next) {
		for (size_t i = 0; i < p->nblobs; i++)
			if ((rc = sb_blob_table_put(txn, &log->bt, p->keys + i * SB_HASH_LEN,
						    p->blobs[i].data, p->blobs[i].len)))
				goto fail_sb;
		for (size_t i = 0; i < p->n; i++) {
			struct sb_event *ev = &p->evs[i];
			ev->offset = ++last;
			if ((rc = runindex_add(log, txn, ev->run, ev->offset, &ev->seq)))
				goto fail_sb;
			if (!ev->ts_ns)
				ev->ts_ns = ts;
			sb_be64_put(key, ev->offset);
			k.mv_size = 8;
			k.mv_data = key;
			v.mv_size = sb_record_size(ev);
			if (!v.mv_size) {
				rc = sb_seterr(SB_ERR_INVAL, "event %s has no payload", ev->type);
				goto fail_sb;
			}
			if ((rc = mdb_cursor_put(ec, &k, &v, MDB_APPEND | MDB_RESERVE)))
				goto fail;
			sb_record_write(ev, v.mv_data);
		}
	}
	if ((rc = tails_flush(log, txn)))
		goto fail_sb;
	mdb_cursor_close(ec);
	rc = mdb_txn_commit(txn);
	if (rc == EIO && disk_full(log))
		rc = ENOSPC; /* LMDB reports a write cut short by a full disk as EIO */
	if (rc)
		return sb_log_mdb_err(rc, "log: commit");
	if (log->hook)
		for (struct pending *p = group; p; p = p->next)
			if (p->n)
				log->hook(log->hook_ctx, p->evs, p->n);
	return SB_OK;
fail:
	rc = sb_log_mdb_err(rc, "log: append");
fail_sb:
	if (txn)
		mdb_txn_abort(txn); /* closes the cursors too */
	return rc;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Waits until self's state leaves WAITING. */
static void wait_state(sb_log *log, struct pending *self)
{
	pthread_mutex_lock(&log->done_mu);
	while (self->state == WAITING)
		pthread_cond_wait(&log->done_cv, &log->done_mu);
	pthread_mutex_unlock(&log->done_mu);
}

/* Group commit. Appenders queue their batches; one of them, the leader,
 * commits the whole queue in one transaction while the next ones queue, and
 * hands the role to the first of those. Writers released by a commit need a
 * moment to come back with their next batch: a leader that starts soon after
 * a commit waits for them (the writers active at its end: that group and
 * those queued during it), at most one commit's time (GATHER_MAX_NS), so the
 * groups do not split in two halves that alternate. The writer whose batch
 * completes the group commits it at once, in the waiting leader's place
 * (it is running; the leader would first have to be woken), and the leader
 * is released with the others. A lone writer never waits: it is the only
 * one expected. Called with mu held; returns with it held: 1 when self is
 * to commit the queue, 0 when another writer took the group over. */
static int gather(sb_log *log, struct pending *self)
{
	uint64_t wait = log->commit_ns < GATHER_MAX_NS ? log->commit_ns : GATHER_MAX_NS;
	uint64_t deadline = log->last_end + wait;
	struct timespec ts;
	uint64_t mine;

	if (log->queued >= log->expect || mono_ns() >= deadline)
		return 1;
	ts.tv_sec = (time_t)(deadline / 1000000000u);
	ts.tv_nsec = (long)(deadline % 1000000000u);
	log->gathering = 1;
	mine = ++log->gathers;
	pthread_mutex_unlock(&log->mu);
	pthread_mutex_lock(&log->done_mu);
	while (self->state == WAITING &&
	       pthread_cond_timedwait(&log->done_cv, &log->done_mu, &ts) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&log->done_mu);
	pthread_mutex_lock(&log->mu);
	if (!log->gathering || log->gathers != mine)
		return 0; /* taken over (and maybe a later gather is on) */
	log->gathering = 0; /* the deadline passed: commit who came */
	return 1;
}

/* Leads one group commit for self: gathers (unless the group is complete),
 * takes the queue, commits it, releases each batch and passes the role on
 * (or gives it up when nobody waits). Returns 0 when the group was taken
 * over (self is in it and will be released with it), 1 when committed. */
static int lead(sb_log *log, struct pending *self, int complete)
{
	struct pending *group, *next;
	uint64_t t0, t1;
	size_t n;
	int rc;

	pthread_mutex_lock(&log->mu);
	if (!complete && !gather(log, self)) {
		pthread_mutex_unlock(&log->mu);
		return 0;
	}
	group = log->head;
	n = log->queued;
	log->head = log->tail = NULL;
	log->queued = 0;
	pthread_mutex_unlock(&log->mu);
	t0 = mono_ns();
	rc = commit_group(log, group);
	t1 = mono_ns();
	pthread_mutex_lock(&log->mu);
	log->commit_ns = log->commit_ns ? (3 * log->commit_ns + (t1 - t0)) / 4 : t1 - t0;
	log->last_end = t1;
	log->expect = n + log->queued;
	next = log->head; /* it stays queued: it takes the queue when it leads */
	if (!next)
		log->committing = 0;
	pthread_mutex_unlock(&log->mu);
	/* One broadcast wakes the whole group (a signal per batch would
	 * cost the leader a system call each). A batch may be gone once
	 * done_mu is free; nobody else may lead until next does. */
	pthread_mutex_lock(&log->done_mu);
	for (struct pending *p = group; p; p = p->next) {
		p->rc = rc;
		p->state = DONE;
	}
	if (next)
		next->state = LEAD;
	pthread_mutex_unlock(&log->done_mu);
	pthread_cond_broadcast(&log->done_cv);
	return 1;
}

/* Queues one batch (its blobs' keys computed) and waits until a commit
 * took it: committing it and others when this thread leads. */
static int append(sb_log *log, const struct sb_blob *blobs, const uint8_t *keys, size_t nblobs,
		  struct sb_event *evs, size_t n)
{
	struct pending self = {evs, n, blobs, keys, nblobs, 0, WAITING, NULL};
	int leader, complete = 0;

	pthread_mutex_lock(&log->mu);
	if (log->tail)
		log->tail->next = &self;
	else
		log->head = &self;
	log->tail = &self;
	log->queued++;
	leader = !log->committing;
	log->committing = 1;
	if (log->gathering && log->queued >= log->expect) {
		log->gathering = 0; /* this batch completes the group: take it over */
		leader = complete = 1;
	}
	pthread_mutex_unlock(&log->mu);
	for (;;) {
		if (leader && lead(log, &self, complete))
			break;
		wait_state(log, &self);
		if (self.state == DONE)
			break;
		/* handed the role: waiting again, for what a gather needs */
		pthread_mutex_lock(&log->done_mu);
		self.state = WAITING;
		pthread_mutex_unlock(&log->done_mu);
		leader = 1;
		complete = 0;
	}
	return self.rc;
}

int sb_log_append(sb_log *log, struct sb_event *evs, size_t n)
{
	return sb_log_append_blobs(log, NULL, 0, evs, n);
}

int sb_log_append_blobs(sb_log *log, const struct sb_blob *blobs, size_t nblobs,
			struct sb_event *evs, size_t n)
{
	uint8_t inline_keys[KEYS_INLINE * SB_HASH_LEN], *keys = inline_keys;
	int rc;

	if (log->flags & SB_LOG_RDONLY)
		return sb_seterr(SB_ERR_DENIED, "log opened read-only");
	for (size_t i = 0; i < n; i++) {
		if (!evs[i].run[0] || memchr(evs[i].run, 0, SB_RUN_MAX) == NULL)
			return sb_seterr(SB_ERR_INVAL, "event %zu has no run id", i);
		rc = sb_schema_check(evs[i].type, evs[i].source, evs[i].payload, evs[i].payload_len);
		if (rc)
			return rc;
	}
	if (n == 0 && nblobs == 0)
		return SB_OK;
	/* Hashed here, by each writer, not by the leader inside the commit. */
	if (nblobs > KEYS_INLINE && !(keys = malloc(nblobs * SB_HASH_LEN)))
		return SB_ERR_NOMEM;
	for (size_t i = 0; i < nblobs; i++)
		sb_blob_hash(blobs[i].data, blobs[i].len, keys + i * SB_HASH_LEN);
	rc = append(log, blobs, keys, nblobs, evs, n);
	if (rc)
		for (size_t i = 0; i < n; i++)
			evs[i].offset = evs[i].seq = 0;
	if (keys != inline_keys)
		free(keys);
	return rc;
}

int sb_blob_put(sb_log *log, const void *data, size_t len, uint8_t hash[SB_HASH_LEN])
{
	struct sb_blob b = {data, len};

	if (log->flags & SB_LOG_RDONLY)
		return sb_seterr(SB_ERR_DENIED, "log opened read-only");
	sb_blob_hash(data, len, hash);
	return append(log, &b, hash, 1, NULL, 0);
}

int sb_blob_get(sb_log *log, const uint8_t hash[SB_HASH_LEN], void **data, size_t *len)
{
	MDB_txn *txn;
	const void *v;
	size_t n;
	int rc;

	if ((rc = mdb_txn_begin(log->env, NULL, MDB_RDONLY, &txn)))
		return sb_log_mdb_err(rc, "blob: read");
	if ((rc = sb_blob_table_get(txn, &log->bt, hash, &v, &n)))
		goto out;
	if (!(*data = malloc(n ? n : 1))) {
		rc = SB_ERR_NOMEM;
		goto out;
	}
	memcpy(*data, v, n);
	*len = n;
out:
	mdb_txn_abort(txn);
	return rc;
}

size_t sb_log_queued(sb_log *log)
{
	size_t n;

	pthread_mutex_lock(&log->mu);
	n = log->queued;
	pthread_mutex_unlock(&log->mu);
	return n;
}

int sb_log_last_offset(sb_log *log, uint64_t *out)
{
	MDB_txn *txn;
	MDB_cursor *c = NULL;
	MDB_val k, v;
	int rc;

	*out = 0;
	if ((rc = mdb_txn_begin(log->env, NULL, MDB_RDONLY, &txn)))
		return sb_log_mdb_err(rc, "log: last offset");
	if (!(rc = mdb_cursor_open(txn, log->events, &c)))
		rc = mdb_cursor_get(c, &k, &v, MDB_LAST);
	if (rc == MDB_NOTFOUND)
		rc = SB_OK; /* empty */
	else if (rc)
		rc = sb_log_mdb_err(rc, "log: last offset");
	else if (k.mv_size != 8)
		rc = sb_seterr(SB_ERR_CORRUPT, "log: an event key of %zu bytes", k.mv_size);
	else
		*out = sb_be64_get(k.mv_data);
	if (c)
		mdb_cursor_close(c); /* a read-only transaction's is not closed with it */
	mdb_txn_abort(txn);
	return rc;
}

int sb_log_last_seq(sb_log *log, const char *run, uint64_t *out)
{
	MDB_txn *txn;
	uint64_t block;
	unsigned n;
	int rc;

	*out = 0;
	if ((rc = mdb_txn_begin(log->env, NULL, MDB_RDONLY, &txn)))
		return sb_log_mdb_err(rc, "log: last sequence");
	if ((rc = tail_get(txn, log->runtail, run, &block, NULL, &n)) == SB_OK)
		*out = block * BLOCK + n;
	mdb_txn_abort(txn);
	return rc;
}

static int iter_new(sb_log *log, MDB_txn *txn, uint64_t from, sb_log_iter **out)
{
	sb_log_iter *it = calloc(1, sizeof *it);
	int rc;

	if (!it)
		return SB_ERR_NOMEM;
	it->log = log;
	it->from = from;
	it->txn = txn;
	if (!txn) {
		it->own_txn = 1;
		if ((rc = mdb_txn_begin(log->env, NULL, MDB_RDONLY, &it->txn))) {
			free(it);
			return sb_log_mdb_err(rc, "log: read");
		}
	}
	if ((rc = mdb_cursor_open(it->txn, log->events, &it->cur))) {
		it->cur = NULL;
		sb_log_iter_close(it);
		return sb_log_mdb_err(rc, "log: read");
	}
	*out = it;
	return SB_OK;
}

int sb_log_iter_open(sb_log *log, uint64_t from, sb_log_iter **out)
{
	return iter_new(log, NULL, from, out);
}

int sb_log_iter_open_txn(sb_log *log, MDB_txn *txn, uint64_t from, sb_log_iter **out)
{
	return iter_new(log, txn, from, out);
}

int sb_log_iter_open_run(sb_log *log, const char *run, uint64_t from_seq, sb_log_iter **out)
{
	sb_log_iter *it;
	size_t rl = strlen(run);
	int rc;

	if (!rl || rl >= SB_RUN_MAX)
		return sb_seterr(SB_ERR_INVAL, "bad run id '%.40s'", run);
	if ((rc = iter_new(log, NULL, from_seq, &it)))
		return rc;
	memcpy(it->run, run, rl + 1);
	it->by_run = 1;
	*out = it;
	return SB_OK;
}

/* Decodes the record at (k, v) into ev; on failure ev->offset names it. */
static int iter_decode(const MDB_val *k, const MDB_val *v, struct sb_event *ev)
{
	uint64_t off = k->mv_size == 8 ? sb_be64_get(k->mv_data) : 0;
	int rc = sb_record_decode(v->mv_data, v->mv_size, ev);

	if (rc == SB_OK && ev->offset != off)
		rc = sb_seterr(SB_ERR_CORRUPT, "record at offset %llu claims offset %llu",
			       (unsigned long long)off, (unsigned long long)ev->offset);
	if (rc) {
		ev->offset = off;
		return sb_seterr(SB_ERR_CORRUPT, "offset %llu: %s", (unsigned long long)off,
				 sb_errmsg(rc));
	}
	return SB_OK;
}

/* Loads index block b of the iterator's run; nblock 0 when it has none. */
static int load_block(sb_log_iter *it, uint64_t b)
{
	uint8_t key[SB_RUN_MAX + 9];
	uint64_t tb;
	MDB_val k, v;
	unsigned n;
	int rc;

	it->block = b;
	it->nblock = 0;
	if ((rc = tail_get(it->txn, it->log->runtail, it->run, &tb, it->offs, &n)))
		return rc;
	if (b == tb) {
		it->nblock = n;
		return SB_OK;
	}
	if (b > tb)
		return SB_OK;
	k.mv_size = idx_key(key, it->run, b);
	k.mv_data = key;
	rc = mdb_get(it->txn, it->log->runidx, &k, &v);
	if (rc == MDB_NOTFOUND || (rc == 0 && v.mv_size != 8 * BLOCK))
		return sb_seterr(SB_ERR_CORRUPT, "run %s: index block %llu missing or malformed",
				 it->run, (unsigned long long)b);
	if (rc)
		return sb_log_mdb_err(rc, "log: read run");
	for (unsigned i = 0; i < BLOCK; i++)
		it->offs[i] = sb_be64_get((uint8_t *)v.mv_data + 8 * i);
	it->nblock = BLOCK;
	return SB_OK;
}

/* Positions the cursor on offset off, stepping when it is the next one (a
 * run written in a row), seeking otherwise. */
static int seek_offset(sb_log_iter *it, uint64_t off, MDB_val *v)
{
	MDB_val k;
	uint8_t key[8];
	int rc;

	if (it->at && off == it->at + 1) {
		rc = mdb_cursor_get(it->cur, &k, v, MDB_NEXT);
		if (rc == 0 && k.mv_size == 8 && sb_be64_get(k.mv_data) == off) {
			it->at = off;
			return 0;
		}
	}
	it->at = 0;
	sb_be64_put(key, off);
	k.mv_size = 8;
	k.mv_data = key;
	rc = mdb_cursor_get(it->cur, &k, v, MDB_SET_KEY);
	if (rc == 0)
		it->at = off;
	return rc;
}

static int iter_next_run(sb_log_iter *it, struct sb_event *ev, MDB_val *evv)
{
	MDB_val ek;
	uint8_t key[8];
	uint64_t seq, off;
	int rc;

	if (!it->started) {
		it->started = 1;
		seq = it->from ? it->from - 1 : 0;
		if ((rc = load_block(it, seq / BLOCK)))
			return rc;
		it->pos = (unsigned)(seq % BLOCK);
	} else if (it->pos == BLOCK && it->nblock == BLOCK) {
		if ((rc = load_block(it, it->block + 1)))
			return rc;
		it->pos = 0;
	}
	if (it->pos >= it->nblock)
		return SB_END;
	seq = it->block * BLOCK + it->pos + 1;
	off = it->offs[it->pos++];
	rc = seek_offset(it, off, evv);
	if (rc) {
		ev->offset = off;
		return rc == MDB_NOTFOUND
			       ? sb_seterr(SB_ERR_CORRUPT, "offset %llu: indexed event missing",
					   (unsigned long long)off)
			       : sb_log_mdb_err(rc, "log: read");
	}
	sb_be64_put(key, off);
	ek.mv_size = 8;
	ek.mv_data = key;
	if ((rc = iter_decode(&ek, evv, ev)))
		return rc;
	if (ev->seq != seq || strcmp(ev->run, it->run)) {
		ev->offset = off;
		return sb_seterr(SB_ERR_CORRUPT, "offset %llu: index says run %s seq %llu",
				 (unsigned long long)off, it->run, (unsigned long long)seq);
	}
	return SB_OK;
}

/* Hints the CPU to fetch the records the cursor reaches after v's. LMDB
 * keeps a leaf page's nodes from the page's end downward, so in a walk in
 * key order the next records lie just below this one in memory: a stream
 * the hardware prefetcher does not follow well. Reading each record whole
 * (its checksum) then waits on memory once per record instead of once per
 * cache line. Fetching too much or the wrong lines only costs bandwidth:
 * prefetches never fault. */
static void prefetch_next(const MDB_val *v)
{
	uintptr_t p = (uintptr_t)v->mv_data;
	size_t span = 2 * (v->mv_size + 64); /* two records like this one, with their nodes */

	if (span > PREFETCH_MAX)
		span = PREFETCH_MAX;
	for (size_t o = 64; o <= span && o <= p; o += 64)
		__builtin_prefetch((const void *)(p - o));
}

/* Reads the next event into ev and its stored record into *v. */
static int iter_step(sb_log_iter *it, struct sb_event *ev, MDB_val *v)
{
	MDB_val k;
	uint8_t key[8];
	int rc;

	if (it->by_run)
		return iter_next_run(it, ev, v);
	if (!it->started) {
		it->started = 1;
		sb_be64_put(key, it->from);
		k.mv_size = 8;
		k.mv_data = key;
		rc = mdb_cursor_get(it->cur, &k, v, MDB_SET_RANGE);
	} else {
		rc = mdb_cursor_get(it->cur, &k, v, MDB_NEXT);
	}
	if (rc == MDB_NOTFOUND)
		return SB_END;
	if (rc)
		return sb_log_mdb_err(rc, "log: read");
	prefetch_next(v);
	return iter_decode(&k, v, ev);
}

int sb_log_iter_next(sb_log_iter *it, struct sb_event *ev)
{
	MDB_val v;

	return iter_step(it, ev, &v);
}

int sb_log_iter_next_record(sb_log_iter *it, struct sb_event *ev, const void **rec, size_t *len)
{
	MDB_val v = {0, NULL};
	int rc = iter_step(it, ev, &v);

	*rec = rc == SB_OK ? v.mv_data : NULL;
	*len = rc == SB_OK ? v.mv_size : 0;
	return rc;
}

void sb_log_iter_close(sb_log_iter *it)
{
	if (!it)
		return;
	if (it->cur)
		mdb_cursor_close(it->cur);
	if (it->own_txn)
		mdb_txn_abort(it->txn);
	free(it);
}

/* The bytes of the pages of database dbi (0 when it cannot be read). */
static unsigned long long db_bytes(MDB_txn *txn, MDB_dbi dbi)
{
	MDB_stat st;

	if (mdb_stat(txn, dbi, &st))
		return 0;
	return (unsigned long long)st.ms_psize *
	       (st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages);
}

int sb_log_usage(sb_log *log, unsigned long long *blobs, unsigned long long *rest)
{
	MDB_envinfo info;
	MDB_stat st;
	MDB_txn *txn;
	unsigned long long used;
	int rc;

	if ((rc = mdb_env_info(log->env, &info)) || (rc = mdb_env_stat(log->env, &st)) ||
	    (rc = mdb_txn_begin(log->env, NULL, MDB_RDONLY, &txn)))
		return sb_log_mdb_err(rc, "log: usage");
	used = (unsigned long long)(info.me_last_pgno + 1) * st.ms_psize;
	*blobs = db_bytes(txn, log->bt.blobs) + db_bytes(txn, log->bt.map);
	*rest = used > *blobs ? used - *blobs : 0;
	mdb_txn_abort(txn);
	return SB_OK;
}
