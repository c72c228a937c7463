/* test_gateway.c - the model gateway against a real model stub over HTTP:
 * keys, models, the provider key swap, metering and recording of whole and
 * streamed answers in both dialects, budgets (refusal, concurrency, cut
 * streams), tunnel ties, provider errors and bad requests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>

#include "engine/gateway/gateway.h"
#include "engine/log/log.h"
#include "testutil.h"

#define PROVIDER_KEY "sk-provider-REAL-1234"

static char *home;
static sb_log *lg;
static sb_gateway *gw;
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
	char path[4096], dir[4096 + 16];
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
	write_file(dir, "fail.json",
		   "{\"turns\": [{\"status\": 500, \"error\": \"provider broke\"}]}");
	snprintf(stub_log, sizeof stub_log, "%s/stub.log", home);
	setenv("SANBOX_STUB_LOG", stub_log, 1);
	assert_int_equal(sb_stub_start(dir, &stub_pid, stub_url), SB_OK);
	snprintf(path, sizeof path, "%s/log", home);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(sb_log_open(path, SB_LOG_NOSYNC, &lg), SB_OK);
	o.log = lg;
	o.on_budget = on_budget;
	assert_int_equal(sb_gateway_open(&o, &gw), SB_OK);
	assert_true(sb_gateway_port(gw) > 0);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	return 0;
}

static int teardown(void **state)
{
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

/* Registers run with the given models and budget; writes its key. */
static void add_run(const char *run, uint64_t budget, int stop,
		    const struct sb_gateway_model *ms, size_t n, char key[SB_VKEY_MAX])
{
	struct sb_gateway_run r = {.run = run, .budget_nusd = budget, .stop_on_budget = stop,
				   .models = ms, .nmodels = n};

	assert_int_equal(sb_gateway_run_add(gw, &r, key), SB_OK);
	assert_int_equal(strncmp(key, "sk-sb-", 6), 0);
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

/* Calls the gateway: POST body to path (GET when body is NULL) with key
 * as a bearer token (or x-api-key when anthropic), from local_port when
 * not 0. */
static void call(const char *path, const char *key, int anthropic, const char *body,
		 long local_port, struct resp *r)
{
	char url[256], hdr[128];
	struct curl_slist *h = NULL;
	CURL *c = curl_easy_init();

	memset(r, 0, sizeof *r);
	snprintf(url, sizeof url, "http://127.0.0.1:%u%s", sb_gateway_port(gw), path);
	if (key) {
		snprintf(hdr, sizeof hdr,
			 anthropic ? "x-api-key: %s" : "Authorization: Bearer %s", key);
		h = curl_slist_append(h, hdr);
	}
	h = curl_slist_append(h, "Content-Type: application/json");
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	if (body)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	if (local_port)
		curl_easy_setopt(c, CURLOPT_LOCALPORT, local_port);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
	assert_int_equal(curl_easy_perform(c), CURLE_OK);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
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

	add_run("run-keys", 1000000000, 1, ms, 2, key);
	add_run("run-keys2", 1000000000, 1, ms, 1, key2);
	assert_string_not_equal(key, key2);
	call("/v1/models", NULL, 0, NULL, 0, &r);
	assert_int_equal(r.status, 401);
	assert_non_null(strstr(r.body, "authentication_error"));
	call("/v1/models", "sk-sb-forged", 0, NULL, 0, &r);
	assert_int_equal(r.status, 401);
	call("/v1/models", key, 0, NULL, 0, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "\"stub/plain\""));
	assert_non_null(strstr(r.body, "\"stub/budget\""));
	call("/v1/models", key2, 0, NULL, 0, &r);
	assert_null(strstr(r.body, "\"stub/budget\""));
	/* a model the run may not use */
	chat_body(body, sizeof body, "stub/budget", 0);
	call("/v1/chat/completions", key2, 0, body, 0, &r);
	assert_int_equal(r.status, 403);
	assert_non_null(strstr(r.body, "not allowed"));
	assert_non_null(strstr(r.body, "stub/plain"));
	call("/v1/nothing", key, 0, "{}", 0, &r);
	assert_int_equal(r.status, 404);
	/* a removed run's key stops working */
	sb_gateway_run_remove(gw, "run-keys2");
	call("/v1/models", key2, 0, NULL, 0, &r);
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
	call("/v1/chat/completions", key, 0, body, 0, &r);
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
	call("/v1/chat/completions", key, 0, body, 0, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "data: [DONE]"));
	assert_non_null(strstr(r.body, "\"usage\""));
	/* Anthropic, whole and streamed */
	snprintf(body, sizeof body,
		 "{\"model\":\"stub/plain\",\"max_tokens\":50,\"messages\":[%s]}",
		 USER_MSG);
	call("/v1/messages", key, 1, body, 0, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "hello there"));
	snprintf(body, sizeof body,
		 "{\"model\":\"stub/"
		 "plain\",\"max_tokens\":50,\"stream\":true,\"messages\":[%s]}",
		 USER_MSG);
	call("/v1/messages", key, 1, body, 0, &r);
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
	call("/v1/chat/completions", key, 0, body, 0, &r);
	assert_int_equal(r.status, 200);
	call("/v1/chat/completions", key, 0, body, 0, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(
	    strstr(r.body, "tool_calls")); /* the cap left room for the answer */
	call("/v1/chat/completions", key, 0, body, 0, &r);
	assert_int_equal(r.status, 402);
	assert_non_null(strstr(r.body, "budget_exceeded"));
	call("/v1/chat/completions", key, 0, body, 0, &r);
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
	const char *key;
	long status;
};

static void *race_one(void *arg)
{
	struct racer *rc = arg;
	char body[512];
	struct resp *r = malloc(sizeof *r);

	chat_body(body, sizeof body, "stub/budget", 0);
	call("/v1/chat/completions", rc->key, 0, body, 0, r);
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
	call("/v1/chat/completions", key, 0, body, 0, &r);
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
	/* charged what was reserved: every request byte and 10 output tokens */
	assert_int_equal(sb_gateway_run_budget(gw, "run-cut", &b), SB_OK);
	assert_int_equal(b.spent, strlen(body) * 1000 + 10 * 100000);
	assert_int_equal(sb_map_u64(&use->p, "cost_nusd", 0), b.spent);
	events_free(evs, n);
	sb_gateway_run_remove(gw, "run-cut");
}

static void test_tunnel_tie(void **state)
{
	struct sb_gateway_model ms[1] = {model("plain", 100, NULL)};
	char ka[SB_VKEY_MAX], kb[SB_VKEY_MAX];
	struct resp r;
	long port = 45000 + (getpid() % 5000);

	add_run("run-ta", 1000000000, 1, ms, 1, ka);
	add_run("run-tb", 1000000000, 1, ms, 1, kb);
	assert_int_equal(sb_gateway_bind(gw, (uint16_t)port, "run-tb"), SB_OK);
	call("/v1/models", ka, 0, NULL, port, &r);
	assert_int_equal(r.status, 403);
	assert_non_null(strstr(r.body, "another run"));
	call("/v1/models", kb, 0, NULL, port + 1, &r); /* untied port: by key alone */
	assert_int_equal(r.status, 200);
	sb_gateway_unbind(gw, (uint16_t)port);
	call("/v1/models", ka, 0, NULL, port + 2, &r);
	assert_int_equal(r.status, 200);
	sb_gateway_run_remove(gw, "run-ta");
	sb_gateway_run_remove(gw, "run-tb");
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
	call("/v1/chat/completions", key, 0, body, 0, &r);
	assert_int_equal(r.status, 500);
	assert_non_null(strstr(r.body, "provider broke"));
	/* unreachable provider */
	chat_body(body, sizeof body, "stub/gone", 0);
	call("/v1/chat/completions", key, 0, body, 0, &r);
	assert_int_equal(r.status, 502);
	assert_non_null(strstr(r.body, "unreachable"));
	/* a dialect the provider does not speak */
	snprintf(body, sizeof body,
		 "{\"model\":\"stub/plain\",\"max_tokens\":5,\"messages\":[]}");
	call("/v1/messages", key, 1, body, 0, &r);
	assert_int_equal(r.status, 400);
	assert_non_null(
	    strstr(r.body, "\"type\":\"error\"")); /* Anthropic's error shape */
	/* bad bodies */
	call("/v1/chat/completions", key, 0, "{not json", 0, &r);
	assert_int_equal(r.status, 400);
	call("/v1/chat/completions", key, 0,
	     "{\"model\":\"stub/plain\",\"messages\":[],\"max_tokens\":-4}", 0, &r);
	assert_int_equal(r.status, 400);
	assert_non_null(big = malloc((17u << 20) + 1));
	memset(big, ' ', 17u << 20);
	big[17u << 20] = 0;
	call("/v1/chat/completions", key, 0, big, 0, &r);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_keys_and_models),
	    cmocka_unit_test(test_openai_call_recorded),
	    cmocka_unit_test(test_streams_metered),
	    cmocka_unit_test(test_budget_refuses_third_call),
	    cmocka_unit_test(test_concurrent_calls_never_overspend),
	    cmocka_unit_test(test_stream_past_budget_is_cut),
	    cmocka_unit_test(test_tunnel_tie),
	    cmocka_unit_test(test_errors),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
