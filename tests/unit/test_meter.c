/* test_meter.c - model settings, prices, request capping, usage metering
 * (whole and streamed answers) and the budget ledger. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "engine/gateway/meter.h"
#include "engine/gateway/models.h"
#include "testutil.h"

/* Writes text as home/models.json. */
static void write_models(const char *home, const char *text)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof path, "%s/models.json", home);
	assert_non_null(f = fopen(path, "w"));
	fputs(text, f);
	fclose(f);
}

static void test_builtin_models(void **state)
{
	char *home = tu_tmpdir();
	struct sb_models *ms;
	const struct sb_model *m;
	const struct sb_provider *p;

	assert_int_equal(sb_models_load(home, &ms), SB_OK);
	assert_string_equal(ms->default_model, "stub/scripted");
	assert_int_equal(ms->default_budget_nusd, 1000000000ull);
	assert_non_null(m = sb_models_find(ms, "stub/scripted"));
	assert_string_equal(m->upstream, "scripted");
	assert_int_equal(m->in_price, 1000000000ull); /* $1 per Mtok */
	assert_int_equal(m->out_price, 2000000000ull);
	assert_int_equal(m->cached_price, 500000000ull);
	assert_int_equal(m->max_output, 4096);
	assert_non_null(p = sb_models_provider(ms, m->provider));
	assert_true(p->builtin);
	assert_int_equal(p->apis, SB_API_OPENAI | SB_API_ANTHROPIC | SB_API_RESPONSES);
	assert_null(sb_models_find(ms, "gpt-unknown"));
	sb_models_free(ms);
	tu_rmrf(home);
}

static void test_models_file_merges(void **state)
{
	char *home = tu_tmpdir();
	struct sb_models *ms;
	const struct sb_model *m;
	const struct sb_provider *p;

	write_models(
	    home, "{\"default_model\": \"acme/big\", \"default_budget_usd\": 0.25,"
		  " \"providers\": {\"acme\": {\"base_url\": \"http://127.0.0.1:9/v1\","
		  "   \"api\": \"anthropic\", \"key_secret\": \"ACME_KEY\"}},"
		  " \"models\": {\"acme/big\": {\"provider\": \"acme\", \"upstream\": "
		  "\"big-2\","
		  "   \"input\": 0.15, \"output\": 0.6, \"max_output\": 100}}}");
	assert_int_equal(sb_models_load(home, &ms), SB_OK);
	assert_string_equal(ms->default_model, "acme/big");
	assert_int_equal(ms->default_budget_nusd, 250000000ull);
	assert_non_null(m = sb_models_find(ms, "acme/big"));
	assert_string_equal(m->upstream, "big-2");
	assert_int_equal(m->in_price, 150000000ull);
	assert_int_equal(m->cached_price, m->in_price); /* defaults to the input price */
	assert_int_equal(m->max_output, 100);
	assert_non_null(p = sb_models_provider(ms, "acme"));
	assert_int_equal(p->apis, SB_API_ANTHROPIC);
	assert_string_equal(p->key_secret, "ACME_KEY");
	assert_non_null(sb_models_find(ms, "stub/echo")); /* built-ins stay */
	sb_models_free(ms);
	tu_rmrf(home);
}

static void test_models_file_errors(void **state)
{
	static const struct {
		const char *json, *want;
	} bad[] = {
	    {"{\"models\": {\"x/y\": {\"provider\": \"stub\", \"input\": 1}}}",
	     "no price 'output'"},
	    {"{\"models\": {\"x/y\": {\"provider\": \"nope\", \"input\": 1, \"output\": "
	     "1}}}",
	     "provider 'nope'"},
	    {"{\"models\": {\"x/y\": {\"provider\": \"stub\", \"input\": -1, \"output\": "
	     "1}}}",
	     "models.x/y.input"},
	    {"{\"providers\": {\"p\": {\"base_url\": \"ftp://x\"}}}", "base_url"},
	    {"{\"providers\": {\"p\": {\"base_url\": \"http://x/v1\", \"api\": "
	     "\"grpc\"}}}",
	     ".api"},
	    {"{\"default_model\": \"none/such\"}", "default_model"},
	    {"{\"default_budget_usd\": 0}", "default_budget_usd"},
	    {"{\"models\": ", "line 1"},
	};
	struct sb_models *ms;
	char *home = tu_tmpdir();

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		write_models(home, bad[i].json);
		int rc = sb_models_load(home, &ms);
		assert_int_equal(rc, SB_ERR_INVAL);
		tu_errmsg_has(rc, "models.json", bad[i].want);
	}
	tu_rmrf(home);
}

static void test_cost_is_exact(void **state)
{
	struct sb_model m = {.in_price = 2500000000ull,
			     .out_price = 10000000000ull,
			     .cached_price =
				 1250000000ull}; /* $2.50 / $10 / $1.25 per Mtok */

	/* 1000 in (200 cached), 500 out: 800*2500 + 200*1250 + 500*10000 nano-USD */
	assert_int_equal(sb_model_cost(&m, 1000, 200, 500), 2000000 + 250000 + 5000000);
	/* 1 token at $0.15/Mtok is 150 nano-USD; a fraction rounds up */
	m.in_price = 150000000ull;
	assert_int_equal(sb_model_cost(&m, 1, 0, 0), 150);
	m.in_price = 1;
	assert_int_equal(sb_model_cost(&m, 1, 0, 0), 1);
	assert_int_equal(sb_model_cost(&m, 0, 0, 0), 0);
	/* saturates instead of wrapping */
	m.out_price = UINT64_MAX;
	assert_int_equal(sb_model_cost(&m, 0, 0, UINT64_MAX), UINT64_MAX);
}

static void test_request_parse_and_cap(void **state)
{
	const char *body = "{\"model\":\"stub/"
			   "echo\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
			   "\"stream\":true,\"max_completion_tokens\":500}";
	struct sb_mreq rq;
	char *out;
	size_t len;
	json_t *j;

	assert_int_equal(sb_mreq_parse(SB_API_OPENAI, body, strlen(body), &rq), SB_OK);
	assert_string_equal(rq.model, "stub/echo");
	assert_true(rq.stream);
	assert_int_equal(rq.max_tokens, 500);
	assert_int_equal(sb_mreq_finish(SB_API_OPENAI, &rq, "echo", 120, &out, &len),
			 SB_OK);
	assert_non_null(j = json_loadb(out, len, 0, NULL));
	assert_string_equal(json_string_value(json_object_get(j, "model")), "echo");
	assert_int_equal(json_integer_value(json_object_get(j, "max_completion_tokens")),
			 120);
	assert_null(json_object_get(j, "max_tokens"));
	assert_true(json_is_true(
	    json_object_get(json_object_get(j, "stream_options"), "include_usage")));
	json_decref(j);
	free(out);
	sb_mreq_free(&rq);

	body = "{\"model\":\"m\",\"messages\":[],\"max_tokens\":9}";
	assert_int_equal(sb_mreq_parse(SB_API_ANTHROPIC, body, strlen(body), &rq), SB_OK);
	assert_int_equal(rq.max_tokens, 9);
	assert_false(rq.stream);
	sb_mreq_free(&rq);
}

/* Parses body (dialect api), which must pass, finishes it with a grant of
 * max_tokens and returns what would be forwarded, parsed. */
static json_t *forward_of(unsigned api, const char *body, uint64_t max_tokens,
			  struct sb_mreq *rq)
{
	char *out;
	size_t len;
	json_t *j;
	int rc = sb_mreq_parse(api, body, strlen(body), rq);

	if (rc)
		fail_msg("%s: %s", body, sb_errmsg(rc));
	assert_int_equal(sb_mreq_finish(api, rq, "up", max_tokens, &out, &len), SB_OK);
	assert_non_null(j = json_loadb(out, len, 0, NULL));
	free(out);
	sb_mreq_free(rq);
	return j;
}

static void test_request_allow_list(void **state)
{
	struct sb_mreq rq;
	const char *body;
	const char *key;
	json_t *j, *v;
	size_t i = 0;
	static const char *const order[] = {
	    "model",	  "temperature", "messages",	  "n",
	    "max_tokens", "stream",	 "stream_options"};

	/* unknown fields are dropped; listed ones keep their order; n is
	 * read; stream_options is the gateway's own; store false is no store */
	j = forward_of(SB_API_OPENAI,
		       "{\"model\":\"m\",\"temperature\":0.2,\"x_multiplier\":64,"
		       "\"messages\":[],\"extra_body\":{\"n\":9},\"n\":3,"
		       "\"max_tokens\":400,\"store\":false,\"stream\":true,"
		       "\"stream_options\":{\"include_usage\":false,\"x\":1},"
		       "\"best_of\":null}",
		       32, &rq);
	assert_int_equal(json_object_size(j), 7);
	json_object_foreach(j, key, v) assert_string_equal(key, order[i++]);
	assert_string_equal(json_string_value(json_object_get(j, "model")), "up");
	assert_int_equal(json_integer_value(json_object_get(j, "n")), 3);
	assert_int_equal(json_integer_value(json_object_get(j, "max_tokens")), 32);
	assert_non_null(v = json_object_get(j, "stream_options"));
	assert_int_equal(json_object_size(v), 1);
	assert_true(json_is_true(json_object_get(v, "include_usage")));
	json_decref(j);
	/* the bound the client used is the one capped; a non-stream call gets
	 * no stream_options */
	j = forward_of(SB_API_OPENAI,
		       "{\"model\":\"m\",\"messages\":[],\"max_completion_tokens\":"
		       "900,\"stream_options\":{\"include_usage\":true}}",
		       50, &rq);
	assert_int_equal(json_integer_value(json_object_get(j, "max_completion_tokens")),
			 50);
	assert_null(json_object_get(j, "max_tokens"));
	assert_null(json_object_get(j, "stream_options"));
	json_decref(j);
	/* none given: max_tokens is set */
	j = forward_of(SB_API_OPENAI, "{\"model\":\"m\",\"messages\":[]}", 70, &rq);
	assert_int_equal(json_integer_value(json_object_get(j, "max_tokens")), 70);
	json_decref(j);
	/* Anthropic: n is no field there (dropped), a thinking budget is held
	 * below the grant, client tools pass */
	j = forward_of(SB_API_ANTHROPIC,
		       "{\"model\":\"m\",\"messages\":[],\"max_tokens\":4000,\"n\":64,"
		       "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":3000},"
		       "\"tools\":[{\"name\":\"a\"},{\"type\":\"bash_20250124\","
		       "\"name\":\"bash\"},{\"type\":\"custom\",\"name\":\"c\"}],"
		       "\"system\":\"s\"}",
		       2000, &rq);
	assert_null(json_object_get(j, "n"));
	assert_int_equal(json_integer_value(json_object_get(j, "max_tokens")), 2000);
	assert_int_equal(json_integer_value(json_object_get(
			     json_object_get(j, "thinking"), "budget_tokens")),
			 1999);
	assert_int_equal(json_array_size(json_object_get(j, "tools")), 3);
	assert_non_null(json_object_get(j, "system"));
	json_decref(j);
	/* images are counted (each reserved as SB_IMAGE_TOKENS), at any
	 * depth; text documents and a tool's input of any shape pass */
	body = "{\"model\":\"m\",\"max_tokens\":5,\"messages\":["
	       "{\"role\":\"user\",\"content\":[{\"type\":\"image\","
	       "\"source\":{\"type\":\"base64\",\"data\":\"AA\"}},"
	       "{\"type\":\"document\",\"source\":{\"type\":\"text\","
	       "\"data\":\"t\"}},{\"type\":\"tool_result\",\"content\":"
	       "[{\"type\":\"image\",\"source\":{\"type\":\"base64\"}}]}]},"
	       "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\","
	       "\"input\":{\"type\":\"file\",\"source\":{\"type\":\"url\"}}}]}]}";
	assert_int_equal(sb_mreq_parse(SB_API_ANTHROPIC, body, strlen(body), &rq), SB_OK);
	assert_int_equal(rq.images, 2);
	sb_mreq_free(&rq);
	body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
	       "\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":"
	       "\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,"
	       "AA\"}}]}]}";
	assert_int_equal(sb_mreq_parse(SB_API_OPENAI, body, strlen(body), &rq), SB_OK);
	assert_int_equal(rq.images, 1);
	sb_mreq_free(&rq);
	/* a thinking budget below the grant stays */
	j = forward_of(SB_API_ANTHROPIC,
		       "{\"model\":\"m\",\"messages\":[],\"max_tokens\":4000,"
		       "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024}}",
		       2000, &rq);
	assert_int_equal(json_integer_value(json_object_get(
			     json_object_get(j, "thinking"), "budget_tokens")),
			 1024);
	json_decref(j);
}

/* A random hostile body: model and messages, then up to 7 fields drawn
 * from the names a client may try (listed, refused, unknown, near
 * misses), each with a value of any kind, duplicates included. */
static size_t hostile_request(uint64_t *seed, unsigned api, char *buf, size_t cap)
{
	static const char *const keys[] = {"n",
					   "max_tokens",
					   "max_completion_tokens",
					   "best_of",
					   "stream",
					   "stream_options",
					   "thinking",
					   "tools",
					   "temperature",
					   "audio",
					   "x_n",
					   "Max_tokens",
					   "max_tokens ",
					   "\\u006e",
					   "extra_body",
					   "store",
					   "system",
					   "logprobs",
					   "top_logprobs",
					   "service_tier",
					   "metadata",
					   "messages"};
	static const char *const vals[] = {"1",
					   "3",
					   "64",
					   "129",
					   "999999",
					   "-1",
					   "0",
					   "\"7\"",
					   "2.5",
					   "null",
					   "true",
					   "false",
					   "{}",
					   "[]",
					   "{\"budget_tokens\":999999}",
					   "{\"include_usage\":false}",
					   "[{\"type\":\"function\"}]",
					   "[{\"type\":\"web_search_20250305\"}]"};
	size_t at = (size_t)snprintf(buf, cap, "{\"model\":\"m\",\"messages\":[]%s",
				     api == SB_API_ANTHROPIC ? ",\"max_tokens\":50" : "");
	unsigned n = tu_rand(seed) % 8;

	for (unsigned i = 0; i < n; i++)
		at +=
		    (size_t)snprintf(buf + at, cap - at, ",\"%s\":%s",
				     keys[tu_rand(seed) % (sizeof keys / sizeof *keys)],
				     vals[tu_rand(seed) % (sizeof vals / sizeof *vals)]);
	at += (size_t)snprintf(buf + at, cap - at, "}");
	return at;
}

/* The property of what is forwarded, whatever the body: only the API's
 * documented fields, each key once, one bound and it is the grant, n
 * within 1 to 128 and what was read, a thinking budget below the grant,
 * and on OpenAI streams usage on. */
static void test_request_forwarded_property(void **state)
{
	static const char *const openai_ok =
	    " model messages stream stream_options max_completion_tokens max_tokens n "
	    "tools tool_choice parallel_tool_calls functions function_call "
	    "response_format temperature top_p frequency_penalty presence_penalty "
	    "logit_bias logprobs top_logprobs stop seed reasoning_effort verbosity user "
	    "safety_identifier prompt_cache_key metadata ";
	static const char *const anthropic_ok =
	    " model messages stream max_tokens thinking tools tool_choice system "
	    "metadata "
	    "stop_sequences temperature top_p top_k context_management output_format ";
	uint64_t seed = 7, forwarded = 0;
	char body[1024], name[64], *out;
	struct sb_mreq rq;
	const char *key;
	json_t *j, *v, *t;
	size_t len;

	for (int i = 0; i < 20000; i++) {
		unsigned api = i % 2 ? SB_API_ANTHROPIC : SB_API_OPENAI;
		uint64_t grant = 1 + tu_rand(&seed) % 100;
		int bounds = 0, rc;
		len = hostile_request(&seed, api, body, sizeof body);
		if ((rc = sb_mreq_parse(api, body, len, &rq))) {
			assert_int_equal(rc, SB_ERR_INVAL);
			continue;
		}
		assert_true(rq.choices >= 1 && rq.choices <= SB_CHOICES_MAX);
		assert_true(api == SB_API_OPENAI || rq.choices == 1);
		assert_int_equal(sb_mreq_finish(api, &rq, "up", grant, &out, &len),
				 SB_OK);
		assert_non_null(j = json_loadb(out, len, JSON_REJECT_DUPLICATES, NULL));
		json_object_foreach(j, key, v)
		{
			snprintf(name, sizeof name, " %s ", key);
			if (!strstr(api == SB_API_ANTHROPIC ? anthropic_ok : openai_ok,
				    name))
				fail_msg("%s: forwarded %s", body, key);
			if (!strcmp(key, "max_tokens") ||
			    !strcmp(key, "max_completion_tokens")) {
				bounds++;
				assert_int_equal(json_integer_value(v), grant);
			}
		}
		assert_int_equal(bounds, 1);
		v = json_object_get(j, "n");
		assert_int_equal(v ? json_integer_value(v) : 1, rq.choices);
		t = json_object_get(json_object_get(j, "thinking"), "budget_tokens");
		assert_true(!json_is_integer(t) ||
			    json_integer_value(t) < (json_int_t)grant);
		if (api == SB_API_OPENAI && rq.stream)
			assert_true(json_is_true(json_object_get(
			    json_object_get(j, "stream_options"), "include_usage")));
		assert_string_equal(json_string_value(json_object_get(j, "model")), "up");
		forwarded++;
		json_decref(j);
		free(out);
		sb_mreq_free(&rq);
	}
	assert_true(forwarded > 1000); /* the property was tried, not only refusals */
}

/* The provider reads the body as forwarded, which may be larger than the
 * one received: numbers written again at full precision (0.1 as
 * 0.10000000000000001), a longer upstream name, the bound the gateway
 * adds. Its input is reserved at a token a byte of the larger. */
static void test_request_reserves_the_body_forwarded(void **state)
{
	struct sb_model m = {.upstream =
				 "a-much-longer-upstream-name-than-the-client-gave",
			     .in_price = 1000000000ull,
			     .out_price = 1000000000ull,
			     .cached_price = 1000000000ull,
			     .max_output = 100};
	struct sb_budget b = {.limit = 1000000000ull};
	char body[2048], *out;
	uint64_t granted, reservation;
	struct sb_mreq rq;
	size_t len, out_len;

	len = (size_t)snprintf(
	    body, sizeof body, "%s",
	    "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
	    "\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{"
	    "\"name\":\"f\",\"parameters\":{\"enum\":[0.1");
	for (int i = 0; i < 100; i++)
		len += (size_t)snprintf(body + len, sizeof body - len, ",0.1");
	len += (size_t)snprintf(body + len, sizeof body - len, "]}}}]}");
	assert_int_equal(sb_mreq_parse(SB_API_OPENAI, body, len, &rq), SB_OK);
	assert_int_equal(sb_mreq_bind(SB_API_OPENAI, &rq, &m, len), SB_OK);
	assert_int_equal(sb_mreq_reserve(&b, NULL, &m, &rq, &granted, &reservation, NULL),
			 SB_GRANT_OK);
	assert_int_equal(granted, 100);
	assert_int_equal(
	    sb_mreq_finish(SB_API_OPENAI, &rq, m.upstream, granted, &out, &out_len),
	    SB_OK);
	assert_true(out_len > 3 * len); /* each 0.1 grew to 19 bytes */
	assert_true(reservation >= sb_model_cost(&m, out_len, 0, granted));
	assert_int_equal(rq.in_bytes, out_len);
	free(out);
	sb_mreq_free(&rq);
}

static void test_request_errors(void **state)
{
	static const struct {
		unsigned api;
		const char *body, *want;
	} bad[] = {
	    {SB_API_OPENAI, "not json", "not JSON"},
	    {SB_API_OPENAI, "[1]", "JSON object"},
	    {SB_API_OPENAI, "{\"messages\":[]}", "model"},
	    {SB_API_OPENAI, "{\"model\":null,\"messages\":[]}", "model"},
	    {SB_API_OPENAI, "{\"model\":\"m\"}", "messages"},
	    {SB_API_OPENAI, "{\"model\":\"m\",\"messages\":{}}", "messages"},
	    {SB_API_OPENAI, "{\"model\":\"m\",\"messages\":[],\"stream\":1}", "stream"},
	    {SB_API_OPENAI, "{\"model\":\"m\",\"messages\":[],\"max_tokens\":0}",
	     "max_tokens"},
	    {SB_API_OPENAI, "{\"model\":\"m\",\"messages\":[],\"max_tokens\":\"9\"}",
	     "max_tokens"},
	    {SB_API_OPENAI, "{\"model\":\"m\",\"messages\":[],\"max_tokens\":100000001}",
	     "max_tokens"},
	    {SB_API_ANTHROPIC, "{\"model\":\"m\",\"messages\":[]}",
	     "max_tokens is required"},
	    {SB_API_ANTHROPIC, "{\"model\":\"m\",\"messages\":[],\"max_tokens\":null}",
	     "max_tokens is required"},
	    /* both bounds, either order */
	    {SB_API_OPENAI,
	     "{\"model\":\"m\",\"messages\":[],\"max_completion_tokens\":5,"
	     "\"max_tokens\":999999}",
	     "max_completion_tokens and max_tokens: give one"},
	    {SB_API_OPENAI,
	     "{\"model\":\"m\",\"messages\":[],\"max_tokens\":999999,"
	     "\"max_completion_tokens\":5}",
	     "max_tokens and max_completion_tokens"},
	    /* a key twice, at the top, escaped, or deeper down */
	    {SB_API_OPENAI,
	     "{\"model\":\"m\",\"messages\":[],\"max_tokens\":5,\"max_tokens\":9}",
	     "duplicate"},
	    {SB_API_OPENAI, "{\"model\":\"m\",\"messages\":[],\"n\":1,\"\\u006e\":64}",
	     "duplicate"},
	    {SB_API_ANTHROPIC,
	     "{\"model\":\"m\",\"messages\":[],\"max_tokens\":5,\"thinking\":"
	     "{\"budget_tokens\":1,\"budget_tokens\":9}}",
	     "duplicate"},
	    {SB_API_OPENAI, "{\"model\":\"m\",\"messages\":[],\"max_tokens\\u0000x\":9}",
	     "NUL"},
	    /* n */
	    {SB_API_OPENAI, "{\"model\":\"m\",\"messages\":[],\"n\":0}", "n must"},
	    {SB_API_OPENAI, "{\"model\":\"m\",\"messages\":[],\"n\":129}", "1 to 128"},
	    {SB_API_OPENAI, "{\"model\":\"m\",\"messages\":[],\"n\":2.0}", "n must"},
	    {SB_API_OPENAI, "{\"model\":\"m\",\"messages\":[],\"n\":\"2\"}", "n must"},
	    {SB_API_OPENAI, "{\"model\":\"m\",\"messages\":[],\"n\":-1}", "n must"},
	    /* refused fields name themselves and why */
	    {SB_API_OPENAI, "{\"model\":\"m\",\"messages\":[],\"best_of\":2}",
	     "best_of is refused by the gateway: it multiplies"},
	    {SB_API_OPENAI, "{\"model\":\"m\",\"messages\":[],\"audio\":{}}", "audio"},
	    {SB_API_OPENAI, "{\"model\":\"m\",\"messages\":[],\"modalities\":[\"text\"]}",
	     "modalities"},
	    {SB_API_OPENAI, "{\"model\":\"m\",\"messages\":[],\"prediction\":{}}",
	     "prediction"},
	    {SB_API_OPENAI, "{\"model\":\"m\",\"messages\":[],\"store\":true}", "store"},
	    {SB_API_OPENAI,
	     "{\"model\":\"m\",\"messages\":[],\"service_tier\":\"priority\"}",
	     "service_tier"},
	    {SB_API_OPENAI, "{\"model\":\"m\",\"messages\":[],\"web_search_options\":{}}",
	     "web_search_options"},
	    {SB_API_ANTHROPIC,
	     "{\"model\":\"m\",\"messages\":[],\"max_tokens\":5,\"mcp_servers\":[]}",
	     "mcp_servers"},
	    {SB_API_ANTHROPIC,
	     "{\"model\":\"m\",\"messages\":[],\"max_tokens\":5,\"container\":\"c\"}",
	     "container"},
	    /* content the provider would fetch, read from its store, or count
	     * past its bytes, at any depth */
	    {SB_API_OPENAI,
	     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
	     "\"image_url\",\"image_url\":{\"url\":\"https://x/?leak\"}}]}]}",
	     "type 'image_url' (source 'url') is refused by the gateway: the provider "
	     "would fetch it"},
	    {SB_API_OPENAI,
	     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
	     "\"image_url\",\"image_url\":\"http://x\"}]}]}",
	     "fetch"},
	    {SB_API_OPENAI,
	     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
	     "\"file\",\"file\":{\"file_id\":\"file-1\"}}]}]}",
	     "type 'file'"},
	    {SB_API_OPENAI,
	     "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
	     "\"input_audio\",\"input_audio\":{}}]}]}",
	     "audio input"},
	    {SB_API_ANTHROPIC,
	     "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\","
	     "\"content\":[{\"type\":\"image\",\"source\":{\"type\":\"url\",\"url\":"
	     "\"https://x\"}}]}]}",
	     "the provider would fetch it"},
	    {SB_API_ANTHROPIC,
	     "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\","
	     "\"content\":[{\"type\":\"document\",\"source\":{\"type\":\"base64\","
	     "\"media_type\":\"application/pdf\",\"data\":\"JVBE\"}}]}]}",
	     "PDF"},
	    {SB_API_ANTHROPIC,
	     "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\","
	     "\"content\":[{\"type\":\"tool_result\",\"content\":[{\"type\":\"image\","
	     "\"source\":{\"type\":\"file\",\"file_id\":\"f\"}}]}]}]}",
	     "stored at the provider"},
	    /* tools the provider would run */
	    {SB_API_ANTHROPIC,
	     "{\"model\":\"m\",\"messages\":[],\"max_tokens\":5,\"tools\":[{\"name\":"
	     "\"a\"},{\"type\":\"web_search_20250305\",\"name\":\"w\"}]}",
	     "tools[1]: type 'web_search_20250305' is refused"},
	    {SB_API_ANTHROPIC,
	     "{\"model\":\"m\",\"messages\":[],\"max_tokens\":5,\"tools\":[{\"type\":"
	     "\"code_execution_20250522\"}]}",
	     "code_execution"},
	    {SB_API_OPENAI,
	     "{\"model\":\"m\",\"messages\":[],\"tools\":[{\"type\":\"web_search\"}]}",
	     "web_search"},
	    {SB_API_OPENAI, "{\"model\":\"m\",\"messages\":[],\"tools\":{}}",
	     "tools must be an array"},
	    {SB_API_OPENAI, "{\"model\":\"m\",\"messages\":[],\"tools\":[1]}",
	     "tools[0] must be an object"},
	    {SB_API_ANTHROPIC,
	     "{\"model\":\"m\",\"messages\":[],\"max_tokens\":5,\"thinking\":true}",
	     "thinking must be an object"},
	};
	struct sb_mreq rq;

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int rc = sb_mreq_parse(bad[i].api, bad[i].body, strlen(bad[i].body), &rq);
		if (rc != SB_ERR_INVAL)
			fail_msg("%s: %d", bad[i].body, rc);
		tu_errmsg_has(rc, bad[i].want);
		assert_null(rq.json);
	}
}

static void test_betas(void **state)
{
	int rc;

	assert_int_equal(sb_betas_check(NULL), SB_OK);
	assert_int_equal(sb_betas_check("interleaved-thinking-2025-05-14,"
					"fine-grained-tool-streaming-2025-05-14"),
			 SB_OK);
	rc = sb_betas_check("interleaved-thinking-2025-05-14, Context-1M-2025-08-07");
	assert_int_equal(rc, SB_ERR_INVAL);
	tu_errmsg_has(rc, "anthropic-beta context-1m is refused", "priced apart");
}

static void test_usage_from_bodies(void **state)
{
	const char *oa = "{\"usage\":{\"prompt_tokens\":120,\"completion_tokens\":30,"
			 "\"prompt_tokens_details\":{\"cached_tokens\":100}}}";
	const char *an =
	    "{\"usage\":{\"input_tokens\":20,\"output_tokens\":7,"
	    "\"cache_read_input_tokens\":100,\"cache_creation_input_tokens\":5}}";
	struct sb_usage u;

	sb_usage_from_body(SB_API_OPENAI, oa, strlen(oa), &u);
	assert_true(u.known);
	assert_int_equal(u.input, 120);
	assert_int_equal(u.cached, 100);
	assert_int_equal(u.output, 30);
	sb_usage_from_body(SB_API_ANTHROPIC, an, strlen(an), &u);
	assert_true(u.known);
	assert_int_equal(u.input, 125); /* all input tokens, cached among them */
	assert_int_equal(u.cached, 100);
	assert_int_equal(u.output, 7);
	sb_usage_from_body(SB_API_OPENAI, "{\"id\":1}", 8, &u);
	assert_false(u.known);
	sb_usage_from_body(SB_API_OPENAI, "garbage", 7, &u);
	assert_false(u.known);
}

/* Feeds s in pieces of step bytes. */
static void feed_split(struct sb_sse_meter *m, const char *s, size_t step)
{
	for (size_t at = 0, n = strlen(s); at < n; at += step)
		assert_int_equal(
		    sb_sse_meter_feed(m, s + at, at + step < n ? step : n - at), SB_OK);
}

static void test_sse_openai(void **state)
{
	const char *s =
	    "data: {\"choices\":[{\"delta\":{\"content\":\"Hello \"}}]}\n\n"
	    "data: {\"choices\":[{\"delta\":{\"content\":\"world, twelve\"}}]}\r\n\r\n"
	    "data: "
	    "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"arguments\":\"{}"
	    "\"}}]}}]}\n\n"
	    "data: "
	    "{\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":5}}"
	    "\n\n"
	    "data: [DONE]\n\n";
	struct sb_sse_meter m;

	for (size_t step = 1; step <= 64; step *= 4) {
		sb_sse_meter_init(&m, SB_API_OPENAI);
		feed_split(&m, s, step);
		assert_int_equal(m.out_bytes, 6 + 13 + 2);
		assert_true(m.usage.known);
		assert_int_equal(m.usage.input, 11);
		assert_int_equal(sb_sse_meter_output(&m),
				 5); /* reported beats estimated */
		assert_true(m.finished);
		sb_sse_meter_free(&m);
	}
	/* without usage the output is estimated at 4 bytes a token */
	sb_sse_meter_init(&m, SB_API_OPENAI);
	feed_split(
	    &m, "data: {\"choices\":[{\"delta\":{\"content\":\"123456789\"}}]}\n\n", 7);
	assert_false(m.usage.known);
	assert_int_equal(sb_sse_meter_output(&m), 3);
	sb_sse_meter_free(&m);
}

static void test_sse_anthropic(void **state)
{
	const char *s =
	    "event: message_start\ndata: "
	    "{\"type\":\"message_start\",\"message\":{\"usage\":"
	    "{\"input_tokens\":40,\"cache_read_input_tokens\":8,\"output_tokens\":1}}}"
	    "\n\n"
	    "event: content_block_delta\ndata: "
	    "{\"type\":\"content_block_delta\",\"delta\":"
	    "{\"type\":\"text_delta\",\"text\":\"abcd\"}}\n\n"
	    "event: content_block_delta\ndata: "
	    "{\"type\":\"content_block_delta\",\"delta\":"
	    "{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\"\"}}\n\n"
	    "event: message_delta\ndata: "
	    "{\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n"
	    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
	struct sb_sse_meter m;

	sb_sse_meter_init(&m, SB_API_ANTHROPIC);
	feed_split(&m, s, 5);
	assert_int_equal(m.out_bytes, 4 + 4);
	assert_true(m.usage.known);
	assert_int_equal(m.usage.input, 48);
	assert_int_equal(m.usage.cached, 8);
	assert_int_equal(m.usage.output, 9);
	assert_true(m.finished);
	sb_sse_meter_free(&m);
}

/* A report never lowers a count an earlier one gave: an OpenAI usage
 * that comes again empty, an Anthropic message_delta whose input is 0. */
static void test_sse_reports_never_lower(void **state)
{
	const char *openai = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1000,"
			     "\"completion_tokens\":500,\"prompt_tokens_details\":"
			     "{\"cached_tokens\":200}}}\n\n"
			     "data: {\"choices\":[],\"usage\":{}}\n\ndata: [DONE]\n\n";
	const char *anthropic =
	    "data: {\"type\":\"message_start\",\"message\":{\"usage\":"
	    "{\"input_tokens\":40,\"cache_read_input_tokens\":8,\"output_tokens\":1}}}"
	    "\n\n"
	    "data: {\"type\":\"message_delta\",\"usage\":{\"input_tokens\":0,"
	    "\"output_tokens\":9}}\n\n";
	struct sb_sse_meter m;

	sb_sse_meter_init(&m, SB_API_OPENAI);
	feed_split(&m, openai, 3);
	assert_true(m.usage.known);
	assert_int_equal(m.usage.input, 1000);
	assert_int_equal(m.usage.cached, 200);
	assert_int_equal(m.usage.output, 500);
	sb_sse_meter_free(&m);
	sb_sse_meter_init(&m, SB_API_ANTHROPIC);
	feed_split(&m, anthropic, 64);
	assert_true(m.usage.known);
	assert_int_equal(m.usage.input, 48);
	assert_int_equal(m.usage.cached, 8);
	assert_int_equal(m.usage.output, 9);
	sb_sse_meter_free(&m);
}

/* The stream is read as server-sent events: lines ended by CR alone (and
 * a CRLF cut between its two bytes), an event's data over two lines, a
 * byte order mark first; an event the stream's end cuts is not read. */
static void test_sse_framing(void **state)
{
	const char *cr = "data: {\"choices\":[{\"delta\":{\"content\":\"abcd\"}}]}\r\r"
			 "data: {\"choices\":[],\"usage\":{\"completion_tokens\":7}}\r\r";
	const char *split =
	    "\xef\xbb\xbf: a comment\r\n"
	    "data: {\"choices\":[],\r\ndata: \"usage\":{\"prompt_tokens\":70,\r\n"
	    "data:\"completion_tokens\":30}}\r\n\r\n"
	    "data: {\"choices\":[],\"usage\":{\"completion_tokens\":900}}\n";
	struct sb_sse_meter m;

	for (size_t step = 1; step <= 64; step *= 2) {
		sb_sse_meter_init(&m, SB_API_OPENAI);
		feed_split(&m, cr, step);
		assert_int_equal(m.out_bytes, 4);
		assert_true(m.usage.known);
		assert_int_equal(m.usage.output, 7);
		sb_sse_meter_free(&m);
		sb_sse_meter_init(&m, SB_API_OPENAI);
		feed_split(&m, split, step);
		assert_true(m.usage.known);
		assert_int_equal(m.usage.input, 70);
		assert_int_equal(m.usage.output, 30); /* not the cut event's */
		sb_sse_meter_free(&m);
	}
}

/* Counts past 64 bits saturate: an Anthropic input is the sum of three. */
static void test_sse_counts_saturate(void **state)
{
	const char *s = "data: {\"type\":\"message_delta\",\"usage\":{"
			"\"input_tokens\":9223372036854775807,"
			"\"cache_read_input_tokens\":9223372036854775807,"
			"\"cache_creation_input_tokens\":9223372036854775807,"
			"\"output_tokens\":1}}\n\n";
	struct sb_sse_meter m;
	struct sb_usage u;

	sb_sse_meter_init(&m, SB_API_ANTHROPIC);
	feed_split(&m, s, 1000);
	assert_true(m.usage.known);
	assert_int_equal(m.usage.input, UINT64_MAX);
	assert_int_equal(m.usage.cached, 9223372036854775807ull);
	sb_sse_meter_free(&m);
	sb_usage_from_body(SB_API_ANTHROPIC, s + 6, strlen(s) - 8, &u);
	assert_true(u.known);
	assert_int_equal(u.input, UINT64_MAX);
}

static void test_sse_long_line_refused(void **state)
{
	struct sb_sse_meter m;
	char *big = malloc(1u << 20);

	assert_non_null(big);
	memset(big, 'x', 1u << 20);
	sb_sse_meter_init(&m, SB_API_OPENAI);
	assert_int_equal(sb_sse_meter_feed(&m, big, 1u << 20), SB_OK);
	assert_int_equal(sb_sse_meter_feed(&m, "yy", 2), SB_ERR_TOOBIG);
	sb_sse_meter_free(&m);
	/* an event's data, line after line, is bounded the same */
	sb_sse_meter_init(&m, SB_API_OPENAI);
	memcpy(big, "data: ", 6);
	big[(1u << 19) - 1] = '\n';
	assert_int_equal(sb_sse_meter_feed(&m, big, 1u << 19), SB_OK);
	assert_int_equal(sb_sse_meter_feed(&m, big, 1u << 19), SB_OK);
	assert_int_equal(sb_sse_meter_feed(&m, big, 1u << 19), SB_ERR_TOOBIG);
	sb_sse_meter_free(&m);
	free(big);
}

static void test_budget_caps_and_refuses(void **state)
{
	/* $1 per Mtok in (1000 nano-USD a token), $100 per Mtok out (100000) */
	struct sb_model m = {.in_price = 1000000000ull,
			     .out_price = 100000000000ull,
			     .cached_price = 1000000000ull,
			     .max_output = 100};
	struct sb_budget b = {.limit = 17500000};
	uint64_t out, res, res2;

	/* 3000 request bytes reserve 3M; 100 output tokens 10M */
	assert_int_equal(sb_budget_reserve(&b, &m, 3000, 0, 1, &out, &res), SB_GRANT_OK);
	assert_int_equal(out, 100);
	assert_int_equal(res, 3000000 + 10000000);
	assert_int_equal(b.reserved, res);
	/* a second call in flight gets what is left: 4.5M - 3M = 15 tokens: too few */
	assert_int_equal(sb_budget_reserve(&b, &m, 3000, 0, 1, &out, &res2),
			 SB_GRANT_BUSY);
	/* the first settles at its real cost: 100 in, 80 out = 8.1M */
	sb_budget_settle(&b, res, 100 * 1000 + 80 * 100000);
	assert_int_equal(b.reserved, 0);
	assert_int_equal(b.spent, 8100000);
	/* 9.4M left: 3M input, 64 output tokens */
	assert_int_equal(sb_budget_reserve(&b, &m, 3000, 0, 1, &out, &res), SB_GRANT_OK);
	assert_int_equal(out, 64);
	assert_true(res <= b.limit - b.spent);
	sb_budget_settle(&b, res, 100 * 1000 + 60 * 100000);
	/* 3.3M left cannot pay 3M + 16 tokens: spent */
	assert_int_equal(sb_budget_reserve(&b, &m, 3000, 0, 1, &out, &res),
			 SB_GRANT_SPENT);
	/* a small request that asks for 5 tokens still fits */
	assert_int_equal(sb_budget_reserve(&b, &m, 100, 5, 1, &out, &res), SB_GRANT_OK);
	assert_int_equal(out, 5);
	/* settling never underflows the reservations */
	sb_budget_settle(&b, res + 1000, 0);
	assert_int_equal(b.reserved, 0);
}

static void test_budget_reserves_every_choice(void **state)
{
	struct sb_model m = {.in_price = 1000000000ull,
			     .out_price = 100000000000ull,
			     .cached_price = 1000000000ull,
			     .max_output = 100};
	struct sb_budget b = {.limit = 10000000}; /* $0.01 */
	uint64_t out, res;

	/* 200 bytes (0.2M) and 98 tokens left: n=64 of 400 cannot get 16
	 * tokens each, while one choice could */
	assert_int_equal(sb_budget_reserve(&b, &m, 200, 400, 64, &out, &res),
			 SB_GRANT_CHOICES);
	assert_int_equal(b.reserved, 0);
	/* n=3 of 400: 32 tokens each, all three reserved */
	assert_int_equal(sb_budget_reserve(&b, &m, 200, 400, 3, &out, &res), SB_GRANT_OK);
	assert_int_equal(out, 32);
	assert_int_equal(res, 200000 + 3 * 32 * 100000);
	/* the rest is held by the three; once they are paid, it cannot pay
	 * 16 tokens of even one choice: spent */
	assert_int_equal(sb_budget_reserve(&b, &m, 200, 400, 2, &out, &res),
			 SB_GRANT_BUSY);
	sb_budget_settle(&b, res, res);
	assert_int_equal(sb_budget_reserve(&b, &m, 200, 400, 2, &out, &res),
			 SB_GRANT_SPENT);
	/* n=8 of 1 token: 8 tokens */
	b = (struct sb_budget){.limit = 10000000};
	assert_int_equal(sb_budget_reserve(&b, &m, 200, 1, 8, &out, &res), SB_GRANT_OK);
	assert_int_equal(out, 1);
	assert_int_equal(res, 200000 + 8 * 100000);
}

/* Up to max, the worst case (max itself) half the time. */
static uint64_t upto(uint64_t *seed, uint64_t max)
{
	return tu_rand(seed) % 2 ? max : tu_rand(seed) % (max + 1);
}

static void test_budget_never_overspends(void **state)
{
	uint64_t seed = 42;

	for (int round = 0; round < 400; round++) {
		/* prices of $0.01 to $100 per Mtok; the cache at a tenth of the
		 * input price, or dearer than it (Anthropic's cache writes) */
		struct sb_model m = {.in_price = 10000000 + tu_rand(&seed) % 100000000000,
				     .out_price =
					 10000000 + tu_rand(&seed) % 100000000000,
				     .max_output = 1 + tu_rand(&seed) % 8192};
		struct sb_budget b = {.limit = 1 + tu_rand(&seed) % 200000000};
		uint64_t res[8] = {0}, out[8], bytes[8], cost_sum = 0, calls = 0;
		unsigned n[8];

		m.cached_price = round % 2 ? m.in_price / 10 : m.in_price * 5 / 4;
		for (int i = 0; i < 8; i++) {
			uint64_t want = tu_rand(&seed) % 3 ? 0 : 1 + tu_rand(&seed) % 500;
			bytes[i] = 100 + tu_rand(&seed) % 20000;
			n[i] =
			    tu_rand(&seed) % 2 ? 1 : 1 + tu_rand(&seed) % SB_CHOICES_MAX;
			if (sb_budget_reserve(&b, &m, bytes[i], want, n[i], &out[i],
					      &res[i]) != SB_GRANT_OK)
				res[i] = 0;
			assert_true(b.spent + b.reserved <= b.limit);
		}
		for (int i = 0; i < 8; i++) {
			/* a provider that honours max_tokens in each of n choices
			 * and counts no more input than bytes, some of it cached */
			uint64_t in = upto(&seed, bytes[i]), cost = 0;
			if (res[i]) {
				cost = sb_model_cost(&m, in, upto(&seed, in),
						     n[i] * upto(&seed, out[i]));
				calls++;
			}
			assert_true(cost <= res[i] + 1); /* rounding: SPEC.md */
			sb_budget_settle(&b, res[i], cost);
			cost_sum += cost;
		}
		assert_int_equal(b.reserved, 0);
		assert_int_equal(b.spent, cost_sum);
		assert_true(b.spent <= b.limit + calls);
	}
}

/* Error types as each provider names them. */
static void test_error_types(void **state)
{
	assert_string_equal(sb_api_error_type(SB_API_OPENAI, 402), "budget_exceeded");
	assert_string_equal(sb_api_error_type(SB_API_ANTHROPIC, 429), "rate_limit_error");
	assert_string_equal(sb_api_error_type(SB_API_ANTHROPIC, 529), "overloaded_error");
	assert_string_equal(sb_api_error_type(SB_API_OPENAI, 502), "server_error");
	assert_string_equal(sb_api_error_type(SB_API_ANTHROPIC, 502), "api_error");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_builtin_models),
	    cmocka_unit_test(test_models_file_merges),
	    cmocka_unit_test(test_models_file_errors),
	    cmocka_unit_test(test_cost_is_exact),
	    cmocka_unit_test(test_request_parse_and_cap),
	    cmocka_unit_test(test_request_allow_list),
	    cmocka_unit_test(test_request_errors),
	    cmocka_unit_test(test_request_forwarded_property),
	    cmocka_unit_test(test_request_reserves_the_body_forwarded),
	    cmocka_unit_test(test_betas),
	    cmocka_unit_test(test_usage_from_bodies),
	    cmocka_unit_test(test_sse_openai),
	    cmocka_unit_test(test_sse_anthropic),
	    cmocka_unit_test(test_sse_reports_never_lower),
	    cmocka_unit_test(test_sse_framing),
	    cmocka_unit_test(test_sse_counts_saturate),
	    cmocka_unit_test(test_sse_long_line_refused),
	    cmocka_unit_test(test_budget_caps_and_refuses),
	    cmocka_unit_test(test_budget_reserves_every_choice),
	    cmocka_unit_test(test_budget_never_overspends),
	    cmocka_unit_test(test_error_types),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
