/* test_mcp.c - the MCP server's pure parts: lines split from a stream cut
 * anywhere, a line over the cap reported once and reading resumed at the
 * next newline, each kind of message told apart (requests, notifications,
 * responses, parse errors, batches, bad ids and versions), and tool
 * arguments checked against a schema with errors that name the field.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "mcp/jsonrpc.h"
#include "mcp/schema.h"

/* Pushes s in pieces of step bytes and collects the lines ("!" for a line
 * over the cap) joined by '|' into out. */
static void split(const char *s, size_t step, size_t max, int eof, char *out, size_t cap)
{
	struct sb_mcp_lines l;
	enum sb_mcp_line_kind k;
	size_t n = strlen(s), len;
	char *line;

	out[0] = 0;
	sb_mcp_lines_init(&l, max);
	for (size_t i = 0; i <= n; i += step) {
		size_t m = n - i < step ? n - i : step;
		assert_int_equal(sb_mcp_lines_push(&l, s + i, m), SB_OK);
		while ((k = sb_mcp_lines_next(&l, eof && i + m == n, &line, &len)) != SB_MCP_LINE_NONE) {
			assert_true(k == SB_MCP_LINE_TOOLONG || strlen(line) == len);
			strncat(out, k == SB_MCP_LINE_OK ? line : "!", cap - strlen(out) - 2);
			strcat(out, "|");
		}
		if (!m)
			break;
	}
	sb_mcp_lines_free(&l);
}

static void test_lines(void **state)
{
	char out[512];

	for (size_t step = 1; step < 12; step++) {
		split("ab\ncd\r\n\nlast", step, 16, 0, out, sizeof out);
		assert_string_equal(out, "ab|cd||");
		split("ab\ncd\r\n\nlast", step, 16, 1, out, sizeof out);
		assert_string_equal(out, "ab|cd||last|");
		/* over the cap: reported once, the rest dropped up to its newline */
		split("0123456789abcdefXYZ\nok\n", step, 8, 0, out, sizeof out);
		assert_string_equal(out, "!|ok|");
		split("12345678\n123456789\nx\n", step, 8, 0, out, sizeof out);
		assert_string_equal(out, "12345678|!|x|");
	}
}

static void parse_str(const char *line, struct sb_mcp_msg *m)
{
	sb_mcp_msg_parse(line, strlen(line), m);
}

static enum sb_mcp_msg_kind kind(const char *line, int *code)
{
	struct sb_mcp_msg m;
	enum sb_mcp_msg_kind k;

	sb_mcp_msg_parse(line, strlen(line), &m);
	k = m.kind;
	*code = m.code;
	sb_mcp_msg_free(&m);
	return k;
}

static void test_messages(void **state)
{
	struct sb_mcp_msg m;
	int code;

	parse_str("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}", &m);
	assert_int_equal(m.kind, SB_MCP_MSG_REQUEST);
	assert_string_equal(m.method, "ping");
	assert_int_equal(json_integer_value(m.id), 7);
	sb_mcp_msg_free(&m);
	assert_int_equal(kind("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", &code),
			 SB_MCP_MSG_NOTIFICATION);
	assert_int_equal(kind("  \t ", &code), SB_MCP_MSG_EMPTY);
	assert_int_equal(kind("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}", &code), SB_MCP_MSG_DROP);
	assert_int_equal(kind("{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":[]}", &code),
			 SB_MCP_MSG_DROP);
	assert_int_equal(kind("garbage", &code), SB_MCP_MSG_ERROR);
	assert_int_equal(code, SB_RPC_PARSE);
	assert_int_equal(kind("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"", &code),
			 SB_MCP_MSG_ERROR);
	assert_int_equal(code, SB_RPC_PARSE);
	assert_int_equal(kind("{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"ping\"}", &code),
			 SB_MCP_MSG_ERROR); /* a duplicate key */
	assert_int_equal(kind("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", &code),
			 SB_MCP_MSG_ERROR);
	assert_int_equal(code, SB_RPC_INVALID);
	assert_int_equal(kind("[]", &code), SB_MCP_MSG_ERROR);
	assert_int_equal(kind("42", &code), SB_MCP_MSG_ERROR);
	assert_int_equal(code, SB_RPC_INVALID);
	assert_int_equal(kind("{\"jsonrpc\":\"2.0\"}", &code), SB_MCP_MSG_ERROR);
	assert_int_equal(code, SB_RPC_INVALID);
	assert_int_equal(kind("{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}", &code),
			 SB_MCP_MSG_ERROR);
	/* ids: strings and integers only, never null, a number or an object */
	parse_str("{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", &m);
	assert_int_equal(m.kind, SB_MCP_MSG_ERROR);
	assert_null(m.id);
	sb_mcp_msg_free(&m);
	assert_int_equal(kind("{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}", &code),
			 SB_MCP_MSG_ERROR);
	parse_str("{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"x\",\"params\":1}", &m);
	assert_int_equal(m.kind, SB_MCP_MSG_ERROR);
	assert_int_equal(m.code, SB_RPC_PARAMS);
	assert_string_equal(json_string_value(m.id), "a"); /* answered with its id */
	sb_mcp_msg_free(&m);
}

static const char *check(const char *schema, const char *value)
{
	json_t *s = json_loads(schema, 0, NULL), *v = json_loads(value, JSON_DECODE_ANY, NULL);
	int rc = sb_mcp_schema_check(s, v);
	static char msg[256];

	snprintf(msg, sizeof msg, "%s", rc ? sb_errmsg(rc) : "ok");
	json_decref(s);
	json_decref(v);
	return msg;
}

static void test_schema(void **state)
{
	const char *s =
	    "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"run\"], "
	    "\"properties\": {\"run\": {\"type\": \"string\", \"maxLength\": 3}, "
	    "\"n\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 9}, "
	    "\"usd\": {\"type\": \"number\", \"exclusiveMinimum\": 0}, "
	    "\"net\": {\"type\": \"string\", \"enum\": [\"none\", \"acl\"]}, "
	    "\"argv\": {\"type\": \"array\", \"maxItems\": 2, \"items\": {\"type\": \"string\"}}, "
	    "\"env\": {\"type\": \"object\", \"additionalProperties\": {\"type\": \"string\"}}}}";

	assert_string_equal(check(s, "{\"run\": \"abc\", \"n\": 3, \"usd\": 0.5, \"net\": \"acl\", "
				     "\"argv\": [\"a\"], \"env\": {\"K\": \"V\"}}"),
			    "ok");
	assert_string_equal(check(s, "{\"run\": \"\u00e9\u00e9\u00e9\"}"), "ok"); /* characters */
	assert_string_equal(check(s, "[]"), "arguments: expected an object, got an array");
	assert_string_equal(check(s, "{}"), "run: missing (a required field)");
	assert_string_equal(check(s, "{\"run\": 1}"), "run: expected a string, got an integer");
	assert_string_equal(check(s, "{\"run\": \"abcd\"}"), "run: 4 characters, over the limit of 3");
	assert_string_equal(check(s, "{\"run\": \"a\", \"n\": 10}"), "n: 10 is over the maximum, 9");
	assert_string_equal(check(s, "{\"run\": \"a\", \"n\": 2.5}"), "n: expected an integer, got a number");
	assert_string_equal(check(s, "{\"run\": \"a\", \"usd\": 0}"), "usd: 0 must be above 0");
	assert_string_equal(check(s, "{\"run\": \"a\", \"net\": \"x\"}"), "net: 'x' is not one of none, acl");
	assert_string_equal(check(s, "{\"run\": \"a\", \"argv\": [\"a\", 2]}"),
			    "argv[1]: expected a string, got an integer");
	assert_string_equal(check(s, "{\"run\": \"a\", \"argv\": [\"a\", \"b\", \"c\"]}"),
			    "argv: 3 items, over the limit of 2");
	assert_string_equal(check(s, "{\"run\": \"a\", \"env\": {\"K\": true}}"),
			    "env.K: expected a string, got a boolean");
	assert_string_equal(check(s, "{\"run\": \"a\", \"x\": 1}"), "x: not a known field");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lines),
		cmocka_unit_test(test_messages),
		cmocka_unit_test(test_schema),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
