/* replay.c - a model call's conversation and a file's diff (see replay.h). */
#include "cli/replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text.h"

/* ---- text of a message ---- */

/* A growing string on open_memstream. */
struct sbuf {
	FILE *f;
	char *s;
	size_t len;
};

static int sbuf_open(struct sbuf *b)
{
	b->s = NULL;
	b->len = 0;
	return (b->f = open_memstream(&b->s, &b->len)) ? 0 : -1;
}

/* Closes b and returns its string (the caller frees), or NULL. */
static char *sbuf_close(struct sbuf *b)
{
	if (fclose(b->f)) {
		free(b->s);
		return NULL;
	}
	return b->s;
}

static void put_str(struct sbuf *b, const json_t *s)
{
	if (json_is_string(s))
		fwrite(json_string_value(s), 1, json_string_length(s), b->f);
}

/* "[call NAME ARGS]" of an OpenAI tool call or an Anthropic tool_use. */
static void put_call(struct sbuf *b, const json_t *call)
{
	const json_t *fn = json_object_get(call, "function");
	const json_t *name = json_object_get(fn ? fn : call, "name");
	const json_t *args =
	    fn ? json_object_get(fn, "arguments") : json_object_get(call, "input");

	fputs("[call ", b->f);
	put_str(b, name);
	if (json_is_string(args)) {
		fputc(' ', b->f);
		put_str(b, args);
	} else if (args) {
		char *s = json_dumps(args, JSON_COMPACT);
		if (s)
			fprintf(b->f, " %s", s);
		free(s);
	}
	fputc(']', b->f);
}

static void put_content(struct sbuf *b, const json_t *content);

/* One content part: text as it is, the rest named. */
static void put_part(struct sbuf *b, const json_t *part)
{
	const char *type = json_string_value(json_object_get(part, "type"));

	if (json_is_string(part) || !type) {
		put_str(b, part);
	} else if (!strcmp(type, "text")) {
		put_str(b, json_object_get(part, "text"));
	} else if (!strcmp(type, "tool_use")) {
		put_call(b, part);
	} else if (!strcmp(type, "tool_result")) {
		fputs("[result ", b->f);
		put_content(b, json_object_get(part, "content"));
		fputc(']', b->f);
	} else {
		fprintf(b->f, "[%.32s]", type);
	}
}

static void put_content(struct sbuf *b, const json_t *content)
{
	size_t i;
	const json_t *part;

	if (json_is_string(content)) {
		put_str(b, content);
		return;
	}
	json_array_foreach(content, i, part)
	{
		if (i)
			fputc(' ', b->f);
		put_part(b, part);
	}
}

/* Appends {side, role, text} to items; text cut on a character boundary. */
static int item_add(json_t *items, const char *side, const char *role, const char *text,
		    size_t len)
{
	json_t *it;

	len = sb_utf8_cut(text, len, CLI_REPLAY_TEXT_MAX);
	it = json_pack("{s:s, s:s, s:s%}", "side", side, "role", role ? role : "?",
		       "text", text, len);
	return it ? json_array_append_new(items, it) : -1;
}

/* A message ({role, content, tool_calls?}) as an item. */
static int item_message(json_t *items, const char *side, const json_t *m)
{
	const json_t *calls = json_object_get(m, "tool_calls"), *call;
	struct sbuf b;
	char *s;
	size_t i;
	int rc;

	if (sbuf_open(&b))
		return -1;
	put_content(&b, json_object_get(m, "content"));
	json_array_foreach(calls, i, call)
	{
		if (ftell(b.f) > 0)
			fputc(' ', b.f);
		put_call(&b, call);
	}
	if (!(s = sbuf_close(&b)))
		return -1;
	rc = item_add(items, side, json_string_value(json_object_get(m, "role")), s,
		      strlen(s));
	free(s);
	return rc;
}

/* ---- a call ---- */

/* The request's messages after its last assistant message (the system
 * prompt first when it has none), at most CLI_REPLAY_ITEMS_MAX. */
static int request_items(json_t *items, const json_t *req)
{
	const json_t *msgs = json_object_get(req, "messages"), *sys;
	size_t n = json_array_size(msgs), from = n, first;
	int rc = 0;

	while (from > 0 && strcmp(json_string_value(json_object_get(
				      json_array_get(msgs, from - 1), "role"))
				      ?: "",
				  "assistant"))
		from--;
	sys = json_object_get(req, "system");
	if (from == 0 && sys) {
		struct sbuf b;
		char *s;
		if (sbuf_open(&b))
			return -1;
		put_content(&b, sys);
		if (!(s = sbuf_close(&b)))
			return -1;
		rc = item_add(items, "request", "system", s, strlen(s));
		free(s);
	}
	first = n - from > CLI_REPLAY_ITEMS_MAX ? n - CLI_REPLAY_ITEMS_MAX : from;
	for (size_t i = first; i < n && !rc; i++)
		rc = item_message(items, "request", json_array_get(msgs, i));
	return rc;
}

/* A whole answer: OpenAI's first choice's message, Anthropic's message,
 * or an error's message. */
static int answer_items(json_t *items, const json_t *resp)
{
	const json_t *err = json_object_get(resp, "error"), *msg;

	if (err) {
		const json_t *m = json_object_get(err, "message");
		const char *s = json_string_value(m ? m : err);
		return item_add(items, "answer", "error", s ? s : "(no message)",
				s ? strlen(s) : 12);
	}
	msg = json_object_get(json_array_get(json_object_get(resp, "choices"), 0),
			      "message");
	return item_message(items, "answer", msg ? msg : resp);
}

/* What a stream has said so far: its text and its tool calls. */
struct stream_acc {
	struct sbuf text, calls;
	int in_call;
};

/* One OpenAI chunk: the first choice's delta. */
static void stream_openai(struct stream_acc *a, const json_t *chunk)
{
	const json_t *d = json_object_get(
	    json_array_get(json_object_get(chunk, "choices"), 0), "delta");
	const json_t *call;
	size_t i;

	put_str(&a->text, json_object_get(d, "content"));
	json_array_foreach(json_object_get(d, "tool_calls"), i, call)
	{
		const json_t *fn = json_object_get(call, "function");
		const json_t *name = json_object_get(fn, "name");
		if (json_is_string(name)) {
			fputs(a->in_call ? "] [call " : "[call ", a->calls.f);
			put_str(&a->calls, name);
			fputc(' ', a->calls.f);
			a->in_call = 1;
		}
		put_str(&a->calls, json_object_get(fn, "arguments"));
	}
}

/* One Anthropic event: text and tool input deltas, tool_use blocks. */
static void stream_anthropic(struct stream_acc *a, const json_t *ev)
{
	const char *type = json_string_value(json_object_get(ev, "type"));
	const json_t *blk = json_object_get(ev, "content_block");
	const json_t *d = json_object_get(ev, "delta");

	if (!type)
		return;
	if (!strcmp(type, "content_block_start") &&
	    !strcmp(json_string_value(json_object_get(blk, "type")) ?: "", "tool_use")) {
		fputs(a->in_call ? "] [call " : "[call ", a->calls.f);
		put_str(&a->calls, json_object_get(blk, "name"));
		fputc(' ', a->calls.f);
		a->in_call = 1;
	} else if (!strcmp(type, "content_block_delta")) {
		put_str(&a->text, json_object_get(d, "text"));
		put_str(&a->calls, json_object_get(d, "partial_json"));
	} else if (!strcmp(type, "error")) {
		fputs("[error ", a->text.f);
		put_str(&a->text,
			json_object_get(json_object_get(ev, "error"), "message"));
		fputc(']', a->text.f);
	}
}

/* A stream's data lines (SSE; CR, LF or CRLF ends a line) read as chunks
 * of api, joined into one answer item. */
static int stream_items(json_t *items, int anthropic, const char *body, size_t len)
{
	struct stream_acc a = {.in_call = 0};
	char *text = NULL, *calls = NULL;
	int rc = -1;

	if (sbuf_open(&a.text))
		return -1;
	if (sbuf_open(&a.calls)) {
		free(sbuf_close(&a.text));
		return -1;
	}
	for (size_t i = 0; i < len;) {
		size_t e = i;
		while (e < len && body[e] != '\n' && body[e] != '\r')
			e++;
		if (e - i > 5 && !memcmp(body + i, "data:", 5)) {
			size_t s = i + 5 + (body[i + 5] == ' ');
			json_t *j = json_loadb(body + s, e - s, 0, NULL);
			if (j)
				anthropic ? stream_anthropic(&a, j)
					  : stream_openai(&a, j);
			json_decref(j);
		}
		i = e + 1;
	}
	if (a.in_call)
		fputc(']', a.calls.f);
	text = sbuf_close(&a.text);
	calls = sbuf_close(&a.calls);
	if (text && calls) {
		size_t tl = strlen(text);
		char *s = malloc(tl + strlen(calls) + 2);
		if (s) {
			snprintf(s, tl + strlen(calls) + 2, "%s%s%s", text,
				 tl && *calls ? " " : "", calls);
			rc = item_add(items, "answer", "assistant", s, strlen(s));
			free(s);
		}
	}
	free(text);
	free(calls);
	return rc;
}

/* Says that side's body (len bytes) is not what its API gives. */
static int item_unread(json_t *items, const char *side, size_t len)
{
	char s[96];

	snprintf(s, sizeof s, "(not the API's JSON: %zu bytes)", len);
	return item_add(items, side, "?", s, strlen(s));
}

json_t *cli_replay_call(const char *api, const char *req, size_t reqlen, const char *resp,
			size_t resplen, int stream)
{
	json_t *items = json_array(), *j;
	int anthropic = api && !strcmp(api, "anthropic"), rc = 0;

	if (!items)
		return NULL;
	if (req) {
		j = json_loadb(req, reqlen, 0, NULL);
		rc = json_is_object(j) ? request_items(items, j)
				       : item_unread(items, "request", reqlen);
		json_decref(j);
	}
	if (resp && !rc) {
		j = json_loadb(resp, resplen, 0, NULL);
		if (json_is_object(j))
			rc = answer_items(items,
					  j); /* an error answers a stream in JSON */
		else if (stream)
			rc = stream_items(items, anthropic, resp, resplen);
		else
			rc = item_unread(items, "answer", resplen);
		json_decref(j);
	}
	if (rc) {
		json_decref(items);
		return NULL;
	}
	return items;
}

/* ---- a diff ---- */

struct lines {
	const char **p;
	size_t *len, n;
};

/* Splits s into lines (without their LF; a last line with none counts).
 * Returns 0, or -1 when out of memory. */
static int lines_split(const char *s, size_t len, struct lines *l)
{
	size_t n = 0;

	for (size_t i = 0; i < len; i++)
		n += s[i] == '\n';
	n += len && s[len - 1] != '\n';
	l->n = 0;
	l->p = malloc((n ? n : 1) * sizeof *l->p);
	l->len = malloc((n ? n : 1) * sizeof *l->len);
	if (!l->p || !l->len)
		return -1;
	for (size_t i = 0; i < len; l->n++) {
		const char *nl = memchr(s + i, '\n', len - i);
		size_t e = nl ? (size_t)(nl - s) : len;
		l->p[l->n] = s + i;
		l->len[l->n] = e - i;
		i = e + 1;
	}
	return 0;
}

static int line_eq(const struct lines *a, size_t i, const struct lines *b, size_t j)
{
	return a->len[i] == b->len[j] && !memcmp(a->p[i], b->p[j], a->len[i]);
}

/* Writes the hunk lines of a range, prefix c, counting against *left. */
static void hunk_put(FILE *f, char c, const struct lines *l, size_t from, size_t to,
		     size_t *shown, size_t *more)
{
	for (size_t i = from; i < to; i++) {
		if (*shown < CLI_REPLAY_DIFF_LINES) {
			fputc(c, f);
			fwrite(l->p[i], 1, l->len[i], f);
			fputc('\n', f);
			(*shown)++;
		} else {
			(*more)++;
		}
	}
}

/* The one hunk of a and b (split), after the headers. */
static void diff_hunk(FILE *f, const struct lines *a, const struct lines *b)
{
	size_t pre = 0, suf = 0, lo, ahi, bhi, shown = 0, more = 0;

	while (pre < a->n && pre < b->n && line_eq(a, pre, b, pre))
		pre++;
	while (suf < a->n - pre && suf < b->n - pre &&
	       line_eq(a, a->n - 1 - suf, b, b->n - 1 - suf))
		suf++;
	lo = pre > 3 ? pre - 3 : 0;
	ahi = a->n - suf + (suf > 3 ? 3 : suf); /* end of the hunk in a, context in */
	bhi = b->n - suf + (suf > 3 ? 3 : suf);
	fprintf(f, "@@ -%zu,%zu +%zu,%zu @@\n", ahi > lo ? lo + 1 : lo, ahi - lo,
		bhi > lo ? lo + 1 : lo, bhi - lo);
	hunk_put(f, ' ', a, lo, pre, &shown, &more);
	hunk_put(f, '-', a, pre, a->n - suf, &shown, &more);
	hunk_put(f, '+', b, pre, b->n - suf, &shown, &more);
	hunk_put(f, ' ', a, a->n - suf, ahi, &shown, &more);
	if (more)
		fprintf(f, "... %zu more lines\n", more);
}

static int is_text(const char *s, size_t len)
{
	return !memchr(s, 0, len) && sb_utf8_valid(s, len);
}

char *cli_replay_diff(const char *path, const char *a, size_t alen, const char *b,
		      size_t blen)
{
	struct lines la = {0}, lb = {0};
	struct sbuf out;
	int rc = 0;

	if (sbuf_open(&out))
		return NULL;
	if (alen == blen && !memcmp(a, b, alen))
		return sbuf_close(&out);
	fprintf(out.f, "--- a/%s\n+++ b/%s\n", path, path);
	if (alen > CLI_REPLAY_BODY_MAX || blen > CLI_REPLAY_BODY_MAX)
		fprintf(out.f, "too large to diff (%zu -> %zu bytes)\n", alen, blen);
	else if (!is_text(a, alen) || !is_text(b, blen))
		fprintf(out.f, "binary content differs (%zu -> %zu bytes)\n", alen, blen);
	else if (!(rc = lines_split(a, alen, &la)) && !(rc = lines_split(b, blen, &lb)))
		diff_hunk(out.f, &la, &lb);
	free(la.p);
	free(la.len);
	free(lb.p);
	free(lb.len);
	if (rc) {
		free(sbuf_close(&out));
		return NULL;
	}
	return sbuf_close(&out);
}
