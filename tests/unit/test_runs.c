/* test_runs.c - the run manager (engine/runs/runs.h) as the daemon wires
 * it, its machines those of a fake runner: threads that speak the guest
 * channel as the agent does (tests/unit/fakerunner.h). A run from create
 * to its end, its events recorded in order with the guest's numbering; a
 * stop, a timeout and a spent budget reaching the guest as SIGTERM and
 * the runstate projection as their status; snapshots on demand, of the
 * disk and of the memory; a fork and a resume from a snapshot, on a
 * machine made over its frozen layer, a fork of a memory snapshot
 * (RESTORED), and those refused with nothing recorded; a daemon's restart
 * that takes a live run up again, the events its guest sent meanwhile
 * recorded once each, also while the guest boots (its SPEC made again)
 * and for a memory fork; a machine that died meanwhile; a machine that
 * dies, one that never boots, a guest whose set-up fails; a run stopped
 * while it is made; runs queued for their runner's capacity (each
 * runner's own); a create the runner fails
 * (recorded as failed) and one refused (nothing recorded); re-runs: one
 * stopped while queued (compared as never ran) and one a restarted daemon
 * takes up (its model calls answered from its original's record after
 * those it made, through the gateway as its tunnel reaches it; compared at
 * its end). Assertions read the record.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/error.h"
#include "engine/gateway/gateway.h"
#include "engine/gateway/secrets.h"
#include "engine/gateway/stubs.h"
#include "engine/home.h"
#include "engine/log/log.h"
#include "engine/mpack.h"
#include "engine/payload.h"
#include "engine/runs/run.h"
#include "engine/runs/runs.h"
#include "engine/settings.h"
#include "engine/work.h"
#include "projections/views.h"
#include "tests/gwclient.h"
#include "tests/unit/fakerunner.h"
#include "vmm/chan.h"
#include "tests/unit/testutil.h"

#define WAIT_S	20.0 /* how long anything may take on a loaded machine */
#define EVS_MAX 64
#define NO_RUN	"00000000beef"
#define HARNESS "/usr/bin/agent"

struct fix {
	char *home;
	struct sb_settings st;
	sb_loop *loop;
	sb_log *log;
	sb_projector *proj;
	sb_gateway *gw;
	sb_work *jobs;
	sb_stubs *stubs;
	struct fakerunner *fr;	  /* the runner "local" */
	struct fakerunner *other; /* the runner "fake" */
	struct sb_runner runners[2];
	struct sb_runs_env env;
	struct sb_runs *rs;
	/* the last answer of a create, from, stop or snapshot */
	int answers, rc;
	char id[SB_RUN_MAX], err[600];
	unsigned idles;
};

/* --- the daemon's part --- */

static void on_idle(void *ctx)
{
	((struct fix *)ctx)->idles++;
}

static void on_log_line(void *ctx, const char *line)
{
	print_message("runs: %s\n", line);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* A state directory with a template "box" and a model whose provider is
 * not the built-in stub (arming it starts nothing). */
static void home_make(struct fix *f)
{
	static const char *const files[] = {"vmlinux", "initrd.img", "rootfs.img"};
	char path[PATH_MAX];

	f->home = tu_tmpdir();
	assert_int_equal(sb_home_init(f->home), SB_OK);
	snprintf(path, sizeof path, "%s/templates/box", f->home);
	assert_int_equal(sb_mkdirs(path, 0700), SB_OK);
	snprintf(path, sizeof path, "%s/templates/box/template.json", f->home);
	write_file(path, "{\"name\":\"box\",\"hash\":\"feedface\",\"harness\":\"" HARNESS
			 "\",\"kernel_version\":\"6.1.0\",\"cpus\":1,\"memory_mib\":256,"
			 "\"timeout_s\":600}");
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		snprintf(path, sizeof path, "%s/templates/box/%s", f->home, files[i]);
		write_file(path, "");
	}
	snprintf(path, sizeof path, "%s/models.json", f->home);
	write_file(path,
		   "{\"default_model\":\"acme/m1\",\"providers\":{\"acme\":{\"base_url\":"
		   "\"http://127.0.0.1:1/v1\",\"api\":\"openai\",\"key_secret\":"
		   "\"ACME_KEY\"}},\"models\":{\"acme/m1\":{\"provider\":\"acme\","
		   "\"input\":1,\"output\":2}}}");
	unsetenv("SANBOX_TEMPLATES");
	assert_int_equal(sb_secret_set(f->home, "ACME_KEY", "provider-key", 12), SB_OK);
}

/* The run manager opens (a daemon starts): it takes up the live runs. */
static void daemon_up(struct fix *f)
{
	int rc;

	assert_int_equal(sb_work_open("jobs", 2, &f->jobs), SB_OK);
	f->env.jobs = f->jobs;
	if ((rc = sb_runs_open(&f->env, &f->rs)))
		fail_msg("sb_runs_open: %s", sb_errmsg(rc));
}

/* The run manager closes as the daemon's end closes it: its machines go on. */
static void daemon_down(struct fix *f)
{
	sb_work_close(f->jobs);
	f->jobs = NULL;
	sb_runs_close(f->rs);
	f->rs = NULL;
}

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof *f);
	struct sb_gateway_opts go = {0};
	char path[PATH_MAX];

	assert_non_null(f);
	home_make(f);
	sb_settings_defaults(&f->st);
	snprintf(path, sizeof path, "%s/log", f->home);
	assert_int_equal(sb_mkdirs(path, 0700), SB_OK);
	assert_int_equal(sb_log_open(path, SB_LOG_NOSYNC, &f->log), SB_OK);
	assert_int_equal(sb_projector_open(f->log, &f->proj), SB_OK);
	assert_int_equal(sb_loop_open(&f->loop), SB_OK);
	go.log = f->log;
	assert_int_equal(sb_gateway_open(&go, &f->gw), SB_OK);
	assert_int_equal(sb_stubs_open(&f->stubs), SB_OK);
	assert_int_equal(fakerunner_open(f->loop, &f->fr), SB_OK);
	assert_int_equal(fakerunner_open(f->loop, &f->other), SB_OK);
	f->runners[0] = (struct sb_runner){"local", &fakerunner_ops, f->fr};
	f->runners[1] = (struct sb_runner){"fake", &fakerunner_ops, f->other};
	f->env.home = f->home;
	f->env.settings = &f->st;
	f->env.loop = f->loop;
	f->env.log = f->log;
	f->env.proj = f->proj;
	f->env.gateway = f->gw;
	f->env.stubs = f->stubs;
	f->env.runners = f->runners;
	f->env.nrunners = sizeof f->runners / sizeof f->runners[0];
	f->env.idle = on_idle;
	f->env.log_line = on_log_line;
	f->env.ctx = f;
	daemon_up(f);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	sb_work_close(f->jobs);
	sb_runs_close(f->rs);
	fakerunner_close(f->fr);
	fakerunner_close(f->other);
	sb_gateway_close(f->gw);
	sb_stubs_close(f->stubs);
	sb_loop_close(f->loop);
	sb_projector_close(f->proj);
	sb_log_close(f->log);
	tu_rmrf(f->home);
	free(f);
	return 0;
}

/* --- running the loop until something holds --- */

struct waiter {
	struct fix *f;
	int (*cond)(struct fix *f, const void *arg);
	const void *arg;
	double deadline;
	int met;
};

static void on_look(void *ctx)
{
	struct waiter *w = ctx;

	if ((w->met = w->cond(w->f, w->arg)) || sb_loop_now(w->f->loop) > w->deadline)
		sb_loop_break(w->f->loop);
}

/* Runs the loop until cond(f, arg) holds (1) or WAIT_S passed (0). */
static int loop_until(struct fix *f, int (*cond)(struct fix *f, const void *arg),
		      const void *arg)
{
	struct waiter w = {f, cond, arg, sb_loop_now(f->loop) + WAIT_S, 0};
	sb_watch *t;

	if (cond(f, arg))
		return 1;
	assert_non_null(t = sb_loop_timer(f->loop, 0.005, 0.005, on_look, &w));
	sb_loop_run(f->loop);
	sb_watch_stop(t);
	return w.met;
}

static int c_answers(struct fix *f, const void *arg)
{
	return f->answers >= *(const int *)arg;
}

static int c_idle(struct fix *f, const void *arg)
{
	return sb_runs_active(f->rs) == 0;
}

/* Runs the loop until the answer number n came. */
static void await_answer(struct fix *f, int n)
{
	if (!loop_until(f, c_answers, &n))
		fail_msg("no answer %d within %g s", n, WAIT_S);
}

static void on_created(void *ctx, int rc, const char *run)
{
	struct fix *f = ctx;

	f->rc = rc;
	snprintf(f->err, sizeof f->err, "%s", rc ? sb_errmsg(rc) : "");
	snprintf(f->id, sizeof f->id, "%s", run ? run : "");
	f->answers++;
}

static void on_stopped(void *ctx, int rc)
{
	on_created(ctx, rc, NULL);
}

static void on_snap(void *ctx, int rc, const char *snapshot)
{
	on_created(ctx, rc, snapshot);
}

/* --- the record --- */

struct evs {
	size_t n;
	char type[EVS_MAX][SB_TYPE_MAX];
	enum sb_source src[EVS_MAX];
	json_t *p[EVS_MAX];
};

static void evs_free(struct evs *e)
{
	for (size_t i = 0; i < e->n; i++)
		json_decref(e->p[i]);
	e->n = 0;
}

/* Reads run's events in order (types only with payloads 0). */
static void evs_read_(struct fix *f, const char *run, struct evs *e, int payloads)
{
	sb_log_iter *it;
	struct sb_event ev;
	msgpack_zone zone;
	msgpack_object o;
	int rc;

	memset(e, 0, sizeof *e);
	if ((rc = sb_log_iter_open_run(f->log, run, 1, &it)) == SB_ERR_NOTFOUND)
		return;
	assert_int_equal(rc, SB_OK);
	assert_true(msgpack_zone_init(&zone, 4096));
	while ((rc = sb_log_iter_next(it, &ev)) == SB_OK) {
		assert_true(e->n < EVS_MAX);
		snprintf(e->type[e->n], SB_TYPE_MAX, "%s", ev.type);
		e->src[e->n] = ev.source;
		if (payloads) {
			assert_int_equal(
			    sb_payload_parse(ev.payload, ev.payload_len, &zone, &o),
			    SB_OK);
			e->p[e->n] = sb_msgpack_to_json(&o);
		}
		e->n++;
	}
	assert_int_equal(rc, SB_END);
	msgpack_zone_destroy(&zone);
	sb_log_iter_close(it);
}

static void evs_read(struct fix *f, const char *run, struct evs *e)
{
	evs_read_(f, run, e, 1);
}

static size_t evs_count(const struct evs *e, const char *type)
{
	size_t n = 0;

	for (size_t i = 0; i < e->n; i++)
		n += !strcmp(e->type[i], type);
	return n;
}

/* The payload of the nth (from 0) event of type. */
static json_t *evs_get(const struct evs *e, const char *type, size_t nth)
{
	for (size_t i = 0; i < e->n; i++)
		if (!strcmp(e->type[i], type) && !nth--)
			return e->p[i];
	fail_msg("no %s number %zu in the record", type, nth);
	return NULL;
}

/* Asserts that the record is exactly the NULL-ended types, in order. */
#define evs_expect(e, ...) evs_expect_((e), (const char *[]){__VA_ARGS__, NULL})
static void evs_expect_(const struct evs *e, const char **want)
{
	char got[2048] = "";
	size_t n = 0, at = 0;

	for (size_t i = 0; i < e->n; i++)
		at += (size_t)snprintf(got + at, at < sizeof got ? sizeof got - at : 0,
				       " %s", e->type[i]);
	for (; want[n]; n++)
		if (n >= e->n || strcmp(e->type[n], want[n]))
			fail_msg("event %zu is not %s; the record:%s", n, want[n], got);
	if (n != e->n)
		fail_msg("%zu events, %zu expected; the record:%s", e->n, n, got);
}

static const char *jstr(json_t *p, const char *key)
{
	const char *s = json_string_value(json_object_get(p, key));

	if (!s)
		fail_msg("no string %s in the payload", key);
	return s;
}

static json_int_t jint(json_t *p, const char *key)
{
	json_t *v = json_object_get(p, key);

	if (!json_is_integer(v))
		fail_msg("no integer %s in the payload", key);
	return json_integer_value(v);
}

struct want {
	const char *run, *type;
	size_t n;
};

/* The run's record holds at least n events of type. */
static int c_recorded(struct fix *f, const void *arg)
{
	const struct want *w = arg;
	struct evs e;
	size_t n;

	evs_read_(f, w->run, &e, 0);
	n = evs_count(&e, w->type);
	return n >= w->n;
}

static void await_recorded(struct fix *f, const char *run, const char *type, size_t n)
{
	struct want w = {run, type, n};

	if (!loop_until(f, c_recorded, &w))
		fail_msg("run %s: no %zu %s within %g s", run, n, type, WAIT_S);
}

/* The run ends (its nth run.stopped), and no run is left. */
static void await_end(struct fix *f, const char *run, size_t nth)
{
	await_recorded(f, run, "run.stopped", nth);
	if (!loop_until(f, c_idle, NULL))
		fail_msg("runs still active: %u", sb_runs_active(f->rs));
}

static void runstate(struct fix *f, const char *run, struct sb_runstate *st)
{
	assert_int_equal(sb_projector_catch_up(f->proj, NULL), SB_OK);
	assert_int_equal(sb_runstate_get(f->proj, run, st), SB_OK);
}

static uint64_t last_offset(struct fix *f)
{
	uint64_t n;

	assert_int_equal(sb_log_last_offset(f->log, &n), SB_OK);
	return n;
}

static void machine(struct fix *f, const char *run, unsigned nth,
		    struct fr_machine_info *m)
{
	if (fakerunner_machine(f->fr, run, nth, m))
		fail_msg("run %s has no machine %u", run, nth);
}

/* --- specs --- */

struct spec {
	msgpack_sbuffer sb;
	msgpack_zone zone;
	msgpack_object o;
};

/* A run.create spec of template tmpl, named name, with a prompt, a
 * timeout (0: the template's), one input (path NULL: none), a runner
 * (NULL: none named) and vCPUs (0: the template's). */
static void spec_make_on(struct spec *s, const char *tmpl, const char *name,
			 uint64_t timeout_s, const char *path, const char *data,
			 const char *runner, uint64_t cpus)
{
	msgpack_packer pk;
	sb_mapw m;

	msgpack_sbuffer_init(&s->sb);
	msgpack_packer_init(&pk, &s->sb, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	sb_mapw_str(&m, "template", tmpl);
	sb_mapw_str(&m, "name", name);
	sb_mapw_str(&m, "prompt", "do it");
	if (timeout_s)
		sb_mapw_u64(&m, "timeout_s", timeout_s);
	if (runner)
		sb_mapw_str(&m, "runner", runner);
	if (cpus)
		sb_mapw_u64(&m, "cpus", cpus);
	if (path) {
		msgpack_pack_array(sb_mapw_key(&m, "inputs"), 1);
		msgpack_pack_map(&m.pk, 2);
		sb_pack_kstr(&m.pk, "path", path);
		sb_pack_str(&m.pk, "data");
		msgpack_pack_bin_with_body(&m.pk, data, strlen(data));
	}
	assert_int_equal(sb_mapw_end(&m), SB_OK);
	assert_true(msgpack_zone_init(&s->zone, 1024));
	assert_int_equal(sb_payload_parse(s->sb.data, s->sb.size, &s->zone, &s->o),
			 SB_OK);
}

static void spec_make(struct spec *s, const char *tmpl, const char *name,
		      uint64_t timeout_s, const char *path, const char *data)
{
	spec_make_on(s, tmpl, name, timeout_s, path, data, NULL, 0);
}

static void spec_free(struct spec *s)
{
	msgpack_zone_destroy(&s->zone);
	msgpack_sbuffer_destroy(&s->sb);
}

/* Creates a run of s and waits for the answer: its rc (the id in f->id). */
static int create(struct fix *f, const struct spec *s)
{
	int rc, n = f->answers + 1;

	if ((rc = sb_runs_create(f->rs, &s->o, on_created, f)))
		return rc;
	await_answer(f, n);
	return f->rc;
}

/* Creates a run of template box named name that starts, its id into id. */
static void start_run(struct fix *f, const char *name, uint64_t timeout_s, char *id)
{
	struct spec s;
	int rc;

	spec_make(&s, "box", name, timeout_s, NULL, NULL);
	if ((rc = create(f, &s)))
		fail_msg("create %s: %s", name, f->err);
	snprintf(id, SB_RUN_MAX, "%s", f->id);
	spec_free(&s);
	await_recorded(f, id, "harness.input.ready", 1);
}

static int stop(struct fix *f, const char *run, const char *reason)
{
	int rc, n = f->answers + 1;

	if ((rc = sb_runs_stop(f->rs, run, reason, on_stopped, f)))
		return rc;
	await_answer(f, n);
	return f->rc;
}

static int from(struct fix *f, const struct sb_runs_from *fr)
{
	int rc, n = f->answers + 1;

	if ((rc = sb_runs_from(f->rs, fr, on_created, f)))
		return rc;
	await_answer(f, n);
	return f->rc;
}

static int snapshot(struct fix *f, const char *run, int memory)
{
	int rc, n = f->answers + 1;

	if ((rc = sb_runs_snapshot(f->rs, run, memory, on_snap, f)))
		return rc;
	await_answer(f, n);
	return f->rc;
}

/* --- a run's whole life --- */

static const struct fr_step life_steps[] = {
    {.op = FR_OUTPUT, .text = "working\n"},
    {.op = FR_FILE, .text = "/workspace/out.txt", .data = "result"},
    {.op = FR_LINE,
     .text = "{\"type\": \"agent.message\", \"payload\": {\"role\": \"assistant\"}}"},
    {.op = FR_EXIT, .n = 3},
    {.op = FR_END},
};

/* The content of the agent.file.changed payload p, from the blob table,
 * is data. */
static void content_is(struct fix *f, json_t *p, const char *data)
{
	uint8_t key[SB_HASH_LEN];
	void *blob;
	size_t len;

	assert_int_equal(sb_hash_parse(jstr(p, "content"), key), SB_OK);
	assert_int_equal(sb_blob_get(f->log, key, &blob, &len), SB_OK);
	assert_int_equal(len, strlen(data));
	assert_memory_equal(blob, data, len);
	free(blob);
}

/* The record of the run test_lifecycle made. */
static void life_record_check(struct fix *f, const char *run)
{
	struct evs e;

	evs_read(f, run, &e);
	evs_expect(&e, "run.created", "run.policy.resolved", "secret.granted",
		   "run.started", "harness.input.ready", "agent.output",
		   "agent.file.changed", "agent.message", "run.exited", "snapshot.saved",
		   "run.stopped");
	assert_string_equal(jstr(e.p[0], "name"), "life");
	assert_string_equal(jstr(e.p[3], "accel"), "fake");
	assert_string_equal(jstr(e.p[3], "boot"), "cold");
	/* the guest's and the harness's events, numbered by the guest */
	for (size_t i = 4; i <= 8; i++) {
		assert_int_equal(e.src[i], i == 7 ? SB_SRC_HARNESS : SB_SRC_GUEST);
		assert_int_equal(jint(e.p[i], "guest_seq"), (json_int_t)i - 3);
	}
	assert_int_equal(jint(e.p[4], "files"), 1);
	assert_int_equal(jint(e.p[4], "bytes"), 5);
	assert_string_equal(jstr(e.p[5], "data"), "working\n");
	assert_string_equal(jstr(e.p[6], "path"), "/workspace/out.txt");
	content_is(f, e.p[6], "result");
	assert_string_equal(jstr(e.p[7], "role"), "assistant");
	assert_int_equal(jint(e.p[8], "status"), 3);
	assert_int_equal(jint(e.p[8], "signal"), 0);
	assert_string_equal(jstr(e.p[9], "trigger"), "end");
	assert_string_equal(jstr(e.p[9], "snapshot"), "s0");
	assert_string_equal(jstr(e.p[10], "reason"), "exited");
	evs_free(&e);
}

/* Created, started, the guest's events recorded in order with its
 * numbers, its exit status, the disk's last snapshot, run.stopped. */
static void test_lifecycle(void **state)
{
	struct fix *f = *state;
	struct fr_script sc = {.steps = life_steps};
	struct fr_machine_info m;
	struct sb_runstate st;
	struct spec s;

	assert_int_equal(fakerunner_script(f->fr, "life", &sc), SB_OK);
	spec_make(&s, "box", "life", 0, "notes.txt", "hello");
	if (create(f, &s))
		fail_msg("create: %s", f->err);
	spec_free(&s);
	assert_int_equal(strlen(f->id), SB_RUN_ID_LEN);
	await_end(f, f->id, 1);
	assert_true(f->idles >= 1);
	life_record_check(f, f->id);

	runstate(f, f->id, &st);
	assert_string_equal(st.status, "exited");
	assert_int_equal(st.has_exit, 1);
	assert_int_equal(st.exit_status, 3);
	assert_int_equal(st.snapshots, 1);
	/* what the guest was given */
	machine(f, f->id, 0, &m);
	assert_int_equal(m.specs, 1);
	assert_int_equal(m.input_files, 1);
	assert_int_equal(m.input_bytes, 5);
	assert_string_equal(m.argv, HARNESS " do it");
	assert_int_equal(m.nsignals, 0);
	assert_int_equal(m.kept, 0);
	assert_true(m.ended);
	assert_int_equal(fakerunner_made(f->fr), 1);
}

/* A hostile guest answers commands nobody sent: EXEC_OUT, EXEC_EXIT and
 * PUT_DONE on streams no exec or put of the run has (0, 1, the largest),
 * well formed and not (a body that is no map, fields of the wrong types). */
static const struct fr_step unasked_steps[] = {
    {.op = FR_ANSWER, .n = SB_CHAN_EXEC_OUT, .stream = 1,
     .text = "{'stream': 'stdout', 'data': 'forged'}"},
    {.op = FR_ANSWER, .n = SB_CHAN_EXEC_EXIT, .stream = 1,
     .text = "{'status': 0, 'stdout_bytes': 99999999999}"},
    {.op = FR_ANSWER, .n = SB_CHAN_PUT_DONE, .stream = 0, .text = "{'files': 1, 'bytes': 1}"},
    {.op = FR_ANSWER, .n = SB_CHAN_EXEC_EXIT, .stream = UINT64_MAX, .text = NULL},
    {.op = FR_ANSWER, .n = SB_CHAN_PUT_DONE, .stream = 7, .text = "{'files': 'x', 'error': 5}"},
    {.op = FR_ANSWER, .n = SB_CHAN_EXEC_OUT, .stream = 2, .text = NULL},
    {.op = FR_OUTPUT, .text = "after\n"},
    {.op = FR_EXIT, .n = 0},
    {.op = FR_END},
};

/* Answers to commands that were never sent are dropped: nothing is
 * recorded of them, and the run goes on and ends as its guest says. */
static void test_unasked_answers(void **state)
{
	struct fix *f = *state;
	struct fr_script sc = {.steps = unasked_steps};
	struct sb_runstate st;
	struct spec s;
	struct evs e;

	assert_int_equal(fakerunner_script(f->fr, "unasked", &sc), SB_OK);
	spec_make(&s, "box", "unasked", 0, "notes.txt", "hello");
	if (create(f, &s))
		fail_msg("create: %s", f->err);
	spec_free(&s);
	await_end(f, f->id, 1);
	evs_read(f, f->id, &e);
	evs_expect(&e, "run.created", "run.policy.resolved", "secret.granted",
		   "run.started", "harness.input.ready", "agent.output", "run.exited",
		   "snapshot.saved", "run.stopped");
	assert_string_equal(jstr(e.p[5], "data"), "after\n");
	assert_int_equal(jint(e.p[6], "status"), 0);
	evs_free(&e);
	runstate(f, f->id, &st);
	assert_string_equal(st.status, "exited");
	assert_int_equal(st.exit_status, 0);
}

static const struct fr_step waits_steps[] = {
    {.op = FR_OUTPUT, .text = "waiting"},
    {.op = FR_SIGNALLED},
    {.op = FR_END},
};

/* A run stopped: its harness gets SIGTERM through the channel, exits of
 * it, and the record says why; a second stop, or one of no run, fails. */
static void test_stop(void **state)
{
	struct fix *f = *state;
	struct fr_script sc = {.steps = waits_steps};
	struct fr_machine_info m;
	struct sb_runstate st;
	char id[SB_RUN_MAX];
	struct evs e;

	assert_int_equal(fakerunner_script(f->fr, NULL, &sc), SB_OK);
	start_run(f, "stopme", 0, id);
	await_recorded(f, id, "agent.output", 1);
	assert_int_equal(stop(f, id, "stopped"), SB_OK);
	await_end(f, id, 1);

	evs_read(f, id, &e);
	evs_expect(&e, "run.created", "run.policy.resolved", "secret.granted",
		   "run.started", "harness.input.ready", "agent.output", "run.exited",
		   "snapshot.saved", "run.stopped");
	assert_int_equal(jint(e.p[6], "signal"), SIGTERM);
	assert_int_equal(jint(e.p[6], "status"), 128 + SIGTERM);
	assert_string_equal(jstr(e.p[8], "reason"), "stopped");
	machine(f, id, 0, &m);
	assert_int_equal(m.nsignals, 1);
	assert_int_equal(m.signals[0], SIGTERM);
	runstate(f, id, &st);
	assert_string_equal(st.status, "stopped");
	assert_string_equal(st.reason, "stopped");
	evs_free(&e);

	/* it ended: nothing more is recorded */
	assert_int_equal(stop(f, id, "stopped"), SB_ERR_STATE);
	tu_errmsg_has(f->rc, "is not running");
	assert_int_equal(stop(f, NO_RUN, "stopped"), SB_ERR_NOTFOUND);
	evs_read(f, id, &e);
	assert_int_equal(evs_count(&e, "run.stopped"), 1);
	evs_free(&e);
}

/* A run past its timeout_s is stopped so: SIGTERM, status timeout. */
static void test_timeout(void **state)
{
	struct fix *f = *state;
	struct fr_script sc = {.steps = waits_steps};
	struct fr_machine_info m;
	struct sb_runstate st;
	char id[SB_RUN_MAX];
	struct timespec t0, t1;
	struct evs e;

	assert_int_equal(fakerunner_script(f->fr, NULL, &sc), SB_OK);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	start_run(f, "slow", 1, id);
	await_end(f, id, 1);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_true((double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9 >=
		    0.9);

	evs_read(f, id, &e);
	assert_string_equal(jstr(evs_get(&e, "run.stopped", 0), "reason"), "timeout");
	assert_int_equal(jint(evs_get(&e, "run.exited", 0), "signal"), SIGTERM);
	machine(f, id, 0, &m);
	assert_int_equal(m.signals[0], SIGTERM);
	runstate(f, id, &st);
	assert_string_equal(st.status, "timeout");
	assert_int_equal(st.timeout_s, 1);
	assert_int_equal(st.exit_status, 128 + SIGTERM);
	evs_free(&e);
}

/* A run whose budget is spent is stopped as the daemon's gateway hook
 * stops it (reason budget): the runstate says budget. */
static double since(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) + (t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* A run its budget stopped: its harness (one that never ends on its own)
 * is asked to end only after the wind-down, 15 s. */
static void test_budget(void **state)
{
	struct fix *f = *state;
	struct fr_script sc = {.steps = waits_steps};
	struct sb_runstate st;
	char id[SB_RUN_MAX];
	struct timespec t0;
	struct evs e;

	assert_int_equal(fakerunner_script(f->fr, NULL, &sc), SB_OK);
	start_run(f, "spender", 0, id);
	runstate(f, id, &st);
	assert_string_equal(st.status, "running");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(sb_runs_stop(f->rs, id, "budget", NULL, NULL), SB_OK);
	await_end(f, id, 1);
	assert_true(since(&t0) >= 15.0);
	evs_read(f, id, &e);
	assert_string_equal(jstr(evs_get(&e, "run.stopped", 0), "reason"), "budget");
	assert_int_equal(jint(evs_get(&e, "run.exited", 0), "signal"), SIGTERM);
	runstate(f, id, &st);
	assert_string_equal(st.status, "budget");
	evs_free(&e);
}

/* Another stop during a budget stop's wind-down asks the harness at once;
 * the run's end stays the budget's. */
static void test_budget_then_stop(void **state)
{
	struct fix *f = *state;
	struct fr_script sc = {.steps = waits_steps};
	char id[SB_RUN_MAX];
	struct timespec t0;
	struct evs e;

	assert_int_equal(fakerunner_script(f->fr, NULL, &sc), SB_OK);
	start_run(f, "spender", 0, id);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(sb_runs_stop(f->rs, id, "budget", NULL, NULL), SB_OK);
	assert_int_equal(sb_runs_stop(f->rs, id, "stopped", NULL, NULL), SB_OK);
	await_end(f, id, 1);
	assert_true(since(&t0) < 12.0); /* not the 15 s wind-down */
	evs_read(f, id, &e);
	assert_string_equal(jstr(evs_get(&e, "run.stopped", 0), "reason"), "budget");
	assert_int_equal(jint(evs_get(&e, "run.exited", 0), "signal"), SIGTERM);
	evs_free(&e);
}

/* Snapshots on demand: the guest is asked to SYNC, the runner freezes
 * the machine's layer (with its memory) and the machine goes on in a new
 * one; snapshot.saved says which. */
static void test_snapshot(void **state)
{
	struct fix *f = *state;
	struct fr_script sc = {.steps = waits_steps};
	struct fr_machine_info m;
	struct sb_runstate st;
	char id[SB_RUN_MAX], path[64];
	struct evs e;
	json_t *p;

	assert_int_equal(fakerunner_script(f->fr, NULL, &sc), SB_OK);
	start_run(f, "snap", 0, id);
	assert_int_equal(snapshot(f, id, 0), SB_OK);
	assert_string_equal(f->id, "s0");
	assert_int_equal(snapshot(f, id, 1), SB_OK);
	assert_string_equal(f->id, "s1");
	machine(f, id, 0, &m);
	assert_int_equal(m.layer, 2);
	assert_true(m.syncs >= 2);
	assert_int_equal(fakerunner_frozen(f->fr), 2);

	evs_read(f, id, &e);
	assert_int_equal(evs_count(&e, "snapshot.saved"), 2);
	p = evs_get(&e, "snapshot.saved", 0);
	assert_string_equal(jstr(p, "snapshot"), "s0");
	assert_string_equal(jstr(p, "kind"), "disk");
	assert_string_equal(jstr(p, "trigger"), "demand");
	assert_int_equal(jint(p, "layer_no"), 0);
	/* the runner's names, which are not under the state directory */
	snprintf(path, sizeof path, "fakerunner/%s/layers/0", id);
	assert_string_equal(jstr(p, "layer"), path);
	assert_string_equal(jstr(p, "memory"), "");
	assert_true(json_is_true(json_object_get(p, "synced")));
	p = evs_get(&e, "snapshot.saved", 1);
	assert_string_equal(jstr(p, "snapshot"), "s1");
	assert_string_equal(jstr(p, "kind"), "memory");
	assert_int_equal(jint(p, "memory_bytes"), FR_MEMORY_BYTES);
	snprintf(path, sizeof path, "fakerunner/%s/layers/1.mem", id);
	assert_string_equal(jstr(p, "memory"), path);
	assert_true(json_is_true(json_object_get(p, "frozen")));
	evs_free(&e);

	assert_int_equal(stop(f, id, "stopped"), SB_OK);
	await_end(f, id, 1);
	assert_int_equal(sb_runs_snapshot(f->rs, id, 0, on_snap, f), SB_ERR_STATE);
	runstate(f, id, &st);
	assert_int_equal(st.snapshots, 3); /* and the end's */
}

static const struct fr_step child_steps[] = {
    {.op = FR_OUTPUT, .text = "child"},
    {.op = FR_EXIT, .n = 0},
    {.op = FR_END},
};

/* A fork of a snapshot: a new run whose machine is made over the
 * snapshot's layer, its record starting with run.forked. */
static void fork_check(struct fix *f, const char *parent, char *child)
{
	struct fr_script sc = {.steps = child_steps};
	struct sb_runs_from fr = {.run = parent,
				  .snapshot = "s0",
				  .at = UINT64_MAX,
				  .name = "child",
				  .prompt = "carry on"};
	struct fr_machine_info m;
	struct sb_runstate st;
	struct evs e;

	assert_int_equal(fakerunner_script(f->fr, "child", &sc), SB_OK);
	if (from(f, &fr))
		fail_msg("fork: %s", f->err);
	snprintf(child, SB_RUN_MAX, "%s", f->id);
	assert_string_not_equal(child, parent);
	await_recorded(f, child, "run.stopped", 1);
	evs_read(f, child, &e);
	evs_expect(&e, "run.created", "run.policy.resolved", "secret.granted",
		   "run.forked", "run.started", "harness.input.ready", "agent.output",
		   "run.exited", "snapshot.saved", "run.stopped");
	assert_string_equal(jstr(e.p[0], "name"), "child");
	assert_string_equal(jstr(e.p[3], "from_run"), parent);
	assert_string_equal(jstr(e.p[3], "snapshot"), "s0");
	assert_true(json_is_false(json_object_get(e.p[3], "memory")));
	assert_int_equal(jint(e.p[7], "guest_seq"), 3);
	assert_string_equal(jstr(e.p[9], "reason"), "exited");
	evs_free(&e);
	machine(f, child, 0, &m);
	assert_true(m.from);
	assert_string_equal(m.from_run, parent);
	assert_int_equal(m.base_layer, 0);
	assert_int_equal(m.memory_bytes, 0);
	assert_int_equal(m.input_files, 0); /* its parent's inputs are on its disk */
	assert_string_equal(m.argv, HARNESS " carry on");
	runstate(f, child, &st);
	assert_string_equal(st.parent, parent);
	assert_string_equal(st.parent_snapshot, "s0");
	runstate(f, parent, &st);
	assert_int_equal(st.forks, 1);
}

static const struct fr_step resumed_steps[] = {
    {.op = FR_OUTPUT, .text = "resumed"},
    {.op = FR_EXIT, .n = 0},
    {.op = FR_END},
};

/* The parent, ended, resumed from s0 with a new prompt: the same run goes
 * on (run.resumed) on a machine made over its s0. */
static void resume_check(struct fix *f, const char *parent)
{
	struct fr_script sc = {.steps = resumed_steps};
	struct sb_runs_from fr = {.run = parent,
				  .snapshot = "s0",
				  .at = UINT64_MAX,
				  .resume = 1,
				  .prompt = "again"};
	struct fr_machine_info m;
	struct sb_runstate st;
	struct evs e;
	size_t at;

	assert_int_equal(fakerunner_script(f->fr, "parent", &sc), SB_OK);
	if (from(f, &fr))
		fail_msg("resume: %s", f->err);
	assert_string_equal(f->id, parent);
	await_end(f, parent, 2);
	evs_read(f, parent, &e);
	for (at = 0; strcmp(e.type[at], "run.stopped"); at++)
		;
	assert_string_equal(e.type[++at], "run.resumed");
	assert_string_equal(jstr(e.p[at], "from_run"), parent);
	assert_string_equal(jstr(e.p[at], "snapshot"), "s0");
	assert_string_equal(jstr(e.p[at], "prompt"), "again");
	assert_string_equal(e.type[++at], "run.started");
	assert_string_equal(e.type[++at], "harness.input.ready");
	assert_int_equal(jint(e.p[at], "guest_seq"), 1); /* a new start numbers from 1 */
	assert_string_equal(e.type[++at], "agent.output");
	assert_string_equal(jstr(e.p[at], "data"), "resumed");
	assert_string_equal(e.type[++at], "run.exited");
	assert_string_equal(e.type[++at], "snapshot.saved");
	assert_string_equal(e.type[++at], "run.stopped");
	assert_int_equal(at + 1, e.n);
	evs_free(&e);
	machine(f, parent, 1, &m);
	assert_true(m.from);
	assert_string_equal(m.from_run, parent);
	assert_int_equal(m.base_layer, 0);
	assert_string_equal(m.argv, HARNESS " again");
	runstate(f, parent, &st);
	assert_string_equal(st.status, "exited");
}

static void test_fork_resume(void **state)
{
	struct fix *f = *state;
	struct fr_script sc = {.steps = waits_steps};
	struct spec s;
	char parent[SB_RUN_MAX], child[SB_RUN_MAX];

	assert_int_equal(fakerunner_script(f->fr, "parent", &sc), SB_OK);
	spec_make(&s, "box", "parent", 0, "notes.txt", "hello");
	if (create(f, &s))
		fail_msg("create: %s", f->err);
	snprintf(parent, sizeof parent, "%s", f->id);
	spec_free(&s);
	await_recorded(f, parent, "agent.output", 1);
	assert_int_equal(snapshot(f, parent, 0), SB_OK);
	assert_string_equal(f->id, "s0");

	fork_check(f, parent, child);
	/* a live run is forked, not resumed */
	assert_int_equal(sb_runs_from(f->rs,
				      &(struct sb_runs_from){
					  .run = parent, .at = UINT64_MAX, .resume = 1},
				      on_created, f),
			 SB_ERR_STATE);
	assert_int_equal(stop(f, parent, "stopped"), SB_OK);
	await_end(f, parent, 1);
	resume_check(f, parent);
}

static const struct fr_step copy_steps[] = {
    {.op = FR_OUTPUT, .text = "copy"},
    {.op = FR_EXIT, .n = 0},
    {.op = FR_END},
};

static const struct fr_step copy_restart_steps[] = {
    {.op = FR_OUTPUT, .text = "copy"},
    {.op = FR_HOST_GONE},
    {.op = FR_OUTPUT, .text = "after"},
    {.op = FR_EXIT, .n = 0},
    {.op = FR_END},
};

/* A fork of a memory snapshot: its machine continues the snapshot's
 * memory (boot memory), its guest is told RESTORED and goes on without a
 * SPEC, numbering its frames from 1; a daemon's restart takes it up
 * again without a second RESTORED, its numbering going on. */
static void test_memory_fork(void **state)
{
	struct fix *f = *state;
	struct fr_script sc = {.steps = waits_steps},
			 copy = {.steps = copy_restart_steps};
	struct fr_machine_info m;
	char parent[SB_RUN_MAX], child[SB_RUN_MAX];
	struct evs e;

	assert_int_equal(fakerunner_script(f->fr, NULL, &sc), SB_OK);
	assert_int_equal(fakerunner_script(f->fr, "copy", &copy), SB_OK);
	start_run(f, "original", 0, parent);
	assert_int_equal(snapshot(f, parent, 1), SB_OK);
	assert_string_equal(f->id, "s0");
	if (from(f,
		 &(struct sb_runs_from){
		     .run = parent, .snapshot = "s0", .at = UINT64_MAX, .name = "copy"}))
		fail_msg("fork: %s", f->err);
	snprintf(child, sizeof child, "%s", f->id);
	await_recorded(f, child, "agent.output", 1);
	daemon_down(f);
	daemon_up(f);
	await_recorded(f, child, "run.stopped", 1);
	evs_read(f, child, &e);
	evs_expect(&e, "run.created", "run.policy.resolved", "secret.granted",
		   "run.forked", "run.started", "agent.output", "run.warning",
		   "agent.output", "run.exited", "snapshot.saved", "run.stopped");
	assert_true(json_is_true(json_object_get(e.p[3], "memory")));
	assert_string_equal(jstr(e.p[4], "boot"), "memory");
	assert_int_equal(jint(e.p[5], "guest_seq"), 1);
	assert_string_equal(jstr(e.p[7], "data"), "after");
	assert_int_equal(jint(e.p[7], "guest_seq"), 2);
	assert_string_equal(jstr(e.p[10], "reason"), "exited");
	evs_free(&e);
	machine(f, child, 0, &m);
	assert_int_equal(m.memory_bytes, FR_MEMORY_BYTES);
	assert_int_equal(m.restored, 1);
	assert_int_equal(m.specs, 0);
	assert_int_equal(m.hellos, 2);
	sb_runs_stop_all(f->rs, "daemon-stop");
	await_end(f, parent, 1);
}

/* A fork of a snapshot that is not there, or whose layer is lost, is
 * refused with nothing recorded and no machine made. */
static void test_from_refused(void **state)
{
	struct fix *f = *state;
	struct fr_script sc = {.steps = waits_steps};
	char id[SB_RUN_MAX];
	uint64_t last;
	unsigned made;

	assert_int_equal(fakerunner_script(f->fr, NULL, &sc), SB_OK);
	start_run(f, "origin", 0, id);
	assert_int_equal(snapshot(f, id, 0), SB_OK);
	assert_int_equal(stop(f, id, "stopped"), SB_OK);
	await_end(f, id, 1);
	last = last_offset(f);
	made = fakerunner_made(f->fr);

	assert_int_equal(
	    from(f,
		 &(struct sb_runs_from){.run = id, .snapshot = "s9", .at = UINT64_MAX}),
	    SB_ERR_NOTFOUND);
	tu_errmsg_has(f->rc, "no snapshot s9");
	assert_int_equal(from(f, &(struct sb_runs_from){.run = NO_RUN, .at = UINT64_MAX}),
			 SB_ERR_NOTFOUND);
	assert_int_equal(fakerunner_lose(f->fr, id, 0), SB_OK);
	assert_int_equal(
	    from(f,
		 &(struct sb_runs_from){.run = id, .snapshot = "s0", .at = UINT64_MAX}),
	    SB_ERR_NOTFOUND);
	tu_errmsg_has(f->rc, "its layer is gone");
	assert_int_equal(from(f, &(struct sb_runs_from){.run = id,
							.snapshot = "s0",
							.at = UINT64_MAX,
							.resume = 1}),
			 SB_ERR_NOTFOUND);
	assert_int_equal(last_offset(f), last);
	assert_int_equal(fakerunner_made(f->fr), made);
	assert_int_equal(sb_runs_active(f->rs), 0);
}

static const struct fr_step restart_steps[] = {
    {.op = FR_OUTPUT, .text = "before"},
    {.op = FR_ACKED},
    {.op = FR_DEAF},
    {.op = FR_OUTPUT, .text = "unacked"},
    {.op = FR_HOST_GONE},
    {.op = FR_OUTPUT, .text = "while down 1"},
    {.op = FR_OUTPUT, .text = "while down 2"},
    {.op = FR_EXIT, .n = 0},
    {.op = FR_END},
};

/* Polls (the loop not running: the daemon is down) until the machine's
 * guest has numbered seq frames and lost its host. */
static void await_guest(struct fix *f, const char *run, uint64_t seq)
{
	struct fr_machine_info m;

	for (int i = 0; i < (int)(WAIT_S * 100); i++) {
		machine(f, run, 0, &m);
		if (m.seq >= seq && !m.connected)
			return;
		usleep(10000);
	}
	fail_msg("run %s: its guest numbered %llu frames, not %llu", run,
		 (unsigned long long)m.seq, (unsigned long long)seq);
}

/* The daemon restarts while its run's guest goes on: the guest's frames
 * a previous daemon recorded (their ACKs lost) are not recorded again,
 * those it sent while no daemon listened come again (RESEND) and are
 * recorded once each, in order; the run ends as it would have. */
static void test_restart(void **state)
{
	struct fix *f = *state;
	struct fr_script sc = {.steps = restart_steps};
	static const char *const data[] = {"before", "unacked", "while down 1",
					   "while down 2"};
	struct fr_machine_info m;
	char id[SB_RUN_MAX];
	struct evs e;

	assert_int_equal(fakerunner_script(f->fr, NULL, &sc), SB_OK);
	start_run(f, "keeper", 0, id);
	await_recorded(f, id, "agent.output", 2);
	daemon_down(f);
	await_guest(f, id, 6); /* ready, 4 outputs, run.exited */
	machine(f, id, 0, &m);
	assert_int_equal(m.kept, 4); /* "unacked" on */
	daemon_up(f);
	await_end(f, id, 1);

	evs_read(f, id, &e);
	evs_expect(&e, "run.created", "run.policy.resolved", "secret.granted",
		   "run.started", "harness.input.ready", "agent.output", "agent.output",
		   "run.warning", "agent.output", "agent.output", "run.exited",
		   "snapshot.saved", "run.stopped");
	assert_string_equal(jstr(e.p[7], "message"),
			    "taken up again by a restarted daemon");
	for (size_t i = 0, k = 0; i < e.n; i++) {
		if (strcmp(e.type[i], "agent.output"))
			continue;
		assert_string_equal(jstr(e.p[i], "data"), data[k]);
		assert_int_equal(jint(e.p[i], "guest_seq"), (json_int_t)k + 2);
		k++;
	}
	assert_int_equal(jint(e.p[10], "guest_seq"), 6);
	assert_string_equal(jstr(e.p[12], "reason"), "exited");
	evs_free(&e);
	machine(f, id, 0, &m);
	assert_int_equal(m.hellos, 2);
	assert_int_equal(m.resends, 1);
	assert_int_equal(m.specs, 1); /* set up: not sent again */
	assert_int_equal(m.kept, 0);
	assert_int_equal(fakerunner_made(f->fr), 1);
}

/* The daemon restarts while its run's guest boots: the next daemon makes
 * the guest's SPEC again from the record, its inputs from the blob table. */
static void test_restart_booting(void **state)
{
	struct fix *f = *state;
	struct fr_script sc = {.late = 1, .steps = copy_steps};
	struct fr_machine_info m;
	struct spec s;
	char id[SB_RUN_MAX];
	struct evs e;

	assert_int_equal(fakerunner_script(f->fr, NULL, &sc), SB_OK);
	spec_make(&s, "box", "late", 0, "notes.txt", "hello");
	if (create(f, &s))
		fail_msg("create: %s", f->err);
	spec_free(&s);
	snprintf(id, sizeof id, "%s", f->id);
	await_recorded(f, id, "run.started", 1);
	daemon_down(f);
	daemon_up(f);
	await_end(f, id, 1);
	evs_read(f, id, &e);
	evs_expect(&e, "run.created", "run.policy.resolved", "secret.granted",
		   "run.started", "run.warning", "harness.input.ready", "agent.output",
		   "run.exited", "snapshot.saved", "run.stopped");
	assert_int_equal(jint(e.p[5], "files"), 1);
	assert_int_equal(jint(e.p[5], "bytes"), 5);
	assert_string_equal(jstr(e.p[9], "reason"), "exited");
	evs_free(&e);
	machine(f, id, 0, &m);
	assert_int_equal(m.hellos, 1);
	assert_int_equal(m.specs, 1);
	assert_int_equal(m.input_bytes, 5);
	assert_string_equal(m.argv, HARNESS " do it");
}

/* A run whose machine ended while no daemon ran fails so. */
static void test_restart_gone(void **state)
{
	struct fix *f = *state;
	struct fr_script sc = {.steps = waits_steps};
	struct fr_machine_info m;
	struct sb_runstate st;
	char id[SB_RUN_MAX];
	struct evs e;

	assert_int_equal(fakerunner_script(f->fr, NULL, &sc), SB_OK);
	start_run(f, "orphan", 0, id);
	daemon_down(f);
	assert_int_equal(fakerunner_kill(f->fr, id, SIGKILL, "killed"), SB_OK);
	for (int i = 0; i < (int)(WAIT_S * 100) && (machine(f, id, 0, &m), !m.ended); i++)
		usleep(10000);
	assert_true(m.ended);
	daemon_up(f);
	assert_int_equal(sb_runs_active(f->rs), 0);
	evs_read(f, id, &e);
	assert_string_equal(e.type[e.n - 2], "run.failed");
	assert_string_equal(jstr(e.p[e.n - 2], "reason"),
			    "its VM ended while sanboxd was not running");
	assert_string_equal(e.type[e.n - 1], "run.stopped");
	assert_string_equal(jstr(e.p[e.n - 1], "reason"), "failed");
	runstate(f, id, &st);
	assert_string_equal(st.status, "failed");
	evs_free(&e);
}

#define CRASH "QEMU was killed by signal 9 (Killed) before the harness reported"

static const struct fr_step crash_steps[] = {
    {.op = FR_OUTPUT, .text = "x"},
    {.op = FR_ACKED},
    {.op = FR_DIE, .n = SIGKILL, .text = CRASH},
    {.op = FR_END},
};

/* A machine that dies: run.failed with the runner's why, after the
 * disk's last snapshot. */
static void test_dies(void **state)
{
	struct fix *f = *state;
	struct fr_script sc = {.steps = crash_steps};
	struct sb_runstate st;
	char id[SB_RUN_MAX];
	struct evs e;

	assert_int_equal(fakerunner_script(f->fr, NULL, &sc), SB_OK);
	start_run(f, "crash", 0, id);
	await_end(f, id, 1);
	evs_read(f, id, &e);
	evs_expect(&e, "run.created", "run.policy.resolved", "secret.granted",
		   "run.started", "harness.input.ready", "agent.output", "snapshot.saved",
		   "run.failed", "run.stopped");
	assert_string_equal(jstr(e.p[7], "reason"), CRASH);
	assert_string_equal(jstr(e.p[8], "reason"), "failed");
	runstate(f, id, &st);
	assert_string_equal(st.status, "failed");
	assert_string_equal(st.reason, CRASH);
	assert_int_equal(st.has_exit, 0);
	evs_free(&e);
}

static const struct fr_step setup_fail_steps[] = {
    {.op = FR_SETUP_FAIL, .text = "cannot mount /dev/vda"},
    {.op = FR_END},
};

/* A guest whose set-up fails (DONE {error}) and one that never says
 * HELLO (its boot deadline) fail with why. */
static void test_guest_fails(void **state)
{
	struct fix *f = *state;
	struct fr_script bad = {.steps = setup_fail_steps}, mute = {.mute = 1};
	struct fr_machine_info m;
	char id[SB_RUN_MAX];
	struct spec s;
	struct evs e;

	assert_int_equal(fakerunner_script(f->fr, "bad", &bad), SB_OK);
	start_run(f, "bad", 0, id);
	await_end(f, id, 1);
	evs_read(f, id, &e);
	assert_string_equal(
	    jstr(evs_get(&e, "run.failed", 0), "reason"),
	    "the guest agent could not set the run up: cannot mount /dev/vda");
	assert_int_equal(evs_count(&e, "run.exited"), 0);
	evs_free(&e);

	f->st.boot_timeout_s = 1;
	assert_int_equal(fakerunner_script(f->fr, "mute", &mute), SB_OK);
	spec_make(&s, "box", "mute", 0, NULL, NULL);
	assert_int_equal(create(f, &s), SB_OK);
	spec_free(&s);
	snprintf(id, sizeof id, "%s", f->id);
	await_end(f, id, 1);
	evs_read(f, id, &e);
	evs_expect(&e, "run.created", "run.policy.resolved", "secret.granted",
		   "run.started", "run.failed", "run.stopped");
	assert_non_null(strstr(jstr(e.p[4], "reason"),
			       "did not answer within its 1 s boot deadline"));
	evs_free(&e);
	machine(f, id, 0, &m);
	assert_int_equal(m.hellos, 0);
	assert_true(m.ended);
}

/* A run stopped while it is being made is recorded stopped once it is
 * recorded; its machine never starts. */
static void test_stop_creating(void **state)
{
	struct fix *f = *state;
	struct fr_machine_info m;
	struct sb_runstate st;
	struct spec s;
	struct evs e;

	spec_make(&s, "box", "hasty", 0, NULL, NULL);
	assert_int_equal(sb_runs_create(f->rs, &s.o, on_created, f), SB_OK);
	sb_runs_stop_all(f->rs, "daemon-stop"); /* before the loop hears of it */
	await_answer(f, 1);
	spec_free(&s);
	assert_int_equal(f->rc, SB_OK);
	assert_int_equal(sb_runs_active(f->rs), 0);
	evs_read(f, f->id, &e);
	evs_expect(&e, "run.created", "run.policy.resolved", "secret.granted",
		   "run.stopped");
	assert_string_equal(jstr(e.p[3], "reason"), "daemon-stop");
	evs_free(&e);
	runstate(f, f->id, &st);
	assert_string_equal(st.status, "stopped");
	machine(f, f->id, 0, &m);
	assert_false(m.started);
}

/* With room for one run's vCPU, a second waits queued (no machine
 * made), across a daemon's restart too, and starts once the first ends; a
 * third, queued, stops at once. */
static void test_queue(void **state)
{
	struct fix *f = *state;
	struct fr_script sc = {.steps = waits_steps}, next = {.steps = copy_steps};
	char first[SB_RUN_MAX], second[SB_RUN_MAX], third[SB_RUN_MAX];
	struct sb_runstate st;
	struct spec s;
	struct evs e;

	daemon_down(f);
	fakerunner_capacity(f->fr, 1, FR_MEMORY_MIB);
	daemon_up(f);
	assert_int_equal(fakerunner_script(f->fr, NULL, &sc), SB_OK);
	assert_int_equal(fakerunner_script(f->fr, "second", &next), SB_OK);
	start_run(f, "first", 0, first);
	spec_make(&s, "box", "second", 0, NULL, NULL);
	assert_int_equal(create(f, &s), SB_OK);
	spec_free(&s);
	snprintf(second, sizeof second, "%s", f->id);
	spec_make(&s, "box", "third", 0, NULL, NULL);
	assert_int_equal(create(f, &s), SB_OK);
	spec_free(&s);
	snprintf(third, sizeof third, "%s", f->id);
	assert_int_equal(stop(f, third, "stopped"), SB_OK);
	await_recorded(f, third, "run.stopped", 1);
	runstate(f, second, &st);
	assert_string_equal(st.status, "queued");

	daemon_down(f);
	daemon_up(f);
	runstate(f, second, &st);
	assert_string_equal(st.status, "queued");
	assert_int_equal(fakerunner_made(f->fr), 1); /* the first's only */
	assert_int_equal(stop(f, first, "stopped"), SB_OK);
	await_recorded(f, second, "run.stopped", 1);
	evs_read(f, second, &e);
	evs_expect(&e, "run.created", "run.policy.resolved", "secret.granted",
		   "run.queued", "run.started", "harness.input.ready", "agent.output",
		   "run.exited", "snapshot.saved", "run.stopped");
	evs_free(&e);
	evs_read(f, third, &e);
	evs_expect(&e, "run.created", "run.policy.resolved", "secret.granted",
		   "run.queued", "run.stopped");
	assert_string_equal(jstr(e.p[4], "reason"), "stopped");
	evs_free(&e);
	assert_int_equal(fakerunner_made(f->fr), 2);
	runstate(f, second, &st);
	assert_string_equal(st.status, "exited");
}

/* The capacity of runner (by name) as the manager reports it. */
static void capacity_of(struct fix *f, const char *runner, struct sb_runs_capacity *out)
{
	struct sb_runs_capacity c[4];
	size_t n = sb_runs_capacity_read(f->rs, c, sizeof c / sizeof c[0]);

	assert_int_equal(n, sizeof f->runners / sizeof f->runners[0]);
	for (size_t i = 0; i < n; i++)
		if (!strcmp(c[i].name, runner)) {
			*out = c[i];
			return;
		}
	fail_msg("no runner %s", runner);
}

/* Capacity is each runner's: with runner local full (one vCPU, held), a
 * second run on it waits queued while a run on runner fake starts at
 * once; a run that asks for more than local gives is refused naming the
 * runner; the queued one starts once local's run ends. */
static void test_queue_runners(void **state)
{
	struct fix *f = *state;
	struct fr_script sc = {.steps = waits_steps};
	char first[SB_RUN_MAX], second[SB_RUN_MAX], there[SB_RUN_MAX];
	struct sb_runs_capacity c;
	struct sb_runstate st;
	struct spec s;
	uint64_t last;

	daemon_down(f);
	fakerunner_capacity(f->fr, 1, FR_MEMORY_MIB);
	fakerunner_capacity(f->other, 2, 512);
	daemon_up(f);
	assert_int_equal(fakerunner_script(f->fr, NULL, &sc), SB_OK);
	assert_int_equal(fakerunner_script(f->other, NULL, &sc), SB_OK);
	start_run(f, "first", 0, first);
	spec_make(&s, "box", "second", 0, NULL, NULL);
	assert_int_equal(create(f, &s), SB_OK);
	spec_free(&s);
	snprintf(second, sizeof second, "%s", f->id);
	spec_make_on(&s, "box", "there", 0, NULL, NULL, "fake", 0);
	assert_int_equal(create(f, &s), SB_OK);
	spec_free(&s);
	snprintf(there, sizeof there, "%s", f->id);
	await_recorded(f, there, "harness.input.ready", 1);
	runstate(f, second, &st);
	assert_string_equal(st.status, "queued");
	assert_int_equal(fakerunner_made(f->fr), 1);
	assert_int_equal(fakerunner_made(f->other), 1);
	capacity_of(f, "local", &c);
	assert_int_equal(c.cpus, 1);
	assert_int_equal(c.used_cpus, 1);
	assert_int_equal(c.used_memory_mib, 256);
	assert_int_equal(c.queued, 1);
	capacity_of(f, "fake", &c);
	assert_int_equal(c.cpus, 2);
	assert_int_equal(c.memory_mib, 512);
	assert_int_equal(c.used_cpus, 1);
	assert_int_equal(c.queued, 0);

	last = last_offset(f);
	spec_make_on(&s, "box", "big", 0, NULL, NULL, "local", 2);
	assert_int_equal(create(f, &s), SB_ERR_INVAL);
	spec_free(&s);
	assert_non_null(strstr(f->err, "asks for 2 vCPUs; runner local gives runs 1"));
	assert_int_equal(last_offset(f), last);

	assert_int_equal(stop(f, first, "stopped"), SB_OK);
	await_recorded(f, second, "harness.input.ready", 1);
	assert_int_equal(fakerunner_made(f->fr), 2);
	capacity_of(f, "local", &c);
	assert_int_equal(c.used_cpus, 1);
	assert_int_equal(c.queued, 0);
	assert_int_equal(stop(f, second, "stopped"), SB_OK);
	assert_int_equal(stop(f, there, "stopped"), SB_OK);
	await_end(f, there, 1);
	capacity_of(f, "fake", &c);
	assert_int_equal(c.used_cpus, 0);
}

/* The runner cannot make the machine: the run is recorded as failed
 * (answered with its id); a spec that cannot be resolved is refused with
 * nothing recorded; a name a live run holds is refused at once. */
static void test_create_fails(void **state)
{
	struct fix *f = *state;
	struct fr_script no = {.create_rc = SB_ERR_UNAVAIL,
			       .create_why = "no fake accelerator"},
			 sc = {.steps = waits_steps};
	struct sb_runstate st;
	char id[SB_RUN_MAX];
	struct spec s;
	struct evs e;
	uint64_t last;

	assert_int_equal(fakerunner_script(f->fr, "nostart", &no), SB_OK);
	spec_make(&s, "box", "nostart", 0, "notes.txt", "hello");
	assert_int_equal(create(f, &s), SB_OK);
	spec_free(&s);
	assert_int_equal(sb_runs_active(f->rs), 0);
	evs_read(f, f->id, &e);
	evs_expect(&e, "run.created", "run.policy.resolved", "secret.granted",
		   "run.failed", "run.stopped");
	assert_string_equal(jstr(e.p[3], "reason"),
			    "cannot start the VM: no fake accelerator");
	assert_string_equal(jstr(e.p[4], "reason"), "failed");
	evs_free(&e);
	runstate(f, f->id, &st);
	assert_string_equal(st.status, "failed");
	assert_int_equal(fakerunner_made(f->fr), 0);

	last = last_offset(f);
	spec_make(&s, "nope", "lost", 0, NULL, NULL);
	assert_int_equal(create(f, &s), SB_ERR_NOTFOUND);
	assert_string_equal(f->id, "");
	spec_free(&s);
	assert_int_equal(last_offset(f), last);
	assert_int_equal(sb_runs_active(f->rs), 0);

	assert_int_equal(fakerunner_script(f->fr, "taken", &sc), SB_OK);
	start_run(f, "taken", 0, id);
	last = last_offset(f);
	spec_make(&s, "box", "taken", 0, NULL, NULL);
	assert_int_equal(sb_runs_create(f->rs, &s.o, on_created, f), SB_ERR_EXISTS);
	spec_free(&s);
	assert_int_equal(last_offset(f), last);
	assert_int_equal(fakerunner_made(f->fr), 1);
	sb_runs_stop_all(f->rs, "daemon-stop");
	await_end(f, id, 1);
}

/* A run on each runner: its machine is the one its plan names, its
 * run.created says which ("local" unless asked); its fork goes to the
 * same runner, and one asked for elsewhere is refused; a runner the
 * daemon has not is refused with nothing recorded. */
static void test_runners(void **state)
{
	struct fix *f = *state;
	struct fr_script sc = {.steps = child_steps};
	struct sb_runs_from fr = {.snapshot = "s0", .at = UINT64_MAX};
	char here[SB_RUN_MAX], there[SB_RUN_MAX];
	struct fr_machine_info m;
	struct spec s;
	struct evs e;
	uint64_t last;

	assert_int_equal(fakerunner_script(f->fr, NULL, &sc), SB_OK);
	assert_int_equal(fakerunner_script(f->other, NULL, &sc), SB_OK);
	spec_make(&s, "box", "here", 0, NULL, NULL);
	if (create(f, &s))
		fail_msg("create here: %s", f->err);
	spec_free(&s);
	snprintf(here, sizeof here, "%s", f->id);
	spec_make_on(&s, "box", "there", 0, NULL, NULL, "fake", 0);
	if (create(f, &s))
		fail_msg("create there: %s", f->err);
	spec_free(&s);
	snprintf(there, sizeof there, "%s", f->id);
	await_end(f, here, 1);
	await_end(f, there, 1);
	assert_int_equal(fakerunner_made(f->fr), 1);
	assert_int_equal(fakerunner_made(f->other), 1);
	assert_int_equal(fakerunner_machine(f->fr, there, 0, &m), SB_ERR_NOTFOUND);
	machine(f, here, 0, &m);
	assert_int_equal(fakerunner_machine(f->other, there, 0, &m), SB_OK);
	evs_read(f, here, &e);
	assert_string_equal(jstr(evs_get(&e, "run.created", 0), "runner"), "local");
	evs_free(&e);
	evs_read(f, there, &e);
	assert_string_equal(jstr(evs_get(&e, "run.created", 0), "runner"), "fake");
	evs_free(&e);

	/* a fork runs where its source's snapshot is */
	fr.run = there;
	if (from(f, &fr))
		fail_msg("fork: %s", f->err);
	await_end(f, f->id, 1);
	assert_int_equal(fakerunner_made(f->other), 2);
	assert_int_equal(fakerunner_made(f->fr), 1);
	assert_int_equal(fakerunner_machine(f->other, f->id, 0, &m), SB_OK);
	assert_true(m.from);
	assert_string_equal(m.from_run, there);
	evs_read(f, f->id, &e);
	assert_string_equal(jstr(evs_get(&e, "run.created", 0), "runner"), "fake");
	evs_free(&e);
	last = last_offset(f);
	fr.runner = "local";
	assert_int_equal(from(f, &fr), SB_ERR_INVAL);
	assert_non_null(strstr(f->err, "on runner fake"));
	assert_int_equal(last_offset(f), last);
	fr.run = here; /* the same runner named: as not naming it */
	if (from(f, &fr))
		fail_msg("fork here: %s", f->err);
	await_end(f, f->id, 1);
	assert_int_equal(fakerunner_made(f->fr), 2);
	assert_int_equal(fakerunner_made(f->other), 2);

	/* a runner the daemon has not: refused, nothing recorded */
	last = last_offset(f);
	spec_make_on(&s, "box", "nowhere", 0, NULL, NULL, "elsewhere", 0);
	assert_int_equal(create(f, &s), SB_ERR_INVAL);
	spec_free(&s);
	assert_string_equal(f->id, "");
	assert_string_equal(f->err, "no runner 'elsewhere' here: this daemon has local, fake");
	assert_int_equal(last_offset(f), last);
	assert_int_equal(sb_runs_active(f->rs), 0);
	assert_int_equal(fakerunner_made(f->fr), 2);
	assert_int_equal(fakerunner_made(f->other), 2);
}

/* --- re-runs --- */

/* A model call a test makes on run's gateway connection, as a harness
 * does through its tunnel: the answer's status and body. */
struct answer {
	long status;
	char body[2048];
	size_t len;
};

static size_t on_answer_data(char *p, size_t size, size_t n, void *ctx)
{
	struct answer *a = ctx;
	size_t len = size * n, room = sizeof a->body - 1 - a->len;

	memcpy(a->body + a->len, p, len < room ? len : room);
	a->len += len < room ? len : room;
	a->body[a->len] = 0;
	return len;
}

/* Asks run's gateway (its virtual key, as its guest holds it) the OpenAI
 * chat question text of model acme/m1. */
static void model_call(struct fix *f, const char *run, const char *text, struct answer *a)
{
	char key[SB_VKEY_MAX], hdr[128], body[256];
	struct gw_via v = {.gw = f->gw, .run = run};
	struct curl_slist *h = NULL;
	CURL *c = curl_easy_init();

	assert_non_null(c);
	memset(a, 0, sizeof *a);
	assert_int_equal(sb_run_vkey_derive(f->home, run, key), SB_OK);
	snprintf(hdr, sizeof hdr, "Authorization: Bearer %s", key);
	h = curl_slist_append(h, hdr);
	h = curl_slist_append(h, "Content-Type: application/json");
	snprintf(body, sizeof body,
		 "{\"model\":\"acme/m1\",\"messages\":"
		 "[{\"role\":\"user\",\"content\":\"%s\"}]}",
		 text);
	assert_int_equal(gw_via_send(c, &v, "http://sanbox-gateway/v1/chat/completions", h, body,
				     on_answer_data, a, &a->status),
			 CURLE_OK);
	assert_int_equal(v.rc, SB_OK);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
}

/* The request of question text as the gateway forwards it (model acme/m1
 * named upstream m1), and the answer to it. */
static void call_bodies(const char *text, char *rq, size_t rqcap, char *an, size_t ancap)
{
	snprintf(
	    rq, rqcap,
	    "{\"model\":\"m1\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}",
	    text);
	snprintf(
	    an, ancap,
	    "{\"id\":\"c\",\"object\":\"chat.completion\",\"model\":\"m1\",\"choices\":"
	    "[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"answer to "
	    "%s\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,"
	    "\"completion_tokens\":2,\"total_tokens\":5}}",
	    text);
}

/* Packs the agent.message (b[0]) and agent.usage.updated (b[1]) a gateway
 * records of a call whose bodies are the blobs rq_hex and an_hex. */
static void call_payloads(msgpack_sbuffer b[2], const char *rq_hex, const char *an_hex)
{
	msgpack_packer pk;
	sb_mapw m;

	msgpack_packer_init(&pk, &b[0], msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	sb_mapw_str(&m, "role", "assistant");
	sb_mapw_str(&m, "model", "acme/m1");
	sb_mapw_str(&m, "api", "openai");
	sb_mapw_u64(&m, "status", 200);
	sb_mapw_bool(&m, "stream", 0);
	sb_mapw_str(&m, "request", rq_hex);
	sb_mapw_str(&m, "response", an_hex);
	sb_mapw_u64(&m, "input_tokens", 3);
	sb_mapw_u64(&m, "output_tokens", 2);
	assert_int_equal(sb_mapw_end(&m), SB_OK);
	msgpack_packer_init(&pk, &b[1], msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	sb_mapw_str(&m, "model", "acme/m1");
	sb_mapw_u64(&m, "input_tokens", 3);
	sb_mapw_u64(&m, "output_tokens", 2);
	sb_mapw_u64(&m, "cached_tokens", 0);
	sb_mapw_u64(&m, "cost_nusd", 7);
	sb_mapw_u64(&m, "total_nusd", 7);
	assert_int_equal(sb_mapw_end(&m), SB_OK);
}

/* Records in run's record, as its gateway does, a model call of question
 * text: the bodies as blobs, agent.message and agent.usage.updated. */
static void call_append(struct fix *f, const char *run, const char *text)
{
	char rq[256], an[512], rq_hex[SB_HASH_HEX], an_hex[SB_HASH_HEX];
	uint8_t h[SB_HASH_LEN];
	struct sb_blob blobs[2] = {{rq, 0}, {an, 0}};
	msgpack_sbuffer b[2];
	struct sb_event evs[2];

	call_bodies(text, rq, sizeof rq, an, sizeof an);
	blobs[0].len = strlen(rq);
	blobs[1].len = strlen(an);
	sb_blob_hash(rq, blobs[0].len, h);
	sb_hash_hex(h, rq_hex);
	sb_blob_hash(an, blobs[1].len, h);
	sb_hash_hex(h, an_hex);
	for (size_t i = 0; i < 2; i++)
		msgpack_sbuffer_init(&b[i]);
	call_payloads(b, rq_hex, an_hex);
	assert_int_equal(sb_event_init(&evs[0], "agent.message", run, SB_SRC_GATEWAY,
				       b[0].data, b[0].size),
			 SB_OK);
	assert_int_equal(sb_event_init(&evs[1], "agent.usage.updated", run,
				       SB_SRC_GATEWAY, b[1].data, b[1].size),
			 SB_OK);
	assert_int_equal(sb_log_append_blobs(f->log, blobs, 2, evs, 2), SB_OK);
	for (size_t i = 0; i < 2; i++)
		msgpack_sbuffer_destroy(&b[i]);
}

/* The record of the re-run test_rerun_queued stopped while queued: its
 * plan, run.forked {rerun}, run.queued, then rerun.compared as one that
 * never ran (same false, its side empty) and run.stopped, nothing more. */
static void rerun_queued_check(struct fix *f, const char *re, const char *orig)
{
	struct evs e;
	json_t *p;

	evs_read(f, re, &e);
	evs_expect(&e, "run.created", "run.policy.resolved", "secret.granted",
		   "run.forked", "run.queued", "rerun.compared", "run.stopped");
	assert_true(json_is_true(json_object_get(e.p[3], "rerun")));
	assert_string_equal(jstr(e.p[3], "from_run"), orig);
	p = e.p[5];
	assert_string_equal(jstr(p, "original"), orig);
	assert_true(json_is_false(json_object_get(p, "same")));
	assert_string_equal(jstr(p, "reason"), "it never ran: stopped while queued");
	assert_int_equal(jint(p, "status"), -1);
	assert_int_equal(jint(p, "original_status"), 0);
	assert_int_equal(jint(p, "tools"), 0);
	assert_int_equal(jint(p, "files_differ"), 0);
	assert_string_equal(jstr(e.p[6], "reason"), "stopped");
	evs_free(&e);
}


/* The space every runner's runs take, added up, is as each says (the
 * fake's: FR_LAYER_BYTES a layer, its memory states'). */
static void usage_check(struct fix *f, unsigned nruns, unsigned nsnapshots,
			unsigned live, unsigned nmemory)
{
	struct sb_layers_usage u;

	assert_int_equal(sb_runs_usage(f->rs, &u), SB_OK);
	assert_int_equal(u.nruns, nruns);
	assert_int_equal(u.nsnapshots, nsnapshots);
	assert_int_equal(u.snapshots, (uint64_t)nsnapshots * FR_LAYER_BYTES);
	assert_int_equal(u.runs, (uint64_t)live * FR_LAYER_BYTES);
	assert_int_equal(u.nmemory, nmemory);
	assert_int_equal(u.memory, (uint64_t)nmemory * FR_MEMORY_BYTES);
}

/* What releasing run frees (dry: would free) through its runner. */
static void release_check(struct fix *f, const char *run, int dry, unsigned layers,
			  unsigned kept, uint64_t bytes)
{
	struct sb_layers_freed fd;
	struct sb_runstate st;

	runstate(f, run, &st);
	assert_int_equal(sb_runs_release(f->rs, &st, dry, &fd), SB_OK);
	assert_int_equal(fd.layers, layers);
	assert_int_equal(fd.kept, kept);
	assert_int_equal(fd.bytes, bytes);
}

/* A removed run's files go through the runner its record names, but the
 * layers another run reads; the space runs take is every runner's. */
static void test_release_usage(void **state)
{
	struct fix *f = *state;
	struct fr_script sc = {.steps = waits_steps};
	char here[SB_RUN_MAX], child[SB_RUN_MAX], there[SB_RUN_MAX];
	struct spec s;

	assert_int_equal(fakerunner_script(f->fr, NULL, &sc), SB_OK);
	assert_int_equal(fakerunner_script(f->other, NULL, &sc), SB_OK);
	start_run(f, "parent", 0, here); /* on local: s0 disk, s1 memory, s2 its end */
	assert_int_equal(snapshot(f, here, 0), SB_OK);
	assert_int_equal(snapshot(f, here, 1), SB_OK);
	fork_check(f, here, child); /* on local, over s0: its end frozen */
	assert_int_equal(stop(f, here, "stopped"), SB_OK);
	await_end(f, here, 1);
	spec_make_on(&s, "box", "there", 0, NULL, NULL, "fake", 0);
	assert_int_equal(create(f, &s), SB_OK);
	spec_free(&s);
	snprintf(there, sizeof there, "%s", f->id);
	await_recorded(f, there, "harness.input.ready", 1);
	usage_check(f, 3, 4, 1, 1); /* there's live layer on fake */
	assert_int_equal(stop(f, there, "stopped"), SB_OK);
	await_end(f, there, 1);
	usage_check(f, 3, 5, 0, 1);

	release_check(f, there, 1, 1, 0, FR_LAYER_BYTES);
	usage_check(f, 3, 5, 0, 1); /* dry: nothing went */
	release_check(f, there, 0, 1, 0, FR_LAYER_BYTES);
	usage_check(f, 2, 4, 0, 1);
	release_check(f, there, 0, 0, 0, 0); /* nothing left of it */
	/* s0 is the child's base: kept */
	release_check(f, here, 0, 2, 1, 2 * FR_LAYER_BYTES + FR_MEMORY_BYTES);
	usage_check(f, 2, 2, 0, 0);
	release_check(f, child, 0, 1, 0, FR_LAYER_BYTES);
	release_check(f, here, 0, 1, 0, FR_LAYER_BYTES); /* no reader left */
	usage_check(f, 0, 0, 0, 0);
}

/* A runner without disk_open and template_open serves no reads of its
 * runs' disks or of its templates: the daemon's fs requests get one line
 * naming the runner, and nothing is opened elsewhere instead. */
static void test_reads_unserved(void **state)
{
	struct fix *f = *state;
	struct fr_script sc = {.steps = child_steps};
	struct sb_runstate st;
	sb_fsread *fs = NULL;
	struct spec s;

	assert_int_equal(fakerunner_script(f->other, NULL, &sc), SB_OK);
	spec_make_on(&s, "box", "there", 0, NULL, NULL, "fake", 0);
	if (create(f, &s))
		fail_msg("create there: %s", f->err);
	spec_free(&s);
	await_end(f, f->id, 1);
	runstate(f, f->id, &st);
	assert_int_equal(sb_runs_disk_open(f->rs, &st, NULL, &fs), SB_ERR_UNAVAIL);
	assert_null(fs);
	assert_non_null(strstr(sb_errmsg(SB_ERR_UNAVAIL), "runner fake serves no reads"));
	assert_int_equal(sb_runs_template_open(f->rs, &st, &fs), SB_ERR_UNAVAIL);
	assert_null(fs);
	assert_string_equal(sb_errmsg(SB_ERR_UNAVAIL),
			    "runner fake serves no reads of its templates");
}

/* A re-run stopped while it waits for its runner's capacity (across a
 * daemon's restart) never ran: its record says so (rerun.compared, same
 * false, its side empty) before its run.stopped, and it never starts once
 * there is room. */
static void test_rerun_queued(void **state)
{
	struct fix *f = *state;
	struct fr_script sc = {.steps = waits_steps}, done = {.steps = child_steps};
	char orig[SB_RUN_MAX], holder[SB_RUN_MAX], re[SB_RUN_MAX];
	struct sb_runstate st;
	struct spec s;

	daemon_down(f);
	fakerunner_capacity(f->fr, 1, FR_MEMORY_MIB);
	daemon_up(f);
	assert_int_equal(fakerunner_script(f->fr, NULL, &sc), SB_OK);
	assert_int_equal(fakerunner_script(f->fr, "orig", &done), SB_OK);
	spec_make(&s, "box", "orig", 0, NULL, NULL);
	if (create(f, &s))
		fail_msg("create: %s", f->err);
	spec_free(&s);
	snprintf(orig, sizeof orig, "%s", f->id);
	await_end(f, orig, 1);
	start_run(f, "holder", 0, holder);

	if (from(f, &(struct sb_runs_from){
			.run = orig, .at = 0, .rerun = 1, .name = "again"}))
		fail_msg("rerun: %s", f->err);
	snprintf(re, sizeof re, "%s", f->id);
	daemon_down(f); /* taken up again, queued still, a re-run still */
	daemon_up(f);
	runstate(f, re, &st);
	assert_string_equal(st.status, "queued");
	assert_int_equal(stop(f, re, "stopped"), SB_OK);
	await_recorded(f, re, "run.stopped", 1);
	assert_int_equal(stop(f, holder, "stopped"), SB_OK);
	await_end(f, holder, 1);

	rerun_queued_check(f, re, orig);
	assert_int_equal(fakerunner_made(f->fr), 2); /* the original's and the holder's */
	runstate(f, re, &st);
	assert_string_equal(st.status, "stopped");
}

static const struct fr_step orig_steps[] = {
    {.op = FR_FILE, .text = "/workspace/out.txt", .data = "result"},
    {.op = FR_SIGNALLED},
    {.op = FR_END},
};

static const struct fr_step again_steps[] = {
    {.op = FR_FILE, .text = "/workspace/out.txt", .data = "result"},
    {.op = FR_HOST_GONE},
    {.op = FR_SIGNALLED},
    {.op = FR_END},
};

/* The record of the re-run test_rerun_restart made of orig: its calls,
 * the second and third after a restarted daemon took it up, its end
 * compared with orig's (the same file, exit status and tools). */
static void rerun_restart_check(struct fix *f, const char *re, const char *orig)
{
	struct evs e;
	json_t *p;

	evs_read(f, re, &e);
	evs_expect(&e, "run.created", "run.policy.resolved", "secret.granted",
		   "run.forked", "run.started", "harness.input.ready",
		   "agent.file.changed", "agent.message", "agent.usage.updated",
		   "run.warning", "agent.message", "agent.usage.updated",
		   "rerun.diverged", "agent.message", "run.exited", "snapshot.saved",
		   "rerun.compared", "run.stopped");
	assert_true(json_is_true(json_object_get(e.p[3], "rerun")));
	assert_true(json_is_true(json_object_get(e.p[7], "replayed")));
	assert_string_equal(jstr(e.p[9], "message"),
			    "taken up again by a restarted daemon");
	assert_true(json_is_true(json_object_get(e.p[10], "replayed")));
	assert_int_equal(jint(e.p[11], "cost_nusd"), 0);
	assert_int_equal(jint(e.p[12], "call"), 3); /* numbered in the whole record */
	assert_string_equal(jstr(e.p[12], "path"), "");
	assert_int_equal(jint(e.p[13], "status"), 409); /* refused, recorded so */
	p = e.p[16];
	assert_string_equal(jstr(p, "original"), orig);
	assert_true(json_is_true(json_object_get(p, "same")));
	assert_int_equal(jint(p, "status"), 128 + SIGTERM);
	assert_int_equal(jint(p, "original_status"), 128 + SIGTERM);
	assert_int_equal(jint(p, "files_differ"), 0);
	assert_int_equal(jint(p, "tools_differ_at"), 0);
	assert_null(json_object_get(p, "reason"));
	assert_string_equal(jstr(e.p[17], "reason"), "stopped");
	evs_free(&e);
}

/* A re-run a restarted daemon takes up is a re-run still: its gateway
 * answers its next call with the original's recorded call after those it
 * made (a call past the record departs from it, numbered in the whole
 * record), and its end records rerun.compared before run.stopped. The
 * original's calls are recorded here as its gateway records them. */
static void test_rerun_restart(void **state)
{
	struct fix *f = *state;
	struct fr_script sc = {.steps = orig_steps}, again = {.steps = again_steps};
	char orig[SB_RUN_MAX], re[SB_RUN_MAX], rq[256], an[2][512];
	struct answer a;

	assert_int_equal(fakerunner_script(f->fr, "orig", &sc), SB_OK);
	assert_int_equal(fakerunner_script(f->fr, "again", &again), SB_OK);
	start_run(f, "orig", 0, orig);
	await_recorded(f, orig, "agent.file.changed", 1);
	call_append(f, orig, "first");
	call_append(f, orig, "second");
	assert_int_equal(stop(f, orig, "stopped"), SB_OK);
	await_end(f, orig, 1);
	call_bodies("first", rq, sizeof rq, an[0], sizeof an[0]);
	call_bodies("second", rq, sizeof rq, an[1], sizeof an[1]);

	if (from(f, &(struct sb_runs_from){
			.run = orig, .at = 0, .rerun = 1, .name = "again"}))
		fail_msg("rerun: %s", f->err);
	snprintf(re, sizeof re, "%s", f->id);
	await_recorded(f, re, "agent.file.changed", 1);
	model_call(f, re, "first", &a);
	assert_int_equal(a.status, 200);
	assert_string_equal(a.body, an[0]);

	daemon_down(f);
	daemon_up(f);
	await_recorded(f, re, "run.warning", 1);
	model_call(f, re, "second", &a); /* the record's second, not the provider */
	assert_int_equal(a.status, 200);
	assert_string_equal(a.body, an[1]);
	model_call(f, re, "third", &a); /* the record has no third */
	assert_int_equal(a.status, 409);
	assert_int_equal(stop(f, re, "stopped"), SB_OK);
	await_end(f, re, 1);
	rerun_restart_check(f, re, orig);
	assert_int_equal(fakerunner_made(f->fr), 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_lifecycle, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unasked_answers, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stop, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_budget, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_budget_then_stop, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_snapshot, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_fork_resume, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_memory_fork, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_from_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_restart, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_restart_booting, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_restart_gone, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_dies, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_guest_fails, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stop_creating, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_queue, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_queue_runners, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_create_fails, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runners, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_release_usage, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reads_unserved, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_rerun_queued, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_rerun_restart, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
