/* test_judged.c - TLS connections of a hostname grant judged on their way
 * through the host (netpolicy/judged.c, judge.h; SPEC.md, "The judge"):
 * the enforcer on threads of this process, a guest and a server in
 * network namespaces of the test's own (tests/netlab.h). Grant a.test:443.
 *
 * The server in S (203.0.113.10:443) reads a ClientHello record, answers
 * HELLO, counts what follows to EOF and answers the count; every byte it
 * gets goes to a log the test reads. Checks: a ClientHello naming a.test
 * goes through and 4 MiB after it; one naming b.test (the same address)
 * is reset and reported, and the server gets none of it; plain HTTP on
 * the port is refused; one that sends nothing is reset after 10 s. And a guest speaking
 * raw TCP: its ClientHello naming a.test passes the judge, but S drops it (an nft rule of
 * S, as a lossy path would); the guest sends the "same" segment again naming b.test. The
 * judge must reset the connection: the server never gets b.test. And a live change of
 * grants: one that keeps a.test:443 leaves a connection it let go going, one that removes
 * it stops it. Skipped when not root, or without namespaces, nftables or NFQUEUE.
 */
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "tests/fdio.h"
#include "tests/netlab.h"
#include "tests/unit/tlshello.h"

#define TLS_PORT 443
#define RAW_PORT 40999	    /* the raw guest's port */
#define BULK	 (4u << 20) /* bytes after a granted ClientHello */
#define RAW_ISN	 0x7ffffff0u

static struct netlab lab;
static int lab_ready;
static sb_net *net;
static sb_net_run *run;
static pid_t srv_pid, dns_pid;
static char srv_log[128];

/* 1 when a denial of name for reason on the TLS port came (netlab.h). */
static int denial_seen(const char *name, const char *reason)
{
	return netlab_denial_seen(name, reason, TLS_PORT);
}

/* 1 when the server's log holds s. */
static int server_got(const char *s)
{
	char buf[1 << 16];
	int fd = open(srv_log, O_RDONLY | O_CLOEXEC);
	ssize_t k = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);

	if (fd >= 0)
		close(fd);
	if (k <= 0)
		return 0;
	return memmem(buf, (size_t)k, s, strlen(s)) != NULL;
}

/* --- the server, in S --- */

static void srv_conn(int c, int log)
{
	struct timeval tv = {20, 0}; /* past the judge's 10 s for a name */
	uint8_t head[5], rec[1 << 14], buf[1 << 16];
	uint64_t count = 0;
	ssize_t k;

	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	if (fdio_read_full(c, head, 5))
		return;
	if (write(log, head, 5) != 5 ||
	    fdio_read_full(c, rec, (size_t)(head[3] << 8 | head[4])) ||
	    write(log, rec, (size_t)(head[3] << 8 | head[4])) < 0 ||
	    netlab_send_all(c, "HELLO", 5))
		return;
	while ((k = read(c, buf, sizeof buf)) > 0) {
		if (count < 4096 && write(log, buf, (size_t)k > 64 ? 64 : (size_t)k) < 0)
			return;
		count += (uint64_t)k;
	}
	netlab_send_all(c, &count, sizeof count);
}

/* A process a connection, so one that never sends holds up no other. */
static void srv_main(int fd)
{
	signal(SIGCHLD, SIG_IGN); /* no zombies */
	for (;;) {
		int c = accept(fd, NULL, NULL), log;
		if (c < 0)
			continue;
		if (fork() == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL); /* ends with the server */
			if ((log =
				 open(srv_log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
				      0600)) >= 0)
				srv_conn(c, log);
			_exit(0);
		}
		close(c);
	}
}

/* --- guests, in G, forked per test: system calls only --- */

/* Runs fn in G; returns its exit status (-1: none within 15 s). */
static int in_guest(int (*fn)(void))
{
	pid_t pid = netlab_fork_in(&lab, NETLAB_G);
	int st;

	if (pid == 0)
		_exit(fn());
	assert_true(pid > 0);
	for (int i = 0; i < 300; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
		usleep(50000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -1;
}

static int dial(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(TLS_PORT)};
	struct timeval tv = {5, 0};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	inet_pton(AF_INET, NETLAB_SERVER, &sa.sin_addr);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	return fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 ? fd : -1;
}

static size_t hello_of(uint8_t *out, const char *name)
{
	uint8_t e[300];

	return hello(out, e, sni(e, name));
}

/* 0: a.test's ClientHello answered, BULK bytes after it counted. */
static int guest_granted(void)
{
	static uint8_t bulk[1 << 16];
	uint8_t ch[512], ans[5];
	uint64_t count = 0;
	int fd;

	if (netlab_resolve() || (fd = dial()) < 0)
		return 10;
	if (netlab_send_all(fd, ch, hello_of(ch, "a.test")) || fdio_read_full(fd, ans, 5))
		return 11;
	for (size_t sent = 0; sent < BULK; sent += sizeof bulk)
		if (netlab_send_all(fd, bulk, sizeof bulk))
			return 12;
	shutdown(fd, SHUT_WR);
	if (fdio_read_full(fd, &count, sizeof count) || count != BULK)
		return 13;
	return 0;
}

/* 0: the connection ended (reset or EOF) with no answer after bytes. */
static int guest_refused(const void *bytes, size_t n)
{
	uint8_t ans[5];
	int fd;

	if (netlab_resolve() || (fd = dial()) < 0)
		return 10;
	if (netlab_send_all(fd, bytes, n))
		return 0; /* reset already */
	return read(fd, ans, sizeof ans) <= 0 && errno != EAGAIN ? 0 : 11;
}

static int guest_front(void)
{
	uint8_t ch[512];

	return guest_refused(ch, hello_of(ch, "b.test"));
}

/* 0: a connection that sends nothing is reset within 13 s. */
static int guest_silent(void)
{
	struct timeval tv = {13, 0};
	char c;
	int fd;

	if (netlab_resolve() || (fd = dial()) < 0)
		return 10;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	return read(fd, &c, 1) < 0 && errno == ECONNRESET ? 0 : 11;
}

static int guest_http(void)
{
	static const char get[] = "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n";

	return guest_refused(get, sizeof get - 1);
}

/* --- a guest speaking raw TCP --- */

static uint16_t csum(const void *p, size_t n, uint32_t sum)
{
	const uint8_t *b = p;

	for (size_t i = 0; i + 1 < n; i += 2)
		sum += (uint32_t)(b[i] << 8 | b[i + 1]);
	if (n & 1)
		sum += (uint32_t)b[n - 1] << 8;
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

/* Sends a TCP segment from the guest's RAW_PORT to the server. */
static int raw_send(int fd, uint32_t seq, uint32_t ack, uint8_t flags, const void *data,
		    size_t n)
{
	uint8_t seg[1024] = {0}, pseudo[12];
	struct sockaddr_in to = {.sin_family = AF_INET};
	uint16_t sum;

	inet_pton(AF_INET, NETLAB_SERVER, &to.sin_addr);
	seg[0] = RAW_PORT >> 8;
	seg[1] = RAW_PORT & 0xff;
	seg[3] = TLS_PORT & 0xff;
	seg[2] = TLS_PORT >> 8;
	for (int i = 0; i < 4; i++) {
		seg[4 + i] = (uint8_t)(seq >> (24 - 8 * i));
		seg[8 + i] = (uint8_t)(ack >> (24 - 8 * i));
	}
	seg[12] = 5 << 4;
	seg[13] = flags;
	seg[14] = 0xff; /* window */
	seg[15] = 0xff;
	if (n)
		memcpy(seg + 20, data, n);
	inet_pton(AF_INET, NETLAB_GUEST, pseudo);
	memcpy(pseudo + 4, &to.sin_addr, 4);
	pseudo[8] = 0;
	pseudo[9] = IPPROTO_TCP;
	pseudo[10] = (uint8_t)((20 + n) >> 8);
	pseudo[11] = (uint8_t)(20 + n);
	sum = csum(seg, 20 + n, (uint32_t)(~csum(pseudo, 12, 0) & 0xffff));
	seg[16] = (uint8_t)(sum >> 8);
	seg[17] = (uint8_t)sum;
	return sendto(fd, seg, 20 + n, 0, (struct sockaddr *)&to, sizeof to) ==
		       (ssize_t)(20 + n)
		   ? 0
		   : -1;
}

/* Waits up to ms for a segment from the server to RAW_PORT with all of
 * flags; its sequence number in *seq. 0 when one came. */
static int raw_wait(int fd, uint8_t flags, uint32_t *seq, int ms)
{
	uint8_t b[2048];

	for (double t0 = bench_now(); (bench_now() - t0) * 1000 < ms;) {
		struct pollfd p = {fd, POLLIN, 0};
		ssize_t k;
		size_t ih;
		if (poll(&p, 1, 50) != 1 || (k = recv(fd, b, sizeof b, 0)) < 40)
			continue;
		ih = (size_t)(b[0] & 15) * 4;
		if ((size_t)k < ih + 20 || (b[ih] << 8 | b[ih + 1]) != TLS_PORT ||
		    (b[ih + 2] << 8 | b[ih + 3]) != RAW_PORT ||
		    (b[ih + 13] & flags) != flags)
			continue;
		*seq = (uint32_t)b[ih + 4] << 24 | (uint32_t)b[ih + 5] << 16 |
		       (uint32_t)b[ih + 6] << 8 | b[ih + 7];
		return 0;
	}
	return -1;
}

/* 0: after the judged ClientHello (lost on S's side) came again naming
 * b.test, the connection was reset. */
static int guest_rewrite(void)
{
	uint8_t a[512], b[512];
	size_t na, nb;
	uint32_t s, x;
	int fd = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_TCP);

	na = hello_of(a, "a.test");
	nb = hello_of(b, "b.test");
	if (fd < 0 || na != nb || netlab_resolve())
		return 10;
	if (raw_send(fd, RAW_ISN, 0, TH_SYN, NULL, 0) ||
	    raw_wait(fd, TH_SYN | TH_ACK, &s, 3000))
		return 11;
	if (raw_send(fd, RAW_ISN + 1, s + 1, TH_ACK, NULL, 0) ||
	    raw_send(fd, RAW_ISN + 1, s + 1, TH_ACK | TH_PUSH, a, na))
		return 12;
	usleep(300000); /* S dropped it: no ACK comes */
	if (raw_send(fd, RAW_ISN + 1, s + 1, TH_ACK | TH_PUSH, b, nb))
		return 13;
	return raw_wait(fd, TH_RST, &x, 3000) ? 14 : 0;
}

/* --- a live change of grants --- */

static int go_pipe[2] = {-1, -1}, ready_pipe[2] = {-1, -1};

/* Waits for the test's word (1 byte) on go_pipe; 0 when it came. */
static int await_go(void)
{
	char c;

	return read(go_pipe[0], &c, 1) == 1 ? 0 : -1;
}

/* 0: a granted connection carried MARK-ONE after a change that kept its
 * grant; MARK-TWO, after its grant went, never got an answer. */
static int guest_regrant(void)
{
	uint8_t ch[512], ans[8];
	int fd;

	if (netlab_resolve() || (fd = dial()) < 0)
		return 10;
	if (netlab_send_all(fd, ch, hello_of(ch, "a.test")) || fdio_read_full(fd, ans, 5))
		return 11;
	if (write(ready_pipe[1], "R", 1) != 1 || await_go())
		return 12;
	if (netlab_send_all(fd, "MARK-ONE", 8) || write(ready_pipe[1], "R", 1) != 1 ||
	    await_go())
		return 13;
	netlab_send_all(fd, "MARK-TWO", 8);
	shutdown(fd, SHUT_WR);
	return read(fd, ans, sizeof ans) > 0 ? 14 : 0; /* no count comes */
}

static void grant_done(void *ctx, int rc)
{
	int *out = ctx;

	__atomic_store_n(out, rc == SB_OK ? 1 : -1, __ATOMIC_SEQ_CST);
}

/* Allows (1) or denies (0) grant text on the run; waits for it. */
static void regrant(const char *text, int allow)
{
	struct sb_net_grant g;
	int done = 0;

	assert_int_equal(sb_net_grant_parse(text, strlen(text), &g), SB_OK);
	assert_int_equal(sb_net_run_grant(run, &g, allow, grant_done, &done), SB_OK);
	for (int i = 0; i < 100 && !__atomic_load_n(&done, __ATOMIC_SEQ_CST); i++)
		usleep(50000);
	assert_int_equal(__atomic_load_n(&done, __ATOMIC_SEQ_CST), 1);
}

static int ready_wait(void)
{
	struct pollfd p = {ready_pipe[0], POLLIN, 0};
	char c;

	return poll(&p, 1, 10000) == 1 && read(ready_pipe[0], &c, 1) == 1;
}

/* --- set-up --- */

static void lab_down(void)
{
	if (run && netlab_run_down(&lab, run, NETLAB_RUN_ID, 1))
		print_error("test_judged: %s\n", lab.err);
	run = NULL;
	sb_net_close(net);
	net = NULL;
	netlab_daemon_stop(&lab);
	for (pid_t *p = (pid_t[]){srv_pid, dns_pid}, i = 0; i < 2; i++)
		if (p[i] > 0) {
			kill(p[i], SIGKILL);
			waitpid(p[i], NULL, 0);
		}
	srv_pid = dns_pid = 0;
	unlink(srv_log);
	netlab_cleanup(&lab);
	lab_ready = 0;
}

static void on_signal(int sig)
{
	if (srv_pid > 0)
		kill(srv_pid, SIGKILL);
	if (dns_pid > 0)
		kill(dns_pid, SIGKILL);
	netlab_cleanup(&lab);
	_exit(128 + sig);
}

static int lab_skip(void)
{
	print_message("test_judged: %s: skipped\n", lab.err);
	lab_down();
	return 0;
}

/* Runs nft with script in namespace ns (still named). */
static int nft_in(int ns, const char *script)
{
	char *argv[] = {"ip",  "netns",	       "exec", lab.ns_name[ns],
			"nft", (char *)script, NULL};

	return netlab_run_argv(argv) ? netlab_fail(&lab, SB_ERR_IO, "nft in %s: %s",
						   lab.ns_name[ns], script)
				     : SB_OK;
}

static int setup(void **state)
{
	static const char *const grants[] = {"a.test:443"};
	struct sigaction sa = {.sa_handler = on_signal};
	struct sb_netpolicy pol;
	int rc;

	(void)state;
	if (geteuid() != 0)
		return 0;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (netlab_init(&lab, "sbtest-judge", "/tmp/sb-test-judge-XXXXXX"))
		return lab_skip();
	snprintf(srv_log, sizeof srv_log, "%s/server.log", lab.home);
	if (netlab_ns_setup(&lab) || netlab_enter_h(&lab))
		return lab_skip();
	/* the raw guest's kernel sends no RST of its own; S loses the raw
	 * guest's first segment with data */
	if (nft_in(NETLAB_G, "add table ip t; add chain ip t o { type filter hook output "
			     "priority 0; }; "
			     "add rule ip t o tcp sport 40999 tcp flags rst drop") ||
	    nft_in(NETLAB_S, "add table ip t; add chain ip t i { type filter hook input "
			     "priority 0; }; "
			     "add rule ip t i tcp sport 40999 ip length > 100 numgen inc "
			     "mod 1000000 0 "
			     "drop"))
		goto fail;
	if ((dns_pid = netlab_serve(&lab, NETLAB_S, NETLAB_SERVER, SOCK_DGRAM, 53,
				    netlab_dns_main)) < 0 ||
	    (srv_pid = netlab_serve(&lab, NETLAB_S, NETLAB_SERVER, SOCK_STREAM, TLS_PORT,
				    srv_main)) < 0)
		goto fail;
	netlab_unname(&lab);
	if ((rc = netlab_daemon_start(&lab)))
		return rc == SB_ERR_UNAVAIL ? lab_skip() : (lab_down(), -1);
	if (netlab_policy(&lab, &pol, grants, 1) || netlab_enforcer_open(&lab, 1, &net))
		goto fail;
	if ((rc = netlab_run_up(&lab, net, NETLAB_RUN_ID, &pol, netlab_report, NULL,
				&run)))
		return rc == SB_ERR_UNAVAIL
			   ? lab_skip()
			   : (print_error("%s\n", lab.err), lab_down(), -1);
	lab_ready = 1;
	return 0;
fail:
	print_error("test_judged: %s\n", lab.err);
	lab_down();
	return -1;
}

static int teardown(void **state)
{
	(void)state;
	if (lab_ready)
		lab_down();
	return 0;
}

#define NEED_LAB()                                                                       \
	do {                                                                             \
		if (!lab_ready)                                                          \
			skip();                                                          \
	} while (0)

static void test_granted(void **state)
{
	(void)state;
	NEED_LAB();
	assert_int_equal(in_guest(guest_granted), 0);
	assert_true(server_got("a.test"));
}

static void test_front(void **state)
{
	(void)state;
	NEED_LAB();
	assert_int_equal(in_guest(guest_front), 0);
	assert_true(denial_seen("b.test", "name not granted"));
	assert_false(server_got("b.test"));
}

static void test_http(void **state)
{
	(void)state;
	NEED_LAB();
	assert_int_equal(in_guest(guest_http), 0);
	assert_true(denial_seen("", "not TLS: the port is one of TLS"));
	assert_false(server_got("GET /"));
}

static void test_silent(void **state)
{
	(void)state;
	NEED_LAB();
	assert_int_equal(in_guest(guest_silent), 0);
	assert_true(denial_seen("", "named no server in time"));
}

static void test_rewrite(void **state)
{
	(void)state;
	NEED_LAB();
	assert_int_equal(in_guest(guest_rewrite), 0);
	assert_true(
	    denial_seen("a.test", "a segment carries bytes other than those checked"));
	assert_false(server_got("b.test"));
}

static void test_regrant(void **state)
{
	pid_t pid;
	int st = -1;

	(void)state;
	NEED_LAB();
	assert_int_equal(pipe2(go_pipe, O_CLOEXEC), 0);
	assert_int_equal(pipe2(ready_pipe, O_CLOEXEC), 0);
	pid = netlab_fork_in(&lab, NETLAB_G);
	if (pid == 0)
		_exit(guest_regrant());
	assert_true(pid > 0);
	assert_true(ready_wait()); /* let go by the judge */
	/* a change that keeps a.test:443: the connection goes on */
	regrant("198.51.100.99:1", 1);
	assert_int_equal(write(go_pipe[1], "G", 1), 1);
	assert_true(ready_wait());
	for (int i = 0; i < 40 && !server_got("MARK-ONE"); i++)
		usleep(50000);
	assert_true(server_got("MARK-ONE"));
	/* its grant gone: nothing more of it goes */
	regrant("a.test:443", 0);
	assert_int_equal(write(go_pipe[1], "G", 1), 1);
	for (int i = 0; i < 100 && waitpid(pid, &st, WNOHANG) != pid; i++)
		usleep(100000);
	if (!WIFEXITED(st)) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
	}
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_false(server_got("MARK-TWO"));
	regrant("a.test:443", 1);
	for (int i = 0; i < 2; i++) {
		close(go_pipe[i]);
		close(ready_pipe[i]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_granted), cmocka_unit_test(test_front),
	    cmocka_unit_test(test_http),    cmocka_unit_test(test_silent),
	    cmocka_unit_test(test_rewrite), cmocka_unit_test(test_regrant),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
