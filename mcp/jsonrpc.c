/* jsonrpc.c - MCP stdio framing and JSON-RPC 2.0 message checks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "mcp/jsonrpc.h"

void sb_mcp_lines_init(struct sb_mcp_lines *l, size_t max)
{
	memset(l, 0, sizeof *l);
	l->max = max;
}

void sb_mcp_lines_free(struct sb_mcp_lines *l)
{
	free(l->buf);
	l->buf = NULL;
	l->len = l->cap = l->start = l->scan = 0;
}

/* Moves the bytes not yet taken to the front of buf. */
static void lines_compact(struct sb_mcp_lines *l)
{
	if (!l->start)
		return;
	memmove(l->buf, l->buf + l->start, l->len - l->start);
	l->len -= l->start;
	l->start = 0;
}

/* Appends n bytes to buf. Errors: SB_ERR_NOMEM. */
static int lines_append(struct sb_mcp_lines *l, const char *p, size_t n)
{
	if (l->len + n + 1 > l->cap) {
		size_t cap = l->cap ? l->cap : 4096;
		char *nb;
		while (cap < l->len + n + 1)
			cap *= 2;
		if (!(nb = realloc(l->buf, cap)))
			return SB_ERR_NOMEM;
		l->buf = nb;
		l->cap = cap;
	}
	memcpy(l->buf + l->len, p, n);
	l->len += n;
	return SB_OK;
}

int sb_mcp_lines_push(struct sb_mcp_lines *l, const void *bytes, size_t n)
{
	const char *p = bytes, *nl;

	lines_compact(l);
	if (l->skipping) { /* the rest of a line over the cap: up to its newline */
		if (!(nl = memchr(p, '\n', n)))
			return SB_OK;
		l->skipping = 0;
		n -= (size_t)(nl + 1 - p);
		p = nl + 1;
	}
	return n ? lines_append(l, p, n) : SB_OK;
}

/* Hands out the bytes [start, start + n) as a line, ending it with NUL in
 * place of its newline (and a CR before it). */
static enum sb_mcp_line_kind lines_take(struct sb_mcp_lines *l, size_t n, size_t skip,
					char **line, size_t *len)
{
	char *s = l->buf + l->start;

	if (n && s[n - 1] == '\r')
		n--;
	s[n] = 0;
	*line = s;
	*len = n;
	l->start += skip;
	l->scan = 0;
	return SB_MCP_LINE_OK;
}

enum sb_mcp_line_kind sb_mcp_lines_next(struct sb_mcp_lines *l, int eof, char **line,
					size_t *len)
{
	size_t avail = l->len - l->start;
	char *nl;

	*line = NULL;
	*len = 0;
	if (l->toolong) {
		l->toolong = 0;
		return SB_MCP_LINE_TOOLONG;
	}
	nl = avail > l->scan ? memchr(l->buf + l->start + l->scan, '\n', avail - l->scan) : NULL;
	if (nl) {
		size_t n = (size_t)(nl - (l->buf + l->start));
		if (n <= l->max)
			return lines_take(l, n, n + 1, line, len);
		l->start += n + 1; /* a whole line over the cap */
		l->scan = 0;
		return SB_MCP_LINE_TOOLONG;
	}
	l->scan = avail;
	if (avail > l->max) { /* drop it and what follows up to a newline */
		l->start = l->len;
		l->scan = 0;
		l->skipping = !eof;
		return SB_MCP_LINE_TOOLONG;
	}
	if (eof && avail) /* buf always has room for the NUL */
		return lines_take(l, avail, avail, line, len);
	return SB_MCP_LINE_NONE;
}

/* ---- messages ---- */

static void msg_error(struct sb_mcp_msg *m, int code, const char *msg)
{
	m->kind = SB_MCP_MSG_ERROR;
	m->code = code;
	snprintf(m->message, sizeof m->message, "%s", msg);
}

static int blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
			return 0;
	return 1;
}

/* The checks of an object: its version, id, method and params. */
static void msg_classify(struct sb_mcp_msg *m)
{
	json_t *ver = json_object_get(m->root, "jsonrpc");
	json_t *id = json_object_get(m->root, "id");
	json_t *method = json_object_get(m->root, "method");
	json_t *params = json_object_get(m->root, "params");
	int has_result = json_object_get(m->root, "result") != NULL;
	int has_error = json_object_get(m->root, "error") != NULL;

	if (id && (json_is_string(id) || json_is_integer(id)))
		m->id = id;
	if (!json_is_string(ver) || strcmp(json_string_value(ver), "2.0"))
		return msg_error(m, SB_RPC_INVALID, "invalid request: jsonrpc must be \"2.0\"");
	if (id && !m->id)
		return msg_error(m, SB_RPC_INVALID,
				 "invalid request: id must be a string or an integer");
	if (!method) {
		if (m->id && has_result != has_error) {
			m->kind = SB_MCP_MSG_DROP; /* a response: none was asked for */
			return;
		}
		return msg_error(m, SB_RPC_INVALID, "invalid request: no method");
	}
	if (!json_is_string(method))
		return msg_error(m, SB_RPC_INVALID, "invalid request: method must be a string");
	m->method = json_string_value(method);
	m->kind = m->id ? SB_MCP_MSG_REQUEST : SB_MCP_MSG_NOTIFICATION;
	if (params && !json_is_object(params)) {
		if (!m->id)
			m->kind = SB_MCP_MSG_DROP;
		else
			msg_error(m, SB_RPC_PARAMS, "invalid params: params must be an object");
		return;
	}
	m->params = params;
}

void sb_mcp_msg_parse(const char *line, size_t len, struct sb_mcp_msg *m)
{
	json_error_t err;
	char msg[sizeof m->message];

	memset(m, 0, sizeof *m);
	if (blank(line, len))
		return;
	m->root = json_loadb(line, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &err);
	if (!m->root) {
		snprintf(msg, sizeof msg, "parse error: %.100s (at byte %d)", err.text,
			 err.position);
		return msg_error(m, SB_RPC_PARSE, msg);
	}
	if (json_is_array(m->root))
		return msg_error(m, SB_RPC_INVALID,
				 json_array_size(m->root)
				     ? "invalid request: JSON-RPC batches are not supported "
				       "(MCP 2025-06-18 removed them); send one message a line"
				     : "invalid request: an empty array");
	if (!json_is_object(m->root))
		return msg_error(m, SB_RPC_INVALID, "invalid request: not a JSON object");
	msg_classify(m);
}

void sb_mcp_msg_free(struct sb_mcp_msg *m)
{
	json_decref(m->root);
	memset(m, 0, sizeof *m);
}

json_t *sb_mcp_error_new(const json_t *id, int code, const char *message)
{
	return json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id",
			 id ? (json_t *)id : json_null(), "error", "code", code, "message",
			 message);
}

json_t *sb_mcp_result_new(const json_t *id, json_t *result)
{
	return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", (json_t *)id, "result",
			 result);
}

json_t *sb_mcp_notification_new(const char *method, json_t *params)
{
	if (!params)
		return json_pack("{s:s, s:s}", "jsonrpc", "2.0", "method", method);
	return json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method", method, "params",
			 params);
}
