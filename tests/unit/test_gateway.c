/* test_gateway.c - the model gateway against a real model stub over HTTP,
 * reached the only way there is, through sb_gateway_connect (libcurl on
 * the socket it gives, and raw sockets): keys, models, the provider key
 * swap, metering and recording of whole and streamed answers in both
 * dialects, budgets (refusal, concurrency, cut streams), the tie of a
 * connection to its run, provider errors and bad requests; and the hostile
 * clients: half header blocks holding every connection a run may have,
 * slowloris headers, trickled bodies, idle keep-alive, oversized bodies,
 * garbage, the share that shrinks when a run registers, and the cap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "engine/gateway/gateway.h"
#include "engine/log/log.h"
#include "tests/gwclient.h"
#include "testutil.h"

#define PROVIDER_KEY "sk-provider-REAL-1234"

/* The short deadlines of the second gateway, gw2 */
#define HDR_S	3
#define BODY_S	4
#define SLACK_S 2.0 /* how late the watchdog may close, on a loaded machine */

static char *home;
static sb_log *lg;
static sb_gateway *gw;	/* the defaults */
static sb_gateway *gw2; /* max_conns 128, deadlines HDR_S and BODY_S */
static pid_t stub_pid;
static char stub_url[SB_URL_MAX], stub_log[4096];
static atomic_int budget_calls;
static char budget_run[SB_RUN_MAX];

static void on_budget(void *ctx, const char *run)
{
	(void)ctx;
	snprintf(budget_run, sizeof budget_run, "%s", run);
	atomic_fetch_add(&budget_calls, 1);
}

static atomic_int diverged_calls;

static void on_diverged(void *ctx, const char *run)
{
	(void)ctx;
	(void)run;
	atomic_fetch_add(&diverged_calls, 1);
}

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	assert_non_null(f = fopen(path, "w"));
	fputs(text, f);
	fclose(f);
}

static int setup(void **state)
{
	char path[4096], dir[4096 + 16], many[2100], text[2001];
	struct sb_gateway_opts o = {0};

	home = tu_tmpdir();
	snprintf(dir, sizeof dir, "%s/scripts", home);
	assert_int_equal(mkdir(dir, 0700), 0);
	write_file(
	    dir, "plain.json",
	    "{\"turns\": [{\"text\": \"hello there\", \"usage\": {\"input_tokens\": 50, "
	    "\"output_tokens\": 10}}]}");
	write_file(
	    dir, "budget.json",
	    "{\"turns\": [{\"text\": \"calling a tool\", \"tool_calls\": [{\"name\": "
	    "\"shell\", "
	    "\"arguments\": {\"command\": \"ls\"}}], \"usage\": {\"input_tokens\": 100, "
	    "\"output_tokens\": 80}}]}");
	write_file(
	    dir, "long.json",
	    "{\"turns\": [{\"ignore_max_tokens\": true, \"chunks\": 20, \"text\": \""
	    "0123456789012345678901234567890123456789012345678901234567890123456789"
	    "0123456789012345678901234567890123456789012345678901234567890123456789"
	    "0123456789012345678901234567890123456789012345678901234567890123456789"
	    "0123456789012345678901234567890123456789012345678901234567890123456789"
	    "0123456789012345678901234567890123456789012345678901234567890123456789"
	    "\"}]}");
	/* 500 tokens of text: each choice runs to its max_tokens */
	memset(text, 'w', sizeof text - 1);
	text[sizeof text - 1] = 0;
	snprintf(many, sizeof many, "{\"turns\": [{\"chunks\": 4, \"text\": \"%s\"}]}",
		 text);
	write_file(dir, "many.json", many);
	write_file(dir, "fail.json",
		   "{\"turns\": [{\"status\": 500, \"error\": \"provider broke\"}]}");
	/* slower than both deadlines of gw2: a call in progress is not cut */
	write_file(dir, "slowwhole.json",
		   "{\"turns\": [{\"text\": \"a late answer\", \"delay_ms\": 5000, "
		   "\"usage\": {\"input_tokens\": 5, \"output_tokens\": 3}}]}");
	write_file(dir, "slowstream.json",
		   "{\"turns\": [{\"text\": \"one two three four five six seven eight\", "
		   "\"chunks\": 10, \"chunk_delay_ms\": 500}]}");
	snprintf(stub_log, sizeof stub_log, "%s/stub.log", home);
	setenv("SANBOX_STUB_LOG", stub_log, 1);
	assert_int_equal(sb_stub_start(dir, &stub_pid, stub_url), SB_OK);
	snprintf(path, sizeof path, "%s/log", home);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(sb_log_open(path, SB_LOG_NOSYNC, &lg), SB_OK);
	o.log = lg;
	o.on_budget = on_budget;
	o.on_diverged = on_diverged;
	assert_int_equal(sb_gateway_open(&o, &gw), SB_OK);
	o.max_conns = 128;
	o.header_timeout_s = HDR_S;
	o.body_timeout_s = BODY_S;
	assert_int_equal(sb_gateway_open(&o, &gw2), SB_OK);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	return 0;
}

static int teardown(void **state)
{
	sb_gateway_close(gw2);
	sb_gateway_close(gw);
	sb_log_close(lg);
	sb_stub_stop(stub_pid);
	tu_rmrf(home);
	return 0;
}

/* A model entry at $1/Mtok in, $100/Mtok out, served by the stub. */
static struct sb_gateway_model model(const char *name, uint64_t max_output,
				     const char *key)
{
	struct sb_gateway_model m = {0};

	snprintf(m.model.name, sizeof m.model.name, "stub/%s", name);
	snprintf(m.model.upstream, sizeof m.model.upstream, "%s", name);
	snprintf(m.model.provider, sizeof m.model.provider, "stub");
	m.model.in_price = 1000000000ull;
	m.model.out_price = 100000000000ull;
	m.model.cached_price = 500000000ull;
	m.model.max_output = max_output;
	snprintf(m.base_url, sizeof m.base_url, "%s", stub_url);
	m.apis = SB_API_OPENAI | SB_API_ANTHROPIC;
	m.key = key;
	return m;
}

/* Registers run on gateway g with the given models and budget; writes
 * its key. */
static void add_run_on(sb_gateway *g, const char *run, uint64_t budget, int stop,
		       const struct sb_gateway_model *ms, size_t n, char key[SB_VKEY_MAX])
{
	struct sb_gateway_run r = {.run = run,
				   .budget_nusd = budget,
				   .stop_on_budget = stop,
				   .models = ms,
				   .nmodels = n};

	assert_int_equal(sb_gateway_run_add(g, &r, key), SB_OK);
	assert_int_equal(strncmp(key, "sk-sb-", 6), 0);
}

static void add_run(const char *run, uint64_t budget, int stop,
		    const struct sb_gateway_model *ms, size_t n, char key[SB_VKEY_MAX])
{
	add_run_on(gw, run, budget, stop, ms, n, key);
}

struct resp {
	long status;
	char body[1 << 16];
	size_t len;
};

static size_t on_data(char *p, size_t size, size_t n, void *ctx)
{
	struct resp *r = ctx;
	size_t take = size * n;

	if (take > sizeof r->body - 1 - r->len)
		take = sizeof r->body - 1 - r->len;
	memcpy(r->body + r->len, p, take);
	r->len += take;
	r->body[r->len] = 0;
	return size * n;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* Calls gateway g on a connection of run: POST body to path (GET when
 * body is NULL) with key as a bearer token (or x-api-key when anthropic).
 * The URL's host is never resolved nor connected to. */
static void call_on(sb_gateway *g, const char *run, const char *path, const char *key,
		    int anthropic, const char *body, struct resp *r)
{
	char url[256], hdr[128];
	struct curl_slist *h = NULL;
	struct gw_via v = {.gw = g, .run = run};
	CURL *c = curl_easy_init();

	memset(r, 0, sizeof *r);
	snprintf(url, sizeof url, "http://sanbox-gateway%s", path);
	if (key) {
		snprintf(hdr, sizeof hdr,
			 anthropic ? "x-api-key: %s" : "Authorization: Bearer %s", key);
		h = curl_slist_append(h, hdr);
	}
	h = curl_slist_append(h, "Content-Type: application/json");
	assert_int_equal(gw_via_send(c, &v, url, h, body, on_data, r, &r->status), CURLE_OK);
	assert_int_equal(v.rc, SB_OK);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
}

/* call_on the default gateway. */
static void call(const char *run, const char *path, const char *key, int anthropic,
		 const char *body, struct resp *r)
{
	call_on(gw, run, path, key, anthropic, body, r);
}

static const char USER_MSG[] = "{\"role\":\"user\",\"content\":\"please list the files "
			       "of the workspace and say what "
			       "you see there, in a few words\"}";

/* An OpenAI chat body for model name. */
static void chat_body(char *buf, size_t cap, const char *name, int stream)
{
	snprintf(buf, cap, "{\"model\":\"%s\",\"messages\":[%s]%s}", name, USER_MSG,
		 stream ? ",\"stream\":true" : "");
}

/* An event of run read back from the log. */
struct ev {
	char type[SB_TYPE_MAX];
	enum sb_source source;
	msgpack_zone zone;
	msgpack_object p;
	uint8_t *raw;
};

/* Reads the events of run into evs (at most max); returns how many. */
static size_t run_events(const char *run, struct ev *evs, size_t max)
{
	sb_log_iter *it;
	struct sb_event e;
	size_t n = 0;

	assert_int_equal(sb_log_iter_open_run(lg, run, 1, &it), SB_OK);
	while (n < max && sb_log_iter_next(it, &e) == SB_OK) {
		struct ev *v = &evs[n++];
		snprintf(v->type, sizeof v->type, "%s", e.type);
		v->source = e.source;
		assert_non_null(v->raw = malloc(e.payload_len));
		memcpy(v->raw, e.payload, e.payload_len);
		assert_true(msgpack_zone_init(&v->zone, 1024));
		assert_int_equal(sb_payload_parse(v->raw, e.payload_len, &v->zone, &v->p),
				 SB_OK);
	}
	sb_log_iter_close(it);
	return n;
}

static void events_free(struct ev *evs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		msgpack_zone_destroy(&evs[i].zone);
		free(evs[i].raw);
	}
}

static size_t count_type(const struct ev *evs, size_t n, const char *type)
{
	size_t c = 0;

	for (size_t i = 0; i < n; i++)
		c += !strcmp(evs[i].type, type);
	return c;
}

static const struct ev *find_type(const struct ev *evs, size_t n, const char *type,
				  size_t nth)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(evs[i].type, type) && nth-- == 0)
			return &evs[i];
	return NULL;
}

/* The blob named by field key of ev, as a new string. */
static char *blob_of(const struct ev *e, const char *key)
{
	char hex[SB_HASH_HEX];
	uint8_t h[SB_HASH_LEN];
	void *data;
	size_t len;
	char *s;

	assert_int_equal(sb_map_str(&e->p, key, hex, sizeof hex), 2 * SB_HASH_LEN);
	assert_int_equal(sb_hash_parse(hex, h), SB_OK);
	assert_int_equal(sb_blob_get(lg, h, &data, &len), SB_OK);
	assert_non_null(s = malloc(len + 1));
	memcpy(s, data, len);
	s[len] = 0;
	free(data);
	return s;
}

static void test_keys_and_models(void **state)
{
	struct sb_gateway_model ms[2] = {model("plain", 100, NULL),
					 model("budget", 100, NULL)};
	char key[SB_VKEY_MAX], key2[SB_VKEY_MAX], body[512];
	struct resp r;
	int fd;

	add_run("run-keys", 1000000000, 1, ms, 2, key);
	add_run("run-keys2", 1000000000, 1, ms, 1, key2);
	assert_string_not_equal(key, key2);
	call("run-keys", "/v1/models", NULL, 0, NULL, &r);
	assert_int_equal(r.status, 401);
	assert_non_null(strstr(r.body, "authentication_error"));
	call("run-keys", "/v1/models", "sk-sb-forged", 0, NULL, &r);
	assert_int_equal(r.status, 401);
	call("run-keys", "/v1/models", key, 0, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "\"stub/plain\""));
	assert_non_null(strstr(r.body, "\"stub/budget\""));
	call("run-keys2", "/v1/models", key2, 0, NULL, &r);
	assert_int_equal(r.status, 200);
	assert_null(strstr(r.body, "\"stub/budget\""));
	/* a model the run may not use */
	chat_body(body, sizeof body, "stub/budget", 0);
	call("run-keys2", "/v1/chat/completions", key2, 0, body, &r);
	assert_int_equal(r.status, 403);
	assert_non_null(strstr(r.body, "not allowed"));
	assert_non_null(strstr(r.body, "stub/plain"));
	call("run-keys", "/v1/nothing", key, 0, "{}", &r);
	assert_int_equal(r.status, 404);
	/* a removed run can have no connection and its key stops working */
	sb_gateway_run_remove(gw, "run-keys2");
	fd = -7;
	assert_int_equal(sb_gateway_connect(gw, "run-keys2", &fd), SB_ERR_NOTFOUND);
	assert_int_equal(fd, -7);
	call("run-keys", "/v1/models", key2, 0, NULL, &r);
	assert_int_equal(r.status, 401);
	sb_gateway_run_remove(gw, "run-keys");
}

static void test_openai_call_recorded(void **state)
{
	struct sb_gateway_model ms[1] = {model("plain", 100, PROVIDER_KEY)};
	char key[SB_VKEY_MAX], body[512], *req, *ans, stub_seen[8192] = "";
	struct ev evs[16];
	const struct ev *msg, *use;
	struct resp r;
	struct sb_budget b;
	size_t n;
	FILE *f;

	add_run("run-oa", 1000000000, 1, ms, 1, key);
	chat_body(body, sizeof body, "stub/plain", 0);
	call("run-oa", "/v1/chat/completions", key, 0, body, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "hello there"));
	/* the provider saw its own key, never the virtual one */
	assert_non_null(f = fopen(stub_log, "r"));
	while (fgets(stub_seen, sizeof stub_seen, f))
		;
	fclose(f);
	assert_non_null(strstr(stub_seen, "Bearer " PROVIDER_KEY));
	assert_null(strstr(stub_seen, key));
	n = run_events("run-oa", evs, 16);
	assert_int_equal(n, 2);
	assert_non_null(msg = find_type(evs, n, "agent.message", 0));
	assert_non_null(use = find_type(evs, n, "agent.usage.updated", 0));
	assert_int_equal(msg->source, SB_SRC_GATEWAY);
	assert_int_equal(use->source, SB_SRC_GATEWAY);
	assert_int_equal(sb_map_u64(&use->p, "input_tokens", 0), 50);
	assert_int_equal(sb_map_u64(&use->p, "output_tokens", 0), 10);
	/* 50 * 1000 + 10 * 100000 nano-USD */
	assert_int_equal(sb_map_u64(&use->p, "cost_nusd", 0), 1050000);
	assert_int_equal(sb_map_u64(&use->p, "total_nusd", 0), 1050000);
	assert_int_equal(sb_map_u64(&msg->p, "status", 0), 200);
	assert_int_equal(sb_map_u64(&msg->p, "max_tokens", 0), 100);
	/* the bodies are in the record; the request as the provider got it */
	req = blob_of(msg, "request");
	ans = blob_of(msg, "response");
	assert_non_null(strstr(req, "\"model\":\"plain\""));
	assert_non_null(strstr(req, "\"max_tokens\":100"));
	assert_null(strstr(req, PROVIDER_KEY));
	assert_string_equal(ans, r.body);
	free(req);
	free(ans);
	events_free(evs, n);
	assert_int_equal(sb_gateway_run_budget(gw, "run-oa", &b), SB_OK);
	assert_int_equal(b.spent, 1050000);
	assert_int_equal(b.reserved, 0);
	sb_gateway_run_remove(gw, "run-oa");
}

static void test_streams_metered(void **state)
{
	struct sb_gateway_model ms[1] = {model("plain", 100, PROVIDER_KEY)};
	char key[SB_VKEY_MAX], body[512];
	struct ev evs[16];
	const struct ev *use;
	struct resp r;
	size_t n;

	add_run("run-st", 1000000000, 1, ms, 1, key);
	/* OpenAI stream: the gateway asks for usage, the stream reports it */
	chat_body(body, sizeof body, "stub/plain", 1);
	call("run-st", "/v1/chat/completions", key, 0, body, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "data: [DONE]"));
	assert_non_null(strstr(r.body, "\"usage\""));
	/* Anthropic, whole and streamed */
	snprintf(body, sizeof body,
		 "{\"model\":\"stub/plain\",\"max_tokens\":50,\"messages\":[%s]}",
		 USER_MSG);
	call("run-st", "/v1/messages", key, 1, body, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "hello there"));
	snprintf(body, sizeof body,
		 "{\"model\":\"stub/"
		 "plain\",\"max_tokens\":50,\"stream\":true,\"messages\":[%s]}",
		 USER_MSG);
	call("run-st", "/v1/messages", key, 1, body, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "message_stop"));
	n = run_events("run-st", evs, 16);
	assert_int_equal(count_type(evs, n, "agent.usage.updated"), 3);
	for (size_t i = 0; i < 3; i++) {
		use = find_type(evs, n, "agent.usage.updated", i);
		assert_int_equal(sb_map_u64(&use->p, "input_tokens", 0), 50);
		assert_int_equal(sb_map_u64(&use->p, "output_tokens", 0), 10);
		assert_int_equal(sb_map_u64(&use->p, "cost_nusd", 0), 1050000);
		assert_int_equal(sb_map_u64(&use->p, "total_nusd", 0), 1050000 * (i + 1));
		assert_null(sb_map_get(&use->p, "estimated"));
	}
	events_free(evs, n);
	sb_gateway_run_remove(gw, "run-st");
}

static void test_budget_refuses_third_call(void **state)
{
	struct sb_gateway_model ms[1] = {model("budget", 100, NULL)};
	char key[SB_VKEY_MAX], body[512];
	struct ev evs[32];
	const struct ev *ex;
	struct resp r;
	size_t n;

	atomic_store(&budget_calls, 0);
	add_run("run-bud", 17500000, 1, ms, 1, key);
	chat_body(body, sizeof body, "stub/budget", 0);
	call("run-bud", "/v1/chat/completions", key, 0, body, &r);
	assert_int_equal(r.status, 200);
	call("run-bud", "/v1/chat/completions", key, 0, body, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(
	    strstr(r.body, "tool_calls")); /* the cap left room for the answer */
	call("run-bud", "/v1/chat/completions", key, 0, body, &r);
	assert_int_equal(r.status, 402);
	assert_non_null(strstr(r.body, "budget_exceeded"));
	call("run-bud", "/v1/chat/completions", key, 0, body, &r);
	assert_int_equal(r.status, 402);
	n = run_events("run-bud", evs, 32);
	assert_int_equal(count_type(evs, n, "agent.usage.updated"), 2);
	assert_int_equal(count_type(evs, n, "budget.exceeded"), 1); /* once */
	ex = find_type(evs, n, "budget.exceeded", 0);
	assert_int_equal(sb_map_u64(&ex->p, "budget_nusd", 0), 17500000);
	assert_int_equal(sb_map_u64(&ex->p, "spent_nusd", 0), 2 * 8100000);
	assert_int_equal(atomic_load(&budget_calls), 1);
	assert_string_equal(budget_run, "run-bud");
	events_free(evs, n);
	sb_gateway_run_remove(gw, "run-bud");
}

struct racer {
	const char *run, *key;
	long status;
};

static void *race_one(void *arg)
{
	struct racer *rc = arg;
	char body[512];
	struct resp *r = malloc(sizeof *r);

	chat_body(body, sizeof body, "stub/budget", 0);
	call(rc->run, "/v1/chat/completions", rc->key, 0, body, r);
	rc->status = r->status;
	free(r);
	return NULL;
}

static void test_concurrent_calls_never_overspend(void **state)
{
	struct sb_gateway_model ms[1] = {model("budget", 100, NULL)};
	const uint64_t budget = 3 * 8100000; /* three calls at their real cost */
	char key[SB_VKEY_MAX];
	struct racer rs[8];
	pthread_t th[8];
	struct ev evs[64];
	struct sb_budget b;
	uint64_t sum = 0;
	size_t n, ok = 0;

	atomic_store(&budget_calls, 0);
	add_run("run-race", budget, 0, ms, 1, key);
	for (int i = 0; i < 8; i++) {
		rs[i].run = "run-race";
		rs[i].key = key;
		assert_int_equal(pthread_create(&th[i], NULL, race_one, &rs[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		assert_true(rs[i].status == 200 || rs[i].status == 402 ||
			    rs[i].status == 429);
		ok += rs[i].status == 200;
	}
	/* at least two get their full answer; later ones are capped to what is
	 * left, so more than three may succeed, each paying less */
	assert_true(ok >= 2);
	n = run_events("run-race", evs, 64);
	for (size_t i = 0; i < n; i++)
		if (!strcmp(evs[i].type, "agent.usage.updated"))
			sum += sb_map_u64(&evs[i].p, "cost_nusd", 0);
	assert_int_equal(count_type(evs, n, "agent.usage.updated"), ok);
	assert_int_equal(sb_gateway_run_budget(gw, "run-race", &b), SB_OK);
	assert_int_equal(b.spent, sum);
	assert_int_equal(b.reserved, 0);
	assert_true(b.spent <= budget);
	assert_int_equal(atomic_load(&budget_calls), 0); /* policy: continue */
	events_free(evs, n);
	sb_gateway_run_remove(gw, "run-race");
}

static void test_stream_past_budget_is_cut(void **state)
{
	struct sb_gateway_model ms[1] = {model("long", 10, NULL)};
	char key[SB_VKEY_MAX], body[512];
	struct ev evs[16];
	const struct ev *msg, *use;
	struct resp r;
	struct sb_budget b;
	size_t n;

	add_run("run-cut", 1000000000, 1, ms, 1, key);
	chat_body(body, sizeof body, "stub/long", 1);
	call("run-cut", "/v1/chat/completions", key, 0, body, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "budget_exceeded"));
	/* the stub sent 350 bytes in 20 pieces; the cut came after ~80 */
	assert_true(r.len < 2500);
	assert_null(strstr(r.body, "\"usage\""));
	n = run_events("run-cut", evs, 16);
	assert_non_null(msg = find_type(evs, n, "agent.message", 0));
	assert_non_null(use = find_type(evs, n, "agent.usage.updated", 0));
	assert_true(sb_map_get(&msg->p, "cut") != NULL);
	assert_non_null(sb_map_get(&use->p, "estimated"));
	assert_int_equal(count_type(evs, n, "budget.exceeded"), 1);
	/* charged what was reserved: every byte of the request as forwarded
	 * (larger than the one received) and 10 output tokens */
	snprintf(body, sizeof body,
		 "{\"model\":\"long\",\"messages\":[%s],\"stream\":true,\"max_tokens\":10,"
		 "\"stream_options\":{\"include_usage\":true}}",
		 USER_MSG);
	assert_int_equal(sb_gateway_run_budget(gw, "run-cut", &b), SB_OK);
	assert_int_equal(b.spent, strlen(body) * 1000 + 10 * 100000);
	assert_int_equal(sb_map_u64(&use->p, "cost_nusd", 0), b.spent);
	events_free(evs, n);
	sb_gateway_run_remove(gw, "run-cut");
}

/* A Responses body for model name with the given extra fields. */
static void responses_body(char *buf, size_t cap, const char *name, const char *extra)
{
	snprintf(buf, cap,
		 "{\"model\":\"%s\",\"input\":[%s],\"tools\":[{\"type\":\"function\","
		 "\"name\":\"shell\",\"parameters\":{}}]%s}",
		 name, USER_MSG, extra);
}

static void test_responses_metered(void **state)
{
	struct sb_gateway_model ms[2] = {model("budget", 100, PROVIDER_KEY),
					 model("plain", 100, NULL)};
	char key[SB_VKEY_MAX], body[1024], *req;
	struct ev evs[16];
	const struct ev *msg, *use;
	struct resp r;
	size_t n;

	ms[0].apis |= SB_API_RESPONSES;
	add_run("run-resp", 1000000000, 1, ms, 2, key);
	responses_body(body, sizeof body, "stub/budget", "");
	call("run-resp", "/v1/responses", key, 0, body, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "\"type\":\"function_call\""));
	assert_non_null(strstr(r.body, "\"name\":\"shell\""));
	responses_body(body, sizeof body, "stub/budget",
		       ",\"stream\":true,\"store\":false");
	call("run-resp", "/v1/responses", key, 0, body, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "event: response.completed"));
	assert_non_null(strstr(r.body, "response.function_call_arguments.delta"));
	n = run_events("run-resp", evs, 16);
	assert_int_equal(count_type(evs, n, "agent.usage.updated"), 2);
	for (size_t i = 0; i < 2; i++) {
		msg = find_type(evs, n, "agent.message", i);
		use = find_type(evs, n, "agent.usage.updated", i);
		assert_non_null(msg);
		assert_non_null(use);
		assert_int_equal(sb_map_u64(&use->p, "input_tokens", 0), 100);
		assert_int_equal(sb_map_u64(&use->p, "output_tokens", 0), 80);
		assert_int_equal(sb_map_u64(&use->p, "cost_nusd", 0), 8100000);
		assert_null(sb_map_get(&use->p, "estimated"));
		/* forwarded with the upstream name, the bound and store false */
		req = blob_of(msg, "request");
		assert_non_null(strstr(req, "\"model\":\"budget\""));
		assert_non_null(strstr(req, "\"max_output_tokens\":100"));
		assert_non_null(strstr(req, "\"store\":false"));
		free(req);
	}
	events_free(evs, n);
	/* what would bring in input past the body, or keep the call */
	for (const char *const *f =
		 (const char *const[]){",\"previous_response_id\":\"resp_1\"",
				       ",\"store\":true", ",\"background\":true",
				       ",\"conversation\":\"conv_1\"", NULL};
	     *f; f++) {
		responses_body(body, sizeof body, "stub/budget", *f);
		call("run-resp", "/v1/responses", key, 0, body, &r);
		assert_int_equal(r.status, 400);
		assert_non_null(strstr(r.body, "refused by the gateway"));
	}
	for (const char *const *f =
		 (const char *const[]){
		     "[{\"type\":\"item_reference\",\"id\":\"msg_1\"}]",
		     "\"hi\",\"tools\":[{\"type\":\"web_search\"}]",
		     "[{\"role\":\"user\",\"content\":[{\"type\":\"input_file\","
		     "\"file_data\":\"x\"}]}]",
		     "[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\","
		     "\"image_url\":\"https://example.com/a.png\"}]}]",
		     NULL};
	     *f; f++) {
		snprintf(body, sizeof body, "{\"model\":\"stub/budget\",\"input\":%s}",
			 *f);
		call("run-resp", "/v1/responses", key, 0, body, &r);
		assert_int_equal(r.status, 400);
		assert_non_null(strstr(r.body, "refused by the gateway"));
	}
	/* a provider that does not list the Responses API */
	responses_body(body, sizeof body, "stub/plain", "");
	call("run-resp", "/v1/responses", key, 0, body, &r);
	assert_int_equal(r.status, 400);
	assert_non_null(strstr(r.body, "not served by the responses API"));
	/* count_tokens: passed through, neither reserved nor recorded */
	snprintf(body, sizeof body,
		 "{\"model\":\"stub/budget\",\"messages\":[%s],\"max_tokens\":5}",
		 USER_MSG);
	call("run-resp", "/v1/messages/count_tokens", key, 1, body, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "\"input_tokens\":"));
	n = run_events("run-resp", evs, 16);
	assert_int_equal(count_type(evs, n, "agent.usage.updated"), 2);
	events_free(evs, n);
	sb_gateway_run_remove(gw, "run-resp");
}

static void test_responses_stream_cut(void **state)
{
	struct sb_gateway_model ms[1] = {model("long", 10, NULL)};
	char key[SB_VKEY_MAX], body[1024];
	struct ev evs[16];
	const struct ev *use;
	struct resp r;
	size_t n;

	ms[0].apis = SB_API_RESPONSES;
	add_run("run-rcut", 1000000000, 1, ms, 1, key);
	responses_body(body, sizeof body, "stub/long", ",\"stream\":true");
	call("run-rcut", "/v1/responses", key, 0, body, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "budget_exceeded"));
	assert_null(strstr(r.body, "response.completed"));
	n = run_events("run-rcut", evs, 16);
	assert_non_null(use = find_type(evs, n, "agent.usage.updated", 0));
	assert_non_null(sb_map_get(&use->p, "estimated"));
	assert_int_equal(count_type(evs, n, "budget.exceeded"), 1);
	events_free(evs, n);
	sb_gateway_run_remove(gw, "run-rcut");
}

/* --- hostile request fields against the budget --- */

#define HF_BUDGET 10000000ull /* $0.01: 100 output tokens of stub/many */

/* Fields a guest adds to a request to be answered past what it reserved,
 * each tried on a fresh budget, whole and streamed, with the status it
 * must get. stub/many honours n and the larger of two bounds, and reports
 * the usage a provider would: n times the output of one choice. */
static const struct hostile {
	int anthropic;
	const char *fields; /* after model, messages (unless given) and stream */
	long status;
} hostile[] = {
    {0, "\"n\":64,\"max_tokens\":400", 400}, /* 64 x 16 tokens: more than left */
    {0, "\"n\":3,\"max_tokens\":400", 200},  /* three choices, each capped */
    {0, "\"n\":64", 400},
    {0, "\"n\":8,\"max_completion_tokens\":1", 200},
    {0, "\"n\":129", 400},
    {0, "\"n\":0", 400},
    {0, "\"n\":\"64\"", 400},
    {0, "\"n\":2.0", 400},
    {0, "\"max_completion_tokens\":50,\"max_tokens\":999999", 400},
    {0, "\"max_tokens\":999999,\"max_completion_tokens\":50", 400},
    {0, "\"max_tokens\":10,\"max_tokens\":999999", 400}, /* duplicate keys */
    {0, "\"n\":1,\"n\":64", 400},
    {0, "\"best_of\":8,\"max_tokens\":10", 400},
    {0, "\"prediction\":{\"type\":\"content\",\"content\":\"x\"}", 400},
    {0, "\"modalities\":[\"text\",\"audio\"],\"audio\":{\"voice\":\"alloy\"}", 400},
    {0, "\"service_tier\":\"priority\"", 400},
    {0, "\"web_search_options\":{}", 400},
    {0, "\"stream_options\":{\"include_usage\":false},\"max_tokens\":20", 200},
    {0, "\"x_n\":64,\"extra_body\":{\"n\":64},\"temperature\":0.5", 200},
    {1, "\"max_tokens\":400,\"n\":64", 200}, /* no n in Anthropic's API: dropped */
    {1, "\"max_tokens\":400,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":99999}",
     200},
    {1, "\"max_tokens\":40,\"max_tokens\":999999", 400},
    {1,
     "\"max_tokens\":400,\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"w\"}]",
     400},
    {0,
     "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
     "\"image_url\":{\"url\":\"https://example.com/a.png\"}}]}]",
     400},
    {1,
     "\"max_tokens\":400,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
     "\"document\",\"source\":{\"type\":\"url\",\"url\":\"https://x/a.pdf\"}}]}]",
     400},
    {1, "\"max_tokens\":400,\"mcp_servers\":[{\"type\":\"url\",\"url\":\"http://x\"}]",
     400},
};

#define NHOSTILE (sizeof hostile / sizeof hostile[0])

/* A body of h: its fields after the model, and a user message unless
 * they bring their own. */
static void hostile_body(char *buf, size_t cap, const struct hostile *h, int stream)
{
	int own = strstr(h->fields, "\"messages\"") != NULL;

	snprintf(buf, cap, "{\"model\":\"stub/many\",%s%s%s%s%s}",
		 own ? "" : "\"messages\":[", own ? "" : USER_MSG, own ? "" : "],",
		 stream ? "\"stream\":true," : "", h->fields);
}

static void hostile_call(const char *run, const char *key, const struct hostile *h,
			 int stream, struct resp *r)
{
	char body[1024];

	hostile_body(body, sizeof body, h, stream);
	call(run, h->anthropic ? "/v1/messages" : "/v1/chat/completions", key,
	     h->anthropic, body, r);
}

/* The length of the stub's log: what it answers later is read from there. */
static long stub_mark(void)
{
	struct stat st;

	return stat(stub_log, &st) == 0 ? (long)st.st_size : 0;
}

/* What a provider would bill for the calls the stub answered since mark
 * (at the prices of model()): the tokens it logged, which are the ones it
 * produced, whatever the gateway passed on or recorded. */
static uint64_t stub_billed(long mark)
{
	char line[1024];
	uint64_t sum = 0;
	FILE *f = fopen(stub_log, "r");
	json_t *j;

	assert_non_null(f);
	assert_int_equal(fseek(f, mark, SEEK_SET), 0);
	while (fgets(line, sizeof line, f)) {
		assert_non_null(j = json_loads(line, 0, NULL));
		if (json_integer_value(json_object_get(j, "status")) == 200)
			sum += (uint64_t)json_integer_value(
				   json_object_get(j, "input_tokens")) *
				   1000 +
			       (uint64_t)json_integer_value(
				   json_object_get(j, "output_tokens")) *
				   100000;
		json_decref(j);
	}
	fclose(f);
	return sum;
}

/* The property: what the provider produced for run's calls since mark is
 * what run recorded (its agent.usage.updated events) and what its budget
 * says it spent, nothing is still reserved, and that is within budget
 * (the stub reports no cached tokens: no rounding). */
static uint64_t spend_checked(const char *run, uint64_t budget, long mark)
{
	static struct ev evs[512];
	struct sb_budget b;
	uint64_t sum = 0, last = 0, billed = stub_billed(mark);
	size_t n = run_events(run, evs, 512);

	for (size_t i = 0; i < n; i++) {
		if (strcmp(evs[i].type, "agent.usage.updated"))
			continue;
		sum += sb_map_u64(&evs[i].p, "cost_nusd", 0);
		last = sb_map_u64(&evs[i].p, "total_nusd", 0);
	}
	events_free(evs, n);
	if (billed > budget)
		fail_msg("run %s: the provider produced %" PRIu64
			 " nano-USD of tokens on a budget of %" PRIu64,
			 run, billed, budget);
	assert_int_equal(billed, sum);
	assert_int_equal(sb_gateway_run_budget(gw, run, &b), SB_OK);
	assert_int_equal(b.spent, sum);
	assert_int_equal(last, sum);
	assert_int_equal(b.reserved, 0);
	assert_true(b.spent <= budget);
	return sum;
}

/* The forwarded request of run's only call, parsed. */
static json_t *forwarded(const char *run)
{
	struct ev evs[8];
	size_t n = run_events(run, evs, 8);
	const struct ev *msg = find_type(evs, n, "agent.message", 0);
	char *req;
	json_t *j;

	assert_non_null(msg);
	req = blob_of(msg, "request");
	assert_non_null(j = json_loads(req, 0, NULL));
	free(req);
	events_free(evs, n);
	return j;
}

static void test_hostile_fields_never_overspend(void **state)
{
	struct sb_gateway_model ms[1] = {model("many", 4096, NULL)};
	char run[32], key[SB_VKEY_MAX];
	struct resp *r = malloc(sizeof *r);
	json_t *j;
	long mark;

	assert_non_null(r);
	for (size_t i = 0; i < NHOSTILE; i++) {
		for (int stream = 0; stream < 2; stream++) {
			snprintf(run, sizeof run, "run-hf%zu-%d", i, stream);
			add_run(run, HF_BUDGET, 0, ms, 1, key);
			mark = stub_mark();
			hostile_call(run, key, &hostile[i], stream, r);
			spend_checked(run, HF_BUDGET, mark);
			if (r->status != hostile[i].status)
				fail_msg("%s (stream %d): %ld, not %ld: %.300s",
					 hostile[i].fields, stream, r->status,
					 hostile[i].status, r->body);
			if (r->status == 400)
				assert_non_null(strstr(r->body, "invalid_request_error"));
			if (r->status == 200) {
				j = forwarded(run);
				/* nothing unlisted reaches the provider */
				assert_null(json_object_get(j, "x_n"));
				assert_null(json_object_get(j, "extra_body"));
				if (hostile[i].anthropic) {
					assert_null(json_object_get(j, "n"));
					json_t *t = json_object_get(j, "thinking");
					if (t)
						assert_true(
						    json_integer_value(json_object_get(
							t, "budget_tokens")) <
						    json_integer_value(json_object_get(
							j, "max_tokens")));
				} else if (stream) {
					assert_true(json_is_true(json_object_get(
					    json_object_get(j, "stream_options"),
					    "include_usage")));
				}
				json_decref(j);
			}
			sb_gateway_run_remove(gw, run);
		}
	}
	free(r);
}

/* n x max_tokens is reserved: three choices of the grant each, answered
 * and charged in full, within the budget. */
static void test_choices_reserved(void **state)
{
	struct sb_gateway_model ms[1] = {model("many", 4096, NULL)};
	char key[SB_VKEY_MAX];
	struct resp r;
	struct ev evs[8];
	const struct ev *msg, *use;
	uint64_t grant;
	long mark = stub_mark();
	size_t n;

	add_run("run-n3", HF_BUDGET, 0, ms, 1, key);
	hostile_call("run-n3", key, &hostile[1], 0, &r);
	assert_int_equal(r.status, 200);
	n = run_events("run-n3", evs, 8);
	assert_non_null(msg = find_type(evs, n, "agent.message", 0));
	assert_non_null(use = find_type(evs, n, "agent.usage.updated", 0));
	grant = sb_map_u64(&msg->p, "max_tokens", 0);
	assert_int_equal(sb_map_u64(&msg->p, "n", 0), 3);
	assert_true(grant >= 16 && grant < 400);
	assert_int_equal(sb_map_u64(&use->p, "output_tokens", 0), 3 * grant);
	/* what a fourth choice would have cost was not there */
	assert_true(sb_map_u64(&use->p, "cost_nusd", 0) + grant * 100000 > HF_BUDGET);
	events_free(evs, n);
	spend_checked("run-n3", HF_BUDGET, mark);
	sb_gateway_run_remove(gw, "run-n3");
}

struct hf_racer {
	const char *key;
	unsigned seed;
	int bad; /* a status other than 200, 400, 402 or 429 */
};

/* Streams hostile calls, each case in turn from its own start, until the
 * budget is spent. */
static void *hf_race_main(void *arg)
{
	struct hf_racer *h = arg;
	struct resp *r = malloc(sizeof *r);

	assert_non_null(r);
	for (size_t k = 0; k < 2 * NHOSTILE; k++) {
		hostile_call("run-hf-race", h->key, &hostile[(h->seed + k) % NHOSTILE], 1,
			     r);
		h->bad |= r->status != 200 && r->status != 400 && r->status != 402 &&
			  r->status != 429;
	}
	free(r);
	return NULL;
}

static void test_hostile_fields_concurrent(void **state)
{
	struct sb_gateway_model ms[1] = {model("many", 4096, NULL)};
	const uint64_t budget = 5 * HF_BUDGET;
	char key[SB_VKEY_MAX];
	struct hf_racer hs[16];
	pthread_t th[16];
	long mark = stub_mark();

	add_run("run-hf-race", budget, 0, ms, 1, key);
	for (unsigned i = 0; i < 16; i++) {
		hs[i] = (struct hf_racer){.key = key, .seed = i};
		assert_int_equal(pthread_create(&th[i], NULL, hf_race_main, &hs[i]), 0);
	}
	for (int i = 0; i < 16; i++) {
		pthread_join(th[i], NULL);
		assert_false(hs[i].bad);
	}
	assert_true(spend_checked("run-hf-race", budget, mark) > 0);
	sb_gateway_run_remove(gw, "run-hf-race");
}

/* A group's budget, shared by four runs whose own budgets are larger:
 * sixteen threads racing hostile calls on them never make the provider
 * produce more than the group's budget, and the refusal names the group. */
struct grp_racer {
	char run[32];
	const char *key;
	unsigned seed;
	int bad, group_402;
};

static void *grp_race_main(void *arg)
{
	struct grp_racer *h = arg;
	struct resp *r = malloc(sizeof *r);

	assert_non_null(r);
	for (size_t k = 0; k < 2 * NHOSTILE; k++) {
		hostile_call(h->run, h->key, &hostile[(h->seed + k) % NHOSTILE], 1, r);
		h->bad |= r->status != 200 && r->status != 400 && r->status != 402 &&
			  r->status != 429;
		h->group_402 |= r->status == 402 && strstr(r->body, "group's") != NULL;
	}
	free(r);
	return NULL;
}

static void test_group_budget_concurrent(void **state)
{
	struct sb_gateway_model ms[1] = {model("many", 4096, NULL)};
	const uint64_t group_budget = 2 * HF_BUDGET;
	static char keys[4][SB_VKEY_MAX];
	static struct ev evs[512];
	struct grp_racer hs[16];
	pthread_t th[16];
	uint64_t sum = 0;
	long mark = stub_mark();
	int group_402 = 0, exceeded = 0;

	for (int i = 0; i < 4; i++) {
		char run[32];
		snprintf(run, sizeof run, "run-grp-%d", i);
		struct sb_gateway_run gr = {.run = run,
					    .budget_nusd = 5 * HF_BUDGET,
					    .group = "grp-race",
					    .group_budget_nusd = group_budget,
					    .models = ms,
					    .nmodels = 1};
		assert_int_equal(sb_gateway_run_add(gw, &gr, keys[i]), SB_OK);
	}
	for (unsigned i = 0; i < 16; i++) {
		hs[i] = (struct grp_racer){.key = keys[i % 4], .seed = i};
		snprintf(hs[i].run, sizeof hs[i].run, "run-grp-%u", i % 4);
		assert_int_equal(pthread_create(&th[i], NULL, grp_race_main, &hs[i]), 0);
	}
	for (int i = 0; i < 16; i++) {
		pthread_join(th[i], NULL);
		assert_false(hs[i].bad);
		group_402 |= hs[i].group_402;
	}
	for (int i = 0; i < 4; i++) {
		char run[32];
		const struct ev *e;
		size_t n;
		snprintf(run, sizeof run, "run-grp-%d", i);
		n = run_events(run, evs, 512);
		for (size_t k = 0; k < n; k++)
			if (!strcmp(evs[k].type, "agent.usage.updated"))
				sum += sb_map_u64(&evs[k].p, "cost_nusd", 0);
		if ((e = find_type(evs, n, "budget.exceeded", 0))) {
			char scope[16] = "", group[32] = "";
			sb_map_str(&e->p, "scope", scope, sizeof scope);
			sb_map_str(&e->p, "group", group, sizeof group);
			assert_string_equal(scope, "group");
			assert_string_equal(group, "grp-race");
			assert_int_equal(sb_map_u64(&e->p, "budget_nusd", 0), group_budget);
			exceeded++;
		}
		events_free(evs, n);
		sb_gateway_run_remove(gw, run);
	}
	/* what the provider produced is what was recorded, within the group's */
	assert_int_equal(stub_billed(mark), sum);
	assert_true(sum <= group_budget);
	assert_true(sum > group_budget / 2); /* it was spent, not refused early */
	assert_true(group_402);
	assert_true(exceeded > 0);
}

/* --- raw sockets on gateway connections --- */

/* A connection of run to gateway g, as a raw socket. */
static int raw_open(sb_gateway *g, const char *run)
{
	int fd = -1;

	assert_int_equal(sb_gateway_connect(g, run, &fd), SB_OK);
	assert_true(fd >= 0);
	return fd;
}

/* Writes n bytes of p, waiting while the socket is full; returns 0, or -1
 * once the gateway has closed its end. */
static int raw_write(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n) {
		ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
		if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
			struct pollfd pf = {fd, POLLOUT, 0};
			poll(&pf, 1, 1000);
			continue;
		}
		if (w < 0)
			return -1;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

static int raw_send(int fd, const char *s)
{
	return raw_write(fd, s, strlen(s));
}

/* Reads what comes into buf (NUL-terminated; past cap - 1 bytes it is
 * dropped) until EOF or until quiet_s pass without a byte; *eof says
 * which. Returns the length kept. */
static size_t raw_read(int fd, char *buf, size_t cap, double quiet_s, int *eof)
{
	char scratch[4096];
	size_t len = 0;

	*eof = 0;
	for (;;) {
		struct pollfd pf = {fd, POLLIN, 0};
		int full = len == cap - 1;
		ssize_t n;
		if (poll(&pf, 1, (int)(quiet_s * 1000)) <= 0)
			break;
		n = read(fd, full ? scratch : buf + len,
			 full ? sizeof scratch : cap - 1 - len);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0) {
			*eof = 1;
			break;
		}
		if (!full)
			len += (size_t)n;
	}
	buf[len] = 0;
	return len;
}

/* Waits until each of the n sockets is closed by the gateway (EOF or a
 * reset), or until max_s pass; closed[i] gets the seconds from t0[i] to
 * when that was seen, or -1. What the gateway sends is dropped. */
static void raw_wait_closed(const int *fds, const double *t0, size_t n, double max_s,
			    double *closed)
{
	struct pollfd *pf = calloc(n, sizeof *pf);
	double start = now_s();
	size_t open = n;
	char scratch[4096];

	assert_non_null(pf);
	for (size_t i = 0; i < n; i++) {
		pf[i].fd = fds[i];
		pf[i].events = POLLIN;
		closed[i] = -1;
	}
	while (open && now_s() - start < max_s) {
		if (poll(pf, n, 50) <= 0)
			continue;
		for (size_t i = 0; i < n; i++) {
			ssize_t r;
			if (pf[i].fd < 0 || !pf[i].revents)
				continue;
			r = read(pf[i].fd, scratch, sizeof scratch);
			if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
				closed[i] = now_s() - t0[i];
				pf[i].fd = -1;
				open--;
			}
		}
	}
	free(pf);
}

/* 1 when the gateway has neither sent anything on fd nor closed it. */
static int raw_untouched(int fd)
{
	struct pollfd pf = {fd, POLLIN, 0};

	return poll(&pf, 1, 0) == 0;
}

/* An HTTP answer as read from a raw socket. */
struct raw_answer {
	int statuses; /* status lines among the bytes */
	int status;   /* of the first */
	long clen;    /* its Content-Length, or -1 */
	const char *body;
	size_t body_len;
};

static void raw_parse(const char *buf, size_t len, struct raw_answer *a)
{
	const char *end = strstr(buf, "\r\n\r\n"), *cl;

	memset(a, 0, sizeof *a);
	a->clen = -1;
	for (const char *p = buf; (p = strstr(p, "HTTP/1.")); p++) /* "HTTP/1.1 200 " */
		a->statuses += p[8] == ' ' && isdigit((unsigned char)p[9]) &&
			       isdigit((unsigned char)p[10]) &&
			       isdigit((unsigned char)p[11]) && p[12] == ' ';
	if (!strncmp(buf, "HTTP/1.", 7) && len > 12)
		a->status = atoi(buf + 9);
	if (!end)
		return;
	for (cl = buf; cl < end; cl++)
		if (!strncasecmp(cl, "\r\nContent-Length:", 17))
			a->clen = atol(cl + 17);
	a->body = end + 4;
	a->body_len = len - (size_t)(a->body - buf);
}

/* The answer to an oversized body: one status line, 413, a body of the
 * length it says, in the route's JSON error shape. */
static void assert_too_large(const char *buf, size_t len, int anthropic)
{
	struct raw_answer a;
	json_error_t jerr;
	json_t *j;

	raw_parse(buf, len, &a);
	assert_int_equal(a.statuses, 1);
	assert_int_equal(a.status, 413);
	assert_null(strstr(buf, "100 Continue"));
	assert_non_null(a.body);
	assert_int_equal(a.clen, (long)a.body_len);
	assert_non_null(j = json_loadb(a.body, a.body_len, 0, &jerr));
	if (anthropic)
		assert_string_equal(json_string_value(json_object_get(j, "type")),
				    "error");
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get(j, "error"), "type")),
	    "request_too_large");
	json_decref(j);
}

#define BIG (17u << 20)

static void test_oversized_body_answered_once(void **state)
{
	struct sb_gateway_model ms[1] = {model("plain", 100, NULL)};
	char key[SB_VKEY_MAX], head[512], *buf = malloc(1 << 20), *chunk;
	struct raw_answer a;
	size_t len;
	int fd, eof;

	assert_non_null(buf);
	add_run("run-big", 1000000000, 1, ms, 1, key);
	/* a declared length above 16 MiB: answered at once, before a byte of
	 * the body, without inviting it (no 100 Continue), then closed */
	for (int i = 0; i < 4; i++) {
		int anthropic = i & 1, expect = i & 2;
		fd = raw_open(gw, "run-big");
		snprintf(head, sizeof head,
			 "POST /v1/%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
			 "Content-Type: application/json\r\nContent-Length: %u\r\n%s\r\n",
			 anthropic ? "messages" : "chat/completions", key, BIG,
			 expect ? "Expect: 100-continue\r\n" : "");
		assert_int_equal(raw_send(fd, head), 0);
		len = raw_read(fd, buf, 1 << 20, 5.0, &eof);
		assert_true(eof);
		assert_too_large(buf, len, anthropic);
		close(fd);
	}
	/* a body sent anyway is dropped: still one answer, then closed */
	fd = raw_open(gw, "run-big");
	snprintf(head, sizeof head,
		 "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
		 "%s\r\nContent-Length: %u\r\n\r\n",
		 key, BIG);
	assert_non_null(chunk = malloc(BIG));
	memset(chunk, ' ', BIG);
	assert_int_equal(raw_send(fd, head), 0);
	raw_write(fd, chunk, BIG); /* may fail part way: the gateway closed */
	len = raw_read(fd, buf, 1 << 20, 5.0, &eof);
	assert_true(eof);
	assert_too_large(buf, len, 0);
	close(fd);
	/* a chunked body declares no size: read to its end, refused once, and
	 * the connection goes on */
	fd = raw_open(gw, "run-big");
	snprintf(head, sizeof head,
		 "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
		 "%s\r\nTransfer-Encoding: chunked\r\n\r\n",
		 key);
	assert_int_equal(raw_send(fd, head), 0);
	for (int i = 0; i < 17; i++) {
		assert_int_equal(raw_send(fd, "100000\r\n"), 0);
		assert_int_equal(raw_write(fd, chunk, 1u << 20), 0);
		assert_int_equal(raw_send(fd, "\r\n"), 0);
	}
	assert_int_equal(raw_send(fd, "0\r\n\r\n"), 0);
	len = raw_read(fd, buf, 1 << 20, 1.0, &eof);
	assert_false(eof);
	assert_too_large(buf, len, 0);
	snprintf(head, sizeof head,
		 "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n",
		 key);
	assert_int_equal(raw_send(fd, head), 0);
	len = raw_read(fd, buf, 1 << 20, 1.0, &eof);
	raw_parse(buf, len, &a);
	assert_int_equal(a.statuses, 1);
	assert_int_equal(a.status, 200);
	assert_non_null(strstr(buf, "stub/plain"));
	close(fd);
	/* exactly 16 MiB is read (spaces are no JSON: 400) */
	fd = raw_open(gw, "run-big");
	snprintf(head, sizeof head,
		 "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
		 "%s\r\nContent-Length: %u\r\n\r\n",
		 key, 16u << 20);
	assert_int_equal(raw_send(fd, head), 0);
	assert_int_equal(raw_write(fd, chunk, 16u << 20), 0);
	len = raw_read(fd, buf, 1 << 20, 1.0, &eof);
	raw_parse(buf, len, &a);
	assert_int_equal(a.statuses, 1);
	assert_int_equal(a.status, 400);
	close(fd);
	free(chunk);
	free(buf);
	sb_gateway_run_remove(gw, "run-big");
}

/* Hostile bytes: each gets the answer it should (or none yet), and the
 * gateway goes on serving. */
static void test_garbage_requests(void **state)
{
	struct sb_gateway_model ms[1] = {model("plain", 100, NULL)};
	/* bytes, how many, the status (0: none yet), whether it closes */
	static const struct {
		const char *bytes;
		size_t len;
		int status, closes;
	} bad[] = {
#define B(s) s, sizeof s - 1
	    {B("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 a TLS hello\r\n\r\n"), 400,
	     1},
	    {B("GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Ctl: "
	       "\x01\x02\x7f\x1b[2J\r\n\r\n"),
	     401, 0},
	    {B("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
	       "chunked\r\n\r\nzz\r\n"),
	     400, 1},
	    {B("GET /v1/models HTTP/9.9\r\nHost: x\r\n\r\n"), 505, 1},
	    {B("\r\n\r\n\r\n\r\n"), 0, 0},
	    /* libmicrohttpd refuses these lengths itself, before the gateway
	     * sees the request; 0.9.75 writes that answer's header block
	     * twice (its state machine goes on after the refusal; fixed in
	     * 1.0.0), which no callback can stop: only the first is checked */
	    {B("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
	       "999999999999999999999999999\r\n\r\n"),
	     413, 1},
	    {B("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
	       "-5\r\n\r\n"),
	     400, 1},
#undef B
	};
	const size_t once = 5; /* the cases before this one: exactly one answer */
	char key[SB_VKEY_MAX], *buf = malloc(1 << 20), *hdr, req[256];
	struct raw_answer a;
	size_t len;
	int fd, eof;

	assert_non_null(buf);
	add_run("run-junk", 1000000000, 1, ms, 1, key);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		fd = raw_open(gw, "run-junk");
		assert_int_equal(raw_write(fd, bad[i].bytes, bad[i].len), 0);
		len = raw_read(fd, buf, 1 << 20, 1.0, &eof);
		raw_parse(buf, len, &a);
		assert_int_equal(a.status, bad[i].status);
		assert_int_equal(eof, bad[i].closes);
		if (i < once)
			assert_int_equal(a.statuses, bad[i].status ? 1 : 0);
		close(fd);
	}
	/* a header block above what libmicrohttpd holds: refused, closed */
	assert_non_null(hdr = malloc(256 << 10));
	memset(hdr, 'a', 256 << 10);
	memcpy(hdr, "GET /v1/models HTTP/1.1\r\nX-Big: ", 32);
	fd = raw_open(gw, "run-junk");
	raw_write(fd, hdr, 256 << 10);
	len = raw_read(fd, buf, 1 << 20, 2.0, &eof);
	raw_parse(buf, len, &a);
	assert_true(eof);
	assert_true(a.statuses <= 1);
	assert_true(a.status == 0 || a.status == 431 || a.status == 413 ||
		    a.status == 400);
	close(fd);
	free(hdr);
	/* a flood of pipelined requests: one answer each */
	fd = raw_open(gw, "run-junk");
	snprintf(req, sizeof req,
		 "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n",
		 key);
	for (int i = 0; i < 200; i++)
		assert_int_equal(raw_send(fd, req), 0);
	len = raw_read(fd, buf, 1 << 20, 1.0, &eof);
	raw_parse(buf, len, &a);
	assert_int_equal(a.statuses, 200);
	assert_int_equal(a.status, 200);
	close(fd);
	free(buf);
	sb_gateway_run_remove(gw, "run-junk");
}

static void test_connection_tied_to_its_run(void **state)
{
	struct sb_gateway_model ms[1] = {model("plain", 100, NULL)};
	char ka[SB_VKEY_MAX], kb[SB_VKEY_MAX], body[512];
	struct ev evs[8];
	struct resp r;
	double t0, closed;
	int fd;

	add_run("run-ta", 1000000000, 1, ms, 1, ka);
	add_run("run-tb", 1000000000, 1, ms, 1, kb);
	/* a key is only good on its own run's connections */
	call("run-tb", "/v1/models", ka, 0, NULL, &r);
	assert_int_equal(r.status, 403);
	assert_non_null(strstr(r.body, "another run"));
	chat_body(body, sizeof body, "stub/plain", 0);
	call("run-tb", "/v1/chat/completions", ka, 0, body, &r);
	assert_int_equal(r.status, 403);
	assert_int_equal(run_events("run-ta", evs, 8), 0); /* not forwarded */
	assert_int_equal(run_events("run-tb", evs, 8), 0);
	call("run-tb", "/v1/models", kb, 0, NULL, &r);
	assert_int_equal(r.status, 200);
	call("run-ta", "/v1/chat/completions", ka, 0, body, &r);
	assert_int_equal(r.status, 200);
	/* no run, no connection */
	fd = -7;
	assert_int_equal(sb_gateway_connect(gw, "run-none", &fd), SB_ERR_NOTFOUND);
	assert_int_equal(sb_gateway_connect(gw, "", &fd), SB_ERR_NOTFOUND);
	assert_int_equal(fd, -7);
	/* the caller's end: non-blocking, not inherited by children */
	fd = raw_open(gw, "run-tb");
	assert_true(fcntl(fd, F_GETFL) & O_NONBLOCK);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	/* a removed run's waiting connection is closed at once (the header
	 * deadline of this gateway is 10 s) */
	t0 = now_s();
	sb_gateway_run_remove(gw, "run-tb");
	raw_wait_closed(&fd, &t0, 1, 3.0, &closed);
	assert_true(closed >= 0 && closed < 3.0);
	close(fd);
	sb_gateway_run_remove(gw, "run-ta");
}

/* A memory fork's alias: its parent's key works on the fork's own
 * connections, as the fork (metered there), and nowhere else. */
static void test_alias_on_own_connections(void **state)
{
	struct sb_gateway_model ms[1] = {model("plain", 100, NULL)};
	struct sb_gateway_run fr = {.run = "run-fork",
				    .budget_nusd = 1000000000,
				    .stop_on_budget = 1,
				    .models = ms,
				    .nmodels = 1};
	char kp[SB_VKEY_MAX], kf[SB_VKEY_MAX], ko[SB_VKEY_MAX], body[512];
	struct ev evs[8];
	struct resp r;
	size_t n;

	add_run("run-parent", 1000000000, 1, ms, 1, kp);
	add_run("run-other", 1000000000, 1, ms, 1, ko);
	fr.alias = kp;
	assert_int_equal(sb_gateway_run_add(gw, &fr, kf), SB_OK);
	chat_body(body, sizeof body, "stub/plain", 0);
	call("run-fork", "/v1/chat/completions", kp, 0, body, &r);
	assert_int_equal(r.status, 200);
	n = run_events("run-fork", evs, 8);
	assert_true(n > 0); /* the fork's call */
	events_free(evs, n);
	assert_int_equal(run_events("run-parent", evs, 8), 0);
	call("run-fork", "/v1/models", kf, 0, NULL, &r); /* its own key too */
	assert_int_equal(r.status, 200);
	call("run-other", "/v1/models", kp, 0, NULL, &r); /* elsewhere: the parent's */
	assert_int_equal(r.status, 403);
	call("run-parent", "/v1/models", kf, 0, NULL, &r);
	assert_int_equal(r.status, 403);
	sb_gateway_run_remove(gw,
			      "run-parent"); /* a parent gone: the alias still works */
	call("run-fork", "/v1/models", kp, 0, NULL, &r);
	assert_int_equal(r.status, 200);
	sb_gateway_run_remove(gw, "run-fork");
	sb_gateway_run_remove(gw, "run-other");
}

/* A beta that reprices the tokens is refused before anything is
 * forwarded; others pass. */
static void test_betas_refused(void **state)
{
	struct sb_gateway_model ms[1] = {model("plain", 100, NULL)};
	static const char body[] =
	    "{\"model\":\"stub/plain\",\"max_tokens\":9,"
	    "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
	const char *betas[2] = {"interleaved-thinking-2025-05-14",
				"interleaved-thinking-2025-05-14,context-1m-2025-08-07"};
	char key[SB_VKEY_MAX], req[1024], buf[8192];
	struct raw_answer a;
	struct sb_budget b;
	int fd, eof;

	add_run("run-beta", 1000000000, 1, ms, 1, key);
	for (int i = 0; i < 2; i++) {
		fd = raw_open(gw, "run-beta");
		snprintf(req, sizeof req,
			 "POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: %s\r\n"
			 "anthropic-beta: %s\r\nContent-Type: application/json\r\n"
			 "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
			 key, betas[i], strlen(body), body);
		assert_int_equal(raw_send(fd, req), 0);
		raw_parse(buf, raw_read(fd, buf, sizeof buf, 5.0, &eof), &a);
		close(fd);
		assert_int_equal(a.status, i ? 400 : 200);
		if (i)
			assert_non_null(strstr(a.body, "context-1m is refused"));
	}
	assert_int_equal(sb_gateway_run_budget(gw, "run-beta", &b), SB_OK);
	assert_int_equal(b.reserved, 0);
	assert_int_equal(b.spent, 50 * 1000 + 9 * 100000); /* the one call forwarded */
	sb_gateway_run_remove(gw, "run-beta");
}

/* --- deadlines --- */

/* One hostile or slow client of gw2, on its own thread. */
struct client {
	const char *run, *key;
	int stream;	   /* slowcall_main: a stream */
	double t0, closed; /* when it was seen closed, seconds from t0, or -1 */
	int ok;		   /* what it checks held */
};

/* Slowloris: a header line a quarter second, for ever. */
static void *slowloris_main(void *arg)
{
	struct client *c = arg;
	int fd = raw_open(gw2, c->run);

	c->t0 = now_s();
	c->closed = -1;
	raw_send(fd, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n");
	while (now_s() - c->t0 < HDR_S + SLACK_S) {
		raw_wait_closed(&fd, &c->t0, 1, 0.25, &c->closed);
		if (c->closed >= 0 || raw_send(fd, "X-Slow: a\r\n")) {
			if (c->closed < 0)
				c->closed = now_s() - c->t0;
			break;
		}
	}
	close(fd);
	return NULL;
}

/* A body of 1000 bytes, a byte a quarter second. */
static void *trickle_main(void *arg)
{
	struct client *c = arg;
	int fd = raw_open(gw2, c->run);
	char head[256];

	snprintf(head, sizeof head,
		 "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
		 "%s\r\nContent-Length: 1000\r\n\r\n{",
		 c->key);
	raw_send(fd, head);
	c->t0 = now_s();
	c->closed = -1;
	while (now_s() - c->t0 < BODY_S + SLACK_S) {
		raw_wait_closed(&fd, &c->t0, 1, 0.25, &c->closed);
		if (c->closed >= 0 || raw_send(fd, " ")) {
			if (c->closed < 0)
				c->closed = now_s() - c->t0;
			break;
		}
	}
	close(fd);
	return NULL;
}

/* Keep-alive: three requests 2 s apart on one connection (6 s, more than
 * the header deadline from its start), then idle until closed. */
static void *keepalive_main(void *arg)
{
	struct client *c = arg;
	int fd = raw_open(gw2, c->run), eof = 0;
	char req[256], buf[8192] = "";
	struct raw_answer a;
	size_t len;

	snprintf(req, sizeof req,
		 "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n",
		 c->key);
	c->ok = 1;
	c->closed = -1;
	for (int i = 0; i < 3; i++) {
		if (i)
			sleep(HDR_S - 1);
		c->ok &= raw_send(fd, req) == 0;
		len = 0;
		buf[0] = 0;
		while (!eof && len < sizeof buf - 1 && !strstr(buf, "]}")) {
			struct pollfd pf = {fd, POLLIN, 0};
			ssize_t got;
			if (poll(&pf, 1, 5000) <= 0)
				break;
			got = read(fd, buf + len, sizeof buf - 1 - len);
			eof = got == 0;
			len += got > 0 ? (size_t)got : 0;
			buf[len] = 0;
		}
		raw_parse(buf, len, &a);
		c->ok &= !eof && a.statuses == 1 && a.status == 200;
	}
	c->t0 = now_s();
	raw_wait_closed(&fd, &c->t0, 1, HDR_S + SLACK_S, &c->closed);
	close(fd);
	return NULL;
}

/* A call slower than both deadlines, whole (key) or streamed. */
static void *slowcall_main(void *arg)
{
	struct client *c = arg;
	int stream = c->stream;
	char body[512];
	struct resp *r = malloc(sizeof *r);

	assert_non_null(r);
	chat_body(body, sizeof body, stream ? "stub/slowstream" : "stub/slowwhole",
		  stream);
	c->t0 = now_s();
	call_on(gw2, c->run, "/v1/chat/completions", c->key, 0, body, r);
	c->closed = now_s() - c->t0; /* here: how long the call took */
	c->ok = r->status == 200 &&
		strstr(r->body, stream ? "data: [DONE]" : "a late answer") != NULL;
	free(r);
	return NULL;
}

static void test_deadlines(void **state)
{
	struct sb_gateway_model ms[3] = {model("plain", 100, NULL),
					 model("slowwhole", 100, NULL),
					 model("slowstream", 100, NULL)};
	char key[SB_VKEY_MAX];
	struct client cs[5];
	void *(*mains[5])(void *) = {slowloris_main, trickle_main, keepalive_main,
				     slowcall_main, slowcall_main};
	pthread_t th[5];

	add_run_on(gw2, "run-dl", 1000000000, 1, ms, 3, key);
	for (int i = 0; i < 5; i++) {
		cs[i] = (struct client){.run = "run-dl", .key = key, .stream = i == 4};
		assert_int_equal(pthread_create(&th[i], NULL, mains[i], &cs[i]), 0);
	}
	for (int i = 0; i < 5; i++)
		pthread_join(th[i], NULL);
	/* headers trickled: closed at the header deadline from the start */
	assert_true(cs[0].closed >= HDR_S - 0.05);
	assert_true(cs[0].closed <= HDR_S + SLACK_S);
	/* a body trickled: closed at the body deadline from its headers */
	assert_true(cs[1].closed >= BODY_S - 0.05);
	assert_true(cs[1].closed <= BODY_S + SLACK_S);
	/* each request's headers within the deadline of the previous answer:
	 * served; then idle: closed at the header deadline */
	assert_true(cs[2].ok);
	assert_true(cs[2].closed >= HDR_S - 0.1);
	assert_true(cs[2].closed <= HDR_S + SLACK_S);
	/* calls in progress longer than both deadlines: not cut */
	assert_true(cs[3].ok);
	assert_true(cs[3].closed >= 4.9);
	assert_true(cs[4].ok);
	assert_true(cs[4].closed >= 4.4);
	sb_gateway_run_remove(gw2, "run-dl");
}

/* --- shares --- */

#define NRUNS 9

static void test_starved_runs_still_served(void **state)
{
	struct sb_gateway_model ms[1] = {model("plain", 100, NULL)};
	const unsigned share = 128 / NRUNS; /* 14: between 8 and 64 */
	static int fds[NRUNS - 1][64];
	static double t0[NRUNS - 1][64], closed[NRUNS - 1][64];
	char runs[NRUNS][24], keys[NRUNS][SB_VKEY_MAX], body[512];
	unsigned n[NRUNS - 1];
	struct resp r;
	int rc, fd;

	for (int i = 0; i < NRUNS; i++) {
		snprintf(runs[i], sizeof runs[i], "run-st%d", i);
		add_run_on(gw2, runs[i], 1000000000, 1, ms, 1, keys[i]);
	}
	/* eight runs take every connection they may have, each sending half
	 * a header block and no more */
	for (int i = 0; i < NRUNS - 1; i++) {
		for (n[i] = 0; (rc = sb_gateway_connect(gw2, runs[i], &fd)) == SB_OK;
		     n[i]++) {
			assert_true(n[i] < 64);
			fds[i][n[i]] = fd;
			t0[i][n[i]] = now_s();
			assert_int_equal(raw_send(fd,
						  "POST /v1/chat/completions HTTP/1.1\r\n"
						  "Host: x\r\nAuthorization: Bear"),
					 0);
		}
		assert_int_equal(rc, SB_ERR_FULL);
		assert_non_null(strstr(sb_errmsg(rc), "share"));
		assert_int_equal(n[i], share);
	}
	/* the ninth is served while they hold it all */
	chat_body(body, sizeof body, "stub/plain", 0);
	call_on(gw2, runs[NRUNS - 1], "/v1/chat/completions", keys[NRUNS - 1], 0, body,
		&r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "hello there"));
	for (int i = 0; i < NRUNS - 1; i++)
		for (unsigned k = 0; k < n[i]; k++)
			assert_true(raw_untouched(fds[i][k]));
	/* and the half header blocks are closed at the header deadline */
	for (int i = 0; i < NRUNS - 1; i++) {
		raw_wait_closed(fds[i], t0[i], n[i], HDR_S + SLACK_S + 1, closed[i]);
		for (unsigned k = 0; k < n[i]; k++) {
			assert_true(closed[i][k] >= HDR_S - 0.05);
			assert_true(closed[i][k] <= HDR_S + SLACK_S);
			close(fds[i][k]);
		}
	}
	/* which gives their places back */
	for (double t = now_s(); now_s() - t < 3.0;) {
		for (n[0] = 0; n[0] < share &&
			       sb_gateway_connect(gw2, runs[0], &fds[0][n[0]]) == SB_OK;)
			n[0]++;
		if (n[0] == share)
			break;
		while (n[0])
			close(fds[0][--n[0]]);
		usleep(50000);
	}
	assert_int_equal(n[0], share);
	assert_int_equal(sb_gateway_connect(gw2, runs[0], &fd), SB_ERR_FULL);
	while (n[0])
		close(fds[0][--n[0]]);
	for (int i = 0; i < NRUNS; i++)
		sb_gateway_run_remove(gw2, runs[i]);
}

/* Opens connections of run on g until refused; writes them into fds (at
 * most 64), each with half a header block sent; returns how many. */
static unsigned hold_all(sb_gateway *g, const char *run, int *fds, int *rc)
{
	unsigned n = 0;

	while (n < 64 && (*rc = sb_gateway_connect(g, run, &fds[n])) == SB_OK)
		assert_int_equal(raw_send(fds[n++], "GET /v1/models HTTP/1.1\r\nHo"), 0);
	return n;
}

static void test_shares_and_cap(void **state)
{
	struct sb_gateway_model ms[1] = {model("plain", 100, NULL)};
	struct sb_gateway_opts o = {0};
	static int fds[5][64];
	double t0[32], closed[32], start;
	char runs[5][24], keys[5][SB_VKEY_MAX], req[256], buf[4096];
	unsigned n[5], gone;
	struct raw_answer a;
	sb_gateway *g;
	size_t len;
	int rc, fd, eof;

	o.log = lg;
	o.max_conns = 32;
	o.header_timeout_s = 60; /* nothing closes here by the deadline */
	for (int i = 0; i < 5; i++)
		snprintf(runs[i], sizeof runs[i], "run-sh%d", i);
	/* the cap: five runs of 32 get 8 each (6 is below the least share),
	 * so four hold them all and the fifth, holding none, is refused */
	assert_int_equal(sb_gateway_open(&o, &g), SB_OK);
	for (int i = 0; i < 5; i++)
		add_run_on(g, runs[i], 1000000000, 1, ms, 1, keys[i]);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(n[i] = hold_all(g, runs[i], fds[i], &rc), 8);
		assert_int_equal(rc, SB_ERR_FULL);
	}
	assert_int_equal(sb_gateway_connect(g, runs[4], &fd), SB_ERR_FULL);
	assert_non_null(strstr(sb_errmsg(SB_ERR_FULL), "holds its 32"));
	sb_gateway_close(g); /* with all of them open */
	for (int i = 0; i < 4; i++)
		for (unsigned k = 0; k < n[i]; k++)
			close(fds[i][k]);
	/* the share follows the runs: two runs hold 16 each; a third
	 * registers and the share is 10: six of each are closed, the rest
	 * stay, and the third gets its ten */
	assert_int_equal(sb_gateway_open(&o, &g), SB_OK);
	for (int i = 0; i < 2; i++)
		add_run_on(g, runs[i], 1000000000, 1, ms, 1, keys[i]);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(n[i] = hold_all(g, runs[i], fds[i], &rc), 16);
		assert_int_equal(rc, SB_ERR_FULL);
	}
	start = now_s();
	add_run_on(g, runs[2], 1000000000, 1, ms, 1, keys[2]);
	for (unsigned k = 0; k < 32; k++)
		t0[k] = start;
	memcpy(fds[3], fds[0], 16 * sizeof(int));
	memcpy(fds[3] + 16, fds[1], 16 * sizeof(int));
	raw_wait_closed(fds[3], t0, 32, 2.0, closed);
	for (int i = 0; i < 2; i++) {
		gone = 0;
		for (unsigned k = 0; k < 16; k++)
			gone += closed[16 * i + k] >= 0;
		assert_int_equal(gone, 6);
	}
	for (start = now_s(); now_s() - start < 5.0; usleep(50000)) {
		n[2] = hold_all(g, runs[2], fds[2], &rc);
		if (n[2] == 10)
			break;
		while (n[2])
			close(fds[2][--n[2]]);
	}
	assert_int_equal(n[2], 10);
	assert_int_equal(rc, SB_ERR_FULL);
	/* a place given back is the run's again, and serves */
	close(fds[2][--n[2]]);
	for (start = now_s(); now_s() - start < 5.0; usleep(50000))
		if ((rc = sb_gateway_connect(g, runs[2], &fd)) == SB_OK)
			break;
	assert_int_equal(rc, SB_OK);
	snprintf(req, sizeof req,
		 "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n",
		 keys[2]);
	assert_int_equal(raw_send(fd, req), 0);
	len = raw_read(fd, buf, sizeof buf, 0.5, &eof);
	raw_parse(buf, len, &a);
	assert_int_equal(a.statuses, 1);
	assert_int_equal(a.status, 200);
	close(fd);
	sb_gateway_close(g);
	for (int i = 0; i < 3; i++)
		for (unsigned k = 0; k < n[i]; k++)
			close(fds[i][k]);
}

/* After all of the above: both gateways serve, and every connection a run
 * may have is free again. */
static void test_still_serving(void **state)
{
	struct sb_gateway_model ms[1] = {model("plain", 100, NULL)};
	char key[SB_VKEY_MAX], body[512];
	int fds[64];
	unsigned n;
	struct resp r;
	int rc;

	chat_body(body, sizeof body, "stub/plain", 0);
	add_run("run-last", 1000000000, 1, ms, 1, key);
	call("run-last", "/v1/chat/completions", key, 0, body, &r);
	assert_int_equal(r.status, 200);
	add_run_on(gw2, "run-last", 1000000000, 1, ms, 1, key);
	call_on(gw2, "run-last", "/v1/chat/completions", key, 0, body, &r);
	assert_int_equal(r.status, 200);
	/* the only run: 64, once the gateway has closed its end of the
	 * call's connection */
	for (double t = now_s(); now_s() - t < 3.0; usleep(50000)) {
		n = hold_all(gw2, "run-last", fds, &rc);
		if (n == 64)
			break;
		while (n)
			close(fds[--n]);
	}
	assert_int_equal(n, 64);
	assert_int_equal(sb_gateway_connect(gw2, "run-last", &rc), SB_ERR_FULL);
	while (n)
		close(fds[--n]);
	sb_gateway_run_remove(gw2, "run-last");
	sb_gateway_run_remove(gw, "run-last");
}

static void test_errors(void **state)
{
	struct sb_gateway_model ms[3] = {model("fail", 100, NULL),
					 model("plain", 100, NULL),
					 model("plain", 100, NULL)};
	char key[SB_VKEY_MAX], body[512], *big;
	struct ev evs[16];
	struct resp r;
	struct sb_budget b;
	size_t n;

	snprintf(ms[2].model.name, sizeof ms[2].model.name, "stub/gone");
	snprintf(ms[2].base_url, sizeof ms[2].base_url, "http://127.0.0.1:1/v1");
	ms[1].apis = SB_API_OPENAI;
	add_run("run-err", 1000000000, 1, ms, 3, key);
	/* the provider's own error passes through and is not billed */
	chat_body(body, sizeof body, "stub/fail", 0);
	call("run-err", "/v1/chat/completions", key, 0, body, &r);
	assert_int_equal(r.status, 500);
	assert_non_null(strstr(r.body, "provider broke"));
	/* unreachable provider */
	chat_body(body, sizeof body, "stub/gone", 0);
	call("run-err", "/v1/chat/completions", key, 0, body, &r);
	assert_int_equal(r.status, 502);
	assert_non_null(strstr(r.body, "unreachable"));
	/* a dialect the provider does not speak */
	snprintf(body, sizeof body,
		 "{\"model\":\"stub/plain\",\"max_tokens\":5,\"messages\":[]}");
	call("run-err", "/v1/messages", key, 1, body, &r);
	assert_int_equal(r.status, 400);
	assert_non_null(
	    strstr(r.body, "\"type\":\"error\"")); /* Anthropic's error shape */
	/* bad bodies */
	call("run-err", "/v1/chat/completions", key, 0, "{not json", &r);
	assert_int_equal(r.status, 400);
	call("run-err", "/v1/chat/completions", key, 0,
	     "{\"model\":\"stub/plain\",\"messages\":[],\"max_tokens\":-4}", &r);
	assert_int_equal(r.status, 400);
	assert_non_null(big = malloc((17u << 20) + 1));
	memset(big, ' ', 17u << 20);
	big[17u << 20] = 0;
	call("run-err", "/v1/chat/completions", key, 0, big, &r);
	assert_int_equal(r.status, 413);
	free(big);
	n = run_events("run-err", evs, 16);
	assert_int_equal(count_type(evs, n, "agent.message"),
			 2); /* the two forwarded calls */
	assert_int_equal(count_type(evs, n, "agent.usage.updated"), 0);
	assert_int_equal(sb_gateway_run_budget(gw, "run-err", &b), SB_OK);
	assert_int_equal(b.spent, 0);
	assert_int_equal(b.reserved, 0);
	events_free(evs, n);
	sb_gateway_run_remove(gw, "run-err");
}

/* The calls run made, as a re-run's record (bodies owned by bodies[]). */
static size_t recorded_calls(const char *run, struct sb_rerun_call *calls,
			     char **bodies, size_t max)
{
	struct ev evs[16];
	size_t n = run_events(run, evs, 16), k = 0;
	const struct ev *m;

	for (; k < max && (m = find_type(evs, n, "agent.message", k)); k++) {
		char api[16];
		bodies[2 * k] = blob_of(m, "request");
		bodies[2 * k + 1] = blob_of(m, "response");
		sb_map_str(&m->p, "api", api, sizeof api);
		calls[k] = (struct sb_rerun_call){
		    .api = strcmp(api, "anthropic") ? SB_API_OPENAI : SB_API_ANTHROPIC,
		    .stream = sb_map_bool(&m->p, "stream", 0),
		    .status = (long)sb_map_u64(&m->p, "status", 0),
		    .request = bodies[2 * k],
		    .request_len = strlen(bodies[2 * k]),
		    .answer = bodies[2 * k + 1],
		    .answer_len = strlen(bodies[2 * k + 1])};
	}
	events_free(evs, n);
	return k;
}

/* Registers run as a re-run of the calls (live: go on to the provider
 * after a divergence). */
static void add_rerun(const char *run, const struct sb_gateway_model *ms,
		      const struct sb_rerun_call *calls, size_t n, uint64_t skipped, int live,
		      char key[SB_VKEY_MAX])
{
	struct sb_gateway_run r = {
	    .run = run, .budget_nusd = 1000000000, .models = ms, .nmodels = 1};

	assert_int_equal(sb_rerun_new(calls, n, skipped, live, &r.rerun), SB_OK);
	assert_int_equal(sb_gateway_run_add(gw, &r, key), SB_OK);
}

/* A re-run's calls are answered from the record, at no cost, without the
 * provider; a call that departs from it is named by its first differing
 * field, and then stops (409) or goes on to the provider, metered. */
static void test_rerun_from_record(void **state)
{
	struct sb_gateway_model ms[1] = {model("plain", 100, PROVIDER_KEY)};
	char key[SB_VKEY_MAX], body[512], other[512], *bodies[4] = {0};
	char path[SB_RERUN_PATH_MAX];
	struct sb_rerun_call calls[2];
	struct resp r[2], again;
	struct ev evs[16];
	const struct ev *e;
	size_t n;
	long mark;

	add_run("run-orig", 1000000000, 1, ms, 1, key);
	chat_body(body, sizeof body, "stub/plain", 0);
	call("run-orig", "/v1/chat/completions", key, 0, body, &r[0]);
	chat_body(body, sizeof body, "stub/plain", 1);
	call("run-orig", "/v1/chat/completions", key, 0, body, &r[1]);
	sb_gateway_run_remove(gw, "run-orig");
	assert_int_equal(recorded_calls("run-orig", calls, bodies, 2), 2);

	/* the same calls: the record's answers, the stub never asked */
	add_rerun("run-re", ms, calls, 2, 0, 0, key);
	mark = stub_mark();
	chat_body(body, sizeof body, "stub/plain", 0);
	call("run-re", "/v1/chat/completions", key, 0, body, &again);
	assert_int_equal(again.status, 200);
	assert_string_equal(again.body, r[0].body);
	chat_body(body, sizeof body, "stub/plain", 1);
	call("run-re", "/v1/chat/completions", key, 0, body, &again);
	assert_int_equal(again.status, 200);
	assert_string_equal(again.body, r[1].body);
	assert_int_equal(stub_mark(), mark);
	/* one more than recorded: diverged at call 3, stopped there */
	call("run-re", "/v1/chat/completions", key, 0, body, &again);
	assert_int_equal(again.status, 409);
	assert_int_equal(atomic_load(&diverged_calls), 1);
	n = run_events("run-re", evs, 16);
	assert_int_equal(count_type(evs, n, "agent.usage.updated"), 2);
	for (size_t i = 0; i < 2; i++) {
		e = find_type(evs, n, "agent.usage.updated", i);
		assert_int_equal(sb_map_u64(&e->p, "input_tokens", 0), 50);
		assert_int_equal(sb_map_u64(&e->p, "cost_nusd", 1), 0);
		assert_true(sb_map_bool(&find_type(evs, n, "agent.message", i)->p,
					"replayed", 0));
	}
	assert_non_null(e = find_type(evs, n, "rerun.diverged", 0));
	assert_int_equal(e->source, SB_SRC_GATEWAY);
	assert_int_equal(sb_map_u64(&e->p, "call", 0), 3);
	assert_int_equal(sb_map_str(&e->p, "path", path, sizeof path), 0);
	events_free(evs, n);
	sb_gateway_run_remove(gw, "run-re");

	/* from an offset past the first call: its first call is answered
	 * with the second recorded answer, and calls are numbered in the
	 * whole record (one more: call 3) */
	add_rerun("run-at", ms, calls + 1, 1, 1, 0, key);
	chat_body(body, sizeof body, "stub/plain", 1);
	call("run-at", "/v1/chat/completions", key, 0, body, &again);
	assert_int_equal(again.status, 200);
	assert_string_equal(again.body, r[1].body);
	call("run-at", "/v1/chat/completions", key, 0, body, &again);
	assert_int_equal(again.status, 409);
	assert_int_equal(atomic_load(&diverged_calls), 2);
	n = run_events("run-at", evs, 16);
	assert_int_equal(count_type(evs, n, "agent.usage.updated"), 1);
	assert_non_null(e = find_type(evs, n, "rerun.diverged", 0));
	assert_int_equal(sb_map_u64(&e->p, "call", 0), 3);
	events_free(evs, n);
	sb_gateway_run_remove(gw, "run-at");
	assert_int_equal(stub_mark(), mark);

	/* another question: named, then answered by the provider, metered */
	add_rerun("run-live", ms, calls, 2, 0, 1, key);
	snprintf(other, sizeof other,
		 "{\"model\":\"stub/plain\",\"messages\":[{\"role\":\"user\","
		 "\"content\":\"something else\"}]}");
	call("run-live", "/v1/chat/completions", key, 0, other, &again);
	assert_int_equal(again.status, 200);
	assert_true(stub_mark() > mark);
	n = run_events("run-live", evs, 16);
	assert_non_null(e = find_type(evs, n, "rerun.diverged", 0));
	assert_int_equal(sb_map_u64(&e->p, "call", 0), 1);
	assert_true(sb_map_str(&e->p, "path", path, sizeof path) > 0);
	assert_string_equal(path, "messages[0].content");
	assert_non_null(e = find_type(evs, n, "agent.usage.updated", 0));
	assert_int_equal(sb_map_u64(&e->p, "cost_nusd", 0), 1050000);
	assert_int_equal(atomic_load(&diverged_calls), 2); /* it goes on */
	events_free(evs, n);
	sb_gateway_run_remove(gw, "run-live");
	for (size_t i = 0; i < 4; i++)
		free(bodies[i]);
}

/* sb_rerun_diff of two strings. */
static int diff(const char *a, const char *b, char path[SB_RERUN_PATH_MAX])
{
	return sb_rerun_diff(a, strlen(a), b, strlen(b), path);
}

/* The comparison a re-run makes, on its own. */
static void test_rerun_diff(void **state)
{
	char path[SB_RERUN_PATH_MAX];
	const char *a = "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":"
			"\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}]}";

	assert_int_equal(diff(a, a, path), 0);
	assert_string_equal(path, "");
	/* bounds, ids and stream options are not compared */
	assert_int_equal(diff(a,
			      "{\"model\":\"m\",\"max_tokens\":9,\"stream\":true,"
			      "\"messages\":[{\"id\":\"x\",\"role\":\"user\",\"content\":"
			      "[{\"type\":\"text\",\"text\":\"hi\"}]}]}",
			      path),
			 0);
	assert_int_equal(diff(a,
			      "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
			      "[{\"type\":\"text\",\"text\":\"ho\"}]}]}",
			      path),
			 1);
	assert_string_equal(path, "messages[0].content[0].text");
	assert_int_equal(diff(a, "{\"model\":\"n\"}", path), 1);
	assert_string_equal(path, "model");
	assert_int_equal(diff(a, "{\"model\":\"m\",\"messages\":[]}", path), 1);
	assert_string_equal(path, "messages[0]");
	assert_int_equal(diff(a,
			      "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
			      "[{\"type\":\"text\",\"text\":\"hi\"}]}],\"tools\":[]}",
			      path),
			 1);
	assert_string_equal(path, "tools");
	assert_int_equal(diff(a, "not json", path), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_keys_and_models),
	    cmocka_unit_test(test_openai_call_recorded),
	    cmocka_unit_test(test_streams_metered),
	    cmocka_unit_test(test_budget_refuses_third_call),
	    cmocka_unit_test(test_concurrent_calls_never_overspend),
	    cmocka_unit_test(test_stream_past_budget_is_cut),
	    cmocka_unit_test(test_responses_metered),
	    cmocka_unit_test(test_responses_stream_cut),
	    cmocka_unit_test(test_hostile_fields_never_overspend),
	    cmocka_unit_test(test_choices_reserved),
	    cmocka_unit_test(test_hostile_fields_concurrent),
	    cmocka_unit_test(test_group_budget_concurrent),
	    cmocka_unit_test(test_connection_tied_to_its_run),
	    cmocka_unit_test(test_alias_on_own_connections),
	    cmocka_unit_test(test_errors),
	    cmocka_unit_test(test_oversized_body_answered_once),
	    cmocka_unit_test(test_garbage_requests),
	    cmocka_unit_test(test_betas_refused),
	    cmocka_unit_test(test_deadlines),
	    cmocka_unit_test(test_starved_runs_still_served),
	    cmocka_unit_test(test_shares_and_cap),
	    cmocka_unit_test(test_still_serving),
	    cmocka_unit_test(test_rerun_from_record),
	    cmocka_unit_test(test_rerun_diff),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
