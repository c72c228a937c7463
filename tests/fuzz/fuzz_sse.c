/* fuzz_sse.c - libFuzzer target for the gateway's meter of a streamed
 * answer (engine/gateway/meter.h, sb_sse_meter_feed), which reads what an
 * upstream provider streams and counts the usage the call is charged.
 *
 * The input: byte 0 bits 0 and 2 the dialect (bit 2: Responses; else bit
 * 0: Anthropic, else OpenAI chat completions), bit 1
 * whether the rest is the stream (clear) or operations that make one
 * (set: events reporting counts of the input's choosing, text, line ends
 * of every kind, blank lines, comments and other fields, a report split
 * over two data lines, the stream's end, a BOM, bare bytes); bytes 1-2
 * seed how the stream is cut.
 *
 * The stream is fed to a meter whole and to another cut in pieces of 1 to
 * 600 bytes (each in its own buffer of its exact size): both must count
 * the same (usage, text bytes, end). And they must say what a model says
 * that reads the whole stream as server-sent events (lines end at CR, LF
 * or CRLF; a BOM first is dropped; an event's data lines are joined with
 * LF; an event is dispatched at a blank line, and one the stream's end
 * cuts is not): the same text bytes and end, usage known exactly when a
 * report that settles it came (OpenAI: any usage; Anthropic: a
 * message_delta's; Responses: the usage of response.completed, .incomplete
 * or .failed), and then no count below any the stream reported, kind
 * by kind (uncached input, cached input, output), however large.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "engine/gateway/meter.h"
#include "tests/fuzz/fuzz.h"

#define INPUT_MAX  2048 /* longer inputs are not tried: each event costs a parse */
#define STREAM_MAX (64 * INPUT_MAX)
#define MADE_MAX   INPUT_MAX /* a made stream ends past this many bytes */

typedef unsigned __int128 u128;

/* --- the model --- */

/* The most each kind of token was reported at, and the rest the stream
 * said. */
struct model {
	unsigned api;
	u128 uncached, cached, output;
	int known, finished;
	uint64_t out_bytes;
};

static u128 max128(u128 a, u128 b)
{
	return a > b ? a : b;
}

/* A count: a positive JSON integer, else none. */
static u128 count(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_integer(v) && json_integer_value(v) > 0
		   ? (u128)json_integer_value(v)
		   : 0;
}

static void model_report(struct model *md, json_t *usage)
{
	u128 in, cached, out;

	if (!json_is_object(usage))
		return;
	if (md->api == SB_API_ANTHROPIC) {
		in = count(usage, "input_tokens") +
		     count(usage, "cache_creation_input_tokens");
		cached = count(usage, "cache_read_input_tokens");
		out = count(usage, "output_tokens");
	} else if (md->api == SB_API_RESPONSES) {
		cached = count(json_object_get(usage, "input_tokens_details"),
			       "cached_tokens");
		in = count(usage, "input_tokens");
		in = in > cached ? in - cached : 0;
		out = count(usage, "output_tokens");
	} else {
		cached = count(json_object_get(usage, "prompt_tokens_details"),
			       "cached_tokens");
		in = count(usage, "prompt_tokens");
		in = in > cached ? in - cached : 0;
		out = count(usage, "completion_tokens");
	}
	md->uncached = max128(md->uncached, in);
	md->cached = max128(md->cached, cached);
	md->output = max128(md->output, out);
}

static uint64_t str_len(json_t *v)
{
	return json_is_string(v) ? json_string_length(v) : 0;
}

/* The OpenAI text of a chunk: its choices' content and tool arguments. */
static uint64_t openai_text(json_t *j)
{
	json_t *c, *call;
	uint64_t n = 0;
	size_t i, k;

	json_array_foreach(json_object_get(j, "choices"), i, c)
	{
		json_t *delta = json_object_get(c, "delta");
		n += str_len(json_object_get(delta, "content"));
		json_array_foreach(json_object_get(delta, "tool_calls"), k, call) n +=
		    str_len(
			json_object_get(json_object_get(call, "function"), "arguments"));
	}
	return n;
}

/* One event of a Responses stream: any delta is output; the response's
 * end reports its usage and finishes it. */
static void model_responses(struct model *md, const char *type, json_t *j)
{
	size_t n = type ? strlen(type) : 0;
	json_t *usage = json_object_get(json_object_get(j, "response"), "usage");

	if (n > 6 && !strcmp(type + n - 6, ".delta"))
		md->out_bytes += str_len(json_object_get(j, "delta"));
	if (type &&
	    (!strcmp(type, "response.completed") ||
	     !strcmp(type, "response.incomplete") || !strcmp(type, "response.failed"))) {
		md->known |= json_is_object(usage);
		model_report(md, usage);
		md->finished = 1;
	}
}

/* One event's data. */
static void model_event(struct model *md, const char *data, size_t len)
{
	const char *type;
	json_t *j, *d;

	if (len == 6 && !memcmp(data, "[DONE]", 6))
		md->finished = 1; /* OpenAI's end, taken from any */
	if (!(j = json_loadb(data, len, 0, NULL)))
		return;
	type = json_string_value(json_object_get(j, "type"));
	if (md->api == SB_API_RESPONSES) {
		model_responses(md, type, j);
	} else if (md->api == SB_API_OPENAI) {
		md->out_bytes += openai_text(j);
		md->known |= json_is_object(json_object_get(j, "usage"));
		model_report(md, json_object_get(j, "usage"));
	} else if (type && !strcmp(type, "message_start")) {
		model_report(md, json_object_get(json_object_get(j, "message"), "usage"));
	} else if (type && !strcmp(type, "message_delta")) {
		md->known |= json_is_object(json_object_get(j, "usage"));
		model_report(md, json_object_get(j, "usage"));
	} else if (type && !strcmp(type, "content_block_delta")) {
		d = json_object_get(j, "delta");
		md->out_bytes += str_len(json_object_get(d, "text")) +
				 str_len(json_object_get(d, "partial_json")) +
				 str_len(json_object_get(d, "thinking"));
	} else if (type && !strcmp(type, "message_stop")) {
		md->finished = 1;
	}
	json_decref(j);
}

/* Reads the whole stream s (n bytes) as server-sent events. */
static void model_run(struct model *md, const char *s, size_t n)
{
	static char data[STREAM_MAX];
	size_t pos = 0, dn = 0, end, next, name, vlen;
	const char *line, *colon, *v;

	if (n >= 3 && !memcmp(s, "\xef\xbb\xbf", 3))
		pos = 3;
	for (; pos < n; pos = next) {
		for (end = pos; end < n && s[end] != '\r' && s[end] != '\n'; end++)
			;
		if (end == n)
			break; /* a line the stream's end cuts */
		next = end + 1 + (s[end] == '\r' && end + 1 < n && s[end + 1] == '\n');
		line = s + pos;
		if (end == pos) { /* blank: the event is dispatched */
			if (dn)
				model_event(md, data, dn - 1);
			dn = 0;
			continue;
		}
		colon = memchr(line, ':', end - pos);
		name = colon ? (size_t)(colon - line) : end - pos;
		if (name != 4 || memcmp(line, "data", 4))
			continue; /* a comment (name 0), another field */
		v = colon ? colon + 1 : line + name;
		vlen = (size_t)(s + end - v);
		if (vlen && *v == ' ')
			v++, vlen--;
		memcpy(data + dn, v, vlen);
		dn += vlen;
		data[dn++] = '\n';
	}
}

/* --- the stream the operations make --- */

struct gen {
	const uint8_t *d;
	size_t n, i;
	char s[STREAM_MAX];
	size_t len;
	unsigned api;
};

static uint8_t gen_byte(struct gen *g)
{
	return g->i < g->n ? g->d[g->i++] : 0;
}

static void gen_put(struct gen *g, const char *p, size_t n)
{
	if (g->len + n <= sizeof g->s)
		memcpy(g->s + g->len, p, n);
	g->len += n;
}

static void gen_str(struct gen *g, const char *p)
{
	gen_put(g, p, strlen(p));
}

/* A line end: LF, CRLF or CR, as the next byte says. */
static void gen_end(struct gen *g)
{
	static const char *const ends[] = {"\n", "\r\n", "\r", "\n"};

	gen_str(g, ends[gen_byte(g) & 3]);
}

/* A count in a report: a number of the input's choosing, or a value that
 * is no count. */
static void gen_count(struct gen *g)
{
	static const char *const odd[] = {
	    "-5", "5.0", "\"7\"", "null", "{}", "9223372036854775807", "1e3"};
	uint8_t b = gen_byte(g);
	unsigned v = b;
	char num[32];

	if (b >= 0xf0) {
		gen_str(g, odd[b % 7]);
		return;
	}
	v = v << 8 | gen_byte(g);
	if (b & 0x80)
		v = v << 8 | gen_byte(g);
	snprintf(num, sizeof num, "%u", v);
	gen_str(g, num);
}

/* A usage report of each dialect: its start, its fields, its end. */
static const struct report_form {
	const char *head, *fields[4], *tail;
} report_forms[] = {
    {"{\"choices\":[],\"usage\":{",
     {"\"prompt_tokens\":", "\"completion_tokens\":",
      "\"prompt_tokens_details\":{\"cached_tokens\":", NULL},
     "}}"},
    {"{\"type\":\"message_start\",\"message\":{\"usage\":{",
     {"\"input_tokens\":", "\"output_tokens\":", "\"cache_read_input_tokens\":",
      "\"cache_creation_input_tokens\":"},
     "}}}"},
    {"{\"type\":\"message_delta\",\"usage\":{",
     {"\"output_tokens\":", "\"input_tokens\":", "\"cache_read_input_tokens\":",
      "\"cache_creation_input_tokens\":"},
     "}}"},
    {"{\"type\":\"response.completed\",\"response\":{\"usage\":{",
     {"\"input_tokens\":", "\"output_tokens\":",
      "\"input_tokens_details\":{\"cached_tokens\":", NULL},
     "}}}"},
    {"{\"type\":\"response.incomplete\",\"response\":{\"usage\":{",
     {"\"output_tokens\":", "\"input_tokens\":",
      "\"input_tokens_details\":{\"cached_tokens\":", NULL},
     "}}}"},
};

/* A data line holding a usage report of counts the input chooses (split:
 * its fields in a second data line). */
static void gen_report(struct gen *g, int split)
{
	uint8_t b = gen_byte(g);
	const struct report_form *f =
	    &report_forms[g->api == SB_API_OPENAI      ? 0
			  : g->api == SB_API_RESPONSES ? 3 + (b & 1)
						       : 1 + (b & 1)];
	int first = 1;

	gen_str(g, b & 2 ? "data:" : "data: ");
	gen_str(g, f->head);
	if (split) {
		gen_end(g);
		gen_str(g, "data: ");
	}
	for (int k = 0; k < 4 && f->fields[k]; k++) {
		if (!(b >> (k + 2) & 1))
			continue;
		gen_str(g, first ? "" : ",");
		gen_str(g, f->fields[k]);
		gen_count(g);
		gen_str(g, strchr(f->fields[k], '{') ? "}" : "");
		first = 0;
	}
	gen_str(g, f->tail);
}

/* "data: " and a chunk of n bytes of text. */
static void gen_text(struct gen *g)
{
	uint8_t n = gen_byte(g) % 64;
	char text[64];

	memset(text, 'x', n);
	gen_str(g,
		g->api == SB_API_OPENAI ? "data: {\"choices\":[{\"delta\":{\"content\":\""
		: g->api == SB_API_RESPONSES
		    ? "data: "
		      "{\"type\":\"response.function_call_arguments.delta\",\"delta\":\""
		    : "data: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"");
	gen_put(g, text, n);
	gen_str(g, g->api == SB_API_OPENAI	? "\"}}]}"
		   : g->api == SB_API_RESPONSES ? "\"}"
						: "\"}}");
}

static void gen_stream(struct gen *g)
{
	static const char *const lines[] = {"event: message_delta",
					    ": a comment",
					    "id: 5",
					    "retry: 1",
					    "data",
					    "data:",
					    "data:x",
					    "\xef\xbb\xbf",
					    "data: [DONE]",
					    "data: {\"type\":\"message_stop\"}"};
	const uint8_t *p;
	uint8_t op, n;

	g->len = 0;
	while (g->i < g->n && g->len < MADE_MAX) {
		op = gen_byte(g);
		switch (op % 7) {
		case 0: gen_report(g, 0); break;
		case 1: gen_report(g, 1); break;
		case 2: gen_text(g); break;
		case 3: gen_str(g, lines[gen_byte(g) % 10]); break;
		case 4: /* bare bytes */
			n = gen_byte(g);
			p = g->d + g->i;
			n = g->n - g->i < n ? (uint8_t)(g->n - g->i) : n;
			g->i += n;
			gen_put(g, (const char *)p, n);
			break;
		default: break;
		}
		gen_end(g);
		if (op & 0x80)
			gen_end(g); /* and a blank line */
	}
}

/* --- the meter's runs --- */

static void meter_run(unsigned api, const char *s, size_t n, uint32_t seed,
		      struct sb_sse_meter *m)
{
	static const size_t cuts[] = {1, 2, 3, 4, 5, 7, 9, 13, 17, 33, 64, 600};
	size_t pos = 0, c;
	char *piece;

	sb_sse_meter_init(m, api);
	while (pos < n) {
		c = n - pos;
		if (seed) {
			seed = seed * 1103515245u + 12345u;
			c = cuts[(seed >> 16) % (sizeof cuts / sizeof cuts[0])];
			c = c < n - pos ? c : n - pos;
		}
		CHECK((piece = malloc(c)));
		memcpy(piece, s + pos, c);
		CHECK(sb_sse_meter_feed(m, piece, c) == SB_OK);
		free(piece);
		pos += c;
	}
}

/* The meter counted as the model says. */
static void meter_check(const struct sb_sse_meter *m, const struct model *md)
{
	const struct sb_usage *u = &m->usage;

	CHECK(m->out_bytes == md->out_bytes && !m->finished == !md->finished);
	CHECK(!u->known == !md->known);
	if (!u->known)
		return; /* charged its whole reservation */
	CHECK(u->cached <= u->input);
	CHECK(u->output >= md->output || u->output == UINT64_MAX);
	CHECK(u->cached >= md->cached || u->cached == UINT64_MAX);
	CHECK(u->input - u->cached >= md->uncached || u->input == UINT64_MAX);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct gen g;
	static struct sb_sse_meter whole, cut;
	struct model md = {0};
	const char *s = (const char *)data + 3;
	size_t n = size - 3;

	if (size < 3 || size > INPUT_MAX)
		return 0;
	md.api = g.api = data[0] & 4   ? SB_API_RESPONSES
			 : data[0] & 1 ? SB_API_ANTHROPIC
				       : SB_API_OPENAI;
	if (data[0] & 2) {
		g.d = data + 3;
		g.n = size - 3;
		g.i = 0;
		gen_stream(&g);
		if (g.len > sizeof g.s)
			return 0;
		s = g.s;
		n = g.len;
	}
	model_run(&md, s, n);
	meter_run(md.api, s, n, 0, &whole);
	meter_run(md.api, s, n, (uint32_t)(data[1] << 8 | data[2]) | 1, &cut);
	CHECK(whole.usage.input == cut.usage.input &&
	      whole.usage.cached == cut.usage.cached &&
	      whole.usage.output == cut.usage.output &&
	      whole.usage.known == cut.usage.known);
	CHECK(whole.out_bytes == cut.out_bytes && whole.finished == cut.finished);
	meter_check(&whole, &md);
	sb_sse_meter_free(&whole);
	sb_sse_meter_free(&cut);
	return 0;
}
