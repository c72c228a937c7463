/* test_judged_http.c - a run's HTTP connections judged in the forwarding
 * path (netpolicy/judged.c, judge.h; SPEC.md, "Network policy", "The
 * judge") with real connections: the enforcer on threads of this process,
 * a guest and a server in network namespaces of the test's own
 * (tests/netlab.h), both forked C code; the guest resolves a.test through
 * the run's stub first, so its connections to 203.0.113.10:80 are judged.
 * Grants a.test:80 and a.test:8080.
 *
 * Checks: the enforcer's thread does not spin while 1-byte segments meet
 * a receiver that stopped reading (guest to server, and server to guest);
 * a WebSocket Upgrade answered 101 carries frames both ways; a POST, a
 * request pipelined after it and the guest's half-close all reach a slow
 * server; an Upgrade with bytes after it in the same segment reaches the
 * server not at all, and both ends are reset; a server that ends without
 * answering an Upgrade gets none of the guest's later bytes and the
 * connection ends; a request naming an ungranted host right after a body
 * the judge let by unread (counted by Content-Length, or one chunk) never
 * reaches the server and ends the connection at both ends. Skipped when
 * not root, or without namespaces, nftables or NFQUEUE.
 */
#include <dirent.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "tests/netlab.h"

#define GRANTED_PORT 80
#define TRICKLE_S    4.5  /* how long a trickling peer sends */
#define SETTLE_S     0.5  /* from its start until buffers are full */
#define MEASURE_S    3.0  /* the enforcer thread's CPU time is taken over this */
#define SPIN_MAX     0.30 /* ... and must stay under this share of it */
#define IDLE_MS	     3000 /* a peer waiting for bytes that do not come */

static struct netlab lab;
static int lab_ready; /* 0: each test skips */
static sb_net *net;
static sb_net_run *run;
static pid_t dns_pid;
static pid_t net_tid; /* the enforcer's thread, where the judge runs */

/* --- the peers: a client in G and a server in S, forked per test --- */

/* What a peer saw, sent back to the test through a pipe. */
struct peer_res {
	int step; /* where it failed (enum below), 0: it got through */
	int err;  /* errno there */
	uint64_t sent, got;
	int ended; /* its connection ended (EOF or reset) in time */
	int reset; /* sending more failed: the other end is closed */
	int match; /* what it got is what it had to get (a prefix of) */
};

enum { STEP_OK, STEP_DNS, STEP_CONNECT, STEP_ACCEPT, STEP_SEND, STEP_RECV, STEP_HEAD };

enum { SRV, CLI, NPEERS };

static struct {
	pid_t pid;
	int fd; /* the read end of its pipe */
} peers[NPEERS];

static int peer_out = -1; /* in a peer: its end of the pipe */

/* In a peer: tells the test it got so far (a server: it listens). */
static void peer_ready(void)
{
	if (write(peer_out, "R", 1) != 1)
		_exit(1);
}

/* Reads n bytes from peer who within ms; 1 when they came. */
static int peer_read(int who, void *buf, size_t n, int ms)
{
	struct pollfd p = {.fd = peers[who].fd, .events = POLLIN};

	return poll(&p, 1, ms) == 1 && read(peers[who].fd, buf, n) == (ssize_t)n;
}

/* 1 when peer who said it got so far, within 10 s. */
static int peer_wait_ready(int who)
{
	char c;

	return peer_read(who, &c, 1, 10000) && c == 'R';
}

/* Forks peer who running fn in namespace ns; a server's start returns
 * once it listens. */
static void peer_start(int who, int ns, void (*fn)(struct peer_res *))
{
	struct peer_res res = {0};
	int p[2];
	pid_t pid;

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid = netlab_fork_in(&lab, ns);
	if (pid == 0) {
		close(p[0]);
		peer_out = p[1];
		fn(&res);
		_exit(write(p[1], &res, sizeof res) == sizeof res ? 0 : 1);
	}
	close(p[1]);
	if (pid < 0)
		close(p[0]);
	assert_true(pid > 0);
	peers[who].pid = pid;
	peers[who].fd = p[0];
	if (who == SRV)
		assert_true(peer_wait_ready(who));
}

/* Waits up to ms for peer who's result; fails the test without one. */
static void peer_result(int who, int ms, struct peer_res *res)
{
	static const char *const name[NPEERS] = {"server", "client"};

	if (!peer_read(who, res, sizeof *res, ms))
		fail_msg("the %s gave no result", name[who]);
	waitpid(peers[who].pid, NULL, 0);
	close(peers[who].fd);
	peers[who].pid = 0;
}

/* Ends the peers still there. */
static void peers_stop(void)
{
	for (int i = 0; i < NPEERS; i++)
		if (peers[i].pid > 0) {
			kill(peers[i].pid, SIGKILL);
			waitpid(peers[i].pid, NULL, 0);
			close(peers[i].fd);
			peers[i].pid = 0;
		}
}

static void sleep_s(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* recv(2) once fd has bytes or ms passed: -2 on the timeout. */
static ssize_t recv_within(int fd, void *buf, size_t n, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	int k = poll(&p, 1, ms);

	if (k == 0)
		return -2;
	return k < 0 ? -1 : recv(fd, buf, n, MSG_DONTWAIT);
}

/* Notes in res that step failed, with errno. Returns -1. */
static int failed(struct peer_res *res, int step)
{
	res->step = step;
	res->err = errno;
	return -1;
}

/* In G: resolves a.test through the run's stub (its address is then the
 * run's and redirected) and connects to it; rcvbuf, when not 0, is the
 * socket's receive buffer. The socket, or -1. */
static int cli_connect(struct peer_res *res, int rcvbuf)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(GRANTED_PORT)};
	int fd;

	if (netlab_resolve())
		return failed(res, STEP_DNS);
	inet_pton(AF_INET, NETLAB_SERVER, &sa.sin_addr);
	if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return failed(res, STEP_CONNECT);
	if (rcvbuf)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
		failed(res, STEP_CONNECT);
		close(fd);
		return -1;
	}
	return fd;
}

/* In S: listens on the server's address (rcvbuf as cli_connect's), says
 * it is ready, and takes one connection within 10 s. The socket, or -1. */
static int srv_accept(struct peer_res *res, int rcvbuf)
{
	int l = netlab_listen(NETLAB_SERVER, SOCK_STREAM, GRANTED_PORT), fd;
	struct pollfd p = {.fd = l, .events = POLLIN};

	if (l < 0)
		_exit(1); /* the test sees it not ready */
	if (rcvbuf)
		setsockopt(l, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
	peer_ready();
	fd = poll(&p, 1, 10000) == 1 ? accept4(l, NULL, NULL, SOCK_CLOEXEC) : -1;
	close(l);
	if (fd < 0)
		failed(res, STEP_ACCEPT);
	return fd;
}

/* Reads from fd until an HTTP head's end ("\r\n\r\n") is in buf (cap
 * bytes, NUL-ended); its length with what came after it, or -1 (res says
 * why). */
static ssize_t read_head(int fd, char *buf, size_t cap, struct peer_res *res)
{
	size_t n = 0;

	while (n < cap - 1) {
		ssize_t k = recv_within(fd, buf + n, cap - 1 - n, IDLE_MS);
		if (k <= 0) {
			if (k == -2 || k == 0)
				errno = k ? ETIMEDOUT : ECONNRESET;
			return failed(res, STEP_HEAD);
		}
		n += (size_t)k;
		buf[n] = 0;
		if (strstr(buf, "\r\n\r\n"))
			return (ssize_t)n;
	}
	errno = E2BIG;
	return failed(res, STEP_HEAD);
}

/* Sends one byte every 100 ms for up to a second; sets res->reset when a
 * send fails as on a closed connection. */
static void probe_closed(int fd, struct peer_res *res)
{
	for (int i = 0; i < 10 && !res->reset; i++) {
		if (send(fd, "?", 1, MSG_NOSIGNAL) < 0)
			res->reset = errno == EPIPE || errno == ECONNRESET;
		sleep_s(0.1);
	}
}

/* --- what the peers send and expect, set before they are forked --- */

#define WIRE_MAX (4u << 20)

static uint8_t wire[WIRE_MAX]; /* what the client sends, in order */
static size_t wire_len;
static size_t legit_len; /* wire's first bytes the server may get */

/* Pieces of wire the client sends, each followed by a pause. */
static struct {
	size_t end; /* wire offset the piece ends at */
	double pause_s;
} pieces[4];
static int npieces;
static int half_close;	   /* 1: the client shuts its sending down after wire */
static double srv_delay_s; /* the server sleeps this before it reads */
static const char srv_answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";

static void wire_reset(void)
{
	wire_len = legit_len = 0;
	npieces = 0;
	half_close = 0;
	srv_delay_s = 0;
}

static void wire_add(const void *p, size_t n)
{
	assert_true(wire_len + n <= WIRE_MAX);
	memcpy(wire + wire_len, p, n);
	wire_len += n;
}

static void wire_text(const char *s)
{
	wire_add(s, strlen(s));
}

/* n body bytes, not all alike: a shift would show. */
static void wire_body(size_t n)
{
	assert_true(wire_len + n <= WIRE_MAX);
	for (size_t i = 0; i < n; i++)
		wire[wire_len + i] = (uint8_t)('a' + (wire_len + i) % 26);
	wire_len += n;
}

/* Ends a piece here, to be followed by a pause. */
static void wire_piece(double pause_s)
{
	pieces[npieces].end = wire_len;
	pieces[npieces].pause_s = pause_s;
	npieces++;
}

/* Client: sends wire in its pieces (half-closed after, when asked), then
 * reads what comes back until its connection ends or IDLE_MS pass, and
 * tries whether sending more still works. */
static void cli_wire(struct peer_res *res)
{
	static char buf[65536];
	size_t at = 0;
	int fd = cli_connect(res, 0);

	if (fd < 0)
		return;
	for (int i = 0; i < npieces; i++) {
		if (netlab_send_all(fd, wire + at, pieces[i].end - at)) {
			failed(res, STEP_SEND);
			break;
		}
		res->sent += pieces[i].end - at;
		at = pieces[i].end;
		sleep_s(pieces[i].pause_s);
	}
	if (half_close)
		shutdown(fd, SHUT_WR);
	for (;;) {
		ssize_t k = recv_within(fd, buf, sizeof buf, IDLE_MS);
		if (k == -2)
			break;
		if (k <= 0) {
			res->ended = 1;
			break;
		}
		res->got += (uint64_t)k;
	}
	if (!half_close)
		probe_closed(fd, res);
	close(fd);
}

/* Server: after srv_delay_s, reads slowly until the connection ends or
 * IDLE_MS pass, checking every byte against wire's legit part; answers
 * once the client is done. */
static void srv_wire(struct peer_res *res)
{
	static uint8_t buf[16384];
	int fd = srv_accept(res, 0);

	if (fd < 0)
		return;
	res->match = 1;
	sleep_s(srv_delay_s);
	for (;;) {
		ssize_t k = recv_within(fd, buf, sizeof buf, IDLE_MS);
		if (k == -2)
			break;
		if (k <= 0) {
			res->ended = 1;
			break;
		}
		if (res->got + (uint64_t)k > legit_len ||
		    memcmp(buf, wire + res->got, (size_t)k))
			res->match = 0;
		res->got += (uint64_t)k;
		usleep(200); /* slowly */
	}
	netlab_send_all(fd, srv_answer, sizeof srv_answer - 1);
	close(fd);
}

/* --- the enforcer's thread and its CPU time --- */

/* The ids of this process's threads, up to max; how many. */
static int tids(pid_t *out, int max)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)) && n < max)
		if (e->d_name[0] != '.')
			out[n++] = (pid_t)atoi(e->d_name);
	closedir(d);
	return n;
}

/* CPU seconds (user and system) thread tid used so far. */
static double cpu_s(pid_t tid)
{
	char path[64], buf[1024], *p;
	unsigned long ut = 0, st = 0;
	ssize_t k;
	int fd;

	snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	k = read(fd, buf, sizeof buf - 1);
	close(fd);
	assert_true(k > 0);
	buf[k] = 0;
	/* after the name: state, 5 numbers, flags, 4 fault counts, then
	 * utime and stime (proc(5)) */
	assert_non_null(p = strrchr(buf, ')'));
	assert_int_equal(sscanf(p + 2,
				"%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
				&ut, &st),
			 2);
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* The share of one CPU the enforcer's thread takes over MEASURE_S. */
static double net_thread_load(void)
{
	double c0 = cpu_s(net_tid), t0 = bench_now(), c1, t1;

	sleep_s(MEASURE_S);
	c1 = cpu_s(net_tid);
	t1 = bench_now();
	return (c1 - c0) / (t1 - t0);
}

/* --- set-up --- */

static void on_signal(int sig)
{
	for (int i = 0; i < NPEERS; i++)
		if (peers[i].pid > 0) {
			kill(peers[i].pid, SIGKILL);
			waitpid(peers[i].pid, NULL, 0);
		}
	if (dns_pid > 0) {
		kill(dns_pid, SIGKILL);
		waitpid(dns_pid, NULL, 0);
	}
	netlab_cleanup(&lab);
	_exit(128 + sig);
}

/* Ends what setup started, as far as it got. */
static void lab_down(void)
{
	if (run && netlab_run_down(&lab, run, NETLAB_RUN_ID, 1))
		print_error("test_judged_http: %s\n", lab.err);
	run = NULL;
	sb_net_close(net);
	net = NULL;
	netlab_daemon_stop(&lab);
	if (dns_pid > 0) {
		kill(dns_pid, SIGKILL);
		waitpid(dns_pid, NULL, 0);
	}
	dns_pid = 0;
	netlab_cleanup(&lab);
	lab_ready = 0;
}

/* Skips the tests (the host cannot do this) with one line why. */
static int lab_skip(void)
{
	print_message("test_judged_http: %s: skipped\n", lab.err);
	lab_down();
	return 0;
}

/* Fails the group (lab.err says why). */
static int fail_setup(void)
{
	print_error("test_judged_http: %s\n", lab.err);
	lab_down();
	return -1;
}

static int setup(void **state)
{
	static const char *const grants[] = {"a.test:80", "a.test:8080"};
	struct sigaction sa = {.sa_handler = on_signal};
	struct sb_netpolicy pol;
	pid_t before[64], after[64];
	int nb, na, rc;

	if (geteuid() != 0)
		return 0; /* each test skips */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN); /* as the daemon */
	if (netlab_init(&lab, "sbtest-jhttp", "/tmp/sb-test-jhttp-XXXXXX"))
		return lab_skip();
	if (netlab_ns_setup(&lab) || netlab_enter_h(&lab))
		return lab_skip();
	/* forked before any thread starts; the peers come later */
	if ((dns_pid = netlab_serve(&lab, NETLAB_S, NETLAB_SERVER, SOCK_DGRAM, 53,
				    netlab_dns_main)) < 0)
		goto fail;
	netlab_unname(&lab); /* held by descriptor and process from now on */
	if ((rc = netlab_daemon_start(&lab)))
		return rc == SB_ERR_UNAVAIL ? lab_skip() : fail_setup(); /* nftables */
	if (netlab_policy(&lab, &pol, grants, 2))
		goto fail;
	/* the enforcer's thread is the one sb_net_open adds (it has no name
	 * of its own; the threads named sb:net are the worker pool's) */
	nb = tids(before, 64);
	if (netlab_enforcer_open(&lab, 1, &net))
		goto fail;
	na = tids(after, 64);
	for (int i = 0; i < na; i++) {
		int old = 0;
		for (int k = 0; k < nb; k++)
			old |= after[i] == before[k];
		if (!old && net_tid) {
			snprintf(lab.err, sizeof lab.err,
				 "sb_net_open started 2 threads");
			goto fail;
		}
		if (!old)
			net_tid = after[i];
	}
	if (!net_tid) {
		snprintf(lab.err, sizeof lab.err, "sb_net_open started no thread");
		goto fail;
	}
	/* SB_ERR_UNAVAIL: the host cannot enforce (sb_net_check says why) */
	if ((rc = netlab_run_up(&lab, net, NETLAB_RUN_ID, &pol, netlab_report, NULL,
				&run)))
		return rc == SB_ERR_UNAVAIL ? lab_skip() : fail_setup();
	lab_ready = 1;
	return 0;
fail:
	return fail_setup();
}

static int teardown(void **state)
{
	if (lab_ready)
		lab_down();
	return 0;
}

static int test_setup(void **state)
{
	wire_reset();
	netlab_reports_clear();
	return 0;
}

static int test_teardown(void **state)
{
	peers_stop();
	return 0;
}

#define NEED_LAB()                                                                       \
	do {                                                                             \
		if (!lab_ready)                                                          \
			skip();                                                          \
	} while (0)

static void assert_peer_ok(const struct peer_res *r, const char *who)
{
	if (r->step)
		fail_msg("the %s failed at step %d: %s", who, r->step, strerror(r->err));
}

/* --- 1-byte segments against a receiver that stopped reading --- */

/* Sends head, says it is ready, then sends byte one segment at a time
 * (TCP_NODELAY) for TRICKLE_S, counting them in res->sent. */
static void trickle(struct peer_res *res, int fd, const char *head, const char *byte)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (netlab_send_all(fd, head, strlen(head))) {
		failed(res, STEP_SEND);
		return;
	}
	peer_ready();
	for (double t0 = bench_now(); bench_now() - t0 < TRICKLE_S;) {
		ssize_t k = send(fd, byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (k == 1 && ++res->sent % 50 == 0)
			sleep_s(0.0005);
		else if (k < 0 && errno == EAGAIN)
			sleep_s(0.001);
		else if (k < 0) {
			failed(res, STEP_SEND);
			return;
		}
	}
}

/* Server: takes the head, then never reads (a small receive buffer, so
 * what the guest sends soon waits). */
static void srv_sink(struct peer_res *res)
{
	static char head[4096];
	int fd = srv_accept(res, 4096);

	if (fd < 0 || read_head(fd, head, sizeof head, res) < 0)
		return;
	sleep_s(TRICKLE_S + 5); /* killed before */
}

/* Client: a POST of a large body, sent one byte a segment. */
static void cli_trickle(struct peer_res *res)
{
	static const char head[] = "POST /up HTTP/1.1\r\nHost: a.test\r\n"
				   "Content-Length: 100000000\r\n\r\n";
	int fd = cli_connect(res, 0);

	if (fd >= 0)
		trickle(res, fd, head, "x");
}

/* Runs srv_fn and cli_fn, one of them (trickler, SRV or CLI) sending
 * 1-byte segments the other does not read: the enforcer's thread must
 * not spin meanwhile. */
static void trickle_check(void (*srv_fn)(struct peer_res *),
			  void (*cli_fn)(struct peer_res *), int trickler)
{
	const char *who = trickler == SRV ? "server" : "client";
	struct peer_res res;
	double load;

	peer_start(SRV, NETLAB_S, srv_fn);
	peer_start(CLI, NETLAB_G, cli_fn);
	assert_true(peer_wait_ready(trickler)); /* the trickle starts */
	sleep_s(SETTLE_S);
	load = net_thread_load();
	peer_result(trickler, (int)(TRICKLE_S * 1000) + 5000, &res);
	assert_peer_ok(&res, who);
	print_message("test_judged_http: %s sent %llu 1-byte segments; enforcer thread "
		      "%.0f%% of a CPU\n",
		      who, (unsigned long long)res.sent, load * 100);
	assert_true(res.sent > 1000); /* it did trickle */
	if (load >= SPIN_MAX)
		fail_msg("the enforcer's thread spun: %.0f%% of a CPU", load * 100);
}

static void test_trickle_to_server(void **state)
{
	NEED_LAB();
	trickle_check(srv_sink, cli_trickle, CLI);
}

/* Client: asks for a download and never reads (a small receive buffer). */
static void cli_noread(struct peer_res *res)
{
	static const char get[] = "GET /down HTTP/1.1\r\nHost: a.test\r\n\r\n";
	int fd = cli_connect(res, 4096);

	if (fd < 0)
		return;
	if (netlab_send_all(fd, get, sizeof get - 1)) {
		failed(res, STEP_SEND);
		return;
	}
	sleep_s(TRICKLE_S + 5); /* killed before */
}

/* Server: answers with a large body, sent one byte a segment. */
static void srv_trickle(struct peer_res *res)
{
	static const char answer[] =
	    "HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n";
	static char head[4096];
	int fd = srv_accept(res, 0);

	if (fd >= 0 && read_head(fd, head, sizeof head, res) >= 0)
		trickle(res, fd, answer, "y");
}

static void test_trickle_to_guest(void **state)
{
	NEED_LAB();
	trickle_check(srv_trickle, cli_noread, SRV);
}

/* --- an Upgrade --- */

static const char upgrade[] = "GET /ws HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\n"
			      "Connection: Upgrade\r\n\r\n";
static const char frame[] = "\x81\x0bhello-frame";
static const char switching[] = "HTTP/1.1 101 Switching Protocols\r\n"
				"Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n";

/* Reads the frame the other side sends (within IDLE_MS) into buf: res
 * gets its size and whether it is frame. Its size, or -1 (res says why). */
static ssize_t frame_recv(struct peer_res *res, int fd, char *buf, size_t cap)
{
	ssize_t k = recv_within(fd, buf, cap, IDLE_MS);

	if (k <= 0) {
		errno = k == -2 ? ETIMEDOUT : errno;
		failed(res, STEP_RECV);
		return -1;
	}
	res->got = (uint64_t)k;
	res->match = k == sizeof frame - 1 && !memcmp(buf, frame, (size_t)k);
	return k;
}

/* Server: takes the Upgrade, answers 101, echoes what comes next. */
static void srv_ws(struct peer_res *res)
{
	static char buf[4096];
	int fd = srv_accept(res, 0);
	ssize_t k;

	if (fd < 0 || read_head(fd, buf, sizeof buf, res) < 0)
		return;
	if (netlab_send_all(fd, switching, sizeof switching - 1)) {
		failed(res, STEP_SEND);
		return;
	}
	if ((k = frame_recv(res, fd, buf, sizeof buf)) > 0)
		netlab_send_all(fd, buf, (size_t)k);
}

/* Client: sends the Upgrade, waits for the 101, then sends a frame and
 * reads its echo. */
static void cli_ws(struct peer_res *res)
{
	static char buf[4096];
	int fd = cli_connect(res, 0);

	if (fd < 0)
		return;
	if (netlab_send_all(fd, upgrade, sizeof upgrade - 1)) {
		failed(res, STEP_SEND);
		return;
	}
	if (read_head(fd, buf, sizeof buf, res) < 0)
		return;
	if (strncmp(buf, "HTTP/1.1 101", 12)) {
		errno = EPROTO;
		failed(res, STEP_HEAD);
		return;
	}
	if (netlab_send_all(fd, frame, sizeof frame - 1)) {
		failed(res, STEP_SEND);
		return;
	}
	frame_recv(res, fd, buf, sizeof buf);
}

/* An Upgrade answered 101 before the guest's next bytes: they go on. */
static void test_websocket(void **state)
{
	struct peer_res srv, cli;

	NEED_LAB();
	peer_start(SRV, NETLAB_S, srv_ws);
	peer_start(CLI, NETLAB_G, cli_ws);
	peer_result(SRV, IDLE_MS + 5000, &srv);
	peer_result(CLI, IDLE_MS + 5000, &cli);
	if (srv.step == STEP_RECV)
		fail_msg("the server got no frame after its 101: %s", strerror(srv.err));
	assert_peer_ok(&srv, "server");
	assert_true(srv.match);
	assert_peer_ok(&cli, "client");
	assert_true(cli.match); /* the echo came back */
}

/* Server: takes the Upgrade, then ends its side without answering; reads
 * on to see whether anything more comes, and whether the connection ends. */
static void srv_no101(struct peer_res *res)
{
	static char buf[4096];
	int fd = srv_accept(res, 0);
	ssize_t n = fd < 0 ? -1 : read_head(fd, buf, sizeof buf, res), k;

	if (n < 0)
		return;
	res->got = (uint64_t)n - (uint64_t)(strstr(buf, "\r\n\r\n") + 4 - buf);
	shutdown(fd, SHUT_WR);
	while ((k = recv_within(fd, buf, sizeof buf, IDLE_MS)) > 0)
		res->got += (uint64_t)k;
	res->ended = k != -2;
}

static int no101_pause_ms; /* between the Upgrade and the bytes after it */

/* Client: the Upgrade and, at once or after no101_pause_ms, bytes for
 * after it; then reads to the end and tries sending more. */
static void cli_no101(struct peer_res *res)
{
	static char buf[4096];
	int fd = cli_connect(res, 0);
	size_t n;
	ssize_t k;

	if (fd < 0)
		return;
	memcpy(buf, upgrade, sizeof upgrade - 1);
	n = sizeof upgrade - 1;
	if (no101_pause_ms) {
		if (netlab_send_all(fd, buf, n)) {
			failed(res, STEP_SEND);
			return;
		}
		poll(NULL, 0, no101_pause_ms); /* the server has ended meanwhile */
		n = 0;
	}
	memcpy(buf + n, frame, sizeof frame - 1);
	if (netlab_send_all(fd, buf, n + sizeof frame - 1)) {
		failed(res, STEP_SEND);
		return;
	}
	while ((k = recv_within(fd, buf, sizeof buf, IDLE_MS)) > 0)
		res->got += (uint64_t)k;
	res->ended = k != -2;
	probe_closed(fd, res);
}

/* Runs the client and server of an Upgrade nobody answers, the client's
 * bytes after it sent after pause_ms (0: in the Upgrade's segment); checks
 * that the client's connection ends. */
static void no101(int pause_ms, struct peer_res *srv, struct peer_res *cli)
{
	no101_pause_ms = pause_ms;
	peer_start(SRV, NETLAB_S, srv_no101);
	peer_start(CLI, NETLAB_G, cli_no101);
	peer_result(SRV, IDLE_MS + 5000, srv);
	peer_result(CLI, 2 * IDLE_MS + 5000, cli);
	no101_pause_ms = 0;
	assert_peer_ok(cli, "client");
	if (!cli->ended || !cli->reset)
		fail_msg("the client's connection did not end (EOF %d, closed %d)",
			 cli->ended, cli->reset);
}

/* An Upgrade and bytes after it in one segment: a segment goes whole or
 * not at all, and these bytes may not go before the server's answer, so
 * none of it reaches the server; both ends are reset. */
static void test_upgrade_unanswered(void **state)
{
	struct peer_res srv, cli;

	NEED_LAB();
	no101(0, &srv, &cli);
	assert_int_equal(srv.step, STEP_HEAD); /* no head, the connection reset */
	assert_int_equal(srv.err, ECONNRESET);
	assert_true(
	    netlab_denial_seen("a.test", "bytes after an Upgrade before its answer", -1));
}

/* A server that ends without answering an Upgrade declines it: the
 * guest's bytes after it never reach the server, the connection ends. */
static void test_upgrade_unanswered_late(void **state)
{
	struct peer_res srv, cli;

	NEED_LAB();
	no101(500, &srv, &cli);
	assert_peer_ok(&srv, "server");
	assert_int_equal(srv.got, 0); /* nothing after the Upgrade's head */
	if (!srv.ended)
		fail_msg("the server's connection did not end");
	assert_true(
	    netlab_denial_seen("a.test", "a request after a declined Upgrade", -1));
}

/* --- pipelined requests, a half-close --- */

/* A 3 MB POST, a GET pipelined after it, then the guest's half-close,
 * to a server that reads late and slowly: all of it arrives, and the
 * answer comes back. */
static void test_half_close(void **state)
{
	char head[128];
	struct peer_res srv, cli;

	NEED_LAB();
	snprintf(head, sizeof head,
		 "POST /first HTTP/1.1\r\nHost: a.test\r\nContent-Length: %u\r\n\r\n",
		 3000000u);
	wire_text(head);
	wire_body(3000000);
	wire_text("GET /second HTTP/1.1\r\nHost: a.test\r\n\r\n");
	wire_piece(0);
	legit_len = wire_len;
	half_close = 1;
	srv_delay_s = 1.5;
	peer_start(SRV, NETLAB_S, srv_wire);
	peer_start(CLI, NETLAB_G, cli_wire);
	peer_result(SRV, 2 * IDLE_MS + 10000, &srv);
	peer_result(CLI, 2 * IDLE_MS + 10000, &cli);
	assert_peer_ok(&srv, "server");
	assert_peer_ok(&cli, "client");
	if (srv.got != legit_len || !srv.match)
		fail_msg("the server got %llu bytes of %zu (%s)",
			 (unsigned long long)srv.got, legit_len,
			 srv.match ? "as sent" : "not as sent");
	assert_true(srv.ended);
	assert_int_equal(cli.got, sizeof srv_answer - 1);
	assert_true(cli.ended);
}

/* --- smuggling after a body passed unread --- */

/* The client sends the head, then the body after the head was judged (so
 * the judge lets it by unread), then its end and at once a request naming
 * an ungranted host, which must never reach the server. */
static void smuggle(const char *head, size_t body, const char *body_end)
{
	struct peer_res srv, cli;
	size_t legit_min;

	wire_text(head);
	wire_piece(0.1); /* judged */
	wire_body(body - 10);
	wire_piece(0.2);
	legit_min = wire_len;
	wire_body(10);
	wire_text(body_end);
	legit_len = wire_len;
	wire_text("GET /evil HTTP/1.1\r\nHost: b.test\r\n\r\n");
	wire_piece(0);
	peer_start(SRV, NETLAB_S, srv_wire);
	peer_start(CLI, NETLAB_G, cli_wire);
	peer_result(SRV, IDLE_MS + 5000, &srv);
	peer_result(CLI, 2 * IDLE_MS + 5000, &cli);
	assert_peer_ok(&srv, "server");
	assert_peer_ok(&cli, "client");
	if (!srv.match)
		fail_msg("the server got bytes beyond the granted request: %llu of %zu",
			 (unsigned long long)srv.got, legit_len);
	/* the body went through, but for the segment that carries the refused
	 * request: it goes not at all */
	assert_true(srv.got >= legit_min);
	assert_true(srv.ended);
	if (!cli.ended)
		fail_msg("the client's connection was not closed");
	assert_true(netlab_denial_seen("b.test", "name not granted", -1));
}

static void test_smuggle_content_length(void **state)
{
	NEED_LAB();
	smuggle("POST /up HTTP/1.1\r\nHost: a.test\r\nContent-Length: 300000\r\n\r\n",
		300000, "");
}

static void test_smuggle_chunked(void **state)
{
	NEED_LAB();
	smuggle("POST /up HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n"
		"493e0\r\n",
		300000, "\r\n0\r\n\r\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_trickle_to_server, test_setup,
					    test_teardown),
	    cmocka_unit_test_setup_teardown(test_trickle_to_guest, test_setup,
					    test_teardown),
	    cmocka_unit_test_setup_teardown(test_websocket, test_setup, test_teardown),
	    cmocka_unit_test_setup_teardown(test_upgrade_unanswered, test_setup,
					    test_teardown),
	    cmocka_unit_test_setup_teardown(test_upgrade_unanswered_late, test_setup,
					    test_teardown),
	    cmocka_unit_test_setup_teardown(test_half_close, test_setup, test_teardown),
	    cmocka_unit_test_setup_teardown(test_smuggle_content_length, test_setup,
					    test_teardown),
	    cmocka_unit_test_setup_teardown(test_smuggle_chunked, test_setup,
					    test_teardown),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
