/* nethostile.c - what a hostile guest does to network mode acl, for
 * tests/e2e/vm_net_hostile.sh.
 *
 * Static and libc only, run as root inside a guest (busybox userland). Each
 * command prints result lines "LABEL: ..." on stdout (flushed at once, so
 * the host sees them as they come) and exits 0; a usage error exits 64.
 *
 *   arp IP                      an ARP request on the NIC: prints the MAC
 *                               that answers, or "timeout"
 *   spoof4 SRC DST PORT TEXT    one UDP datagram from SRC (any IPv4 address)
 *                               as a raw frame to the gateway's MAC
 *   spoof6 SRC DST PORT TEXT    the same over IPv6 (SRC may be fe80::...)
 *   hold HOST PORT SECS         a TCP connection to an echo server: every
 *                               300 ms one line out, its echo back; prints
 *                               "hold-PORT N ok|timeout|closed"
 *   uhold HOST PORT SECS        the same with UDP datagrams
 *   usend HOST PORT SPORT TEXT N  N datagrams TEXT from source port SPORT,
 *                               300 ms apart; prints how many echoes came
 *   urecv HOST PORT SECS        one UDP datagram out, then prints every
 *                               datagram that comes back ("urecv N: TEXT")
 *   smuggle HOST PORT GOOD BAD  HTTP/1.1 requests for GOOD sent fast to a
 *                               slow server, then one request for BAD with
 *                               a Content-Length, then data; tried again
 *                               until the connection stays open (5 tries)
 *   bodysmuggle HOST PORT GOOD BAD length|chunked
 *                               a POST for GOOD with a 200 KB body (by
 *                               Content-Length or in one chunk) sent after
 *                               its head was judged, then at once a request
 *                               for BAD with data; prints "bodysmuggle-KIND:
 *                               closed" or "... open"
 *   dnsflood N                  N queries for distinct ungranted names of
 *                               255 wire bytes to the resolv.conf server,
 *                               150 a second
 *   dnsmany NAME N              N A queries for NAME, 50 a second; prints
 *                               how many were answered
 *   ctflood DST PORT N          N UDP datagrams to DST:PORT, each from
 *                               another source port of the guest's own
 *                               address (a conntrack entry each), never
 *                               blocking: prints how many were sent and
 *                               refused, and the NIC's transmit counters
 *   conns HOST PORT N SECS      N TCP connections held idle for SECS;
 *                               prints how many the far end closed
 *   rawtcp DST PORT TEXT        a TCP connection made with raw frames (so
 *                               to addresses the guest's own stack keeps
 *                               for itself, 127.0.0.1): sends TEXT, prints
 *                               what comes back
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
}

/* --- the NIC: its name, index, MAC, addresses, the gateway --- */

static struct {
	char name[IFNAMSIZ];
	int index;
	uint8_t mac[6];
	struct in_addr gw4;
} nic;

static int nic_find(void)
{
	char line[256], ifn[IFNAMSIZ];
	unsigned dst, gw, flags;
	struct ifreq ifr;
	FILE *f = fopen("/proc/net/route", "r");
	int s;

	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "%15s %x %x %x", ifn, &dst, &gw, &flags) == 4 &&
		    dst == 0 && gw) {
			snprintf(nic.name, sizeof nic.name, "%s", ifn);
			nic.gw4.s_addr = gw;
		}
	fclose(f);
	if (!nic.name[0] || (s = socket(AF_INET, SOCK_DGRAM, 0)) < 0)
		return -1;
	memset(&ifr, 0, sizeof ifr);
	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", nic.name);
	if (ioctl(s, SIOCGIFHWADDR, &ifr)) {
		close(s);
		return -1;
	}
	memcpy(nic.mac, ifr.ifr_hwaddr.sa_data, 6);
	close(s);
	nic.index = (int)if_nametoindex(nic.name);
	return nic.index ? 0 : -1;
}

/* Sends frame payload p (n bytes) of ethertype to MAC dst. */
static int frame_send(int s, uint16_t type, const uint8_t dst[6], const void *p, size_t n)
{
	struct sockaddr_ll a = {0};

	a.sll_family = AF_PACKET;
	a.sll_protocol = htons(type);
	a.sll_ifindex = nic.index;
	a.sll_halen = 6;
	memcpy(a.sll_addr, dst, 6);
	return sendto(s, p, n, 0, (struct sockaddr *)&a, sizeof a) == (ssize_t)n ? 0 : -1;
}

/* Resolves ip with ARP into mac; 0, or -1 when nobody answers. */
static int arp(struct in_addr ip, uint8_t mac[6], int wait_ms)
{
	static const uint8_t bcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	uint8_t req[28] = {0, 1, 8, 0, 6, 4, 0, 1}, buf[64];
	struct ifreq ifr = {0};
	struct in_addr me = {0};
	int s = socket(AF_PACKET, SOCK_DGRAM, htons(ETH_P_ARP)), t;
	int64_t end = now_ms() + wait_ms;

	if (s < 0)
		return -1;
	if ((t = socket(AF_INET, SOCK_DGRAM, 0)) >= 0) {
		snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", nic.name);
		if (!ioctl(t, SIOCGIFADDR, &ifr))
			me = ((struct sockaddr_in *)&ifr.ifr_addr)->sin_addr;
		close(t);
	}
	memcpy(req + 8, nic.mac, 6);
	memcpy(req + 14, &me, 4);
	memcpy(req + 24, &ip, 4);
	frame_send(s, ETH_P_ARP, bcast, req, sizeof req);
	while (now_ms() < end) {
		struct pollfd p = {s, POLLIN, 0};
		if (poll(&p, 1, (int)(end - now_ms())) <= 0)
			break;
		ssize_t k = recv(s, buf, sizeof buf, 0);
		if (k >= 28 && buf[7] == 2 && !memcmp(buf + 14, &ip, 4)) {
			memcpy(mac, buf + 8, 6);
			close(s);
			return 0;
		}
	}
	close(s);
	return -1;
}

static uint32_t sum16(const void *p, size_t n, uint32_t acc)
{
	const uint8_t *b = p;

	for (size_t i = 0; i + 1 < n; i += 2)
		acc += (uint32_t)(b[i] << 8 | b[i + 1]);
	if (n & 1)
		acc += (uint32_t)b[n - 1] << 8;
	return acc;
}

static uint16_t fold(uint32_t acc)
{
	while (acc >> 16)
		acc = (acc & 0xffff) + (acc >> 16);
	return (uint16_t)~acc;
}

/* A UDP datagram in an IPv4 (v6 0) or IPv6 packet from src to dst, into
 * out; returns its length. */
static size_t udp_packet(int v6, const void *src, const void *dst, uint16_t sport,
			 uint16_t dport, const void *data, size_t n, uint8_t *out)
{
	size_t ip = v6 ? 40 : 20, ulen = 8 + n, alen = v6 ? 16 : 4;
	uint8_t *u = out + ip;
	uint32_t acc;

	memset(out, 0, ip + 8);
	if (v6) {
		out[0] = 0x60;
		out[4] = (uint8_t)(ulen >> 8);
		out[5] = (uint8_t)ulen;
		out[6] = 17;
		out[7] = 64;
		memcpy(out + 8, src, 16);
		memcpy(out + 24, dst, 16);
	} else {
		out[0] = 0x45;
		out[2] = (uint8_t)((ip + ulen) >> 8);
		out[3] = (uint8_t)(ip + ulen);
		out[8] = 64;
		out[9] = 17;
		memcpy(out + 12, src, 4);
		memcpy(out + 16, dst, 4);
		acc = fold(sum16(out, 20, 0));
		out[10] = (uint8_t)(acc >> 8);
		out[11] = (uint8_t)acc;
	}
	u[0] = (uint8_t)(sport >> 8);
	u[1] = (uint8_t)sport;
	u[2] = (uint8_t)(dport >> 8);
	u[3] = (uint8_t)dport;
	u[4] = (uint8_t)(ulen >> 8);
	u[5] = (uint8_t)ulen;
	memcpy(u + 8, data, n);
	/* the pseudo-header: addresses, protocol, length */
	acc = sum16(src, alen, 0);
	acc = sum16(dst, alen, acc);
	acc += 17 + (uint32_t)ulen;
	acc = fold(sum16(u, ulen, acc));
	if (!acc)
		acc = 0xffff;
	u[6] = (uint8_t)(acc >> 8);
	u[7] = (uint8_t)acc;
	return ip + ulen;
}

/* The gateway's MAC (ARP for the IPv4 gateway: the same link for both). */
static int gw_mac(uint8_t mac[6])
{
	for (int i = 0; i < 3; i++)
		if (!arp(nic.gw4, mac, 1000))
			return 0;
	return -1;
}

static int cmd_arp(char **a)
{
	struct in_addr ip;
	uint8_t mac[6];

	if (inet_pton(AF_INET, a[0], &ip) != 1)
		return 64;
	if (arp(ip, mac, 1500))
		say("arp %s: timeout", a[0]);
	else
		say("arp %s: %02x:%02x:%02x:%02x:%02x:%02x", a[0], mac[0], mac[1], mac[2],
		    mac[3], mac[4], mac[5]);
	return 0;
}

static int cmd_spoof(int v6, char **a)
{
	uint8_t src[16], dst[16], mac[6], pkt[1600];
	int af = v6 ? AF_INET6 : AF_INET, s;
	size_t n;

	if (inet_pton(af, a[0], src) != 1 || inet_pton(af, a[1], dst) != 1)
		return 64;
	if (gw_mac(mac)) {
		say("spoof %s: no gateway MAC", a[0]);
		return 0;
	}
	n = udp_packet(v6, src, dst, 40000 + (uint16_t)(now_ms() % 20000),
		       (uint16_t)atoi(a[2]), a[3], strlen(a[3]), pkt);
	s = socket(AF_PACKET, SOCK_DGRAM, htons(v6 ? ETH_P_IPV6 : ETH_P_IP));
	/* three times: one lost frame does not make a false pass */
	for (int i = 0; s >= 0 && i < 3; i++)
		frame_send(s, v6 ? ETH_P_IPV6 : ETH_P_IP, mac, pkt, n);
	say("spoof %s -> %s:%s: sent", a[0], a[1], a[2]);
	if (s >= 0)
		close(s);
	return 0;
}

/* --- connections --- */

static int sock_to(const char *host, const char *port, int type,
		   struct sockaddr_storage *ss, socklen_t *len)
{
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof *ss);
	if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)atoi(port));
		*len = sizeof *s4;
	} else if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)atoi(port));
		*len = sizeof *s6;
	} else {
		return -1;
	}
	return socket(ss->ss_family, type, 0);
}

/* Waits up to ms for fd to be readable; 1 when it is. */
static int readable(int fd, int ms)
{
	struct pollfd p = {fd, POLLIN, 0};

	return poll(&p, 1, ms) == 1;
}

static int cmd_hold(int udp, char **a)
{
	struct sockaddr_storage ss;
	socklen_t len;
	char buf[4096], msg[32], l[32];
	int s = sock_to(a[0], a[1], udp ? SOCK_DGRAM : SOCK_STREAM, &ss, &len);
	int64_t end = now_ms() + 1000LL * atoi(a[2]);
	struct timeval tv = {1, 0};

	if (s < 0)
		return 64;
	snprintf(l, sizeof l, "%s-%s", udp ? "uhold" : "hold", a[1]);
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	if (connect(s, (struct sockaddr *)&ss, len)) {
		say("%s 0 %s", l, errno == ETIMEDOUT ? "timeout" : "refused");
		return 0;
	}
	if (!udp && readable(s, 3000) && recv(s, buf, sizeof buf, 0) <= 0) {
		say("%s 0 closed", l);
		return 0;
	}
	for (int i = 1; now_ms() < end; i++) {
		int n = snprintf(msg, sizeof msg, "p%d\n", i), ok = 0;
		ssize_t k;
		int64_t t0 = now_ms();
		if (send(s, msg, (size_t)n, MSG_NOSIGNAL) != n) {
			say("%s %d closed", l, i);
			sleep_ms(300);
			continue;
		}
		while (!ok && now_ms() - t0 < 1000 && readable(s, 1000)) {
			k = recv(s, buf, sizeof buf - 1, 0);
			if (k <= 0) {
				ok = -1;
				break;
			}
			buf[k] = 0;
			ok = strstr(buf, msg) != NULL;
		}
		say("%s %d %s", l, i, ok > 0 ? "ok" : ok < 0 ? "closed" : "timeout");
		if (ok < 0)
			break;
		sleep_ms(300);
	}
	close(s);
	return 0;
}

static int cmd_usend(char **a)
{
	struct sockaddr_storage ss;
	struct sockaddr_in me = {0};
	socklen_t len;
	char buf[512];
	int s = sock_to(a[0], a[1], SOCK_DGRAM, &ss, &len), n = atoi(a[4]), got = 0,
	    one = 1;

	if (s < 0 || ss.ss_family != AF_INET)
		return 64;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	me.sin_family = AF_INET;
	me.sin_port = htons((uint16_t)atoi(a[2]));
	if (bind(s, (struct sockaddr *)&me, sizeof me) ||
	    connect(s, (struct sockaddr *)&ss, len))
		return 64;
	for (int i = 0; i < n; i++) {
		send(s, a[3], strlen(a[3]), 0);
		if (readable(s, 300) && recv(s, buf, sizeof buf, 0) > 0)
			got++;
		sleep_ms(300);
	}
	say("usend %s from %s: %d of %d echoed", a[3], a[2], got, n);
	return 0;
}

static int cmd_urecv(char **a)
{
	struct sockaddr_storage ss;
	socklen_t len;
	char buf[512];
	int s = sock_to(a[0], a[1], SOCK_DGRAM, &ss, &len), n = 0;
	int64_t end = now_ms() + 1000LL * atoi(a[2]);

	if (s < 0 || connect(s, (struct sockaddr *)&ss, len))
		return 64;
	send(s, "start", 5, 0);
	while (now_ms() < end) {
		if (!readable(s, (int)(end - now_ms())))
			break;
		ssize_t k = recv(s, buf, sizeof buf - 1, 0);
		if (k <= 0)
			continue;
		buf[k] = 0;
		say("urecv %d: %s", ++n, buf);
	}
	say("urecv done: %d", n);
	return 0;
}

/* --- the judge: a request judged while the server's window is full --- */

#define SMUGGLE_TRIES 5

/* Sends all of p (n bytes) on blocking socket s; 0 when it did. */
static int send_all(int s, const char *p, size_t n)
{
	while (n) {
		ssize_t k = send(s, p, n, MSG_NOSIGNAL);
		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* A request head for host of exactly size bytes (padded with X-Pad), with
 * Content-Length cl when cl is not NULL. */
static size_t head(char *out, size_t size, const char *method, const char *path,
		   const char *host, const char *cl)
{
	int n = snprintf(
	    out, size + 1, "%s %s HTTP/1.1\r\nHost: %s\r\n%s%s%sX-Pad: ", method, path,
	    host, cl ? "Content-Length: " : "", cl ? cl : "", cl ? "\r\n" : "");
	size_t pad = size - (size_t)n - 4;

	memset(out + n, 'a', pad);
	memcpy(out + n + pad, "\r\n\r\n", 4);
	return size;
}

/* One try: 1 when the connection was still open after it all (the judge
 * let the request for BAD through), 0 when the judge refused it. */
static int smuggle_try(char **a)
{
	static char buf[16384];
	struct sockaddr_storage ss;
	socklen_t len;
	int s = sock_to(a[0], a[1], SOCK_STREAM, &ss, &len), open = 0;
	size_t n;
	char c;

	if (s < 0 || connect(s, (struct sockaddr *)&ss, len)) {
		if (s >= 0)
			close(s);
		return 0;
	}
	/* 640 KB of requests for the granted name fill what is between the
	 * guest and a server that reads slower than the guest sends (heads of
	 * 1 KB: a head waits whole before the judge, so it must fit in the
	 * server's small receive window) */
	n = head(buf, 1024, "GET", "/fill", a[2], NULL);
	for (int i = 0; i < 640; i++)
		if (send_all(s, buf, n))
			goto out;
	/* then a large request for the other name, with a body that never
	 * ends: the judge may see its head while the server has no room */
	n = head(buf, 1024, "POST", "/smuggled", a[3], "999999999");
	if (send_all(s, buf, n))
		goto out;
	for (int i = 0; i < 64; i++) {
		n = (size_t)snprintf(buf, sizeof buf, "secret-%d for %s\n", i, a[3]);
		if (send_all(s, buf, n))
			goto out;
	}
	/* a refused request closes the connection: wait for that */
	open = !readable(s, 4000) || recv(s, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
	if (open)
		sleep_ms(2000); /* the slow server reads the rest meanwhile */
out:
	close(s);
	return open;
}

/* Tries until a try goes through (SMUGGLE_TRIES at most: no buffer of
 * the host's sits between guest and server, so no race is looked for). */
static int cmd_smuggle(char **a)
{
	for (int i = 1; i <= SMUGGLE_TRIES; i++)
		if (smuggle_try(a)) {
			say("smuggle: the connection with the request for %s stayed open "
			    "at try %d",
			    a[3], i);
			return 0;
		}
	say("smuggle: the judge refused all %d tries", SMUGGLE_TRIES);
	return 0;
}

/* A body's bytes go by the judge unread: the request after the body must
 * still be judged. It comes in segments of its own (a segment goes whole
 * or not at all). */
static int cmd_bodysmuggle(char **a)
{
	static char body[200000];
	char buf[512];
	struct sockaddr_storage ss;
	socklen_t len;
	int chunked = !strcmp(a[4], "chunked"), open = 0;
	int s = sock_to(a[0], a[1], SOCK_STREAM, &ss, &len);
	size_t n;
	char c;

	if (s < 0 || connect(s, (struct sockaddr *)&ss, len)) {
		say("bodysmuggle-%s: no connection", a[4]);
		if (s >= 0)
			close(s);
		return 0;
	}
	n = (size_t)snprintf(
	    buf, sizeof buf, "POST /body HTTP/1.1\r\nHost: %s\r\n%s\r\n%s", a[2],
	    chunked ? "Transfer-Encoding: chunked\r\n" : "Content-Length: 200000\r\n",
	    chunked ? "30d40\r\n" : "");
	if (send_all(s, buf, n))
		goto out;
	sleep_ms(500); /* the head is judged; the body comes on its own */
	memset(body, 'b', sizeof body);
	if (send_all(s, body, sizeof body) ||
	    (chunked && send_all(s, "\r\n0\r\n\r\n", 7)))
		goto out;
	sleep_ms(300);
	n = (size_t)snprintf(buf, sizeof buf,
			     "GET /after-body HTTP/1.1\r\nHost: %s\r\n\r\n"
			     "secret-body for %s\n",
			     a[3], a[3]);
	if (send_all(s, buf, n))
		goto out;
	open = !readable(s, 6000) || recv(s, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
out:
	say("bodysmuggle-%s: %s", a[4], open ? "open" : "closed");
	close(s);
	return 0;
}

/* --- floods --- */

static int resolver(struct sockaddr_in *sa)
{
	char line[256], ip[64];
	FILE *f = fopen("/etc/resolv.conf", "r");
	int ok = 0;

	memset(sa, 0, sizeof *sa);
	while (f && !ok && fgets(line, sizeof line, f))
		ok = sscanf(line, "nameserver %63s", ip) == 1 &&
		     inet_pton(AF_INET, ip, &sa->sin_addr) == 1;
	if (f)
		fclose(f);
	sa->sin_family = AF_INET;
	sa->sin_port = htons(53);
	return ok ? 0 : -1;
}

/* A query for name (dotted, plain) or, with name NULL, for a distinct
 * 255-byte name of bytes 0x01 (each shown as \001 in a record). */
static size_t query(uint8_t *q, uint16_t id, const char *name, unsigned salt)
{
	size_t o = 12;

	memset(q, 0, 12);
	q[0] = (uint8_t)(id >> 8);
	q[1] = (uint8_t)id;
	q[2] = 1; /* RD */
	q[5] = 1; /* one question */
	if (name) {
		const char *p = name;
		while (*p) {
			const char *dot = strchr(p, '.');
			size_t l = dot ? (size_t)(dot - p) : strlen(p);
			q[o++] = (uint8_t)l;
			memcpy(q + o, p, l);
			o += l;
			p += l + (dot ? 1 : 0);
		}
	} else {
		/* 3 labels of 63 and one of 61: 4 + 250 + the root = 255 */
		for (int i = 0; i < 4; i++) {
			size_t l = i < 3 ? 63 : 61;
			char h[9];
			q[o++] = (uint8_t)l;
			memset(q + o, 1, l);
			if (i == 0) {
				snprintf(h, sizeof h, "%08x", salt);
				memcpy(q + o, h, 8);
			}
			o += l;
		}
	}
	q[o++] = 0;
	q[o++] = 0;
	q[o++] = 1; /* A */
	q[o++] = 0;
	q[o++] = 1; /* IN */
	return o;
}

static int cmd_dnsflood(char **a)
{
	struct sockaddr_in sa;
	uint8_t q[512];
	int n = atoi(a[0]), s = socket(AF_INET, SOCK_DGRAM, 0);

	if (s < 0 || resolver(&sa))
		return 64;
	for (int i = 0; i < n; i++) {
		size_t len = query(q, (uint16_t)i, NULL, (unsigned)i);
		sendto(s, q, len, 0, (struct sockaddr *)&sa, sizeof sa);
		if (i % 15 == 14)
			sleep_ms(100);
	}
	say("dnsflood: %d sent", n);
	return 0;
}

static int cmd_dnsmany(char **a)
{
	struct sockaddr_in sa;
	uint8_t q[512], r[1500];
	int n = atoi(a[1]), got = 0, s = socket(AF_INET, SOCK_DGRAM, 0);

	if (s < 0 || resolver(&sa))
		return 64;
	for (int i = 0; i < n; i++) {
		size_t len = query(q, (uint16_t)i, a[0], 0);
		sendto(s, q, len, 0, (struct sockaddr *)&sa, sizeof sa);
		if (readable(s, 1000) && recv(s, r, sizeof r, 0) > 12)
			got++;
		sleep_ms(20);
	}
	say("dnsmany: %d of %d answered", got, n);
	return 0;
}

/* The NIC's transmit counter (tx_packets, or tx_dropped), -1 unknown. */
static long long nic_stat(const char *name)
{
	char path[128];
	long long v = -1;
	FILE *f;

	snprintf(path, sizeof path, "/sys/class/net/%s/statistics/%s", nic.name, name);
	if ((f = fopen(path, "r"))) {
		if (fscanf(f, "%lld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

/* Sends without blocking: a frame the socket has no room for is counted
 * as refused, and a send queue that stays full for CTFLOOD_STUCK_MS ends
 * the flood, said so with the NIC's counters (a NIC that stopped sending
 * is then told from a flood the host dropped). */
#define CTFLOOD_STUCK_MS 5000
static int cmd_ctflood(char **a)
{
	uint8_t src[4], dst[4], mac[6], pkt[128], q[64];
	struct ifreq ifr = {0};
	int n = atoi(a[2]), t = socket(AF_INET, SOCK_DGRAM, 0), s, sent = 0, refused = 0;
	size_t ql = query(q, 1, "x.test", 0), len;
	long long tx0 = nic_stat("tx_packets"), drop0 = nic_stat("tx_dropped");
	int64_t t0, since = 0;

	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", nic.name);
	if (t < 0 || ioctl(t, SIOCGIFADDR, &ifr) || inet_pton(AF_INET, a[0], dst) != 1)
		return 64;
	memcpy(src, &((struct sockaddr_in *)&ifr.ifr_addr)->sin_addr, 4);
	close(t);
	if (gw_mac(mac)) {
		say("ctflood: no gateway MAC");
		return 0;
	}
	s = socket(AF_PACKET, SOCK_DGRAM | SOCK_NONBLOCK, htons(ETH_P_IP));
	t0 = now_ms();
	while (s >= 0 && sent < n) {
		len = udp_packet(0, src, dst, (uint16_t)(1024 + sent % 64000),
				 (uint16_t)atoi(a[1]), q, ql, pkt);
		if (frame_send(s, ETH_P_IP, mac, pkt, len)) {
			refused++;
			if (!since)
				since = now_ms();
			else if (now_ms() - since > CTFLOOD_STUCK_MS)
				break;
			sleep_ms(1);
			continue;
		}
		since = 0;
		if (++sent % 500 == 0)
			sleep_ms(10);
	}
	say("ctflood: %d sent, %d refused (send queue full) in %lld ms%s; NIC tx_packets "
	    "+%lld, tx_dropped +%lld",
	    sent, refused, (long long)(now_ms() - t0),
	    sent < n ? ", stopped: the send queue stayed full" : "",
	    nic_stat("tx_packets") - tx0, nic_stat("tx_dropped") - drop0);
	return 0;
}

static int cmd_conns(char **a)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int n = atoi(a[2]), fds[512], made = 0, closed = 0;
	char c;

	if (n > 512)
		n = 512;
	for (int i = 0; i < n; i++) {
		int s = sock_to(a[0], a[1], SOCK_STREAM, &ss, &len);
		struct timeval tv = {2, 0};
		if (s < 0)
			return 64;
		setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
		if (connect(s, (struct sockaddr *)&ss, len)) {
			close(s);
			continue;
		}
		fds[made++] = s;
		if (i % 16 == 0)
			send(s, "G", 1, MSG_NOSIGNAL); /* a slow start of a request */
	}
	sleep_ms(1000 * atoi(a[3]));
	for (int i = 0; i < made; i++) {
		fcntl(fds[i], F_SETFL, O_NONBLOCK);
		if (recv(fds[i], &c, 1, 0) == 0 ||
		    (errno != EAGAIN && errno != EWOULDBLOCK))
			closed++;
		close(fds[i]);
	}
	say("conns: %d connected, %d closed by the far end", made, closed);
	return 0;
}

/* --- a TCP client of raw frames --- */

/* A TCP segment in an IPv4 packet; returns its length. */
static size_t tcp_packet(const uint8_t src[4], const uint8_t dst[4], uint16_t sport,
			 uint16_t dport, uint32_t seq, uint32_t ack, uint8_t flags,
			 const void *data, size_t n, uint8_t *out)
{
	uint8_t *t = out + 20;
	size_t tlen = 20 + n;
	uint32_t acc;

	memset(out, 0, 40);
	out[0] = 0x45;
	out[2] = (uint8_t)((20 + tlen) >> 8);
	out[3] = (uint8_t)(20 + tlen);
	out[8] = 64;
	out[9] = 6;
	memcpy(out + 12, src, 4);
	memcpy(out + 16, dst, 4);
	acc = fold(sum16(out, 20, 0));
	out[10] = (uint8_t)(acc >> 8);
	out[11] = (uint8_t)acc;
	t[0] = (uint8_t)(sport >> 8);
	t[1] = (uint8_t)sport;
	t[2] = (uint8_t)(dport >> 8);
	t[3] = (uint8_t)dport;
	for (int i = 0; i < 4; i++) {
		t[4 + i] = (uint8_t)(seq >> (24 - 8 * i));
		t[8 + i] = (uint8_t)(ack >> (24 - 8 * i));
	}
	t[12] = 5 << 4;
	t[13] = flags;
	t[14] = 0xff; /* window 65535 */
	t[15] = 0xff;
	memcpy(t + 20, data, n);
	acc = sum16(src, 4, 0);
	acc = sum16(dst, 4, acc);
	acc += 6 + (uint32_t)tlen;
	acc = fold(sum16(t, tlen, acc));
	t[16] = (uint8_t)(acc >> 8);
	t[17] = (uint8_t)acc;
	return 20 + tlen;
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int cmd_rawtcp(char **a)
{
	enum { FIN = 1, SYN = 2, RST = 4, PSH = 8, ACK = 16 };
	uint8_t src[4], dst[4], mac[6], pkt[1600], buf[2048], got[4096];
	struct ifreq ifr = {0};
	uint16_t sport = (uint16_t)(20000 + now_ms() % 30000),
		 dport = (uint16_t)atoi(a[1]);
	uint32_t seq = (uint32_t)now_ms() * 7919u, ack = 0;
	size_t ngot = 0, n;
	int t = socket(AF_INET, SOCK_DGRAM, 0), s, r, state = 0; /* 0 syn sent, 1 open */
	int64_t end = now_ms() + 4000;
	struct sockaddr_ll bind_to = {0};

	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", nic.name);
	if (t < 0 || ioctl(t, SIOCGIFADDR, &ifr) || inet_pton(AF_INET, a[0], dst) != 1)
		return 64;
	memcpy(src, &((struct sockaddr_in *)&ifr.ifr_addr)->sin_addr, 4);
	close(t);
	if (gw_mac(mac)) {
		say("rawtcp: no gateway MAC");
		return 0;
	}
	s = socket(AF_PACKET, SOCK_DGRAM, htons(ETH_P_IP));
	r = socket(AF_PACKET, SOCK_DGRAM, htons(ETH_P_IP));
	bind_to.sll_family = AF_PACKET;
	bind_to.sll_protocol = htons(ETH_P_IP);
	bind_to.sll_ifindex = nic.index;
	if (s < 0 || r < 0 || bind(r, (struct sockaddr *)&bind_to, sizeof bind_to))
		return 64;
	n = tcp_packet(src, dst, sport, dport, seq, 0, SYN, NULL, 0, pkt);
	frame_send(s, ETH_P_IP, mac, pkt, n);
	while (now_ms() < end) {
		struct sockaddr_ll from;
		socklen_t fl = sizeof from;
		ssize_t k;
		uint8_t *tcp;
		if (!readable(r, (int)(end - now_ms())))
			break;
		k = recvfrom(r, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
		if (k < 40 || from.sll_pkttype == PACKET_OUTGOING || buf[9] != 6 ||
		    memcmp(buf + 12, dst, 4))
			continue;
		tcp = buf + (buf[0] & 15) * 4;
		if ((tcp[0] << 8 | tcp[1]) != dport || (tcp[2] << 8 | tcp[3]) != sport)
			continue;
		if (tcp[13] & RST) {
			say("rawtcp %s:%s: reset%s", a[0], a[1],
			    state ? " after connecting" : "");
			return 0;
		}
		if (state == 0 && (tcp[13] & (SYN | ACK)) == (SYN | ACK)) {
			char text[1024];
			size_t tl = 0;
			for (const char *p = a[2]; *p && tl < sizeof text; p++) {
				if (p[0] == '\\' && p[1] == 'r')
					text[tl++] = '\r', p++;
				else if (p[0] == '\\' && p[1] == 'n')
					text[tl++] = '\n', p++;
				else
					text[tl++] = *p;
			}
			seq++;
			ack = get32(tcp + 4) + 1;
			n = tcp_packet(src, dst, sport, dport, seq, ack, ACK, NULL, 0,
				       pkt);
			frame_send(s, ETH_P_IP, mac, pkt, n);
			n = tcp_packet(src, dst, sport, dport, seq, ack, ACK | PSH, text,
				       tl, pkt);
			frame_send(s, ETH_P_IP, mac, pkt, n);
			seq += (uint32_t)tl;
			state = 1;
			continue;
		}
		if (state == 1) {
			size_t hl = (size_t)(tcp[12] >> 4) * 4,
			       ipl = (size_t)(buf[2] << 8 | buf[3]);
			size_t dl = ipl - (size_t)(tcp - buf) - hl;
			if (get32(tcp + 4) == ack && dl) {
				if (ngot + dl <= sizeof got) {
					memcpy(got + ngot, tcp + hl, dl);
					ngot += dl;
				}
				ack += (uint32_t)dl;
			}
			if (tcp[13] & FIN)
				ack++;
			n = tcp_packet(src, dst, sport, dport, seq, ack, ACK, NULL, 0,
				       pkt);
			frame_send(s, ETH_P_IP, mac, pkt, n);
			if (tcp[13] & FIN)
				break;
		}
	}
	if (state == 0) {
		say("rawtcp %s:%s: timeout", a[0], a[1]);
		return 0;
	}
	for (size_t i = 0; i < ngot; i++)
		if (got[i] == '\r' || got[i] == '\n')
			got[i] = ' ';
	say("rawtcp %s:%s: connected, got '%.*s'", a[0], a[1], (int)ngot, got);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int args;
	} cmds[] = {{"arp", 1},	    {"spoof4", 4},     {"spoof6", 4},  {"hold", 3},
		    {"uhold", 3},   {"urecv", 3},      {"smuggle", 4}, {"dnsflood", 1},
		    {"dnsmany", 2}, {"ctflood", 3},    {"conns", 4},   {"rawtcp", 3},
		    {"usend", 5},   {"bodysmuggle", 5}};
	int i;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		goto usage;
	for (i = 0; i < (int)(sizeof cmds / sizeof cmds[0]); i++)
		if (!strcmp(argv[1], cmds[i].name))
			break;
	if (i == (int)(sizeof cmds / sizeof cmds[0]) || argc != 2 + cmds[i].args)
		goto usage;
	if (nic_find()) {
		say("%s: no NIC with a default route", argv[1]);
		return 0;
	}
	argv += 2;
	switch (i) {
	case 0: return cmd_arp(argv);
	case 1: return cmd_spoof(0, argv);
	case 2: return cmd_spoof(1, argv);
	case 3: return cmd_hold(0, argv);
	case 4: return cmd_hold(1, argv);
	case 5: return cmd_urecv(argv);
	case 6: return cmd_smuggle(argv);
	case 7: return cmd_dnsflood(argv);
	case 8: return cmd_dnsmany(argv);
	case 9: return cmd_ctflood(argv);
	case 10: return cmd_conns(argv);
	case 11: return cmd_rawtcp(argv);
	case 12: return cmd_usend(argv);
	default: return cmd_bodysmuggle(argv);
	}
usage:
	fprintf(stderr,
		"usage: see the comment at the top of tests/guest/nethostile.c\n");
	return 64;
}
