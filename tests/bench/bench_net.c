/* bench_net.c - network mode acl's enforcer (netpolicy/net.h) against the
 * same path with no Sanbox rules, in network namespaces of its own.
 *
 * Three namespaces, made with ip(8) and named after this process: H, the
 * daemon's host, where this process and its threads live; G, the guest;
 * S, the server. A veth between G (eth0, 10.87.0.2/30, default route via
 * 10.87.0.1) and H (sb0000000000b1, named as run 0000000000b1's tap, with
 * 10.87.0.1/30: the address slot 0 of the default subnet gives it); a veth
 * between H (198.51.100.1/24) and S (198.51.100.10/24, and the server address
 * 203.0.113.10/32 routed through it, off-link as a real server is; default route via H);
 * forwarding on in H. Their names are gone once all is set up (the bench holds them by
 * file descriptor), so nothing of them outlives the bench's processes.
 *
 * In S, forked servers: HTTP on port 80 (a GET is answered with 256 MiB; a
 * POST's body is read to its Content-Length, then answered) and DNS on
 * port 53 (a.test A 203.0.113.10, dns.h). In G, a forked client per
 * transfer sends its request with Host a.test and reads to EOF; the time
 * counts from connect to EOF.
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
 *            then connects to 203.0.113.10:80, which nftables redirects to
 *            the run's proxy; the proxy checks the Host before it relays.
 * Each as a download and an upload (the upload's body is counted by the
 * proxy's HTTP parser). The run of a configuration is opened before its
 * transfers and closed after them (its teardown awaited, the table gone).
 *
 * Set-up: a second enforcer, making real taps (links_given 0), opens and
 * starts SETUP_RUNS runs one after another (sb_net_run_open +
 * sb_net_run_start), then closes them one after another, each close timed
 * until its worker has deleted its chains, tap and net.json (and, for the
 * last, the table). Then MANY_RUNS runs are opened and, while they exist,
 * one more is opened and closed, MANY_REPEAT times.
 *
 * Needs root; without it prints one line on stderr and no figure. Prints
 * only lines "bench NAME VALUE UNIT"; errors go to stderr with exit status
 * 1. The namespaces, the processes this bench started and its files are
 * removed on every exit, also on failure or SIGINT/SIGTERM.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/daemon/loop.h"
#include "engine/daemon/work.h"
#include "engine/error.h"
#include "netpolicy/dns.h"
#include "netpolicy/net.h"
#include "netpolicy/nft.h"
#include "tests/bench/benchutil.h"

#define RUN_ID	    "0000000000b1"
#define TAP	    "sb" RUN_ID
#define GUEST	    "10.87.0.2"
#define GATEWAY	    "10.87.0.1"
#define SERVER	    "203.0.113.10" /* off-link, as a real server is */
#define XFER_BYTES  (256ull << 20)
#define ROUNDS	    5
#define SETUP_RUNS  20
#define MANY_RUNS   50
#define MANY_REPEAT 5
#define CHUNK	    (1u << 20)
#define RELAY_PORT  9080
#define RELAY_BUF   (1 << 20)
#define WAIT_MS	    10000 /* a run's end takes at most this */

extern char **environ;

/* --- what to undo --- */

static char ns_name[3][32]; /* H, G, S */
static int ns_named[3];	    /* 1: its name is still in /run/netns */
static int ns_fd[3] = {-1, -1, -1};
static pid_t kids[4]; /* the HTTP and DNS servers, the relay, the client under way */
static char home[] = "/tmp/sb-bench-net-XXXXXX";
static int home_made;
static char lock_path[128]; /* the enforcer's lock of namespace H */

enum { NS_H, NS_G, NS_S };
enum { KID_HTTP, KID_DNS, KID_RELAY, KID_CLIENT, NKIDS };

/* Runs argv (found in PATH), waits for it; 0 when it exited with 0. */
static int run_argv(char *const argv[])
{
	pid_t pid;
	int st;

	if (posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ))
		return -1;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static void kid_stop(int i)
{
	if (kids[i] > 0) {
		kill(kids[i], SIGKILL);
		waitpid(kids[i], NULL, 0);
		kids[i] = 0;
	}
}

/* Deletes the names of the namespaces still named (each goes once no
 * process and no descriptor holds it). */
static void ns_unname(void)
{
	for (int i = 0; i < 3; i++)
		if (ns_named[i]) {
			char *argv[] = {"ip", "netns", "del", ns_name[i], NULL};
			run_argv(argv);
			ns_named[i] = 0;
		}
}

static void cleanup(void)
{
	for (int i = 0; i < NKIDS; i++)
		kid_stop(i);
	ns_unname();
	if (lock_path[0])
		unlink(lock_path);
	if (home_made)
		bench_rmrf(home);
	home_made = 0;
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

static void on_signal(int sig)
{
	cleanup();
	_exit(128 + sig);
}

/* Runs an ip(8) command given as its arguments after "ip". */
#define IP(...)                                                                          \
	do {                                                                             \
		char *argv_[] = {"ip", __VA_ARGS__, NULL};                               \
		if (run_argv(argv_))                                                     \
			die("ip " #__VA_ARGS__, 0);                                      \
	} while (0)

/* --- the namespaces --- */

static void ns_setup(void)
{
	char path[128];
	char *h, *g, *s;

	snprintf(ns_name[NS_H], sizeof ns_name[0], "sbbench-h-%d", (int)getpid());
	snprintf(ns_name[NS_G], sizeof ns_name[0], "sbbench-g-%d", (int)getpid());
	snprintf(ns_name[NS_S], sizeof ns_name[0], "sbbench-s-%d", (int)getpid());
	h = ns_name[NS_H], g = ns_name[NS_G], s = ns_name[NS_S];
	for (int i = 0; i < 3; i++) {
		IP("netns", "add", ns_name[i]);
		ns_named[i] = 1;
		snprintf(path, sizeof path, "/run/netns/%s", ns_name[i]);
		if ((ns_fd[i] = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			die(path, errno);
		IP("-n", ns_name[i], "link", "set", "lo", "up");
	}
	IP("link", "add", TAP, "netns", h, "type", "veth", "peer", "name", "eth0",
	   "netns", g);
	IP("link", "add", "eth1", "netns", h, "type", "veth", "peer", "name", "eth0",
	   "netns", s);
	IP("-n", h, "link", "set", TAP, "up");
	IP("-n", h, "link", "set", "eth1", "up");
	IP("-n", g, "link", "set", "eth0", "up");
	IP("-n", s, "link", "set", "eth0", "up");
	/* the address the enforcer gives slot 0's link, for the direct path */
	IP("-n", h, "addr", "add", GATEWAY "/30", "dev", TAP);
	IP("-n", h, "addr", "add", "198.51.100.1/24", "dev", "eth1");
	IP("-n", g, "addr", "add", GUEST "/30", "dev", "eth0");
	IP("-n", g, "route", "add", "default", "via", GATEWAY);
	IP("-n", s, "addr", "add", "198.51.100.10/24", "dev", "eth0");
	IP("-n", s, "addr", "add", SERVER "/32", "dev", "lo");
	IP("-n", s, "route", "add", "default", "via", "198.51.100.1");
	IP("-n", h, "route", "add", SERVER "/32", "via", "198.51.100.10");
	IP("netns", "exec", h, "sysctl", "-qw", "net.ipv4.ip_forward=1");
}

/* Moves the calling thread into namespace i. */
static void ns_enter(int i)
{
	if (setns(ns_fd[i], CLONE_NEWNET))
		die("setns", errno);
}

/* Names the enforcer's lock of namespace H, which the calling thread is
 * in (netpolicy/net.c: by the namespace's cookie). */
static void lock_path_of_h(void)
{
	uint64_t cookie = 0;
	socklen_t clen = sizeof cookie;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &clen))
		die("SO_NETNS_COOKIE", errno);
	close(fd);
	snprintf(lock_path, sizeof lock_path, "/run/sanbox/net-c%llu.lock",
		 (unsigned long long)cookie);
}

/* --- the servers, in S (forked before any thread starts) --- */

static uint8_t chunk[CHUNK];

static const char get_answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 268435456\r\n"
				 "Connection: close\r\n\r\n";
static const char post_answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"
				  "Connection: close\r\n\r\n";

static int send_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n) {
		ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		b += k;
		n -= (size_t)k;
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
		if (send_all(fd, get_answer, sizeof get_answer - 1))
			return;
		for (uint64_t left = XFER_BYTES; left;) {
			size_t k = left < CHUNK ? (size_t)left : CHUNK;
			if (send_all(fd, chunk, k))
				return;
			left -= k;
		}
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
	send_all(fd, post_answer, sizeof post_answer - 1);
}

static int listen_on(const char *addr, int type, uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0), one = 1;

	inet_pton(AF_INET, addr, &sa.sin_addr);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) ||
	    (type == SOCK_STREAM && listen(fd, 16)))
		return -1;
	return fd;
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

/* a.test A 203.0.113.10; every other name NXDOMAIN. */
static void dns_main(int fd)
{
	struct sb_dns_rr rr = {.type = SB_DNS_A, .ttl = 300, .addr = {203, 0, 113, 10}};
	static struct sb_dns_query q;
	uint8_t in[1500], out[1500];

	for (;;) {
		struct sockaddr_storage from;
		socklen_t flen = sizeof from;
		ssize_t k =
		    recvfrom(fd, in, sizeof in, 0, (struct sockaddr *)&from, &flen);
		size_t n = 0;
		uint16_t id;

		if (k <= 0)
			continue;
		if (sb_dns_parse_query(in, (size_t)k, &q) == SB_OK) {
			int ours = !strcmp(q.name, "a.test");
			n = sb_dns_answer(&q, in, ours ? SB_DNS_NOERROR : SB_DNS_NXDOMAIN,
					  &rr, ours && q.qtype == SB_DNS_A, 512, out,
					  sizeof out);
		} else if (sb_dns_header_id(in, (size_t)k, &id) == SB_OK) {
			n = sb_dns_formerr(id, out, sizeof out);
		}
		if (n)
			sendto(fd, out, n, 0, (struct sockaddr *)&from, flen);
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
		if (k <= 0 || send_all(to, buf, (size_t)k))
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

/* Forks a server in namespace ns listening on addr:port (type); main_fn
 * never returns. */
static pid_t server_start(int ns, const char *addr, int type, uint16_t port,
			  void (*main_fn)(int fd))
{
	pid_t pid = fork();
	int fd;

	if (pid < 0)
		die("fork", errno);
	if (pid)
		return pid;
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	if (setns(ns_fd[ns], CLONE_NEWNET) || (fd = listen_on(addr, type, port)) < 0)
		_exit(1);
	main_fn(fd);
	_exit(0);
}

/* --- the client, in G (forked while threads run: system calls only) --- */

enum xfer_kind { XFER_GET, XFER_POST };

struct xfer_result {
	int step; /* 0: done; else where it failed (enum below) */
	int err;  /* errno there */
	double dns_s, xfer_s;
	uint64_t bytes; /* bytes received (a GET) or sent (a POST) */
};

enum { STEP_OK, STEP_DNS, STEP_CONNECT, STEP_SEND, STEP_RECV, STEP_SHORT };

static const char *step_name[] = {"",	  "DNS lookup", "connect",
				  "send", "receive",	"short transfer"};

/* A plain A query of a.test, id 0x5342, RD set. */
static const uint8_t a_query[] = {0x53, 0x42, 0x01, 0x00, 0,   1,   0,	 0, 0, 0, 0, 0,
				  1,	'a',  4,    't',  'e', 's', 't', 0, 0, 1, 0, 1};

/* Resolves a.test at the gateway's stub; 0 when it answered 203.0.113.10. */
static int client_resolve(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(53)};
	struct pollfd p;
	uint8_t ans[512];
	ssize_t k;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	inet_pton(AF_INET, GATEWAY, &sa.sin_addr);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) ||
	    send(fd, a_query, sizeof a_query, 0) != (ssize_t)sizeof a_query)
		return -1;
	p.fd = fd;
	p.events = POLLIN;
	if (poll(&p, 1, 5000) != 1 || (k = recv(fd, ans, sizeof ans, 0)) < 16)
		return -1;
	close(fd);
	/* our id, a response, NOERROR, one answer at least; the A record's
	 * data is the message's last 4 bytes (no OPT was asked for) */
	if (ans[0] != 0x53 || ans[1] != 0x42 || !(ans[2] & 0x80) || (ans[3] & 0x0f) ||
	    (ans[6] << 8 | ans[7]) < 1)
		return -1;
	return memcmp(ans + k - 4, (uint8_t[]){203, 0, 113, 10}, 4) ? -1 : 0;
}

static void client_main(enum xfer_kind kind, int resolve, const char *addr, uint16_t port,
			struct xfer_result *res)
{
	static const char get[] = "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n";
	static const char post[] = "POST / HTTP/1.1\r\nHost: a.test\r\n"
				   "Content-Length: 268435456\r\n\r\n";
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	uint64_t want = kind == XFER_GET ? sizeof get_answer - 1 + XFER_BYTES
					 : sizeof post_answer - 1;
	uint64_t got = 0;
	double t0;
	int fd;

	if (setns(ns_fd[NS_G], CLONE_NEWNET)) {
		res->step = STEP_CONNECT;
		res->err = errno;
		return;
	}
	t0 = bench_now();
	if (resolve && client_resolve()) {
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
	if (kind == XFER_GET ? send_all(fd, get, sizeof get - 1)
			     : send_all(fd, post, sizeof post - 1)) {
		res->step = STEP_SEND;
		res->err = errno;
		return;
	}
	for (uint64_t left = kind == XFER_POST ? XFER_BYTES : 0; left;) {
		size_t k = left < CHUNK ? (size_t)left : CHUNK;
		if (send_all(fd, chunk, k)) {
			res->step = STEP_SEND;
			res->err = errno;
			return;
		}
		left -= k;
	}
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
		die(kind == XFER_GET ? "download" : "upload", 0);
	}
	return res;
}

/* --- the enforcer --- */

static sb_loop *dloop;	      /* the "daemon's" loop: reports and callbacks */
static sb_watch *dloop_alive; /* a watcher: a loop with none returns at once */
static pthread_t dloop_thread;
static sb_work *work;
static sb_nft *probe; /* to see whether H has the table */
static void *dloop_main(void *arg)
{
	sb_loop_run(dloop);
	return NULL;
}

/* A denial means the bench is wrong: it is said on stderr. */
static void on_report(void *ctx, const struct sb_net_report *r)
{
	if (r->kind == SB_NET_DENIED)
		fprintf(stderr, "bench_net: denied: %s:%u %s %s: %s (%llu)\n", r->dst,
			r->port, r->proto, r->name, r->reason,
			(unsigned long long)r->count);
}

static void dloop_idle(void *ctx)
{
}

static void dloop_stop(void *ctx)
{
	sb_watch_stop(dloop_alive);
	sb_loop_break(dloop);
}

static void policy_of(struct sb_netpolicy *p, const char *const *grants, size_t n)
{
	int rc;

	memset(p, 0, sizeof *p);
	p->mode = SB_NET_ACL;
	for (size_t i = 0; i < n; i++)
		if ((rc = sb_net_grant_parse(grants[i], strlen(grants[i]),
					     &p->grants[p->ngrants++])))
			die("grant", rc);
}

static sb_net *enforcer_open(int links_given)
{
	struct sb_net_config c = {0};
	sb_net *n;
	int rc;

	c.home = home;
	c.loop = dloop;
	c.work = work;
	snprintf(c.resolver, sizeof c.resolver, "%s", SERVER);
	snprintf(c.subnet4, sizeof c.subnet4, "10.87.0.0/16");
	snprintf(c.subnet6, sizeof c.subnet6, "fd53:616e:626f::/48");
	c.ttl_min_s = 5;
	c.ttl_max_s = 3600;
	c.report_s = 1; /* the daemon's default */
	c.links_given = links_given;
	if ((rc = sb_net_open(&c, &n)))
		die("sb_net_open", rc);
	return n;
}

/* Opens and starts run id's network with grants p; returns its handle. */
static sb_net_run *run_up(sb_net *n, const char *id, const struct sb_netpolicy *p)
{
	sb_net_run *h;
	int rc;

	if ((rc = sb_net_run_open(n, id, p, &h)))
		die("sb_net_run_open", rc);
	if ((rc = sb_net_run_start(h, on_report, NULL)))
		die("sb_net_run_start", rc);
	return h;
}

/* Makes home/runs/ID, where a run's net.json goes. */
static void run_dir(const char *id)
{
	char path[4096];

	snprintf(path, sizeof path, "%s/runs", home);
	mkdir(path, 0700);
	snprintf(path, sizeof path, "%s/runs/%s", home, id);
	if (mkdir(path, 0700) && errno != EEXIST)
		die(path, errno);
}

/* 1 when H has the table inet sanbox. */
static int table_there(void)
{
	return sb_nft_run(probe, "list table inet sanbox", NULL) == SB_OK;
}

/* Closes run id (handle h) and waits until its end is done: its net.json
 * deleted (the last step after its chains and link) and, when it was the
 * enforcer's last run, the table gone too. */
static void run_down(sb_net_run *h, const char *id, int last)
{
	char dir[4096], ev[4096];
	int fd = inotify_init1(IN_CLOEXEC), done = 0;

	snprintf(dir, sizeof dir, "%s/runs/%s", home, id);
	if (fd < 0 || inotify_add_watch(fd, dir, IN_DELETE) < 0)
		die("inotify", errno);
	sb_net_run_close(h);
	while (!done) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		ssize_t k;
		if (poll(&pf, 1, WAIT_MS) != 1)
			die("a run's end: net.json still there after 10 s", 0);
		if ((k = read(fd, ev, sizeof ev)) <= 0)
			die("inotify read", errno);
		for (char *p = ev; p < ev + k;) {
			struct inotify_event *e = (struct inotify_event *)p;
			if (e->len && !strcmp(e->name, "net.json"))
				done = 1;
			p += sizeof *e + e->len;
		}
	}
	close(fd);
	for (double t0 = bench_now(); last && table_there();) {
		struct timespec ts = {0, 50000};
		if (bench_now() - t0 > WAIT_MS / 1e3)
			die("the last run's end: the table still there after 10 s", 0);
		nanosleep(&ts, NULL);
	}
}

static double mbps(const struct xfer_result *r)
{
	return (double)r->bytes / r->xfer_s / 1e6;
}

enum { CFG_DIRECT, CFG_RELAY, CFG_GRANTED, CFG_NAMED, NCFG };

static void throughput(void)
{
	static const char *const addr_grant[] = {SERVER ":80"}, *const name_grant[] = {
								    "a.test:80"};
	static const char *const name[NCFG] = {"direct", "plain_relay", "granted",
					       "named"};
	double down[NCFG][ROUNDS], up[NCFG][ROUNDS], dns_ms[ROUNDS], md[NCFG], mu[NCFG];
	struct sb_netpolicy pol[NCFG];
	struct xfer_result r;
	sb_net *n;

	policy_of(&pol[CFG_GRANTED], addr_grant, 1);
	policy_of(&pol[CFG_NAMED], name_grant, 1);
	n = enforcer_open(1);
	run_dir(RUN_ID);
	for (int round = 0; round < ROUNDS; round++) {
		for (int cfg = 0; cfg < NCFG; cfg++) {
			sb_net_run *h = NULL;
			const char *to = cfg == CFG_RELAY ? GATEWAY : SERVER;
			uint16_t port = cfg == CFG_RELAY ? RELAY_PORT : 80;
			if (cfg <= CFG_RELAY && table_there())
				die("the table inet sanbox is there for the direct path",
				    0);
			if (cfg > CFG_RELAY)
				h = run_up(n, RUN_ID, &pol[cfg]);
			r = transfer(XFER_GET, cfg == CFG_NAMED, to, port);
			down[cfg][round] = mbps(&r);
			if (cfg == CFG_NAMED)
				dns_ms[round] = r.dns_s * 1e3;
			r = transfer(XFER_POST, cfg == CFG_NAMED, to, port);
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
	for (int cfg = 0; cfg < NCFG; cfg++) {
		printf("bench net.%s_mbps %.0f MB/s\n", name[cfg], md[cfg]);
		if (cfg)
			printf("bench net.%s_vs_direct %.2f ratio\n", name[cfg],
			       md[cfg] / md[0]);
	}
	for (int cfg = 0; cfg < NCFG; cfg++) {
		printf("bench net.%s_upload_mbps %.0f MB/s\n", name[cfg], mu[cfg]);
		if (cfg)
			printf("bench net.%s_upload_vs_direct %.2f ratio\n", name[cfg],
			       mu[cfg] / mu[0]);
	}
	printf("bench net.stub_lookup_ms %.2f ms\n", bench_median(dns_ms, ROUNDS));
	fflush(stdout);
}

/* The run id of set-up run i. */
static void setup_id(int i, char id[16])
{
	snprintf(id, 16, "5e7a%08x", (unsigned)i);
}

static void setup_times(void)
{
	static const char *const grants[] = {SERVER ":80", "a.test:443"};
	double setup[SETUP_RUNS], teardown[SETUP_RUNS], many_up[MANY_REPEAT],
	    many_down[MANY_REPEAT], t0;
	sb_net_run *h[MANY_RUNS + 1];
	struct sb_netpolicy pol;
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
	for (int i = 0; i < MANY_RUNS; i++) {
		setup_id(i, id);
		run_dir(id);
		h[i] = run_up(n, id, &pol);
	}
	setup_id(MANY_RUNS, id);
	run_dir(id);
	for (int k = 0; k < MANY_REPEAT; k++) {
		t0 = bench_now();
		h[MANY_RUNS] = run_up(n, id, &pol);
		many_up[k] = (bench_now() - t0) * 1e3;
		t0 = bench_now();
		run_down(h[MANY_RUNS], id, 0);
		many_down[k] = (bench_now() - t0) * 1e3;
	}
	for (int i = 0; i < MANY_RUNS; i++) {
		setup_id(i, id);
		run_down(h[i], id, i == MANY_RUNS - 1);
	}
	sb_net_close(n);
	printf("bench net.setup_ms %.2f ms\n", bench_median(setup, SETUP_RUNS));
	printf("bench net.teardown_ms %.2f ms\n", bench_median(teardown, SETUP_RUNS));
	printf("bench net.setup_ms_at_%d_runs %.2f ms\n", MANY_RUNS,
	       bench_median(many_up, MANY_REPEAT));
	printf("bench net.teardown_ms_at_%d_runs %.2f ms\n", MANY_RUNS,
	       bench_median(many_down, MANY_REPEAT));
	fflush(stdout);
}

int main(void)
{
	struct sigaction sa = {.sa_handler = on_signal};
	int rc;

	if (geteuid() != 0) {
		fprintf(stderr, "bench_net: needs root (network namespaces): skipped\n");
		return 0;
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN); /* as the daemon: the proxy splices to sockets */
	memset(chunk, 'x', sizeof chunk);
	if (!mkdtemp(home))
		die("mkdtemp", errno);
	home_made = 1;
	ns_setup();
	/* this process lives in H from here on, and every thread it starts */
	ns_enter(NS_H);
	lock_path_of_h();
	kids[KID_HTTP] = server_start(NS_S, SERVER, SOCK_STREAM, 80, http_main);
	kids[KID_DNS] = server_start(NS_S, SERVER, SOCK_DGRAM, 53, dns_main);
	kids[KID_RELAY] =
	    server_start(NS_H, GATEWAY, SOCK_STREAM, RELAY_PORT, relay_main);
	ns_unname(); /* held by descriptor and process from now on */

	if ((rc = sb_loop_open(&dloop)))
		die("sb_loop_open", rc);
	if (!(dloop_alive = sb_loop_timer(dloop, 3600, 3600, dloop_idle, NULL)))
		die("sb_loop_timer", SB_ERR_NOMEM);
	if (pthread_create(&dloop_thread, NULL, dloop_main, NULL))
		die("pthread_create", errno);
	if ((rc = sb_work_open("net", 2, &work)))
		die("sb_work_open", rc);
	if ((rc = sb_nft_open(&probe)))
		die("sb_nft_open", rc);

	throughput();
	/* the veth pair goes (its end in H is slot 0's address): the set-up
	 * runs get taps of their own */
	IP("link", "del", TAP);
	setup_times();

	sb_nft_close(probe);
	sb_work_close(work);
	sb_loop_post(dloop, dloop_stop, NULL);
	pthread_join(dloop_thread, NULL);
	sb_loop_close(dloop);
	cleanup();
	return 0;
}
