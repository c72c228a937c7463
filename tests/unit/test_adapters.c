/* test_adapters.c - harness adapters: the codex and claude-code adapters'
 * argv and env (what a run and a resume start), and their translators on
 * lines Codex 0.171 and Claude Code 2.1.332 printed against stub/harness
 * (Claude Code's trimmed to the fields read), plus garbage and a cut turn. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <string.h>

#include "engine/harness/adapter.h"

static const char *const codex_lines[] = {
    "{\"type\":\"thread.started\",\"thread_id\":\"01a2479b-c475-7c93-b57f-"
    "8ae7017f9646\"}",
    "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_0\",\"type\":\"error\","
    "\"message\":"
    "\"Model metadata for `stub/harness` not found.\"}}",
    "{\"type\":\"turn.started\"}",
    "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_1\",\"type\":\"agent_message\","
    "\"text\":\"I will write the file, then run a command.\"}}",
    "{\"type\":\"item.started\",\"item\":{\"id\":\"item_2\",\"type\":\"command_"
    "execution\","
    "\"command\":\"/bin/bash -lc \\\"printf '%s' 'hi' > '/workspace/hello.txt'\\\"\","
    "\"aggregated_output\":\"\",\"exit_code\":null,\"status\":\"in_progress\"}}",
    "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_2\",\"type\":\"command_"
    "execution\","
    "\"command\":\"/bin/bash -lc \\\"printf '%s' 'hi' > '/workspace/hello.txt'\\\"\","
    "\"aggregated_output\":\"\",\"exit_code\":0,\"status\":\"completed\"}}",
    "not json at all",
    "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_3\",\"type\":\"command_"
    "execution\","
    "\"command\":\"/bin/bash -lc 'false'\",\"aggregated_output\":\"boom\\n\","
    "\"exit_code\":1,\"status\":\"failed\"}}",
    "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_4\",\"type\":\"reasoning\","
    "\"text\":\"x\"}}",
    "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_5\",\"type\":\"agent_message\","
    "\"text\":\"done\"}}",
    "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":15189,\"cached_input_"
    "tokens\":0,"
    "\"cache_write_input_tokens\":0,\"output_tokens\":44,\"reasoning_output_tokens\":0}}",
};

struct got {
	char types[32][40];
	json_t *payloads[32];
	size_t n;
};

static void on_emit(void *ctx, const char *type, json_t *payload)
{
	struct got *g = ctx;

	assert_true(g->n < 32);
	assert_non_null(payload);
	snprintf(g->types[g->n], sizeof g->types[0], "%s", type);
	g->payloads[g->n++] = payload;
}

static void got_free(struct got *g)
{
	for (size_t i = 0; i < g->n; i++)
		json_decref(g->payloads[i]);
}

static const char *str(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

static void test_codex_translator(void **state)
{
	const struct sb_harness_ops *ops = sb_harness_find("codex");
	static const char *const want[] = {"agent.message",	   "agent.turn.started",
					   "agent.message",	   "agent.tool.started",
					   "agent.tool.completed", "agent.tool.started",
					   "agent.tool.completed", "agent.message",
					   "agent.turn.completed", "agent.progress"};
	struct got g = {0};
	void *st;

	assert_non_null(ops);
	assert_non_null(st = ops->reader_new());
	for (size_t i = 0; i < sizeof codex_lines / sizeof codex_lines[0]; i++)
		ops->read_line(st, codex_lines[i], strlen(codex_lines[i]), on_emit, &g);
	ops->read_end(st, 0, on_emit, &g);
	ops->reader_free(st);
	assert_int_equal(g.n, sizeof want / sizeof want[0]);
	for (size_t i = 0; i < g.n; i++)
		assert_string_equal(g.types[i], want[i]);
	assert_string_equal(str(g.payloads[0], "role"), "error");
	assert_int_equal(json_integer_value(json_object_get(g.payloads[1], "turn")), 1);
	assert_string_equal(str(g.payloads[2], "text"),
			    "I will write the file, then run a command.");
	assert_string_equal(str(g.payloads[4], "tool"), "shell");
	assert_non_null(strstr(str(g.payloads[4], "args"), "hello.txt"));
	assert_int_equal(json_integer_value(json_object_get(g.payloads[4], "exit")), 0);
	assert_int_equal(json_integer_value(json_object_get(g.payloads[6], "exit")), 1);
	assert_string_equal(str(g.payloads[6], "result"), "boom\n");
	assert_string_equal(str(g.payloads[7], "text"), "done");
	assert_int_equal(json_integer_value(json_object_get(
			     json_object_get(g.payloads[8], "claim"), "input_tokens")),
			 15189);
	assert_int_equal(json_integer_value(json_object_get(
			     json_object_get(g.payloads[8], "claim"), "output_tokens")),
			 44);
	got_free(&g);
}

static void test_codex_cut_turn(void **state)
{
	const struct sb_harness_ops *ops = sb_harness_find("codex");
	struct got g = {0};
	void *st = ops->reader_new();

	ops->read_line(st, codex_lines[2], strlen(codex_lines[2]), on_emit, &g);
	ops->read_line(st, "{\"type\":\"turn.started\"", 22, on_emit, &g); /* cut */
	ops->read_end(st, 137, on_emit, &g);
	ops->reader_free(st);
	assert_int_equal(g.n, 2);
	assert_string_equal(g.types[1], "agent.turn.completed");
	assert_true(json_is_true(json_object_get(g.payloads[1], "cut")));
	got_free(&g);
}

static void test_codex_argv(void **state)
{
	const struct sb_harness_ops *ops = sb_harness_find("codex");
	struct sb_harness_ctx c = {.harness = "/usr/bin/codex",
				   .prompt = "--fix it",
				   .model = "openai/gpt-5",
				   .base_url = "http://127.0.0.1:4000/v1"};
	struct sb_harness_args a = {0}, e = {0};
	size_t n;

	assert_int_equal(ops->argv(&c, &a), 0);
	assert_string_equal(a.v[0], SB_ADAPT_PATH);
	assert_string_equal(a.v[3], "/usr/bin/codex");
	assert_string_equal(a.v[4], "exec");
	n = a.n;
	assert_string_equal(a.v[n - 1], "--fix it"); /* after --: never an option */
	assert_string_equal(a.v[n - 2], "--");
	assert_string_equal(a.v[n - 3], "openai/gpt-5");
	for (size_t i = 0; i < n; i++)
		assert_string_not_equal(a.v[i], "resume");
	assert_string_equal(a.v[n - 5], "model_providers.sanbox.base_url="
					"\"http://127.0.0.1:4000/v1\"");
	c.resume = 1;
	memset(&a, 0, sizeof a);
	assert_int_equal(ops->argv(&c, &a), 0);
	assert_string_equal(a.v[a.n - 4], "resume");
	assert_string_equal(a.v[a.n - 3], "--last");
	assert_int_equal(ops->env(&c, &e), 0);
	assert_string_equal(e.v[0], "NO_COLOR=1");
}

static const char *const claude_lines[] = {
    "{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"f63d7386-5a6a-410b-8301-"
    "b3f7af4be3b6\",\"model\":\"stub/harness\"}",
    "{\"type\":\"assistant\",\"message\":{\"id\":\"msg_stub_0\",\"role\":\"assistant\","
    "\"content\":[{\"type\":\"text\",\"text\":\"I will write the file, then run a "
    "command.\"}]}}",
    "{\"type\":\"assistant\",\"message\":{\"id\":\"msg_stub_0\",\"role\":\"assistant\","
    "\"content\":[{\"type\":\"tool_use\",\"id\":\"toolu_0_0\",\"name\":\"Write\","
    "\"input\":{\"file_path\":\"/workspace/hello.txt\",\"content\":\"hello from the "
    "harness\\n\"}}]}}",
    "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":[{\"tool_use_id\":"
    "\"toolu_0_0\",\"type\":\"tool_result\",\"content\":\"File created successfully at: "
    "/workspace/hello.txt (file state is current in your context \\u2014 no need to Read "
    "it back)\"}]}}",
    "{\"type\":\"assistant\",\"message\":{\"id\":\"msg_stub_1\",\"role\":\"assistant\","
    "\"content\":[{\"type\":\"tool_use\",\"id\":\"toolu_1_0\",\"name\":\"Bash\","
    "\"input\":{\"command\":\"cat /workspace/hello.txt > /workspace/ran.txt\"}}]}}",
    "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":[{\"tool_use_id\":"
    "\"toolu_1_0\",\"type\":\"tool_result\",\"content\":\"(Bash completed with no "
    "output)\",\"is_error\":false}]}}",
    "{\"type\":\"assistant\",\"message\":{\"id\":\"msg_stub_2\",\"role\":\"assistant\","
    "\"content\":[{\"type\":\"text\",\"text\":\"done\"}]}}",
    "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"num_turns\":3,"
    "\"result\":\"done\",\"total_cost_usd\":0.03052,\"usage\":{\"input_tokens\":7405,"
    "\"output_tokens\":45}}",
    "garbage {",
};

static void test_claude_translator(void **state)
{
	const struct sb_harness_ops *ops = sb_harness_find("claude-code");
	static const char *const want[] = {
	    "agent.turn.started",   "agent.message",	    "agent.tool.started",
	    "agent.tool.completed", "agent.turn.completed", "agent.progress",
	    "agent.turn.started",   "agent.tool.started",   "agent.tool.completed",
	    "agent.turn.completed", "agent.progress",	    "agent.turn.started",
	    "agent.message",	    "agent.turn.completed", "agent.progress"};
	struct got g = {0};
	json_t *claim;
	void *st;

	assert_non_null(ops);
	assert_non_null(st = ops->reader_new());
	for (size_t i = 0; i < sizeof claude_lines / sizeof claude_lines[0]; i++)
		ops->read_line(st, claude_lines[i], strlen(claude_lines[i]), on_emit, &g);
	ops->read_end(st, 0, on_emit, &g);
	ops->reader_free(st);
	assert_int_equal(g.n, sizeof want / sizeof want[0]);
	for (size_t i = 0; i < g.n; i++)
		assert_string_equal(g.types[i], want[i]);
	assert_string_equal(str(g.payloads[1], "text"),
			    "I will write the file, then run a command.");
	assert_string_equal(str(g.payloads[3], "tool"), "Write");
	assert_non_null(strstr(str(g.payloads[3], "args"), "/workspace/hello.txt"));
	assert_int_equal(json_integer_value(json_object_get(g.payloads[3], "exit")), 0);
	assert_non_null(strstr(str(g.payloads[3], "result"), "File created"));
	assert_null(json_object_get(g.payloads[4], "claim"));
	assert_string_equal(str(g.payloads[8], "tool"), "Bash");
	assert_string_equal(str(g.payloads[12], "text"), "done");
	claim = json_object_get(g.payloads[13], "claim");
	assert_int_equal(json_integer_value(json_object_get(claim, "input_tokens")),
			 7405);
	assert_int_equal(json_integer_value(json_object_get(claim, "output_tokens")), 45);
	assert_true(json_real_value(json_object_get(claim, "cost_usd")) > 0.03);
	got_free(&g);
}

static void test_claude_argv(void **state)
{
	const struct sb_harness_ops *ops = sb_harness_find("claude-code");
	struct sb_harness_ctx c = {.harness = "/usr/local/bin/claude",
				   .prompt = "-p sneaky",
				   .model = "anthropic/claude-sonnet-4-5",
				   .base_url = "http://127.0.0.1:4000/v1"};
	struct sb_harness_args a = {0}, e = {0};

	assert_int_equal(ops->argv(&c, &a), 0);
	assert_string_equal(a.v[3], "/usr/local/bin/claude");
	assert_string_equal(a.v[4], "-p");
	assert_string_equal(a.v[a.n - 1], "-p sneaky");
	assert_string_equal(a.v[a.n - 2], "--");
	assert_string_equal(a.v[a.n - 3], "anthropic/claude-sonnet-4-5");
	c.resume = 1;
	memset(&a, 0, sizeof a);
	assert_int_equal(ops->argv(&c, &a), 0);
	assert_string_equal(a.v[a.n - 3], "--continue");
	assert_int_equal(ops->env(&c, &e), 0);
	assert_string_equal(e.v[0], "IS_SANDBOX=1");
	assert_string_equal(e.v[1], "DISABLE_AUTOUPDATER=1");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_codex_translator),
	    cmocka_unit_test(test_codex_cut_turn),
	    cmocka_unit_test(test_codex_argv),
	    cmocka_unit_test(test_claude_translator),
	    cmocka_unit_test(test_claude_argv),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
