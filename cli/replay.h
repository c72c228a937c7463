/* replay.h - what sanbox replay shows of an event beyond its one line: the
 * conversation of a recorded model call (from its request and answer
 * blobs) and a short unified diff of a changed file (from its recorded
 * contents before and after). Pure: no connection, no printing; the
 * unit tests (tests/unit/test_replay.c) feed them hostile bodies.
 *
 * Everything here is untrusted text from the record (a guest's files, a
 * provider's answer): what it returns is raw, and the caller escapes it
 * (sb_text_escape) before a terminal sees it; --json prints it exact.
 */
#ifndef SB_CLI_REPLAY_H
#define SB_CLI_REPLAY_H

#include <jansson.h>
#include <stddef.h>

#define CLI_REPLAY_TEXT_MAX   4096	/* bytes of text kept per message */
#define CLI_REPLAY_ITEMS_MAX  8		/* messages shown of one request */
#define CLI_REPLAY_BODY_MAX   (1 << 20) /* a file larger is not diffed */
#define CLI_REPLAY_DIFF_LINES 24	/* diff lines shown, headers aside */

/* The conversation of one model call: the messages the request added
 * since the model's last answer (those after its last assistant message,
 * at most CLI_REPLAY_ITEMS_MAX, the last ones; the system prompt too when
 * there is none), then the answer (a stream's pieces joined; an error's
 * message). api is "openai" or "anthropic" (anything else is read as
 * openai); req or resp NULL: not in the record. Returns a new array of
 * {"side": "request"|"answer", "role": str, "text": str} (text cut to
 * CLI_REPLAY_TEXT_MAX bytes on a character boundary, tool calls as
 * "[call NAME ARGS]", tool results as "[result TEXT]", other parts as
 * "[TYPE]"); a body that is not its API's JSON gives one item whose text
 * says so. NULL when out of memory. The caller decrefs. */
json_t *cli_replay_call(const char *api, const char *req, size_t reqlen, const char *resp,
			size_t resplen, int stream);

/* A unified diff of path from a (before) to b (after): "--- a/PATH",
 * "+++ b/PATH" and one hunk from the first line that differs to the last,
 * with up to 3 lines of context around it (not the shortest diff when
 * changes are far apart, but a true one), its lines cut after
 * CLI_REPLAY_DIFF_LINES with "... N more lines". Contents that hold a NUL
 * byte or are not UTF-8, or are above CLI_REPLAY_BODY_MAX, give one line
 * "binary content differs (X -> Y bytes)" or "too large to diff"; equal
 * contents, "" . A new string the caller frees, NULL when out of memory. */
char *cli_replay_diff(const char *path, const char *a, size_t alen, const char *b,
		      size_t blen);

#endif
