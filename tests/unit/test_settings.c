/* test_settings.c - the daemon's settings file and durations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/settings.h"
#include "engine/error.h"
#include "engine/units.h"
#include "tests/unit/testutil.h"

static void put(const char *home, const char *text)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof path, "%s/sanboxd.json", home);
	assert_non_null(f = fopen(path, "w"));
	fputs(text, f);
	fclose(f);
}

static void test_defaults_and_overrides(void **state)
{
	char *home = tu_tmpdir();
	struct sb_settings s;

	(void)state;
	unsetenv("SANBOX_BOOT_TIMEOUT");
	assert_int_equal(sb_settings_load(home, &s), SB_OK); /* no file: defaults */
	assert_int_equal(s.local_max_conns, 1024);
	assert_int_equal(s.local_max_request, 64u << 20);
	assert_int_equal(s.remote_preauth_bytes, 4096);
	assert_int_equal(s.run_record_quota, 1024ull << 20);
	assert_true(s.boot_timeout_s == 120 && s.gateway_body_s == 60);
	assert_true(s.local_request_s == 30 && s.local_idle_s == 600);
	put(home, "{\"remote\": {\"max_conns_per_peer\": 4, \"accept_rate\": 0.5},"
		  " \"runs\": {\"record_quota_mib\": 3}, \"local\": {\"idle_timeout_s\": 5}}");
	assert_int_equal(sb_settings_load(home, &s), SB_OK);
	assert_int_equal(s.remote_max_conns_per_peer, 4);
	assert_true(s.remote_accept_rate == 0.5);
	assert_int_equal(s.run_record_quota, 3u << 20); /* MiB in the file, bytes here */
	assert_int_equal(s.remote_max_conns, 256);     /* the others keep their defaults */
	assert_true(s.local_idle_s == 5 && s.local_request_s == 30);
	setenv("SANBOX_BOOT_TIMEOUT", "3m", 1);
	assert_int_equal(sb_settings_load(home, &s), SB_OK);
	assert_true(s.boot_timeout_s == 180);
	setenv("SANBOX_BOOT_TIMEOUT", "soon", 1);
	assert_int_equal(sb_settings_load(home, &s), SB_ERR_INVAL);
	tu_errmsg_has(SB_ERR_INVAL, "SANBOX_BOOT_TIMEOUT", "soon");
	unsetenv("SANBOX_BOOT_TIMEOUT");
	tu_rmrf(home);
}

/* Each bad file refuses to start, naming the setting or the line. */
static void test_refused(void **state)
{
	static const struct {
		const char *text, *word;
	} bad[] = {
	    {"{\"remote\": {\"max_conn\": 4}}", "remote.max_conn"},
	    {"{\"remot\": {}}", "remot"},
	    {"{\"remote\": {\"max_conns\": \"4\"}}", "remote.max_conns"},
	    {"{\"remote\": {\"max_conns\": 4.5}}", "whole number"},
	    {"{\"remote\": {\"max_conns\": 0}}", "from 1"},
	    {"{\"local\": {\"max_conns\": 1e9}}", "local.max_conns"},
	    {"{\"runs\": {\"boot_timeout_s\": -1}}", "runs.boot_timeout_s"},
	    {"{\"runs\": 5}", "not an object"},
	    {"[1, 2]", "not a JSON object"},
	    {"{\"remote\": {\"max_conns\": 4,}", "sanboxd.json:1: "},
	    {"{\"remote\": {\"max_conns\": 4, \"max_conns\": 5}}", "sanboxd.json:1: "},
	    /* a setting's line is named, as a compiler names it */
	    {"{\n \"remote\": {\n  \"max_conns\": 4,\n  \"max_connz\": 5\n }\n}",
	     "sanboxd.json:4: unknown setting remote.max_connz"},
	    {"{\n\"runs\": {\n\n\"boot_timeout_s\": \"x\"}}",
	     "sanboxd.json:4: runs.boot_timeout_s must be"},
	    {"{\"runs\": {},\n\"rnus\": {}}", "sanboxd.json:2: unknown section 'rnus'"},
	};
	char *home = tu_tmpdir();
	struct sb_settings s;

	(void)state;
	unsetenv("SANBOX_BOOT_TIMEOUT");
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		put(home, bad[i].text);
		if (sb_settings_load(home, &s) != SB_ERR_INVAL)
			fail_msg("file %zu accepted", i);
		tu_errmsg_has(SB_ERR_INVAL, "sanboxd.json", bad[i].word);
	}
	tu_rmrf(home);
}

static void test_durations(void **state)
{
	static const struct {
		const char *text;
		double secs;
	} good[] = {{"90", 90}, {"90s", 90}, {"2.5m", 150}, {"8h", 28800}, {"1d", 86400}, {"0.5", 0.5}};
	static const char *const bad[] = {"", "s", "0", "-5", "10x", "5 m", "inf", "nan", "1e400", "m5"};
	double v;

	(void)state;
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		assert_int_equal(sb_duration_parse(good[i].text, &v), SB_OK);
		assert_true(v == good[i].secs);
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		if (sb_duration_parse(bad[i], &v) != SB_ERR_INVAL)
			fail_msg("duration '%s' accepted", bad[i]);
}

static void test_deadlines(void **state)
{
	int64_t d = sb_deadline(1000);

	(void)state;
	assert_int_equal(sb_deadline(-1), -1);
	assert_int_equal(sb_ms_left(-1), -1);
	assert_true(sb_ms_left(d) > 900 && sb_ms_left(d) <= 1000);
	assert_int_equal(sb_ms_left(sb_now_ms() - 5), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults_and_overrides),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_durations),
		cmocka_unit_test(test_deadlines),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
