/* test_summary.c - the table of one-line event summaries: an entry for every
 * schema type, what a few of them read, and hostile payloads (escape and
 * title sequences, newlines, invalid UTF-8, bidi overrides, deep nesting)
 * that must come out with no raw control byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "engine/log/summary.h"
#include "tests/unit/testutil.h"

/* Clears the screen, sets the window title, returns the carriage, forges a
 * line, breaks UTF-8, reverses what follows and opens a C1 CSI. */
static const char hostile[] = "MARK\x1b[2J\x1b]0;owned\x07\r\nforged row\xff\xc3\xe2\x80\xae"
			      "exe.txt\xc2\x9b" "31m\x7f\x00tail";
#define HOSTILE_LEN (sizeof hostile - 1)

/* Fields some types show although the schema does not require them. */
static const char *const optional[] = {"text", "model", "group", "role", "stream", "by"};

/* Packs a payload for schema s: every required field (strings hostile),
 * and the optional fields above as hostile strings. */
static void hostile_payload(msgpack_sbuffer *sb, const struct sb_event_schema *s)
{
	msgpack_packer pk;
	int has[sizeof optional / sizeof optional[0]] = {0};
	sb_mapw m;

	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	for (const struct sb_field *f = s->fields; f < s->fields + SB_FIELDS_MAX && f->name; f++) {
		for (size_t i = 0; i < sizeof optional / sizeof optional[0]; i++)
			has[i] |= !strcmp(f->name, optional[i]);
		if (sb_field_kind(f) == SB_F_STR || sb_field_kind(f) == SB_F_LABEL)
			sb_mapw_strn(&m, f->name, hostile, HOSTILE_LEN);
		else
			tu_pack_good(sb_mapw_key(&m, f->name), sb_field_kind(f), 1);
	}
	for (size_t i = 0; i < sizeof optional / sizeof optional[0]; i++)
		if (!has[i])
			sb_mapw_strn(&m, optional[i], hostile, HOSTILE_LEN);
	assert_int_equal(sb_mapw_end(&m), SB_OK);
}

/* Summarises an event of type from src with the JSON payload js (single
 * quotes for double) into buf. */
static void summarise(const char *type, enum sb_source src, const char *js, char *buf,
		      size_t cap)
{
	msgpack_sbuffer sb;
	msgpack_zone zone;
	msgpack_object map;
	struct sb_event ev;

	tu_json(&sb, js);
	assert_true(msgpack_zone_init(&zone, 1024));
	assert_int_equal(sb_payload_parse(sb.data, sb.size, &zone, &map), 0);
	assert_int_equal(sb_event_init(&ev, type, "0123456789ab", src, sb.data, sb.size), 0);
	sb_event_summary(&ev, &map, buf, cap);
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&sb);
}

static void test_every_type_has_an_entry(void **st)
{
	size_t n;
	const struct sb_event_schema *all = sb_schema_all(&n);

	(void)st;
	assert_true(n > 20);
	for (size_t i = 0; i < n; i++)
		if (!sb_summary_has(all[i].type))
			fail_msg("event type %s has no summary", all[i].type);
	assert_false(sb_summary_has("no.such.type"));
	assert_false(sb_summary_has(""));
}

static void test_hostile_payloads(void **st)
{
	size_t n;
	const struct sb_event_schema *all = sb_schema_all(&n);
	char buf[2048], generic[2048], small[24];

	(void)st;
	for (size_t i = 0; i < n; i++) {
		msgpack_sbuffer sb;
		msgpack_zone zone;
		msgpack_object map;
		struct sb_event ev, unknown;

		hostile_payload(&sb, &all[i]);
		assert_true(msgpack_zone_init(&zone, 4096));
		assert_int_equal(sb_payload_parse(sb.data, sb.size, &zone, &map), 0);
		for (unsigned src = 0; src <= SB_SRC_LAST; src++) {
			assert_int_equal(sb_event_init(&ev, all[i].type, "0123456789ab", src, sb.data,
						       sb.size),
					 0);
			sb_event_summary(&ev, &map, buf, sizeof buf);
			tu_assert_printable(buf);
			/* the hostile text is there, escaped: a summary shows its strings */
			if (strstr(buf, "MARK") && !strstr(buf, "MARK\\x1b[2J\\x1b]0;owned\\x07\\r\\n"))
				fail_msg("%s: hostile text not escaped as expected: %s", all[i].type, buf);
			for (size_t cap = 1; cap < sizeof small; cap++) {
				sb_event_summary(&ev, &map, small, cap);
				assert_true(strlen(small) < cap);
				tu_assert_printable(small);
				assert_int_equal(strncmp(small, buf, strlen(small)), 0);
			}
		}
		/* its own entry, not the generic key=value line */
		assert_int_equal(sb_event_init(&unknown, "zz.unknown", "0123456789ab", SB_SRC_HOST,
					       sb.data, sb.size),
				 0);
		sb_event_summary(&unknown, &map, generic, sizeof generic);
		tu_assert_printable(generic);
		sb_event_init(&ev, all[i].type, "0123456789ab", tu_allowed_source(&all[i]), sb.data,
			      sb.size);
		sb_event_summary(&ev, &map, buf, sizeof buf);
		if (!strcmp(buf, generic))
			fail_msg("%s reads as the generic summary: %s", all[i].type, buf);
		msgpack_zone_destroy(&zone);
		msgpack_sbuffer_destroy(&sb);
	}
}

static void test_what_they_read(void **st)
{
	char buf[512];

	(void)st;
	summarise("operator.note", SB_SRC_OPERATOR, "{'text':'deploy paused','by':'local'}", buf,
		  sizeof buf);
	assert_string_equal(buf, "local: deploy paused");
	summarise("operator.note", SB_SRC_OPERATOR,
		  "{'text':'a\\u001b]0;title\\u0007\\nb\\u202e','by':'ops\\r'}", buf, sizeof buf);
	assert_string_equal(buf, "ops\\r: a\\x1b]0;title\\x07\\nb\\u{202e}");
	summarise("agent.file.changed", SB_SRC_GUEST,
		  "{'path':'src/a\\nb.c','kind':'modified','size':1204,'xxh3':'x'}", buf, sizeof buf);
	assert_string_equal(buf, "modified src/a\\nb.c (1,204 bytes)");
	summarise("agent.output", SB_SRC_GUEST, "{'stream':'stdout','data':'one\\ntwo\\r\\n\\n'}", buf,
		  sizeof buf);
	assert_string_equal(buf, "stdout: one\\ntwo");
	summarise("agent.tool.completed", SB_SRC_HARNESS,
		  "{'tool':'sh','args':'ls\\t-l','exit':-1,'duration_ms':12}", buf, sizeof buf);
	assert_string_equal(buf, "sh ls\\t-l (exit -1, 12ms)");
	summarise("agent.message", SB_SRC_GATEWAY,
		  "{'role':'assistant','model':'stub/echo','stream':true,'status':200,"
		  "'input_tokens':12345,'output_tokens':7,'duration_ms':30,'cut':true}",
		  buf, sizeof buf);
	assert_string_equal(buf, "stub/echo stream: HTTP 200, 12,345 input · 7 output, 30ms "
				 "(cut: past the budget)");
	summarise("agent.message", SB_SRC_HARNESS, "{'role':'user','text':'hi\\nthere'}", buf,
		  sizeof buf);
	assert_string_equal(buf, "user: hi\\nthere");
	summarise("budget.exceeded", SB_SRC_GATEWAY, "{'budget_nusd':500000000,'spent_nusd':512345678}",
		  buf, sizeof buf);
	assert_string_equal(buf, "spent $0.512345678 of $0.5000");
	summarise("run.created", SB_SRC_HOST, "{'name':'a','template':'shell','group':''}", buf,
		  sizeof buf);
	assert_string_equal(buf, "a (template shell)");
	summarise("run.created", SB_SRC_HOST, "{'name':'a','template':'shell','group':'g\\u0085'}",
		  buf, sizeof buf);
	assert_string_equal(buf, "a (template shell, group g\\u{0085})");
	summarise("run.failed", SB_SRC_HOST, "{'reason':'qemu: \\u001b[31mboom'}", buf, sizeof buf);
	assert_string_equal(buf, "qemu: \\x1b[31mboom");
	summarise("harness.input.ready", SB_SRC_GUEST,
		  "{'files':2,'bytes':1204,'skipped':2,'skipped_paths':['d/evil','x\\ny']}", buf,
		  sizeof buf);
	assert_string_equal(buf, "2 input files, 1,204 bytes (2 skipped: "
				 "d/evil, x\\ny)");
	/* a fork's roll-forward: what was rolled, removed and omitted */
	summarise("run.forked", SB_SRC_HOST,
		  "{'from_run':'0123456789ab','from_offset':12,'at':40,'snapshot':'s0',"
		  "'exact':false,'memory':false,'rolled':3,'removed':1,'omitted_count':2,"
		  "'omitted':['/workspace/big.bin','/workspace/l\\u001bnk']}",
		  buf, sizeof buf);
	assert_string_equal(buf, "from 0123456789ab at snapshot s0 (offset 12) to offset 40: 3 "
				 "files rolled forward, 1 removed, 2 omitted: /workspace/big.bin, "
				 "/workspace/l\\x1bnk (not exact)");
	summarise("run.forked", SB_SRC_HOST,
		  "{'from_run':'0123456789ab','from_offset':12,'at':40,'snapshot':'s0',"
		  "'exact':false,'memory':false,'rolled':1,'removed':0,'omitted_count':9,"
		  "'omitted':['/workspace/a']}",
		  buf, sizeof buf);
	assert_string_equal(buf, "from 0123456789ab at snapshot s0 (offset 12) to offset 40: 1 "
				 "file rolled forward, 0 removed, 9 omitted: /workspace/a, … (not "
				 "exact)");
	summarise("run.resumed", SB_SRC_HOST,
		  "{'from_run':'0123456789ab','from_offset':12,'at':12,'snapshot':'s0',"
		  "'exact':true,'memory':false,'rolled':0,'removed':0,'prompt':''}",
		  buf, sizeof buf);
	assert_string_equal(buf, "from 0123456789ab snapshot s0 at offset 12");
	summarise("run.forked", SB_SRC_HOST,
		  "{'from_run':'0123456789ab','from_offset':0,'at':26,'snapshot':'',"
		  "'exact':true,'memory':false,'rolled':1,'removed':0}",
		  buf, sizeof buf);
	assert_string_equal(buf, "from 0123456789ab at its start to offset 26: 1 file rolled "
				 "forward, 0 removed");
	/* a type the table does not know: key=value pairs */
	summarise("zz.new", SB_SRC_HOST, "{'a':1,'b':'x\\ny','c':[true,null,-2],'d':{'e':1.5}}", buf,
		  sizeof buf);
	assert_string_equal(buf, "a=1 b=x\\ny c=[true, null, -2] d={e=1.5}");
}

static void test_odd_payloads(void **st)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_zone zone;
	msgpack_object obj;
	struct sb_event ev;
	char buf[256];

	(void)st;
	/* not a map */
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 0);
	assert_true(msgpack_zone_init(&zone, 1024));
	assert_true(msgpack_unpack(sb.data, sb.size, NULL, &zone, &obj) == MSGPACK_UNPACK_SUCCESS);
	sb_event_init(&ev, "run.started", "0123456789ab", SB_SRC_HOST, sb.data, sb.size);
	sb_event_summary(&ev, &obj, buf, sizeof buf);
	assert_string_equal(buf, "(no payload)");
	sb_event_summary(&ev, NULL, buf, sizeof buf);
	assert_string_equal(buf, "(no payload)");
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&sb);

	/* fields of the wrong kinds, binary, and nesting deeper than shown */
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 3);
	sb_pack_str(&pk, "path");
	for (int i = 0; i < 30; i++)
		msgpack_pack_array(&pk, 1);
	sb_pack_str(&pk, "\x1b");
	sb_pack_str(&pk, "kind");
	msgpack_pack_bin_with_body(&pk, "\x1b\n", 2);
	sb_pack_str(&pk, "size");
	sb_pack_str(&pk, "big");
	assert_true(msgpack_zone_init(&zone, 1 << 16));
	assert_true(msgpack_unpack(sb.data, sb.size, NULL, &zone, &obj) == MSGPACK_UNPACK_SUCCESS);
	sb_event_init(&ev, "agent.file.changed", "0123456789ab", SB_SRC_GUEST, sb.data, sb.size);
	sb_event_summary(&ev, &obj, buf, sizeof buf);
	tu_assert_printable(buf);
	assert_non_null(strstr(buf, "<2 bytes> [[[[")); /* kind, then the nested path */
	assert_non_null(strstr(buf, "(0 bytes)"));      /* a size that is no number */
	assert_non_null(strstr(buf, "[…]"));            /* the depth shown is bounded */
	assert_null(strstr(buf, "\\x1b]"));             /* so the innermost string is not */
	sb_summary_value(&obj, buf, sizeof buf);
	tu_assert_printable(buf);
	assert_int_equal(strncmp(buf, "{path=[[[", 9), 0);
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&sb);
}

/* agent.progress: count/total and the label, escaped; sb_progress_text
 * cuts on a character. */
static void test_progress(void **st)
{
	char buf[256];

	(void)st;
	summarise("agent.progress", SB_SRC_HARNESS,
		  "{'label':'reports checked','count':18,'total':40}", buf, sizeof buf);
	assert_string_equal(buf, "18/40 reports checked");
	summarise("agent.progress", SB_SRC_HARNESS, "{'label':'files','count':3}", buf, sizeof buf);
	assert_string_equal(buf, "3 files");
	summarise("agent.progress", SB_SRC_HOST, "{'label':'files','count':3,'total':0}", buf,
		  sizeof buf);
	assert_string_equal(buf, "3 files");
	/* what the schema refuses still reads safely */
	summarise("agent.progress", SB_SRC_HARNESS,
		  "{'label':'a\\u001b[2Jb\\n\\u202e','count':1,'total':2}", buf, sizeof buf);
	assert_string_equal(buf, "1/2 a\\x1b[2Jb\\n\\u{202e}");
	summarise("agent.progress", SB_SRC_HARNESS, "{'label':7,'count':1}", buf, sizeof buf);
	assert_string_equal(buf, "label=7 count=1");

	assert_int_equal(sb_progress_text(18, 40, "reports", 7, buf, sizeof buf), 13);
	assert_string_equal(buf, "18/40 reports");
	assert_int_equal(sb_progress_text(5, 0, "\xc3\xa9t\xc3\xa9", 5, buf, 7), 5);
	assert_string_equal(buf, "5 \xc3\xa9t"); /* never half of the second */
	assert_int_equal(sb_progress_text(5, 0, "\xc3\xa9", 2, buf, 4), 2);
	assert_string_equal(buf, "5 ");
	assert_int_equal(sb_progress_text(123456, 0, "x", 1, buf, 4), 3);
	assert_string_equal(buf, "123");
	assert_int_equal(sb_progress_text(1, 2, "a\0b", 3, buf, sizeof buf), 7);
	assert_memory_equal(buf, "1/2 a\0b", 8);
}

static void test_usd(void **st)
{
	char buf[32];

	(void)st;
	sb_usd_format(0, buf, sizeof buf);
	assert_string_equal(buf, "$0.0000");
	sb_usd_format(1234567890123ull, buf, sizeof buf);
	assert_string_equal(buf, "$1234.567890123");
	sb_usd_format(1234567800000ull, buf, sizeof buf);
	assert_string_equal(buf, "$1234.5678");
	sb_usd_format(99999, buf, sizeof buf); /* below a ten-thousandth: every digit */
	assert_string_equal(buf, "$0.000099999");
	sb_usd_format(100000, buf, sizeof buf);
	assert_string_equal(buf, "$0.0001");
	sb_usd_format(51200000, buf, sizeof buf);
	assert_string_equal(buf, "$0.0512");
	sb_usd_format(UINT64_MAX, buf, sizeof buf);
	assert_string_equal(buf, "$18446744073.709551615");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_type_has_an_entry),
		cmocka_unit_test(test_hostile_payloads),
		cmocka_unit_test(test_what_they_read),
		cmocka_unit_test(test_odd_payloads),
		cmocka_unit_test(test_progress),
		cmocka_unit_test(test_usd),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
