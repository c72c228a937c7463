/* test_log.c - the LMDB event log: appends, iteration, durability, refusal,
 * corruption, group commit, blobs. Each test works in its own directory
 * under /tmp and removes it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "engine/log/log.h"
#include "engine/log/record.h"
#include "tests/unit/testutil.h"

struct fix {
	char *dir;
	sb_log *log;
};

/* The log's newest offset; a read that fails fails the test. */
static uint64_t last_offset(sb_log *log)
{
	uint64_t last;

	assert_int_equal(sb_log_last_offset(log, &last), SB_OK);
	return last;
}

/* run's newest sequence number; likewise. */
static uint64_t last_seq(sb_log *log, const char *run)
{
	uint64_t seq;

	assert_int_equal(sb_log_last_seq(log, run, &seq), SB_OK);
	return seq;
}

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof *f);

	assert_non_null(f);
	f->dir = tu_tmpdir();
	assert_int_equal(sb_log_open(f->dir, 0, &f->log), SB_OK);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	sb_log_close(f->log);
	tu_rmrf(f->dir);
	free(f);
	return 0;
}

static void reopen(struct fix *f, unsigned flags)
{
	sb_log_close(f->log);
	f->log = NULL;
	assert_int_equal(sb_log_open(f->dir, flags, &f->log), SB_OK);
}

/* A batch of events with owned payloads: event i of the batch belongs to
 * run runs[(base + i) % nruns] and carries {"turn": base + i, "tag": tag};
 * so with base = the number of events before it, event k of the log is of
 * run runs[k % nruns]. */
struct batch {
	struct sb_event *evs;
	msgpack_sbuffer *pl;
	size_t n;
};

static void batch_make(struct batch *b, size_t n, const char *const *runs, size_t nruns,
		       uint64_t base, const char *tag)
{
	b->n = n;
	b->evs = calloc(n, sizeof *b->evs);
	b->pl = calloc(n, sizeof *b->pl);
	assert_true(b->evs && b->pl);
	for (size_t i = 0; i < n; i++) {
		msgpack_packer pk;
		msgpack_sbuffer_init(&b->pl[i]);
		msgpack_packer_init(&pk, &b->pl[i], msgpack_sbuffer_write);
		msgpack_pack_map(&pk, 2);
		sb_pack_ku64(&pk, "turn", base + i);
		sb_pack_kstr(&pk, "tag", tag);
		assert_int_equal(sb_event_init(&b->evs[i], "agent.turn.started", runs[(base + i) % nruns],
					       (base + i) % 2 ? SB_SRC_HARNESS : SB_SRC_HOST, b->pl[i].data,
					       b->pl[i].size),
				 SB_OK);
	}
}

static void batch_free(struct batch *b)
{
	for (size_t i = 0; i < b->n; i++)
		msgpack_sbuffer_destroy(&b->pl[i]);
	free(b->pl);
	free(b->evs);
}

/* Reads "turn" from an event's payload. */
static uint64_t turn_of(const struct sb_event *ev)
{
	msgpack_zone z;
	msgpack_object o;
	uint64_t t;

	msgpack_zone_init(&z, 256);
	assert_int_equal(sb_payload_parse(ev->payload, ev->payload_len, &z, &o), SB_OK);
	t = sb_map_u64(&o, "turn", UINT64_MAX);
	msgpack_zone_destroy(&z);
	return t;
}

static const char *const runs3[] = {"run-a", "run-b", "run-c"};

/* Appends 50 events over 3 runs in batches of 1, 7 and 42. */
static void append_50(struct fix *f, struct batch *b)
{
	static const size_t sizes[] = {1, 7, 42};
	uint64_t base = 0;

	for (int i = 0; i < 3; i++) {
		batch_make(&b[i], sizes[i], runs3, 3, base, "x");
		assert_int_equal(sb_log_append(f->log, b[i].evs, b[i].n), SB_OK);
		base += sizes[i];
	}
}

/* An error is not an empty log: with every reader slot taken (by
 * iterators left open), the newest offset and sequence are errors, with 0
 * in *out, not an answer of 0; with a slot free again they are read. */
static void test_last_unreadable(void **state)
{
	struct fix *f = *state;
	sb_log_iter **its = calloc(2048, sizeof *its);
	struct batch b[3];
	uint64_t last = 7, seq = 7;
	size_t n = 0;

	assert_non_null(its);
	append_50(f, b);
	while (n < 2048 && sb_log_iter_open(f->log, 1, &its[n]) == SB_OK)
		n++;
	assert_true(n > 0 && n < 2048); /* the reader table is full */
	assert_int_equal(sb_log_last_offset(f->log, &last), SB_ERR_IO);
	assert_int_equal(last, 0);
	tu_errmsg_has(SB_ERR_IO, "log: last offset");
	assert_int_equal(sb_log_last_seq(f->log, "run-a", &seq), SB_ERR_IO);
	assert_int_equal(seq, 0);
	sb_log_iter_close(its[--n]);
	assert_true(last_offset(f->log) == 50);
	assert_true(last_seq(f->log, "run-a") == 17);
	while (n)
		sb_log_iter_close(its[--n]);
	for (int i = 0; i < 3; i++)
		batch_free(&b[i]);
	free(its);
}

/* Offsets are 1..N in order, seqs count per run from 1, the events read
 * back are the ones written; reading starts where asked. */
static void test_append_read(void **state)
{
	struct fix *f = *state;
	struct batch b[3];
	struct sb_event ev;
	sb_log_iter *it;
	uint64_t off = 1, seq[3] = {0};
	int rc;

	assert_true(last_offset(f->log) == 0);
	assert_int_equal(sb_log_append(f->log, NULL, 0), SB_OK);
	append_50(f, b);
	for (int i = 0, k = 0; i < 3; i++)
		for (size_t j = 0; j < b[i].n; j++, k++) {
			assert_true(b[i].evs[j].offset == (uint64_t)k + 1);
			assert_true(b[i].evs[j].seq == (uint64_t)k / 3 + 1);
			assert_true(b[i].evs[j].ts_ns > 0);
		}
	assert_true(last_offset(f->log) == 50);
	assert_true(last_seq(f->log, "run-a") == 17);
	assert_true(last_seq(f->log, "run-c") == 16);
	assert_true(last_seq(f->log, "run-") == 0);
	assert_true(last_seq(f->log, "nope") == 0);

	assert_int_equal(sb_log_iter_open(f->log, 1, &it), SB_OK);
	while ((rc = sb_log_iter_next(it, &ev)) == SB_OK) {
		int r = (int)((off - 1) % 3);
		assert_true(ev.offset == off);
		assert_true(ev.seq == ++seq[r]);
		assert_string_equal(ev.run, runs3[r]);
		assert_string_equal(ev.type, "agent.turn.started");
		assert_int_equal(ev.source, (off - 1) % 2 ? SB_SRC_HARNESS : SB_SRC_HOST);
		assert_true(turn_of(&ev) == off - 1);
		off++;
	}
	assert_int_equal(rc, SB_END);
	assert_int_equal(sb_log_iter_next(it, &ev), SB_END);
	assert_true(off == 51);
	sb_log_iter_close(it);

	/* From the middle, from 0, past the end. */
	assert_int_equal(sb_log_iter_open(f->log, 26, &it), SB_OK);
	assert_int_equal(sb_log_iter_next(it, &ev), SB_OK);
	assert_true(ev.offset == 26 && turn_of(&ev) == 25);
	for (off = 27; sb_log_iter_next(it, &ev) == SB_OK; off++)
		assert_true(ev.offset == off);
	assert_true(off == 51);
	sb_log_iter_close(it);
	assert_int_equal(sb_log_iter_open(f->log, 0, &it), SB_OK);
	assert_int_equal(sb_log_iter_next(it, &ev), SB_OK);
	assert_true(ev.offset == 1);
	sb_log_iter_close(it);
	assert_int_equal(sb_log_iter_open(f->log, 51, &it), SB_OK);
	assert_int_equal(sb_log_iter_next(it, &ev), SB_END);
	sb_log_iter_close(it);
	sb_log_iter_close(NULL);
	for (int i = 0; i < 3; i++)
		batch_free(&b[i]);
}

/* One run's events from seq k, in seq order, with their global offsets. */
static void test_run_iter(void **state)
{
	struct fix *f = *state;
	struct batch b[3];
	struct sb_event ev;
	sb_log_iter *it;
	uint64_t seq;
	int rc;

	append_50(f, b);
	for (uint64_t from = 0; from <= 18; from++) {
		assert_int_equal(sb_log_iter_open_run(f->log, "run-b", from, &it), SB_OK);
		seq = from ? from : 1;
		while ((rc = sb_log_iter_next(it, &ev)) == SB_OK) {
			assert_string_equal(ev.run, "run-b");
			assert_true(ev.seq == seq);
			assert_true(ev.offset == 3 * (seq - 1) + 2);
			seq++;
		}
		assert_int_equal(rc, SB_END);
		assert_true(seq == 18); /* run-b has 17 events */
		sb_log_iter_close(it);
	}
	/* A run whose id is a prefix of others has no events. */
	assert_int_equal(sb_log_iter_open_run(f->log, "run-", 1, &it), SB_OK);
	assert_int_equal(sb_log_iter_next(it, &ev), SB_END);
	sb_log_iter_close(it);
	assert_int_equal(sb_log_iter_open_run(f->log, "", 1, &it), SB_ERR_INVAL);
	assert_int_equal(sb_log_iter_open_run(f->log, "0123456789abcdef01234567", 1, &it),
			 SB_ERR_INVAL);
	for (int i = 0; i < 3; i++)
		batch_free(&b[i]);
}

/* More runs in one commit than the committer keeps in memory at once
 * (256), some crossing a block edge within the commit, one written in a row
 * and then interleaved: every run's seqs are 1..k in offset order, read
 * whole or from any sequence, also after a reopen. */
static void test_many_runs_one_commit(void **state)
{
	enum { RUNS = 600, N = 2000 };
	struct fix *f = *state;
	struct sb_event *evs = calloc(N, sizeof *evs);
	static char runs[RUNS][SB_RUN_MAX];
	uint64_t *count = calloc(RUNS, sizeof *count), *run_of = calloc(2 * N, sizeof *run_of);
	msgpack_sbuffer pl;

	assert_true(evs && count && run_of);
	tu_json(&pl, "{'turn':1}");
	for (int r = 0; r < RUNS; r++)
		snprintf(runs[r], sizeof runs[r], "many-%04d", r);
	for (int round = 0; round < 2; round++) {
		for (size_t i = 0; i < N; i++) {
			/* the first 150 of round 0 are run 0 in a row; then run 0
			 * every third event, the rest spread over all runs */
			size_t r = round == 0 && i < 150 ? 0 : i % 3 == 0 ? 0 : (i * 7 + round) % RUNS;
			assert_int_equal(sb_event_init(&evs[i], "agent.turn.started", runs[r], SB_SRC_HOST,
						       pl.data, pl.size),
					 SB_OK);
			run_of[round * N + i] = r;
		}
		assert_int_equal(sb_log_append(f->log, evs, N), SB_OK);
		for (size_t i = 0; i < N; i++) {
			size_t r = run_of[round * N + i];
			assert_true(evs[i].offset == (uint64_t)(round * N + i + 1));
			assert_true(evs[i].seq == ++count[r]);
		}
	}
	for (int pass = 0; pass < 2; pass++) {
		for (int r = 0; r < RUNS; r += r < 10 ? 1 : 37) {
			static const uint64_t froms[] = {1, 2, 64, 65, 129, 700, 1399};
			assert_true(last_seq(f->log, runs[r]) == count[r]);
			for (size_t k = 0; k < sizeof froms / sizeof froms[0]; k++) {
				sb_log_iter *it;
				struct sb_event ev;
				uint64_t seq = froms[k], prev = 0;
				int rc;
				assert_int_equal(sb_log_iter_open_run(f->log, runs[r], froms[k], &it), SB_OK);
				while ((rc = sb_log_iter_next(it, &ev)) == SB_OK) {
					assert_string_equal(ev.run, runs[r]);
					assert_true(ev.seq == seq++);
					assert_true(ev.offset > prev && run_of[ev.offset - 1] == (uint64_t)r);
					prev = ev.offset;
				}
				assert_int_equal(rc, SB_END);
				assert_true(seq == (froms[k] > count[r] ? froms[k] : count[r] + 1));
				sb_log_iter_close(it);
			}
		}
		reopen(f, 0);
	}
	msgpack_sbuffer_destroy(&pl);
	free(run_of);
	free(count);
	free(evs);
}

/* sb_log_iter_next_record gives each event's stored record: it decodes to
 * the event the iterator returned, and ends with NULL. */
static void test_iter_records(void **state)
{
	struct fix *f = *state;
	struct batch b[3];
	struct sb_event ev, dec;
	sb_log_iter *it;
	const void *rec;
	size_t len, n = 0;
	int rc;

	append_50(f, b);
	for (int by_run = 0; by_run < 2; by_run++) {
		if (by_run)
			assert_int_equal(sb_log_iter_open_run(f->log, "run-c", 2, &it), SB_OK);
		else
			assert_int_equal(sb_log_iter_open(f->log, 5, &it), SB_OK);
		while ((rc = sb_log_iter_next_record(it, &ev, &rec, &len)) == SB_OK) {
			assert_non_null(rec);
			assert_int_equal(sb_record_decode(rec, len, &dec), SB_OK);
			assert_true(dec.offset == ev.offset && dec.seq == ev.seq && dec.ts_ns == ev.ts_ns);
			assert_string_equal(dec.run, ev.run);
			assert_string_equal(dec.type, ev.type);
			assert_true(dec.payload == ev.payload && dec.payload_len == ev.payload_len);
			assert_true(by_run ? !strcmp(ev.run, "run-c") : ev.offset >= 5);
			n++;
		}
		assert_int_equal(rc, SB_END);
		assert_null(rec);
		assert_int_equal(len, 0);
		sb_log_iter_close(it);
	}
	assert_int_equal(n, 46 + 15); /* offsets 5..50, run-c's seqs 2..16 */
	for (int i = 0; i < 3; i++)
		batch_free(&b[i]);
}

/* An iterator reads a snapshot: later appends do not show in it. */
/* A run's index is kept in blocks of 64: reading from every position
 * around the block edges gives the right events, in and across commits. */
static void test_run_iter_blocks(void **state)
{
	static const uint64_t froms[] = {1, 2, 63, 64, 65, 66, 127, 128, 129, 192, 193, 200, 201, 500};
	static const char *const two[] = {"run-x", "run-y"};
	struct fix *f = *state;
	struct batch b[4];
	struct sb_event ev;
	sb_log_iter *it;
	uint64_t seq, base = 0;
	int rc;

	/* 400 events, alternating runs, in commits of 1, 99, 100 and 200 */
	for (int i = 0; i < 4; i++) {
		size_t n = i == 0 ? 1 : i == 1 ? 99 : i == 2 ? 100 : 200;
		batch_make(&b[i], n, two, 2, base, "blk");
		assert_int_equal(sb_log_append(f->log, b[i].evs, b[i].n), SB_OK);
		base += n;
	}
	assert_true(last_seq(f->log, "run-x") == 200);
	assert_true(last_seq(f->log, "run-y") == 200);
	for (size_t i = 0; i < sizeof froms / sizeof froms[0]; i++) {
		assert_int_equal(sb_log_iter_open_run(f->log, "run-y", froms[i], &it), SB_OK);
		seq = froms[i];
		while ((rc = sb_log_iter_next(it, &ev)) == SB_OK) {
			assert_string_equal(ev.run, "run-y");
			assert_true(ev.seq == seq);
			assert_true(ev.offset == 2 * seq); /* run-y has the even offsets */
			assert_true(turn_of(&ev) == 2 * seq - 1);
			seq++;
		}
		assert_int_equal(rc, SB_END);
		assert_true(seq == (froms[i] > 201 ? froms[i] : 201));
		sb_log_iter_close(it);
	}
	for (int i = 0; i < 4; i++)
		batch_free(&b[i]);
}

static void test_iter_snapshot(void **state)
{
	struct fix *f = *state;
	struct batch b[3], more;
	struct sb_event ev;
	sb_log_iter *it, *rit;
	int n = 0, rn = 0;

	append_50(f, b);
	assert_int_equal(sb_log_iter_open(f->log, 1, &it), SB_OK);
	assert_int_equal(sb_log_iter_open_run(f->log, "run-a", 1, &rit), SB_OK);
	batch_make(&more, 10, runs3, 1, 100, "later");
	assert_int_equal(sb_log_append(f->log, more.evs, more.n), SB_OK);
	while (sb_log_iter_next(it, &ev) == SB_OK)
		n++;
	while (sb_log_iter_next(rit, &ev) == SB_OK)
		rn++;
	assert_int_equal(n, 50);
	assert_int_equal(rn, 17);
	sb_log_iter_close(it);
	sb_log_iter_close(rit);
	assert_true(last_offset(f->log) == 60);
	assert_true(last_seq(f->log, "run-a") == 27);
	batch_free(&more);
	for (int i = 0; i < 3; i++)
		batch_free(&b[i]);
}

/* What was appended is there after close and reopen; offsets and seqs go
 * on from where they were. */
static void test_durable_reopen(void **state)
{
	struct fix *f = *state;
	struct batch b[3], more;
	struct sb_event ev;
	sb_log_iter *it;
	uint64_t off = 1;

	append_50(f, b);
	reopen(f, 0);
	assert_true(last_offset(f->log) == 50);
	assert_true(last_seq(f->log, "run-b") == 17);
	batch_make(&more, 4, runs3 + 1, 1, 50, "after");
	assert_int_equal(sb_log_append(f->log, more.evs, more.n), SB_OK);
	assert_true(more.evs[0].offset == 51 && more.evs[3].offset == 54);
	assert_true(more.evs[0].seq == 18 && more.evs[3].seq == 21);
	reopen(f, SB_LOG_RDONLY);
	assert_int_equal(sb_log_iter_open(f->log, 1, &it), SB_OK);
	for (; sb_log_iter_next(it, &ev) == SB_OK; off++) {
		assert_true(ev.offset == off);
		assert_true(turn_of(&ev) == off - 1);
	}
	assert_true(off == 55);
	sb_log_iter_close(it);
	batch_free(&more);
	for (int i = 0; i < 3; i++)
		batch_free(&b[i]);
}

static void count_hook(void *ctx, const struct sb_event *evs, size_t n)
{
	*(size_t *)ctx += n;
}

/* A batch with one event the schema refuses writes nothing at all. */
static void test_refused_batch(void **state)
{
	struct fix *f = *state;
	struct batch b;
	msgpack_sbuffer bad, usage;
	size_t hooked = 0;
	int rc;

	sb_log_set_hook(f->log, count_hook, &hooked);
	batch_make(&b, 5, runs3, 3, 0, "ok");
	assert_int_equal(sb_log_append(f->log, b.evs, 2), SB_OK);
	assert_int_equal(hooked, 2);

	tu_json(&bad, "{'turn':'three'}");
	b.evs[3].payload = (const uint8_t *)bad.data;
	b.evs[3].payload_len = bad.size;
	rc = sb_log_append(f->log, b.evs + 2, 3);
	assert_int_equal(rc, SB_ERR_SCHEMA);
	tu_errmsg_has(rc, "agent.turn.started", "turn");

	tu_json(&usage, "{'model':'m','input_tokens':1,'output_tokens':1,'cost_nusd':1,"
			"'total_nusd':1}");
	assert_int_equal(sb_event_init(&b.evs[3], "agent.usage.updated", "run-a", SB_SRC_GUEST,
				       usage.data, usage.size),
			 0);
	rc = sb_log_append(f->log, b.evs + 2, 3);
	assert_int_equal(rc, SB_ERR_SCHEMA);
	tu_errmsg_has(rc, "agent.usage.updated", "guest");

	b.evs[3].source = SB_SRC_GATEWAY;
	b.evs[3].run[0] = 0;
	assert_int_equal(sb_log_append(f->log, b.evs + 2, 3), SB_ERR_INVAL);

	assert_true(last_offset(f->log) == 2);
	assert_true(last_seq(f->log, "run-a") == 1);
	assert_true(last_seq(f->log, "run-c") == 0);
	assert_int_equal(hooked, 2);
	assert_true(b.evs[2].offset == 0 && b.evs[4].offset == 0);

	/* Fixed, the same batch goes in whole. */
	strcpy(b.evs[3].run, "run-a");
	assert_int_equal(sb_log_append(f->log, b.evs + 2, 3), SB_OK);
	assert_true(b.evs[2].offset == 3 && b.evs[3].offset == 4 && b.evs[4].offset == 5);
	assert_true(b.evs[3].seq == 2);
	assert_int_equal(hooked, 5);
	msgpack_sbuffer_destroy(&bad);
	msgpack_sbuffer_destroy(&usage);
	batch_free(&b);
}

/* Blobs appended with events are stored in the same commit: a refused
 * batch stores neither; blobs alone are fine; keys are sb_blob_hash's. */
static void test_append_blobs(void **state)
{
	struct fix *f = *state;
	struct sb_blob bl[2] = {{"the request body", 16}, {"the answer body", 15}};
	uint8_t h[SB_HASH_LEN];
	struct batch b;
	msgpack_sbuffer bad;
	void *got;
	size_t len;

	batch_make(&b, 2, runs3, 3, 0, "ok");
	tu_json(&bad, "{'turn':'three'}");
	b.evs[1].payload = (const uint8_t *)bad.data;
	b.evs[1].payload_len = bad.size;
	assert_int_equal(sb_log_append_blobs(f->log, bl, 2, b.evs, 2), SB_ERR_SCHEMA);
	sb_blob_hash(bl[0].data, bl[0].len, h);
	assert_int_equal(sb_blob_get(f->log, h, &got, &len), SB_ERR_NOTFOUND);
	assert_true(last_offset(f->log) == 0);
	/* the good event with both blobs */
	assert_int_equal(sb_log_append_blobs(f->log, bl, 2, b.evs, 1), SB_OK);
	assert_true(b.evs[0].offset == 1);
	for (int i = 0; i < 2; i++) {
		sb_blob_hash(bl[i].data, bl[i].len, h);
		assert_int_equal(sb_blob_get(f->log, h, &got, &len), SB_OK);
		assert_int_equal(len, bl[i].len);
		assert_memory_equal(got, bl[i].data, len);
		free(got);
	}
	/* the same blob again, and blobs without events */
	assert_int_equal(sb_log_append_blobs(f->log, bl, 1, NULL, 0), SB_OK);
	bl[0].data = "another";
	bl[0].len = 7;
	assert_int_equal(sb_log_append_blobs(f->log, bl, 1, NULL, 0), SB_OK);
	sb_blob_hash("another", 7, h);
	reopen(f, 0);
	assert_int_equal(sb_blob_get(f->log, h, &got, &len), SB_OK);
	free(got);
	assert_true(last_offset(f->log) == 1);
	msgpack_sbuffer_destroy(&bad);
	batch_free(&b);
}

/* A read-only log reads but refuses appends and blobs. */
static void test_rdonly(void **state)
{
	struct fix *f = *state;
	struct batch b;
	uint8_t h[SB_HASH_LEN];
	sb_log_iter *it;
	struct sb_event ev;
	sb_log *ro;
	char *empty;

	batch_make(&b, 3, runs3, 3, 0, "x");
	assert_int_equal(sb_log_append(f->log, b.evs, 3), SB_OK);
	reopen(f, SB_LOG_RDONLY);
	assert_int_equal(sb_log_append(f->log, b.evs, 1), SB_ERR_DENIED);
	assert_int_equal(sb_blob_put(f->log, "x", 1, h), SB_ERR_DENIED);
	assert_true(last_offset(f->log) == 3);
	assert_int_equal(sb_log_iter_open(f->log, 1, &it), SB_OK);
	assert_int_equal(sb_log_iter_next(it, &ev), SB_OK);
	sb_log_iter_close(it);

	/* A directory with no log, read-only or missing, fails cleanly. */
	empty = tu_tmpdir();
	assert_true(sb_log_open(empty, SB_LOG_RDONLY, &ro) < 0);
	tu_rmrf(empty);
	assert_true(sb_log_open("/tmp/sb-test-does-not-exist/x", 0, &ro) < 0);
	batch_free(&b);
}

/* Timestamps: 0 means now; a given timestamp is kept. */
static void test_timestamps(void **state)
{
	struct fix *f = *state;
	struct batch b;
	struct timespec t0, t1;
	struct sb_event ev;
	sb_log_iter *it;

	batch_make(&b, 2, runs3, 1, 0, "x");
	b.evs[1].ts_ns = 42;
	clock_gettime(CLOCK_REALTIME, &t0);
	assert_int_equal(sb_log_append(f->log, b.evs, 2), SB_OK);
	clock_gettime(CLOCK_REALTIME, &t1);
	assert_true(b.evs[0].ts_ns >= (uint64_t)t0.tv_sec * 1000000000u + (uint64_t)t0.tv_nsec);
	assert_true(b.evs[0].ts_ns <= (uint64_t)t1.tv_sec * 1000000000u + (uint64_t)t1.tv_nsec);
	assert_int_equal(sb_log_iter_open(f->log, 1, &it), SB_OK);
	assert_int_equal(sb_log_iter_next(it, &ev), SB_OK);
	assert_true(ev.ts_ns == b.evs[0].ts_ns);
	assert_int_equal(sb_log_iter_next(it, &ev), SB_OK);
	assert_true(ev.ts_ns == 42);
	sb_log_iter_close(it);
	batch_free(&b);
}

/* Flips one byte in every copy of marker inside the file; returns how many
 * copies there were. */
static int flip_in_file(const char *path, const char *marker)
{
	FILE *fp = fopen(path, "r+b");
	size_t ml = strlen(marker), len;
	char *data;
	int n = 0;

	assert_non_null(fp);
	fseek(fp, 0, SEEK_END);
	len = (size_t)ftell(fp);
	rewind(fp);
	data = malloc(len);
	assert_non_null(data);
	assert_int_equal(fread(data, 1, len, fp), len);
	for (char *p = data; (p = memmem(p, len - (size_t)(p - data), marker, ml)); p += ml) {
		p[ml / 2] ^= 0x20;
		n++;
	}
	rewind(fp);
	assert_int_equal(fwrite(data, 1, len, fp), len);
	fclose(fp);
	free(data);
	return n;
}

/* A record damaged on disk is reported with its offset, and reading goes
 * on with the next record; the per-run iterator does the same. */
static void test_corrupt_record_on_disk(void **state)
{
	struct fix *f = *state;
	struct batch b[3], tagged;
	struct sb_event ev;
	sb_log_iter *it;
	char path[512];
	uint64_t off = 1;
	int rc, corrupt = 0;

	append_50(f, b);
	batch_make(&tagged, 1, runs3 + 1, 1, 50, "MARKER-OF-EVENT-51");
	assert_int_equal(sb_log_append(f->log, tagged.evs, 1), SB_OK);
	assert_true(tagged.evs[0].offset == 51);
	batch_free(&tagged);
	batch_make(&tagged, 9, runs3, 3, 51, "y");
	assert_int_equal(sb_log_append(f->log, tagged.evs, 9), SB_OK);

	sb_log_close(f->log);
	f->log = NULL;
	snprintf(path, sizeof path, "%s/data.mdb", f->dir);
	assert_true(flip_in_file(path, "MARKER-OF-EVENT-51") >= 1);
	assert_int_equal(sb_log_open(f->dir, 0, &f->log), SB_OK);

	assert_int_equal(sb_log_iter_open(f->log, 1, &it), SB_OK);
	for (;;) {
		memset(&ev, 0, sizeof ev);
		rc = sb_log_iter_next(it, &ev);
		if (rc == SB_END)
			break;
		if (rc == SB_ERR_CORRUPT) {
			assert_true(ev.offset == 51);
			tu_errmsg_has(rc, "offset 51", "checksum");
			corrupt++;
		} else {
			assert_int_equal(rc, SB_OK);
			assert_true(ev.offset != 51);
		}
		assert_true(ev.offset == off);
		off++;
	}
	assert_true(off == 61);
	assert_int_equal(corrupt, 1);
	sb_log_iter_close(it);

	/* run-b's 18th event is offset 51. */
	assert_int_equal(sb_log_iter_open_run(f->log, "run-b", 17, &it), SB_OK);
	assert_int_equal(sb_log_iter_next(it, &ev), SB_OK);
	assert_true(ev.seq == 17 && ev.offset == 50);
	assert_int_equal(sb_log_iter_next(it, &ev), SB_ERR_CORRUPT);
	assert_true(ev.offset == 51);
	assert_int_equal(sb_log_iter_next(it, &ev), SB_OK);
	assert_true(ev.seq == 19 && ev.offset == 53);
	sb_log_iter_close(it);
	batch_free(&tagged);
	for (int i = 0; i < 3; i++)
		batch_free(&b[i]);
}

/* Replaces the stored value of key in database name. */
static void mdb_overwrite(sb_log *log, const char *name, const void *key, size_t klen,
			  const void *val, size_t vlen)
{
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_val k = {klen, (void *)key}, v = {vlen, (void *)val};

	assert_int_equal(mdb_txn_begin(sb_log_env(log), NULL, 0, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, name, 0, &dbi), 0);
	assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
}

/* Opens dir's LMDB environment by hand (no sb_log on it may be open: one
 * process must not open an environment twice) and begins a transaction. */
static int raw_open(const char *dir, MDB_txn **txn, unsigned flags)
{
	MDB_env *env;
	int rc;

	if ((rc = mdb_env_create(&env)))
		return rc;
	mdb_env_set_maxdbs(env, 32);
	mdb_env_set_mapsize(env, 1u << 30);
	if ((rc = mdb_env_open(env, dir, flags & MDB_RDONLY, 0600)) ||
	    (rc = mdb_txn_begin(env, NULL, flags, txn))) {
		mdb_env_close(env);
		return rc;
	}
	return 0;
}

/* Commits (or aborts) a raw_open transaction and closes its environment. */
static void raw_close(MDB_txn *txn, int commit)
{
	MDB_env *env = mdb_txn_env(txn);

	if (commit)
		assert_int_equal(mdb_txn_commit(txn), 0);
	else
		mdb_txn_abort(txn);
	mdb_env_close(env);
}

static void raw_put(MDB_txn *txn, const char *db, const void *key, size_t klen, const void *val,
		    size_t vlen)
{
	MDB_dbi dbi;
	MDB_val k = {klen, (void *)key}, v = {vlen, (void *)val};

	assert_int_equal(mdb_dbi_open(txn, db, MDB_CREATE, &dbi), 0);
	assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
}

/* The XXH3-128 key of format 2, in 16 bytes and in 32 hex digits. */
static void xxh3_key(const void *data, size_t len, uint8_t key[16], char hex[33])
{
	XXH128_canonical_t c;

	XXH128_canonicalFromHash(&c, XXH3_128bits(data, len));
	memcpy(key, c.digest, 16);
	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", key[i]);
}

#define OLD_RUN "run-old"

/* Builds in dir, by hand, a log as a build of format 2 left it: meta
 * version 2; the n blobs under the XXH3-128 of their content (blob
 * `damaged`, when < n, under the key of other content); one event at offset
 * 1, seq 1 of OLD_RUN in events and the run index: an agent.message from
 * the gateway whose request and response name blobs 0 and 1 by 32 hex
 * digits. Writes each blob's hex key into hex[i] and the event's record
 * into rec (the caller destroys it). */
static void make_format2(const char *dir, const struct sb_blob *bl, size_t n, size_t damaged,
			 char (*hex)[33], msgpack_sbuffer *rec)
{
	uint8_t key[16], be[8] = {0, 0, 0, 0, 0, 0, 0, 1}, tail[16] = {0};
	msgpack_sbuffer pl;
	msgpack_packer pk;
	struct sb_event ev;
	MDB_txn *txn;

	assert_true(n >= 2);
	assert_int_equal(raw_open(dir, &txn, 0), 0);
	raw_put(txn, "meta", "version", 7, "\0\0\0\0\0\0\0\x02", 8);
	for (size_t i = 0; i < n; i++) {
		xxh3_key(i == damaged ? "other content" : bl[i].data,
			 i == damaged ? 13 : bl[i].len, key, hex[i]);
		raw_put(txn, "blobs", key, 16, bl[i].len ? bl[i].data : "", bl[i].len);
	}
	msgpack_sbuffer_init(&pl);
	msgpack_packer_init(&pk, &pl, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 3);
	sb_pack_kstr(&pk, "role", "assistant");
	sb_pack_kstr(&pk, "request", hex[0]);
	sb_pack_kstr(&pk, "response", hex[1]);
	assert_int_equal(sb_event_init(&ev, "agent.message", OLD_RUN, SB_SRC_GATEWAY, pl.data,
				       pl.size),
			 SB_OK);
	ev.offset = ev.seq = 1;
	ev.ts_ns = 1700000000000000000ull;
	msgpack_sbuffer_init(rec);
	assert_int_equal(sb_record_encode(&ev, rec), SB_OK);
	raw_put(txn, "events", be, 8, rec->data, rec->size);
	tail[15] = 1; /* block 0, offsets {1} */
	raw_put(txn, "runtail", OLD_RUN, strlen(OLD_RUN), tail, 16);
	assert_int_equal(mdb_dbi_open(txn, "runidx", MDB_CREATE, &(MDB_dbi){0}), 0);
	raw_close(txn, 1);
	msgpack_sbuffer_destroy(&pl);
}

/* The number of entries of database db (-1 when it does not exist), with
 * the smallest and largest key length into *kmin and *kmax. */
static long raw_count(const char *dir, const char *db, size_t *kmin, size_t *kmax)
{
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_cursor *cur;
	MDB_val k, v;
	long n = 0;

	*kmin = SIZE_MAX;
	*kmax = 0;
	assert_int_equal(raw_open(dir, &txn, MDB_RDONLY), 0);
	if (mdb_dbi_open(txn, db, 0, &dbi)) {
		raw_close(txn, 0);
		return -1;
	}
	assert_int_equal(mdb_cursor_open(txn, dbi, &cur), 0);
	while (mdb_cursor_get(cur, &k, &v, n ? MDB_NEXT : MDB_FIRST) == 0) {
		*kmin = k.mv_size < *kmin ? k.mv_size : *kmin;
		*kmax = k.mv_size > *kmax ? k.mv_size : *kmax;
		n++;
	}
	mdb_cursor_close(cur);
	raw_close(txn, 0);
	return n;
}

/* Reads the format version of the log in dir by hand. */
static uint64_t raw_format(const char *dir)
{
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_val k = {7, "version"}, v;
	uint64_t fmt = 0;

	assert_int_equal(raw_open(dir, &txn, MDB_RDONLY), 0);
	assert_int_equal(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
	assert_int_equal(mdb_get(txn, dbi, &k, &v), 0);
	assert_int_equal(v.mv_size, 8);
	for (int i = 0; i < 8; i++)
		fmt = fmt << 8 | ((uint8_t *)v.mv_data)[i];
	raw_close(txn, 0);
	return fmt;
}

/* Reads string field name of ev's payload into buf. */
static void payload_str(const struct sb_event *ev, const char *name, char *buf, size_t cap)
{
	msgpack_zone z;
	msgpack_object o;

	msgpack_zone_init(&z, 256);
	assert_int_equal(sb_payload_parse(ev->payload, ev->payload_len, &z, &o), SB_OK);
	assert_true(sb_map_str(&o, name, buf, cap) > 0);
	msgpack_zone_destroy(&z);
}

/* Reads blob hex (32 or 64 digits) and asserts it holds want. */
static void assert_blob_is(sb_log *log, const char *hex, const struct sb_blob *want)
{
	uint8_t h[SB_HASH_LEN];
	void *got;
	size_t len;

	assert_int_equal(sb_hash_parse(hex, h), SB_OK);
	assert_int_equal(sb_blob_get(log, h, &got, &len), SB_OK);
	assert_int_equal(len, want->len);
	if (len)
		assert_memory_equal(got, want->data, len);
	free(got);
}

/* A valid record stored under another offset's key is corrupt too; a
 * garbage value is reported with its offset. */
static void test_corrupt_record_misplaced(void **state)
{
	struct fix *f = *state;
	struct batch b[3];
	struct sb_event ev;
	msgpack_sbuffer rec;
	sb_log_iter *it;
	uint8_t key[8] = {0, 0, 0, 0, 0, 0, 0, 7};
	uint8_t key9[8] = {0, 0, 0, 0, 0, 0, 0, 9};

	append_50(f, b);
	assert_true(b[2].evs[0].offset == 9); /* stored again at 7 */
	msgpack_sbuffer_init(&rec);
	assert_int_equal(sb_record_encode(&b[2].evs[0], &rec), 0);
	mdb_overwrite(f->log, "events", key, 8, rec.data, rec.size);
	mdb_overwrite(f->log, "events", key9, 8, "garbage", 7);
	assert_int_equal(sb_log_iter_open(f->log, 6, &it), SB_OK);
	assert_int_equal(sb_log_iter_next(it, &ev), SB_OK);
	assert_true(ev.offset == 6);
	assert_int_equal(sb_log_iter_next(it, &ev), SB_ERR_CORRUPT);
	assert_true(ev.offset == 7);
	tu_errmsg_has(SB_ERR_CORRUPT, "offset 7");
	assert_int_equal(sb_log_iter_next(it, &ev), SB_OK);
	assert_true(ev.offset == 8);
	assert_int_equal(sb_log_iter_next(it, &ev), SB_ERR_CORRUPT);
	assert_true(ev.offset == 9);
	assert_int_equal(sb_log_iter_next(it, &ev), SB_OK);
	assert_true(ev.offset == 10);
	sb_log_iter_close(it);
	msgpack_sbuffer_destroy(&rec);
	for (int i = 0; i < 3; i++)
		batch_free(&b[i]);
}

/* A log of a format newer than this build, or older than format 2, is
 * refused on open, naming the version; nothing is written to it. */
static void test_format_version(void **state)
{
	struct fix *f = *state;
	static const struct {
		const char *ver;
		const char *says;
	} bad[] = {
		{"\0\0\0\0\0\0\0\x63", "format 99 is newer"},
		{"\0\0\0\0\0\0\0\x04", "format 4 is newer"},
		{"\0\0\0\0\0\0\0\x01", "format 1 is older"},
		{"\0\0\0\0\0\0\0\0", "malformed"},
	};

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		MDB_txn *txn;
		MDB_dbi dbi;
		MDB_val k = {7, "version"}, v;
		int rc;

		if (!f->log)
			assert_int_equal(sb_log_open(f->dir, SB_LOG_NOSYNC, &f->log), SB_OK);
		mdb_overwrite(f->log, "meta", "version", 7, bad[i].ver, 8);
		sb_log_close(f->log);
		f->log = NULL;
		rc = sb_log_open(f->dir, 0, &f->log);
		assert_int_equal(rc, SB_ERR_CORRUPT);
		assert_null(f->log);
		tu_errmsg_has(rc, bad[i].says);
		assert_int_equal(sb_log_open(f->dir, SB_LOG_RDONLY, &f->log), SB_ERR_CORRUPT);
		assert_null(f->log);
		/* still the bad version: the refused open wrote nothing */
		assert_int_equal(raw_open(f->dir, &txn, MDB_RDONLY), 0);
		assert_int_equal(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
		assert_int_equal(mdb_get(txn, dbi, &k, &v), 0);
		assert_memory_equal(v.mv_data, bad[i].ver, 8);
		raw_close(txn, 0);
		/* back to the current format for the next round */
		assert_int_equal(raw_open(f->dir, &txn, 0), 0);
		assert_int_equal(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
		v.mv_size = 8;
		v.mv_data = "\0\0\0\0\0\0\0\x03";
		assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
		raw_close(txn, 1);
	}
}

/* The blob key is BLAKE2b-256 (unkeyed, 32 bytes), as published for
 * RFC 7693's "abc" and the empty message. */
static void test_blob_hash_vector(void **state)
{
	uint8_t h[SB_HASH_LEN];
	char hex[SB_HASH_HEX];

	(void)state;
	sb_blob_hash("abc", 3, h);
	sb_hash_hex(h, hex);
	assert_string_equal(hex, "bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319");
	sb_blob_hash("", 0, h);
	sb_hash_hex(h, hex);
	assert_string_equal(hex, "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8");
	assert_false(sb_hash_is_legacy(h));
}

/* Blobs: round trip of several sizes, the key is sb_blob_hash of the
 * content and the table's key is those 32 bytes, equal content is stored
 * once, hex keys parse and print. */
static void test_blobs(void **state)
{
	static const size_t sizes[] = {0, 1, 4095, 4096, 100000, 3 << 20};
	struct fix *f = *state;
	uint8_t h[SB_HASH_LEN], h2[SB_HASH_LEN], back[SB_HASH_LEN];
	char hex[SB_HASH_HEX];
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_stat st;
	MDB_cursor *cur;
	MDB_val k, v;
	size_t seen = 0;

	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		uint8_t *data = malloc(sizes[i] + 1);
		void *got;
		size_t len;

		assert_non_null(data);
		for (size_t j = 0; j < sizes[i]; j++)
			data[j] = (uint8_t)(j * 7 + i);
		assert_int_equal(sb_blob_put(f->log, data, sizes[i], h), SB_OK);
		sb_blob_hash(data, sizes[i], h2);
		assert_memory_equal(h, h2, SB_HASH_LEN);
		assert_int_equal(sb_blob_put(f->log, data, sizes[i], h2), SB_OK);
		assert_memory_equal(h, h2, SB_HASH_LEN);
		assert_int_equal(sb_blob_get(f->log, h, &got, &len), SB_OK);
		assert_int_equal(len, sizes[i]);
		if (len)
			assert_memory_equal(got, data, len);
		free(got);

		sb_hash_hex(h, hex);
		assert_int_equal(strlen(hex), 64);
		assert_int_equal(strspn(hex, "0123456789abcdef"), 64);
		assert_int_equal(sb_hash_parse(hex, back), SB_OK);
		assert_memory_equal(back, h, SB_HASH_LEN);
		free(data);
	}
	/* one entry per content, each under the BLAKE2b-256 of its value */
	assert_int_equal(mdb_txn_begin(sb_log_env(f->log), NULL, MDB_RDONLY, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, "blobs", 0, &dbi), 0);
	assert_int_equal(mdb_stat(txn, dbi, &st), 0);
	assert_int_equal(st.ms_entries, sizeof sizes / sizeof sizes[0]);
	assert_int_equal(mdb_cursor_open(txn, dbi, &cur), 0);
	while (mdb_cursor_get(cur, &k, &v, seen ? MDB_NEXT : MDB_FIRST) == 0) {
		assert_int_equal(k.mv_size, SB_HASH_LEN);
		sb_blob_hash(v.mv_data, v.mv_size, h2);
		assert_memory_equal(k.mv_data, h2, SB_HASH_LEN);
		seen++;
	}
	assert_int_equal(seen, st.ms_entries);
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);

	/* A key nobody stored, and a legacy key in a log that never had one. */
	h[0] ^= 1;
	{
		void *got = NULL;
		size_t len;
		assert_int_equal(sb_blob_get(f->log, h, &got, &len), SB_ERR_NOTFOUND);
		assert_null(got);
		assert_int_equal(sb_hash_parse("00112233445566778899aabbccddeeff", back), SB_OK);
		assert_int_equal(sb_blob_get(f->log, back, &got, &len), SB_ERR_NOTFOUND);
		tu_errmsg_has(SB_ERR_NOTFOUND, "00112233445566778899aabbccddeeff");
		assert_null(got);
	}
}

/* Hex keys: 64 digits, or 32 for a legacy key (its 16 bytes, then zeros,
 * and printed back as 32); everything else is refused. */
static void test_hash_parse(void **state)
{
	static const char *const bad[] = {
		"",
		"0",
		"00112233445566778899aabbccddeef",   /* 31 */
		"00112233445566778899aabbccddeeff0", /* 33 */
		"00112233445566778899AABBCCDDEEFF",
		"0011223344556677889gaabbccddeeff",
		"00112233445566778899aabbccddeeff00112233445566778899aabbccddeef",   /* 63 */
		"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff0", /* 65 */
		"00112233445566778899aabbccddeeff00112233445566778899aabbccddee f",
		"00112233445566778899aabbccddeeff00000000000000000000000000000000", /* reads as legacy */
		" 0112233445566778899aabbccddeeff",
		"00112233445566778899aabbccddeeff\n",
	};
	uint8_t h[SB_HASH_LEN], zero[SB_HASH_LEN - SB_HASH_LEGACY_LEN] = {0};
	char hex[SB_HASH_HEX];

	(void)state;
	assert_int_equal(sb_hash_parse("00112233445566778899aabbccddeeff", h), SB_OK);
	assert_true(h[0] == 0x00 && h[1] == 0x11 && h[15] == 0xff);
	assert_memory_equal(h + SB_HASH_LEGACY_LEN, zero, sizeof zero);
	assert_true(sb_hash_is_legacy(h));
	sb_hash_hex(h, hex);
	assert_string_equal(hex, "00112233445566778899aabbccddeeff");

	assert_int_equal(
		sb_hash_parse("ffeeddccbbaa99887766554433221100000000000000000000000000000000f0", h),
		SB_OK);
	assert_true(h[0] == 0xff && h[16] == 0 && h[31] == 0xf0);
	assert_false(sb_hash_is_legacy(h));
	sb_hash_hex(h, hex);
	assert_string_equal(hex, "ffeeddccbbaa99887766554433221100000000000000000000000000000000f0");

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int rc = sb_hash_parse(bad[i], h);
		if (rc != SB_ERR_INVAL)
			fail_msg("'%s' parsed as a blob key", bad[i]);
		tu_errmsg_has(rc, "not a blob key");
	}
}

/* A blob damaged on disk, or replaced in the database, fails its check. */
static void test_blob_corrupt(void **state)
{
	struct fix *f = *state;
	uint8_t h[SB_HASH_LEN], h2[SB_HASH_LEN];
	char path[512], *data = malloc(20000);
	void *got = NULL;
	size_t len;
	int rc;

	assert_non_null(data);
	for (int i = 0; i < 20000; i++)
		data[i] = (char)('a' + i % 26);
	memcpy(data + 10000, "BLOB-MARKER-XYZZY", 17);
	assert_int_equal(sb_blob_put(f->log, data, 20000, h), SB_OK);
	assert_int_equal(sb_blob_put(f->log, "small one", 9, h2), SB_OK);
	sb_log_close(f->log);
	f->log = NULL;
	snprintf(path, sizeof path, "%s/data.mdb", f->dir);
	assert_int_equal(flip_in_file(path, "BLOB-MARKER-XYZZY"), 1);
	assert_int_equal(sb_log_open(f->dir, 0, &f->log), SB_OK);
	rc = sb_blob_get(f->log, h, &got, &len);
	assert_int_equal(rc, SB_ERR_CORRUPT);
	assert_null(got);
	tu_errmsg_has(rc, "checksum");

	mdb_overwrite(f->log, "blobs", h2, SB_HASH_LEN, "small One", 9);
	assert_int_equal(sb_blob_get(f->log, h2, &got, &len), SB_ERR_CORRUPT);
	free(data);
}

/* Four blobs as a gateway of format 2 stored them: a request, a response
 * large enough for overflow pages, an empty body and a small one. */
static void old_blobs(struct sb_blob *bl, char *big, size_t nbig)
{
	for (size_t i = 0; i < nbig; i++)
		big[i] = (char)('A' + i % 23);
	bl[0] = (struct sb_blob){"{\"model\":\"m\",\"messages\":[]}", 27};
	bl[1] = (struct sb_blob){big, nbig};
	bl[2] = (struct sb_blob){"", 0};
	bl[3] = (struct sb_blob){"small", 5};
}

/* A format-2 log: refused read-only (naming what upgrades it), upgraded by
 * a writable open in one step that re-keys every blob, keeps the old
 * event's record byte for byte and its 32-digit references reading the
 * same bytes; a second open does nothing; appends go on after it. */
static void test_upgrade_format2(void **state)
{
	struct fix *f = *state;
	char hex[4][33], got_hex[SB_HASH_HEX], *big = malloc(100000);
	struct sb_blob bl[4];
	struct sb_log_upgrade up = {0, 0, 0};
	msgpack_sbuffer rec;
	struct sb_event ev;
	struct batch b;
	sb_log_iter *it;
	const void *r;
	size_t rlen, kmin, kmax;
	uint8_t h[SB_HASH_LEN];
	int rc;

	assert_non_null(big);
	sb_log_close(f->log);
	f->log = NULL;
	tu_rmrf(f->dir);
	f->dir = tu_tmpdir();
	old_blobs(bl, big, 100000);
	make_format2(f->dir, bl, 4, SIZE_MAX, hex, &rec);

	/* read-only: refused, and nothing changes */
	rc = sb_log_open(f->dir, SB_LOG_RDONLY, &f->log);
	assert_int_equal(rc, SB_ERR_STATE);
	assert_null(f->log);
	tu_errmsg_has(rc, "format 2", "format 3", "sanboxd", "next start");
	assert_true(raw_format(f->dir) == 2);
	assert_int_equal(raw_count(f->dir, "blobs", &kmin, &kmax), 4);
	assert_true(kmin == 16 && kmax == 16);
	assert_int_equal(raw_count(f->dir, "blobmap", &kmin, &kmax), -1);

	/* the writable open upgrades */
	assert_int_equal(sb_log_open(f->dir, 0, &f->log), SB_OK);
	assert_int_equal(sb_log_upgrade_get(f->log, &up), 1);
	assert_true(up.from == 2 && up.to == 3 && up.blobs == 4);
	assert_int_equal(sb_log_iter_open(f->log, 1, &it), SB_OK);
	assert_int_equal(sb_log_iter_next_record(it, &ev, &r, &rlen), SB_OK);
	assert_true(ev.offset == 1 && ev.seq == 1 && !strcmp(ev.run, OLD_RUN));
	assert_int_equal(rlen, rec.size);
	assert_memory_equal(r, rec.data, rlen); /* the record is untouched */
	payload_str(&ev, "request", got_hex, sizeof got_hex);
	assert_string_equal(got_hex, hex[0]);
	assert_blob_is(f->log, got_hex, &bl[0]);
	payload_str(&ev, "response", got_hex, sizeof got_hex);
	assert_blob_is(f->log, got_hex, &bl[1]);
	assert_int_equal(sb_log_iter_next(it, &ev), SB_END);
	sb_log_iter_close(it);
	for (int i = 0; i < 4; i++) {
		assert_blob_is(f->log, hex[i], &bl[i]);
		/* and under its new key */
		sb_blob_hash(bl[i].data, bl[i].len, h);
		sb_hash_hex(h, got_hex);
		assert_blob_is(f->log, got_hex, &bl[i]);
	}
	/* the log goes on: the run's next event is seq 2, new blobs are new */
	batch_make(&b, 1, (const char *const[]){OLD_RUN}, 1, 0, "after");
	assert_int_equal(sb_log_append_blobs(f->log, &(struct sb_blob){"new body", 8}, 1, b.evs, 1),
			 SB_OK);
	assert_true(b.evs[0].offset == 2 && b.evs[0].seq == 2);
	sb_log_close(f->log);
	f->log = NULL;

	/* on disk: blobs under 32-byte keys only, the map, format 3 */
	assert_true(raw_format(f->dir) == 3);
	assert_int_equal(raw_count(f->dir, "blobs", &kmin, &kmax), 5);
	assert_true(kmin == 32 && kmax == 32);
	assert_int_equal(raw_count(f->dir, "blobmap", &kmin, &kmax), 4);
	assert_true(kmin == 16 && kmax == 16);

	/* a second open does nothing; read-only works now */
	assert_int_equal(sb_log_open(f->dir, 0, &f->log), SB_OK);
	assert_int_equal(sb_log_upgrade_get(f->log, &up), 0);
	reopen(f, SB_LOG_RDONLY);
	assert_int_equal(sb_log_upgrade_get(f->log, &up), 0);
	for (int i = 0; i < 4; i++)
		assert_blob_is(f->log, hex[i], &bl[i]);
	assert_int_equal(sb_log_iter_open_run(f->log, OLD_RUN, 1, &it), SB_OK);
	assert_int_equal(sb_log_iter_next(it, &ev), SB_OK);
	assert_true(ev.seq == 1 && ev.offset == 1);
	assert_int_equal(sb_log_iter_next(it, &ev), SB_OK);
	assert_true(ev.seq == 2 && ev.offset == 2);
	assert_int_equal(sb_log_iter_next(it, &ev), SB_END);
	sb_log_iter_close(it);
	reopen(f, 0);

	/* a damaged map entry, and damaged content behind a legacy key */
	{
		uint8_t old[16], key[SB_HASH_LEN];
		void *got = NULL;
		size_t len;

		assert_int_equal(sb_hash_parse(hex[3], h), SB_OK);
		memcpy(old, h, 16);
		mdb_overwrite(f->log, "blobmap", old, 16, "short", 5);
		rc = sb_blob_get(f->log, h, &got, &len);
		assert_int_equal(rc, SB_ERR_CORRUPT);
		tu_errmsg_has(rc, hex[3], "map entry");
		assert_null(got);
		assert_int_equal(sb_hash_parse(hex[0], h), SB_OK);
		sb_blob_hash(bl[0].data, bl[0].len, key);
		mdb_overwrite(f->log, "blobs", key, SB_HASH_LEN, "{\"model\":\"M\",\"messages\":[]}", 27);
		rc = sb_blob_get(f->log, h, &got, &len);
		assert_int_equal(rc, SB_ERR_CORRUPT);
		tu_errmsg_has(rc, hex[0], "checksum");
		assert_null(got);
	}
	batch_free(&b);
	msgpack_sbuffer_destroy(&rec);
	free(big);
}

/* A format-2 blob whose content does not match its key, or a key of
 * another length, stops the upgrade with an error naming it, and the log
 * is left exactly as it was. */
static void test_upgrade_refused(void **state)
{
	struct fix *f = *state;
	char hex[4][33], *big = malloc(5000);
	struct sb_blob bl[4];
	msgpack_sbuffer rec;
	size_t kmin, kmax;
	MDB_txn *txn;
	int rc;

	assert_non_null(big);
	sb_log_close(f->log);
	f->log = NULL;
	tu_rmrf(f->dir);
	f->dir = tu_tmpdir();
	old_blobs(bl, big, 5000);
	make_format2(f->dir, bl, 4, 2, hex, &rec); /* blob 2 is under another's key */
	for (int round = 0; round < 2; round++) {
		rc = sb_log_open(f->dir, 0, &f->log);
		assert_int_equal(rc, SB_ERR_CORRUPT);
		assert_null(f->log);
		tu_errmsg_has(rc, "upgrade", hex[2], "does not match its XXH3-128 key");
		assert_true(raw_format(f->dir) == 2);
		assert_int_equal(raw_count(f->dir, "blobs", &kmin, &kmax), 4);
		assert_true(kmin == 16 && kmax == 16);
		assert_int_equal(raw_count(f->dir, "blobmap", &kmin, &kmax), -1);
		assert_int_equal(raw_count(f->dir, "events", &kmin, &kmax), 1);
	}
	msgpack_sbuffer_destroy(&rec);

	/* a good table but for one 32-byte key */
	tu_rmrf(f->dir);
	f->dir = tu_tmpdir();
	make_format2(f->dir, bl, 4, SIZE_MAX, hex, &rec);
	assert_int_equal(raw_open(f->dir, &txn, 0), 0);
	raw_put(txn, "blobs", "0123456789abcdef0123456789abcdef", 32, "x", 1);
	raw_close(txn, 1);
	rc = sb_log_open(f->dir, 0, &f->log);
	assert_int_equal(rc, SB_ERR_CORRUPT);
	assert_null(f->log);
	tu_errmsg_has(rc, "key of 32 bytes");
	assert_true(raw_format(f->dir) == 2);
	assert_int_equal(raw_count(f->dir, "blobs", &kmin, &kmax), 5);
	assert_int_equal(raw_count(f->dir, "blobmap", &kmin, &kmax), -1);
	msgpack_sbuffer_destroy(&rec);
	free(big);
}

/* Group commit: many threads appending single durable events. */
#define GC_THREADS 8
#define GC_EACH 2000
#define GC_RUNS 4

struct gc_hook {
	atomic_int inside;
	int overlaps;
	uint64_t next;   /* next offset the hook expects */
	uint64_t events; /* events seen */
	uint64_t calls;
	int bad_order;
};

static void gc_hook_fn(void *ctx, const struct sb_event *evs, size_t n)
{
	struct gc_hook *h = ctx;

	if (atomic_exchange(&h->inside, 1))
		h->overlaps++;
	for (size_t i = 0; i < n; i++) {
		if (evs[i].offset != h->next)
			h->bad_order++;
		h->next = evs[i].offset + 1;
	}
	h->events += n;
	h->calls++;
	atomic_store(&h->inside, 0);
}

struct gc_thread {
	sb_log *log;
	int id;
	int failed;
	uint64_t offs[GC_EACH];
};

static void *gc_worker(void *arg)
{
	struct gc_thread *t = arg;
	char run[SB_RUN_MAX];

	snprintf(run, sizeof run, "gc-run-%d", t->id % GC_RUNS);
	for (int i = 0; i < GC_EACH; i++) {
		msgpack_sbuffer sb;
		msgpack_packer pk;
		struct sb_event ev;

		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		msgpack_pack_map(&pk, 2);
		sb_pack_ku64(&pk, "turn", (uint64_t)i);
		sb_pack_ku64(&pk, "thread", (uint64_t)t->id);
		sb_event_init(&ev, "agent.turn.completed", run, SB_SRC_HARNESS, sb.data, sb.size);
		if (sb_log_append(t->log, &ev, 1) != SB_OK)
			t->failed++;
		t->offs[i] = ev.offset;
		msgpack_sbuffer_destroy(&sb);
	}
	return NULL;
}

/* Every offset 1..N exists once; each thread's events are all there in its
 * order; each run's seqs are 1..k without gaps; the hook saw every offset
 * once, in order, never two calls at once. (That appends are grouped is
 * test_group_commit_held's; how much, bench_log's.) */
static void test_group_commit(void **state)
{
	struct fix *f = *state;
	struct gc_hook hook = {.next = 1};
	struct gc_thread *th = calloc(GC_THREADS, sizeof *th);
	pthread_t tid[GC_THREADS];
	uint64_t runseq[GC_RUNS] = {0}, off = 1;
	uint8_t *seen = calloc((size_t)GC_THREADS * GC_EACH, 1);
	struct sb_event ev;
	sb_log_iter *it;
	MDB_envinfo info;
	size_t txn0, commits;
	int rc;

	assert_true(th && seen);
	assert_int_equal(mdb_env_info(sb_log_env(f->log), &info), 0);
	txn0 = info.me_last_txnid;
	sb_log_set_hook(f->log, gc_hook_fn, &hook);
	for (int i = 0; i < GC_THREADS; i++) {
		th[i].log = f->log;
		th[i].id = i;
		assert_int_equal(pthread_create(&tid[i], NULL, gc_worker, &th[i]), 0);
	}
	for (int i = 0; i < GC_THREADS; i++)
		pthread_join(tid[i], NULL);
	assert_int_equal(mdb_env_info(sb_log_env(f->log), &info), 0);
	commits = info.me_last_txnid - txn0;
	for (int i = 0; i < GC_THREADS; i++) {
		assert_int_equal(th[i].failed, 0);
		for (int j = 1; j < GC_EACH; j++)
			assert_true(th[i].offs[j] > th[i].offs[j - 1]);
	}

	assert_int_equal(sb_log_iter_open(f->log, 1, &it), SB_OK);
	while ((rc = sb_log_iter_next(it, &ev)) == SB_OK) {
		msgpack_zone z;
		msgpack_object o;
		uint64_t t, i;
		int r;

		assert_true(ev.offset == off);
		msgpack_zone_init(&z, 128);
		assert_int_equal(sb_payload_parse(ev.payload, ev.payload_len, &z, &o), 0);
		t = sb_map_u64(&o, "thread", 999);
		i = sb_map_u64(&o, "turn", 99999);
		msgpack_zone_destroy(&z);
		assert_true(t < GC_THREADS && i < GC_EACH);
		assert_int_equal(seen[t * GC_EACH + i], 0);
		seen[t * GC_EACH + i] = 1;
		assert_true(th[t].offs[i] == off);
		r = ev.run[7] - '0';
		assert_true(r >= 0 && r < GC_RUNS && (uint64_t)r == t % GC_RUNS);
		assert_true(ev.seq == ++runseq[r]);
		off++;
	}
	assert_int_equal(rc, SB_END);
	sb_log_iter_close(it);
	assert_true(off - 1 == (uint64_t)GC_THREADS * GC_EACH);
	for (int r = 0; r < GC_RUNS; r++) {
		char run[SB_RUN_MAX];
		snprintf(run, sizeof run, "gc-run-%d", r);
		assert_true(runseq[r] == (uint64_t)GC_THREADS / GC_RUNS * GC_EACH);
		assert_true(last_seq(f->log, run) == runseq[r]);
	}
	assert_int_equal(hook.overlaps, 0);
	assert_int_equal(hook.bad_order, 0);
	assert_true(hook.events == (uint64_t)GC_THREADS * GC_EACH);
	assert_true(hook.next == off);
	assert_true(hook.calls == (uint64_t)GC_THREADS * GC_EACH); /* one per append */
	/* each commit holds one append or more */
	assert_true(commits > 0 && commits <= hook.calls);
	free(seen);
	free(th);
}

#define HELD_WRITERS 8

/* A hook that holds the first commit until released, and notes the
 * transaction of every call. */
struct held_hook {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int held, release;
	sb_log *log;
	size_t calls;
	size_t txn[HELD_WRITERS + 1];
};

static void held_hook_fn(void *ctx, const struct sb_event *evs, size_t n)
{
	struct held_hook *h = ctx;
	MDB_envinfo info;

	(void)evs;
	(void)n;
	/* the committing thread still leads: no other commit came since */
	mdb_env_info(sb_log_env(h->log), &info);
	pthread_mutex_lock(&h->mu);
	if (h->calls < HELD_WRITERS + 1)
		h->txn[h->calls] = info.me_last_txnid;
	if (++h->calls == 1) {
		h->held = 1;
		pthread_cond_broadcast(&h->cv);
		while (!h->release)
			pthread_cond_wait(&h->cv, &h->mu);
	}
	pthread_mutex_unlock(&h->mu);
}

struct held_writer {
	sb_log *log;
	int rc;
	uint64_t offset;
};

static void *held_writer_main(void *arg)
{
	struct held_writer *w = arg;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	struct sb_event ev;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 2);
	sb_pack_ku64(&pk, "turn", 0);
	sb_pack_ku64(&pk, "thread", 0);
	sb_event_init(&ev, "agent.turn.completed", "held-run", SB_SRC_HARNESS, sb.data,
		      sb.size);
	w->rc = sb_log_append(w->log, &ev, 1);
	w->offset = ev.offset;
	msgpack_sbuffer_destroy(&sb);
	return NULL;
}

/* Group commit, whatever the scheduler does: while a commit is held (in
 * its hook), the appends that come meanwhile queue, and the very next
 * commit takes all of them. */
static void test_group_commit_held(void **state)
{
	struct fix *f = *state;
	struct held_hook h = {.log = f->log};
	struct held_writer w[HELD_WRITERS + 1];
	pthread_t tid[HELD_WRITERS + 1];
	uint64_t offs = 0;
	int waited = 0;

	pthread_mutex_init(&h.mu, NULL);
	pthread_cond_init(&h.cv, NULL);
	sb_log_set_hook(f->log, held_hook_fn, &h);
	w[0] = (struct held_writer){f->log, -1, 0};
	assert_int_equal(pthread_create(&tid[0], NULL, held_writer_main, &w[0]), 0);
	pthread_mutex_lock(&h.mu);
	while (!h.held)
		pthread_cond_wait(&h.cv, &h.mu);
	pthread_mutex_unlock(&h.mu);
	for (int i = 1; i <= HELD_WRITERS; i++) {
		w[i] = (struct held_writer){f->log, -1, 0};
		assert_int_equal(pthread_create(&tid[i], NULL, held_writer_main, &w[i]), 0);
	}
	/* every writer has queued behind the held commit */
	while (sb_log_queued(f->log) < HELD_WRITERS) {
		assert_true(++waited < 10000);
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	}
	pthread_mutex_lock(&h.mu);
	h.release = 1;
	pthread_cond_broadcast(&h.cv);
	pthread_mutex_unlock(&h.mu);
	for (int i = 0; i <= HELD_WRITERS; i++) {
		pthread_join(tid[i], NULL);
		assert_int_equal(w[i].rc, SB_OK);
		offs |= 1ull << w[i].offset;
	}
	assert_int_equal(w[0].offset, 1);
	assert_true(offs == ((1ull << (HELD_WRITERS + 2)) - 2)); /* 1..9, once each */
	assert_int_equal(h.calls, HELD_WRITERS + 1); /* one call per append */
	for (int i = 1; i <= HELD_WRITERS; i++)
		assert_int_equal(h.txn[i], h.txn[0] + 1); /* all in the next commit */
	sb_log_set_hook(f->log, NULL, NULL);
	pthread_cond_destroy(&h.cv);
	pthread_mutex_destroy(&h.mu);
}

/* Writers that come and go: eight threads that stop one after another
 * (each leader expects the writers of the last commit back, and some never
 * come), then one writer alone: every append succeeds, once, in each
 * writer's order, and the hook saw every batch once, in offset order. */
struct straggler {
	sb_log *log;
	int id, each, failed;
	uint64_t last;
	int bad_order;
};

static void *straggler_main(void *arg)
{
	struct straggler *t = arg;
	msgpack_sbuffer sb;
	char run[SB_RUN_MAX];

	snprintf(run, sizeof run, "str-%d", t->id);
	tu_json(&sb, "{'turn':3}");
	for (int i = 0; i < t->each; i++) {
		struct sb_event ev;
		sb_event_init(&ev, "agent.turn.completed", run, SB_SRC_HOST, sb.data, sb.size);
		if (sb_log_append(t->log, &ev, 1) != SB_OK)
			t->failed++;
		if (ev.offset <= t->last || ev.seq != (uint64_t)i + 1)
			t->bad_order++;
		t->last = ev.offset;
	}
	msgpack_sbuffer_destroy(&sb);
	return NULL;
}

static void test_group_commit_stragglers(void **state)
{
	enum { T = 8 };
	struct fix *f = *state;
	struct gc_hook hook = {.next = 1};
	struct straggler th[T + 1];
	pthread_t tid[T];
	uint64_t total = 0;

	sb_log_set_hook(f->log, gc_hook_fn, &hook);
	for (int i = 0; i < T; i++) {
		th[i] = (struct straggler){f->log, i, 40 * (i + 1), 0, 0, 0};
		total += (uint64_t)th[i].each;
		assert_int_equal(pthread_create(&tid[i], NULL, straggler_main, &th[i]), 0);
	}
	for (int i = 0; i < T; i++)
		pthread_join(tid[i], NULL);
	th[T] = (struct straggler){f->log, T, 100, 0, 0, 0};
	straggler_main(&th[T]); /* alone: nobody else is expected */
	total += 100;
	for (int i = 0; i <= T; i++) {
		assert_int_equal(th[i].failed, 0);
		assert_int_equal(th[i].bad_order, 0);
	}
	assert_true(last_offset(f->log) == total);
	assert_int_equal(hook.overlaps, 0);
	assert_int_equal(hook.bad_order, 0);
	assert_true(hook.events == total && hook.calls == total);
	sb_log_set_hook(f->log, NULL, NULL);
}

/* A full map refuses a group whole (SB_ERR_FULL for each of its batches,
 * offsets and seqs cleared), from one writer and from several; what was
 * acknowledged is all there is; reopened with room, the log and its run
 * index go on where they stopped. */
struct filler {
	sb_log *log;
	int id;
	uint64_t acked, full, other;
};

static void *filler_main(void *arg)
{
	struct filler *t = arg;
	static char body[2000];
	struct sb_event ev;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	int rc = SB_OK;

	memset(body, 'x', sizeof body - 1);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 2);
	sb_pack_kstr(&pk, "stream", "stdout");
	sb_pack_kstr(&pk, "data", body);
	while (rc != SB_ERR_FULL) {
		sb_event_init(&ev, "agent.output", t->id % 2 ? "fill-b" : "fill-a", SB_SRC_HOST, sb.data,
			      sb.size);
		rc = sb_log_append(t->log, &ev, 1);
		if (rc == SB_OK)
			t->acked++;
		else if (rc == SB_ERR_FULL && ev.offset == 0 && ev.seq == 0)
			t->full++;
		else
			t->other++;
	}
	msgpack_sbuffer_destroy(&sb);
	return NULL;
}

static void test_full_map(void **state)
{
	struct fix *f = *state;
	struct filler th[4];
	pthread_t tid[4];
	uint64_t acked = 0, seen = 0, seq[2] = {0, 0};
	struct batch more;
	sb_log_iter *it;
	struct sb_event ev;
	const char *old = getenv("SANBOX_MAP_MIB");
	int rc;

	sb_log_close(f->log);
	tu_rmrf(f->dir);
	f->dir = tu_tmpdir();
	setenv("SANBOX_MAP_MIB", "2", 1);
	assert_int_equal(sb_log_open(f->dir, SB_LOG_NOSYNC, &f->log), SB_OK);
	th[0] = (struct filler){f->log, 0, 0, 0, 0};
	filler_main(&th[0]); /* one writer until full */
	for (int i = 1; i < 4; i++) {
		th[i] = (struct filler){f->log, i, 0, 0, 0};
		assert_int_equal(pthread_create(&tid[i - 1], NULL, filler_main, &th[i]), 0);
	}
	for (int i = 1; i < 4; i++)
		pthread_join(tid[i - 1], NULL);
	for (int i = 0; i < 4; i++) {
		assert_true(th[i].full >= 1);
		assert_true(th[i].other == 0);
		acked += th[i].acked;
	}
	assert_true(th[0].acked > 100);
	assert_true(last_offset(f->log) == acked);
	setenv("SANBOX_MAP_MIB", "64", 1);
	reopen(f, 0);
	if (old)
		setenv("SANBOX_MAP_MIB", old, 1);
	else
		unsetenv("SANBOX_MAP_MIB");
	assert_int_equal(sb_log_iter_open(f->log, 1, &it), SB_OK);
	while ((rc = sb_log_iter_next(it, &ev)) == SB_OK) {
		int r = ev.run[5] == 'b';
		assert_true(ev.offset == ++seen);
		assert_true(ev.seq == ++seq[r]);
	}
	assert_int_equal(rc, SB_END);
	sb_log_iter_close(it);
	assert_true(seen == acked);
	assert_true(last_seq(f->log, "fill-a") == seq[0]);
	assert_true(last_seq(f->log, "fill-b") == seq[1]);
	{
		static const char *const fa[] = {"fill-a"};
		batch_make(&more, 70, fa, 1, 0, "room");
	}
	assert_int_equal(sb_log_append(f->log, more.evs, more.n), SB_OK);
	assert_true(more.evs[0].offset == acked + 1 && more.evs[0].seq == seq[0] + 1);
	assert_true(more.evs[69].seq == seq[0] + 70);
	assert_true(last_seq(f->log, "fill-a") == seq[0] + 70);
	batch_free(&more);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_append_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_last_unreadable, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_iter, setup, teardown),
		cmocka_unit_test_setup_teardown(test_iter_snapshot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_durable_reopen, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_batch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rdonly, setup, teardown),
		cmocka_unit_test_setup_teardown(test_timestamps, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_record_on_disk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_record_misplaced, setup, teardown),
		cmocka_unit_test_setup_teardown(test_format_version, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_iter_blocks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_runs_one_commit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_iter_records, setup, teardown),
		cmocka_unit_test(test_blob_hash_vector),
		cmocka_unit_test(test_hash_parse),
		cmocka_unit_test_setup_teardown(test_blobs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_upgrade_format2, setup, teardown),
		cmocka_unit_test_setup_teardown(test_upgrade_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_append_blobs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_blob_corrupt, setup, teardown),
		cmocka_unit_test_setup_teardown(test_group_commit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_group_commit_held, setup, teardown),
		cmocka_unit_test_setup_teardown(test_group_commit_stragglers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_full_map, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
