/* netlab.h - network namespaces of a program's own to run network mode
 * acl's enforcer (netpolicy/net.h) in, as the daemon runs it, with a guest
 * and a server: shared by tests/bench/bench_net.c and
 * tests/unit/test_judged_http.c. Header-only; needs root.
 *
 * Three namespaces, made with ip(8) and named PREFIX-h-PID, PREFIX-g-PID,
 * PREFIX-s-PID: H, the daemon's host, where the caller and its threads
 * live; G, the guest; S, the server. A veth between G (eth0, 10.87.0.2/30,
 * default route via 10.87.0.1) and H (sb0000000000b1, named as run
 * 0000000000b1's tap, with 10.87.0.1/30: the address slot 0 of the default
 * subnet gives it); a veth between H (198.51.100.1/24) and S
 * (198.51.100.10/24, and the server address 203.0.113.10/32 routed through
 * it, off-link as a real server is, else the run's stub refuses the
 * answer; default route via H); forwarding on in H. Once the caller has
 * started what runs in them, netlab_unname drops their names (descriptors
 * and processes hold them), so nothing of them outlives its processes.
 *
 * Also: a DNS server for S (a.test A 203.0.113.10, every other name
 * NXDOMAIN), a lookup of a.test through the run's stub for G, a run's
 * reports gathered for the tests to look for denials in, and the
 * daemon's part: its loop on a thread of its own, a worker pool, the
 * enforcer's configuration, a run's start and awaited end.
 *
 * Functions returning int give SB_OK or an error of engine/error.h (the
 * enforcer's, or SB_ERR_IO for a system call or command, errno kept), and
 * then lab->err says what failed in one line.
 */
#ifndef SB_NETLAB_H
#define SB_NETLAB_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/loop.h"
#include "engine/work.h"
#include "engine/error.h"
#include "netpolicy/dns.h"
#include "netpolicy/net.h"
#include "netpolicy/nft.h"
#include "tests/bench/benchutil.h"

#define NETLAB_RUN_ID  "0000000000b1"
#define NETLAB_TAP     "sb" NETLAB_RUN_ID
#define NETLAB_GUEST   "10.87.0.2"
#define NETLAB_GATEWAY "10.87.0.1"
#define NETLAB_SERVER  "203.0.113.10" /* off-link, as a real server is */
#define NETLAB_WAIT_MS 10000	      /* a run's end takes at most this */

enum { NETLAB_H, NETLAB_G, NETLAB_S };

struct netlab {
	struct sb_post stop_post; /* netlab_daemon_stop's to the loop */
	char prefix[16];
	char ns_name[3][40]; /* H, G, S */
	int ns_named[3];     /* 1: its name is still in /run/netns */
	int ns_fd[3];
	char home[64];	     /* the enforcer's state directory */
	int home_made;	     /* 1: home is to be removed */
	char lock_path[128]; /* the enforcer's lock of H ("" until known) */
	sb_loop *loop;	     /* the "daemon's" loop: reports and callbacks */
	sb_watch *alive;     /* a watcher: a loop with none returns at once */
	pthread_t loop_thread;
	int loop_running;
	sb_work *work; /* the daemon's worker pool, "net" */
	sb_nft *probe; /* to see whether H has the table */
	char err[512]; /* what failed last */
};

/* Says in lab->err what failed; returns rc. */
__attribute__((format(printf, 3, 4))) static inline int
netlab_fail(struct netlab *lab, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(lab->err, sizeof lab->err, fmt, ap);
	va_end(ap);
	return rc;
}

/* Runs argv (found in PATH), waits for it; 0 when it exited with 0. */
static inline int netlab_run_argv(char *const argv[])
{
	extern char **environ;
	pid_t pid;
	int st;

	if (posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ))
		return -1;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* Runs ip(8) with the arguments given after lab, up to a NULL. */
static inline int netlab_ip(struct netlab *lab, ...)
{
	char *argv[24] = {"ip"}, text[256] = "ip";
	size_t n = 1, len = 2;
	va_list ap;

	va_start(ap, lab);
	while (n < sizeof argv / sizeof argv[0] - 1 && (argv[n] = va_arg(ap, char *))) {
		len += (size_t)snprintf(text + len,
					len < sizeof text ? sizeof text - len : 0, " %s",
					argv[n]);
		n++;
	}
	va_end(ap);
	argv[n] = NULL;
	return netlab_run_argv(argv) ? netlab_fail(lab, SB_ERR_IO, "%s: failed", text)
				     : SB_OK;
}

/* Readies lab: nothing made yet but home, a fresh directory made from
 * home_template ("/tmp/NAME-XXXXXX"); namespaces will be named after
 * prefix (at most 15 bytes). */
static inline int netlab_init(struct netlab *lab, const char *prefix,
			      const char *home_template)
{
	memset(lab, 0, sizeof *lab);
	lab->ns_fd[0] = lab->ns_fd[1] = lab->ns_fd[2] = -1;
	snprintf(lab->prefix, sizeof lab->prefix, "%s", prefix);
	snprintf(lab->home, sizeof lab->home, "%s", home_template);
	if (!mkdtemp(lab->home))
		return netlab_fail(lab, SB_ERR_IO, "mkdtemp: %s", strerror(errno));
	lab->home_made = 1;
	return SB_OK;
}

/* Makes the namespaces and their links (the header's comment). */
static inline int netlab_ns_setup(struct netlab *lab)
{
	static const char tag[3] = {'h', 'g', 's'};
	char path[128], prefix[sizeof lab->prefix], *h, *g, *s;
	int rc;

	memcpy(prefix, lab->prefix, sizeof prefix); /* not a source inside lab */
	for (int i = 0; i < 3; i++)
		snprintf(lab->ns_name[i], sizeof lab->ns_name[i], "%s-%c-%d", prefix,
			 tag[i], (int)getpid());
	h = lab->ns_name[NETLAB_H], g = lab->ns_name[NETLAB_G],
	s = lab->ns_name[NETLAB_S];
	for (int i = 0; i < 3; i++) {
		if ((rc = netlab_ip(lab, "netns", "add", lab->ns_name[i], NULL)))
			return rc;
		lab->ns_named[i] = 1;
		snprintf(path, sizeof path, "/run/netns/%s", lab->ns_name[i]);
		if ((lab->ns_fd[i] = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			return netlab_fail(lab, SB_ERR_IO, "%s: %s", path,
					   strerror(errno));
		if ((rc = netlab_ip(lab, "-n", lab->ns_name[i], "link", "set", "lo", "up",
				    NULL)))
			return rc;
	}
	if ((rc = netlab_ip(lab, "link", "add", NETLAB_TAP, "netns", h, "type", "veth",
			    "peer", "name", "eth0", "netns", g, NULL)) ||
	    (rc = netlab_ip(lab, "link", "add", "eth1", "netns", h, "type", "veth",
			    "peer", "name", "eth0", "netns", s, NULL)) ||
	    (rc = netlab_ip(lab, "-n", h, "link", "set", NETLAB_TAP, "up", NULL)) ||
	    (rc = netlab_ip(lab, "-n", h, "link", "set", "eth1", "up", NULL)) ||
	    (rc = netlab_ip(lab, "-n", g, "link", "set", "eth0", "up", NULL)) ||
	    (rc = netlab_ip(lab, "-n", s, "link", "set", "eth0", "up", NULL)) ||
	    /* the address the enforcer gives slot 0's link, for the direct path */
	    (rc = netlab_ip(lab, "-n", h, "addr", "add", NETLAB_GATEWAY "/30", "dev",
			    NETLAB_TAP, NULL)) ||
	    (rc = netlab_ip(lab, "-n", h, "addr", "add", "198.51.100.1/24", "dev", "eth1",
			    NULL)) ||
	    (rc = netlab_ip(lab, "-n", g, "addr", "add", NETLAB_GUEST "/30", "dev",
			    "eth0", NULL)) ||
	    (rc = netlab_ip(lab, "-n", g, "route", "add", "default", "via",
			    NETLAB_GATEWAY, NULL)) ||
	    (rc = netlab_ip(lab, "-n", s, "addr", "add", "198.51.100.10/24", "dev",
			    "eth0", NULL)) ||
	    (rc = netlab_ip(lab, "-n", s, "addr", "add", NETLAB_SERVER "/32", "dev", "lo",
			    NULL)) ||
	    (rc = netlab_ip(lab, "-n", s, "route", "add", "default", "via",
			    "198.51.100.1", NULL)) ||
	    (rc = netlab_ip(lab, "-n", h, "route", "add", NETLAB_SERVER "/32", "via",
			    "198.51.100.10", NULL)) ||
	    (rc = netlab_ip(lab, "netns", "exec", h, "sysctl", "-qw",
			    "net.ipv4.ip_forward=1", NULL)))
		return rc;
	return SB_OK;
}

/* Moves the calling thread into namespace i. */
static inline int netlab_enter(struct netlab *lab, int i)
{
	if (setns(lab->ns_fd[i], CLONE_NEWNET))
		return netlab_fail(lab, SB_ERR_IO, "setns: %s", strerror(errno));
	return SB_OK;
}

/* Moves the calling thread into H, and names the enforcer's lock there
 * (netpolicy/net.c: by the namespace's cookie) for netlab_cleanup. */
static inline int netlab_enter_h(struct netlab *lab)
{
	uint64_t cookie = 0;
	socklen_t clen = sizeof cookie;
	int fd, rc;

	if ((rc = netlab_enter(lab, NETLAB_H)))
		return rc;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &clen)) {
		rc = netlab_fail(lab, SB_ERR_IO, "SO_NETNS_COOKIE: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return rc;
	}
	close(fd);
	snprintf(lab->lock_path, sizeof lab->lock_path, "/run/sanbox/net-c%llu.lock",
		 (unsigned long long)cookie);
	return SB_OK;
}

/* Deletes the names of the namespaces still named (each goes once no
 * process and no descriptor holds it). */
static inline void netlab_unname(struct netlab *lab)
{
	for (int i = 0; i < 3; i++)
		if (lab->ns_named[i]) {
			char *argv[] = {"ip", "netns", "del", lab->ns_name[i], NULL};
			netlab_run_argv(argv);
			lab->ns_named[i] = 0;
		}
}

/* Undoes what lab made on disk and in /run/netns: the namespaces' names,
 * the enforcer's lock, home. The caller first ends the processes it
 * started in them. Safe to call again. */
static inline void netlab_cleanup(struct netlab *lab)
{
	netlab_unname(lab);
	if (lab->lock_path[0])
		unlink(lab->lock_path);
	lab->lock_path[0] = 0;
	if (lab->home_made)
		bench_rmrf(lab->home);
	lab->home_made = 0;
}

/* --- in the namespaces --- */

/* Sends all n bytes of p; 0, or -1 with errno. */
static inline int netlab_send_all(int fd, const void *p, size_t n)
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

/* A socket of type bound to addr:port (IPv4), listening when a stream;
 * -1 on failure. */
static inline int netlab_listen(const char *addr, int type, uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0), one = 1;

	inet_pton(AF_INET, addr, &sa.sin_addr);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) ||
	    (type == SOCK_STREAM && listen(fd, 16))) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Forks a process in namespace ns: 0 in it (SIGINT, SIGTERM and SIGHUP
 * back to their defaults, killed when the calling thread ends), its pid
 * in the caller, -1 when fork failed. A child that cannot enter ns exits
 * with 1. After threads started, the child makes system calls only. */
static inline pid_t netlab_fork_in(struct netlab *lab, int ns)
{
	pid_t pid = fork();

	if (pid < 0) {
		netlab_fail(lab, SB_ERR_IO, "fork: %s", strerror(errno));
		return -1;
	}
	if (pid)
		return pid;
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (setns(lab->ns_fd[ns], CLONE_NEWNET))
		_exit(1);
	return 0;
}

/* Forks a server in namespace ns listening on addr:port (type), and
 * returns its pid once it listens (-1: it could not); main_fn(fd) serves
 * and never returns. */
static inline pid_t netlab_serve(struct netlab *lab, int ns, const char *addr, int type,
				 uint16_t port, void (*main_fn)(int fd))
{
	int p[2], fd;
	char c;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC)) {
		netlab_fail(lab, SB_ERR_IO, "pipe: %s", strerror(errno));
		return -1;
	}
	if ((pid = netlab_fork_in(lab, ns)) == 0) {
		close(p[0]);
		if ((fd = netlab_listen(addr, type, port)) < 0)
			_exit(1);
		if (write(p[1], "", 1) != 1)
			_exit(1);
		close(p[1]);
		main_fn(fd);
		_exit(0);
	}
	close(p[1]);
	if (pid > 0 && read(p[0], &c, 1) != 1) {
		waitpid(pid, NULL, 0);
		netlab_fail(lab, SB_ERR_IO, "a server on %s:%u could not start", addr,
			    (unsigned)port);
		pid = -1;
	}
	close(p[0]);
	return pid;
}

/* Serves DNS on fd: a.test A 203.0.113.10; every other name NXDOMAIN. */
static inline void netlab_dns_main(int fd)
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

/* From G: resolves a.test at the gateway's stub (10.87.0.1:53), which puts
 * its address in the run's sets; 0 when it answered 203.0.113.10, else -1
 * (errno set when a call failed). System calls only. */
static inline int netlab_resolve(void)
{
	/* a plain A query of a.test, id 0x5342, RD set */
	static const uint8_t query[] = {0x53, 0x42, 0x01, 0x00, 0, 1,	0, 0,
					0,    0,    0,	  0,	1, 'a', 4, 't',
					'e',  's',  't',  0,	0, 1,	0, 1};
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(53)};
	struct pollfd p;
	uint8_t ans[512];
	ssize_t k;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	inet_pton(AF_INET, NETLAB_GATEWAY, &sa.sin_addr);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) ||
	    send(fd, query, sizeof query, 0) != (ssize_t)sizeof query)
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

/* --- the enforcer's reports, gathered on the daemon's loop --- */

#define NETLAB_REPORTS_MAX 32

static pthread_mutex_t netlab_reports_mu __attribute__((unused)) =
    PTHREAD_MUTEX_INITIALIZER;
static struct sb_net_report netlab_reports[NETLAB_REPORTS_MAX] __attribute__((unused));
static size_t netlab_nreports __attribute__((unused));

/* A run's report callback (sb_net_run_start): keeps the first
 * NETLAB_REPORTS_MAX reports. */
static inline void netlab_report(void *ctx, const struct sb_net_report *r)
{
	(void)ctx;
	pthread_mutex_lock(&netlab_reports_mu);
	if (netlab_nreports < NETLAB_REPORTS_MAX)
		netlab_reports[netlab_nreports++] = *r;
	pthread_mutex_unlock(&netlab_reports_mu);
}

static inline void netlab_reports_clear(void)
{
	pthread_mutex_lock(&netlab_reports_mu);
	netlab_nreports = 0;
	pthread_mutex_unlock(&netlab_reports_mu);
}

/* Waits up to 3 s (reports come every second) for a denial of name for
 * reason on port (-1: any); 1 when it came. */
static inline int netlab_denial_seen(const char *name, const char *reason, int port)
{
	for (int i = 0; i < 60; i++) {
		int seen = 0;
		pthread_mutex_lock(&netlab_reports_mu);
		for (size_t k = 0; k < netlab_nreports; k++) {
			const struct sb_net_report *r = &netlab_reports[k];
			seen |= r->kind == SB_NET_DENIED && !strcmp(r->name, name) &&
				!strcmp(r->reason, reason) &&
				(port < 0 || r->port == port);
		}
		pthread_mutex_unlock(&netlab_reports_mu);
		if (seen)
			return 1;
		usleep(50000);
	}
	return 0;
}

/* --- the daemon's part, in H --- */

static inline void *netlab_loop_main(void *arg)
{
	sb_loop_run(arg);
	return NULL;
}

static inline void netlab_idle(void *ctx)
{
	(void)ctx;
}

static inline void netlab_loop_stop(void *ctx)
{
	struct netlab *lab = ctx;

	sb_watch_stop(lab->alive);
	sb_loop_break(lab->loop);
}

/* Starts the daemon's stand-in: its loop on a thread of its own (kept
 * running by a watcher), a worker pool "net" of 2 threads and an nftables
 * handle for netlab_table_there. */
static inline int netlab_daemon_start(struct netlab *lab)
{
	int rc;

	if ((rc = sb_loop_open(&lab->loop)))
		return netlab_fail(lab, rc, "sb_loop_open: %s", sb_errmsg(rc));
	if (!(lab->alive = sb_loop_timer(lab->loop, 3600, 3600, netlab_idle, NULL)))
		return netlab_fail(lab, SB_ERR_NOMEM, "sb_loop_timer: %s",
				   sb_strerror(SB_ERR_NOMEM));
	if ((rc = pthread_create(&lab->loop_thread, NULL, netlab_loop_main, lab->loop)))
		return netlab_fail(lab, SB_ERR_IO, "pthread_create: %s", strerror(rc));
	lab->loop_running = 1;
	if ((rc = sb_work_open("net", 2, &lab->work)))
		return netlab_fail(lab, rc, "sb_work_open: %s", sb_errmsg(rc));
	if ((rc = sb_nft_open(&lab->probe)))
		return netlab_fail(lab, rc, "sb_nft_open: %s", sb_errmsg(rc));
	return SB_OK;
}

/* Ends what netlab_daemon_start started (as far as it got); the enforcers
 * opened on it are closed first. */
static inline void netlab_daemon_stop(struct netlab *lab)
{
	sb_nft_close(lab->probe);
	lab->probe = NULL;
	sb_work_close(lab->work);
	lab->work = NULL;
	if (lab->loop_running) {
		sb_loop_post(lab->loop, &lab->stop_post, netlab_loop_stop, lab);
		pthread_join(lab->loop_thread, NULL);
		lab->loop_running = 0;
	} else if (lab->alive) {
		sb_watch_stop(lab->alive);
	}
	lab->alive = NULL;
	if (lab->loop)
		sb_loop_close(lab->loop);
	lab->loop = NULL;
}

/* Fills p with mode acl and the n grants given as text. */
static inline int netlab_policy(struct netlab *lab, struct sb_netpolicy *p,
				const char *const *grants, size_t n)
{
	int rc;

	memset(p, 0, sizeof *p);
	p->mode = SB_NET_ACL;
	for (size_t i = 0; i < n; i++)
		if ((rc = sb_net_grant_parse(grants[i], strlen(grants[i]),
					     &p->grants[p->ngrants++])))
			return netlab_fail(lab, rc, "grant %s: %s", grants[i],
					   sb_errmsg(rc));
	return SB_OK;
}

/* Opens an enforcer on the daemon's loop and pool, resolving granted
 * names at the server's DNS (links_given: net.h). */
static inline int netlab_enforcer_open(struct netlab *lab, int links_given, sb_net **out)
{
	struct sb_net_config c = {0};
	int rc;

	c.home = lab->home;
	c.loop = lab->loop;
	c.work = lab->work;
	snprintf(c.resolver, sizeof c.resolver, "%s", NETLAB_SERVER);
	snprintf(c.subnet4, sizeof c.subnet4, "10.87.0.0/16");
	snprintf(c.subnet6, sizeof c.subnet6, "fd53:616e:626f::/48");
	c.ttl_min_s = 5;
	c.ttl_max_s = 3600;
	c.report_s = 1; /* the daemon's default */
	c.links_given = links_given;
	if ((rc = sb_net_open(&c, out)))
		return netlab_fail(lab, rc, "sb_net_open: %s", sb_errmsg(rc));
	return SB_OK;
}

/* Makes home/runs/ID, where a run's net.json goes. */
static inline int netlab_run_dir(struct netlab *lab, const char *id)
{
	char path[4096];

	snprintf(path, sizeof path, "%s/runs", lab->home);
	mkdir(path, 0700);
	snprintf(path, sizeof path, "%s/runs/%s", lab->home, id);
	if (mkdir(path, 0700) && errno != EEXIST)
		return netlab_fail(lab, SB_ERR_IO, "%s: %s", path, strerror(errno));
	return SB_OK;
}

/* Opens and starts run id's network (its directory made) with grants p;
 * report(ctx, ...) gets its reports on the daemon's loop. */
static inline int netlab_run_up(struct netlab *lab, sb_net *n, const char *id,
				const struct sb_netpolicy *p,
				void (*report)(void *ctx, const struct sb_net_report *),
				void *ctx, sb_net_run **out)
{
	int rc;

	if ((rc = netlab_run_dir(lab, id)))
		return rc;
	if ((rc = sb_net_run_open(n, id, p, out)))
		return netlab_fail(lab, rc, "sb_net_run_open: %s", sb_errmsg(rc));
	sb_net_run_start(*out, report, ctx);
	return SB_OK;
}

/* 1 when H has the table inet sanbox. */
static inline int netlab_table_there(struct netlab *lab)
{
	return sb_nft_run(lab->probe, "list set inet sanbox taps", NULL) == SB_OK;
}

/* Closes run id (handle h) and waits until its end is done: its net.json
 * deleted (the last step after its chains and link) and, when it was the
 * enforcer's last run, the table gone too. SB_ERR_TIMEOUT after
 * NETLAB_WAIT_MS for either. */
static inline int netlab_run_down(struct netlab *lab, sb_net_run *h, const char *id,
				  int last)
{
	char dir[4096], ev[4096];
	int fd = inotify_init1(IN_CLOEXEC), done = 0, rc = SB_OK;

	snprintf(dir, sizeof dir, "%s/runs/%s", lab->home, id);
	if (fd < 0 || inotify_add_watch(fd, dir, IN_DELETE) < 0) {
		rc = netlab_fail(lab, SB_ERR_IO, "inotify: %s", strerror(errno));
		sb_net_run_close(h);
		goto out;
	}
	sb_net_run_close(h);
	while (!done) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		ssize_t k;
		if (poll(&pf, 1, NETLAB_WAIT_MS) != 1) {
			rc = netlab_fail(lab, SB_ERR_TIMEOUT,
					 "a run's end: net.json still there after 10 s");
			goto out;
		}
		if ((k = read(fd, ev, sizeof ev)) <= 0) {
			rc = netlab_fail(lab, SB_ERR_IO, "inotify read: %s",
					 strerror(errno));
			goto out;
		}
		for (char *p = ev; p < ev + k;) {
			struct inotify_event *e = (struct inotify_event *)p;
			if (e->len && !strcmp(e->name, "net.json"))
				done = 1;
			p += sizeof *e + e->len;
		}
	}
	for (double t0 = bench_now(); last && netlab_table_there(lab);) {
		struct timespec ts = {0, 50000};
		if (bench_now() - t0 > NETLAB_WAIT_MS / 1e3) {
			rc = netlab_fail(
			    lab, SB_ERR_TIMEOUT,
			    "the last run's end: the table still there after 10 s");
			goto out;
		}
		nanosleep(&ts, NULL);
	}
out:
	if (fd >= 0)
		close(fd);
	return rc;
}

#endif
