/* test_nfq.c - the judge's queue (nfq.h) and chain (nft.h's
 * sb_nft_judge_set), in a network namespace of the test's own: datagrams
 * on loopback queued to it, let through, dropped, and sent through the
 * hook again with a mark the rules act on. Needs root; skipped without. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "netpolicy/nfq.h"
#include "netpolicy/nft.h"

#define PORT 9999

static uint32_t got[8];
static size_t ngot;

static void on_pkt(void *ctx, const struct sb_nfq_pkt *p)
{
	(void)ctx;
	assert_true(p->len >= 28); /* an IPv4 UDP datagram, copied whole */
	assert_int_equal(p->data[0] >> 4, 4);
	if (ngot < 8)
		got[ngot++] = p->id;
}

/* Sends one datagram from s to the port; returns 1 when r receives it. */
static int through(sb_nfq *q, int s, int r, enum sb_nfq_verdict v, uint32_t mark)
{
	struct sockaddr_in to = {.sin_family = AF_INET,
				 .sin_port = htons(PORT),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct pollfd p = {sb_nfq_fd(q), POLLIN, 0};
	char b[16];

	ngot = 0;
	assert_int_equal(sendto(s, "hello", 5, MSG_DONTWAIT, (void *)&to, sizeof to), 5);
	assert_int_equal(poll(&p, 1, 2000), 1);
	assert_int_equal(sb_nfq_read(q, on_pkt, NULL), SB_OK);
	assert_int_equal(ngot, 1);
	assert_int_equal(sb_nfq_verdict(q, got[0], v, mark), SB_OK);
	p = (struct pollfd){r, POLLIN, 0};
	if (poll(&p, 1, 300) != 1)
		return 0;
	assert_int_equal(recv(r, b, sizeof b, 0), 5);
	return 1;
}

static void test_queue(void **state)
{
	struct sockaddr_in at = {.sin_family = AF_INET,
				 .sin_port = htons(PORT),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	sb_nft *n;
	sb_nfq *q, *q2;
	uint16_t num, num2;
	int s, r;

	(void)state;
	if (geteuid() != 0) {
		skip();
		return;
	}
	assert_int_equal(unshare(CLONE_NEWNET), 0);
	assert_int_equal(system("ip link set lo up"), 0);
	assert_int_equal(sb_nft_open(&n), SB_OK);
	assert_int_equal(sb_nft_run(n,
				    "table inet sanbox {\n"
				    " chain judge { }\n"
				    " chain out { type filter hook output priority 0;\n"
				    "  meta mark 0x5b0 meta mark set 0 accept\n"
				    "  meta mark 0x5b1 drop\n"
				    "  udp dport 9999 jump judge\n"
				    " }\n"
				    "}\n",
				    NULL),
			 SB_OK);
	/* two queues: the second takes the next free number */
	assert_int_equal(sb_nfq_open(4000, 2, 64, &q, &num), SB_OK);
	assert_int_equal(num, 4000);
	assert_int_equal(sb_nfq_open(4000, 2, 64, &q2, &num2), SB_OK);
	assert_int_equal(num2, 4001);
	assert_int_equal(sb_nfq_open(4000, 2, 64, &(sb_nfq *){NULL}, &num2),
			 SB_ERR_EXISTS);
	sb_nfq_close(q2);
	/* twice: the second replaces the first's rule */
	assert_int_equal(sb_nft_judge_set(n, 4001), SB_OK);
	assert_int_equal(sb_nft_judge_set(n, num), SB_OK);
	assert_true((s = socket(AF_INET, SOCK_DGRAM, 0)) >= 0);
	assert_true((r = socket(AF_INET, SOCK_DGRAM, 0)) >= 0);
	assert_int_equal(bind(r, (void *)&at, sizeof at), 0);
	assert_true(through(q, s, r, SB_NFQ_ACCEPT, 0));
	assert_false(through(q, s, r, SB_NFQ_DROP, 0));
	/* through the hook again: the mark's rule decides */
	assert_true(through(q, s, r, SB_NFQ_REPEAT, 0x5b0));
	assert_false(through(q, s, r, SB_NFQ_REPEAT, 0x5b1));
	/* no queue bound: the kernel drops what would go to it */
	sb_nfq_close(q);
	assert_int_equal(sendto(s, "hello", 5, 0, (void *)&at, sizeof at), 5);
	assert_int_equal(poll(&(struct pollfd){r, POLLIN, 0}, 1, 300), 0);
	close(s);
	close(r);
	sb_nft_close(n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_queue),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
