/* test_nft.c - the table inet sanbox and a run's part of it, applied for
 * real in a network namespace of the test's own (unshare), with a tap:
 * add, live update, names with timeouts, deletion leaving nothing, and the
 * listing of runs. Skipped when not root. */
#include <net/if.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "netpolicy/nft.h"
#include "netpolicy/tap.h"
#include "testutil.h"

static sb_nft *nft;

static const struct sb_nft_host host = {"10.87.0.0/16", "fd53:616e:626f::/48", 0};

static struct sb_nft_run run_of(const char *id)
{
	struct sb_nft_run r = {0};

	snprintf(r.id, sizeof r.id, "%s", id);
	snprintf(r.tap, sizeof r.tap, "sb%s", id);
	snprintf(r.host4, sizeof r.host4, "10.87.0.1");
	snprintf(r.guest4, sizeof r.guest4, "10.87.0.2");
	snprintf(r.host6, sizeof r.host6, "fd53:616e:626f::1");
	snprintf(r.guest6, sizeof r.guest6, "fd53:616e:626f::2");
	r.dns_port = 40053;
	r.mark = 0x00010001;
	return r;
}

static void policy_of(struct sb_netpolicy *p, const char *const *grants)
{
	memset(p, 0, sizeof *p);
	p->mode = SB_NET_ACL;
	for (; *grants; grants++)
		assert_int_equal(sb_net_grant_parse(*grants, strlen(*grants),
						    &p->grants[p->ngrants++]),
				 SB_OK);
}

static char *listing(const char *cmd)
{
	char *out;

	assert_int_equal(sb_nft_run(nft, cmd, &out), SB_OK);
	return out;
}

static char *ruleset(void)
{
	return listing("list ruleset");
}

static int setup(void **state)
{
	if (geteuid() != 0 || unshare(CLONE_NEWNET))
		return 0; /* each test skips */
	return sb_nft_open(&nft) == SB_OK ? 0 : -1;
}

static int teardown(void **state)
{
	sb_nft_close(nft);
	return 0;
}

#define NEED_NFT()                                                                       \
	do {                                                                             \
		if (!nft)                                                                \
			skip();                                                          \
	} while (0)

static void test_script_text(void **state)
{
	struct sb_nft_run r = run_of("0123456789ab");
	struct sb_netpolicy p;
	static const char *const g[] = {"10.0.0.0/8:80-90", "udp/192.0.2.1:53",
					"[2001:db8::/32]:443", "a.test:443", NULL};
	char *s;

	policy_of(&p, g);
	assert_int_equal(sb_nft_run_script(&r, &p, 0, NULL, 0, &s), SB_OK);
	/* address grants go to their family's set; names do not */
	assert_non_null(
	    strstr(s, "add element inet sanbox g4_0123456789ab { 10.0.0.0/8 . tcp "
		      ". 80-90, 192.0.2.1 . udp . 53 }"));
	assert_non_null(
	    strstr(s, "add element inet sanbox g6_0123456789ab { 2001:db8::/32 . "
		      "tcp . 443 }"));
	assert_null(strstr(s, "a.test"));
	/* spoofed sources drop, the stub's DNS redirect, the named ports */
	assert_non_null(
	    strstr(s, "ip saddr != 10.87.0.2 counter name c_0123456789ab drop"));
	assert_non_null(strstr(s, "tcp dport 53 redirect to :40053"));
	assert_non_null(strstr(s, "udp dport 53 redirect to :40053"));
	assert_non_null(strstr(s, "ct mark 0x00010001 accept"));
	/* the TLS and HTTP ports go to the judge, each with its judging mark */
	assert_non_null(strstr(s, "tcp dport @tls ip daddr"));
	assert_non_null(strstr(s, "ct mark set 0x00010fff jump judge"));
	assert_non_null(strstr(s, "tcp dport @http ip daddr"));
	assert_non_null(strstr(s, "ct mark set 0x00010ffe jump judge"));
	/* an HTTP guest's segments: to the judge but for bare ACKs and bodies;
	 * the server's come back unread */
	assert_non_null(strstr(s, "ct mark 0x00010ffe jump acks"));
	assert_non_null(strstr(s, "tcp sequence @b4_0123456789ab accept"));
	assert_non_null(
	    strstr(s, "o_0123456789ab meta nfproto ipv4 ct mark 0x00010ffe accept"));
	free(s);
	/* a run id of 00000...: no mark of it is 0, the judging mark neither
	 * (0 is every connection no rule marked) */
	r.mark = 0x00000001;
	assert_int_equal(sb_nft_run_script(&r, &p, 0, NULL, 0, &s), SB_OK);
	assert_null(strstr(s, "ct mark 0x00000000"));
	assert_non_null(strstr(s, "ct mark 0x00000fff jump judge"));
	assert_non_null(strstr(s, "ct mark 0x00000ffe jump judge"));
	free(s);
	r.mark = 0x00010001;
	/* no IPv6 address: every IPv6 packet drops */
	r.guest6[0] = r.host6[0] = 0;
	assert_int_equal(sb_nft_run_script(&r, &p, 1, NULL, 0, &s), SB_OK);
	assert_non_null(strstr(s, "meta nfproto ipv6 counter name c_0123456789ab drop"));
	assert_null(strstr(s, "flush set inet sanbox d4_")); /* an update keeps counts */
	free(s);
}

static void ids(void *ctx, const char *id)
{
	strcat(ctx, id);
	strcat(ctx, " ");
}

static void test_apply(void **state)
{
	struct sb_nft_run r = run_of("0123456789ab"), r2 = run_of("ba9876543210");
	struct sb_netpolicy p;
	static const char *const g[] = {"10.0.0.0/8:80-90", "[2001:db8::/32]:443", NULL};
	static const char *const g2[] = {"192.0.2.7:22", NULL};
	struct sb_nft_elem e = {4, {198, 51, 100, 10}, 0, 443, 443, 30};
	char listed[64] = "", *s;

	NEED_NFT();
	assert_int_equal(sb_tap_add(r.tap, r.host4, 30, r.host6, 64), SB_OK);
	assert_int_equal(sb_nft_table_add(nft, &host), SB_OK);
	assert_int_equal(sb_nft_table_add(nft, &host), SB_OK); /* there: kept */
	policy_of(&p, g);
	assert_int_equal(sb_nft_run_add(nft, &r, &p), SB_OK);
	assert_int_equal(sb_nft_run_add(nft, &r2, &p), SB_OK);
	s = ruleset();
	assert_non_null(strstr(s, "10.0.0.0/8 . tcp . 80-90"));
	assert_non_null(strstr(s, "\"sb0123456789ab\" : jump f_0123456789ab"));
	free(s);
	/* a name's address, twice: the second refreshes its timeout */
	assert_int_equal(sb_nft_names_add(nft, r.id, &e, 1), SB_OK);
	e.timeout_s = 3000;
	assert_int_equal(sb_nft_names_add(nft, r.id, &e, 1), SB_OK);
	s = ruleset();
	assert_non_null(strstr(s, "198.51.100.10 . tcp . 443 timeout 50m"));
	free(s);
	/* a live change: the new grants and mark, and the names' addresses
	 * as given (the one there stays) */
	policy_of(&p, g2);
	r.mark = 0x00010002;
	assert_int_equal(sb_nft_run_update(nft, &r, &p, &e, 1), SB_OK);
	s = ruleset();
	assert_non_null(strstr(s, "192.0.2.7 . tcp . 22"));
	assert_non_null(strstr(s, "ct mark 0x00010002"));
	assert_non_null(strstr(s, "198.51.100.10 . tcp . 443"));
	free(s);
	s = listing("list set inet sanbox g4_0123456789ab");
	assert_null(strstr(s, "10.0.0.0/8")); /* r2 keeps its own */
	free(s);
	assert_int_equal(sb_nft_runs(nft, ids, listed), SB_OK);
	assert_non_null(strstr(listed, "0123456789ab "));
	assert_non_null(strstr(listed, "ba9876543210 "));
	/* deletion leaves nothing of the run, and the other run as it was */
	assert_int_equal(sb_nft_run_del(nft, r.id, r.tap), SB_OK);
	assert_int_equal(sb_nft_run_del(nft, r.id, r.tap), SB_OK); /* gone: fine */
	s = ruleset();
	assert_null(strstr(s, "0123456789ab"));
	assert_non_null(strstr(s, "f_ba9876543210"));
	free(s);
	/* a run half deleted (its jump from runs_o gone): the rest goes */
	assert_int_equal(
	    sb_nft_run(nft, "delete element inet sanbox runs_o { \"sbba9876543210\" }",
		       NULL),
	    SB_OK);
	assert_int_equal(sb_nft_run_del(nft, r2.id, r2.tap), SB_OK);
	s = ruleset();
	if (strstr(s, "ba9876543210"))
		fail_msg("left of a half-deleted run: %s", s);
	free(s);
	assert_int_equal(sb_tap_del(r.tap), SB_OK);
	assert_int_equal(if_nametoindex(r.tap), 0);
	assert_int_equal(sb_nft_table_del(nft), SB_OK);
	assert_int_equal(sb_nft_table_del(nft), SB_OK);
	s = ruleset();
	if (strstr(s, "sanbox"))
		fail_msg("left: %s", s);
	free(s);
	listed[0] = 0;
	assert_int_equal(sb_nft_runs(nft, ids, listed), SB_OK);
	assert_string_equal(listed, "");
}

static void no_denial(void *ctx, const struct sb_nft_denial *d)
{
	fail_msg("a denial of %s", d->dst);
}

static void test_denials_empty(void **state)
{
	struct sb_nft_run r = run_of("00000000000c");
	struct sb_netpolicy p;
	static const char *const g[] = {NULL};

	NEED_NFT();
	assert_int_equal(sb_nft_table_add(nft, &host), SB_OK);
	policy_of(&p, g);
	assert_int_equal(sb_nft_run_add(nft, &r, &p), SB_OK);
	assert_int_equal(sb_nft_denials(nft, r.id, no_denial, NULL), SB_OK);
	assert_int_equal(sb_nft_denials(nft, "ffffffffffff", no_denial, NULL),
			 SB_ERR_NOTFOUND);
	assert_int_equal(sb_nft_table_del(nft), SB_OK);
}

static void drop_seen(void *ctx, const char *id, uint64_t packets)
{
	char *seen = ctx;

	snprintf(seen + strlen(seen), 256 - strlen(seen), "%s=%llu ", id,
		 (unsigned long long)packets);
}

/* Every run's drop count from one listing; other counters are not runs'. */
static void test_drops(void **state)
{
	char seen[256] = "";

	NEED_NFT();
	assert_int_equal(sb_nft_drops(nft, drop_seen, seen), SB_ERR_NOTFOUND);
	assert_int_equal(
	    sb_nft_run(nft,
		       "add table inet sanbox\n"
		       "add counter inet sanbox c_00000000000a { packets 5 bytes 300; }\n"
		       "add counter inet sanbox c_00000000000b\n"
		       "add counter inet sanbox other { packets 7 bytes 70; }\n",
		       NULL),
	    SB_OK);
	assert_int_equal(sb_nft_drops(nft, drop_seen, seen), SB_OK);
	assert_string_equal(seen, "00000000000a=5 00000000000b=0 ");
	assert_int_equal(sb_nft_table_del(nft), SB_OK);
}

/* The objects a run gets, each by name, and rules that name the table's
 * constant sets in place of anonymous sets of their own. */
static void test_run_objects(void **state)
{
	struct sb_nft_run r = run_of("00000000000d");
	static const char *const g[] = {"192.0.2.7:22", NULL};
	static const char *const names[] = {
	    "chain f_00000000000d",
	    "chain i_00000000000d",
	    "chain p_00000000000d",
	    "chain o_00000000000d",
	    "set g4_00000000000d",
	    "set g6_00000000000d",
	    "set n4_00000000000d",
	    "set n6_00000000000d",
	    "set d4_00000000000d",
	    "set d6_00000000000d",
	    "set e4_00000000000d",
	    "set e6_00000000000d",
	    "set b4_00000000000d",
	    "set b6_00000000000d",
	    "counter c_00000000000d",
	    "\"sb00000000000d\" : jump f_00000000000d",
	    "\"sb00000000000d\" : jump i_00000000000d",
	    "\"sb00000000000d\" : jump p_00000000000d",
	    "\"sb00000000000d\" : jump o_00000000000d",
	    "elements = { 80, 8080 }",
	    "elements = { 443, 8443 }",
	    "elements = { tcp, udp }",
	    "meta l4proto @l4 th dport 40053 accept",
	    "tcp dport @tls ip daddr . meta l4proto . tcp dport @n4_00000000000d",
	    "icmpv6 type @nd accept",
	    "udp dport 53 redirect to :40053",
	    NULL};
	struct sb_netpolicy p;
	char *s;

	NEED_NFT();
	assert_int_equal(sb_nft_table_add(nft, &host), SB_OK);
	policy_of(&p, g);
	assert_int_equal(sb_nft_run_add(nft, &r, &p), SB_OK);
	s = listing("list table inet sanbox");
	for (const char *const *n = names; *n; n++)
		if (!strstr(s, *n))
			fail_msg("no %s in the table", *n);
	assert_null(strstr(s, "{ tcp, udp } "));       /* no anonymous set */
	assert_null(strstr(s, "dport { 443, 8443 }")); /* in a rule */
	free(s);
	/* asked for by name: there, another not, nor a name too long */
	assert_int_equal(sb_nft_run_there(nft, r.id), 1);
	assert_int_equal(sb_nft_run_there(nft, "ffffffffffff"), 0);
	assert_int_equal(sb_nft_run_there(nft, "00000000000d00000000000d00000000000d"),
			 0);
	assert_int_equal(sb_nft_run_del(nft, r.id, r.tap), SB_OK);
	assert_int_equal(sb_nft_run_there(nft, r.id), 0);
	assert_int_equal(sb_nft_table_del(nft), SB_OK);
	assert_int_equal(sb_nft_run_there(nft, r.id), 0); /* no table */
}

/* 200 runs made and deleted leave the table (with one run) as it was;
 * each deletion is by name, one batch, whatever the table holds. */
static void test_many_runs(void **state)
{
	struct sb_nft_run keep = run_of("00000000000e"), r;
	static const char *const g[] = {"192.0.2.7:22", "[2001:db8::1]:443", NULL};
	struct sb_netpolicy p;
	char id[16], *before, *after;

	NEED_NFT();
	assert_int_equal(sb_nft_table_add(nft, &host), SB_OK);
	policy_of(&p, g);
	assert_int_equal(sb_nft_run_add(nft, &keep, &p), SB_OK);
	before = listing("list table inet sanbox");
	for (int i = 0; i < 200; i++) {
		snprintf(id, sizeof id, "5e7a%08x", (unsigned)i);
		r = run_of(id);
		assert_int_equal(sb_nft_run_add(nft, &r, &p), SB_OK);
	}
	after = listing("list set inet sanbox taps");
	assert_non_null(strstr(after, "\"sb5e7a000000c7\"")); /* the 200th */
	free(after);
	for (int i = 0; i < 200; i++) {
		snprintf(id, sizeof id, "5e7a%08x", (unsigned)i);
		r = run_of(id);
		assert_int_equal(sb_nft_run_del(nft, r.id, r.tap), SB_OK);
	}
	after = listing("list table inet sanbox");
	assert_string_equal(after, before);
	free(before);
	free(after);
	assert_int_equal(sb_nft_table_del(nft), SB_OK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_script_text),	  cmocka_unit_test(test_apply),
	    cmocka_unit_test(test_denials_empty), cmocka_unit_test(test_drops),
	    cmocka_unit_test(test_run_objects),	  cmocka_unit_test(test_many_runs),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
