/* fuzz_mreq.c - libFuzzer target for what the gateway makes of a guest's
 * request body (engine/gateway/meter.h): sb_mreq_parse, sb_mreq_bind,
 * sb_mreq_reserve and sb_mreq_finish, as the gateway calls them, decide
 * what reaches the provider and what is reserved for it.
 *
 * The input: byte 0 chooses the API (bit 0: Anthropic), whether the run
 * is in a group with a budget of its own (bit 1) and the upstream name
 * (bits 2-3), whether the rest is the body (bit 4 clear) or the bytes a
 * body is made of (set: fields and values of the lists and of the content
 * parts, made valid JSON; bit 5: with a model, messages and a bound);
 * bytes 1-4 the model's input, output and cached prices and its
 * max_output; bytes 5-10 the budgets (limit, spent, held by calls in
 * flight).
 *
 * For a call accepted and granted, the property is checked against the
 * allow-lists of SPEC.md ("What is forwarded"), written again here: the
 * forwarded body is a JSON object holding only fields of its API's lists,
 * in the client's order, those forwarded as sent equal to what the client
 * sent, none refused (the client sent none but null or false); the model
 * is the upstream name; exactly one output bound, the grant, the field the
 * client used; n as the client gave it (OpenAI); an Anthropic thinking
 * budget below the bound; an OpenAI stream's stream_options
 * {"include_usage": true}; each tool of a type the client runs; no
 * content part SPEC refuses. The reservation pays for all the forwarded
 * body lets the provider produce: the input at a token a byte of the body
 * (the larger of the body received and the body forwarded: no tokenizer
 * makes more tokens than the bytes it reads) and SB_IMAGE_TOKENS an
 * inline image (counted here in the forwarded parts), at the dearer input
 * price, and the bound's tokens for each of the n choices, at the output
 * price; it is held in each budget and is within what each had left. A
 * call refused holds nothing.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "engine/gateway/meter.h"
#include "tests/fuzz/fuzz.h"

#define HEAD 11 /* bytes of the input before the body */
/* An upstream name of SB_MODEL_NAME_MAX - 1 bytes. */
#define LONG_NAME                                                                        \
	"upstream-model-name-of-ninety-five-bytes-"                                      \
	"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"                                       \
	"xxxxxxxxxxxxxx"

_Static_assert(sizeof LONG_NAME == SB_MODEL_NAME_MAX, "the longest name a model has");

/* --- SPEC.md's allow-lists --- */

static const char openai_pass[] =
    " tool_choice parallel_tool_calls functions function_call response_format "
    "temperature top_p frequency_penalty presence_penalty logit_bias logprobs "
    "top_logprobs stop seed reasoning_effort verbosity user safety_identifier "
    "prompt_cache_key metadata ";
static const char openai_read[] = " model messages stream stream_options "
				  "max_completion_tokens max_tokens n tools ";
static const char openai_refused[] = " best_of audio modalities prediction service_tier "
				     "web_search_options store ";
static const char anthropic_pass[] = " tool_choice system metadata stop_sequences "
				     "temperature top_p top_k context_management "
				     "output_format ";
static const char anthropic_read[] = " model messages stream max_tokens thinking tools ";
static const char anthropic_refused[] = " service_tier container mcp_servers ";
static const char openai_tools[] = " function custom ";
static const char anthropic_tools[] = " custom bash_ text_editor_ computer_ memory_ ";

/* 1 when key is one of the words. */
static int listed(const char *words, const char *key)
{
	char w[128];

	if (strchr(key, ' ') || strlen(key) + 3 > sizeof w)
		return 0;
	snprintf(w, sizeof w, " %s ", key);
	return strstr(words, w) != NULL;
}

/* 1 when s begins with one of the words. */
static int prefixed(const char *words, const char *s)
{
	for (const char *w = words + 1; *w; w += strcspn(w, " ") + 1)
		if (!strncmp(s, w, strcspn(w, " ")))
			return 1;
	return 0;
}

/* --- the model's walk of the content parts --- */

/* Where the provider reads content parts: messages[i].content, and within
 * a part its content (a tool result's) and its source's content (a
 * document's). Checks none is refused and counts the inline images. */
static void parts_walk(json_t *parts, uint64_t *images)
{
	json_t *p, *img, *src;
	const char *type, *url, *stype;
	size_t i;

	json_array_foreach(parts, i, p)
	{
		type = json_string_value(json_object_get(p, "type"));
		img = json_object_get(p, "image_url");
		url = json_string_value(json_is_object(img) ? json_object_get(img, "url")
							    : img);
		src = json_object_get(p, "source");
		stype = json_string_value(json_object_get(src, "type"));
		CHECK(!img || (url && !strncmp(url, "data:", 5))); /* not fetched */
		CHECK(!stype || (strcmp(stype, "url") && strcmp(stype, "file")));
		CHECK(!type || (strcmp(type, "file") && strcmp(type, "input_audio")));
		CHECK(!type || strcmp(type, "document") || !stype ||
		      strcmp(stype, "base64"));
		*images += img || (stype && !strcmp(stype, "base64"));
		parts_walk(json_object_get(p, "content"), images);
		parts_walk(json_object_get(src, "content"), images);
	}
}

static uint64_t parts_check(json_t *messages)
{
	uint64_t images = 0;
	json_t *m;
	size_t i;

	CHECK(json_is_array(messages));
	json_array_foreach(messages, i, m)
	    parts_walk(json_object_get(m, "content"), &images);
	return images;
}

static void tools_check(unsigned api, json_t *tools)
{
	const char *type;
	json_t *t;
	size_t i;

	if (!tools)
		return;
	CHECK(json_is_array(tools));
	json_array_foreach(tools, i, t)
	{
		CHECK(json_is_object(t));
		type = json_string_value(json_object_get(t, "type"));
		CHECK(!type ||
		      prefixed(api == SB_API_ANTHROPIC ? anthropic_tools : openai_tools,
			       type));
	}
}

/* --- the call --- */

struct call {
	unsigned api;
	json_t *in, *out; /* what the client sent, what is forwarded */
	const struct sb_model *m;
	size_t body_len, out_len; /* the body received, the body forwarded */
	uint64_t granted, reservation;
};

/* Where key is among o's keys, counting from 1 (0: not there). */
static size_t key_index(json_t *o, const char *key)
{
	const char *k;
	json_t *v;
	size_t i = 0;

	json_object_foreach(o, k, v)
	{
		i++;
		if (!strcmp(k, key))
			return i;
	}
	return 0;
}

/* The fields: only listed ones, in the client's order, those passed as
 * sent unchanged; nothing refused came. */
static void fields_check(const struct call *c)
{
	int anth = c->api == SB_API_ANTHROPIC;
	const char *pass = anth ? anthropic_pass : openai_pass;
	const char *read = anth ? anthropic_read : openai_read;
	const char *refused = anth ? anthropic_refused : openai_refused;
	const char *key;
	size_t at, last = 0;
	json_t *v;

	json_object_foreach(c->in, key, v)
	{
		CHECK(!listed(refused, key) || json_is_null(v) || json_is_false(v));
		if (listed(pass, key) && !json_is_null(v))
			CHECK(json_equal(json_object_get(c->out, key), v));
	}
	json_object_foreach(c->out, key, v)
	{
		CHECK(listed(pass, key) || listed(read, key));
		if (listed(pass, key))
			CHECK(json_equal(json_object_get(c->in, key), v));
		if (json_is_null(json_object_get(c->in, key)) ||
		    !(at = key_index(c->in, key)))
			continue;
		CHECK(at > last); /* the client's order */
		last = at;
	}
}

/* The bound, n, thinking and stream_options. Returns the output tokens the
 * forwarded body lets the provider produce, all choices. */
static uint64_t output_check(const struct call *c)
{
	json_t *mt = json_object_get(c->out, "max_tokens");
	json_t *mct = json_object_get(c->out, "max_completion_tokens");
	json_t *bound = mt ? mt : mct;
	json_t *n = json_object_get(c->out, "n");
	json_t *think =
	    json_object_get(json_object_get(c->out, "thinking"), "budget_tokens");
	json_t *so = json_object_get(c->out, "stream_options");
	json_t *client_mct = json_object_get(c->in, "max_completion_tokens");
	uint64_t b, choices = 1;

	CHECK(!mt != !mct && json_is_integer(bound)); /* exactly one bound */
	CHECK(c->api == SB_API_ANTHROPIC ||	      /* the client's */
	      !mct == (!client_mct || json_is_null(client_mct)));
	b = (uint64_t)json_integer_value(bound);
	CHECK(b == c->granted && b >= 1);
	if (c->api == SB_API_ANTHROPIC) {
		CHECK(!n && !so);
	} else {
		CHECK(!n || (json_is_integer(n) && json_integer_value(n) >= 1 &&
			     json_integer_value(n) <= SB_CHOICES_MAX));
		choices = n ? (uint64_t)json_integer_value(n) : 1;
		CHECK(json_is_true(json_object_get(c->out, "stream"))
			  ? json_is_object(so) && json_object_size(so) == 1 &&
				json_is_true(json_object_get(so, "include_usage"))
			  : !so);
	}
	CHECK(!json_is_integer(think) || json_integer_value(think) < (json_int_t)b);
	return b * choices;
}

/* ceil(tokens * price / 10^6), as the providers bill them. */
static unsigned __int128 cost_of(uint64_t tokens, uint64_t price)
{
	return ((unsigned __int128)tokens * price + 999999) / 1000000;
}

static void accepted_check(const struct call *c)
{
	const struct sb_model *m = c->m;
	uint64_t price = m->in_price > m->cached_price ? m->in_price : m->cached_price;
	uint64_t images, out, in;

	CHECK(json_is_object(c->out));
	fields_check(c);
	CHECK(!strcmp(json_string_value(json_object_get(c->out, "model")), m->upstream));
	out = output_check(c);
	images = parts_check(json_object_get(c->out, "messages"));
	tools_check(c->api, json_object_get(c->out, "tools"));
	in = c->body_len > c->out_len ? c->body_len : c->out_len;
	CHECK(c->reservation >=
	      cost_of(in + images * SB_IMAGE_TOKENS, price) + cost_of(out, m->out_price));
}

/* --- a body made of the input's bytes (byte 0 bit 4) --- */

/* Words a request is made of: field names of every list and of the parts,
 * values the gateway reads. */
static const char gen_keys[] =
    " model messages stream stream_options max_tokens max_completion_tokens n tools "
    "thinking tool_choice system temperature metadata logit_bias best_of audio store "
    "service_tier mcp_servers container prediction unknown role content type "
    "image_url url source data budget_tokens include_usage function input text N ";
static const char gen_strings[] =
    " \"m\" \"data:image/png;base64,AA\" \"https://x.test/a.png\" \"url\" \"file\" "
    "\"base64\" \"text\" \"image\" \"image_url\" \"document\" \"input_audio\" "
    "\"tool_result\" \"function\" \"custom\" \"web_search_20250305\" "
    "\"bash_20250124\" \"content\" \"user\" \"\" \"\\u00e9\\/\\n\" \"DATA:x\" ";
static const char gen_numbers[] =
    " 0 1 -1 15 16 17 100 128 129 4096 10000000 100000000 100000001 0.1 1e-5 1e9 1E2 "
    "1e16 5e-324 -0.0 1.5 -5000 9007199254740993 9223372036854775807 ";

#define GEN_DEPTH 6

struct gen {
	const uint8_t *d;
	size_t n, i;
	char o[1 << 16];
	size_t on; /* past sizeof o: cut, so not JSON */
};

static uint8_t gen_byte(struct gen *g)
{
	return g->i < g->n ? g->d[g->i++] : 0;
}

static void gen_put_n(struct gen *g, const char *s, size_t l)
{
	if (g->on + l <= sizeof g->o)
		memcpy(g->o + g->on, s, l);
	g->on += l;
}

static void gen_put(struct gen *g, const char *s)
{
	gen_put_n(g, s, strlen(s));
}

/* The word of words (see the lists above) that the next byte picks;
 * *len is its length. */
static const char *gen_word(struct gen *g, const char *words, size_t *len)
{
	size_t n = 0, k;
	const char *w;

	for (w = words + 1; *w; w += strcspn(w, " ") + 1)
		n++;
	k = gen_byte(g) % n;
	for (w = words + 1; k--; w += strcspn(w, " ") + 1)
		;
	*len = strcspn(w, " ");
	return w;
}

static void gen_put_word(struct gen *g, const char *words)
{
	size_t len;
	const char *w = gen_word(g, words, &len);

	gen_put_n(g, w, len);
}

/* The kind of value a field of that name usually has: s string, n
 * number, b boolean (false for the refused fields), o object, a array of
 * objects; 0 any. */
static char gen_kind(const char *name)
{
	static const struct {
		const char *names, kind;
	} kinds[] = {
	    {" model type role url data text ", 's'},
	    {" max_tokens max_completion_tokens n budget_tokens temperature ", 'n'},
	    {" stream include_usage best_of audio store service_tier mcp_servers "
	     "container prediction ",
	     'b'},
	    {" thinking stream_options source image_url function input metadata ", 'o'},
	    {" messages tools content ", 'a'},
	};

	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
		if (listed(kinds[i].names, name))
			return kinds[i].kind;
	return 0;
}

static void gen_value(struct gen *g, int depth, char kind);

/* Up to 4 fields of an object, no name twice, each after a comma when
 * comma. */
static void gen_fields(struct gen *g, int depth, int comma)
{
	const char *used[4];
	char name[32];
	size_t len;
	int k = gen_byte(g) % 5;

	for (int i = 0; i < k; i++) {
		used[i] = gen_word(g, gen_keys, &len);
		for (int j = 0; j < i; j++)
			if (used[j] == used[i])
				return; /* no field twice */
		snprintf(name, sizeof name, "%.*s", (int)len, used[i]);
		gen_put(g, i || comma ? ",\"" : "\"");
		gen_put(g, name);
		gen_put(g, "\":");
		gen_value(g, depth + 1, gen_kind(name));
	}
}

static void gen_object(struct gen *g, int depth)
{
	gen_put(g, "{");
	gen_fields(g, depth, 0);
	gen_put(g, "}");
}

/* A value of the kind (see gen_kind) seven times in eight. */
static void gen_value(struct gen *g, int depth, char kind)
{
	uint8_t b = gen_byte(g);
	int k = b >> 5;

	if (depth > GEN_DEPTH || (b & 7) == 7)
		kind = "bnss"[b >> 3 & 3];
	switch (kind) {
	case 'b': gen_put(g, b & 8 ? "null" : "false"); return;
	case 'n': gen_put_word(g, gen_numbers); return;
	case 's': gen_put_word(g, gen_strings); return;
	case 'o': gen_object(g, depth); return;
	case 'a':
		gen_put(g, "[");
		for (int i = 0; i < k % 4; i++) {
			gen_put(g, i ? "," : "");
			gen_value(g, depth + 1, b & 8 ? 'o' : 0);
		}
		gen_put(g, "]");
		return;
	}
	gen_value(g, depth, "bnsoa"[b % 5]);
}

/* A request: with bit 5 of byte 0 a model, messages and a bound first;
 * then fields named and made by the input. */
static void gen_request(struct gen *g, int required)
{
	g->on = 0;
	gen_put(g, "{");
	if (required) {
		gen_put(g, "\"model\":\"m\",\"max_tokens\":100,\"messages\":");
		gen_value(g, 1, 'a');
	}
	gen_fields(g, 0, required);
	gen_put(g, "}");
}

/* --- the input --- */

static uint64_t price_of(uint8_t b)
{
	static const uint64_t prices[] = {
	    0,		1,	     150,	    1000000,	     1000000000,
	    2500000000, 10000000000, 1000000000000, 1000000000000000};
	return prices[b % (sizeof prices / sizeof prices[0])];
}

static void budget_of(const uint8_t *d, struct sb_budget *b)
{
	b->limit = (uint64_t)d[0] << (d[1] % 50);
	b->spent = d[2] & 0x80 ? b->limit / (1 + (d[2] & 7)) : 0;
	b->reserved = d[2] & 0x40 ? b->limit / (1 + (d[2] >> 3 & 7)) : 0;
}

static uint64_t left(const struct sb_budget *b)
{
	uint64_t total = b->limit > b->spent ? b->limit - b->spent : 0;

	return total > b->reserved ? total - b->reserved : 0;
}

/* Reserves for rq; for a call granted, checks what each budget holds. */
static int reserve(struct call *c, const struct sb_mreq *rq, struct sb_budget *a,
		   struct sb_budget *g)
{
	struct sb_budget a0 = *a, g0 = g ? *g : *a;
	uint64_t avail = left(a);
	enum sb_grant r;

	if (g && left(g) < avail)
		avail = left(g);
	r = sb_mreq_reserve(a, g, c->m, rq, &c->granted, &c->reservation, NULL);
	if (r != SB_GRANT_OK) {
		CHECK(a->reserved == a0.reserved && (!g || g->reserved == g0.reserved));
		return 0;
	}
	CHECK(c->reservation <= avail);
	CHECK(a->reserved == a0.reserved + c->reservation);
	CHECK(!g || g->reserved == g0.reserved + c->reservation);
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const upstreams[] = {"up", "gpt-4o", "claude-sonnet-4-5",
						LONG_NAME};
	static struct gen gen;
	struct sb_model model = {0};
	struct sb_budget run, group;
	struct sb_mreq rq;
	struct call c = {0};
	const char *body = (const char *)data + HEAD;
	char *out = NULL;
	size_t out_len;

	if (size < HEAD)
		return 0;
	c.api = data[0] & 1 ? SB_API_ANTHROPIC : SB_API_OPENAI;
	snprintf(model.upstream, sizeof model.upstream, "%s",
		 upstreams[data[0] >> 2 & 3]);
	model.in_price = price_of(data[1]);
	model.out_price = price_of(data[2]);
	model.cached_price = price_of(data[3]);
	model.max_output =
	    data[4] & 0x80 ? 10000000 - (data[4] & 0x7f) : 1u + data[4] * 37u;
	budget_of(data + 5, &run);
	budget_of(data + 8, &group);
	c.m = &model;
	c.body_len = size - HEAD;
	if (data[0] & 0x10) {
		gen.d = data + HEAD;
		gen.n = size - HEAD;
		gen.i = 0;
		gen_request(&gen, data[0] & 0x20);
		if (gen.on > sizeof gen.o)
			return 0;
		body = gen.o;
		c.body_len = gen.on;
	}
	if (sb_mreq_parse(c.api, body, c.body_len, &rq))
		return 0;
	CHECK(!sb_mreq_bind(c.api, &rq, &model, c.body_len));
	if (reserve(&c, &rq, &run, data[0] & 2 ? &group : NULL)) {
		CHECK(!sb_mreq_finish(c.api, &rq, model.upstream, c.granted, &out,
				      &out_len));
		CHECK(strlen(out) == out_len);
		c.out_len = out_len;
		CHECK(
		    (c.in = json_loadb(body, c.body_len, JSON_REJECT_DUPLICATES, NULL)));
		CHECK((c.out = json_loadb(out, out_len, JSON_REJECT_DUPLICATES, NULL)));
		accepted_check(&c);
		json_decref(c.in);
		json_decref(c.out);
		free(out);
	}
	sb_mreq_free(&rq);
	return 0;
}
