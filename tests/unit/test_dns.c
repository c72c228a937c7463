/* test_dns.c - the DNS stub's codec: queries built by hand parse to their
 * fields, every refusal rule with a message that breaks it, names of
 * hostile bytes escaped, answers byte for byte, truncation, FORMERR, and
 * grant matching. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "netpolicy/dns.h"
#include "testutil.h"

/* A wire name from a string literal: its bytes and the NUL, the root. */
#define WIRE(s) (const uint8_t *)(s), sizeof(s)

struct hdr {
	uint16_t id, flags, qd, an, ns, ar;
};

/* An OPT record advertising 1232 bytes with a COOKIE option, as dig sends. */
static const uint8_t opt_cookie[] = {0,	 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 12, 0,
				     10, 0, 8,	1,    2,    3, 4, 5, 6, 7, 8};
/* An OPT record advertising 4096 bytes, no options. */
static const uint8_t opt_4096[] = {0, 0, 41, 0x10, 0x00, 0, 0, 0, 0, 0, 0};

static uint8_t *put16(uint8_t *p, unsigned v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
	return p + 2;
}

/* Writes a message into m: the header h, a question of the nlen bytes of
 * wire name (its terminating 0 included) and qtype, class IN, then the
 * tlen bytes of tail. Returns its length. */
static size_t build(uint8_t *m, struct hdr h, const uint8_t *name, size_t nlen,
		    uint16_t qtype, const uint8_t *tail, size_t tlen)
{
	uint8_t *p = m;

	p = put16(put16(put16(put16(put16(put16(p, h.id), h.flags), h.qd), h.an), h.ns),
		  h.ar);
	memcpy(p, name, nlen);
	p = put16(put16(p + nlen, qtype), 1);
	if (tlen)
		memcpy(p, tail, tlen);
	return (size_t)(p - m) + tlen;
}

/* A query for name (a wire literal) of type A, RD set, no EDNS. */
static size_t build_a(uint8_t *m, const uint8_t *name, size_t nlen)
{
	return build(m, (struct hdr){0x1234, 0x0100, 1, 0, 0, 0}, name, nlen, SB_DNS_A,
		     NULL, 0);
}

/* Parses name (a wire literal) in an A query and returns its presentation. */
static const char *present(const uint8_t *name, size_t nlen)
{
	static struct sb_dns_query q;
	uint8_t m[600];
	size_t n = build_a(m, name, nlen);

	if (sb_dns_parse_query(m, n, &q) != SB_OK)
		fail_msg("refused: %s", sb_errmsg(SB_ERR_PROTO));
	return q.name;
}

/* Asserts that m[0..n) is refused with a detail containing detail. */
static void refused(const uint8_t *m, size_t n, const char *detail)
{
	struct sb_dns_query q;

	assert_int_equal(sb_dns_parse_query(m, n, &q), SB_ERR_PROTO);
	tu_errmsg_has(SB_ERR_PROTO, detail);
}

static void test_parse_a(void **state)
{
	struct sb_dns_query q;
	uint8_t m[512];
	size_t n = build_a(m, WIRE("\3www\7Example\3COM"));

	assert_int_equal(n, 12 + 17 + 4);
	assert_int_equal(sb_dns_parse_query(m, n, &q), SB_OK);
	assert_int_equal(q.id, 0x1234);
	assert_int_equal(q.flags, 0x0100);
	assert_string_equal(q.name, "www.example.com");
	assert_int_equal(q.qtype, SB_DNS_A);
	assert_int_equal(q.qclass, 1);
	assert_int_equal(q.edns, 0);
	assert_int_equal(q.udp_size, 512);
	assert_int_equal(q.question_len, 17 + 4);
}

static void test_parse_aaaa_edns(void **state)
{
	static const uint8_t small[] = {0, 0, 41, 0x01, 0x00, 0, 0, 0, 0, 0, 0};
	struct sb_dns_query q;
	uint8_t m[512];
	size_t n;

	n = build(m, (struct hdr){0xabcd, 0x0120, 1, 0, 0, 1}, WIRE("\3api\6github\3com"),
		  SB_DNS_AAAA, opt_cookie, sizeof opt_cookie);
	assert_int_equal(sb_dns_parse_query(m, n, &q), SB_OK);
	assert_int_equal(q.id, 0xabcd);
	assert_int_equal(q.flags, 0x0120);
	assert_string_equal(q.name, "api.github.com");
	assert_int_equal(q.qtype, SB_DNS_AAAA);
	assert_int_equal(q.qclass, 1);
	assert_int_equal(q.edns, 1);
	assert_int_equal(q.udp_size, 1232);
	assert_int_equal(q.question_len, 16 + 4);

	n = build(m, (struct hdr){1, 0, 1, 0, 0, 1}, WIRE("\1a"), SB_DNS_AAAA, opt_4096,
		  sizeof opt_4096);
	assert_int_equal(sb_dns_parse_query(m, n, &q), SB_OK);
	assert_int_equal(q.udp_size, 4096);
	/* a size under 512 counts as 512 (RFC 6891, 6.2.3) */
	n = build(m, (struct hdr){1, 0, 1, 0, 0, 1}, WIRE("\1a"), SB_DNS_AAAA, small,
		  sizeof small);
	assert_int_equal(sb_dns_parse_query(m, n, &q), SB_OK);
	assert_int_equal(q.edns, 1);
	assert_int_equal(q.udp_size, 512);
}

static void test_parse_root(void **state)
{
	struct sb_dns_query q;
	uint8_t m[64];
	size_t n =
	    build(m, (struct hdr){7, 0, 1, 0, 0, 0}, WIRE(""), 2 /* NS */, NULL, 0);

	assert_int_equal(n, 12 + 5);
	assert_int_equal(sb_dns_parse_query(m, n, &q), SB_OK);
	assert_string_equal(q.name, "");
	assert_int_equal(q.qtype, 2);
	assert_int_equal(q.question_len, 5);
}

static void test_refused_header(void **state)
{
	static const uint8_t second[] = {1, 'b', 0, 0, 1, 0, 1}; /* b, A, IN */
	uint8_t m[512];
	size_t n;

	n = build(m, (struct hdr){1, 0x8100, 1, 0, 0, 0}, WIRE("\1a"), 1, NULL, 0);
	refused(m, n, "a response");
	n = build(m, (struct hdr){1, 0x0800, 1, 0, 0, 0}, WIRE("\1a"), 1, NULL, 0);
	refused(m, n, "opcode 1");
	n = build(m, (struct hdr){1, 0x2800, 1, 0, 0, 0}, WIRE("\1a"), 1, NULL, 0);
	refused(m, n, "opcode 5"); /* UPDATE */
	n = build(m, (struct hdr){1, 0, 0, 0, 0, 0}, WIRE("\1a"), 1, NULL, 0);
	refused(m, n, "0 questions");
	refused(m, 12, "0 questions");
	/* two questions, both present */
	n = build(m, (struct hdr){1, 0, 2, 0, 0, 0}, WIRE("\1a"), 1, second,
		  sizeof second);
	refused(m, n, "2 questions");
	n = build(m, (struct hdr){1, 0, 1, 1, 0, 0}, WIRE("\1a"), 1, NULL, 0);
	refused(m, n, "1 answer");
	n = build(m, (struct hdr){1, 0, 1, 0, 1, 0}, WIRE("\1a"), 1, NULL, 0);
	refused(m, n, "1 authority");
	for (size_t k = 0; k < 12; k++)
		refused(m, k, "less than a header");
}

static void test_refused_additional(void **state)
{
	/* an A record for "foo" and one for the root: neither is OPT */
	static const uint8_t a_foo[] = {3, 'f', 'o', 'o', 0, 0,	 1, 0, 1, 0,
					0, 0,	60,  0,	  4, 10, 0, 0, 1};
	static const uint8_t a_root[] = {0, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 10, 0, 0, 1};
	static const uint8_t opt_long[] = {0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 5, 0, 10};
	uint8_t m[512], two[2 * sizeof opt_4096];
	size_t n;

	memcpy(two, opt_4096, sizeof opt_4096);
	memcpy(two + sizeof opt_4096, opt_4096, sizeof opt_4096);
	n = build(m, (struct hdr){1, 0, 1, 0, 0, 2}, WIRE("\1a"), 1, two, sizeof two);
	refused(m, n, "2 additional records");
	/* two OPT records where one is counted */
	n = build(m, (struct hdr){1, 0, 1, 0, 0, 1}, WIRE("\1a"), 1, two, sizeof two);
	refused(m, n, "data after the message (11 of");
	n = build(m, (struct hdr){1, 0, 1, 0, 0, 1}, WIRE("\1a"), 1, a_foo, sizeof a_foo);
	refused(m, n, "not an OPT record");
	n = build(m, (struct hdr){1, 0, 1, 0, 0, 1}, WIRE("\1a"), 1, a_root,
		  sizeof a_root);
	refused(m, n, "not an OPT record");
	n = build(m, (struct hdr){1, 0, 1, 0, 0, 1}, WIRE("\1a"), 1, opt_long,
		  sizeof opt_long);
	refused(m, n, "OPT record cut short");
	/* counted but absent */
	n = build(m, (struct hdr){1, 0, 1, 0, 0, 1}, WIRE("\1a"), 1, NULL, 0);
	refused(m, n, "additional record cut short");
}

static void test_refused_question(void **state)
{
	uint8_t m[600], name[300];
	size_t n;

	/* "www" then a pointer to offset 12 (the literal without its NUL) */
	n = build_a(m, WIRE("\3www\300\14") - 1);
	refused(m, n, "compression pointer");
	n = build_a(m, WIRE("\300\14") - 1);
	refused(m, n, "compression pointer");
	/* a 64-byte label */
	memset(name, 'a', sizeof name);
	name[0] = 64;
	name[65] = 0;
	n = build_a(m, name, 66);
	refused(m, n, "longer than 63");
	name[0] = 0x80; /* a reserved label type */
	n = build_a(m, name, 66);
	refused(m, n, "longer than 63");
	/* 256 bytes: labels of 63, 63, 63 and 62 and the root */
	for (size_t i = 0; i < 3; i++)
		name[64 * i] = 63;
	name[192] = 62;
	name[255] = 0;
	n = build_a(m, name, 256);
	refused(m, n, "longer than 255");
	/* trailing bytes */
	n = build_a(m, WIRE("\1a"));
	m[n] = 0;
	refused(m, n + 1, "data after the message (1 of");
	/* every prefix of a whole query, header, question and OPT */
	n = build(m, (struct hdr){1, 0, 1, 0, 0, 1}, WIRE("\3www\7example\3com"), 1,
		  opt_cookie, sizeof opt_cookie);
	assert_int_equal(sb_dns_parse_query(m, n, &(struct sb_dns_query){0}), SB_OK);
	refused(m, 12, "question cut short");
	refused(m, 12 + 5, "question cut short");
	refused(m, 12 + 17 + 3, "question cut short");
	for (size_t k = 0; k < n; k++)
		refused(m, k, "dns: ");
}

static void test_name_limits(void **state)
{
	struct sb_dns_query q;
	uint8_t m[600], name[300];
	size_t n;

	/* a 63-byte label */
	memset(name, 'b', sizeof name);
	name[0] = 63;
	name[64] = 0;
	n = build_a(m, name, 65);
	assert_int_equal(sb_dns_parse_query(m, n, &q), SB_OK);
	assert_int_equal(strlen(q.name), 63);
	/* 255 bytes: labels of 63, 63, 63 and 61, every byte 0xff */
	memset(name, 0xff, sizeof name);
	for (size_t i = 0; i < 3; i++)
		name[64 * i] = 63;
	name[192] = 61;
	name[254] = 0;
	n = build_a(m, name, 255);
	assert_int_equal(sb_dns_parse_query(m, n, &q), SB_OK);
	assert_int_equal(strlen(q.name), 4 * 250 + 3);
	assert_memory_equal(q.name, "\\255\\255", 8);
	assert_memory_equal(q.name + 4 * 63, ".\\255", 5);
	assert_int_equal(q.question_len, 255 + 4);
}

static void test_escape(void **state)
{
	assert_string_equal(present(WIRE("\3a.b\3com")), "a\\.b.com");
	assert_string_equal(present(WIRE("\3A\\B")), "a\\\\b");
	assert_string_equal(present(WIRE("\4MiXd\2Zz")), "mixd.zz");
	assert_string_equal(present(WIRE("\2\0\377")), "\\000\\255");
	assert_string_equal(present(WIRE("\5 *@\x7f\x80")), "\\032\\042\\064\\127\\128");
	assert_string_equal(present(WIRE("\6_dmarc\3x-y\0019")), "_dmarc.x-y.9");
	/* one label "example.com" is not the name example.com */
	assert_string_equal(present(WIRE("\13example.com")), "example\\.com");
	assert_int_equal(
	    sb_dns_name_match("example.com", present(WIRE("\13example.com"))), 0);
	assert_string_equal(present(WIRE("\11a.example\3com")), "a\\.example.com");
	assert_int_equal(
	    sb_dns_name_match("*.example.com", present(WIRE("\11a.example\3com"))), 0);
	/* a NUL inside a label cannot cut the name short */
	assert_string_equal(present(WIRE("\5evil\0\3com")), "evil\\000.com");
}

static void test_header_id(void **state)
{
	uint8_t m[16] = {0x12, 0x34, 0x01, 0x00};
	uint16_t id = 0;

	assert_int_equal(sb_dns_header_id(m, 12, &id), SB_OK);
	assert_int_equal(id, 0x1234);
	assert_int_equal(sb_dns_header_id(m, 16, &id), SB_OK);
	assert_int_equal(sb_dns_header_id(m, 11, &id), SB_ERR_PROTO);
	m[2] = 0x80; /* a response */
	assert_int_equal(sb_dns_header_id(m, 12, &id), SB_ERR_PROTO);
	tu_errmsg_has(SB_ERR_PROTO, "a response");
}

/* Parses m[0..n) into *q, asserting it is accepted. */
static void parse_ok(const uint8_t *m, size_t n, struct sb_dns_query *q)
{
	if (sb_dns_parse_query(m, n, q) != SB_OK)
		fail_msg("refused: %s", sb_errmsg(SB_ERR_PROTO));
}

static void test_answer_a(void **state)
{
	static const char want[] =
	    "\xbe\xef\x85\0\0\1\0\1\0\0\0\0" /* id, QR AA RD, 1, 1 */
	    "\7example\3com\0\0\1\0\1"	     /* example.com A IN */
	    "\xc0\x0c\0\1\0\1\0\0\1\x2c\0\4" /* A IN, ttl 300 */
	    "\x5d\xb8\xd8\x22";		     /* 93.184.216.34 */
	struct sb_dns_rr rr = {.type = SB_DNS_A, .ttl = 300, .addr = {93, 184, 216, 34}};
	struct sb_dns_query q;
	uint8_t m[512], out[512];
	size_t n = build(m, (struct hdr){0xbeef, 0x0100, 1, 0, 0, 0},
			 WIRE("\7example\3com"), SB_DNS_A, NULL, 0);
	size_t len;

	parse_ok(m, n, &q);
	len = sb_dns_answer(&q, m, SB_DNS_NOERROR, &rr, 1, 512, out, sizeof out);
	assert_int_equal(len, sizeof want - 1);
	assert_memory_equal(out, want, sizeof want - 1);
	/* an answer is never taken for a query */
	refused(out, len, "a response");
	assert_int_equal(sb_dns_header_id(out, len, &(uint16_t){0}), SB_ERR_PROTO);
}

static void test_answer_edns(void **state)
{
	static const uint8_t opt[] = {0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0};
	struct sb_dns_rr rr[2] = {
	    {.type = SB_DNS_AAAA, .ttl = 60, .addr = {0x20, 0x01, 0x0d, 0xb8, [15] = 1}},
	    {.type = SB_DNS_AAAA, .ttl = 61, .addr = {0x20, 0x01, 0x0d, 0xb8, [15] = 2}},
	};
	struct sb_dns_query q;
	uint8_t m[512], out[512];
	size_t n =
	    build(m, (struct hdr){9, 0x0100, 1, 0, 0, 1}, WIRE("\3Api\6GitHub\3com"),
		  SB_DNS_AAAA, opt_cookie, sizeof opt_cookie);
	size_t len, a;

	parse_ok(m, n, &q);
	len = sb_dns_answer(&q, m, SB_DNS_NOERROR, rr, 2, 1232, out, sizeof out);
	assert_int_equal(len, 12 + q.question_len + 2 * 28 + sizeof opt);
	assert_memory_equal(out, "\0\x09\x85\0\0\1\0\2\0\0\0\1", 12);
	/* the question as received, case and all */
	assert_memory_equal(out + 12, m + 12, q.question_len);
	a = 12 + q.question_len;
	assert_memory_equal(out + a, "\xc0\x0c\0\x1c\0\1\0\0\0\x3c\0\x10", 12);
	assert_memory_equal(out + a + 12, rr[0].addr, 16);
	assert_memory_equal(out + a + 28, "\xc0\x0c\0\x1c\0\1\0\0\0\x3d\0\x10", 12);
	assert_memory_equal(out + a + 40, rr[1].addr, 16);
	assert_memory_equal(out + len - sizeof opt, opt, sizeof opt);
	refused(out, len, "a response");
}

static void test_answer_truncated(void **state)
{
	struct sb_dns_rr rr[64];
	struct sb_dns_query q;
	uint8_t m[512], out[2048];
	size_t n = build_a(m, WIRE("\3www\7example\3com")), len;

	for (size_t i = 0; i < 64; i++)
		rr[i] = (struct sb_dns_rr){
		    .type = SB_DNS_A, .ttl = 5, .addr = {10, 0, 0, (uint8_t)i}};
	parse_ok(m, n, &q);
	/* 12 + 21 + 29 * 16 = 497 bytes fit 512 */
	len = sb_dns_answer(&q, m, SB_DNS_NOERROR, rr, 29, 512, out, sizeof out);
	assert_int_equal(len, 497);
	assert_memory_equal(out + 2, "\x85\0\0\1\0\x1d", 6);
	/* 30 do not: TC and no answer */
	len = sb_dns_answer(&q, m, SB_DNS_NOERROR, rr, 30, 512, out, sizeof out);
	assert_int_equal(len, 12 + 21);
	assert_memory_equal(out, "\x12\x34\x87\0\0\1\0\0\0\0\0\0", 12);
	assert_memory_equal(out + 12, m + 12, 21);
	/* over TCP they fit */
	len = sb_dns_answer(&q, m, SB_DNS_NOERROR, rr, 64, 65535, out, sizeof out);
	assert_int_equal(len, 12 + 21 + 64 * 16);
	assert_int_equal(out[2] & 0x02, 0);

	/* with EDNS the OPT record stays in a truncated answer */
	n = build(m, (struct hdr){0x1234, 0x0100, 1, 0, 0, 1},
		  WIRE("\3www\7example\3com"), SB_DNS_A, opt_4096, sizeof opt_4096);
	parse_ok(m, n, &q);
	len = sb_dns_answer(&q, m, SB_DNS_NOERROR, rr, 30, 512, out, sizeof out);
	assert_int_equal(len, 12 + 21 + 11);
	assert_memory_equal(out + 2, "\x87\0\0\1\0\0\0\0\0\1", 10);
	assert_memory_equal(out + 33, "\0\0\x29\x04\xd0", 5);
}

static void test_answer_flags_and_cap(void **state)
{
	struct sb_dns_rr rr = {.type = SB_DNS_A, .ttl = 1, .addr = {127, 0, 0, 1}};
	struct sb_dns_query q;
	uint8_t m[512], out[512];
	/* RD clear, AD and CD set: none is copied */
	size_t n = build(m, (struct hdr){0x0102, 0x0030, 1, 0, 0, 0}, WIRE("\1x"),
			 SB_DNS_A, NULL, 0);
	size_t len;

	parse_ok(m, n, &q);
	len = sb_dns_answer(&q, m, SB_DNS_NXDOMAIN, NULL, 0, 512, out, sizeof out);
	assert_int_equal(len, 12 + 7);
	assert_memory_equal(out, "\1\2\x84\x03\0\1\0\0\0\0\0\0", 12);
	len = sb_dns_answer(&q, m, SB_DNS_REFUSED, NULL, 0, 512, out, sizeof out);
	assert_int_equal(out[3], 0x05);
	/* cap: exactly enough, then one byte short */
	assert_int_equal(sb_dns_answer(&q, m, 0, &rr, 1, 512, out, 12 + 7 + 16),
			 12 + 7 + 16);
	assert_int_equal(sb_dns_answer(&q, m, 0, &rr, 1, 512, out, 12 + 7 + 15), 0);
	/* a record of another type is the caller's mistake */
	rr.type = SB_DNS_ANY;
	assert_int_equal(sb_dns_answer(&q, m, 0, &rr, 1, 512, out, sizeof out), 0);
}

static void test_formerr(void **state)
{
	uint8_t out[16];

	memset(out, 0xaa, sizeof out);
	assert_int_equal(sb_dns_formerr(0x4242, out, sizeof out), 12);
	assert_memory_equal(out, "\x42\x42\x80\x01\0\0\0\0\0\0\0\0", 12);
	assert_int_equal(out[12], 0xaa);
	assert_int_equal(sb_dns_formerr(0x4242, out, 11), 0);
	refused(out, 12, "a response");
}

static void test_name_match(void **state)
{
	assert_int_equal(sb_dns_name_match("api.example.com", "api.example.com"), 1);
	assert_int_equal(sb_dns_name_match("api.example.com", "example.com"), 0);
	assert_int_equal(sb_dns_name_match("api.example.com", "xapi.example.com"), 0);
	assert_int_equal(sb_dns_name_match("api.example.com", "a.api.example.com"), 0);
	assert_int_equal(sb_dns_name_match("api.example.com", "api.example.com.evil"), 0);
	assert_int_equal(sb_dns_name_match("*.example.com", "a.example.com"), 1);
	assert_int_equal(sb_dns_name_match("*.example.com", "b.a.example.com"), 1);
	assert_int_equal(sb_dns_name_match("*.example.com", "example.com"), 0);
	assert_int_equal(sb_dns_name_match("*.example.com", "xexample.com"), 0);
	assert_int_equal(sb_dns_name_match("*.example.com", "a.xexample.com"), 0);
	assert_int_equal(sb_dns_name_match("*.example.com", "a.example.com.evil"), 0);
	assert_int_equal(sb_dns_name_match("*.com", "example.com"), 1);
	/* escapes never match, even where the text would */
	assert_int_equal(sb_dns_name_match("*.example.com", "a\\.example.com"), 0);
	assert_int_equal(sb_dns_name_match("example.com", "example\\.com"), 0);
	assert_int_equal(sb_dns_name_match("*.example.com", "\\042.example.com"), 0);
	assert_int_equal(sb_dns_name_match("example.com", ""), 0);
	assert_int_equal(sb_dns_name_match("*.example.com", ""), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse_a),
	    cmocka_unit_test(test_parse_aaaa_edns),
	    cmocka_unit_test(test_parse_root),
	    cmocka_unit_test(test_refused_header),
	    cmocka_unit_test(test_refused_additional),
	    cmocka_unit_test(test_refused_question),
	    cmocka_unit_test(test_name_limits),
	    cmocka_unit_test(test_escape),
	    cmocka_unit_test(test_header_id),
	    cmocka_unit_test(test_answer_a),
	    cmocka_unit_test(test_answer_edns),
	    cmocka_unit_test(test_answer_truncated),
	    cmocka_unit_test(test_answer_flags_and_cap),
	    cmocka_unit_test(test_formerr),
	    cmocka_unit_test(test_name_match),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
