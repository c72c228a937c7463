/* tools.c - the MCP tool table: each tool's name, a line a model can act
 * on, its input's JSON Schema and its handler; tools/list and tools/call
 * (the arguments checked against the schema before any handler runs). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "mcp/schema.h"
#include "mcp/tools.h"

/* Schema fragments more than one tool uses. */
#define S_RUN                                                                            \
	"\"run\": {\"type\": \"string\", \"minLength\": 1, \"maxLength\": 63, "              \
	"\"description\": \"a run's id, a unique prefix of 4 or more, or its name\"}"
#define S_NAME(what)                                                                     \
	"{\"type\": \"string\", \"minLength\": 1, \"maxLength\": 63, \"description\": \"" what \
	"\"}"
#define S_STRS(n, len) "{\"type\": \"array\", \"maxItems\": " #n ", \"items\": {\"type\": \"string\", \"maxLength\": " #len "}}"
#define S_RUNNER(what)                                                                   \
	"\"runner\": {\"type\": \"string\", \"minLength\": 1, \"maxLength\": 31, "       \
	"\"description\": \"" what "\"}"
#define S_AT                                                                             \
	"\"snapshot\": {\"type\": \"string\", \"maxLength\": 15, \"description\": \"a snapshot "  \
	"id (sN); default: the newest\"}, \"at\": {\"type\": \"integer\", \"minimum\": 1, "    \
	"\"description\": \"the newest snapshot at or before this offset of the record\"}"

static const struct sb_mcp_tool tools[] = {
    {"run_start",
     "Start a run in a new microVM: a prompt for the template's agent, or a command. "
     "Returns the run id at once; follow it with wait and events_read.",
     "{\"type\": \"object\", \"additionalProperties\": false, \"properties\": {"
     "\"template\": " S_NAME("the template (default shell)") ", "
     "\"prompt\": {\"type\": \"string\", \"minLength\": 1, \"maxLength\": 65536, "
     "\"description\": \"the task for the template's agent; not with command\"}, "
     "\"command\": {\"type\": \"array\", \"minItems\": 1, \"maxItems\": 64, \"items\": "
     "{\"type\": \"string\", \"maxLength\": 4096}, \"description\": \"argv to run "
     "instead of an agent, e.g. [\\\"sh\\\", \\\"-c\\\", \\\"make test\\\"]\"}, "
     "\"name\": " S_NAME("the run's name (unique among live runs)") ", "
     "\"group\": " S_NAME("a group to put the run in") ", "
     "\"model\": " S_NAME("the model (default: the settings')") ", "
     "\"models\": " S_STRS(63, 63) ", "
     "\"budget_usd\": {\"type\": \"number\", \"exclusiveMinimum\": 0, \"maximum\": 1000000, "
     "\"description\": \"hard LLM budget in USD\"}, "
     "\"on_budget\": {\"type\": \"string\", \"enum\": [\"stop\", \"continue\"]}, "
     "\"cpus\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 64}, "
     "\"memory_mib\": {\"type\": \"integer\", \"minimum\": 64, \"maximum\": 1048576}, "
     "\"timeout_s\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 31536000}, "
     "\"env\": {\"type\": \"object\", \"additionalProperties\": {\"type\": \"string\", "
     "\"maxLength\": 65536}, \"description\": \"environment for the harness\"}, "
     "\"secrets\": " S_STRS(64, 80) ", "
     "\"network\": {\"type\": \"string\", \"enum\": [\"none\", \"acl\"]}, "
     "\"allow\": " S_STRS(64, 300) ", "
     "\"accel\": {\"type\": \"string\", \"enum\": [\"auto\", \"kvm\", \"tcg\"]}, "
     "\"snapshots\": {\"type\": \"string\", \"enum\": [\"turn\", \"stop\", \"off\"]}, "
     S_RUNNER("the daemon's runner to run on (default local)") ", "
     "\"inputs\": {\"type\": \"array\", \"maxItems\": 64, \"description\": \"files put in "
     "/workspace before the run starts (48 MiB in all)\", \"items\": {\"type\": \"object\", "
     "\"additionalProperties\": false, \"required\": [\"path\"], \"properties\": {"
     "\"path\": {\"type\": \"string\", \"minLength\": 1, \"maxLength\": 1024, "
     "\"description\": \"relative to /workspace (or /workspace/...), no ..\"}, "
     "\"content\": {\"type\": \"string\", \"description\": \"the file's text\"}, "
     "\"content_base64\": {\"type\": \"string\", \"description\": \"the file's bytes, "
     "base64; instead of content\"}, "
     "\"mode\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 511, "
     "\"description\": \"permission bits (default 0644)\"}}}}}}",
     0, mcp_tool_run_start},
    {"group_start",
     "Start a group of runs from a group file's YAML (name, goal, budget, defaults, "
     "runs); returns the group and its run ids. Follow it with wait {group}.",
     "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"yaml\"], "
     "\"properties\": {\"yaml\": {\"type\": \"string\", \"minLength\": 1, \"maxLength\": "
     "1048576, \"description\": \"the group file's content\"}, "
     "\"name\": " S_NAME("the group's name instead of the file's") "}}",
     0, mcp_tool_group_start},
    {"runs_list",
     "List runs, newest first, with status, cost and progress; filter by status, group "
     "or a part of the name.",
     "{\"type\": \"object\", \"additionalProperties\": false, \"properties\": {"
     "\"status\": {\"type\": \"string\", \"enum\": [\"live\", \"created\", \"queued\", "
     "\"running\", \"exited\", \"stopped\", \"timeout\", \"budget\", \"failed\"]}, "
     "\"group\": " S_NAME("only this group's runs") ", "
     "\"name\": {\"type\": \"string\", \"maxLength\": 63}, "
     "\"limit\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 1000}}}",
     1, mcp_tool_runs_list},
    {"groups_list", "List run groups with their counts (live, queued, done, failed) and cost.",
     "{\"type\": \"object\", \"additionalProperties\": false, \"properties\": {}}", 1,
     mcp_tool_groups_list},
    {"events_read",
     "Read a run's recorded events from an offset (output, tool calls, files, its end); "
     "returns them and the next offset to read from.",
     "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"run\"], "
     "\"properties\": {" S_RUN ", "
     "\"from\": {\"type\": \"integer\", \"minimum\": 0, \"description\": \"the first offset "
     "(default: the start)\"}, "
     "\"types\": {\"type\": \"array\", \"maxItems\": 32, \"items\": {\"type\": \"string\", "
     "\"minLength\": 1, \"maxLength\": 39}, \"description\": \"event types or prefixes, "
     "e.g. agent.output, run.\"}, "
     "\"limit\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 1000}}}",
     1, mcp_tool_events_read},
    {"wait",
     "Wait until runs (or a group's runs) have ended, for at most timeout_s; returns each "
     "run's status, and when some are still live, says to call wait again.",
     "{\"type\": \"object\", \"additionalProperties\": false, \"properties\": {"
     "\"runs\": {\"type\": \"array\", \"minItems\": 1, \"maxItems\": 256, \"items\": "
     "{\"type\": \"string\", \"minLength\": 1, \"maxLength\": 63}}, "
     "\"group\": " S_NAME("a group's runs") ", "
     "\"timeout_s\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 3600, "
     "\"description\": \"how long to wait (default 30)\"}}}",
     1, mcp_tool_wait},
    {"fs_read",
     "Read a file of a run's disk (its current disk, or a snapshot's): text, or base64 "
     "for bytes that are not UTF-8; offset and length page through a large file.",
     "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"run\", "
     "\"path\"], \"properties\": {" S_RUN ", "
     "\"path\": {\"type\": \"string\", \"minLength\": 1, \"maxLength\": 4095, "
     "\"description\": \"a guest path; relative ones are under /workspace\"}, "
     "\"offset\": {\"type\": \"integer\", \"minimum\": 0}, "
     "\"length\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 1048576, "
     "\"description\": \"bytes to read (default 65536)\"}, " S_AT "}}",
     1, mcp_tool_fs_read},
    {"fs_list",
     "List a directory of a run's disk (its current disk, or a snapshot's): name, type, "
     "size, mode, time.",
     "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"run\"], "
     "\"properties\": {" S_RUN ", "
     "\"path\": {\"type\": \"string\", \"minLength\": 1, \"maxLength\": 4095, "
     "\"description\": \"default /workspace\"}, "
     "\"offset\": {\"type\": \"integer\", \"minimum\": 0, \"description\": \"entries to "
     "skip\"}, \"limit\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 5000}, "
     S_AT "}}",
     1, mcp_tool_fs_list},
    {"diff",
     "The files a run added (A), modified (M) or deleted (D) between two offsets of its "
     "record.",
     "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"run\"], "
     "\"properties\": {" S_RUN ", \"from\": {\"type\": \"integer\", \"minimum\": 0}, "
     "\"to\": {\"type\": \"integer\", \"minimum\": 0}}}",
     1, mcp_tool_diff},
    {"stop", "Stop a run, or every live run of a group; they end with status stopped.",
     "{\"type\": \"object\", \"additionalProperties\": false, \"properties\": {" S_RUN ", "
     "\"group\": " S_NAME("a group") "}}",
     0, mcp_tool_stop},
    {"snapshot", "Take a snapshot of a running run's disk (and memory with memory: true).",
     "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"run\"], "
     "\"properties\": {" S_RUN ", \"memory\": {\"type\": \"boolean\"}}}",
     0, mcp_tool_snapshot},
    {"fork",
     "Fork a run from a snapshot into count new runs, each going on from there (with a "
     "new prompt if given).",
     "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"run\"], "
     "\"properties\": {" S_RUN ", " S_AT ", "
     "\"count\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 64}, "
     "\"name\": " S_NAME("the forks' name") ", "
     S_RUNNER("the runner to run on: the run's (the default), which holds its snapshots") ", "
     "\"prompt\": {\"type\": \"string\", \"minLength\": 1, \"maxLength\": 65536}}}",
     0, mcp_tool_fork},
    {"resume", "Resume a run that ended from a snapshot (its last by default).",
     "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"run\"], "
     "\"properties\": {" S_RUN ", " S_AT ", "
     S_RUNNER("the runner to run on: the run's (the default), which holds its snapshots") ", "
     "\"prompt\": {\"type\": \"string\", \"minLength\": 1, \"maxLength\": 65536}}}",
     0, mcp_tool_resume},
};

#define NTOOLS (sizeof tools / sizeof *tools)

static json_t *schemas[NTOOLS];
static pthread_once_t schemas_once = PTHREAD_ONCE_INIT;
static int schemas_bad;

static void schemas_load(void)
{
	json_error_t err;

	for (size_t i = 0; i < NTOOLS; i++)
		if (!(schemas[i] = json_loads(tools[i].schema, 0, &err))) {
			fprintf(stderr, "sanbox mcp: tool %s: bad schema: %s at %d\n",
				tools[i].name, err.text, err.position);
			schemas_bad = 1;
		}
}

int sb_mcp_tools_init(void)
{
	pthread_once(&schemas_once, schemas_load);
	return schemas_bad ? -1 : 0;
}

json_t *sb_mcp_tools_list(void)
{
	json_t *list = json_array();

	for (size_t i = 0; i < NTOOLS; i++)
		json_array_append_new(
		    list, json_pack("{s:s, s:s, s:O, s:{s:b, s:b}}", "name", tools[i].name,
				    "description", tools[i].description, "inputSchema", schemas[i],
				    "annotations", "readOnlyHint", tools[i].readonly,
				    "openWorldHint", 0));
	return json_pack("{s:o}", "tools", list);
}

/* A CallToolResult: text (and structured, an object, stolen) or an error. */
static json_t *tool_result(json_t *structured, const char *error)
{
	char *text;
	json_t *res;

	if (error)
		return json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", error,
				 "isError", 1);
	if (!(text = json_dumps(structured, JSON_COMPACT))) {
		json_decref(structured);
		return tool_result(NULL, "out of memory");
	}
	res = json_pack("{s:[{s:s, s:s}], s:o}", "content", "type", "text", "text", text,
			"structuredContent", structured);
	free(text);
	return res;
}

json_t *sb_mcp_tool_call(struct sb_mcp_call *call, const char *name, const json_t *args)
{
	json_t *empty = NULL, *out = NULL;
	char msg[1200];
	int rc;

	for (size_t i = 0; i < NTOOLS; i++) {
		if (strcmp(tools[i].name, name))
			continue;
		if (!args)
			args = empty = json_object();
		sb_clearerr();
		if ((rc = sb_mcp_schema_check(schemas[i], args)) == SB_OK &&
		    (rc = tools[i].fn(call, args, &out)) == SB_OK && !json_is_object(out)) {
			json_decref(out);
			rc = sb_seterr(SB_ERR_NOMEM, "out of memory");
		}
		json_decref(empty);
		if (rc == SB_OK)
			return tool_result(out, NULL);
		snprintf(msg, sizeof msg, "%s", sb_errmsg(rc));
		fprintf(stderr, "sanbox mcp: %s: %s\n", name, msg);
		return tool_result(NULL, msg);
	}
	return NULL;
}
