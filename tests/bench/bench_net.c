/* bench_net.c - network mode acl's enforcer (netpolicy/net.h) against the
 * same path with no Sanbox rules, in network namespaces of its own.
 *
 * Three namespaces (tests/netlab.h), named after this process: H, the
 * daemon's host, where this process and its threads live; G, the guest
 * (10.87.0.2, behind a veth named as run 0000000000b1's tap); S, the
 * server (203.0.113.10, off-link, routed through 198.51.100.10). Their
 * names are gone once all is set up (the bench holds them by file
 * descriptor), so nothing of them outlives the bench's processes.
 *
 * In S, forked servers: HTTP on port 80 (a GET is answered with 1 GiB; a
 * POST's body is read to its Content-Length, then answered), "TLS" on
 * ports 443 and 8443 (a ClientHello record is read; then on 443 1 GiB is
 * sent, on 8443 all is read to EOF and, if it was 1 GiB, its count
 * answered: no cryptography, as the enforcer reads nothing after the
 * ClientHello) and DNS on port 53 (a.test A 203.0.113.10, dns.h). In G, a
 * forked client per transfer sends its request with Host a.test, or a
 * ClientHello naming a.test, and reads to EOF; the time counts from
 * connect to EOF.
 *
 * The configurations, taken in turn in each of ROUNDS rounds (medians):
 *   direct   no enforcer, no table at all: plain forwarding, no conntrack.
 *   plain_relay  no enforcer; the client connects to a relay in H
 *            (10.87.0.1:9080, forked processes copying 1 MiB at a time):
 *            what a simple user-space relay gets on this machine.
 *   granted  the enforcer (links_given: the veth is the run's link) with
 *            the grant 203.0.113.10:80: forwarding through the run's
 *            chains, conntrack marks, masquerade.
 *   named    the grant a.test:80: the client first resolves a.test through
 *            the run's stub (10.87.0.1:53, which asks the DNS server in S),
 *            then connects to 203.0.113.10:80; the judge reads each
 *            request's head in the forwarding path (the upload's body goes
 *            past it, in the run's set b4).
 *   direct_tls, granted_tls (grants 203.0.113.10:443 and :8443) and
 *   named_tls (grants a.test:443 and a.test:8443: the client resolves
 *            a.test first; the judge reads the ClientHello in the
 *            forwarding path, then the kernel forwards the rest): the same
 *            over the TLS server, each against direct_tls.
 * Each as a download and an upload (the HTTP upload's body is counted by
 * the judge's HTTP parser). The run of a configuration is opened before
 * its transfers and closed after them (its teardown awaited, the table
 * gone).
 *
 * Set-up: a second enforcer, making real taps (links_given 0), opens and
 * starts SETUP_RUNS runs one after another (sb_net_run_open +
 * sb_net_run_start), then closes them one after another, each close timed
 * until its worker has deleted its chains, tap and net.json (and, for the
 * last, the table). Then MANY_RUNS runs are opened and, while they exist,
 * one more is opened and closed, MANY_REPEAT times.
 *
 * Needs root; without it prints one line on stderr and no figure. Prints
 * only lines "bench NAME VALUE UNIT" (NAME_vs_BASE: the ratio to
 * configuration BASE); errors go to stderr with exit status
 * 1. The namespaces, the processes this bench started and its files are
 * removed on every exit, also on failure or SIGINT/SIGTERM.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/error.h"
#include "netpolicy/net.h"
#include "tests/bench/benchutil.h"
#include "tests/netlab.h"
#include "tests/unit/tlshello.h"

#define RUN_ID	    NETLAB_RUN_ID
#define TAP	    NETLAB_TAP
#define GATEWAY	    NETLAB_GATEWAY
#define SERVER	    NETLAB_SERVER
#define XFER_BYTES  (1ull << 30)
#define ROUNDS	    7
#define SETUP_RUNS  20
#define MANY_RUNS   200
#define MANY_REPEAT 5
#define CHUNK	    (1u << 20)
#define RELAY_PORT  9080
#define RELAY_BUF   (1 << 20)
#define TLS_DOWN    443	 /* the TLS server's port for downloads */
#define TLS_UP	    8443 /* ... and uploads */

/* --- what to undo --- */

static struct netlab lab; /* the namespaces, home, the daemon's stand-in */
static pid_t kids[6]; /* the HTTP, TLS and DNS servers, the relay, the client under way */

enum { KID_HTTP, KID_TLS_DOWN, KID_TLS_UP, KID_DNS, KID_RELAY, KID_CLIENT, NKIDS };

static void kid_stop(int i)
{
	if (kids[i] > 0) {
		kill(kids[i], SIGKILL);
		waitpid(kids[i], NULL, 0);
		kids[i] = 0;
	}
}

static void cleanup(void)
{
	for (int i = 0; i < NKIDS; i++)
		kid_stop(i);
	netlab_cleanup(&lab);
}

/* Ends the bench: the enforcer's threads may still run, so no exit
 * handlers. */
static void die(const char *what, int rc)
{
	fprintf(stderr, "bench_net: %s: %s\n", what,
		rc < 0 ? sb_errmsg(rc)
		: rc   ? strerror(rc)
		       : "failed");
	fflush(stdout);
	cleanup();
	_exit(1);
}

/* Ends the bench on a failure of netlab (lab.err says what). */
static void die_lab(void)
{
	fprintf(stderr, "bench_net: %s\n", lab.err);
	fflush(stdout);
	cleanup();
	_exit(1);
}

static void on_signal(int sig)
{
	cleanup();
	_exit(128 + sig);
}

/* --- the servers, in S (forked before any thread starts) --- */

static uint8_t chunk[CHUNK];

static const char get_answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n"
				 "Connection: close\r\n\r\n";
static const char post_answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"
				  "Connection: close\r\n\r\n";

/* Sends XFER_BYTES of chunk to fd; 0 when all went. */
static int xfer_send(int fd)
{
	for (uint64_t left = XFER_BYTES; left;) {
		size_t k = left < CHUNK ? (size_t)left : CHUNK;
		if (netlab_send_all(fd, chunk, k))
			return -1;
		left -= k;
	}
	return 0;
}

/* Serves one HTTP connection: a GET gets XFER_BYTES, a POST's body is
 * read to its Content-Length and answered. */
static void http_serve(int fd)
{
	static char head[16384];
	size_t n = 0;
	char *end = NULL, *cl;
	uint64_t want, got;

	while (!end && n < sizeof head - 1) {
		ssize_t k = recv(fd, head + n, sizeof head - 1 - n, 0);
		if (k <= 0)
			return;
		n += (size_t)k;
		head[n] = 0;
		end = strstr(head, "\r\n\r\n");
	}
	if (!end)
		return;
	if (!strncmp(head, "GET ", 4)) {
		if (netlab_send_all(fd, get_answer, sizeof get_answer - 1) == 0)
			xfer_send(fd);
		return;
	}
	if (strncmp(head, "POST ", 5) || !(cl = strcasestr(head, "content-length:")))
		return;
	want = strtoull(cl + 15, NULL, 10);
	got = n - (size_t)(end + 4 - head);
	while (got < want) {
		ssize_t k = recv(fd, chunk, CHUNK, 0);
		if (k <= 0)
			return;
		got += (uint64_t)k;
	}
	netlab_send_all(fd, post_answer, sizeof post_answer - 1);
}

/* The client's ClientHello record (SNI a.test), built before any fork. */
static uint8_t hello_rec[512];
static size_t hello_len;

/* Serves one "TLS" connection: reads a ClientHello record, then on
 * TLS_DOWN sends XFER_BYTES, on TLS_UP reads to EOF and answers the count
 * (8 bytes) only if it is XFER_BYTES, so a short upload fails the client.
 * No cryptography: past the ClientHello the enforcer reads nothing, so the
 * bytes after it need not be records. */
static void tls_serve(int fd, uint16_t port)
{
	uint8_t head[5];
	uint64_t got = 0;
	size_t n = 0, len;
	ssize_t k;

	while (n < sizeof head && (k = recv(fd, head + n, sizeof head - n, 0)) > 0)
		n += (size_t)k;
	if (n < sizeof head || head[0] != 0x16)
		return;
	for (len = (size_t)(head[3] << 8 | head[4]); len;) {
		if ((k = recv(fd, chunk, len, 0)) <= 0)
			return;
		len -= (size_t)k;
	}
	if (port == TLS_DOWN) {
		xfer_send(fd);
		return;
	}
	while ((k = recv(fd, chunk, CHUNK, 0)) > 0)
		got += (uint64_t)k;
	if (got == XFER_BYTES)
		netlab_send_all(fd, &got, sizeof got);
}

static void tls_main(int fd)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof sa;

	getsockname(fd, (struct sockaddr *)&sa, &len);
	for (;;) {
		int c = accept(fd, NULL, NULL);
		if (c < 0)
			continue;
		tls_serve(c, ntohs(sa.sin_port));
		close(c);
	}
}

static void http_main(int fd)
{
	for (;;) {
		int c = accept(fd, NULL, NULL);
		if (c < 0)
			continue;
		http_serve(c);
		close(c);
	}
}

/* --- the plain relay, in H (forked before any thread starts) --- */

/* Copies from one socket to the other until EOF, then shuts the other's
 * writing down. */
static void relay_copy(int from, int to)
{
	static uint8_t buf[RELAY_BUF];

	for (;;) {
		ssize_t k = recv(from, buf, sizeof buf, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0 || netlab_send_all(to, buf, (size_t)k))
			break;
	}
	shutdown(to, SHUT_WR);
}

/* Per connection to GATEWAY:RELAY_PORT: connects to the server and
 * passes the bytes both ways, one process a direction. */
static void relay_main(int fd)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(80)};

	inet_pton(AF_INET, SERVER, &sa.sin_addr);
	signal(SIGCHLD, SIG_IGN);
	for (;;) {
		int c = accept(fd, NULL, NULL), s;
		if (c < 0)
			continue;
		if (fork() == 0) {
			if ((s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
			    connect(s, (struct sockaddr *)&sa, sizeof sa))
				_exit(1);
			if (fork() == 0) {
				relay_copy(s, c);
				_exit(0);
			}
			relay_copy(c, s);
			_exit(0);
		}
		close(c);
	}
}

/* Forks a server in namespace ns listening on addr:port (type), once it
 * listens; main_fn never returns. */
static pid_t server_start(int ns, const char *addr, int type, uint16_t port,
			  void (*main_fn)(int fd))
{
	pid_t pid = netlab_serve(&lab, ns, addr, type, port, main_fn);

	if (pid < 0)
		die_lab();
	return pid;
}

/* --- the client, in G (forked while threads run: system calls only) --- */

enum xfer_kind { XFER_GET, XFER_POST, XFER_TLS_GET, XFER_TLS_POST };

struct xfer_result {
	int step; /* 0: done; else where it failed (enum below) */
	int err;  /* errno there */
	double dns_s, xfer_s;
	uint64_t bytes; /* bytes received (a GET) or sent (a POST) */
};

enum { STEP_OK, STEP_DNS, STEP_CONNECT, STEP_SEND, STEP_RECV, STEP_SHORT };

static const char *step_name[] = {"",	  "DNS lookup", "connect",
				  "send", "receive",	"short transfer"};

static void client_main(enum xfer_kind kind, int resolve, const char *addr, uint16_t port,
			struct xfer_result *res)
{
	static const char get[] = "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n";
	static const char post_head[] = "POST / HTTP/1.1\r\nHost: a.test\r\n"
					"Content-Length: 1073741824\r\n\r\n";
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	uint64_t want = kind == XFER_GET       ? sizeof get_answer - 1 + XFER_BYTES
			: kind == XFER_POST    ? sizeof post_answer - 1
			: kind == XFER_TLS_GET ? XFER_BYTES
					       : sizeof(uint64_t);
	int post = kind == XFER_POST || kind == XFER_TLS_POST;
	uint64_t got = 0;
	double t0;
	int fd;

	if (setns(lab.ns_fd[NETLAB_G], CLONE_NEWNET)) {
		res->step = STEP_CONNECT;
		res->err = errno;
		return;
	}
	t0 = bench_now();
	if (resolve && netlab_resolve()) {
		res->step = STEP_DNS;
		res->err = errno;
		return;
	}
	res->dns_s = bench_now() - t0;
	inet_pton(AF_INET, addr, &sa.sin_addr);
	t0 = bench_now();
	if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
		res->step = STEP_CONNECT;
		res->err = errno;
		return;
	}
	if (kind == XFER_GET	? netlab_send_all(fd, get, sizeof get - 1)
	    : kind == XFER_POST ? netlab_send_all(fd, post_head, sizeof post_head - 1)
				: netlab_send_all(fd, hello_rec, hello_len)) {
		res->step = STEP_SEND;
		res->err = errno;
		return;
	}
	if (post && xfer_send(fd)) {
		res->step = STEP_SEND;
		res->err = errno;
		return;
	}
	if (kind == XFER_TLS_POST)
		shutdown(fd, SHUT_WR);
	for (;;) {
		ssize_t k = recv(fd, chunk, CHUNK, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			res->step = STEP_RECV;
			res->err = errno;
			return;
		}
		if (k == 0)
			break;
		got += (uint64_t)k;
	}
	res->xfer_s = bench_now() - t0;
	close(fd);
	res->bytes = XFER_BYTES;
	if (got != want)
		res->step = STEP_SHORT;
}

/* One transfer from G; the result's time in seconds. */
static struct xfer_result transfer(enum xfer_kind kind, int resolve, const char *addr,
				   uint16_t port)
{
	struct xfer_result res = {0};
	int p[2];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC))
		die("pipe", errno);
	if ((pid = fork()) < 0)
		die("fork", errno);
	if (!pid) {
		client_main(kind, resolve, addr, port, &res);
		_exit(write(p[1], &res, sizeof res) == sizeof res ? 0 : 1);
	}
	kids[KID_CLIENT] = pid;
	close(p[1]);
	if (read(p[0], &res, sizeof res) != sizeof res)
		die("the client ended without a result", 0);
	close(p[0]);
	waitpid(pid, NULL, 0);
	kids[KID_CLIENT] = 0;
	if (res.step) {
		fprintf(stderr, "bench_net: client %s: %s\n", step_name[res.step],
			strerror(res.err));
		sleep(1); /* for the enforcer's reports, which say why */
		die(kind == XFER_GET || kind == XFER_TLS_GET ? "download" : "upload", 0);
	}
	return res;
}

/* --- the enforcer --- */

/* A denial means the bench is wrong: it is said on stderr. */
static void on_report(void *ctx, const struct sb_net_report *r)
{
	if (r->kind == SB_NET_DENIED)
		fprintf(stderr, "bench_net: denied: %s:%u %s %s: %s (%llu)\n", r->dst,
			r->port, r->proto, r->name, r->reason,
			(unsigned long long)r->count);
}

static void policy_of(struct sb_netpolicy *p, const char *const *grants, size_t n)
{
	if (netlab_policy(&lab, p, grants, n))
		die_lab();
}

static sb_net *enforcer_open(int links_given)
{
	sb_net *n;

	if (netlab_enforcer_open(&lab, links_given, &n))
		die_lab();
	return n;
}

/* Opens and starts run id's network with grants p; returns its handle. */
static sb_net_run *run_up(sb_net *n, const char *id, const struct sb_netpolicy *p)
{
	sb_net_run *h;

	if (netlab_run_up(&lab, n, id, p, on_report, NULL, &h))
		die_lab();
	return h;
}

/* Makes home/runs/ID, where a run's net.json goes. */
static void run_dir(const char *id)
{
	if (netlab_run_dir(&lab, id))
		die_lab();
}

/* 1 when H has the table inet sanbox. */
static int table_there(void)
{
	return netlab_table_there(&lab);
}

/* Closes run id (handle h) and waits until its end is done (netlab.h). */
static void run_down(sb_net_run *h, const char *id, int last)
{
	if (netlab_run_down(&lab, h, id, last))
		die_lab();
}

static double mbps(const struct xfer_result *r)
{
	return (double)r->bytes / r->xfer_s / 1e6;
}

enum {
	CFG_DIRECT,
	CFG_RELAY,
	CFG_GRANTED,
	CFG_NAMED,
	CFG_DIRECT_TLS,
	CFG_GRANTED_TLS,
	CFG_NAMED_TLS,
	NCFG
};

/* A configuration: its name, its grants (none: no run at all), its
 * baseline, and whether its stream is TLS. */
static const struct cfg {
	const char *name;
	const char *grants[2];
	size_t ngrants;
	int base, tls;
} cfgs[NCFG] = {
    {"direct", {NULL}, 0, CFG_DIRECT, 0},
    {"plain_relay", {NULL}, 0, CFG_DIRECT, 0},
    {"granted", {SERVER ":80"}, 1, CFG_DIRECT, 0},
    {"named", {"a.test:80"}, 1, CFG_DIRECT, 0},
    {"direct_tls", {NULL}, 0, CFG_DIRECT_TLS, 1},
    {"granted_tls", {SERVER ":443", SERVER ":8443"}, 2, CFG_DIRECT_TLS, 1},
    {"named_tls", {"a.test:443", "a.test:8443"}, 2, CFG_DIRECT_TLS, 1},
};

/* Prints the figures of configurations [from, to): the downloads', then
 * the uploads'. */
static void figures(int from, int to, const double *md, const double *mu)
{
	for (int cfg = from; cfg < to; cfg++) {
		const struct cfg *c = &cfgs[cfg];
		printf("bench net.%s_mbps %.0f MB/s\n", c->name, md[cfg]);
		if (cfg != c->base)
			printf("bench net.%s_vs_%s %.2f ratio\n", c->name,
			       cfgs[c->base].name, md[cfg] / md[c->base]);
	}
	for (int cfg = from; cfg < to; cfg++) {
		const struct cfg *c = &cfgs[cfg];
		printf("bench net.%s_upload_mbps %.0f MB/s\n", c->name, mu[cfg]);
		if (cfg != c->base)
			printf("bench net.%s_upload_vs_%s %.2f ratio\n", c->name,
			       cfgs[c->base].name, mu[cfg] / mu[c->base]);
	}
}

static void throughput(void)
{
	double down[NCFG][ROUNDS], up[NCFG][ROUNDS], dns_ms[ROUNDS], md[NCFG], mu[NCFG];
	struct sb_netpolicy pol[NCFG];
	struct xfer_result r;
	sb_net *n;

	for (int cfg = 0; cfg < NCFG; cfg++)
		if (cfgs[cfg].ngrants)
			policy_of(&pol[cfg], cfgs[cfg].grants, cfgs[cfg].ngrants);
	n = enforcer_open(1);
	run_dir(RUN_ID);
	for (int round = 0; round < ROUNDS; round++) {
		for (int cfg = 0; cfg < NCFG; cfg++) {
			const struct cfg *c = &cfgs[cfg];
			sb_net_run *h = NULL;
			const char *to = cfg == CFG_RELAY ? GATEWAY : SERVER;
			int named = cfg == CFG_NAMED || cfg == CFG_NAMED_TLS;
			if (!c->ngrants && table_there())
				die("the table inet sanbox is there for a path without "
				    "one",
				    0);
			if (c->ngrants)
				h = run_up(n, RUN_ID, &pol[cfg]);
			r = transfer(c->tls ? XFER_TLS_GET : XFER_GET, named, to,
				     c->tls		? TLS_DOWN
				     : cfg == CFG_RELAY ? RELAY_PORT
							: 80);
			down[cfg][round] = mbps(&r);
			if (cfg == CFG_NAMED)
				dns_ms[round] = r.dns_s * 1e3;
			r = transfer(c->tls ? XFER_TLS_POST : XFER_POST, named, to,
				     c->tls		? TLS_UP
				     : cfg == CFG_RELAY ? RELAY_PORT
							: 80);
			up[cfg][round] = mbps(&r);
			if (h)
				run_down(h, RUN_ID, 1);
		}
	}
	sb_net_close(n);
	for (int cfg = 0; cfg < NCFG; cfg++) {
		md[cfg] = bench_median(down[cfg], ROUNDS);
		mu[cfg] = bench_median(up[cfg], ROUNDS);
	}
	figures(CFG_DIRECT, CFG_DIRECT_TLS, md, mu);
	printf("bench net.stub_lookup_ms %.2f ms\n", bench_median(dns_ms, ROUNDS));
	figures(CFG_DIRECT_TLS, NCFG, md, mu);
	fflush(stdout);
}

/* The run id of set-up run i. */
static void setup_id(int i, char id[16])
{
	snprintf(id, 16, "5e7a%08x", (unsigned)i);
}

/* Brings the runs up to count (*up of them are up, handles h), then
 * opens and closes one more run MANY_REPEAT times: the medians of its
 * set-up and teardown in *set_ms and *down_ms. */
static void extra_times(sb_net *n, const struct sb_netpolicy *pol, sb_net_run **h,
			int *up, int count, double *set_ms, double *down_ms)
{
	double set[MANY_REPEAT], down[MANY_REPEAT], t0;
	sb_net_run *extra;
	char id[16];

	for (; *up < count; (*up)++) {
		setup_id(*up, id);
		run_dir(id);
		h[*up] = run_up(n, id, pol);
	}
	setup_id(MANY_RUNS, id);
	run_dir(id);
	for (int k = 0; k < MANY_REPEAT; k++) {
		t0 = bench_now();
		extra = run_up(n, id, pol);
		set[k] = (bench_now() - t0) * 1e3;
		t0 = bench_now();
		run_down(extra, id, *up == 0);
		down[k] = (bench_now() - t0) * 1e3;
	}
	*set_ms = bench_median(set, MANY_REPEAT);
	*down_ms = bench_median(down, MANY_REPEAT);
}

static void setup_times(void)
{
	static const char *const grants[] = {SERVER ":80", "a.test:443"};
	static const int levels[] = {0, 50, MANY_RUNS};
	double setup[SETUP_RUNS], teardown[SETUP_RUNS], up_ms[3], down_ms[3], t0;
	static sb_net_run *h[MANY_RUNS];
	struct sb_netpolicy pol;
	int up = 0;
	char id[16];
	sb_net *n;

	policy_of(&pol, grants, 2);
	n = enforcer_open(0);
	for (int i = 0; i < SETUP_RUNS; i++) {
		setup_id(i, id);
		run_dir(id);
		t0 = bench_now();
		h[i] = run_up(n, id, &pol);
		setup[i] = (bench_now() - t0) * 1e3;
	}
	for (int i = 0; i < SETUP_RUNS; i++) {
		setup_id(i, id);
		t0 = bench_now();
		run_down(h[i], id, i == SETUP_RUNS - 1);
		teardown[i] = (bench_now() - t0) * 1e3;
	}
	/* at 0 runs up, the extra run (id MANY_RUNS) makes the table and
	 * deletes it each time, as a host's first run does */
	for (int l = 0; l < 3; l++)
		extra_times(n, &pol, h, &up, levels[l], &up_ms[l], &down_ms[l]);
	for (int i = 0; i < up; i++) {
		setup_id(i, id);
		run_down(h[i], id, i == up - 1);
	}
	sb_net_close(n);
	printf("bench net.setup_ms %.2f ms\n", bench_median(setup, SETUP_RUNS));
	printf("bench net.teardown_ms %.2f ms\n", bench_median(teardown, SETUP_RUNS));
	for (int l = 0; l < 3; l++) {
		printf("bench net.setup_ms_at_%d_runs %.2f ms\n", levels[l], up_ms[l]);
		printf("bench net.teardown_ms_at_%d_runs %.2f ms\n", levels[l],
		       down_ms[l]);
	}
	printf("bench net.setup_ratio_%d_vs_0 %.2f ratio\n", MANY_RUNS,
	       up_ms[2] / up_ms[0]);
	fflush(stdout);
}

int main(void)
{
	struct sigaction sa = {.sa_handler = on_signal};
	uint8_t sni_ext[300];

	if (geteuid() != 0) {
		fprintf(stderr, "bench_net: needs root (network namespaces): skipped\n");
		return 0;
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN); /* as the daemon */
	memset(chunk, 'x', sizeof chunk);
	if (netlab_init(&lab, "sbbench", "/tmp/sb-bench-net-XXXXXX") ||
	    netlab_ns_setup(&lab) ||
	    /* this process lives in H from here on, and every thread it starts */
	    netlab_enter_h(&lab))
		die_lab();
	hello_len = hello(hello_rec, sni_ext, sni(sni_ext, "a.test"));
	kids[KID_HTTP] = server_start(NETLAB_S, SERVER, SOCK_STREAM, 80, http_main);
	kids[KID_TLS_DOWN] =
	    server_start(NETLAB_S, SERVER, SOCK_STREAM, TLS_DOWN, tls_main);
	kids[KID_TLS_UP] = server_start(NETLAB_S, SERVER, SOCK_STREAM, TLS_UP, tls_main);
	kids[KID_DNS] = server_start(NETLAB_S, SERVER, SOCK_DGRAM, 53, netlab_dns_main);
	kids[KID_RELAY] =
	    server_start(NETLAB_H, GATEWAY, SOCK_STREAM, RELAY_PORT, relay_main);
	netlab_unname(&lab); /* held by descriptor and process from now on */

	if (netlab_daemon_start(&lab))
		die_lab();

	throughput();
	/* the veth pair goes (its end in H is slot 0's address): the set-up
	 * runs get taps of their own */
	if (netlab_ip(&lab, "link", "del", TAP, NULL))
		die_lab();
	setup_times();

	netlab_daemon_stop(&lab);
	cleanup();
	return 0;
}
