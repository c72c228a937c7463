/* netprobe.c - network probes for the network tests, in guests and on hosts.
 *
 * Static and libc only, so the same binary runs in a guest's busybox
 * userland and in a host's network namespace. Each command prints one
 * result line on stdout (dns: one more per answer) and exits 0 on success,
 * 1 on failure with the reason on stderr; dns exits 2 on NXDOMAIN. A usage
 * error exits 64, so that it never reads as a blocked connection. The
 * commands and their options are in usage() below.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE 64
#define MAX_RR	   16

static const char usage_text[] =
    "usage: netprobe COMMAND ARGS... [--timeout SECONDS]\n"
    "  tcp HOST PORT [--send TEXT] [--expect TEXT]\n"
    "      connects, sends TEXT, half-closes and reads until EOF; prints what\n"
    "      came back (escaped, one line), or \"connected\" when nothing did\n"
    "  udp HOST PORT --send TEXT [--expect TEXT]\n"
    "      sends one datagram and prints the reply (escaped)\n"
    "  dns NAME [--type A|AAAA|TXT] [--server IP[:PORT]] [--tcp]\n"
    "      asks the server (default: the first nameserver of /etc/resolv.conf)\n"
    "      over UDP (--tcp: TCP); prints the rcode, then each answer of the\n"
    "      type on its own line; exits 0 on NOERROR with an answer, 2 on\n"
    "      NXDOMAIN, 1 otherwise\n"
    "  tls HOST PORT [--sni NAME]\n"
    "      sends a TLS 1.3 ClientHello for NAME (default HOST; \"\" sends none)\n"
    "      and prints \"serverhello\" when a handshake record comes back\n"
    "  http HOST PORT [--host NAME] [--path P]\n"
    "      sends GET P (default /) with Host: NAME (default HOST) and prints\n"
    "      the status line\n"
    "  icmp HOST\n"
    "      one echo request (a raw socket: root) and prints \"reply\"\n"
    "  quic HOST PORT\n"
    "      sends a 1200-byte datagram shaped like a QUIC v1 Initial and prints\n"
    "      \"reply N bytes\"\n"
    "HOST is an IPv4 or IPv6 literal, or a name resolved (A, then AAAA)\n"
    "through the dns command's server. TEXT takes \\n \\r \\t \\\\ \\xHH.\n"
    "On failure stdout has one word: refused, reset, unreachable, timeout,\n"
    "closed, alert, denied, nxdomain, unresolved or error; a reply without\n"
    "--expect's TEXT is printed, and netprobe exits 1.\n"
    "--timeout bounds the whole command (default 3 seconds).\n";

struct addr {
	struct sockaddr_storage ss;
	socklen_t len;
};

struct rr {
	int type, len;
	unsigned char data[256];
};

struct dns_reply {
	int rcode, tc, n;
	struct rr rr[MAX_RR];
};

static struct {
	int64_t deadline; /* CLOCK_MONOTONIC milliseconds */
	const char *send, *expect, *type, *server, *sni, *host, *path;
	int dns_tcp;
	char target[300]; /* "HOST:PORT", for messages */
} o;

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int left_ms(void)
{
	int64_t l = o.deadline - now_ms();

	return l > 0 ? (int)l : 0;
}

/* Prints word as the result and the reason on stderr (one write, so that
 * a guest's output shows it as one line); returns 1. */
static int fail(const char *word, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	int n;

	printf("%s\n", word);
	n = snprintf(msg, sizeof msg, "netprobe: %s: ", o.target);
	va_start(ap, fmt);
	vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", msg);
	return 1;
}

static const char *err_word(int e)
{
	switch (e) {
	case ECONNREFUSED: return "refused";
	case ECONNRESET:
	case EPIPE: return "reset";
	case EHOSTUNREACH:
	case ENETUNREACH: return "unreachable";
	case ETIMEDOUT: return "timeout";
	case ENODATA: return "closed";
	case EPERM:
	case EACCES: return "denied";
	default: return "error";
	}
}

static int fail_errno(const char *what)
{
	int e = errno;

	return fail(err_word(e), "%s: %s", what, strerror(e));
}

static void fill_random(void *p, size_t n)
{
	unsigned char *c = p;
	size_t i;

	if (getrandom(p, n, GRND_NONBLOCK) == (ssize_t)n)
		return;
	srand((unsigned)(now_ms() ^ getpid())); /* no entropy yet: any bytes do */
	for (i = 0; i < n; i++)
		c[i] = (unsigned char)rand();
}

static void put16(unsigned char *p, size_t v)
{
	p[0] = (unsigned char)(v >> 8);
	p[1] = (unsigned char)v;
}

/* Prints p on one line: \n \r \t \\ and non-printable bytes escaped. */
static void print_escaped(const unsigned char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		switch (p[i]) {
		case '\n': fputs("\\n", stdout); break;
		case '\r': fputs("\\r", stdout); break;
		case '\t': fputs("\\t", stdout); break;
		case '\\': fputs("\\\\", stdout); break;
		default:
			if (p[i] < 0x20 || p[i] >= 0x7f)
				printf("\\x%02x", p[i]);
			else
				putchar(p[i]);
		}
	}
	putchar('\n');
}

static int hex_digit(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
		return (c | 0x20) - 'a' + 10;
	return -1;
}

/* Decodes the escapes of s into out (cap bytes); returns the length. */
static size_t unescape(const char *s, char *out, size_t cap)
{
	size_t n = 0;
	int v, d;

	for (; *s && n < cap; s++) {
		if (*s != '\\' || !s[1]) {
			out[n++] = *s;
			continue;
		}
		switch (*++s) {
		case 'n': out[n++] = '\n'; break;
		case 'r': out[n++] = '\r'; break;
		case 't': out[n++] = '\t'; break;
		case 'x':
			for (v = 0, d = 0; d < 2 && hex_digit(s[1]) >= 0; d++)
				v = v * 16 + hex_digit(*++s);
			out[n++] = d ? (char)v : 'x';
			break;
		default: out[n++] = *s;
		}
	}
	return n;
}

/* Fills a with the IP literal s and port; 0, or -1 when s is no literal. */
static int parse_ip(const char *s, unsigned port, struct addr *a)
{
	struct sockaddr_in *s4 = (struct sockaddr_in *)&a->ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&a->ss;

	memset(a, 0, sizeof *a);
	if (inet_pton(AF_INET, s, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		a->len = sizeof *s4;
		return 0;
	}
	if (inet_pton(AF_INET6, s, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		a->len = sizeof *s6;
		return 0;
	}
	return -1;
}

/* Parses "IP", "IP:PORT", "[IP6]" or "[IP6]:PORT" (default port 53). */
static int parse_server(const char *s, struct addr *a)
{
	char host[INET6_ADDRSTRLEN + 2];
	const char *colon = strrchr(s, ':'), *end;
	unsigned port = 53;

	if (*s == '[') {
		end = strchr(s, ']');
		if (!end || (size_t)(end - s - 1) >= sizeof host)
			return -1;
		snprintf(host, sizeof host, "%.*s", (int)(end - s - 1), s + 1);
		if (end[1] == ':')
			port = (unsigned)atoi(end + 2);
	} else if (colon && colon == strchr(s, ':')) { /* one colon: IPv4:PORT */
		snprintf(host, sizeof host, "%.*s", (int)(colon - s), s);
		port = (unsigned)atoi(colon + 1);
	} else {
		snprintf(host, sizeof host, "%s", s);
	}
	return port && port < 65536 ? parse_ip(host, port, a) : -1;
}

/* The DNS server: --server, else the first nameserver of /etc/resolv.conf. */
static int dns_server(struct addr *a)
{
	char line[256], ns[200];
	FILE *f;

	if (o.server)
		return parse_server(o.server, a);
	f = fopen("/etc/resolv.conf", "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f)) {
		if (sscanf(line, " nameserver %199s", ns) == 1 && !parse_ip(ns, 53, a)) {
			fclose(f);
			return 0;
		}
	}
	fclose(f);
	return -1;
}

/* A non-blocking socket of type connected to a, within the deadline; -1
 * with errno (ETIMEDOUT when the deadline passed). */
static int sock_connect(const struct addr *a, int type)
{
	struct pollfd p;
	socklen_t elen = sizeof(int);
	int fd, err = 0;

	fd = socket(a->ss.ss_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (const struct sockaddr *)&a->ss, a->len) == 0)
		return fd;
	if (errno != EINPROGRESS)
		goto fail;
	p = (struct pollfd){.fd = fd, .events = POLLOUT};
	if (poll(&p, 1, left_ms()) <= 0) {
		errno = ETIMEDOUT;
		goto fail;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) || err) {
		errno = err ? err : errno;
		goto fail;
	}
	return fd;
fail:
	err = errno;
	close(fd);
	errno = err;
	return -1;
}

/* recv() within the deadline: the byte count, 0 at EOF, -1 with errno. */
static ssize_t recv_wait(int fd, void *buf, size_t len)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	ssize_t n;

	for (;;) {
		if (poll(&p, 1, left_ms()) <= 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		n = recv(fd, buf, len, 0);
		if (n >= 0 || (errno != EAGAIN && errno != EINTR))
			return n;
	}
}

static int send_all(int fd, const void *buf, size_t len)
{
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	const char *c = buf;
	ssize_t n;

	while (len) {
		n = send(fd, c, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EAGAIN && poll(&p, 1, left_ms()) > 0)
			continue;
		if (n < 0) {
			if (errno == EAGAIN)
				errno = ETIMEDOUT;
			return -1;
		}
		c += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Reads into buf (cap - 1 bytes, NUL-ended) until EOF, until it holds stop
 * (stoplen bytes; 0: read on), or until the deadline; returns the length,
 * *err 0 at EOF or stop, else the errno that ended it. */
static size_t read_until(int fd, char *buf, size_t cap, const char *stop, size_t stoplen,
			 int *err)
{
	size_t n = 0;
	ssize_t r;

	*err = 0;
	while (n < cap - 1) {
		r = recv_wait(fd, buf + n, cap - 1 - n);
		if (r <= 0) {
			*err = r ? errno : 0;
			break;
		}
		n += (size_t)r;
		if (stoplen && memmem(buf, n, stop, stoplen))
			break;
	}
	buf[n] = 0;
	return n;
}

/* Reads exactly len bytes within the deadline; 0, or -1 with errno
 * (ENODATA: EOF before them). */
static int read_full(int fd, unsigned char *buf, size_t len)
{
	size_t n = 0;
	ssize_t r;

	while (n < len) {
		r = recv_wait(fd, buf + n, len - n);
		if (r <= 0) {
			errno = r ? errno : ENODATA;
			return -1;
		}
		n += (size_t)r;
	}
	return 0;
}

/* ---- DNS ---- */

static const char *rcode_name(int rcode)
{
	static const char *names[] = {"NOERROR",  "FORMERR", "SERVFAIL",
				      "NXDOMAIN", "NOTIMP",  "REFUSED"};
	static char other[16];

	if (rcode < 6)
		return names[rcode];
	snprintf(other, sizeof other, "RCODE%d", rcode);
	return other;
}

/* Writes a query for name into q (280 bytes); returns its length, -1 when
 * name is no valid DNS name. */
static int dns_build(unsigned char *q, const char *name, int qtype, uint16_t id)
{
	const char *p = name;
	int n = 12;
	size_t l;

	memset(q, 0, 12);
	put16(q, id);
	q[2] = 0x01; /* RD */
	q[5] = 1;    /* QDCOUNT */
	while (*p) {
		l = strcspn(p, ".");
		if (l == 0 || l > 63 || n + (int)l + 6 > 270)
			return -1;
		q[n++] = (unsigned char)l;
		memcpy(q + n, p, l);
		n += (int)l;
		p += l;
		if (*p == '.')
			p++;
	}
	q[n] = 0;
	put16(q + n + 1, (size_t)qtype);
	put16(q + n + 3, 1); /* class IN */
	return n + 5;
}

/* The offset after the name at off, -1 when it runs past the message. */
static int dns_skip(const unsigned char *m, int len, int off)
{
	while (off < len) {
		if (m[off] == 0)
			return off + 1;
		if ((m[off] & 0xc0) == 0xc0)
			return off + 2 <= len ? off + 2 : -1;
		off += m[off] + 1;
	}
	return -1;
}

/* Parses the reply m to query id into r; 0, or -1 when it is no reply to
 * it or is malformed. */
static int dns_parse(const unsigned char *m, int len, uint16_t id, struct dns_reply *r)
{
	int off = 12, i, qd, an, rdlen;

	if (len < 12 || (m[0] << 8 | m[1]) != id || !(m[2] & 0x80))
		return -1;
	memset(r, 0, sizeof *r);
	r->rcode = m[3] & 0x0f;
	r->tc = (m[2] & 0x02) != 0;
	qd = m[4] << 8 | m[5];
	an = m[6] << 8 | m[7];
	for (i = 0; i < qd && off >= 0; i++)
		if ((off = dns_skip(m, len, off)) >= 0)
			off += 4;
	for (i = 0; i < an; i++) {
		if (off < 0 || (off = dns_skip(m, len, off)) < 0 || off + 10 > len)
			return -1;
		rdlen = m[off + 8] << 8 | m[off + 9];
		if (off + 10 + rdlen > len)
			return -1;
		if (r->n < MAX_RR && rdlen <= 256) {
			r->rr[r->n].type = m[off] << 8 | m[off + 1];
			r->rr[r->n].len = rdlen;
			memcpy(r->rr[r->n++].data, m + off + 10, (size_t)rdlen);
		}
		off += 10 + rdlen;
	}
	return off < 0 || off > len ? -1 : 0;
}

/* Asks the server for name's qtype records (over TCP when tcp, or when the
 * UDP answer was truncated); 0, or -1 with errno (EBADMSG: no valid answer). */
static int dns_ask(const char *name, int qtype, int tcp, struct dns_reply *r)
{
	unsigned char q[300], m[65536];
	struct addr srv;
	int fd, qlen, e;
	uint16_t id;
	ssize_t n;

	fill_random(&id, sizeof id);
	if (dns_server(&srv)) {
		errno = EDESTADDRREQ;
		return -1;
	}
	if ((qlen = dns_build(q + 2, name, qtype, id)) < 0) {
		errno = EINVAL;
		return -1;
	}
	fd = sock_connect(&srv, tcp ? SOCK_STREAM : SOCK_DGRAM);
	if (fd < 0)
		return -1;
	put16(q, (size_t)qlen);
	if (tcp ? send_all(fd, q, (size_t)qlen + 2) : send_all(fd, q + 2, (size_t)qlen))
		goto fail;
	for (;;) {
		if (tcp) {
			if (read_full(fd, m, 2))
				goto fail;
			n = m[0] << 8 | m[1];
			if (read_full(fd, m, (size_t)n))
				goto fail;
		} else if ((n = recv_wait(fd, m, sizeof m)) < 0) {
			goto fail;
		}
		if (dns_parse(m, (int)n, id, r) == 0)
			break;
		if (tcp) {
			errno = EBADMSG;
			goto fail;
		} /* UDP: not ours, or garbage; wait for another */
	}
	close(fd);
	return r->tc && !tcp ? dns_ask(name, qtype, 1, r) : 0;
fail:
	e = errno;
	close(fd);
	errno = e;
	return -1;
}

/* Fills a with host (a literal, or a name's first A or else AAAA record)
 * and port; NULL, or the failure's result word. */
static const char *resolve(const char *host, unsigned port, struct addr *a)
{
	static const int types[] = {1, 28};
	struct dns_reply r;
	char ip[INET6_ADDRSTRLEN];
	int t, i, nx = 0;

	if (!parse_ip(host, port, a))
		return NULL;
	for (t = 0; t < 2; t++) {
		if (dns_ask(host, types[t], o.dns_tcp, &r)) {
			fprintf(stderr, "netprobe: resolving %s: %s\n", host,
				strerror(errno));
			return err_word(errno);
		}
		nx |= r.rcode == 3;
		for (i = 0; i < r.n; i++) {
			if (r.rr[i].type != types[t] || r.rr[i].len != (t ? 16 : 4))
				continue;
			inet_ntop(t ? AF_INET6 : AF_INET, r.rr[i].data, ip, sizeof ip);
			fprintf(stderr, "netprobe: %s is %s\n", host, ip);
			parse_ip(ip, port, a);
			return NULL;
		}
	}
	fprintf(stderr, "netprobe: %s: %s\n", host, nx ? "NXDOMAIN" : "no address");
	return nx ? "nxdomain" : "unresolved";
}

/* ---- commands ---- */

/* The target of a HOST PORT command, resolved and connected; -1 when it
 * failed, having printed why. */
static int connect_to(char **pos, int type, int *ret)
{
	struct addr a;
	const char *word;
	int fd;

	snprintf(o.target, sizeof o.target, "%s:%s", pos[0], pos[1]);
	if ((word = resolve(pos[0], (unsigned)atoi(pos[1]), &a))) {
		*ret = fail(word, "could not resolve %s", pos[0]);
		return -1;
	}
	fd = sock_connect(&a, type);
	if (fd < 0)
		*ret = fail_errno("connect");
	return fd;
}

/* Prints the reply (none when it is empty); 0, or 1 when it lacks the text
 * of --expect. */
static int reply_check(const char *buf, size_t n, const char *none)
{
	char text[4096];
	size_t len;

	if (n)
		print_escaped((const unsigned char *)buf, n);
	else
		printf("%s\n", none);
	if (!o.expect)
		return 0;
	len = unescape(o.expect, text, sizeof text);
	if (memmem(buf, n, text, len))
		return 0;
	fprintf(stderr, "netprobe: %s: the reply lacks %s\n", o.target, o.expect);
	return 1;
}

static int cmd_tcp(char **pos)
{
	char buf[65536], text[4096];
	size_t n, len;
	int fd, e, ret;

	if ((fd = connect_to(pos, SOCK_STREAM, &ret)) < 0)
		return ret;
	len = o.send ? unescape(o.send, text, sizeof text) : 0;
	if (len && send_all(fd, text, len))
		return fail_errno("send");
	shutdown(fd, SHUT_WR);
	len = o.expect ? unescape(o.expect, text, sizeof text) : 0;
	n = read_until(fd, buf, sizeof buf, text, len, &e);
	close(fd);
	if (!n && e && e != ETIMEDOUT)
		return fail(err_word(e), "read: %s", strerror(e));
	return reply_check(buf, n, "connected");
}

static int cmd_udp(char **pos)
{
	char buf[65536], text[4096];
	size_t len;
	ssize_t n;
	int fd, ret;

	if (!o.send) {
		fprintf(stderr, "netprobe: udp needs --send TEXT\n");
		return EXIT_USAGE;
	}
	if ((fd = connect_to(pos, SOCK_DGRAM, &ret)) < 0)
		return ret;
	len = unescape(o.send, text, sizeof text);
	if (send_all(fd, text, len) || (n = recv_wait(fd, buf, sizeof buf)) < 0)
		return fail_errno("udp");
	close(fd);
	return reply_check(buf, (size_t)n, "");
}

static int cmd_dns(char **pos)
{
	struct dns_reply r;
	unsigned char txt[256];
	char ip[INET6_ADDRSTRLEN];
	int qtype = 1, i, found = 0, off, len, n;

	snprintf(o.target, sizeof o.target, "dns %s", pos[0]);
	if (o.type && !strcmp(o.type, "AAAA"))
		qtype = 28;
	else if (o.type && !strcmp(o.type, "TXT"))
		qtype = 16;
	else if (o.type && strcmp(o.type, "A")) {
		fprintf(stderr, "netprobe: --type is A, AAAA or TXT\n");
		return EXIT_USAGE;
	}
	if (dns_ask(pos[0], qtype, o.dns_tcp, &r))
		return fail_errno(o.server ? o.server : "the resolv.conf nameserver");
	printf("%s\n", rcode_name(r.rcode));
	for (i = 0; i < r.n; i++) {
		struct rr *rr = &r.rr[i];

		if (rr->type != qtype)
			continue;
		if (qtype == 16) { /* TXT: its strings, joined */
			for (off = 0, n = 0; off < rr->len; off += 1 + len) {
				len = rr->data[off];
				if (len > rr->len - off - 1)
					len = rr->len - off - 1;
				memcpy(txt + n, rr->data + off + 1, (size_t)len);
				n += len;
			}
			print_escaped(txt, (size_t)n);
		} else if (rr->len == (qtype == 1 ? 4 : 16)) {
			inet_ntop(qtype == 1 ? AF_INET : AF_INET6, rr->data, ip,
				  sizeof ip);
			printf("%s\n", ip);
		} else {
			continue;
		}
		found++;
	}
	if (r.rcode == 3)
		return 2;
	if (r.rcode || !found)
		fprintf(stderr, "netprobe: %s: %s, %d answers\n", o.target,
			rcode_name(r.rcode), found);
	return !(r.rcode == 0 && found);
}

/* The fixed parts of the ClientHello: the cipher suites and compression,
 * and the extensions after server_name, key_share's key last (its 32 bytes
 * follow). */
static const char tls_suites[] =
    "\x00\x12\x13\x01\x13\x02\x13\x03" /* 18 bytes: TLS 1.3's suites, */
    "\xc0\x2b\xc0\x2f\xc0\x2c\xc0\x30" /* TLS 1.2's ECDHE AES-GCM */
    "\xcc\xa9\xcc\xa8"		       /* and ChaCha20 */
    "\x01\x00";			       /* compression: null */
static const char tls_exts[] =
    "\x00\x0a\x00\x06\x00\x04\x00\x1d\x00\x17" /* groups: x25519, secp256r1 */
    "\x00\x0b\x00\x02\x01\x00"		       /* ec_point_formats */
    "\x00\x0d\x00\x12\x00\x10\x04\x03\x08\x04" /* signature_algorithms */
    "\x04\x01\x05\x03\x08\x05\x05\x01\x08\x06\x06\x01"
    "\x00\x2b\x00\x05\x04\x03\x04\x03\x03"	/* supported_versions: 1.3, 1.2 */
    "\x00\x2d\x00\x02\x01\x01"			/* psk_key_exchange_modes */
    "\x00\x33\x00\x26\x00\x24\x00\x1d\x00\x20"; /* key_share: x25519 */

/* Writes into p a TLS record with a ClientHello as a TLS 1.3 client sends
 * it, for sni (no server_name when ""); returns its length. */
static size_t tls_hello(unsigned char *p, const char *sni)
{
	size_t n, len = strlen(sni), ext;

	/* handshake record, ClientHello (their lengths later), version 1.2 */
	static const unsigned char head[] = {22, 3, 1, 0, 0, 1, 0, 0, 0, 3, 3};

	memcpy(p, head, sizeof head);
	n = sizeof head;
	fill_random(p + n, 32); /* random */
	p[n + 32] = 32;		/* a legacy session id, as TLS 1.3 clients send */
	fill_random(p + n + 33, 32);
	n += 65;
	memcpy(p + n, tls_suites, sizeof tls_suites - 1);
	n += sizeof tls_suites - 1;
	ext = n;
	n += 2;
	if (len) { /* server_name: one host_name */
		put16(p + n, 0);
		put16(p + n + 2, len + 5);
		put16(p + n + 4, len + 3);
		p[n + 6] = 0;
		put16(p + n + 7, len);
		memcpy(p + n + 9, sni, len);
		n += 9 + len;
	}
	memcpy(p + n, tls_exts, sizeof tls_exts - 1);
	n += sizeof tls_exts - 1;
	fill_random(p + n, 32); /* any 32 bytes are an x25519 public key */
	n += 32;
	put16(p + ext, n - ext - 2);
	put16(p + 3, n - 5);
	put16(p + 7, n - 9);
	return n;
}

static int cmd_tls(char **pos)
{
	unsigned char hello[512], buf[5];
	size_t len;
	ssize_t n;
	int fd, ret;

	if (strlen(o.sni ? o.sni : pos[0]) > 255) {
		fprintf(stderr, "netprobe: --sni: too long\n");
		return EXIT_USAGE;
	}
	if ((fd = connect_to(pos, SOCK_STREAM, &ret)) < 0)
		return ret;
	len = tls_hello(hello, o.sni ? o.sni : pos[0]);
	if (send_all(fd, hello, len))
		return fail_errno("send");
	n = recv_wait(fd, buf, sizeof buf);
	close(fd);
	if (n < 0)
		return fail_errno("read");
	if (n == 0)
		return fail("closed", "closed without a reply");
	if (buf[0] == 0x15)
		return fail("alert", "the server sent an alert");
	if (buf[0] != 0x16)
		return fail("error", "not a TLS handshake record (0x%02x)", buf[0]);
	printf("serverhello\n");
	return 0;
}

static int cmd_http(char **pos)
{
	char buf[8192];
	size_t n;
	int fd, len, e, ret;

	if ((fd = connect_to(pos, SOCK_STREAM, &ret)) < 0)
		return ret;
	len = snprintf(buf, sizeof buf,
		       "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
		       o.path ? o.path : "/", o.host ? o.host : pos[0]);
	if (len >= (int)sizeof buf || send_all(fd, buf, (size_t)len))
		return fail_errno("send");
	n = read_until(fd, buf, sizeof buf, "\n", 1, &e);
	close(fd);
	if (!n)
		return e ? fail(err_word(e), "read: %s", strerror(e))
			 : fail("closed", "closed without a reply");
	buf[strcspn(buf, "\r\n")] = 0;
	if (strncmp(buf, "HTTP/", 5)) {
		print_escaped((unsigned char *)buf, strlen(buf));
		fprintf(stderr, "netprobe: %s: not an HTTP reply\n", o.target);
		return 1;
	}
	printf("%s\n", buf);
	return 0;
}

static unsigned short icmp_sum(const unsigned char *p, size_t n)
{
	uint32_t s = 0;
	size_t i;

	for (i = 0; i + 1 < n; i += 2)
		s += (uint32_t)(p[i] << 8 | p[i + 1]);
	if (n & 1)
		s += (uint32_t)p[n - 1] << 8;
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (unsigned short)~s;
}

static int cmd_icmp(char **pos)
{
	unsigned char req[16] = {8,   0,   0,	0,   0,	  0,   0,   1,
				 'n', 'e', 't', 'p', 'r', 'o', 'b', 'e'};
	unsigned char buf[1500], *m;
	const char *word;
	struct addr a;
	ssize_t n;
	int fd, v6, id, sum;

	snprintf(o.target, sizeof o.target, "icmp %s", pos[0]);
	if ((word = resolve(pos[0], 0, &a)))
		return fail(word, "could not resolve %s", pos[0]);
	v6 = a.ss.ss_family == AF_INET6;
	fd = socket(a.ss.ss_family, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    v6 ? IPPROTO_ICMPV6 : IPPROTO_ICMP);
	if (fd < 0)
		return fail_errno("raw socket");
	id = getpid() & 0xffff;
	req[0] = v6 ? 128 : 8;
	req[4] = (unsigned char)(id >> 8);
	req[5] = (unsigned char)id;
	if (!v6) { /* the kernel sums ICMPv6 itself */
		sum = icmp_sum(req, sizeof req);
		req[2] = (unsigned char)(sum >> 8);
		req[3] = (unsigned char)sum;
	}
	if (connect(fd, (struct sockaddr *)&a.ss, a.len) || send_all(fd, req, sizeof req))
		return fail_errno("send");
	while ((n = recv_wait(fd, buf, sizeof buf)) > 0) {
		m = buf;
		if (!v6) /* raw IPv4 sockets get the IP header */
			m += (buf[0] & 0x0f) * 4;
		if (m + 8 > buf + n)
			continue;
		if (m[0] == (v6 ? 129 : 0) && (m[4] << 8 | m[5]) == id) {
			close(fd);
			printf("reply\n");
			return 0;
		}
		if (m[0] == (v6 ? 1 : 3)) { /* unreachable: is it about our echo? */
			unsigned char *in = m + 8 + (v6 ? 40 : (m[8] & 0x0f) * 4);

			if (in + 8 <= buf + n && (in[4] << 8 | in[5]) == id) {
				close(fd);
				return fail("unreachable", "destination unreachable");
			}
		}
	}
	close(fd);
	return fail_errno("no reply");
}

static int cmd_quic(char **pos)
{
	unsigned char p[1200] = {0xc3, 0, 0, 0, 1}, buf[2048];
	ssize_t n;
	int fd, ret;

	if ((fd = connect_to(pos, SOCK_DGRAM, &ret)) < 0)
		return ret;
	/* long header, Initial, 4-byte packet number, version 1; connection
	 * ids of 8 bytes; no token; the length of the rest; then the packet
	 * number and a payload, random as an encrypted one looks */
	p[5] = 8;
	fill_random(p + 6, 8);
	p[14] = 8;
	fill_random(p + 15, 8);
	p[23] = 0;
	put16(p + 24, 0x4000 | (sizeof p - 26));
	fill_random(p + 26, sizeof p - 26);
	if (send_all(fd, p, sizeof p) || (n = recv_wait(fd, buf, sizeof buf)) < 0)
		return fail_errno("quic");
	close(fd);
	printf("reply %zd bytes\n", n);
	return 0;
}

static const struct command {
	const char *name;
	int nargs; /* positional arguments */
	int (*run)(char **pos);
} commands[] = {
    {.name = "tcp", .nargs = 2, .run = cmd_tcp},
    {.name = "udp", .nargs = 2, .run = cmd_udp},
    {.name = "dns", .nargs = 1, .run = cmd_dns},
    {.name = "tls", .nargs = 2, .run = cmd_tls},
    {.name = "http", .nargs = 2, .run = cmd_http},
    {.name = "icmp", .nargs = 1, .run = cmd_icmp},
    {.name = "quic", .nargs = 2, .run = cmd_quic},
};

static int usage(int ret)
{
	fputs(usage_text, ret ? stderr : stdout);
	return ret;
}

int main(int argc, char **argv)
{
	struct {
		const char *opt, **val;
	} opts[] = {{"--send", &o.send},     {"--expect", &o.expect}, {"--type", &o.type},
		    {"--server", &o.server}, {"--sni", &o.sni},	      {"--host", &o.host},
		    {"--path", &o.path}};
	const struct command *cmd = NULL;
	char *pos[2], *end;
	double timeout = 3;
	int i, j, npos = 0;
	size_t k;

	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
		return usage(argc < 2 ? EXIT_USAGE : 0);
	for (k = 0; k < sizeof commands / sizeof *commands; k++)
		if (!strcmp(argv[1], commands[k].name))
			cmd = &commands[k];
	if (!cmd)
		return usage(EXIT_USAGE);
	for (i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--tcp")) {
			o.dns_tcp = 1;
			continue;
		}
		if (!strcmp(argv[i], "--timeout") || !strcmp(argv[i], "-t")) {
			timeout = i + 1 < argc ? strtod(argv[++i], &end) : 0;
			if (timeout <= 0 || *end)
				return usage(EXIT_USAGE);
			continue;
		}
		for (j = 0; j < (int)(sizeof opts / sizeof *opts); j++)
			if (!strcmp(argv[i], opts[j].opt))
				break;
		if (j < (int)(sizeof opts / sizeof *opts) && i + 1 < argc)
			*opts[j].val = argv[++i];
		else if (argv[i][0] == '-' || npos == cmd->nargs)
			return usage(EXIT_USAGE);
		else
			pos[npos++] = argv[i];
	}
	if (npos != cmd->nargs ||
	    (cmd->nargs == 2 && (atoi(pos[1]) <= 0 || atoi(pos[1]) > 65535)))
		return usage(EXIT_USAGE);
	snprintf(o.target, sizeof o.target, "%s", pos[0]);
	o.deadline = now_ms() + (int64_t)(timeout * 1000);
	setvbuf(stdout, NULL, _IOLBF, 0);
	return cmd->run(pos);
}
