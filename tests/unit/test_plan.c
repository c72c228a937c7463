/* test_plan.c - the run plan: resolved from a spec, recorded, read back
 * from the record alone; the guest's SPEC made from the read-back plan
 * (inputs from the blob table) is the one made at the start.
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

#include "engine/error.h"
#include "engine/gateway/secrets.h"
#include "engine/home.h"
#include "engine/log/log.h"
#include "engine/mpack.h"
#include "engine/payload.h"
#include "engine/runs/plan.h"
#include "tests/unit/testutil.h"

#define RUN  "0123456789ab"
#define VKEY "sk-sb-0000000000000000000000000000000000000000"

struct fix {
	char *home;
	sb_log *log;
	sb_stubs *stubs;
};

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof *f);
	char path[PATH_MAX];

	f->home = tu_tmpdir();
	snprintf(path, sizeof path, "%s/templates/box", f->home);
	assert_int_equal(sb_mkdirs(path, 0700), SB_OK);
	snprintf(path, sizeof path, "%s/templates/box/template.json", f->home);
	write_file(
	    path,
	    "{\"name\":\"box\",\"hash\":\"feedface\",\"harness\":\"/usr/bin/agent\","
	    "\"kernel_version\":\"6.1.0\",\"cpus\":2,\"memory_mib\":256,\"timeout_s\":"
	    "600}");
	/* templates whose runs default to network acl, one with a bad grant */
	for (int k = 0; k < 2; k++) {
		static const char *const names[] = {"netbox", "badnet"};
		static const char *const allow[] = {"\"a.test:443\"", "\"x\""};
		char json[400];
		snprintf(path, sizeof path, "%s/templates/%s", f->home, names[k]);
		assert_int_equal(sb_mkdirs(path, 0700), SB_OK);
		snprintf(path, sizeof path, "%s/templates/%s/template.json", f->home, names[k]);
		snprintf(json, sizeof json,
			 "{\"name\":\"%s\",\"hash\":\"feedface\",\"harness\":\"/bin/a\","
			 "\"network\":\"acl\",\"allow\":[%s]}",
			 names[k], allow[k]);
		write_file(path, json);
	}
	for (int i = 0; i < 9; i++) {
		static const char *const dirs[] = {"box", "netbox", "badnet"};
		static const char *const files[] = {"vmlinux", "initrd.img",
						    "rootfs.img"};
		snprintf(path, sizeof path, "%s/templates/%s/%s", f->home, dirs[i / 3],
			 files[i % 3]);
		write_file(path, "");
	}
	/* a provider that is not the built-in stub: arming starts nothing */
	snprintf(path, sizeof path, "%s/models.json", f->home);
	write_file(
	    path,
	    "{\"default_model\":\"acme/m1\",\"providers\":{\"acme\":{\"base_url\":"
	    "\"http://127.0.0.1:1/v1\",\"api\":\"openai\",\"key_secret\":\"ACME_KEY\"}},"
	    "\"models\":{\"acme/m1\":{\"provider\":\"acme\",\"input\":1,\"output\":2},"
	    "\"acme/m2\":{\"provider\":\"acme\",\"input\":3,\"output\":4}}}");
	setenv("SANBOX_TEMPLATES", "", 1);
	unsetenv("SANBOX_TEMPLATES");
	assert_int_equal(sb_secret_set(f->home, "ACME_KEY", "provider-key", 12), SB_OK);
	assert_int_equal(sb_secret_set(f->home, "TEAM", "team-value", 10), SB_OK);
	{
		char huge[5000];
		memset(huge, 'h', sizeof huge);
		assert_int_equal(sb_secret_set(f->home, "HUGE", huge, sizeof huge), SB_OK);
	}
	snprintf(path, sizeof path, "%s/log", f->home);
	assert_int_equal(sb_mkdirs(path, 0700), SB_OK);
	assert_int_equal(sb_log_open(path, SB_LOG_NOSYNC, &f->log), SB_OK);
	assert_int_equal(sb_stubs_open(&f->stubs), SB_OK);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	sb_stubs_close(f->stubs);
	sb_log_close(f->log);
	tu_rmrf(f->home);
	free(f);
	return 0;
}

/* A spec with every field a plan keeps, inputs included. */
static void spec_pack(msgpack_sbuffer *sb, const char *in1, size_t n1)
{
	msgpack_packer pk;

	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 13);
	sb_pack_kstr(&pk, "template", "box");
	sb_pack_kstr(&pk, "name", "audit");
	sb_pack_kstr(&pk, "group", "g1");
	sb_pack_kstr(&pk, "prompt", "summarise the dossier");
	sb_pack_str(&pk, "env");
	msgpack_pack_array(&pk, 2);
	sb_pack_str(&pk, "A=1");
	sb_pack_str(&pk, "B=two words");
	sb_pack_ku64(&pk, "cpus", 3);
	sb_pack_ku64(&pk, "timeout_s", 90);
	sb_pack_kstr(&pk, "accel", "tcg");
	sb_pack_str(&pk, "models");
	msgpack_pack_array(&pk, 1);
	sb_pack_str(&pk, "acme/m2");
	sb_pack_ku64(&pk, "budget_nusd", 5000000);
	sb_pack_kstr(&pk, "on_budget", "continue");
	sb_pack_str(&pk, "secrets");
	msgpack_pack_array(&pk, 1);
	sb_pack_str(&pk, "TEAM");
	sb_pack_str(&pk, "inputs");
	msgpack_pack_array(&pk, 2);
	msgpack_pack_map(&pk, 3);
	sb_pack_kstr(&pk, "path", "docs/dossier.txt");
	sb_pack_str(&pk, "data");
	msgpack_pack_bin_with_body(&pk, in1, n1);
	sb_pack_ku64(&pk, "mode", 0600);
	msgpack_pack_map(&pk, 2);
	sb_pack_kstr(&pk, "path", "empty");
	sb_pack_str(&pk, "data");
	msgpack_pack_bin(&pk, 0);
}

/* Packs the payloads of run.created and run.policy.resolved of p. */
static void record_of(const struct sb_plan *p, msgpack_sbuffer *created,
		      msgpack_sbuffer *policy)
{
	msgpack_packer pk;

	msgpack_sbuffer_init(created);
	msgpack_sbuffer_init(policy);
	msgpack_packer_init(&pk, created, msgpack_sbuffer_write);
	sb_plan_pack_created(p, &pk);
	msgpack_packer_init(&pk, policy, msgpack_sbuffer_write);
	sb_plan_pack_policy(p, &pk);
}

/* The runner a plan names is read back from run.created; a record from
 * before runners (no runner in run.created) reads as "local". */
static void runner_check(struct sb_plan *p, const msgpack_object *po)
{
	msgpack_sbuffer c, c2, p2;
	msgpack_zone zone;
	msgpack_object co;
	struct sb_plan q;

	assert_true(msgpack_zone_init(&zone, 1024));
	tu_json(&c, "{'name':'n','group':'','template':'box','model':'acme/m1'}");
	assert_int_equal(sb_payload_parse(c.data, c.size, &zone, &co), SB_OK);
	assert_int_equal(sb_plan_from_record(RUN, &co, po, &q), SB_OK);
	assert_string_equal(q.runner, "local");
	sb_plan_free(&q);
	snprintf(p->runner, sizeof p->runner, "far-away");
	record_of(p, &c2, &p2);
	assert_non_null(memmem(c2.data, c2.size, "far-away", 8));
	assert_int_equal(sb_payload_parse(c2.data, c2.size, &zone, &co), SB_OK);
	assert_int_equal(sb_plan_from_record(RUN, &co, po, &q), SB_OK);
	assert_string_equal(q.runner, "far-away");
	sb_plan_free(&q);
	snprintf(p->runner, sizeof p->runner, "local");
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&c);
	msgpack_sbuffer_destroy(&c2);
	msgpack_sbuffer_destroy(&p2);
}

static void test_round_trip(void **state)
{
	struct fix *f = *state;
	struct sb_plan_ctx pc = {f->home, f->stubs, 1u << 20, NULL};
	static char big[200000];
	msgpack_sbuffer spec, c1, p1, c2, p2, g1, g2;
	msgpack_zone zone;
	msgpack_object so, co, po;
	struct sb_plan p, q;
	struct sb_blob blobs[2];
	struct sb_event evs[2];
	size_t nb;
	int rc;

	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (char)(i * 7 + i / 251);
	spec_pack(&spec, big, sizeof big);
	assert_true(msgpack_zone_init(&zone, 4096));
	assert_int_equal(sb_payload_parse(spec.data, spec.size, &zone, &so), SB_OK);
	if ((rc = sb_plan_resolve(&pc, RUN, &so, &p)))
		fail_msg("resolve: %s", sb_errmsg(rc));
	/* what the spec gave, the template's defaults, the settings' model */
	assert_string_equal(p.name, "audit");
	assert_string_equal(p.prompt, "summarise the dossier");
	assert_int_equal(p.argc, 0);
	assert_int_equal(p.cpus, 3);
	assert_int_equal(p.memory_mib, 256);
	assert_int_equal(p.timeout_s, 90);
	assert_int_equal(p.record_quota, 1u << 20);
	assert_string_equal(p.access.model, "acme/m1");
	assert_int_equal(p.access.nmodels, 2);
	assert_int_equal(p.access.ngrants, 2); /* TEAM (env) and the provider's key */
	assert_int_equal(p.ninputs, 2);
	assert_string_equal(p.runner, "local"); /* the spec names none */

	/* a roll-forward's link is an input with the link's mode bits */
	p.inputs[0].mode = SB_PLAN_LINK | 0777;
	/* recorded with its inputs as blobs */
	record_of(&p, &c1, &p1);
	nb = sb_plan_blobs(&p, blobs);
	assert_int_equal(nb, 2);
	assert_int_equal(
	    sb_event_init(&evs[0], "run.created", RUN, SB_SRC_HOST, c1.data, c1.size), 0);
	assert_int_equal(sb_event_init(&evs[1], "run.policy.resolved", RUN, SB_SRC_HOST,
				       p1.data, p1.size),
			 0);
	assert_int_equal(sb_log_append_blobs(f->log, blobs, nb, evs, 2), SB_OK);
	msgpack_sbuffer_init(&g1);
	assert_int_equal(sb_plan_pack_guest(&p, VKEY, 4000, NULL, f->log, &g1), SB_OK);

	/* read back from the record alone */
	assert_int_equal(sb_payload_parse(c1.data, c1.size, &zone, &co), SB_OK);
	assert_int_equal(sb_payload_parse(p1.data, p1.size, &zone, &po), SB_OK);
	assert_int_equal(sb_plan_from_record(RUN, &co, &po, &q), SB_OK);
	assert_int_equal(q.inputs[0].mode, SB_PLAN_LINK | 0777);
	record_of(&q, &c2, &p2);
	assert_int_equal(c1.size, c2.size);
	assert_memory_equal(c1.data, c2.data, c1.size);
	assert_int_equal(p1.size, p2.size);
	assert_memory_equal(p1.data, p2.data, p1.size);
	assert_string_equal(q.runner, "local");
	runner_check(&p, &po);
	assert_null(q.access.grants[0].value); /* no secret value in the record */
	assert_null(strstr(p1.data, "team-value"));
	assert_null(memmem(p1.data, p1.size, "provider-key", 12));

	/* armed again, its SPEC (inputs from the blob table) is the same */
	assert_int_equal(sb_access_arm(f->home, f->stubs, &q.access), SB_OK);
	msgpack_sbuffer_init(&g2);
	assert_int_equal(sb_plan_pack_guest(&q, VKEY, 4000, NULL, f->log, &g2), SB_OK);
	assert_int_equal(g1.size, g2.size);
	assert_memory_equal(g1.data, g2.data, g1.size);
	assert_non_null(memmem(g1.data, g1.size, "TEAM=team-value", 15));

	sb_plan_free(&p);
	sb_plan_free(&q);
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&spec);
	msgpack_sbuffer_destroy(&c1);
	msgpack_sbuffer_destroy(&p1);
	msgpack_sbuffer_destroy(&c2);
	msgpack_sbuffer_destroy(&p2);
	msgpack_sbuffer_destroy(&g1);
	msgpack_sbuffer_destroy(&g2);
}

/* A record whose fields are missing or of the wrong kind is refused,
 * never read past. */
static void test_bad_records(void **state)
{
	static const char *const bad[] = {
	    "{}",
	    "{'template_hash':'x'}",
	    "{'template_hash':'x','cpus':1,'memory_mib':64,'timeout_s':1}",
	    "{'template_hash':'x','cpus':1,'memory_mib':64,'timeout_s':1,'argv':'ls',"
	    "'model':'m','on_budget':'stop','models':[],'prices':{},'secrets':[]}",
	    "{'template_hash':'x','cpus':1,'memory_mib':64,'timeout_s':1,'argv':[],'"
	    "inputs':[{'path':'a'}],"
	    "'model':'m','on_budget':'stop','models':[],'prices':{},'secrets':[]}",
	    "{'template_hash':'x','cpus':1,'memory_mib':64,'timeout_s':1,'argv':[],"
	    "'model':'m','on_budget':'stop','models':['m'],'prices':{},'secrets':[]}",
	    "{'template_hash':'x','cpus':1,'memory_mib':64,'timeout_s':1,'argv':[7],"
	    "'model':'m','on_budget':'stop','models':[],'prices':{},'secrets':[]}",
	    "{'template_hash':'x','cpus':1,'memory_mib':64,'timeout_s':1,'argv':[],"
	    "'model':'m','on_budget':'stop','models':[],'prices':{},'secrets':[{'name':1}"
	    "]}",
	};
	msgpack_sbuffer c, p;
	msgpack_zone zone;
	msgpack_object co, po;
	struct sb_plan q;

	(void)state;
	tu_json(&c, "{'name':'n','group':'','template':'box'}");
	assert_true(msgpack_zone_init(&zone, 4096));
	assert_int_equal(sb_payload_parse(c.data, c.size, &zone, &co), SB_OK);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		tu_json(&p, bad[i]);
		assert_int_equal(sb_payload_parse(p.data, p.size, &zone, &po), SB_OK);
		if (sb_plan_from_record(RUN, &co, &po, &q) != SB_ERR_CORRUPT)
			fail_msg("record %zu accepted", i);
		sb_plan_free(&q);
		msgpack_sbuffer_destroy(&p);
	}
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&c);
}

/* A spec refused writes nothing: every refusal names the field. */
static void test_refused_specs(void **state)
{
	struct fix *f = *state;
	struct sb_plan_ctx pc = {f->home, f->stubs, 1u << 20, NULL};
	static const struct {
		const char *spec, *word;
	} bad[] = {
	    {"{'template':'box'}", "command"},
	    {"{'template':'box','argv':['ls'],'name':'a\\nb'}", "name"},
	    {"{'template':'box','argv':['ls'],'accel':'xen'}", "accel"},
	    {"{'template':'box','argv':['ls'],'runner':''}", "runner"},
	    {"{'template':'box','argv':['ls'],'runner':'a\\u001bb'}", "runner"},
	    {"{'template':'box','argv':['ls'],'runner':'0123456789012345678901234567890123'}",
	     "runner"},
	    {"{'template':'box','argv':['ls'],'runner':7}", "runner"},
	    {"{'template':'box','argv':['ls'],'env':['NOEQUALS']}", "env"},
	    {"{'template':'box','argv':['ls'],'memory_mib':8}", "memory"},
	    {"{'template':'box','argv':['ls'],'inputs':[{'path':'../x','data':'a'}]}",
	     "input"},
	    {"{'template':'nope','argv':['ls']}", "nope"},
	    {"{'template':'box','argv':['ls'],'secrets':['UNSET']}", "UNSET"},
	    {"{'template':'box','argv':['ls'],'model':'acme/none'}", "acme/none"},
	    {"{'template':'box','argv':['ls'],'secrets':['HUGE']}", "HUGE has 5000 bytes"},
	    /* a host that cannot enforce it refuses network acl, after the
	     * grants are read */
	    {"{'template':'box','argv':['ls'],'network':'acl','allow':['a.test:1']}",
	     "network acl is not enforced here"},
	    {"{'template':'box','argv':['ls'],'network':'acl','allow':['a.test']}",
	     "'a.test'"},
	    /* a template's network is its runs' default */
	    {"{'template':'netbox','argv':['ls']}", "network acl is not enforced here"},
	    {"{'template':'netbox','argv':['ls'],'network':'none'}", "need network acl"},
	    {"{'template':'badnet','argv':['ls']}", "template badnet: grant 'x'"},
	};
	msgpack_sbuffer sb;
	msgpack_zone zone;
	msgpack_object so;
	struct sb_plan p;

	assert_true(msgpack_zone_init(&zone, 4096));
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int rc;
		tu_json(&sb, bad[i].spec);
		assert_int_equal(sb_payload_parse(sb.data, sb.size, &zone, &so), SB_OK);
		rc = sb_plan_resolve(&pc, RUN, &so, &p);
		if (rc == SB_OK)
			fail_msg("spec %zu accepted", i);
		if (!strstr(sb_errmsg(rc), bad[i].word))
			fail_msg("spec %zu: '%s' does not name %s", i, sb_errmsg(rc),
				 bad[i].word);
		sb_plan_free(&p);
		msgpack_sbuffer_destroy(&sb);
	}
	msgpack_zone_destroy(&zone);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
	    cmocka_unit_test(test_bad_records),
	    cmocka_unit_test_setup_teardown(test_refused_specs, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
