/* fuzz_mcp.c - libFuzzer target for the MCP server's input: the line
 * splitter (mcp/jsonrpc.h) under a small cap, each line parsed into a
 * message, and each request's arguments checked against a tool-like
 * schema (mcp/schema.h).
 *
 * Byte 0 seeds how the stream is cut; the rest is the stream. It is split
 * twice, whole and in pieces of 1 to 64 bytes, each piece in its own
 * buffer of its exact size (so ASan sees a read past it): both must give
 * the same lines and over-cap reports, no line over the cap, and no line
 * holding a newline. A parsed message's kind must agree with its fields.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "mcp/jsonrpc.h"
#include "mcp/schema.h"
#include "tests/fuzz/fuzz.h"

#define CAP 256

static const char schema_text[] =
    "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"run\"], "
    "\"properties\": {\"run\": {\"type\": \"string\", \"maxLength\": 63}, "
    "\"n\": {\"type\": \"integer\", \"minimum\": 1}, \"env\": {\"type\": \"object\", "
    "\"additionalProperties\": {\"type\": \"string\"}}, \"argv\": {\"type\": \"array\", "
    "\"items\": {\"type\": [\"string\", \"integer\"]}}}}";

static json_t *schema;

static void on_line(const char *line, size_t len)
{
	struct sb_mcp_msg m;

	CHECK(len <= CAP && !memchr(line, '\n', len));
	sb_mcp_msg_parse(line, len, &m);
	if (m.kind == SB_MCP_MSG_REQUEST)
		CHECK(m.id && m.method);
	if (m.kind == SB_MCP_MSG_NOTIFICATION)
		CHECK(!m.id && m.method);
	if (m.kind == SB_MCP_MSG_ERROR)
		CHECK(m.code < 0 && m.message[0]);
	if (m.params) {
		int rc = sb_mcp_schema_check(schema, m.params);
		CHECK(rc == SB_OK || rc == SB_ERR_INVAL);
	}
	sb_mcp_msg_free(&m);
}

/* Splits data into lines, pushed in pieces of step bytes (0: whole), and
 * writes a hash of what came out into *out. */
static void run(const uint8_t *data, size_t size, unsigned seed, uint64_t *out)
{
	struct sb_mcp_lines l;
	enum sb_mcp_line_kind k;
	uint64_t h = 1469598103934665603ull;
	size_t off = 0, len;
	char *line;

	sb_mcp_lines_init(&l, CAP);
	while (off < size || !off) {
		size_t n = seed ? 1 + (seed = seed * 1103515245u + 12345u) % 64 : size;
		n = n < size - off ? n : size - off;
		uint8_t *piece = malloc(n ? n : 1);
		memcpy(piece, data + off, n);
		CHECK(sb_mcp_lines_push(&l, piece, n) == SB_OK);
		free(piece);
		off += n;
		while ((k = sb_mcp_lines_next(&l, off == size, &line, &len)) != SB_MCP_LINE_NONE) {
			h = (h ^ (k == SB_MCP_LINE_OK ? len + 1 : 0)) * 1099511628211ull;
			for (size_t i = 0; k == SB_MCP_LINE_OK && i < len; i++)
				h = (h ^ (uint8_t)line[i]) * 1099511628211ull;
			if (k == SB_MCP_LINE_OK && !seed)
				on_line(line, len);
		}
		if (!n)
			break;
	}
	sb_mcp_lines_free(&l);
	*out = h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t whole, cut;

	if (!schema)
		schema = json_loads(schema_text, 0, NULL);
	if (size < 1)
		return 0;
	run(data + 1, size - 1, 0, &whole);
	run(data + 1, size - 1, data[0] | 1u, &cut);
	CHECK(whole == cut);
	return 0;
}
