/* test_replay.c - what sanbox replay shows of a model call and a file
 * change: the request's new messages, whole and streamed answers of both
 * APIs, errors; garbage, truncated streams, wrong types and oversized
 * text; the diff's hunk and context, binary and equal contents, files
 * without a last newline, long diffs cut.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/replay.h"

static const char *text_of(const json_t *items, size_t i)
{
	return json_string_value(json_object_get(json_array_get(items, i), "text"));
}

static const char *role_of(const json_t *items, size_t i)
{
	return json_string_value(json_object_get(json_array_get(items, i), "role"));
}

static json_t *call(const char *api, const char *req, const char *resp, int stream)
{
	json_t *j = cli_replay_call(api, req, req ? strlen(req) : 0, resp,
				    resp ? strlen(resp) : 0, stream);
	assert_non_null(j);
	return j;
}

static void test_calls(void **state)
{
	json_t *j;

	/* Anthropic: the system prompt, a tool_use answer */
	j = call(
	    "anthropic",
	    "{\"system\":\"sys\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
	    "\"text\",\"text\":\"hi\"},{\"type\":\"image\"}]}]}",
	    "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"ok\"},"
	    "{\"type\":\"tool_use\",\"name\":\"ls\",\"input\":{\"d\":1}}]}",
	    0);
	assert_int_equal(json_array_size(j), 3);
	assert_string_equal(role_of(j, 0), "system");
	assert_string_equal(text_of(j, 1), "hi [image]");
	assert_string_equal(text_of(j, 2), "ok [call ls {\"d\":1}]");
	json_decref(j);
	/* only what follows the last assistant message; a tool_result */
	j = call(
	    "anthropic",
	    "{\"system\":\"sys\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
	    "{\"role\":\"assistant\",\"content\":\"b\"},{\"role\":\"user\",\"content\":"
	    "[{\"type\":\"tool_result\",\"content\":\"r\"}]}]}",
	    NULL, 0);
	assert_int_equal(json_array_size(j), 1);
	assert_string_equal(text_of(j, 0), "[result r]");
	json_decref(j);
	/* an Anthropic stream: text and a tool's input joined; cut at its end */
	j = call(
	    "anthropic", NULL,
	    "event: x\r\ndata: "
	    "{\"type\":\"content_block_delta\",\"delta\":{\"text\":\"He\"}}"
	    "\r\n\r\ndata:{\"type\":\"content_block_delta\",\"delta\":{\"text\":\"y\"}}"
	    "\n\n"
	    "data: "
	    "{\"type\":\"content_block_start\",\"content_block\":{\"type\":\"tool_use\","
	    "\"name\":\"t\"}}\n\ndata: {\"type\":\"content_block_delta\",\"delta\":"
	    "{\"partial_json\":\"{}\"}}\n\ndata: {\"type\":\"content_blo",
	    1);
	assert_string_equal(text_of(j, 0), "Hey [call t {}]");
	json_decref(j);
	/* an error answer; garbage on both sides */
	j = call("openai", "not json", "{\"error\":{\"message\":\"bad key\"}}", 1);
	assert_string_equal(text_of(j, 0), "(not the API's JSON: 8 bytes)");
	assert_string_equal(role_of(j, 1), "error");
	assert_string_equal(text_of(j, 1), "bad key");
	json_decref(j);
	/* wrong types everywhere: nothing read, nothing broken */
	j = call(
	    "openai", "{\"messages\":{\"role\":1},\"system\":[1,{\"type\":2}]}",
	    "{\"choices\":[{\"message\":{\"role\":[],\"content\":7,\"tool_calls\":3}}]}",
	    0);
	assert_int_equal(json_array_size(j), 2);
	assert_string_equal(role_of(j, 1), "?");
	json_decref(j);
}

static void test_call_sizes(void **state)
{
	size_t n = 3 * CLI_REPLAY_TEXT_MAX;
	char *big = malloc(n + 64), req[2048] = "{\"messages\":[";
	json_t *j;

	assert_non_null(big);
	/* a message of 3 times the cap, of 2-byte characters: cut whole */
	strcpy(big, "{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"");
	for (size_t i = strlen(big); i < n; i += 2)
		memcpy(big + i, "\xc3\xa9", 2);
	strcpy(big + n, "\"}}]}");
	j = call("openai", NULL, big, 0);
	assert_true(strlen(text_of(j, 0)) <= CLI_REPLAY_TEXT_MAX);
	assert_true(strlen(text_of(j, 0)) > CLI_REPLAY_TEXT_MAX - 4);
	json_decref(j);
	free(big);
	/* 20 new messages: the last CLI_REPLAY_ITEMS_MAX */
	for (int i = 0; i < 20; i++)
		snprintf(req + strlen(req), sizeof req - strlen(req),
			 "%s{\"role\":\"user\",\"content\":\"%d\"}", i ? "," : "", i);
	strcat(req, "]}");
	j = call("openai", req, NULL, 0);
	assert_int_equal(json_array_size(j), CLI_REPLAY_ITEMS_MAX);
	assert_string_equal(text_of(j, CLI_REPLAY_ITEMS_MAX - 1), "19");
	json_decref(j);
}

static void diff_is(const char *a, const char *b, const char *want)
{
	char *d = cli_replay_diff("p", a, strlen(a), b, strlen(b));

	assert_non_null(d);
	assert_string_equal(d, want);
	free(d);
}

static void test_diff(void **state)
{
	char a[4096] = "", b[4096] = "";
	char *d;

	diff_is("same\n", "same\n", "");
	diff_is("1\n2\n3\n4\n5\n6\n7\n8\n", "1\n2\n3\n4\nfive\n6\n7\n8\n",
		"--- a/p\n+++ b/p\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n");
	diff_is("", "new\n", "--- a/p\n+++ b/p\n@@ -0,0 +1,1 @@\n+new\n");
	diff_is("x\ny", "x\nz", "--- a/p\n+++ b/p\n@@ -1,2 +1,2 @@\n x\n-y\n+z\n");
	diff_is("a\n", "a\nb\n", "--- a/p\n+++ b/p\n@@ -1,1 +1,2 @@\n a\n+b\n");
	d = cli_replay_diff("p", "a\0b", 3, "ab", 2);
	assert_non_null(strstr(d, "binary content differs (3 -> 2 bytes)"));
	free(d);
	d = cli_replay_diff("p", "\xff", 1, "a", 1);
	assert_non_null(strstr(d, "binary content differs"));
	free(d);
	/* 100 lines changed: 24 shown, the rest counted */
	for (int i = 0; i < 50; i++) {
		snprintf(a + strlen(a), sizeof a - strlen(a), "a%d\n", i);
		snprintf(b + strlen(b), sizeof b - strlen(b), "b%d\n", i);
	}
	d = cli_replay_diff("p", a, strlen(a), b, strlen(b));
	assert_non_null(strstr(d, "\n... 76 more lines\n"));
	free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_calls),
	    cmocka_unit_test(test_call_sizes),
	    cmocka_unit_test(test_diff),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
