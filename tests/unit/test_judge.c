/* test_judge.c - TLS connections judged segment by segment (judge.h): the
 * ClientHello whole and in pieces, the server's ACK that lets a connection
 * go, and a hostile guest's TCP: gaps, copies of checked bytes with other
 * bytes, urgent data, data on an RST or on or before the SYN, a second SYN, FIN before
 * the name, plain HTTP on a TLS port, sequence numbers that wrap. */
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
static int guest(uint8_t flags, size_t off, const uint8_t *d, size_t n)
{
	struct sb_judge_seg s = {
	    1, isn + 1 + (uint32_t)off, 0, flags | SB_TCP_ACK, d + off, n};

	return sb_judge_seg(&j, &s);
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
	sb_judge_init(&j);
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
	sb_judge_allow(&j);
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
	sb_judge_allow(&j);
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
	sb_judge_allow(&j);
	killed(guest(0, 0, changed(nch - 610), nch), "other than those checked");
	/* a copy that only starts in the ClientHello and runs past it */
	open_conn(5);
	assert_int_equal(guest(0, 0, ch, nch), SB_JUDGE_NAME);
	sb_judge_allow(&j);
	killed(guest(0, nch - 5, changed(nch - 2), 5), "other than those checked");
}

static void test_hostile_tcp(void **state)
{
	struct sb_judge_seg s = {1, 9, 0, SB_TCP_SYN, (const uint8_t *)"\x16", 1};

	(void)state;
	build("a.test", 0);
	/* data on the SYN */
	sb_judge_init(&j);
	isn = 8;
	killed(sb_judge_seg(&j, &s), "data on a SYN");
	/* a segment or the server's before the SYN */
	sb_judge_init(&j);
	killed(guest(0, 0, ch, nch), "before the connection's SYN");
	sb_judge_init(&j);
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
	sb_judge_allow(&j);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_whole),	cmocka_unit_test(test_pieces),
	    cmocka_unit_test(test_other_bytes), cmocka_unit_test(test_hostile_tcp),
	    cmocka_unit_test(test_not_tls),	cmocka_unit_test(test_no_name),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
