/* test_netpolicy.c - network grants (parse, canonical form, refusals), the
 * resolution of a run spec's network fields, and the enforcer's lock of a
 * network namespace (in a directory of the test's own). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/mpack.h"
#include "netpolicy/netpolicy.h"
#include "netpolicy/nslock.h"
#include "testutil.h"

/* Parses text and checks its canonical form. */
static void grant_ok(const char *text, const char *canon, int family, int prefix, int udp,
		     int lo, int hi)
{
	struct sb_net_grant g;
	char out[SB_NET_HOST_MAX + 32];

	if (sb_net_grant_parse(text, strlen(text), &g) != SB_OK)
		fail_msg("'%s' refused: %s", text, sb_errmsg(SB_ERR_INVAL));
	sb_net_grant_format(&g, out, sizeof out);
	assert_string_equal(out, canon);
	assert_int_equal(g.family, family);
	assert_int_equal(g.prefix, prefix);
	assert_int_equal(g.udp, udp);
	assert_int_equal(g.port_lo, lo);
	assert_int_equal(g.port_hi, hi);
	/* the canonical form reads back as itself */
	assert_int_equal(sb_net_grant_parse(out, strlen(out), &g), SB_OK);
	sb_net_grant_format(&g, out, sizeof out);
	assert_string_equal(out, canon);
}

static void test_grants_parse(void **state)
{
	grant_ok("api.github.com:443", "api.github.com:443", 0, 0, 0, 443, 443);
	grant_ok("tcp/API.GitHub.com:443", "api.github.com:443", 0, 0, 0, 443, 443);
	grant_ok("*.pypi.org:80-443", "*.pypi.org:80-443", 0, 0, 0, 80, 443);
	grant_ok("udp/10.0.0.53:53", "udp/10.0.0.53:53", 4, 32, 1, 53, 53);
	grant_ok("10.0.0.0/8:5432", "10.0.0.0/8:5432", 4, 8, 0, 5432, 5432);
	grant_ok("0.0.0.0/0:443", "0.0.0.0/0:443", 4, 0, 0, 443, 443);
	grant_ok("[2001:DB8::/32]:443", "[2001:db8::/32]:443", 6, 32, 0, 443, 443);
	grant_ok("[::1]:8080", "[::1]:8080", 6, 128, 0, 8080, 8080);
	grant_ok("x1.example:1-65535", "x1.example:1-65535", 0, 0, 0, 1, 65535);
}

static void test_grants_refused(void **state)
{
	static const char *const bad[] = {
	    "",
	    "example.com",	    /* no port */
	    "example.com:0",	    /* port 0 */
	    "example.com:65536",    /* past 65535 */
	    "example.com:443-80",   /* reversed range */
	    "example.com:http",	    /* not a number */
	    "example.com:-5",	    /* no low end */
	    "sctp/example.com:80",  /* unknown protocol */
	    "exa_mple.com:80",	    /* bad character */
	    "-lead.example:80",	    /* label starts with '-' */
	    "trail-.example:80",    /* label ends with '-' */
	    "a..b:80",		    /* empty label */
	    "example.com.:80",	    /* trailing dot */
	    "10.0.0:80",	    /* neither address nor name */
	    "300.1.1.1:80",	    /* not an address */
	    "10.0.0.1/8:80",	    /* host bits set */
	    "10.0.0.0/33:80",	    /* prefix too long */
	    "10.0.0.0/:80",	    /* empty prefix */
	    "2001:db8::1:443",	    /* IPv6 without brackets */
	    "[2001:db8::1:443",	    /* no closing bracket */
	    "[2001:db8::1]443",	    /* no colon after it */
	    "[example.com]:443",    /* brackets hold an IPv6 address only */
	    "[2001:db8::1/64]:443", /* host bits set */
	    "*.:80",		    /* nothing after the wildcard */
	    "a.*.example:80",	    /* wildcard inside */
	};
	struct sb_net_grant g;
	char longname[400];

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		if (sb_net_grant_parse(bad[i], strlen(bad[i]), &g) != SB_ERR_INVAL)
			fail_msg("'%s' accepted", bad[i]);
	/* the detail quotes the grant */
	assert_int_equal(sb_net_grant_parse("10.0.0.1/8:80", 13, &g), SB_ERR_INVAL);
	assert_non_null(strstr(sb_errmsg(SB_ERR_INVAL), "'10.0.0.1/8:80'"));
	assert_non_null(strstr(sb_errmsg(SB_ERR_INVAL), "host bits"));
	assert_int_equal(sb_net_grant_parse("2001:db8::1:443", 15, &g), SB_ERR_INVAL);
	assert_non_null(strstr(sb_errmsg(SB_ERR_INVAL), "'2001:db8::1:443'"));
	/* a label of 64 bytes, a name past 253, a NUL inside */
	memset(longname, 'a', 64);
	strcpy(longname + 64, ".example:80");
	assert_int_equal(sb_net_grant_parse(longname, strlen(longname), &g),
			 SB_ERR_INVAL);
	for (int i = 0; i < 300; i += 2) {
		longname[i] = 'a';
		longname[i + 1] = '.';
	}
	strcpy(longname + 300, "ex:80");
	assert_int_equal(sb_net_grant_parse(longname, strlen(longname), &g),
			 SB_ERR_INVAL);
	assert_int_equal(sb_net_grant_parse("a.example:80", 12, &g), SB_OK);
	assert_int_equal(sb_net_grant_parse("a\0example:80", 12, &g), SB_ERR_INVAL);
}

/* Resolves the spec given as JSON text over defaults dflt. */
static int resolve_over(const char *json, const struct sb_netpolicy *dflt,
			struct sb_netpolicy *p)
{
	msgpack_sbuffer sb;
	msgpack_zone zone;
	msgpack_object spec;
	int rc;

	tu_json(&sb, json);
	msgpack_zone_init(&zone, 1024);
	assert_int_equal(sb_payload_parse(sb.data, sb.size, &zone, &spec), SB_OK);
	rc = sb_netpolicy_resolve(&spec, dflt, p);
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&sb);
	return rc;
}

static int resolve(const char *json, struct sb_netpolicy *p)
{
	return resolve_over(json, NULL, p);
}

/* A template's network under the spec's: its mode unless the spec says
 * one, its grants and then the spec's, one grant both give once. */
static void test_template_defaults(void **state)
{
	struct sb_netpolicy t, p;
	char out[SB_NET_HOST_MAX + 32];

	memset(&t, 0, sizeof t);
	t.mode = SB_NET_ACL;
	assert_int_equal(sb_net_grant_parse("a.test:443", 10, &t.grants[t.ngrants++]), SB_OK);
	assert_int_equal(resolve_over("{}", &t, &p), SB_OK);
	assert_int_equal(p.mode, SB_NET_ACL);
	assert_int_equal(p.ngrants, 1);
	assert_int_equal(resolve_over("{'allow': ['b.test:80', 'A.test:443']}", &t, &p), SB_OK);
	assert_int_equal(p.ngrants, 2);
	sb_net_grant_format(&p.grants[1], out, sizeof out);
	assert_string_equal(out, "b.test:80");
	assert_int_equal(resolve_over("{'network': 'none'}", &t, &p), SB_ERR_INVAL);
	assert_non_null(strstr(sb_errmsg(SB_ERR_INVAL), "need network acl"));
	t.ngrants = 0;
	t.mode = SB_NET_NONE;
	assert_int_equal(resolve_over("{'network': 'acl'}", &t, &p), SB_OK);
	assert_int_equal(p.mode, SB_NET_ACL);
}

static void test_resolve(void **state)
{
	struct sb_netpolicy p;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	sb_mapw m;
	msgpack_zone zone;
	msgpack_object out;
	char mode[8];

	assert_int_equal(resolve("{}", &p), SB_OK);
	assert_int_equal(p.mode, SB_NET_NONE);
	assert_int_equal(p.ngrants, 0);
	assert_int_equal(resolve("{'network': 'none', 'allow': []}", &p), SB_OK);
	assert_int_equal(resolve("{'network': 'bridge'}", &p), SB_ERR_INVAL);
	assert_int_equal(resolve("{'network': 1}", &p), SB_ERR_INVAL);
	assert_int_equal(resolve("{'allow': 'x:1'}", &p), SB_ERR_INVAL);
	assert_int_equal(resolve("{'allow': ['example.com:443']}", &p), SB_ERR_INVAL);
	assert_non_null(strstr(sb_errmsg(SB_ERR_INVAL), "need network acl"));
	/* acl with its grants (whether the host can enforce it is the
	 * enforcer's to say: netpolicy/net.h); a bad or repeated grant is
	 * named */
	assert_int_equal(resolve("{'network': 'acl', 'allow': ['x']}", &p), SB_ERR_INVAL);
	assert_int_equal(
	    resolve("{'network': 'acl', 'allow': ['x.io:1', 'udp/10.0.0.0/8:53']}", &p),
	    SB_OK);
	assert_int_equal(p.mode, SB_NET_ACL);
	assert_int_equal(p.ngrants, 2);
	assert_int_equal(
	    resolve("{'network': 'acl', 'allow': ['X.io:1', 'tcp/x.io:1']}", &p),
	    SB_ERR_INVAL);
	assert_non_null(strstr(sb_errmsg(SB_ERR_INVAL), "grant x.io:1 is given twice"));
	assert_int_equal(resolve("{'network': 'acl'}", &p), SB_OK);
	assert_int_equal(p.ngrants, 0);

	/* what run.policy.resolved records */
	assert_int_equal(resolve("{}", &p), SB_OK);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	sb_netpolicy_pack(&p, &m);
	assert_int_equal(sb_mapw_end(&m), SB_OK);
	assert_int_equal(m.n, 2);
	msgpack_zone_init(&zone, 256);
	assert_int_equal(sb_payload_parse(sb.data, sb.size, &zone, &out), SB_OK);
	assert_int_equal(sb_map_str(&out, "network", mode, sizeof mode), 4);
	assert_string_equal(mode, "none");
	assert_int_equal(sb_map_get(&out, "allow")->type, MSGPACK_OBJECT_ARRAY);
	assert_int_equal(sb_map_get(&out, "allow")->via.array.size, 0);
	msgpack_zone_destroy(&zone);
	msgpack_sbuffer_destroy(&sb);
}

/* The lock: one holder; a second is refused naming the first; a lock
 * that records a fence stays for the next holder, which reads it; one
 * without goes when it is let go, also after a fence was undone. */
static void test_ns_lock(void **state)
{
	char dir[] = "/tmp/sbnslock.XXXXXX", path[128], other[128];
	const char holder[] = "pid 4242 fence 1 home /h\n";
	int fd, fd2, fence = -1;
	struct stat st;

	(void)state;
	assert_non_null(mkdtemp(dir));
	assert_int_equal(sb_net_lock_take(dir, &fd, &fence, path, sizeof path), SB_OK);
	assert_int_equal(fence, 0);
	assert_ptr_equal(strstr(path, dir), path);
	assert_int_equal(pwrite(fd, holder, sizeof holder - 1, 0), sizeof holder - 1);
	assert_int_equal(sb_net_lock_take(dir, &fd2, &fence, other, sizeof other),
			 SB_ERR_UNAVAIL);
	assert_non_null(strstr(sb_errmsg(SB_ERR_UNAVAIL), "the daemon of /h (pid 4242)"));
	/* a fence is kept for the next holder */
	sb_net_lock_drop(fd, path, 1);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(sb_net_lock_take(dir, &fd, &fence, path, sizeof path), SB_OK);
	assert_int_equal(fence, 1);
	/* the fence undone (the holder wrote fence 0), the file goes */
	sb_net_lock_drop(fd, path, 0);
	assert_int_equal(stat(path, &st), -1);
	assert_int_equal(errno, ENOENT);
	/* and the next holder makes it again */
	assert_int_equal(sb_net_lock_take(dir, &fd, &fence, path, sizeof path), SB_OK);
	assert_int_equal(fence, 0);
	assert_int_equal(stat(path, &st), 0);
	sb_net_lock_drop(fd, path, 0);
	sb_net_lock_drop(-1, path, 0); /* nothing held: nothing done */
	assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_grants_parse),
	    cmocka_unit_test(test_template_defaults),
	    cmocka_unit_test(test_grants_refused),
	    cmocka_unit_test(test_resolve),
	    cmocka_unit_test(test_ns_lock),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
