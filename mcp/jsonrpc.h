/* jsonrpc.h - the MCP stdio transport's framing and JSON-RPC 2.0 messages:
 * newline-delimited lines under a length cap, each parsed into a request,
 * a notification or a response, or the error that answers it. Nothing
 * here reads, writes or allocates beyond its own buffers; the server
 * (mcp/server.c) does the I/O. See SPEC.md, "MCP server".
 */
#ifndef SB_MCP_JSONRPC_H
#define SB_MCP_JSONRPC_H

#include <jansson.h>
#include <stddef.h>

#define SB_MCP_LINE_MAX (8u << 20) /* bytes of one message line */

/* JSON-RPC 2.0's error codes, and MCP's for a resource not found. */
enum {
	SB_RPC_PARSE = -32700,
	SB_RPC_INVALID = -32600,
	SB_RPC_NO_METHOD = -32601,
	SB_RPC_PARAMS = -32602,
	SB_RPC_INTERNAL = -32603,
	SB_RPC_NO_RESOURCE = -32002,
};

/* Splits a byte stream into lines of at most cap bytes (the newline not
 * counted; a CR before it dropped). A longer line is reported once as too
 * long and its bytes are dropped up to the next newline, where reading
 * goes on. Lives where its caller puts it; sb_mcp_lines_free frees buf. */
struct sb_mcp_lines {
	char *buf;
	size_t len, cap, max; /* bytes held, allocated, the line cap */
	size_t start;	      /* where the bytes not yet taken begin */
	size_t scan;	      /* bytes past start already searched for a newline */
	int toolong;	      /* a line over the cap not yet reported */
	int skipping;	      /* dropping the rest of a line over the cap */
};

/* Starts l with a line cap of max bytes. */
void sb_mcp_lines_init(struct sb_mcp_lines *l, size_t max);

/* Frees what l holds (safe twice). */
void sb_mcp_lines_free(struct sb_mcp_lines *l);

/* What sb_mcp_lines_next found. */
enum sb_mcp_line_kind {
	SB_MCP_LINE_NONE = 0, /* no whole line yet: push more bytes */
	SB_MCP_LINE_OK,	      /* a line */
	SB_MCP_LINE_TOOLONG,  /* a line went over the cap (reported once) */
};

/* Appends n bytes read from the stream. Errors: SB_ERR_NOMEM. */
int sb_mcp_lines_push(struct sb_mcp_lines *l, const void *bytes, size_t n);

/* Takes the next line: *line (NUL-terminated, without its newline) stays
 * valid until the next call on l. At the end of the stream (eof set), a
 * last line without a newline is returned too. */
enum sb_mcp_line_kind sb_mcp_lines_next(struct sb_mcp_lines *l, int eof, char **line,
					size_t *len);

/* What a line holds. */
enum sb_mcp_msg_kind {
	SB_MCP_MSG_EMPTY = 0,	/* blank: ignored */
	SB_MCP_MSG_REQUEST,	/* method and id */
	SB_MCP_MSG_NOTIFICATION, /* method, no id */
	SB_MCP_MSG_DROP,	/* nothing to answer: a response (result or error
				 * with an id), a notification with bad params */
	SB_MCP_MSG_ERROR,	/* to be answered with code and message (and id) */
};

/* One message; every json_t is owned by the message (sb_mcp_msg_free). */
struct sb_mcp_msg {
	enum sb_mcp_msg_kind kind;
	json_t *root;	    /* the parsed document, or NULL */
	json_t *id;	    /* borrowed from root: a string or an integer; NULL
			     * when none (an error then answers with null) */
	const char *method; /* borrowed from root */
	json_t *params;	    /* borrowed from root: an object, or NULL */
	int code;	    /* SB_MCP_MSG_ERROR: the JSON-RPC error code */
	char message[160];  /* ... and its message */
};

/* Parses the line (len bytes) into *m, which the caller frees with
 * sb_mcp_msg_free whatever the kind. Never fails: what is not a message is
 * SB_MCP_MSG_ERROR (invalid JSON, a batch, a message that is not a
 * request), or SB_MCP_MSG_DROP when nothing may answer it. */
void sb_mcp_msg_parse(const char *line, size_t len, struct sb_mcp_msg *m);

/* Frees what m holds (safe on a zeroed struct). */
void sb_mcp_msg_free(struct sb_mcp_msg *m);

/* The error response {jsonrpc, id, error: {code, message}} (id NULL: null),
 * a new reference the caller owns; NULL without memory. */
json_t *sb_mcp_error_new(const json_t *id, int code, const char *message);

/* The result response {jsonrpc, id, result}; result's reference is taken
 * (stolen, also on failure). NULL without memory. */
json_t *sb_mcp_result_new(const json_t *id, json_t *result);

/* A notification {jsonrpc, method, params}; params' reference is stolen
 * (NULL: none). NULL without memory. */
json_t *sb_mcp_notification_new(const char *method, json_t *params);

#endif
