/* test_groupfile.c - group files: the example read into the specs `sanbox
 * run` would send, defaults merged, every field's position, and hostile or
 * broken files refused with the exact line, column and path.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/groupfile.h"
#include "engine/error.h"
#include "engine/mpack.h"
#include "engine/payload.h"
#include "tests/unit/testutil.h"

#define EXAMPLE "tests/unit/group_example.yaml" /* tests run from the source tree */
#define DEMO	"examples/acquisition.yaml"	    /* the README's first command */

/* Writes len bytes of text to DIR/name; returns the path (static). */
static const char *put_n(void **state, const char *name, const char *text, size_t len)
{
	static char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", (const char *)*state, name);
	assert_non_null(f = fopen(path, "w"));
	assert_int_equal(fwrite(text, 1, len, f), len);
	fclose(f);
	return path;
}

static const char *put(void **state, const char *name, const char *text)
{
	return put_n(state, name, text, strlen(text));
}

/* Loads path, which must be refused with rc and the error line want, where
 * "F" stands for the path. */
static void refused(const char *path, int rc, const char *want)
{
	struct cli_group *g = (struct cli_group *)1;
	char line[1024];

	assert_true(want[0] == 'F');
	snprintf(line, sizeof line, "%s%s", path, want + 1);
	assert_int_equal(cli_group_load(path, &g), rc);
	assert_null(g);
	assert_string_equal(sb_errmsg(rc), line);
}

/* Writes text as group.yaml and checks it is refused with want. */
static void bad(void **state, const char *text, const char *want)
{
	refused(put(state, "group.yaml", text), SB_ERR_INVAL, want);
}

/* Packs run i of g and checks its spec, field by field, against the JSON
 * object want. */
static void spec_is(const struct cli_group *g, size_t i, const char *want)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_zone zone;
	msgpack_object o;
	json_error_t err;
	json_t *w = json_loads(want, 0, &err), *got, *v;
	const char *k;

	if (!w)
		fail_msg("bad test JSON: %s", err.text);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	assert_int_equal(cli_group_pack_spec(g, i, &pk), SB_OK);
	msgpack_zone_init(&zone, 4096);
	assert_int_equal(msgpack_unpack(sb.data, sb.size, NULL, &zone, &o),
			 MSGPACK_UNPACK_SUCCESS);
	assert_int_equal(o.type, MSGPACK_OBJECT_MAP);
	got = sb_msgpack_to_json(&o);
	json_object_foreach(w, k, v)
	{
		if (!json_equal(v, json_object_get(got, k)))
			fail_msg("run %zu: field %s is %s, not %s", i, k,
				 json_dumps(json_object_get(got, k), JSON_ENCODE_ANY),
				 json_dumps(v, JSON_ENCODE_ANY));
	}
	assert_int_equal(json_object_size(got), json_object_size(w));
	json_decref(got);
	json_decref(w);
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&sb);
}

/* Checks where path is: line, col and the path written in the file. */
static void at(const struct cli_group *g, const char *path, unsigned line, unsigned col,
	       const char *written)
{
	const struct cli_group_pos *p = cli_group_find(g, path);

	assert_non_null(p);
	if (p->line != line || p->col != col || strcmp(p->at, written))
		fail_msg("%s: at %s %u:%u, not %s %u:%u", path, p->at, p->line, p->col,
			 written, line, col);
}

static int setup(void **state)
{
	*state = tu_tmpdir();
	return 0;
}

static int teardown(void **state)
{
	tu_rmrf(*state);
	return 0;
}

/* The example: four runs, each spec as `sanbox run` would send it, with
 * the group's budget. */
static void test_example(void **state)
{
	struct cli_group *g;

	(void)state;
	if (cli_group_load(EXAMPLE, &g))
		fail_msg("%s", sb_errmsg(SB_ERR_INVAL));
	assert_string_equal(g->name, "acquisition");
	assert_string_equal(g->goal, "evaluate an acquisition");
	assert_int_equal(g->budget, 4000000000ull);
	assert_int_equal(g->nruns, 4);
	spec_is(g, 0,
		"{\"template\": \"shell\", \"name\": \"Financials\", \"group\": "
		"\"acquisition\","
		" \"model\": \"stub/scripted\", \"models\": [], \"snapshots\": \"turn\","
		" \"argv\": [], \"prompt\": \"Read the target's financial statements and "
		"summarise revenue, margins, cash flow and debt.\", \"env\": "
		"[\"DEAL=acme-2025\","
		" \"CURRENCY=USD\"], \"secrets\": [], \"cpus\": 2, \"memory_mib\": 512,"
		" \"timeout_s\": 600, \"budget_nusd\": 1000000000, \"inputs\": [], "
		"\"group_budget_nusd\": 4000000000}");
	spec_is(
	    g, 1,
	    "{\"template\": \"shell\", \"name\": \"Contract risks\", \"group\": "
	    "\"acquisition\", \"model\": \"stub/echo\", \"models\": [], \"on_budget\": "
	    "\"stop\", \"snapshots\": \"turn\", \"argv\": [], \"prompt\": \"List the "
	    "change-of-control, exclusivity and termination clauses.\", \"env\": "
	    "[\"DEAL=acme-2025-contracts\", \"CURRENCY=USD\"], \"secrets\": [], "
	    "\"cpus\": 0,"
	    " \"memory_mib\": 256, \"timeout_s\": 900, \"budget_nusd\": 750000000,"
	    " \"inputs\": [], \"group_budget_nusd\": 4000000000}");
	spec_is(
	    g, 2,
	    "{\"template\": \"shell\", \"name\": \"Market scan\", \"group\": "
	    "\"acquisition\","
	    " \"model\": \"stub/scripted\", \"models\": [\"stub/slow\"], \"snapshots\": "
	    "\"turn\", \"argv\": [], \"prompt\": \"Size the target's market and name its "
	    "five main competitors.\", \"env\": [\"DEAL=acme-2025\", \"CURRENCY=USD\"],"
	    " \"secrets\": [], \"cpus\": 1, \"memory_mib\": 256, \"timeout_s\": 1200,"
	    " \"budget_nusd\": 1250000000, \"record_quota\": 268435456, \"inputs\": [], "
	    "\"group_budget_nusd\": 4000000000}");
	spec_is(
	    g, 3,
	    "{\"template\": \"shell\", \"name\": \"Security posture\", \"group\": "
	    "\"acquisition\", \"model\": \"stub/scripted\", \"models\": [], "
	    "\"snapshots\": "
	    "\"stop\", \"network\": \"none\", \"argv\": [\"/usr/bin/sanbox-harness\", "
	    "\"Review the target's security posture.\"], \"prompt\": \"\", \"env\": "
	    "[\"DEAL=acme-2025\", \"CURRENCY=USD\"], \"secrets\": [], \"cpus\": 0,"
	    " \"memory_mib\": 1024, \"timeout_s\": 300, \"budget_nusd\": 500000000,"
	    " \"inputs\": [], \"group_budget_nusd\": 4000000000}");
	/* labels stay beside the spec: the defaults' and the run's own */
	assert_int_equal(g->runs[0].nlabels, 2);
	assert_string_equal(g->runs[0].labels[0].key, "team");
	assert_string_equal(g->runs[0].labels[0].value, "corp-dev");
	assert_string_equal(g->runs[0].labels[1].key, "area");
	assert_string_equal(g->runs[0].labels[1].value, "finance");
	assert_int_equal(g->runs[3].nlabels, 1);
	assert_int_equal(cli_group_pack_spec(g, 4, NULL), SB_ERR_INVAL);
	cli_group_free(g);
}

/* The demo the README starts: four runs, each on its own scripted job,
 * sharing the group's budget. */
static void test_demo(void **state)
{
	static const char *const names[] = {"Financials", "Contract risks", "Market scan",
					    "Security posture"};
	static const char *const models[] = {"stub/financials", "stub/contracts",
					     "stub/market", "stub/security"};
	struct cli_group *g;

	(void)state;
	if (cli_group_load(DEMO, &g))
		fail_msg("%s", sb_errmsg(SB_ERR_INVAL));
	assert_string_equal(g->name, "acquisition");
	assert_int_equal(g->nruns, 4);
	assert_int_equal(g->budget, 2000000000ull);
	for (size_t i = 0; i < 4; i++) {
		assert_string_equal(g->runs[i].spec.name, names[i]);
		assert_true(g->runs[i].spec.models.n >= 1);
		assert_string_equal(g->runs[i].spec.models.v[0], models[i]);
		assert_int_equal(g->runs[i].spec.group_budget, 2000000000ull);
	}
	cli_group_free(g);
}

/* Where each field of the example is; defaults stand for the runs they
 * fill; an unknown path falls back to its nearest known ancestor. */
static void test_positions(void **state)
{
	struct cli_group *g;
	char line[256];

	(void)state;
	assert_int_equal(cli_group_load(EXAMPLE, &g), SB_OK);
	at(g, "name", 5, 7, "name");
	at(g, "goal", 6, 7, "goal");
	at(g, "defaults.memory", 12, 11, "defaults.memory");
	at(g, "runs[2].budget", 44, 13, "runs[2].budget");
	at(g, "runs[2].models[1]", 43, 29, "runs[2].models[1]");
	at(g, "runs[3].harness[1]", 57, 40, "runs[3].harness[1]");
	at(g, "runs[1].memory", 12, 11, "defaults.memory"); /* its default */
	at(g, "runs[0].memory", 26, 13, "runs[0].memory");  /* its own */
	at(g, "runs[1].env.CURRENCY", 17, 15, "defaults.env.CURRENCY");
	at(g, "runs[1].env.DEAL", 40, 13, "runs[1].env.DEAL");
	at(g, "runs[2].cpus.what", 45, 11, "runs[2].cpus");
	at(g, "runs[2].nosuch", 42, 5, "runs[2]");
	at(g, "nosuch[3]", 5, 1, "");
	cli_group_error(g, "runs[1].memory", "memory above the host's", line,
			sizeof line);
	assert_string_equal(line,
			    EXAMPLE ":12:11: runs[1].memory: memory above the host's");
	cli_group_error(g, "", "refused", line, sizeof line);
	assert_string_equal(line, EXAMPLE ":5:1: refused");
	cli_group_free(g);
}

/* Defaults under each run: the run's own field wins (harness and prompt,
 * model and models are one field each), env and labels merge key by key,
 * an empty list clears the defaults' list. */
static void test_defaults(void **state)
{
	struct cli_group *g;
	const char *path = put(state, "d.yaml",
			       "name: d\n"
			       "defaults:\n"
			       "  template: box\n"
			       "  harness: make test\n"
			       "  model: stub/echo\n"
			       "  cpus: 2\n"
			       "  secrets: [TOKEN]\n"
			       "  env: {A: '1', B: 2}\n"
			       "  allow: [example.com:443]\n"
			       "  network: acl\n"
			       "runs:\n"
			       "  - name: one\n"
			       "  - name: two\n"
			       "    prompt: fix it\n"
			       "    models: [stub/scripted, stub/slow]\n"
			       "    secrets: []\n"
			       "    env: {B: three, C: x=y}\n"
			       "    accel: tcg\n");

	assert_int_equal(cli_group_load(path, &g), SB_OK);
	assert_null(g->goal);
	assert_int_equal(g->budget, 0);
	spec_is(
	    g, 0,
	    "{\"template\": \"box\", \"name\": \"one\", \"group\": \"d\", \"model\": "
	    "\"stub/echo\", \"models\": [], \"network\": \"acl\", \"allow\": "
	    "[\"example.com:443\"], \"argv\": [\"/bin/sh\", \"-c\", \"make test\"], "
	    "\"prompt\": \"\", \"env\": [\"A=1\", \"B=2\"], \"secrets\": [\"TOKEN\"], "
	    "\"cpus\": 2, \"memory_mib\": 0, \"timeout_s\": 0, \"budget_nusd\": 0, "
	    "\"inputs\": []}");
	spec_is(g, 1,
		"{\"template\": \"box\", \"name\": \"two\", \"group\": \"d\", \"model\": "
		"\"stub/scripted\", \"models\": [\"stub/slow\"], \"accel\": \"tcg\", "
		"\"network\": \"acl\", \"allow\": [\"example.com:443\"], \"argv\": [], "
		"\"prompt\": \"fix it\", \"env\": [\"A=1\", \"B=three\", \"C=x=y\"], "
		"\"secrets\": [], \"cpus\": 2, \"memory_mib\": 0, \"timeout_s\": 0, "
		"\"budget_nusd\": 0, \"inputs\": []}");
	cli_group_free(g);
}

/* A run that is fine, to put beside a broken one. */
#define RUN_OK "  - name: ok\n    prompt: fine\n"

/* runner: the group's (top level) is every run's default, as
 * defaults.runner would be (not both); a run's own wins; each is checked
 * as a name; the daemon's refusal of one points at where it was given. */
static void test_runner(void **state)
{
	struct cli_group *g;
	char line[512], want[512];
	const char *path = put(state, "r.yaml",
			       "name: r\n"
			       "runner: far\n"
			       "runs:\n"
			       "  - name: one\n"
			       "    prompt: x\n"
			       "  - name: two\n"
			       "    prompt: y\n"
			       "    runner: local\n");

	assert_int_equal(cli_group_load(path, &g), SB_OK);
	spec_is(g, 0,
		"{\"template\": \"shell\", \"name\": \"one\", \"group\": \"r\", "
		"\"runner\": \"far\", \"argv\": [], "
		"\"prompt\": \"x\", \"env\": [], \"secrets\": [], \"cpus\": 0, "
		"\"memory_mib\": 0, \"timeout_s\": 0, \"budget_nusd\": 0, \"inputs\": []}");
	spec_is(g, 1,
		"{\"template\": \"shell\", \"name\": \"two\", \"group\": \"r\", "
		"\"runner\": \"local\", \"argv\": [], "
		"\"prompt\": \"y\", \"env\": [], \"secrets\": [], \"cpus\": 0, "
		"\"memory_mib\": 0, \"timeout_s\": 0, \"budget_nusd\": 0, \"inputs\": []}");
	at(g, "runs[0].runner", 2, 9, "runner");
	at(g, "runs[1].runner", 8, 13, "runs[1].runner");
	assert_int_equal(cli_group_run_error(g, "runs[0]: no runner 'far' here: this daemon "
						"has local", line, sizeof line), 1);
	snprintf(want, sizeof want,
		 "%s:2:9: runs[0].runner: no runner 'far' here: this daemon has local", path);
	assert_string_equal(line, want);
	assert_int_equal(cli_group_run_error(g, "runs[1]: it does not fit", line, sizeof line),
			 1);
	snprintf(want, sizeof want, "%s:6:5: runs[1]: it does not fit", path);
	assert_string_equal(line, want);
	cli_group_free(g);

	bad(state, "name: g\nrunner: a\ndefaults:\n  runner: b\nruns:\n" RUN_OK,
	    "F:4:3: defaults.runner: give runner or defaults.runner, not both");
	bad(state, "name: g\nrunner: ''\nruns:\n" RUN_OK,
	    "F:2:9: runner: a runner's name has 1 to 31 bytes, not 0");
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n    runner: "
		   "abcdefghijklmnopqrstuvwxyz012345\n",
	    "F:5:13: runs[0].runner: a runner's name has 1 to 31 bytes, not 32");
	bad(state, "name: g\ndefaults:\n  runner: [a]\nruns:\n" RUN_OK,
	    "F:3:11: defaults.runner: must be a runner's name, not a list");
}

/* Inputs: relative paths from the file's folder, checked when the file is
 * read and read when a spec is packed. */
static void test_inputs(void **state)
{
	char want[PATH_MAX + 128], sub[PATH_MAX];
	struct cli_group *g;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_zone zone;
	msgpack_object o;
	const msgpack_object *ins, *d;
	const char *path;

	snprintf(sub, sizeof sub, "%s/in", (const char *)*state);
	assert_int_equal(mkdir(sub, 0700), 0);
	put(state, "in/data.csv", "a,b\n1,2\n");
	path = put(
	    state, "in/g.yaml",
	    "name: g\nruns:\n  - name: r\n    prompt: read it\n    inputs: [data.csv]\n");
	assert_int_equal(cli_group_load(path, &g), SB_OK);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	assert_int_equal(cli_group_pack_spec(g, 0, &pk), SB_OK);
	msgpack_zone_init(&zone, 4096);
	assert_int_equal(msgpack_unpack(sb.data, sb.size, NULL, &zone, &o),
			 MSGPACK_UNPACK_SUCCESS);
	ins = sb_map_get(&o, "inputs");
	assert_non_null(ins);
	assert_int_equal(ins->via.array.size, 1);
	assert_true(
	    sb_obj_is_str(sb_map_get(&ins->via.array.ptr[0], "path"), "data.csv"));
	d = sb_map_get(&ins->via.array.ptr[0], "data");
	assert_int_equal(d->type, MSGPACK_OBJECT_BIN);
	assert_memory_equal(d->via.bin.ptr, "a,b\n1,2\n", d->via.bin.size);
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&sb);
	/* gone since: the error points at the input's line */
	snprintf(want, sizeof want,
		 "%s:5:14: runs[0].inputs[0]: input %s/data.csv: No such "
		 "file or directory",
		 path, sub);
	remove(strcat(sub, "/data.csv"));
	msgpack_sbuffer_init(&sb);
	assert_int_equal(cli_group_pack_spec(g, 0, &pk), SB_ERR_NOTFOUND);
	assert_string_equal(sb_errmsg(SB_ERR_NOTFOUND), want);
	msgpack_sbuffer_destroy(&sb);
	cli_group_free(g);
	/* and refused when the file is read */
	snprintf(sub, sizeof sub, "F%s", want + strlen(path));
	refused(path, SB_ERR_NOTFOUND, sub);
}

/* YAML that libyaml refuses: the line and column it says, and the path
 * the parser was in. */
static void test_bad_yaml(void **state)
{
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n     budget: 1\n",
	    "F:5:12: runs[0]: mapping values are not allowed in this context");
	bad(state, "name: g\nruns: [a, b\n",
	    "F:3:1: runs[2]: did not find expected ',' or ']' (while parsing a flow "
	    "sequence at "
	    "line 2, column 7)");
	bad(state, "name: \"g\n",
	    "F:2:1: name: found unexpected end of stream (while scanning a "
	    "quoted scalar at line 1, column 7)");
	bad(state, "name: g\nruns:\n" RUN_OK "  - name: a\n    prompt: x\xff\n",
	    "F:6:14: runs[1]: invalid leading UTF-8 octet (0xFF)");
	bad(state, "name: g\n---\nname: h\n",
	    "F:2:1: a group file holds one YAML document");
	bad(state, "",
	    "F:1:1: the file holds no YAML document: a group file has a name and runs");
	bad(state, "# nothing\n",
	    "F:1:1: the file holds no YAML document: a group file has a name and runs");
	bad(state, "- name: g\n",
	    "F:1:1: must be a map of the group's fields, not a list");
	bad(state, "name: g\nname: h\nruns:\n" RUN_OK,
	    "F:2:1: name: given twice (first at line 1, column 1)");
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n    name: b\n",
	    "F:5:5: runs[0].name: given twice (first at line 3, column 5)");
	bad(state, "name: g\n[a]: b\nruns:\n" RUN_OK,
	    "F:2:1: a key must be a string, not a list");
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: \"x\\0y\"\n",
	    "F:4:13: runs[0].prompt: a string holds a NUL byte");
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: !foo x\n",
	    "F:4:13: runs[0].prompt: tag !foo is not allowed here (a group file takes "
	    "!!str, "
	    "!!int, !!float, !!bool and !!null on values)");
	bad(state, "name: g\nruns: !!map [a]\n",
	    "F:2:7: runs: tag tag:yaml.org,2002:map is not allowed here (a group file "
	    "takes "
	    "!!str, !!int, !!float, !!bool and !!null on values)");
}

/* Fields that do not exist, with the nearest one named. */
static void test_unknown_fields(void **state)
{
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n    budgte: 1\n",
	    "F:5:5: runs[0].budgte: a run has no field 'budgte'; did you mean 'budget'?");
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n    snapshot: off\n",
	    "F:5:5: runs[0].snapshot: a run has no field 'snapshot'; did you mean "
	    "'snapshots'?");
	bad(state, "name: g\nrun:\n" RUN_OK,
	    "F:2:1: run: a group file has no field 'run'; did you mean 'runs'?");
	bad(state, "name: g\nowner: me\nruns:\n" RUN_OK,
	    "F:2:1: owner: a group file has no field 'owner'");
	bad(state, "name: g\ndefaults:\n  memroy: 1G\nruns:\n" RUN_OK,
	    "F:3:3: defaults.memroy: a run has no field 'memroy'; did you mean "
	    "'memory'?");
	bad(state, "name: g\ndefaults:\n  name: x\nruns:\n" RUN_OK,
	    "F:3:3: defaults.name: defaults cannot give a name: each run names itself");
}

/* Values of the wrong type. */
static void test_wrong_types(void **state)
{
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n    cpus: [1]\n",
	    "F:5:11: runs[0].cpus: must be a number, not a list");
	bad(state, "name: g\nruns: {a: 1}\n",
	    "F:2:7: runs: must be a list of runs, not a map");
	bad(state, "name: g\nruns:\n  - just a prompt\n",
	    "F:3:5: runs[0]: must be a map of a run's fields, not a string");
	bad(state, "name:\nruns:\n" RUN_OK, "F:1:6: name: must be a name, not empty");
	bad(state, "name: [g]\nruns:\n" RUN_OK,
	    "F:1:7: name: must be a name, not a list");
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n    env: {DEBUG: true}\n",
	    "F:5:18: runs[0].env.DEBUG: must be a string, not a boolean (quote it to "
	    "mean the "
	    "word)");
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n    env: [A=1]\n",
	    "F:5:10: runs[0].env: must be a map of names to values, not a list");
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n    secrets: TOKEN\n",
	    "F:5:14: runs[0].secrets: must be a list of secrets, not a string");
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n    allow: [[a]]\n",
	    "F:5:13: runs[0].allow[0]: must be a string, not a list");
	bad(state, "name: g\ndefaults: [cpus]\nruns:\n" RUN_OK,
	    "F:2:11: defaults: must be a map of a run's fields, not a list");
	bad(state,
	    "name: g\nruns:\n  - name: a\n    prompt: x\n    labels: {team: !!null x}\n",
	    "F:5:20: runs[0].labels.team: must be a string, not empty");
}

/* Values `sanbox run` refuses, refused with the same parsers. */
static void test_bad_values(void **state)
{
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n    budget: -1\n",
	    "F:5:13: runs[0].budget: '-1' is not a positive amount of USD (at most "
	    "$1000000)");
	bad(state, "name: g\nbudget: 0\nruns:\n" RUN_OK,
	    "F:2:9: budget: '0' is not a positive amount of USD (at most $1000000)");
	bad(state, "name: g\nbudget: $\nruns:\n" RUN_OK,
	    "F:2:9: budget: '$' is not a positive amount of USD (at most $1000000)");
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n    cpus: 0\n",
	    "F:5:11: runs[0].cpus: '0' is not a number from 1 to 64");
	bad(state, "name: g\ndefaults:\n  memory: 1M\nruns:\n" RUN_OK,
	    "F:3:11: defaults.memory: memory 1M is below the 64 MiB minimum");
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n    memory: lots\n",
	    "F:5:13: runs[0].memory: 'lots' is not a size (e.g. 64K, 256M, 2G)");
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n    timeout: 0\n",
	    "F:5:14: runs[0].timeout: '0' is not a duration (e.g. 90, 90s, 10m, 8h)");
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n    record_quota: 2T\n",
	    "F:5:19: runs[0].record_quota: size 2T is above 1099511627776 bytes");
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n    on_budget: pause\n",
	    "F:5:16: runs[0].on_budget: 'pause' is not stop or continue");
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n    snapshots: never\n",
	    "F:5:16: runs[0].snapshots: 'never' is not turn, stop or off");
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n    accel: fast\n",
	    "F:5:12: runs[0].accel: accelerator \"fast\" (auto, kvm or tcg)");
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n    network: open\n",
	    "F:5:14: runs[0].network: network must be none or acl");
	bad(state,
	    "name: g\nruns:\n  - name: a\n    prompt: x\n    allow: [a.test:80, zz]\n",
	    "F:5:24: runs[0].allow[1]: grant 'zz': no port (HOST:PORT)");
	bad(state,
	    "name: g\nruns:\n  - name: a\n    prompt: x\n    allow: [a.test:80, "
	    "A.TEST:80]\n",
	    "F:5:24: runs[0].allow[1]: grants what runs[0].allow[0] grants already");
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n    env: {A=B: c}\n",
	    "F:5:11: runs[0].env.A=B: a variable's name must not be empty nor hold '='");
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: ''\n",
	    "F:4:13: runs[0].prompt: must not be empty");
	bad(state, "name: g\nruns:\n  - name: a\n    harness: []\n",
	    "F:4:14: runs[0].harness: must not be an empty list");
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n    models: []\n",
	    "F:5:13: runs[0].models: must not be an empty list");
}

/* The group's structure: names, runs, harness or prompt. */
static void test_bad_structure(void **state)
{
	char *many = malloc(300 * sizeof RUN_OK + 64), *p;

	bad(state, "name: g\nruns:\n  - name: a\n    prompt: x\n    harness: ls\n",
	    "F:5:5: runs[0].harness: give prompt or harness, not both");
	bad(state,
	    "name: g\nruns:\n  - name: a\n    model: m\n    models: [n]\n    prompt: x\n",
	    "F:5:5: runs[0].models: give model or models, not both");
	bad(state, "name: g\nruns: []\n",
	    "F:2:7: runs: must list 1 to 256 runs, not none");
	bad(state, "name: g\n", "F:1:1: runs: missing: a group file lists its runs");
	bad(state, "runs:\n" RUN_OK,
	    "F:1:1: name: missing: a group file names its group");
	bad(state, "name: g\nruns:\n  - prompt: a\n",
	    "F:3:5: runs[0].name: missing: every run has a name");
	bad(state, "name: g\nruns:\n  - name: a\n    cpus: 1\n",
	    "F:3:5: runs[0]: a run needs a harness or a prompt (its own or from "
	    "defaults)");
	bad(state,
	    "name: g\nruns:\n  - name: a\n    prompt: x\n  - name: b\n    prompt: y\n"
	    "  - name: a\n    prompt: z\n",
	    "F:7:11: runs[2].name: runs[0] is named 'a' too (line 3)");
	bad(state,
	    "name: "
	    "0123456789012345678901234567890123456789012345678901234567890123"
	    "\nruns:\n" RUN_OK,
	    "F:1:7: name: a name has 1 to 63 bytes, not 64");
	bad(state, "name: g\ngoal: ''\nruns:\n  - name: ''\n    prompt: x\n",
	    "F:4:11: runs[0].name: a name has 1 to 63 bytes, not 0");
	assert_non_null(many);
	p = many + sprintf(many, "name: g\nruns:\n");
	for (int i = 0; i < 257; i++)
		p += sprintf(p, "  - name: r%d\n    prompt: x\n", i);
	bad(state, many, "F:515:5: runs: a group has at most 256 runs");
	free(many);
}

/* Control and bidirectional characters in names, escaped or raw. */
static void test_control_bytes(void **state)
{
	bad(state, "name: g\nruns:\n  - name: \"red\\e[31m\"\n    prompt: x\n",
	    "F:3:11: runs[0].name: the name has control character U+001B at byte 3");
	bad(state, "name: \"a\\u202Eb\"\nruns:\n" RUN_OK,
	    "F:1:7: name: the name has bidirectional control U+202E at byte 1");
	bad(state, "name: \"tab\\there\"\nruns:\n" RUN_OK,
	    "F:1:7: name: the name has control character U+0009 at byte 3");
	bad(state,
	    "name: g\nruns:\n  - name: a\n    prompt: x\n    labels: {\"k\\n\": v}\n",
	    "F:5:14: runs[0].labels.k\n: the name has control character U+000A at byte "
	    "1");
	/* a raw control byte is not YAML: libyaml's reader says where */
	bad(state, "name: g\nruns:\n  - name: a\x07z\n    prompt: x\n",
	    "F:3:12: runs[0]: control characters are not allowed (0x07)");
}

/* Files built to hurt: too big, too deep, an alias bomb. */
static void test_hostile(void **state)
{
	size_t big = 10u << 20;
	char *buf = malloc(big), deep[512];
	int n;

	assert_non_null(buf);
	memset(buf, '#', big);
	refused(
	    put_n(state, "big.yaml", buf, big), SB_ERR_TOOBIG,
	    "F:1:1: the file is 10485760 bytes; a group file is at most 1048576 (1 MiB)");
	free(buf);
	/* 100 lists in each other: refused at the 17th level, runs being the 2nd */
	n = snprintf(deep, sizeof deep, "name: g\nruns: ");
	for (int i = 0; i < 100; i++)
		deep[n++] = '[';
	for (int i = 0; i < 100; i++)
		deep[n++] = ']';
	deep[n] = 0;
	bad(state, deep,
	    "F:2:22: runs[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0]: lists and maps "
	    "nest "
	    "deeper than 16 levels");
	/* billion laughs: refused at its first anchor, before any alias */
	bad(state,
	    "name: lol\n"
	    "a: &a "
	    "[\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n"
	    "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
	    "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
	    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
	    "runs: [*d]\n",
	    "F:2:4: a: anchors (&a) are not allowed in a group file");
	bad(state, "name: g\nruns:\n  - name: a\n    prompt: *p\n",
	    "F:4:13: runs[0].prompt: aliases (*p) are not allowed in a group file");
	bad(state, "name: g\nruns:\n  - &r {name: a, prompt: x}\n",
	    "F:3:5: runs[0]: anchors (&r) are not allowed in a group file");
	refused("/nonexistent/g.yaml", SB_ERR_NOTFOUND, "F: No such file or directory");
	refused((const char *)*state, SB_ERR_INVAL, "F: not a regular file");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_demo),
	    cmocka_unit_test(test_example),
	    cmocka_unit_test(test_positions),
	    cmocka_unit_test_setup_teardown(test_defaults, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runner, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_inputs, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_yaml, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unknown_fields, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_wrong_types, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_values, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_structure, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_control_bytes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_hostile, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
