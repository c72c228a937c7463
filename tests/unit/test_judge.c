/* test_judge.c - connections judged segment by segment (judge.h).
 *
 * TLS: the ClientHello whole and in pieces, the server's ACK that lets a
 * connection go, and a hostile guest's TCP: gaps, copies of checked bytes
 * with other bytes, urgent data, data on an RST or on or before the SYN, a
 * second SYN, FIN before the name, plain HTTP on a TLS port, sequence
 * numbers that wrap.
 *
 * HTTP: each keep-alive and pipelined request's Host, a head in pieces, a
 * body let by unread (sb_judge_body; resent otherwise, and after a gap),
 * framing resent otherwise (a head, a chunk-size line), framing too old to
 * check, the fence, an Upgrade answered 101 (after 100), declined, or with
 * bytes after it, TLS on an HTTP port, FIN in a head. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "netpolicy/judge.h"
#include "tlshello.h"

static struct sb_judge j;
static uint32_t isn;
static uint8_t ch[4096]; /* the ClientHello of the test */
static size_t nch;

/* Builds ch: a ClientHello naming name, padded with pad bytes. */
static void build(const char *name, size_t pad)
{
	uint8_t e[3000], zero[2048] = {0};
	size_t n = sni(e, name);

	if (pad)
		n += ext(e + n, 21, zero, pad);
	nch = hello(ch, e, n);
}

/* The guest's segment of stream bytes [off, off + n) of d (d is the
 * stream: ch unless said otherwise). */
static struct sb_judge_seg last; /* the guest's last segment */

static int guest(uint8_t flags, size_t off, const uint8_t *d, size_t n)
{
	last = (struct sb_judge_seg){
	    1, isn + 1 + (uint32_t)off, 0, flags | SB_TCP_ACK, d + off, n};

	return sb_judge_seg(&j, &last);
}

/* Grants the name of the guest's last segment. */
static void allow(void)
{
	assert_int_equal(sb_judge_allow(&j, &last), SB_JUDGE_ACCEPT);
	assert_int_equal(j.state, SB_JUDGE_ALLOWED);
}

static int server(uint8_t flags, size_t acked)
{
	struct sb_judge_seg s = {0, 77, isn + 1 + (uint32_t)acked, flags, NULL, 0};

	return sb_judge_seg(&j, &s);
}

/* A new connection: the guest's SYN and the server's SYN-ACK. */
static void open_conn(uint32_t first)
{
	struct sb_judge_seg syn = {1, first, 0, SB_TCP_SYN, NULL, 0};

	isn = first;
	sb_judge_init(&j, 0);
	assert_int_equal(sb_judge_seg(&j, &syn), SB_JUDGE_ACCEPT);
	assert_int_equal(server(SB_TCP_SYN | SB_TCP_ACK, 0), SB_JUDGE_ACCEPT);
	assert_int_equal(j.state, SB_JUDGE_READING);
}

static void killed(int rc, const char *why)
{
	assert_int_equal(rc, SB_JUDGE_KILL);
	assert_int_equal(j.state, SB_JUDGE_KILLED);
	assert_non_null(strstr(sb_errmsg(SB_ERR_DENIED), why));
	/* and stays so */
	assert_int_equal(guest(0, 0, ch, 1), SB_JUDGE_KILL);
	assert_int_equal(server(SB_TCP_ACK, nch), SB_JUDGE_KILL);
}

static void test_whole(void **state)
{
	(void)state;
	build("a.test", 0);
	open_conn(1000);
	assert_int_equal(guest(0, 0, ch, nch), SB_JUDGE_NAME);
	assert_string_equal(j.name, "a.test");
	allow();
	/* acknowledged in part: still judged; a copy of the same bytes goes */
	assert_int_equal(server(SB_TCP_ACK, nch - 1), SB_JUDGE_ACCEPT);
	assert_int_equal(guest(0, 10, ch, 20), SB_JUDGE_ACCEPT);
	/* the guest's next bytes are not read */
	assert_int_equal(guest(0, nch, (const uint8_t *)"\x17\x03\x03xyzxyz" - nch, 9),
			 SB_JUDGE_ACCEPT);
	/* an RST does not count as an ACK */
	assert_int_equal(server(SB_TCP_ACK | SB_TCP_RST, nch), SB_JUDGE_ACCEPT);
	assert_int_equal(server(SB_TCP_ACK, nch), SB_JUDGE_PASS);
	assert_int_equal(j.state, SB_JUDGE_PASSED);
	/* passed: nothing is read any more */
	assert_int_equal(guest(SB_TCP_URG, 0, (const uint8_t *)"zzzz", 4),
			 SB_JUDGE_ACCEPT);
}

static void test_pieces(void **state)
{
	(void)state;
	build("b.test", 1500);
	open_conn(0xfffffff0u); /* the sequence numbers wrap in the ClientHello */
	assert_int_equal(guest(0, 0, ch, 700), SB_JUDGE_HOLD);
	/* a gap: dropped, nothing kept of it */
	assert_int_equal(guest(0, 1400, ch, nch - 1400), SB_JUDGE_DROP);
	/* the waiting segment again, the same: dropped, the first one waits */
	assert_int_equal(guest(0, 0, ch, 700), SB_JUDGE_DROP);
	assert_int_equal(guest(0, 300, ch, 1100), SB_JUDGE_HOLD);
	assert_int_equal(guest(SB_TCP_FIN, 1400, ch, nch - 1400), SB_JUDGE_NAME);
	assert_string_equal(j.name, "b.test");
	allow();
	assert_int_equal(server(SB_TCP_ACK, 1400), SB_JUDGE_ACCEPT);
	/* an ACK from far away (before the stream, or 2^31 on) is none */
	assert_int_equal(server(SB_TCP_ACK, 0x80000000u + nch), SB_JUDGE_ACCEPT);
	assert_int_equal(server(SB_TCP_ACK, nch + 1), SB_JUDGE_PASS); /* its FIN too */
}

/* Bytes of ch with one changed at k. */
static const uint8_t *changed(size_t k)
{
	static uint8_t d[sizeof ch];

	memcpy(d, ch, nch);
	d[k] ^= 0x20;
	return d;
}

static void test_other_bytes(void **state)
{
	(void)state;
	build("a.test", 600);
	/* a waiting segment's bytes sent again, otherwise */
	open_conn(5);
	assert_int_equal(guest(0, 0, ch, 500), SB_JUDGE_HOLD);
	killed(guest(0, 100, changed(200), 300), "other than those checked");
	/* overlapping the kept bytes and beyond */
	open_conn(5);
	assert_int_equal(guest(0, 0, ch, 500), SB_JUDGE_HOLD);
	killed(guest(0, 400, changed(450), nch - 400), "other than those checked");
	/* after the name, before the server's ACK: the name rewritten */
	open_conn(5);
	assert_int_equal(guest(0, 0, ch, nch), SB_JUDGE_NAME);
	allow();
	killed(guest(0, 0, changed(nch - 610), nch), "other than those checked");
	/* a copy that only starts in the ClientHello and runs past it */
	open_conn(5);
	assert_int_equal(guest(0, 0, ch, nch), SB_JUDGE_NAME);
	allow();
	killed(guest(0, nch - 5, changed(nch - 2), 5), "other than those checked");
}

static void test_hostile_tcp(void **state)
{
	struct sb_judge_seg s = {1, 9, 0, SB_TCP_SYN, (const uint8_t *)"\x16", 1};

	(void)state;
	build("a.test", 0);
	/* data on the SYN */
	sb_judge_init(&j, 0);
	isn = 8;
	killed(sb_judge_seg(&j, &s), "data on a SYN");
	/* a segment or the server's before the SYN */
	sb_judge_init(&j, 0);
	killed(guest(0, 0, ch, nch), "before the connection's SYN");
	sb_judge_init(&j, 0);
	killed(server(SB_TCP_ACK, 0), "before the connection's SYN");
	/* a SYN again: the same is fine, another is not */
	open_conn(9);
	s = (struct sb_judge_seg){1, 9, 0, SB_TCP_SYN, NULL, 0};
	assert_int_equal(sb_judge_seg(&j, &s), SB_JUDGE_ACCEPT);
	s.seq = 4000;
	killed(sb_judge_seg(&j, &s), "a second SYN");
	/* urgent data */
	open_conn(9);
	killed(guest(SB_TCP_URG, 0, ch, nch), "urgent data");
	open_conn(9);
	assert_int_equal(guest(0, 0, ch, nch), SB_JUDGE_NAME);
	allow();
	killed(guest(SB_TCP_URG, nch, (const uint8_t *)"x" - nch, 1), "urgent data");
	/* data before the stream (the SYN's own number) */
	open_conn(9);
	s = (struct sb_judge_seg){1, 9, 0, SB_TCP_ACK, ch, nch};
	killed(sb_judge_seg(&j, &s), "before the stream");
	/* FIN before the name, with bytes or without */
	open_conn(9);
	assert_int_equal(guest(0, 0, ch, 10), SB_JUDGE_HOLD);
	killed(guest(SB_TCP_FIN, 10, ch, 10), "closed before naming");
	open_conn(9);
	killed(guest(SB_TCP_FIN, 0, ch, 0), "closed before naming");
	/* data on an RST */
	open_conn(9);
	killed(guest(SB_TCP_RST, 0, ch, 10), "data on an RST");
	/* an RST and empty ACKs go through */
	open_conn(9);
	assert_int_equal(guest(0, 0, ch, 0), SB_JUDGE_ACCEPT);
	assert_int_equal(guest(SB_TCP_RST, 0, ch, 0), SB_JUDGE_ACCEPT);
}

static void test_not_tls(void **state)
{
	static const char get[] = "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n";
	uint8_t big[SB_SNIFF_HOLD + 100];

	(void)state;
	open_conn(1);
	killed(guest(0, 0, (const uint8_t *)get, sizeof get - 1), "not TLS");
	/* a ClientHello that is never complete within what is kept */
	build("a.test", 0);
	memcpy(big, ch, 5);
	big[3] = 0x40; /* a record of 2^14 bytes, the most there is */
	big[4] = 0x00;
	memset(big + 5, 1, sizeof big - 5);
	big[5] = 1; /* ... starting a ClientHello longer than it */
	big[6] = 0;
	big[7] = 0xff;
	big[8] = 0xf0;
	open_conn(1);
	assert_int_equal(guest(0, 0, big, 9000), SB_JUDGE_HOLD);
	killed(guest(0, 9000, big, sizeof big - 9000), "");
	/* a refused ClientHello's detail comes through */
	build("bad..name", 0);
	open_conn(1);
	killed(guest(0, 0, ch, nch), "");
	assert_int_not_equal(sb_errmsg(SB_ERR_DENIED)[0], 0);
}

static void test_no_name(void **state)
{
	(void)state;
	nch = hello(ch, NULL, 0);
	open_conn(3);
	assert_int_equal(guest(0, 0, ch, nch), SB_JUDGE_NAME);
	assert_string_equal(j.name, "");
}

/* --- HTTP --- */

/* A new HTTP connection from sequence number first. */
static void open_http(uint32_t first)
{
	struct sb_judge_seg syn = {1, first, 0, SB_TCP_SYN, NULL, 0};

	isn = first;
	sb_judge_init(&j, 1);
	assert_int_equal(sb_judge_seg(&j, &syn), SB_JUDGE_ACCEPT);
}

/* The guest's segment of text t at stream offset off. */
static int say(uint8_t flags, size_t off, const char *t)
{
	return guest(flags, off, (const uint8_t *)t - off, strlen(t));
}

/* Expects name asked for, grants it; returns what comes after. */
static int grant(int rc, const char *name)
{
	assert_int_equal(rc, SB_JUDGE_NAME);
	assert_string_equal(j.name, name);
	return sb_judge_allow(&j, &last);
}

/* The server's segment of text t, at sequence number seq. */
static int answer(uint8_t flags, uint32_t seq, const char *t)
{
	struct sb_judge_seg s = {
	    0, seq, isn + 1, flags | SB_TCP_ACK, (const uint8_t *)t, strlen(t)};

	return sb_judge_seg(&j, &s);
}

#define GET_A "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"
#define GET_B "GET /x HTTP/1.1\r\nHost: b.test\r\n\r\n"

static void test_http_requests(void **state)
{
	const size_t a = sizeof GET_A - 1;

	(void)state;
	/* keep-alive: each request's Host, in turn */
	open_http(0xfffffff0u); /* the numbers wrap */
	assert_int_equal(grant(say(0, 0, GET_A), "a.test"), SB_JUDGE_ACCEPT);
	assert_int_equal(j.requests, 1);
	assert_int_equal(grant(say(0, a, GET_B), "b.test"), SB_JUDGE_ACCEPT);
	/* pipelined in one segment: both named before it goes */
	open_http(7);
	assert_int_equal(grant(grant(say(0, 0, GET_A GET_B), "a.test"), "b.test"),
			 SB_JUDGE_ACCEPT);
	/* a head in pieces waits; the first piece again is dropped */
	open_http(7);
	assert_int_equal(guest(0, 0, (const uint8_t *)GET_A, 10), SB_JUDGE_HOLD);
	assert_int_equal(guest(0, 0, (const uint8_t *)GET_A, 10), SB_JUDGE_DROP);
	assert_int_equal(guest(0, 10, (const uint8_t *)GET_A, 10), SB_JUDGE_HOLD);
	assert_int_equal(grant(guest(0, 20, (const uint8_t *)GET_A, a - 20), "a.test"),
			 SB_JUDGE_ACCEPT);
	/* a granted request, then the start of the next: it waits */
	open_http(7);
	last = (struct sb_judge_seg){
	    1, isn + 1, 0, SB_TCP_ACK, (const uint8_t *)GET_A "GET", a + 3};
	assert_int_equal(grant(sb_judge_seg(&j, &last), "a.test"), SB_JUDGE_HOLD);
	/* a gap before a head: dropped */
	open_http(7);
	assert_int_equal(say(0, 5, GET_A + 5), SB_JUDGE_DROP);
	/* a request's head resent with another Host */
	open_http(7);
	assert_int_equal(grant(say(0, 0, GET_A), "a.test"), SB_JUDGE_ACCEPT);
	killed(say(0, 0, "GET / HTTP/1.1\r\nHost: b.test\r\n\r\n"),
	       "other than those checked");
	/* a FIN in the middle of a head; TLS on an HTTP port */
	open_http(7);
	assert_int_equal(guest(0, 0, (const uint8_t *)GET_A, 10), SB_JUDGE_HOLD);
	killed(guest(SB_TCP_FIN, 10, (const uint8_t *)GET_A, 0), "in the middle");
	open_http(7);
	killed(say(0, 0, "\x16\x03\x01"), "TLS: the port is one of HTTP");
}

static void test_http_bodies(void **state)
{
	static const char post[] =
	    "POST /up HTTP/1.1\r\nHost: a.test\r\nContent-Length: 100000\r\n\r\n";
	static const char chunked[] =
	    "POST /up HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n"
	    "5\r\nhello\r\n0\r\n\r\n";
	static uint8_t body[100000];
	const size_t h = sizeof post - 1;
	uint32_t seq;
	uint64_t len;

	(void)state;
	memset(body, 'x', sizeof body);
	open_http(100);
	assert_int_equal(grant(say(0, 0, post), "a.test"), SB_JUDGE_ACCEPT);
	/* the body need not be read: where it goes on, how long it is */
	assert_int_equal(sb_judge_body(&j, &seq, &len), 1);
	assert_int_equal(seq, isn + 1 + h);
	assert_int_equal(len, 100000);
	assert_int_equal(guest(0, h, body - h, 1000), SB_JUDGE_ACCEPT);
	/* a gap within the body is none; its bytes resent otherwise go */
	assert_int_equal(guest(0, h + 50000, body - h - 50000, 1000), SB_JUDGE_ACCEPT);
	assert_int_equal(sb_judge_body(&j, &seq, &len), 1);
	assert_int_equal(len, 100000 - 51000);
	assert_int_equal(say(0, h + 10, "something else"), SB_JUDGE_ACCEPT);
	/* the body's end, and a request for another host after it */
	assert_int_equal(guest(0, h + 51000, body - h - 51000, 49000), SB_JUDGE_ACCEPT);
	assert_int_equal(sb_judge_body(&j, &seq, &len), 0);
	assert_int_equal(grant(say(0, h + 100000, GET_B), "b.test"), SB_JUDGE_ACCEPT);
	/* ... and the head resent otherwise still resets */
	killed(say(0, 0, "PUT"), "other than those checked");
	/* a chunk-size line is framing: resent otherwise, it resets */
	open_http(100);
	assert_int_equal(grant(say(0, 0, chunked), "a.test"), SB_JUDGE_ACCEPT);
	killed(say(0, sizeof chunked - 1 - 17, "9"), "other than those checked");
	/* a gap past the body's end is a gap */
	open_http(100);
	assert_int_equal(grant(say(0, 0, post), "a.test"), SB_JUDGE_ACCEPT);
	assert_int_equal(say(0, h + 100001, "ET"), SB_JUDGE_DROP);
}

static void test_http_old_and_fence(void **state)
{
	static const char big[] =
	    "POST /up HTTP/1.1\r\nHost: a.test\r\nContent-Length: 9000000000\r\n\r\n";
	const size_t a = sizeof GET_A - 1, h = sizeof big - 1;
	uint8_t ten[10] = {0};

	(void)state;
	/* after SB_JUDGE_PROTECT bytes more of heads, the first is too old to
	 * check; the last is not */
	open_http(1);
	for (size_t i = 0; i <= SB_JUDGE_PROTECT / a + 1; i++)
		assert_int_equal(grant(say(0, i * a, GET_A), "a.test"), SB_JUDGE_ACCEPT);
	assert_int_equal(say(0, (SB_JUDGE_PROTECT / a + 1) * a, GET_A), SB_JUDGE_ACCEPT);
	killed(say(0, 0, GET_A), "too old to check");
	/* fenced: no new bytes from 2^31 past the body's start */
	open_http(1);
	assert_int_equal(grant(say(0, 0, big), "a.test"), SB_JUDGE_ACCEPT);
	sb_judge_fence(&j, 1);
	assert_int_equal(guest(0, h + 0x7fff0000u, ten - h - 0x7fff0000u, 10),
			 SB_JUDGE_ACCEPT);
	assert_int_equal(guest(0, h + 0x80000000u - 5, ten - h - 0x80000000u + 5, 10),
			 SB_JUDGE_DROP);
	sb_judge_fence(&j, 0);
	assert_int_equal(guest(0, h + 0x80000000u - 5, ten - h - 0x80000000u + 5, 10),
			 SB_JUDGE_ACCEPT);
}

#define UPGRADE                                                                          \
	"GET /ws HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: "         \
	"Upgrade\r\n\r\n"

static void test_http_upgrade(void **state)
{
	const size_t u = sizeof UPGRADE - 1;
	const uint32_t srv = 5000;

	(void)state;
	/* answered 101 after a 100, in pieces: let go */
	open_http(1);
	assert_int_equal(answer(SB_TCP_SYN, srv - 1, ""), SB_JUDGE_ACCEPT);
	last = (struct sb_judge_seg){
	    1, isn + 1, srv, SB_TCP_ACK, (const uint8_t *)UPGRADE, u};
	assert_int_equal(grant(sb_judge_seg(&j, &last), "a.test"), SB_JUDGE_AWAIT);
	assert_int_equal(say(0, u, "\x81\x05hello"), SB_JUDGE_DROP); /* not yet */
	assert_int_equal(say(0, 0, UPGRADE), SB_JUDGE_ACCEPT);	   /* sent again: goes */
	assert_int_equal(answer(0, srv + 10, "x"), SB_JUDGE_DROP); /* a gap */
	assert_int_equal(answer(0, srv, "HTTP/1.1 100 Continue\r\n"), SB_JUDGE_ACCEPT);
	assert_int_equal(answer(0, srv + 23, "\r\nHTTP/1.1 10"), SB_JUDGE_ACCEPT);
	assert_int_equal(answer(0, srv + 36, "1 Switching Protocols\r\n\r\n"),
			 SB_JUDGE_PASS);
	assert_int_equal(say(0, u, "\x81\x05hello"), SB_JUDGE_ACCEPT);
	/* declined: no more data from the guest */
	open_http(1);
	last = (struct sb_judge_seg){
	    1, isn + 1, srv, SB_TCP_ACK, (const uint8_t *)UPGRADE, u};
	assert_int_equal(grant(sb_judge_seg(&j, &last), "a.test"), SB_JUDGE_AWAIT);
	assert_int_equal(answer(0, srv, "HTTP/1.1 400 Bad Request\r\n\r\n"),
			 SB_JUDGE_ACCEPT);
	assert_int_equal(j.state, SB_JUDGE_DECLINED);
	killed(say(0, u, GET_B), "after a declined Upgrade");
	/* so is one the server ends without an answer */
	open_http(1);
	last = (struct sb_judge_seg){
	    1, isn + 1, srv, SB_TCP_ACK, (const uint8_t *)UPGRADE, u};
	assert_int_equal(grant(sb_judge_seg(&j, &last), "a.test"), SB_JUDGE_AWAIT);
	assert_int_equal(answer(SB_TCP_FIN, srv, ""), SB_JUDGE_ACCEPT);
	assert_int_equal(j.state, SB_JUDGE_DECLINED);
	/* bytes after it in its segment; an Upgrade as a second request */
	open_http(1);
	killed(grant(say(0, 0, UPGRADE "\x81"), "a.test"), "bytes after an Upgrade");
	open_http(1);
	assert_int_equal(grant(say(0, 0, GET_A), "a.test"), SB_JUDGE_ACCEPT);
	killed(grant(say(0, sizeof GET_A - 1, UPGRADE), "a.test"),
	       "an Upgrade after other requests");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_whole),
	    cmocka_unit_test(test_pieces),
	    cmocka_unit_test(test_other_bytes),
	    cmocka_unit_test(test_hostile_tcp),
	    cmocka_unit_test(test_not_tls),
	    cmocka_unit_test(test_no_name),
	    cmocka_unit_test(test_http_requests),
	    cmocka_unit_test(test_http_bodies),
	    cmocka_unit_test(test_http_old_and_fence),
	    cmocka_unit_test(test_http_upgrade),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
