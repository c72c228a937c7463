/* test_sniff.c - the name each request of a guest connection asks for:
 * TLS ClientHellos (a real one from OpenSSL, and built ones), HTTP/1.x
 * requests, pipelined with their bodies, fed whole and in pieces, and the
 * hostile forms the parser refuses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "netpolicy/netpolicy.h"
#include "netpolicy/sniff.h"
#include "testutil.h"
#include "tlshello.h"

/* A ClientHello captured from `openssl s_client -servername a.test -groups
 * x25519` (OpenSSL 3.0): one record of 294 bytes. */
static const uint8_t real_hello[] = {
    0x16, 0x03, 0x01, 0x01, 0x21, 0x01, 0x00, 0x01, 0x1d, 0x03, 0x03, 0x82, 0xf3, 0x76,
    0xb2, 0xf0, 0x6a, 0x3d, 0x5e, 0xb7, 0x6b, 0xa0, 0x3d, 0x39, 0x21, 0x75, 0x82, 0xfc,
    0x6e, 0x6d, 0x66, 0x64, 0x9a, 0x97, 0xd2, 0x79, 0x75, 0x54, 0x2d, 0x7f, 0x30, 0xec,
    0x56, 0x20, 0x0c, 0x43, 0xf1, 0x81, 0x34, 0xb5, 0x8c, 0x72, 0xbe, 0xe2, 0x4c, 0x57,
    0xda, 0x37, 0xed, 0xf5, 0x8f, 0x87, 0xa0, 0x67, 0x2d, 0xee, 0x0d, 0xc6, 0x3f, 0xb4,
    0x1d, 0x0c, 0x4b, 0x7d, 0x00, 0xea, 0x00, 0x3e, 0x13, 0x02, 0x13, 0x03, 0x13, 0x01,
    0xc0, 0x2c, 0xc0, 0x30, 0x00, 0x9f, 0xcc, 0xa9, 0xcc, 0xa8, 0xcc, 0xaa, 0xc0, 0x2b,
    0xc0, 0x2f, 0x00, 0x9e, 0xc0, 0x24, 0xc0, 0x28, 0x00, 0x6b, 0xc0, 0x23, 0xc0, 0x27,
    0x00, 0x67, 0xc0, 0x0a, 0xc0, 0x14, 0x00, 0x39, 0xc0, 0x09, 0xc0, 0x13, 0x00, 0x33,
    0x00, 0x9d, 0x00, 0x9c, 0x00, 0x3d, 0x00, 0x3c, 0x00, 0x35, 0x00, 0x2f, 0x00, 0xff,
    0x01, 0x00, 0x00, 0x96, 0x00, 0x00, 0x00, 0x0b, 0x00, 0x09, 0x00, 0x00, 0x06, 0x61,
    0x2e, 0x74, 0x65, 0x73, 0x74, 0x00, 0x0b, 0x00, 0x04, 0x03, 0x00, 0x01, 0x02, 0x00,
    0x0a, 0x00, 0x04, 0x00, 0x02, 0x00, 0x1d, 0x00, 0x23, 0x00, 0x00, 0x00, 0x16, 0x00,
    0x00, 0x00, 0x17, 0x00, 0x00, 0x00, 0x0d, 0x00, 0x2a, 0x00, 0x28, 0x04, 0x03, 0x05,
    0x03, 0x06, 0x03, 0x08, 0x07, 0x08, 0x08, 0x08, 0x09, 0x08, 0x0a, 0x08, 0x0b, 0x08,
    0x04, 0x08, 0x05, 0x08, 0x06, 0x04, 0x01, 0x05, 0x01, 0x06, 0x01, 0x03, 0x03, 0x03,
    0x01, 0x03, 0x02, 0x04, 0x02, 0x05, 0x02, 0x06, 0x02, 0x00, 0x2b, 0x00, 0x09, 0x08,
    0x03, 0x04, 0x03, 0x03, 0x03, 0x02, 0x03, 0x01, 0x00, 0x2d, 0x00, 0x02, 0x01, 0x01,
    0x00, 0x33, 0x00, 0x26, 0x00, 0x24, 0x00, 0x1d, 0x00, 0x20, 0x71, 0x61, 0x17, 0xf4,
    0x36, 0x77, 0xdd, 0xac, 0x8d, 0x50, 0x87, 0xf8, 0x03, 0xf4, 0x9d, 0xa1, 0x65, 0xc5,
    0x9b, 0x5b, 0x9b, 0xe2, 0xcf, 0x42, 0x54, 0xee, 0x44, 0x23, 0xdc, 0x95, 0xf3, 0x2a,
};

/* What a proxy saw: each NAME (with its name) and PASS (consecutive ones
 * merged) with its byte count, then the answer that ended it, as one line:
 * "NAME a.test 294; OPAQUE". */
struct run {
	char trace[512];
	size_t read;	  /* stream bytes given to the parser in all */
	size_t read_name; /* of them, when the first NAME came */
	int ech;
};

static void trace_add(struct run *r, const char *fmt, ...)
{
	size_t len = strlen(r->trace);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->trace + len, sizeof r->trace - len, fmt, ap);
	va_end(ap);
}

/* Acts as the proxy: gives the stream to a fresh parser step bytes at a
 * time, holding what is not forwarded (SB_SNIFF_HOLD at most), forwarding
 * and dropping what the parser says, until OPAQUE, BAD, or the stream's
 * end. */
static void run(const void *stream, size_t len, size_t step, struct run *r)
{
	static uint8_t hold[SB_SNIFF_HOLD];
	const uint8_t *in = stream;
	char name[SB_NET_HOST_MAX];
	size_t held = 0, pass, passed = 0, k;
	struct sb_sniff s;
	int rc;

	memset(r, 0, sizeof *r);
	sb_sniff_init(&s);
	for (;;) {
		memset(name, 'x', sizeof name);
		rc = sb_sniff_feed(&s, hold, held, &pass, name, sizeof name);
		if ((rc == SB_SNIFF_NAME || rc == SB_SNIFF_OPAQUE ||
		     rc == SB_SNIFF_BAD) &&
		    passed) {
			trace_add(r, "PASS %zu; ", passed);
			passed = 0;
		}
		if (rc == SB_SNIFF_NAME || rc == SB_SNIFF_PASS) {
			assert_true(pass > 0 && pass <= held);
			if (rc == SB_SNIFF_NAME) {
				assert_non_null(memchr(name, 0, sizeof name));
				trace_add(r, "NAME %s %zu; ", name[0] ? name : "\"\"",
					  pass);
				if (!r->read_name)
					r->read_name = r->read;
			} else {
				passed += pass;
			}
			memmove(hold, hold + pass, held - pass);
			held -= pass;
			continue;
		}
		assert_int_equal(pass, 0);
		if (rc != SB_SNIFF_MORE || r->read == len)
			break;
		k = len - r->read < step ? len - r->read : step;
		if (k > SB_SNIFF_HOLD - held)
			k = SB_SNIFF_HOLD - held;
		memcpy(hold + held, in + r->read, k);
		held += k;
		r->read += k;
	}
	if (passed)
		trace_add(r, "PASS %zu; ", passed);
	if (rc == SB_SNIFF_BAD)
		assert_true(strlen(sb_errmsg(SB_SNIFF_BAD)) > 0);
	trace_add(r, "%s",
		  rc == SB_SNIFF_MORE	  ? "MORE"
		  : rc == SB_SNIFF_OPAQUE ? "OPAQUE"
		  : rc == SB_SNIFF_BAD	  ? "BAD"
					  : "?");
	r->ech = s.ech;
}

/* Runs the stream whole and in pieces of 1 and 7 bytes: each gives want. */
static void expect(const void *stream, size_t len, const char *want)
{
	static const size_t steps[] = {SB_SNIFF_HOLD, 1, 7};
	struct run r;

	for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
		run(stream, len, steps[i], &r);
		if (strcmp(r.trace, want))
			fail_msg("in steps of %zu: got '%s', want '%s' (%s)", steps[i],
				 r.trace, want, sb_errmsg(SB_SNIFF_BAD));
	}
}

static void expect_str(const char *stream, const char *want)
{
	expect(stream, strlen(stream), want);
}

/* Expects the stream refused, with why in the detail. */
static void refused(const void *stream, size_t len, const char *why)
{
	struct run r;

	run(stream, len, SB_SNIFF_HOLD, &r);
	if (strcmp(r.trace, "BAD"))
		fail_msg("'%s' for a stream that should be refused for %s", r.trace, why);
	tu_errmsg_has(SB_SNIFF_BAD, why);
	expect(stream, len, "BAD");
}

static void refused_str(const char *stream, const char *why)
{
	refused(stream, strlen(stream), why);
}

/* --- TLS --- */

/* Moves the handshake bytes of the one record rec into two records, the
 * first holding cut of them; returns the new length. */
static size_t split(uint8_t *out, const uint8_t *rec, size_t n, size_t cut)
{
	memcpy(out, rec, 3);
	put16(out + 3, cut);
	memcpy(out + 5, rec + 5, cut);
	memcpy(out + 5 + cut, rec, 3);
	put16(out + 8 + cut, n - 5 - cut);
	memcpy(out + 10 + cut, rec + 5 + cut, n - 5 - cut);
	return n + 5;
}

static void test_tls_real(void **state)
{
	uint8_t stream[sizeof real_hello + 40];
	struct run r;

	expect(real_hello, sizeof real_hello, "NAME a.test 294; OPAQUE");
	/* the bytes after it (a ChangeCipherSpec, early data) are not read */
	memcpy(stream, real_hello, sizeof real_hello);
	memset(stream + sizeof real_hello, 0x17, 40);
	expect(stream, sizeof stream, "NAME a.test 294; OPAQUE");
	/* fed a byte at a time it waits for the last one */
	run(real_hello, sizeof real_hello, 1, &r);
	assert_string_equal(r.trace, "NAME a.test 294; OPAQUE");
	assert_int_equal(r.read_name, sizeof real_hello);
	assert_int_equal(r.ech, 0);
	/* cut short, it waits */
	expect(real_hello, sizeof real_hello - 1, "MORE");
}

static void test_tls_records(void **state)
{
	static const size_t cuts[] = {1, 3, 4, 5, 100, 288};
	uint8_t rec[sizeof real_hello + 5], more[sizeof real_hello + 1];

	for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
		size_t n = split(rec, real_hello, sizeof real_hello, cuts[i]);
		expect(rec, n, "NAME a.test 299; OPAQUE");
	}
	/* a byte after the ClientHello inside its record */
	memcpy(more, real_hello, sizeof real_hello);
	put16(more + 3, sizeof real_hello - 4);
	more[sizeof real_hello] = 0x14;
	refused(more, sizeof more, "after the ClientHello");
}

static void test_tls_names(void **state)
{
	uint8_t e[600], rec[700];
	char want[320];
	size_t n;
	struct run r;

	/* no server_name, and no extensions at all */
	n = ext(e, 10, "\x00\x02\x00\x1d", 4);
	expect(rec, hello(rec, e, n), "NAME \"\" 60; OPAQUE");
	expect(rec, hello(rec, NULL, 0), "NAME \"\" 50; OPAQUE");
	/* lowered, trailing dot gone */
	n = sni(e, "API.Example.COM.");
	expect(rec, hello(rec, e, n), "NAME api.example.com 77; OPAQUE");
	n = sni(e, "under_score-1.example");
	expect(rec, hello(rec, e, n), "NAME under_score-1.example 82; OPAQUE");
	/* encrypted_client_hello: the outer name is the one returned */
	n = sni(e, "public.example");
	n += ext(e + n, 0xfe0d, "\x00\x00\x01\x00\x01\x07\x00\x00", 8);
	n = hello(rec, e, n);
	run(rec, n, 1, &r);
	assert_string_equal(r.trace, "NAME public.example 87; OPAQUE");
	assert_int_equal(r.ech, 1);
	/* a name of 253 bytes fits; 254 does not */
	memset(e + 300, 'a', 253);
	e[553] = 0;
	n = sni(e, (const char *)e + 300);
	snprintf(want, sizeof want, "NAME %s 314; OPAQUE", (const char *)e + 300);
	expect(rec, hello(rec, e, n), want);
	e[553] = 'a';
	e[554] = 0;
	n = sni(e, (const char *)e + 300);
	refused(rec, hello(rec, e, n), "254 bytes");
}

static void test_tls_refused(void **state)
{
	static const char *const names[] = {"a b", "a/b", "a:443", "a..b",
					    ".a",  "..",  "a\x7f", "\xc3\xa9.example"};
	static const uint8_t sslv2[] = {0x80, 0x2e, 0x01, 0x00, 0x02,
					0x00, 0x15, 0x00, 0x00};
	static const uint8_t alert[] = {0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28};
	uint8_t e[600], rec[700], d[64];
	size_t n;

	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		n = sni(e, names[i]);
		n = hello(rec, e, n);
		refused(rec, n, "host name");
	}
	/* two host_name entries in one server_name */
	put16(d, 12);
	memcpy(d + 2, "\x00\x00\x03one\x00\x00\x03two", 12);
	n = ext(e, 0, d, 14);
	refused(rec, hello(rec, e, n), "exactly one name");
	/* a server_name entry that is not a host_name */
	put16(d, 5);
	memcpy(d + 2,
	       "\x01\x00\x02"
	       "ab",
	       5);
	n = ext(e, 0, d, 7);
	refused(rec, hello(rec, e, n), "entry of type 1");
	/* an empty server_name */
	n = ext(e, 0, "", 0);
	refused(rec, hello(rec, e, n), "exactly one name");
	/* the same extension twice; server_name twice */
	n = ext(e, 10, "\x00\x02\x00\x1d", 4);
	n += ext(e + n, 10, "\x00\x02\x00\x17", 4);
	refused(rec, hello(rec, e, n), "extension 10 twice");
	n = sni(e, "a.example");
	n += sni(e + n, "b.example");
	refused(rec, hello(rec, e, n), "extension 0 twice");
	/* an extension longer than the block; a block longer than the hello */
	n = ext(e, 10, "\x00\x02\x00\x1d", 4);
	put16(e + 2, 9);
	refused(rec, hello(rec, e, n), "truncated");
	n = sni(e, "a.example");
	n = hello(rec, e, n);
	put16(rec + 50, n - 52 + 1);
	refused(rec, n, "extensions of the wrong length");
	/* a header of four bytes with no room for its length */
	refused(rec, hello(rec, (const uint8_t *)"\x00\x0a\x00", 3), "truncated");
	/* session_id over 32; odd cipher_suites; no compression method */
	n = hello(rec, NULL, 0);
	rec[43] = 33;
	refused(rec, n, "session_id");
	n = hello(rec, NULL, 0);
	rec[45] = 3;
	refused(rec, n, "cipher_suites");
	n = hello(rec, NULL, 0);
	rec[48] = 0;
	refused(rec, n, "compression_methods");
	/* not a ClientHello, not a handshake record, an old record version,
	 * an empty record, SSLv2 */
	memcpy(rec, real_hello, sizeof real_hello);
	rec[5] = 2;
	refused(rec, sizeof real_hello, "handshake of type 2");
	memcpy(rec, real_hello, sizeof real_hello);
	rec[0] = 0x17;
	refused(rec, sizeof real_hello, "neither TLS nor an HTTP request");
	refused(alert, sizeof alert, "neither TLS");
	memcpy(rec, real_hello, sizeof real_hello);
	rec[2] = 0;
	refused(rec, sizeof real_hello, "version 3.0");
	refused("\x16\x03\x01\x00\x00", 5, "record of 0 bytes");
	refused(sslv2, sizeof sslv2, "neither TLS");
	/* a ClientHello larger than the hold, known from its header */
	memcpy(rec, "\x16\x03\x01\x00\x04\x01\x00\x40\x00", 9);
	refused(rec, 9, "a ClientHello of 16388 bytes");
}

static void test_tls_hold(void **state)
{
	static uint8_t big[6 * 4000];
	struct run r;

	/* a ClientHello of 3996 bytes in 1-byte records: too long to hold */
	for (size_t i = 0; i < 4000; i++)
		memcpy(big + 6 * i, "\x16\x03\x01\x00\x01", 5);
	big[5] = 1;
	big[17] = 0x0f;
	big[23] = 0x9c;
	run(big, sizeof big, 1000, &r);
	assert_string_equal(r.trace, "BAD");
	assert_int_equal(r.read, SB_SNIFF_HOLD);
	tu_errmsg_has(SB_SNIFF_BAD, "no decision");
}

/* --- HTTP --- */

static void test_http_names(void **state)
{
	expect_str("GET /x HTTP/1.1\r\nHost: API.Example.com:8080\r\nAccept: */*\r\n\r\n",
		   "NAME api.example.com 60; MORE");
	expect_str("GET / HTTP/1.1\r\nhOsT:\t a.example. \t\r\n\r\n",
		   "NAME a.example 39; MORE");
	expect_str("GET / HTTP/1.1\r\nHost: [2001:DB8:0::1]:80\r\n\r\n",
		   "NAME 2001:db8::1 44; MORE");
	expect_str("GET / HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\n", "NAME 10.0.0.1 34; MORE");
	expect_str("GET / HTTP/1.0\r\nUser-Agent: x\r\n\r\n", "NAME \"\" 33; MORE");
	expect_str("OPTIONS * HTTP/1.1\r\nHost: a.example\r\n\r\n",
		   "NAME a.example 39; MORE");
	/* absolute-form: the same host as Host; or the name itself in 1.0 */
	expect_str("GET http://A.example:80/p?q HTTP/1.1\r\nHost: a.example\r\n\r\n",
		   "NAME a.example 57; MORE");
	expect_str("GET HTTPS://b.example HTTP/1.0\r\n\r\n", "NAME b.example 34; MORE");
	/* nothing yet, an unfinished head */
	expect_str("", "MORE");
	expect_str("GET / HTTP/1.1\r\nHost: a.example\r\n\r", "MORE");
}

static void test_http_refused(void **state)
{
	static const char *const bad[][2] = {
	    {"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", "without Host"},
	    {"GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n", "two Host"},
	    {"GET / HTTP/1.0\r\nHost: a.example\r\nHost: a.example\r\n\r\n", "two Host"},
	    {"GET / HTTP/1.1\r\nHost: \r\n\r\n", "0 bytes"},
	    {"GET / HTTP/1.1\r\nHost: a.example:x\r\n\r\n", "port"},
	    {"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", "host name"},
	    {"GET / HTTP/1.1\r\nHost: [a.example]\r\n\r\n", "[address]"},
	    {"GET / HTTP/1.1\r\nHost: a.example@b.example\r\n\r\n", "host name"},
	    {"GET http://evil.example/ HTTP/1.1\r\nHost: good.example\r\n\r\n",
	     "another host"},
	    {"GET http://good.example@evil.example/ HTTP/1.1\r\nHost: "
	     "good.example\r\n\r\n",
	     "userinfo"},
	    {"GET ftp://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", "unknown form"},
	    {"GET a.example:80 HTTP/1.1\r\nHost: a.example\r\n\r\n", "unknown form"},
	    {"GET / HTTP/1.1\r\nHost: a.example\r\nX-A: 1\r\n continued\r\n\r\n",
	     "obs-fold"},
	    {"GET / HTTP/1.1\r\nHost: a.example\r\n\tcontinued\r\n\r\n", "obs-fold"},
	    {"GET / HTTP/1.1\r\nHost: a.example\nX: y\r\n\r\n", "bare LF"},
	    {"GET / HTTP/1.1\nHost: a.example\r\n\r\n", "bare LF"},
	    {"GET / HTTP/1.1\r\nHost: a.example\r\n\n", "bare LF"},
	    {"GET / HTTP/1.1\r\nHost: a.example\rX: y\r\n\r\n", "CR without LF"},
	    {"GET / HTTP/1.1\r\nHost: a.example\r\nX: \x01\r\n\r\n", "control byte 0x01"},
	    {"GET / HTTP/1.1\r\nHost: a.example\r\nX\x7f: y\r\n\r\n",
	     "control byte 0x7f"},
	    {"GET / HTTP/1.1\r\nHost : a.example\r\n\r\n", "not name: value"},
	    {"GET / HTTP/1.1\r\nHost a.example\r\n\r\n", "not name: value"},
	    {"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n", "CONNECT"},
	    {"connect a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n", "CONNECT"},
	    {"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: "
	     "chunked\r\n"
	     "\r\nabc",
	     "both Content-Length and Transfer-Encoding"},
	    {"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: "
	     "3\r\n"
	     "\r\nabc",
	     "both Content-Length and Transfer-Encoding"},
	    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: "
	     "3\r\n\r\nabc",
	     "two Content-Length"},
	    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\nabc",
	     "bad Content-Length"},
	    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -3\r\n\r\nabc",
	     "bad Content-Length"},
	    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1234567890123456789\r\n\r\n",
	     "bad Content-Length"},
	    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
	     "other than chunked"},
	    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
	     "Transfer-Encoding: chunked\r\n\r\n",
	     "two Transfer-Encoding"},
	    {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	     "HTTP/1.0"},
	    {"GET / HTTP/2.0\r\nHost: a\r\n\r\n", "not HTTP/1.0 or 1.1"},
	    {"GET / HTTP/1.1 \r\nHost: a\r\n\r\n", "not HTTP/1.0 or 1.1"},
	    {"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", "request target"},
	    {"GET /\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n", "request target"},
	    {"G3T / HTTP/1.1\r\nHost: a\r\n\r\n", "neither TLS"},
	    {"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", "neither TLS"},
	    {"SSH-2.0-OpenSSH_9.6\r\n", "neither TLS nor an HTTP request"},
	    {"SSH-2.0", "neither TLS nor an HTTP request"},
	    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
	     "chunk-size"},
	    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3 "
	     "\r\nabc\r\n",
	     "chunk-size"},
	    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
	     "1000000000000000\r\n",
	     "over 15 digits"},
	    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: "
	     "chunked\r\n\r\n3\r\nabcd\r\n",
	     "without CRLF"},
	    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n",
	     "bare LF"},
	    {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: "
	     "chunked\r\n\r\n0\r\nbad\r\n\r\n",
	     "not name: value"},
	};
	char method[64];

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct run r;
		const char *s = bad[i][0];
		run(s, strlen(s), SB_SNIFF_HOLD, &r);
		if (!strstr(r.trace, "BAD"))
			fail_msg("'%s' gave '%s'", s, r.trace);
		tu_errmsg_has(SB_SNIFF_BAD, bad[i][1]);
	}
	/* refused on the first bytes, before a line ends */
	refused_str("SSH-", "neither TLS");
	memset(method, 'A', 33);
	method[33] = 0;
	refused_str(method, "neither TLS");
}

static void test_http_pipelined(void **state)
{
	static const char chunked[] =
	    "POST /a HTTP/1.1\r\nHost: one.example\r\nTransfer-Encoding: Chunked\r\n\r\n"
	    "5;x=y\r\nhello\r\n1e\r\nGET / HTTP/1.1\r\nHost: evil\r\n\r\n\r\n0\r\nX-T: "
	    "1\r\n\r\n"
	    "GET /b HTTP/1.1\r\nHost: two.example\r\n\r\n";
	static const char length[] =
	    "POST /a HTTP/1.1\r\nHost: one.example\r\nContent-Length: 36\r\n\r\n"
	    "GET / HTTP/1.1\r\nHost: evil.example\r\n"
	    "GET /b HTTP/1.0\r\n\r\n";

	/* the body is passed unread, even what looks like a request */
	expect_str(chunked, "NAME one.example 67; PASS 63; NAME two.example 38; MORE");
	expect_str(length, "NAME one.example 59; PASS 36; NAME \"\" 19; MORE");
	/* a zero body, and three requests at once */
	expect_str("GET /1 HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"
		   "GET /2 HTTP/1.1\r\nHost: b\r\n\r\nGET /3 HTTP/1.1\r\nHost: c\r\n\r\n",
		   "NAME a 47; NAME b 28; NAME c 28; MORE");
	/* a body cut short waits for the rest */
	expect_str("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc",
		   "NAME a 48; PASS 3; MORE");
	/* a second request that breaks the rules is refused after the first */
	expect_str("GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: b\r\nHost: "
		   "c\r\n\r\n",
		   "NAME a 27; BAD");
}

/* Feeds all of b; returns the verdict, with *pass. */
static int feed_all(struct sb_sniff *s, const char *b, size_t *pass)
{
	char name[SB_NET_HOST_MAX];

	return sb_sniff_feed(s, (const uint8_t *)b, strlen(b), pass, name, sizeof name);
}

/* A body's bytes may go on unread: the parser counts them, then reads the
 * next request (or chunk-size line) as if it had seen them. */
static void test_http_unread(void **state)
{
	struct sb_sniff s;
	size_t pass;

	sb_sniff_init(&s);
	assert_int_equal(sb_sniff_unread(&s), 0);
	assert_int_equal(
	    feed_all(&s, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n",
		     &pass),
	    SB_SNIFF_NAME);
	assert_int_equal(sb_sniff_unread(&s), 100);
	sb_sniff_skip(&s, 60);
	assert_int_equal(sb_sniff_unread(&s), 40);
	sb_sniff_skip(&s, 1000); /* no more than there is */
	assert_int_equal(sb_sniff_unread(&s), 0);
	/* the next request is judged again: the "body" skipped was not read */
	assert_int_equal(feed_all(&s, "GET / HTTP/1.1\r\nHost: b\r\n\r\n", &pass),
			 SB_SNIFF_NAME);
	assert_int_equal(sb_sniff_unread(&s), 0);

	sb_sniff_init(&s);
	assert_int_equal(feed_all(&s,
				  "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: "
				  "chunked\r\n\r\n",
				  &pass),
			 SB_SNIFF_NAME);
	assert_int_equal(sb_sniff_unread(&s), 0); /* a size line first */
	assert_int_equal(feed_all(&s, "8\r\n", &pass), SB_SNIFF_PASS);
	assert_int_equal(sb_sniff_unread(&s), 8);
	sb_sniff_skip(&s, 8);
	/* then the chunk's CRLF, checked as if the data had been fed */
	assert_int_equal(feed_all(&s, "XX", &pass), SB_SNIFF_BAD);
}

static void test_http_upgrade(void **state)
{
	expect_str("GET /ws HTTP/1.1\r\nHost: a.example\r\nUpgrade: websocket\r\n"
		   "Connection: Upgrade\r\n\r\n\x81\x05hello\x00\x01",
		   "NAME a.example 78; OPAQUE");
	/* after its body */
	expect_str(
	    "POST / HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\nContent-Length: 2\r\n\r\nhi"
	    "\x00\xff",
	    "NAME a 61; PASS 2; OPAQUE");
}

/* A head of len bytes with the given Host. */
static size_t long_head(char *out, size_t len)
{
	static const char start[] = "GET / HTTP/1.1\r\nHost: a\r\nX: ";

	memcpy(out, start, sizeof start - 1);
	memset(out + sizeof start - 1, 'v', len - (sizeof start - 1) - 4);
	memcpy(out + len - 4, "\r\n\r\n", 4);
	return len;
}

static void test_http_hold(void **state)
{
	static const char chunked[] =
	    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1;";
	static char head[SB_SNIFF_HOLD + 100];
	char want[64];
	struct run r;

	snprintf(want, sizeof want, "NAME a %d; MORE", SB_SNIFF_HEAD_MAX);
	expect(head, long_head(head, SB_SNIFF_HEAD_MAX), want);
	refused(head, long_head(head, SB_SNIFF_HEAD_MAX + 1), "request head over");
	/* a header block that does not end: refused at the limit, not after */
	memset(head, 'v', sizeof head);
	memcpy(head, "GET / HTTP/1.1\r\nHost: a\r\nX: ", 28);
	run(head, sizeof head, 1024, &r);
	assert_string_equal(r.trace, "BAD");
	assert_int_equal(r.read, SB_SNIFF_HEAD_MAX);
	/* chunk framing that never ends is refused at the hold limit */
	memset(head, 'a', sizeof head);
	memcpy(head, chunked, strlen(chunked));
	run(head, sizeof head, 1000, &r);
	assert_string_equal(r.trace, "NAME a 56; BAD");
	tu_errmsg_has(SB_SNIFF_BAD, "no decision");
}

static void test_name_cap(void **state)
{
	static const char req[] = "GET / HTTP/1.1\r\nHost: abc.example\r\n\r\n";
	struct sb_sniff s;
	size_t pass;
	char name[12];

	sb_sniff_init(&s);
	assert_int_equal(
	    sb_sniff_feed(&s, (const uint8_t *)req, sizeof req - 1, &pass, name, 11),
	    SB_SNIFF_BAD);
	assert_int_equal(pass, 0);
	tu_errmsg_has(SB_SNIFF_BAD, "longer than its buffer");
	/* refused stays refused */
	assert_int_equal(
	    sb_sniff_feed(&s, (const uint8_t *)req, sizeof req - 1, &pass, name, 12),
	    SB_SNIFF_BAD);
	sb_sniff_init(&s);
	assert_int_equal(
	    sb_sniff_feed(&s, (const uint8_t *)req, sizeof req - 1, &pass, name, 12),
	    SB_SNIFF_NAME);
	assert_string_equal(name, "abc.example");
	assert_int_equal(pass, sizeof req - 1);
	/* "" needs its NUL */
	sb_sniff_init(&s);
	assert_int_equal(sb_sniff_feed(&s, (const uint8_t *)"GET / HTTP/1.0\r\n\r\n", 18,
				       &pass, name, 0),
			 SB_SNIFF_BAD);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_tls_real),	 cmocka_unit_test(test_tls_records),
	    cmocka_unit_test(test_tls_names),	 cmocka_unit_test(test_tls_refused),
	    cmocka_unit_test(test_tls_hold),	 cmocka_unit_test(test_http_names),
	    cmocka_unit_test(test_http_refused), cmocka_unit_test(test_http_pipelined),
	    cmocka_unit_test(test_http_upgrade), cmocka_unit_test(test_http_hold),
	    cmocka_unit_test(test_name_cap),	 cmocka_unit_test(test_http_unread),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
