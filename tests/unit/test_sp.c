/* test_sp.c - the daemon's SP servers (engine/daemon/sp.h) under attack.
 *
 * Each test starts a server in this process, with a request callback that
 * answers from another thread after a random delay (some at once, on the
 * server's own thread, so replies go out of order), or holds requests until
 * the test releases them. Attacks go over real unix sockets and TCP/TLS,
 * from raw clients that speak the wire format of sp.h byte by byte; after
 * each, a fresh nng client (engine/daemon/bus.h) must still be answered
 * promptly, and the server's counters must say what happened. The TLS
 * server authenticates with sb_token_check_request against a tokens file in
 * the test's home, and uses a self-signed certificate made with openssl.
 * SP_LOG=1 prints the servers' log lines; an argument runs only the tests
 * whose names match it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/ssl.h>

#include "engine/daemon/bus.h"
#include "engine/daemon/sp.h"
#include "engine/daemon/token.h"
#include "tests/unit/testutil.h"

#define REQ	 0x30
#define SUB	 0x21
#define ID(i)	 (0x80000000u | (uint32_t)(i))
#define DENY	 "denied: no token"
#define CALL_MS	 5000
#define PROMPT_S 3.0 /* a well-behaved client is answered within */
#define PUB_N	 2000
#define PUB_LEN	 2000

/* --- time, memory --- */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

size_t __sanitizer_get_current_allocated_bytes(void) __attribute__((weak));

/* Bytes the process uses now: what it has allocated, under the sanitizers
 * (exact), else its resident set (pages: noisy by some hundred KiB). */
static size_t mem_used(void)
{
	unsigned long size = 0, rss = 0;
	FILE *f;

	if (__sanitizer_get_current_allocated_bytes)
		return __sanitizer_get_current_allocated_bytes();
	if ((f = fopen("/proc/self/statm", "re"))) {
		if (fscanf(f, "%lu %lu", &size, &rss) != 2)
			rss = 0;
		fclose(f);
	}
	return rss * (size_t)sysconf(_SC_PAGESIZE);
}

/* --- the server under test --- */

struct pend {
	sb_sp_req *req;
	void *body;
	size_t len;
	double due;
	int held;
	struct pend *next;
};

struct fx {
	char *home;
	char api[200], events[200], url[64], cert[200], key[200];
	char token[SB_TOKEN_HEX];
	int tls, port;
	sb_sp *sp;
	struct sb_sp_limits lim;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct pend *q;
	int hold, stop, quit;
	pthread_t th;
	unsigned outstanding, max_outstanding, seen;
	uint64_t rng;
	char who[64];
	int remote;
	atomic_int logs;
};

static void fx_answer(struct pend *p)
{
	sb_sp_reply(p->req, p->body, p->len);
	free(p->body);
	free(p);
}

/* The answering thread: replies to each queued request when it is due,
 * earliest first, so replies leave in another order than requests came. */
static void *fx_thread(void *arg)
{
	struct fx *f = arg;

	pthread_mutex_lock(&f->mu);
	while ((!f->stop || f->q) && !f->quit) {
		struct pend **best = NULL;
		double now = now_s();
		for (struct pend **pp = &f->q; *pp; pp = &(*pp)->next)
			if (!(*pp)->held && (!best || (*pp)->due < (*best)->due))
				best = pp;
		if (best && (*best)->due <= now) {
			struct pend *p = *best;
			*best = p->next;
			f->outstanding--;
			pthread_mutex_unlock(&f->mu);
			fx_answer(p);
			pthread_mutex_lock(&f->mu);
			continue;
		}
		if (f->stop && !best) {
			/* held requests at the end: answered now */
			for (struct pend *p = f->q; p; p = p->next)
				p->held = 0;
			continue;
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 2000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&f->cv, &f->mu, &ts);
	}
	pthread_mutex_unlock(&f->mu);
	return NULL;
}

static void fx_request(void *ctx, sb_sp_req *req, void *body, size_t len)
{
	struct fx *f = ctx;
	struct pend *p = calloc(1, sizeof *p);
	int now;

	assert_non_null(p);
	p->req = req;
	p->body = body;
	p->len = len;
	pthread_mutex_lock(&f->mu);
	f->seen++;
	f->outstanding++;
	if (f->outstanding > f->max_outstanding)
		f->max_outstanding = f->outstanding;
	snprintf(f->who, sizeof f->who, "%s", sb_sp_req_who(req));
	f->remote = sb_sp_req_remote(req);
	p->held = f->hold;
	now = !p->held && tu_rand(&f->rng) % 4 == 0;
	if (now) {
		f->outstanding--;
	} else {
		p->due = now_s() + (double)(tu_rand(&f->rng) % 20) / 1000.0;
		p->next = f->q;
		f->q = p;
		pthread_cond_signal(&f->cv);
	}
	pthread_mutex_unlock(&f->mu);
	if (now)
		fx_answer(p); /* on the server's thread */
}

static int fx_authenticate(void *ctx, const void *body, size_t len, int complete,
			   char *who, size_t cap)
{
	struct fx *f = ctx;

	return sb_token_check_request(f->home, body, len, complete, who, cap);
}

static void fx_log(void *ctx, const char *line)
{
	struct fx *f = ctx;

	if (getenv("SP_LOG"))
		fprintf(stderr, "log: %s\n", line);
	atomic_fetch_add(&f->logs, 1);
}

static const struct sb_sp_ops fx_ops = {
    .request = fx_request,
    .authenticate = fx_authenticate,
    .log = fx_log,
};

/* Limits short enough that deadlines come within a second or two. */
static struct sb_sp_limits short_limits(void)
{
	struct sb_sp_limits l = {0};

	l.max_conns = 64;
	l.max_conns_per_peer = 48;
	l.accept_rate = 200;
	l.accept_burst = 200;
	l.handshake_s = 1.0;
	l.unauth_idle_s = 2.0;
	l.idle_s = 30;
	l.max_request = 64 << 10;
	l.preauth_max = 1024;
	l.max_inflight = 16;
	l.max_buffered = 4 << 20;
	l.pub_queue = 32;
	l.max_denied = 4;
	return l;
}

static int free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof sa;
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

/* Starts a server: unix sockets api.sock (REP) and events.sock (PUB) in a
 * fresh home, or with tls a TLS listener on a free port of 127.0.0.1. */
static struct fx *fx_open(const struct sb_sp_limits *lim, int tls)
{
	struct fx *f = calloc(1, sizeof *f);
	struct sb_sp_opts o = {0};
	char cmd[700];

	assert_non_null(f);
	f->home = tu_tmpdir();
	f->tls = tls;
	f->lim = *lim;
	f->rng = 0x5eed ^ (uint64_t)time(NULL);
	pthread_mutex_init(&f->mu, NULL);
	pthread_cond_init(&f->cv, NULL);
	snprintf(f->api, sizeof f->api, "%s/api.sock", f->home);
	snprintf(f->events, sizeof f->events, "%s/events.sock", f->home);
	o.name = tls ? "remote" : "local";
	o.ops = &fx_ops;
	o.ctx = f;
	o.limits = *lim;
	o.deny_reply = DENY;
	o.deny_len = strlen(DENY);
	assert_int_equal(sb_sp_open(&o, &f->sp), SB_OK);
	if (tls) {
		snprintf(f->cert, sizeof f->cert, "%s/cert.pem", f->home);
		snprintf(f->key, sizeof f->key, "%s/key.pem", f->home);
		snprintf(
		    cmd, sizeof cmd,
		    "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
		    "-nodes -keyout %s -out %s -days 2 -subj /CN=127.0.0.1 "
		    ">/dev/null 2>&1",
		    f->key, f->cert);
		assert_int_equal(system(cmd), 0);
		assert_int_equal(sb_token_create(f->home, "tester", f->token), SB_OK);
		f->port = free_port();
		snprintf(f->url, sizeof f->url, "tls+tcp://127.0.0.1:%d", f->port);
		assert_int_equal(sb_sp_listen_tls(f->sp, f->url, f->cert, f->key), SB_OK);
	} else {
		assert_int_equal(sb_sp_listen_ipc(f->sp, f->api, SB_SP_PROTO_REP), SB_OK);
		assert_int_equal(sb_sp_listen_ipc(f->sp, f->events, SB_SP_PROTO_PUB),
				 SB_OK);
	}
	assert_int_equal(pthread_create(&f->th, NULL, fx_thread, f), 0);
	assert_int_equal(sb_sp_start(f->sp), SB_OK);
	return f;
}

/* Holds new requests (on) or lets every held one be answered (off). */
static void fx_hold(struct fx *f, int on)
{
	pthread_mutex_lock(&f->mu);
	f->hold = on;
	if (!on)
		for (struct pend *p = f->q; p; p = p->next)
			p->held = 0;
	pthread_cond_signal(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

static unsigned fx_get(struct fx *f, unsigned *field)
{
	unsigned v;

	pthread_mutex_lock(&f->mu);
	v = *field;
	pthread_mutex_unlock(&f->mu);
	return v;
}

static struct sb_sp_stats fx_stats(struct fx *f)
{
	struct sb_sp_stats st;

	sb_sp_stats(f->sp, &st);
	return st;
}

/* Waits up to secs for the server to hold exactly n connections. */
static void fx_wait_conns(struct fx *f, uint64_t n, double secs)
{
	double end = now_s() + secs;

	while (fx_stats(f).conns != n && now_s() < end)
		sleep_ms(10);
	assert_int_equal(fx_stats(f).conns, n);
}

/* Waits up to a second for the server's count of refused connections
 * to reach n (it counts just after closing them). */
static void fx_wait_refused(struct fx *f, uint64_t n)
{
	double end = now_s() + 1;

	while (fx_stats(f).refused_conns < n && now_s() < end)
		sleep_ms(5);
	assert_int_equal(fx_stats(f).refused_conns, n);
}

/* Waits up to secs for the callback to have seen n requests. */
static void fx_wait_seen(struct fx *f, unsigned n, double secs)
{
	double end = now_s() + secs;

	while (fx_get(f, &f->seen) < n && now_s() < end)
		sleep_ms(5);
	assert_int_equal(fx_get(f, &f->seen), n);
}

/* Answers everything, closes the server, and removes the home. */
static void fx_close(struct fx *f)
{
	double end = now_s() + 5;

	fx_hold(f, 0);
	while (fx_get(f, &f->outstanding) && now_s() < end)
		sleep_ms(5);
	assert_int_equal(fx_get(f, &f->outstanding), 0);
	sb_sp_close(f->sp);
	pthread_mutex_lock(&f->mu);
	f->stop = 1;
	pthread_cond_signal(&f->cv);
	pthread_mutex_unlock(&f->mu);
	pthread_join(f->th, NULL);
	pthread_mutex_destroy(&f->mu);
	pthread_cond_destroy(&f->cv);
	tu_rmrf(f->home);
	free(f);
}

/* A msgpack request {op: "health", pad: PAD bytes, token: TOKEN} in sb
 * (pad 0: no pad field; token NULL: no token field), or with token_first
 * {token, op, pad}. */
static void pack_request(msgpack_sbuffer *sb, size_t pad, const char *token,
			 int token_first)
{
	msgpack_packer pk;
	char *p = calloc(1, pad + 1);
	sb_mapw m;

	assert_non_null(p);
	memset(p, 'x', pad);
	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	if (token && token_first)
		sb_mapw_str(&m, "token", token);
	sb_mapw_str(&m, "op", "health");
	if (pad)
		sb_mapw_strn(&m, "pad", p, pad);
	if (token && !token_first)
		sb_mapw_str(&m, "token", token);
	assert_int_equal(sb_mapw_end(&m), SB_OK);
	free(p);
}

/* A fresh nng client is answered promptly (its own echo comes back), over
 * the unix socket or, for a TLS server, over TLS with the token. */
static void fx_healthy(struct fx *f)
{
	static unsigned n;
	msgpack_sbuffer sb;
	sb_client *c = NULL;
	void *rep = NULL;
	size_t replen = 0;
	double t0 = now_s();
	int rc;

	if (f->tls) {
		pack_request(&sb, 0, f->token, 0);
	} else {
		char b[32];
		msgpack_sbuffer_init(&sb);
		msgpack_sbuffer_write(&sb, b,
				      (size_t)snprintf(b, sizeof b, "health %u", n++));
	}
	assert_int_equal(
	    sb_client_open(f->tls ? f->url : f->home, f->tls ? f->cert : NULL, &c),
	    SB_OK);
	rc = sb_client_call(c, sb.data, sb.size, CALL_MS, &rep, &replen);
	if (rc)
		fail_msg("a well-behaved client was not answered: %s", sb_errmsg(rc));
	if (now_s() - t0 > PROMPT_S)
		fail_msg("a well-behaved client waited %.2f s", now_s() - t0);
	assert_int_equal(replen, sb.size);
	assert_memory_equal(rep, sb.data, sb.size);
	sb_bus_free(rep);
	sb_client_close(c);
	msgpack_sbuffer_destroy(&sb);
	if (f->tls)
		assert_string_equal(f->who, "tester");
}

/* --- a raw client --- */

struct rc {
	int fd, tls, timeout_ms;
	mbedtls_ssl_context ssl;
	mbedtls_ssl_config conf;
	mbedtls_entropy_context ent;
	mbedtls_ctr_drbg_context drbg;
};

static int rc_bio_send(void *ctx, const unsigned char *b, size_t n)
{
	struct rc *r = ctx;
	ssize_t w = send(r->fd, b, n, MSG_NOSIGNAL);

	if (w < 0 && errno == EAGAIN)
		return MBEDTLS_ERR_SSL_WANT_WRITE; /* a non-blocking socket */
	return w >= 0 ? (int)w : MBEDTLS_ERR_SSL_INTERNAL_ERROR;
}

static int rc_bio_recv(void *ctx, unsigned char *b, size_t n)
{
	struct rc *r = ctx;
	struct pollfd p = {.fd = r->fd, .events = POLLIN};
	ssize_t got;

	if (poll(&p, 1, r->timeout_ms) == 0)
		return MBEDTLS_ERR_SSL_TIMEOUT;
	got = recv(r->fd, b, n, 0);
	return got >= 0 ? (int)got : MBEDTLS_ERR_SSL_INTERNAL_ERROR;
}

static struct rc *rc_ipc(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct rc *r = calloc(1, sizeof *r);

	assert_non_null(r);
	r->timeout_ms = 3000;
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
	r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(r->fd >= 0);
	assert_int_equal(connect(r->fd, (struct sockaddr *)&sa, sizeof sa), 0);
	return r;
}

static struct rc *rc_tcp(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port)};
	struct rc *r = calloc(1, sizeof *r);
	int one = 1;

	assert_non_null(r);
	r->timeout_ms = 3000;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	r->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(r->fd >= 0);
	setsockopt(r->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	assert_int_equal(connect(r->fd, (struct sockaddr *)&sa, sizeof sa), 0);
	return r;
}

/* Completes a TLS handshake on r (the certificate is not checked: the
 * attacker does not care). Returns 0 or mbedtls's error. */
static int rc_tls(struct rc *r)
{
	int rc;

	r->tls = 1;
	mbedtls_ssl_init(&r->ssl);
	mbedtls_ssl_config_init(&r->conf);
	mbedtls_entropy_init(&r->ent);
	mbedtls_ctr_drbg_init(&r->drbg);
	assert_int_equal(mbedtls_ctr_drbg_seed(&r->drbg, mbedtls_entropy_func, &r->ent,
					       (const unsigned char *)"t", 1),
			 0);
	assert_int_equal(mbedtls_ssl_config_defaults(&r->conf, MBEDTLS_SSL_IS_CLIENT,
						     MBEDTLS_SSL_TRANSPORT_STREAM,
						     MBEDTLS_SSL_PRESET_DEFAULT),
			 0);
	mbedtls_ssl_conf_authmode(&r->conf, MBEDTLS_SSL_VERIFY_NONE);
	mbedtls_ssl_conf_rng(&r->conf, mbedtls_ctr_drbg_random, &r->drbg);
	assert_int_equal(mbedtls_ssl_setup(&r->ssl, &r->conf), 0);
	mbedtls_ssl_set_bio(&r->ssl, r, rc_bio_send, rc_bio_recv, NULL);
	while ((rc = mbedtls_ssl_handshake(&r->ssl)) == MBEDTLS_ERR_SSL_WANT_READ ||
	       rc == MBEDTLS_ERR_SSL_WANT_WRITE)
		;
	return rc;
}

static void rc_close(struct rc *r)
{
	if (!r)
		return;
	if (r->tls) {
		mbedtls_ssl_free(&r->ssl);
		mbedtls_ssl_config_free(&r->conf);
		mbedtls_ctr_drbg_free(&r->drbg);
		mbedtls_entropy_free(&r->ent);
	}
	close(r->fd);
	free(r);
}

/* Writes n bytes. Returns 0, or -1 when the server has closed. */
static int rc_write(struct rc *r, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n) {
		ssize_t w;
		if (r->tls) {
			int x = mbedtls_ssl_write(&r->ssl, b, n);
			if (x == MBEDTLS_ERR_SSL_WANT_WRITE ||
			    x == MBEDTLS_ERR_SSL_WANT_READ)
				continue;
			w = x;
		} else {
			w = send(r->fd, b, n, MSG_NOSIGNAL);
		}
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Reads exactly n bytes within the client's timeout. Returns 1, 0 when the
 * server closed the connection, -1 on a timeout. */
static int rc_read(struct rc *r, void *p, size_t n)
{
	uint8_t *b = p;

	while (n) {
		ssize_t got;
		if (r->tls) {
			int x = mbedtls_ssl_read(&r->ssl, b, n);
			if (x == MBEDTLS_ERR_SSL_WANT_READ)
				continue;
			if (x == MBEDTLS_ERR_SSL_TIMEOUT)
				return -1;
			got = x < 0 ? 0 : x;
		} else {
			struct pollfd pf = {.fd = r->fd, .events = POLLIN};
			if (poll(&pf, 1, r->timeout_ms) == 0)
				return -1;
			got = recv(r->fd, b, n, 0);
			if (got < 0)
				got = 0; /* reset by the server */
		}
		if (got == 0)
			return 0;
		b += got;
		n -= (size_t)got;
	}
	return 1;
}

/* 1 when the server closes r within secs (anything it sends first is
 * read and dropped), 0 when it is still open then. */
static int rc_closed_within(struct rc *r, double secs)
{
	double end = now_s() + secs;
	uint8_t b[4096];

	while (now_s() < end) {
		int ms = (int)((end - now_s()) * 1000) + 1;
		if (r->tls) {
			r->timeout_ms = ms;
			int x = mbedtls_ssl_read(&r->ssl, b, sizeof b);
			if (x == MBEDTLS_ERR_SSL_TIMEOUT)
				return 0;
			if (x <= 0 && x != MBEDTLS_ERR_SSL_WANT_READ)
				return 1;
			continue;
		}
		struct pollfd pf = {.fd = r->fd, .events = POLLIN};
		if (poll(&pf, 1, ms) == 0)
			return 0;
		if (recv(r->fd, b, sizeof b, 0) <= 0)
			return 1;
	}
	return 0;
}

static const uint8_t hdr_req[8] = {0, 'S', 'P', 0, 0, REQ, 0, 0};
static const uint8_t hdr_sub[8] = {0, 'S', 'P', 0, 0, SUB, 0, 0};

/* Sends the client's header and checks the server's. */
static void rc_hello(struct rc *r, int proto)
{
	uint8_t h[8];

	assert_int_equal(rc_write(r, proto == SUB ? hdr_sub : hdr_req, 8), 0);
	assert_int_equal(rc_read(r, h, 8), 1);
	assert_memory_equal(h, "\0SP\0", 4);
	assert_int_equal(h[5], proto == SUB ? SB_SP_PROTO_PUB : SB_SP_PROTO_REP);
}

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static void put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

/* Appends a message (the header for tls or not, the nw words of bt, the
 * body) to sb. */
static void frame(msgpack_sbuffer *sb, int tls, const uint32_t *bt, size_t nw,
		  const void *body, size_t len)
{
	uint8_t h[9];

	h[0] = 1;
	put_be64(h + !tls, 4 * nw + len);
	msgpack_sbuffer_write(sb, (const char *)h, tls ? 8 : 9);
	for (size_t i = 0; i < nw; i++) {
		uint8_t w[4];
		put_be32(w, bt[i]);
		msgpack_sbuffer_write(sb, (const char *)w, 4);
	}
	msgpack_sbuffer_write(sb, body, len);
}

/* Appends a request with id and body to sb. */
static void frame_req(msgpack_sbuffer *sb, int tls, uint32_t id, const void *body,
		      size_t len)
{
	frame(sb, tls, &id, 1, body, len);
}

/* Reads one reply: its backtrace (up to 9 words) and body (the caller
 * frees). Returns 1, 0 when closed, -1 on a timeout. */
static int rc_recv(struct rc *r, uint32_t *bt, size_t *nw, uint8_t **body, size_t *len)
{
	uint8_t h[9], w[4];
	uint64_t n = 0;
	int x;

	*nw = 0;
	*body = NULL;
	if ((x = rc_read(r, h, r->tls ? 8 : 9)) != 1)
		return x;
	if (!r->tls)
		assert_int_equal(h[0], 1);
	for (int i = 0; i < 8; i++)
		n = n << 8 | h[i + !r->tls];
	assert_true(n >= 4 && n < (64u << 20));
	do {
		assert_true(*nw < 9);
		if ((x = rc_read(r, w, 4)) != 1)
			return x;
		bt[*nw] = (uint32_t)w[0] << 24 | (uint32_t)w[1] << 16 |
			  (uint32_t)w[2] << 8 | w[3];
		n -= 4;
	} while (!(bt[(*nw)++] & 0x80000000u));
	*len = (size_t)n;
	*body = malloc(n + 1);
	assert_non_null(*body);
	if ((x = rc_read(r, *body, (size_t)n)) != 1) {
		free(*body);
		*body = NULL;
		return x;
	}
	(*body)[n] = 0;
	return 1;
}

/* Reads one reply and checks it is the echo of body with id. */
static void rc_expect(struct rc *r, uint32_t id, const void *body, size_t len)
{
	uint32_t bt[9];
	size_t nw, n;
	uint8_t *b;

	assert_int_equal(rc_recv(r, bt, &nw, &b, &n), 1);
	assert_int_equal(nw, 1);
	assert_int_equal(bt[0], id);
	assert_int_equal(n, len);
	assert_memory_equal(b, body, len);
	free(b);
}

/* Connects, says hello, sends req as one write; the caller closes. */
static struct rc *rc_send_new(struct fx *f, const msgpack_sbuffer *req)
{
	struct rc *r = f->tls ? rc_tcp(f->port) : rc_ipc(f->api);

	if (f->tls)
		assert_int_equal(rc_tls(r), 0);
	rc_hello(r, REQ);
	if (req)
		assert_int_equal(rc_write(r, req->data, req->size), 0);
	return r;
}

static struct rc *subscribe(struct fx *f);

/* ================= unix sockets ================= */

/* Pipelined requests on one connection, answered in another order, each
 * reply matched to its id; an empty body; backtraces of 8 words (answered
 * with the same 8) and 9 (the connection is closed). */
static void test_ipc_pipelined(void **state)
{
	struct sb_sp_limits lim = short_limits();
	struct fx *f;
	struct rc *r;
	msgpack_sbuffer sb;
	int got[200] = {0}, inorder = 1;
	uint32_t bt[9];
	size_t nw, n;
	uint8_t *b;

	(void)state;
	lim.max_inflight = 64;
	f = fx_open(&lim, 0);
	r = rc_send_new(f, NULL);
	msgpack_sbuffer_init(&sb);
	for (int i = 0; i < 200; i++) {
		char body[32];
		frame_req(&sb, 0, ID(i), body,
			  (size_t)snprintf(body, sizeof body, "req %d", i));
	}
	assert_int_equal(rc_write(r, sb.data, sb.size), 0);
	for (int i = 0; i < 200; i++) {
		char want[32];
		assert_int_equal(rc_recv(r, bt, &nw, &b, &n), 1);
		assert_int_equal(nw, 1);
		uint32_t id = bt[0] & 0x7fffffff;
		assert_true(id < 200);
		assert_int_equal(got[id], 0);
		got[id] = 1;
		snprintf(want, sizeof want, "req %u", id);
		assert_string_equal((char *)b, want);
		if (id != (uint32_t)i)
			inorder = 0;
		free(b);
	}
	assert_false(inorder); /* the client matched them by id */
	msgpack_sbuffer_destroy(&sb);

	/* an empty body */
	msgpack_sbuffer_init(&sb);
	frame_req(&sb, 0, ID(7), "", 0);
	assert_int_equal(rc_write(r, sb.data, sb.size), 0);
	rc_expect(r, ID(7), "", 0);
	msgpack_sbuffer_destroy(&sb);

	/* 8 words: 7 hops and the id, all carried back */
	uint32_t eight[8] = {1, 2, 3, 4, 5, 6, 7, ID(8)};
	msgpack_sbuffer_init(&sb);
	frame(&sb, 0, eight, 8, "hops", 4);
	assert_int_equal(rc_write(r, sb.data, sb.size), 0);
	assert_int_equal(rc_recv(r, bt, &nw, &b, &n), 1);
	assert_int_equal(nw, 8);
	assert_memory_equal(bt, eight, sizeof eight);
	assert_int_equal(n, 4);
	free(b);
	msgpack_sbuffer_destroy(&sb);
	assert_int_equal(fx_stats(f).requests, 202);
	assert_int_equal(fx_stats(f).dropped_conns, 0);

	/* 9 words: too many hops */
	uint32_t nine[9] = {1, 2, 3, 4, 5, 6, 7, 8, ID(9)};
	msgpack_sbuffer_init(&sb);
	frame(&sb, 0, nine, 9, "hops", 4);
	assert_int_equal(rc_write(r, sb.data, sb.size), 0);
	assert_true(rc_closed_within(r, 1.0));
	msgpack_sbuffer_destroy(&sb);
	rc_close(r);
	assert_int_equal(fx_stats(f).dropped_conns, 1);
	assert_int_equal(fx_stats(f).requests, 202);
	fx_healthy(f);
	fx_wait_conns(f, 0, 2);
	fx_close(f);
}

/* Random bytes, with or without a valid header first: each such
 * connection is closed (or held to its handshake deadline), nothing is
 * delivered, and the server serves the next client. */
static void test_ipc_garbage(void **state)
{
	struct fx *f = fx_open(
	    &(struct sb_sp_limits){.handshake_s = 1.0, .max_request = 1 << 20}, 0);
	uint64_t seed = 42;
	struct sb_sp_stats st;

	(void)state;
	/* connect and close at once: the server's header write fails */
	for (int i = 0; i < 50; i++)
		rc_close(rc_ipc(f->api));
	fx_wait_conns(f, 0, 2);
	assert_int_equal(fx_stats(f).dropped_conns, 0);
	fx_healthy(f);
	for (int i = 0; i < 40; i++) {
		uint8_t junk[2048];
		size_t n = 16 + tu_rand(&seed) % (sizeof junk - 16);
		struct rc *r = rc_ipc(f->api);
		for (size_t k = 0; k < n; k++)
			junk[k] = (uint8_t)tu_rand(&seed);
		if (i % 2)
			assert_int_equal(rc_write(r, hdr_req, 8), 0);
		else if (junk[0] == 0)
			junk[0] = 0xff; /* not an SP header by chance */
		rc_write(r, junk, n);
		assert_true(rc_closed_within(r, 2.0));
		rc_close(r);
	}
	fx_wait_conns(f, 0, 2);
	st = fx_stats(f);
	assert_int_equal(st.accepted, 50 + 1 + 40);
	assert_int_equal(st.dropped_conns, 40);
	assert_int_equal(st.requests, 1); /* the well-behaved one */
	assert_int_equal(fx_get(f, &f->seen), 1);
	fx_healthy(f);
	fx_close(f);
}

/* Every prefix of a valid header and message, then the connection closes:
 * no request is delivered until the whole message is in, and nothing
 * breaks for the next client. The same bytes one per write are answered. */
static void test_ipc_prefixes_and_split(void **state)
{
	struct fx *f = fx_open(&(struct sb_sp_limits){.handshake_s = 1.0}, 0);
	msgpack_sbuffer sb;
	struct rc *r;

	(void)state;
	msgpack_sbuffer_init(&sb);
	msgpack_sbuffer_write(&sb, (const char *)hdr_req, 8);
	frame_req(&sb, 0, ID(1), "hello", 5);
	for (size_t k = 0; k < sb.size; k++) {
		r = rc_ipc(f->api);
		if (k)
			assert_int_equal(rc_write(r, sb.data, k), 0);
		sleep_ms(2);
		rc_close(r);
	}
	fx_wait_conns(f, 0, 2);
	assert_int_equal(fx_get(f, &f->seen), 0);
	assert_int_equal(fx_stats(f).requests, 0);
	assert_int_equal(fx_stats(f).accepted, sb.size);

	/* one byte per write, three messages; the replies come */
	frame_req(&sb, 0, ID(2), "", 0);
	frame_req(&sb, 0, ID(3), "third", 5);
	r = rc_ipc(f->api);
	for (size_t k = 0; k < sb.size; k++) {
		assert_int_equal(rc_write(r, sb.data + k, 1), 0);
		if (k % 3 == 0)
			sleep_ms(1);
	}
	uint8_t h[8];
	assert_int_equal(rc_read(r, h, 8), 1);
	for (int i = 0; i < 3; i++) {
		uint32_t bt[9];
		size_t nw, n;
		uint8_t *b;
		assert_int_equal(rc_recv(r, bt, &nw, &b, &n), 1);
		assert_int_equal(nw, 1);
		const char *want = bt[0] == ID(1)   ? "hello"
				   : bt[0] == ID(2) ? ""
						    : "third";
		assert_true(bt[0] >= ID(1) && bt[0] <= ID(3));
		assert_int_equal(n, strlen(want));
		assert_memory_equal(b, want, n);
		free(b);
	}
	rc_close(r);
	msgpack_sbuffer_destroy(&sb);
	assert_int_equal(fx_stats(f).requests, 3);
	assert_int_equal(fx_stats(f).dropped_conns, 0);
	fx_healthy(f);
	fx_close(f);
}

/* Declared lengths: 2^63, just over max_request (with one word of
 * backtrace, and with eight), shorter than an id, a word cut short; a type
 * byte other than 1; a header of the wrong protocol. Each costs only its
 * connection; a body of exactly max_request is served. */
static void test_ipc_lengths(void **state)
{
	struct sb_sp_limits lim = {.max_request = 4096, .handshake_s = 1.0};
	struct fx *f = fx_open(&lim, 0);
	uint8_t *big = calloc(1, 8192);
	msgpack_sbuffer sb;
	struct rc *r;
	uint64_t drops = 0;

	(void)state;
	assert_non_null(big);
	struct {
		const char *what;
		uint64_t len;
		uint8_t type;
		size_t send; /* body bytes actually sent */
	} bad[] = {
	    {"2^63", 1ull << 63, 1, 16},
	    {"2^64-1", UINT64_MAX, 1, 16},
	    {"max_request+1 body", 4 + 4096 + 1, 1, 4 + 4097},
	    {"max_request+28 body", 4 + 4096 + 28, 1, 4 + 4096 + 28},
	    {"shorter than an id", 3, 1, 3},
	    {"zero", 0, 1, 0},
	    {"type 0", 8, 0, 8},
	    {"type 2", 8, 2, 8},
	    {"type 0xff", 8, 0xff, 8},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint8_t h[9];
		r = rc_send_new(f, NULL);
		h[0] = bad[i].type;
		put_be64(h + 1, bad[i].len);
		assert_int_equal(rc_write(r, h, 9), 0);
		put_be32(big, ID(1));
		rc_write(r, big, bad[i].send);
		if (!rc_closed_within(r, 1.5))
			fail_msg("a request with %s stayed open", bad[i].what);
		rc_close(r);
		drops++;
		fx_wait_conns(f, 0, 1);
		assert_int_equal(fx_stats(f).dropped_conns, drops);
	}
	assert_int_equal(fx_get(f, &f->seen), 0);

	/* a backtrace word cut short by the declared length */
	r = rc_send_new(f, NULL);
	msgpack_sbuffer_init(&sb);
	uint8_t h6[9 + 6] = {1};
	put_be64(h6 + 1, 6);
	put_be32(h6 + 9, 1); /* a hop, not the id: another word must follow */
	assert_int_equal(rc_write(r, h6, sizeof h6), 0);
	assert_true(rc_closed_within(r, 1.5));
	rc_close(r);
	drops++;

	/* the wrong protocol: a SUB header on the REP socket */
	r = rc_ipc(f->api);
	assert_int_equal(rc_write(r, hdr_sub, 8), 0);
	assert_true(rc_closed_within(r, 1.5));
	rc_close(r);
	drops++;
	fx_wait_conns(f, 0, 1);
	assert_int_equal(fx_stats(f).dropped_conns, drops);

	/* exactly max_request bytes of body, with 8 words of backtrace */
	uint32_t eight[8] = {1, 2, 3, 4, 5, 6, 7, ID(5)};
	memset(big, 'b', 4096);
	frame(&sb, 0, eight, 8, big, 4096);
	r = rc_send_new(f, &sb);
	uint32_t bt[9];
	size_t nw, n;
	uint8_t *b;
	assert_int_equal(rc_recv(r, bt, &nw, &b, &n), 1);
	assert_int_equal(nw, 8);
	assert_int_equal(n, 4096);
	free(b);
	rc_close(r);
	msgpack_sbuffer_destroy(&sb);
	assert_int_equal(fx_get(f, &f->seen), 1);
	free(big);
	fx_healthy(f);
	fx_close(f);
}

/* Connections that close in every state: before the header, mid-header,
 * mid-message header, mid-backtrace, mid-body, with requests in flight
 * (their replies, coming later, are dropped safely and the requests
 * freed: ASan would see a leak or a use after free). */
static void test_ipc_close_states(void **state)
{
	struct fx *f = fx_open(&(struct sb_sp_limits){.handshake_s = 1.0}, 0);
	msgpack_sbuffer sb;
	struct rc *r;

	(void)state;
	msgpack_sbuffer_init(&sb);
	msgpack_sbuffer_write(&sb, (const char *)hdr_req, 8);
	frame_req(&sb, 0, ID(1), "0123456789", 10);
	size_t cuts[] = {0, 3, 8, 8 + 4, 8 + 9, 8 + 9 + 2, 8 + 9 + 4 + 5};
	for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
		r = rc_ipc(f->api);
		rc_write(r, sb.data, cuts[i]);
		if (cuts[i] >= 8) {
			uint8_t h[8];
			assert_int_equal(rc_read(r, h, 8), 1);
		}
		rc_close(r);
	}
	fx_wait_conns(f, 0, 1);
	assert_int_equal(fx_get(f, &f->seen), 0);

	/* requests in flight when the client goes */
	fx_hold(f, 1);
	for (int k = 0; k < 5; k++) {
		msgpack_sbuffer many;
		msgpack_sbuffer_init(&many);
		for (int i = 0; i < 10; i++)
			frame_req(&many, 0, ID(i), "inflight", 8);
		r = rc_send_new(f, &many);
		msgpack_sbuffer_destroy(&many);
		fx_wait_seen(f, 10 * (unsigned)(k + 1), 2);
		rc_close(r);
	}
	fx_wait_conns(f, 0, 1);
	fx_hold(f, 0); /* the replies go to closed connections */
	double end = now_s() + 2;
	while (fx_get(f, &f->outstanding) && now_s() < end)
		sleep_ms(5);
	assert_int_equal(fx_get(f, &f->outstanding), 0);
	assert_int_equal(fx_stats(f).requests, 50);
	assert_int_equal(fx_stats(f).dropped_conns, 0); /* closed by their peers */
	msgpack_sbuffer_destroy(&sb);
	fx_healthy(f);
	fx_close(f);
}

/* A connection that sends nothing, or half a header, is closed at the
 * handshake deadline and counted. */
static void test_ipc_handshake_deadline(void **state)
{
	struct fx *f = fx_open(&(struct sb_sp_limits){.handshake_s = 1.0}, 0);
	struct rc *a = rc_ipc(f->api), *b = rc_ipc(f->api);
	double t0 = now_s();

	(void)state;
	assert_int_equal(rc_write(b, hdr_req, 5), 0);
	assert_true(rc_closed_within(a, 3.0));
	assert_true(rc_closed_within(b, 1.0));
	double took = now_s() - t0;
	assert_true(took >= 0.9 && took < 2.5);
	rc_close(a);
	rc_close(b);
	fx_wait_conns(f, 0, 1);
	assert_int_equal(fx_stats(f).dropped_conns, 2);
	fx_healthy(f);
	fx_close(f);
}

/* A full table of max_conns: a new client still gets in, the connection
 * idle longest (past its header, no request) closed for it; a subscriber
 * goes only when no such one is left; when every connection is busy (a
 * request in flight, or one being read) the new one is refused at once. */
static void test_ipc_max_conns(void **state)
{
	struct fx *f = fx_open(&(struct sb_sp_limits){.max_conns = 8}, 0);
	struct rc *c[8], *x, *y, *sub;
	msgpack_sbuffer sb;
	unsigned seen;

	(void)state;
	for (int i = 0; i < 8; i++) {
		c[i] = rc_ipc(f->api);
		rc_hello(c[i], REQ);
		sleep_ms(20); /* so each has been idle a different time */
	}
	fx_wait_conns(f, 8, 1);
	for (int i = 0; i < 3; i++) {
		x = rc_ipc(f->api);
		rc_hello(x, REQ); /* taken */
		if (!rc_closed_within(c[i], 1.0))
			fail_msg("connection %d, idle longest, was not closed for a new one",
				 i);
		for (int k = i + 1; k < 8; k++)
			assert_false(rc_closed_within(c[k], 0.01));
		rc_close(c[i]);
		c[i] = x;
		sleep_ms(20);
	}
	assert_int_equal(fx_stats(f).refused_conns, 0);
	assert_int_equal(fx_stats(f).dropped_conns, 3);
	assert_int_equal(fx_stats(f).conns, 8);
	fx_healthy(f);
	for (int i = 0; i < 8; i++)
		rc_close(c[i]);
	fx_wait_conns(f, 0, 1);

	/* 6 requests held, one request half sent, one subscriber */
	fx_hold(f, 1);
	seen = fx_get(f, &f->seen);
	msgpack_sbuffer_init(&sb);
	frame_req(&sb, 0, ID(1), "held", 4);
	for (int i = 0; i < 6; i++)
		c[i] = rc_send_new(f, &sb);
	fx_wait_seen(f, seen + 6, 2);
	c[6] = rc_send_new(f, NULL);
	assert_int_equal(rc_write(c[6], sb.data, 5), 0);
	sub = subscribe(f);
	fx_wait_conns(f, 8, 1);
	x = rc_ipc(f->api);
	rc_hello(x, REQ);
	assert_true(rc_closed_within(sub, 1.0));
	rc_close(sub);
	assert_int_equal(rc_write(x, sb.data, sb.size), 0);
	fx_wait_seen(f, seen + 7, 2);
	/* all busy now */
	y = rc_ipc(f->api);
	assert_true(rc_closed_within(y, 1.0));
	rc_close(y);
	fx_wait_refused(f, 1);
	for (int i = 0; i < 6; i++)
		assert_false(rc_closed_within(c[i], 0.01));
	fx_hold(f, 0);
	for (int i = 0; i < 6; i++)
		rc_expect(c[i], ID(1), "held", 4);
	rc_expect(x, ID(1), "held", 4);
	for (int i = 0; i < 7; i++)
		rc_close(c[i]);
	rc_close(x);
	msgpack_sbuffer_destroy(&sb);
	fx_wait_conns(f, 0, 1);
	fx_healthy(f);
	fx_close(f);
}

/* Requests that declare 7 MiB each and send one byte of it, on 6
 * connections, against max_buffered 1 MiB: the server holds what came,
 * not what was declared, so a new client is answered; and a request of
 * 7 MiB sent whole, in pieces, comes back intact. */
static void test_ipc_declared_large(void **state)
{
	struct sb_sp_limits lim = {.max_request = 8 << 20, .max_buffered = 1 << 20};
	struct fx *f = fx_open(&lim, 0);
	size_t big = 7 << 20;
	uint8_t *body = malloc(big), h[13];
	struct rc *r[6];
	uint32_t bt[9];
	size_t nw, n;
	uint8_t *b;

	(void)state;
	assert_non_null(body);
	for (size_t i = 0; i < big; i++)
		body[i] = (uint8_t)(i * 7 + i / 4096);
	h[0] = 1;
	put_be64(h + 1, 4 + big);
	put_be32(h + 9, ID(1));
	for (int i = 0; i < 6; i++) {
		r[i] = rc_send_new(f, NULL);
		assert_int_equal(rc_write(r[i], h, sizeof h), 0);
		assert_int_equal(rc_write(r[i], body, 1), 0);
	}
	sleep_ms(200);
	fx_healthy(f);
	fx_healthy(f);
	/* the first one sends the rest, in uneven pieces */
	for (size_t off = 1, k = 1000; off < big; off += k, k = k * 3 % 200000 + 1) {
		if (k > big - off)
			k = big - off;
		assert_int_equal(rc_write(r[0], body + off, k), 0);
	}
	assert_int_equal(rc_recv(r[0], bt, &nw, &b, &n), 1);
	assert_int_equal(bt[0], ID(1));
	assert_int_equal(n, big);
	assert_memory_equal(b, body, big);
	free(b);
	for (int i = 0; i < 6; i++)
		rc_close(r[i]);
	fx_wait_conns(f, 0, 2);
	assert_int_equal(fx_get(f, &f->seen), 3);
	free(body);
	fx_close(f);
}

/* request_s: a request must be whole within it of its first byte, however
 * its bytes trickle: one stalled mid-body, one mid-header and one sending a
 * byte every 100 ms are each closed after it; a connection idle between
 * requests is not (that is idle_s). */
static void test_ipc_request_deadline(void **state)
{
	struct fx *f = fx_open(&(struct sb_sp_limits){.request_s = 1.0}, 0);
	struct rc *body = rc_send_new(f, NULL), *head = rc_send_new(f, NULL);
	struct rc *idle = rc_send_new(f, NULL), *drip = rc_send_new(f, NULL);
	msgpack_sbuffer sb;
	double t0 = now_s(), took;
	size_t k = 0;

	(void)state;
	msgpack_sbuffer_init(&sb);
	frame_req(&sb, 0, ID(1), "a request that never ends", 25);
	assert_int_equal(rc_write(body, sb.data, sb.size - 5), 0);
	assert_int_equal(rc_write(head, sb.data, 4), 0);
	while (k < sb.size - 1 && rc_write(drip, sb.data + k, 1) == 0 &&
	       now_s() - t0 < 3) {
		k++;
		sleep_ms(100);
		if (rc_closed_within(drip, 0.001))
			break;
	}
	took = now_s() - t0;
	if (took < 0.9 || took > 2.0)
		fail_msg("a trickled request was closed after %.2f s (deadline 1 s)",
			 took);
	assert_true(rc_closed_within(body, 1.0));
	assert_true(rc_closed_within(head, 1.0));
	assert_false(rc_closed_within(idle, 0.5));
	assert_int_equal(fx_stats(f).dropped_conns, 3);
	assert_int_equal(fx_get(f, &f->seen), 0);
	/* the idle one still works */
	msgpack_sbuffer_destroy(&sb);
	msgpack_sbuffer_init(&sb);
	frame_req(&sb, 0, ID(2), "late", 4);
	assert_int_equal(rc_write(idle, sb.data, sb.size), 0);
	rc_expect(idle, ID(2), "late", 4);
	rc_close(body);
	rc_close(head);
	rc_close(idle);
	rc_close(drip);
	msgpack_sbuffer_destroy(&sb);
	fx_healthy(f);
	fx_close(f);
}

/* idle_s on a unix socket: a connection past its header with no request
 * is closed after it; one whose request is being served, and a
 * subscriber, are not. */
static void test_ipc_idle_deadline(void **state)
{
	struct fx *f = fx_open(&(struct sb_sp_limits){.idle_s = 1.0}, 0);
	struct rc *idle = rc_send_new(f, NULL), *busy, *sub = subscribe(f);
	msgpack_sbuffer sb;
	double t0 = now_s(), took;

	(void)state;
	fx_hold(f, 1);
	msgpack_sbuffer_init(&sb);
	frame_req(&sb, 0, ID(3), "slow", 4);
	busy = rc_send_new(f, &sb);
	fx_wait_seen(f, 1, 1);
	assert_true(rc_closed_within(idle, 3.0));
	took = now_s() - t0;
	if (took < 0.9 || took > 2.0)
		fail_msg("an idle connection was closed after %.2f s (idle_s 1)", took);
	assert_false(rc_closed_within(busy, 1.0));
	assert_false(rc_closed_within(sub, 0.01));
	fx_hold(f, 0);
	rc_expect(busy, ID(3), "slow", 4);
	rc_close(idle);
	rc_close(busy);
	rc_close(sub);
	msgpack_sbuffer_destroy(&sb);
	fx_healthy(f);
	fx_close(f);
}

/* One write of 40 requests against max_inflight 4: at most 4 reach the
 * callback unanswered at once; as they are answered the rest come, and all
 * 40 are answered. */
static void test_ipc_max_inflight(void **state)
{
	struct fx *f = fx_open(&(struct sb_sp_limits){.max_inflight = 4}, 0);
	msgpack_sbuffer sb;
	struct rc *r;

	(void)state;
	fx_hold(f, 1);
	msgpack_sbuffer_init(&sb);
	for (int i = 0; i < 40; i++)
		frame_req(&sb, 0, ID(i), "x", 1);
	r = rc_send_new(f, &sb);
	fx_wait_seen(f, 4, 2);
	sleep_ms(300);
	assert_int_equal(fx_get(f, &f->seen), 4); /* the connection stopped being read */
	fx_hold(f, 0);
	for (int i = 0; i < 40; i++) {
		uint32_t bt[9];
		size_t nw, n;
		uint8_t *b;
		assert_int_equal(rc_recv(r, bt, &nw, &b, &n), 1);
		free(b);
	}
	assert_int_equal(fx_get(f, &f->seen), 40);
	assert_true(fx_get(f, &f->max_outstanding) <= 4);
	rc_close(r);
	msgpack_sbuffer_destroy(&sb);
	fx_healthy(f);
	fx_close(f);
}

/* A client that sends requests and never reads the replies: the server
 * stops reading it, so the replies it holds stay bounded (not one per
 * request sent), and others are served meanwhile. */
static void test_ipc_unread_replies(void **state)
{
	struct fx *f = fx_open(&(struct sb_sp_limits){.max_inflight = 8}, 0);
	uint8_t body[4096];
	msgpack_sbuffer one;
	struct rc *r;
	size_t m0;
	int sent = 0;

	(void)state;
	memset(body, 'r', sizeof body);
	msgpack_sbuffer_init(&one);
	frame_req(&one, 0, ID(1), body, sizeof body);
	r = rc_send_new(f, NULL);
	int fl = 1;
	setsockopt(r->fd, SOL_SOCKET, SO_SNDBUF, &fl, sizeof fl);
	m0 = mem_used();
	/* write until the server stops reading (the write would block) */
	for (; sent < 5000; sent++) {
		struct pollfd pf = {.fd = r->fd, .events = POLLOUT};
		if (poll(&pf, 1, 300) == 0)
			break;
		if (send(r->fd, one.data, one.size, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
			break;
	}
	if (sent == 5000)
		fail_msg("the server kept reading a client that reads nothing");
	sleep_ms(200);
	size_t grew = mem_used() > m0 ? mem_used() - m0 : 0;
	if (grew > (2u << 20))
		fail_msg("the server holds %zu bytes for %d unread replies", grew, sent);
	fx_healthy(f);
	rc_close(r);
	fx_wait_conns(f, 0, 2);
	msgpack_sbuffer_destroy(&one);
	fx_close(f);
}

/* max_buffered across connections: with requests held, reading stops once
 * the bytes held reach the limit, and resumes as they are answered. */
static void test_ipc_max_buffered(void **state)
{
	struct sb_sp_limits lim = {.max_buffered = 64 << 10, .max_request = 32 << 10};
	struct fx *f = fx_open(&lim, 0);
	struct rc *r[4];
	uint8_t *body = malloc(30 << 10);

	(void)state;
	assert_non_null(body);
	memset(body, 'B', 30 << 10);
	fx_hold(f, 1);
	for (int i = 0; i < 4; i++) {
		msgpack_sbuffer sb;
		msgpack_sbuffer_init(&sb);
		for (int k = 0; k < 3; k++)
			frame_req(&sb, 0, ID(k), body, 30 << 10);
		r[i] = rc_send_new(f, NULL);
		/* from another thread in effect: a non-blocking write of what fits */
		size_t off = 0;
		while (off < sb.size) {
			struct pollfd pf = {.fd = r[i]->fd, .events = POLLOUT};
			if (poll(&pf, 1, 200) == 0)
				break;
			ssize_t w = send(r[i]->fd, sb.data + off, sb.size - off,
					 MSG_NOSIGNAL | MSG_DONTWAIT);
			if (w > 0)
				off += (size_t)w;
		}
		msgpack_sbuffer_destroy(&sb);
	}
	double end = now_s() + 2;
	while (fx_get(f, &f->seen) < 2 && now_s() < end)
		sleep_ms(5);
	sleep_ms(300);
	/* 64 KiB hold at most two 30 KiB requests, plus one that began */
	unsigned seen = fx_get(f, &f->seen);
	if (seen < 2 || seen > 3)
		fail_msg("%u requests of 30 KiB held under a 64 KiB limit", seen);
	fx_hold(f, 0);
	fx_wait_seen(f, 12, 5);
	for (int i = 0; i < 4; i++) {
		for (int k = 0; k < 3; k++) {
			uint32_t bt[9];
			size_t nw, n;
			uint8_t *b;
			assert_int_equal(rc_recv(r[i], bt, &nw, &b, &n), 1);
			assert_int_equal(n, 30 << 10);
			free(b);
		}
		rc_close(r[i]);
	}
	free(body);
	fx_healthy(f);
	fx_close(f);
}

/* sb_sp_close with requests in flight: some answered before, some during
 * the close from another thread, some after it returned. Nothing crashes or
 * leaks (under ASan), and the clients see their connections close. */
struct late {
	struct fx *f;
	atomic_int go;
};

static void *late_replier(void *arg)
{
	struct late *l = arg;
	struct fx *f = l->f;
	int n = 0;

	while (!atomic_load(&l->go))
		sleep_ms(1);
	for (;;) {
		pthread_mutex_lock(&f->mu);
		struct pend *p = f->q;
		if (p) {
			f->q = p->next;
			f->outstanding--;
		}
		pthread_mutex_unlock(&f->mu);
		if (!p)
			break;
		fx_answer(p);
		if (n++ % 3 == 0)
			sleep_ms(1);
	}
	return NULL;
}

static void test_close_inflight(void **state)
{
	for (int round = 0; round < 6; round++) {
		struct fx *f = fx_open(&(struct sb_sp_limits){0}, 0);
		struct late l = {.f = f};
		struct rc *r[3];
		pthread_t th;

		(void)state;
		fx_hold(f, 1);
		for (int i = 0; i < 3; i++) {
			msgpack_sbuffer sb;
			msgpack_sbuffer_init(&sb);
			for (int k = 0; k < 20; k++)
				frame_req(&sb, 0, ID(k), "late", 4);
			r[i] = rc_send_new(f, &sb);
			msgpack_sbuffer_destroy(&sb);
		}
		fx_wait_seen(f, 60, 2);
		/* held requests are the late replier's from now on */
		pthread_mutex_lock(&f->mu);
		f->quit = 1;
		pthread_cond_signal(&f->cv);
		pthread_mutex_unlock(&f->mu);
		pthread_join(f->th, NULL);
		assert_int_equal(pthread_create(&th, NULL, late_replier, &l), 0);
		if (round % 2)
			atomic_store(&l.go, 1); /* before and during the close */
		sleep_ms((unsigned)round);
		sb_sp_close(f->sp);
		atomic_store(&l.go, 1); /* after it */
		pthread_join(th, NULL);
		for (int i = 0; i < 3; i++) {
			assert_true(rc_closed_within(r[i], 1.0));
			rc_close(r[i]);
		}
		pthread_mutex_destroy(&f->mu);
		pthread_cond_destroy(&f->cv);
		tu_rmrf(f->home);
		free(f);
	}
}

/* ================= publish/subscribe ================= */

struct reader {
	struct rc *r;
	unsigned want, got;
	int in_order;
	uint32_t last[8];
	atomic_uint count;
};

/* Reads messages "T SEQ" (publisher T, its SEQ-th message) until want. */
static void *reader_thread(void *arg)
{
	struct reader *rd = arg;

	rd->in_order = 1;
	while (rd->got < rd->want) {
		uint8_t h[9], b[PUB_LEN + 1];
		uint64_t n = 0;
		if (rc_read(rd->r, h, 9) != 1)
			break;
		for (int i = 1; i < 9; i++)
			n = n << 8 | h[i];
		if (n >= sizeof b || rc_read(rd->r, b, (size_t)n) != 1)
			break;
		b[n] = 0;
		unsigned t, seq;
		if (sscanf((char *)b, "%u %u", &t, &seq) == 2 && t < 8) {
			if (seq < rd->last[t])
				rd->in_order = 0;
			rd->last[t] = seq;
		}
		rd->got++;
		atomic_store(&rd->count, rd->got);
	}
	return NULL;
}

static struct rc *subscribe(struct fx *f)
{
	struct rc *r = rc_ipc(f->events);

	rc_hello(r, SUB);
	return r;
}

/* A subscriber that never reads gets at most pub_queue messages queued;
 * the rest are dropped for it and counted. A fast one gets every message,
 * in order. */
static void test_pub_slow_subscriber(void **state)
{
	struct fx *f = fx_open(&(struct sb_sp_limits){.pub_queue = 32}, 0);
	struct rc *slow = subscribe(f);
	struct reader fast = {.r = subscribe(f), .want = PUB_N};
	pthread_t th;
	char *msg = malloc(PUB_LEN + 1);
	int sndbuf = 0;
	socklen_t sl = sizeof sndbuf;
	size_t m0;

	(void)state;
	assert_non_null(msg);
	/* the server's socket has the same default send buffer as ours */
	getsockopt(slow->fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &sl);
	fx_wait_conns(f, 2, 1);
	sleep_ms(50); /* both headers in, both open */
	assert_int_equal(pthread_create(&th, NULL, reader_thread, &fast), 0);
	m0 = mem_used();
	for (unsigned i = 0; i < PUB_N; i++) {
		int n = snprintf(msg, PUB_LEN + 1, "0 %u ", i);
		memset(msg + n, 'p', PUB_LEN - (size_t)n);
		sb_sp_publish(f->sp, msg, PUB_LEN);
		/* pace to the fast reader, in steps under pub_queue */
		double end = now_s() + 2;
		while (i + 1 - atomic_load(&fast.count) > 16 && now_s() < end)
			sleep_ms(1);
	}
	pthread_join(th, NULL);
	assert_int_equal(fast.got, PUB_N);
	assert_true(fast.in_order);
	struct sb_sp_stats st = fx_stats(f);
	unsigned kernel = (unsigned)sndbuf / PUB_LEN * 3 / 2 + 8; /* with slack */
	if (!st.pub_dropped || st.pub_dropped < PUB_N - 32 - kernel)
		fail_msg(
		    "%llu of %u dropped for a subscriber that reads nothing (queue 32, "
		    "about %u in the kernel)",
		    (unsigned long long)st.pub_dropped, PUB_N, kernel);
	size_t grew = mem_used() > m0 ? mem_used() - m0 : 0;
	if (grew > (1u << 20))
		fail_msg("%zu bytes held for a subscriber that reads nothing", grew);

	/* now it reads: it gets the messages queued, then nothing more */
	unsigned got = 0;
	slow->timeout_ms = 300;
	for (;;) {
		uint8_t h[9];
		if (rc_read(slow, h, 9) != 1)
			break;
		uint64_t n = 0;
		for (int i = 1; i < 9; i++)
			n = n << 8 | h[i];
		assert_int_equal(n, PUB_LEN);
		assert_int_equal(rc_read(slow, msg, PUB_LEN), 1);
		got++;
	}
	assert_int_equal(got + st.pub_dropped, PUB_N);
	assert_true(got >= 32 && got <= 32 + kernel);
	free(msg);
	rc_close(slow);
	rc_close(fast.r);
	fx_healthy(f);
	fx_close(f);
}

struct publisher {
	struct fx *f;
	unsigned t, n;
};

static void *publisher_thread(void *arg)
{
	struct publisher *p = arg;
	char msg[64];

	for (unsigned i = 0; i < p->n; i++) {
		int len = snprintf(msg, sizeof msg, "%u %u", p->t, i);
		sb_sp_publish(p->f->sp, msg, (size_t)len);
		if (i % 64 == 0)
			sleep_ms(1);
	}
	return NULL;
}

/* Four threads publish at once while subscribers come and go (some close
 * mid-message, some never say hello): a steady subscriber gets every
 * message, each thread's in order, and nothing breaks. */
static void test_pub_threads(void **state)
{
	/* a queue longer than the whole run: the steady one cannot miss any */
	struct fx *f = fx_open(&(struct sb_sp_limits){.pub_queue = 16384}, 0);
	struct publisher p[4];
	pthread_t th[4], rth;
	struct reader steady = {.r = subscribe(f), .want = 4 * 3000};
	uint64_t seed = 7;

	(void)state;
	fx_wait_conns(f, 1, 1);
	sleep_ms(50);
	assert_int_equal(pthread_create(&rth, NULL, reader_thread, &steady), 0);
	for (unsigned i = 0; i < 4; i++) {
		p[i] = (struct publisher){f, i, 3000};
		assert_int_equal(pthread_create(&th[i], NULL, publisher_thread, &p[i]),
				 0);
	}
	for (int k = 0; k < 60; k++) {
		struct rc *r = rc_ipc(f->events);
		if (k % 3)
			rc_hello(r, SUB);
		if (k % 3 == 1) {
			uint8_t b[5];
			rc_read(r, b, tu_rand(&seed) % sizeof b + 1); /* mid-message */
		}
		sleep_ms((unsigned)(tu_rand(&seed) % 5));
		rc_close(r);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	pthread_join(rth, NULL);
	assert_true(steady.in_order);
	assert_int_equal(steady.got, 4 * 3000);
	rc_close(steady.r);
	fx_wait_conns(f, 0, 2);
	assert_true(fx_stats(f).accepted == 61);
	fx_healthy(f);
	fx_close(f);
}

/* ================= TLS ================= */

/* Plain TCP garbage, an HTTP request, and a half-sent ClientHello on the
 * TLS port: each connection is closed (the half one at the handshake
 * deadline), and TLS clients are served meanwhile. */
static void test_tls_garbage(void **state)
{
	struct sb_sp_limits lim = short_limits();
	struct fx *f = fx_open(&lim, 1);
	uint64_t seed = 9;

	(void)state;
	fx_healthy(f);
	for (int i = 0; i < 10; i++) {
		uint8_t junk[1024];
		struct rc *r = rc_tcp(f->port);
		size_t n = 1 + tu_rand(&seed) % sizeof junk;
		for (size_t k = 0; k < n; k++)
			junk[k] = (uint8_t)tu_rand(&seed);
		junk[0] = 0x47; /* not a handshake record */
		rc_write(r, junk, n);
		assert_true(rc_closed_within(r, 2.0));
		rc_close(r);
	}
	struct rc *http = rc_tcp(f->port);
	rc_write(http, "GET / HTTP/1.0\r\n\r\n", 18);
	assert_true(rc_closed_within(http, 2.0));
	rc_close(http);

	/* a ClientHello cut short: it waits for the rest until the deadline */
	static const uint8_t hello[] = {0x16, 0x03, 0x01, 0x00, 0xf0, 0x01,
					0x00, 0x00, 0xec, 0x03, 0x03};
	struct rc *half = rc_tcp(f->port), *mute = rc_tcp(f->port);
	double t0 = now_s();
	rc_write(half, hello, sizeof hello);
	fx_healthy(f); /* served while those two wait */
	assert_true(rc_closed_within(half, 3.0));
	assert_true(rc_closed_within(mute, 1.0));
	double took = now_s() - t0;
	if (took < 0.9 || took > 2.5)
		fail_msg("a stalled handshake was closed after %.2f s (limit 1 s)", took);
	rc_close(half);
	rc_close(mute);
	fx_wait_conns(f, 0, 1);
	assert_int_equal(fx_stats(f).dropped_conns, 13);
	assert_int_equal(fx_stats(f).requests, 2); /* the well-behaved ones */
	fx_healthy(f);
	fx_close(f);
}

/* After TLS, no SP header (closed at the handshake deadline) and a header
 * with no request (closed at unauth_idle). */
static void test_tls_unauth_deadlines(void **state)
{
	struct sb_sp_limits lim = short_limits();
	struct fx *f = fx_open(&lim, 1);
	double t0 = now_s(); /* the deadlines count from the accept */
	struct rc *a = rc_tcp(f->port), *b = rc_tcp(f->port);

	(void)state;
	assert_int_equal(rc_tls(a), 0);
	assert_int_equal(rc_tls(b), 0);
	rc_hello(b, REQ);
	assert_true(rc_closed_within(a, 3.0));
	if (now_s() - t0 < 0.9 || now_s() - t0 > 1.9)
		fail_msg("no header: closed after %.2f s (limit 1 s)", now_s() - t0);
	assert_true(rc_closed_within(b, 3.0));
	if (now_s() - t0 < 1.9 || now_s() - t0 > 3.0)
		fail_msg("no request: closed after %.2f s (limit 2 s)", now_s() - t0);
	rc_close(a);
	rc_close(b);
	assert_int_equal(fx_stats(f).dropped_conns, 2);
	fx_healthy(f);
	fx_close(f);
}

/* Requests without a token, with a token after a field larger than
 * preauth_max, with a good token; a 0-length body: each refused one gets
 * the deny reply with its own id and the rest of it is skipped; the
 * connection serves the next request until max_denied. */
static void test_tls_tokens(void **state)
{
	struct sb_sp_limits lim = short_limits();
	struct fx *f = fx_open(&lim, 1);
	msgpack_sbuffer none, late, good, first, sb;
	struct rc *r;

	(void)state;
	pack_request(&first, 8000, f->token, 1); /* 8000 bytes after the token */
	pack_request(&none, 0, NULL, 0);
	pack_request(&late, 8000, f->token, 0); /* the token after 8000 bytes */
	pack_request(&good, 10, f->token, 0);
	r = rc_send_new(f, NULL);

	msgpack_sbuffer_init(&sb);
	frame_req(&sb, 1, ID(1), none.data, none.size);
	assert_int_equal(rc_write(r, sb.data, sb.size), 0);
	rc_expect(r, ID(1), DENY, strlen(DENY));
	assert_int_equal(fx_stats(f).denied, 1);

	/* refused once preauth_max bytes are in, before the rest is sent */
	sb.size = 0;
	frame_req(&sb, 1, ID(2), late.data, late.size);
	size_t part = 8 + 4 + lim.preauth_max + 100;
	assert_int_equal(rc_write(r, sb.data, part), 0);
	rc_expect(r, ID(2), DENY, strlen(DENY));
	frame_req(&sb, 1, ID(3), good.data, good.size);
	assert_int_equal(rc_write(r, sb.data + part, sb.size - part), 0);
	rc_expect(r, ID(3), good.data, good.size);
	assert_int_equal(fx_stats(f).denied, 2);
	assert_string_equal(f->who, "tester");
	assert_int_equal(f->remote, 1);

	/* the token in the first preauth_max bytes: the whole request comes */
	sb.size = 0;
	frame_req(&sb, 1, ID(30), first.data, first.size);
	assert_int_equal(rc_write(r, sb.data, sb.size), 0);
	rc_expect(r, ID(30), first.data, first.size);

	sb.size = 0;
	frame_req(&sb, 1, ID(4), "", 0);
	assert_int_equal(rc_write(r, sb.data, sb.size), 0);
	rc_expect(r, ID(4), DENY, strlen(DENY));

	/* a good token past preauth_max: also refused, then one more refusal
	 * reaches max_denied and the connection closes */
	sb.size = 0;
	frame_req(&sb, 1, ID(5), late.data, late.size);
	frame_req(&sb, 1, ID(6), good.data, good.size);
	assert_int_equal(rc_write(r, sb.data, sb.size), 0);
	rc_expect(r, ID(5), DENY, strlen(DENY));
	assert_true(rc_closed_within(r, 6.0));
	rc_close(r);
	assert_int_equal(fx_stats(f).denied, 4);
	assert_int_equal(fx_get(f, &f->seen), 2);
	msgpack_sbuffer_destroy(&sb);
	msgpack_sbuffer_destroy(&first);
	msgpack_sbuffer_destroy(&none);
	msgpack_sbuffer_destroy(&late);
	msgpack_sbuffer_destroy(&good);
	fx_healthy(f);
	fx_close(f);
}

/* Wrong tokens pipelined in one write: they are refused one at a time,
 * slower and slower, max_denied of them, then the connection closes and
 * the rest are never looked at. */
static void test_tls_wrong_tokens_pipelined(void **state)
{
	struct sb_sp_limits lim = short_limits();
	struct fx *f;
	msgpack_sbuffer bad, sb;
	double t[4];
	struct rc *r;
	char wrong[65];

	(void)state;
	lim.unauth_idle_s = 10; /* the penalties add up to more than 2 s */
	f = fx_open(&lim, 1);
	memset(wrong, 'a', 64);
	wrong[64] = 0;
	pack_request(&bad, 0, wrong, 0);
	msgpack_sbuffer_init(&sb);
	for (int i = 0; i < 20; i++)
		frame_req(&sb, 1, ID(i), bad.data, bad.size);
	r = rc_send_new(f, &sb);
	r->timeout_ms = 6000;
	double t0 = now_s();
	for (int i = 0; i < 4; i++) {
		rc_expect(r, ID(i), DENY, strlen(DENY));
		t[i] = now_s() - t0;
	}
	assert_true(rc_closed_within(r, 2.0));
	rc_close(r);
	/* refusals 0.25, 0.5, 1 s apart: under 3 in the first 1.5 s */
	if (t[3] < 1.5)
		fail_msg("4 refusals in %.2f s (%.2f %.2f %.2f %.2f)", t[3], t[0], t[1],
			 t[2], t[3]);
	assert_true(t[1] - t[0] >= 0.2 && t[2] - t[1] >= 0.4 && t[3] - t[2] >= 0.8);
	assert_int_equal(fx_stats(f).denied, 4);
	assert_int_equal(fx_get(f, &f->seen), 0);
	msgpack_sbuffer_destroy(&sb);
	msgpack_sbuffer_destroy(&bad);
	fx_healthy(f);
	fx_close(f);
}

/* Pipelined requests over TLS with good tokens, answered out of order and
 * matched by id; a length of 2^63 closes the connection. */
static void test_tls_pipelined(void **state)
{
	struct sb_sp_limits lim = short_limits();
	struct fx *f = fx_open(&lim, 1);
	msgpack_sbuffer good, sb;
	struct rc *r;
	int got[50] = {0};

	(void)state;
	pack_request(&good, 0, f->token, 0);
	msgpack_sbuffer_init(&sb);
	for (int i = 0; i < 50; i++)
		frame_req(&sb, 1, ID(i), good.data, good.size);
	r = rc_send_new(f, &sb);
	for (int i = 0; i < 50; i++) {
		uint32_t bt[9];
		size_t nw, n;
		uint8_t *b;
		assert_int_equal(rc_recv(r, bt, &nw, &b, &n), 1);
		assert_int_equal(nw, 1);
		assert_true((bt[0] & 0x7fffffff) < 50);
		assert_int_equal(got[bt[0] & 0x7fffffff]++, 0);
		assert_int_equal(n, good.size);
		free(b);
	}
	/* one byte per TLS record */
	sb.size = 0;
	frame_req(&sb, 1, ID(77), good.data, good.size);
	for (size_t k = 0; k < sb.size; k++)
		assert_int_equal(rc_write(r, sb.data + k, 1), 0);
	rc_expect(r, ID(77), good.data, good.size);

	uint8_t h[8];
	put_be64(h, 1ull << 63);
	assert_int_equal(rc_write(r, h, 8), 0);
	assert_true(rc_closed_within(r, 1.0));
	rc_close(r);
	assert_int_equal(fx_stats(f).dropped_conns, 1);
	msgpack_sbuffer_destroy(&sb);
	msgpack_sbuffer_destroy(&good);
	fx_healthy(f);
	fx_close(f);
}

/* An authenticated client that sends requests and stops reading the
 * replies: the server stops reading it, holds a bounded number of replies,
 * and closes it once no reply byte has gone out for idle_s. */
static void test_tls_stuck_reader(void **state)
{
	struct sb_sp_limits lim = short_limits();
	struct fx *f;
	msgpack_sbuffer req, sb;
	struct rc *r;
	int small = 16384;
	size_t m0;

	(void)state;
	lim.idle_s = 2;
	lim.max_inflight = 8;
	f = fx_open(&lim, 1);
	pack_request(&req, 60000, f->token, 1);
	msgpack_sbuffer_init(&sb);
	frame_req(&sb, 1, ID(1), req.data, req.size);
	r = rc_tcp(f->port);
	setsockopt(r->fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
	assert_int_equal(rc_tls(r), 0);
	rc_hello(r, REQ);
	fcntl(r->fd, F_SETFL, fcntl(r->fd, F_GETFL) | O_NONBLOCK);
	m0 = mem_used();
	int sent = 0;
	size_t off = 0;
	while (sent < 2000) {
		int x = mbedtls_ssl_write(&r->ssl, (const unsigned char *)sb.data + off,
					  sb.size - off);
		if (x == MBEDTLS_ERR_SSL_WANT_WRITE) {
			struct pollfd pf = {.fd = r->fd, .events = POLLOUT};
			if (poll(&pf, 1, 500) == 0)
				break; /* the server stopped reading */
			continue;
		}
		assert_true(x > 0);
		if ((off += (size_t)x) == sb.size) {
			off = 0;
			sent++;
		}
	}
	if (sent == 2000)
		fail_msg("the server kept reading a client that reads nothing");
	double t0 = now_s();
	size_t grew = mem_used() > m0 ? mem_used() - m0 : 0;
	if (grew > (8u << 20))
		fail_msg("%zu bytes held for %d replies nobody reads", grew, sent);
	/* without reading anything (that would be progress), it is closed */
	double end = t0 + lim.idle_s + 2;
	while (fx_stats(f).conns && now_s() < end)
		sleep_ms(20);
	if (fx_stats(f).conns)
		fail_msg("a client that reads nothing kept its connection %.1f s",
			 now_s() - t0);
	assert_true(now_s() - t0 >= lim.idle_s - 1.0);
	assert_int_equal(fx_stats(f).dropped_conns, 1);
	rc_close(r);
	msgpack_sbuffer_destroy(&sb);
	msgpack_sbuffer_destroy(&req);
	fx_healthy(f);
	fx_close(f);
}

/* Per-peer caps: connections at once, and new connections a second. */
static void test_tls_per_peer(void **state)
{
	struct sb_sp_limits lim = short_limits();
	struct fx *f;
	struct rc *r[8];

	(void)state;
	lim.max_conns_per_peer = 3;
	f = fx_open(&lim, 1);
	for (int i = 0; i < 3; i++)
		r[i] = rc_tcp(f->port);
	fx_wait_conns(f, 3, 1);
	struct rc *x = rc_tcp(f->port);
	assert_true(rc_closed_within(x, 0.5));
	rc_close(x);
	fx_wait_refused(f, 1);
	for (int i = 0; i < 3; i++)
		rc_close(r[i]);
	fx_wait_conns(f, 0, 1);
	fx_healthy(f);
	fx_close(f);

	lim = short_limits();
	lim.accept_rate = 2;
	lim.accept_burst = 4;
	f = fx_open(&lim, 1);
	for (int i = 0; i < 8; i++)
		r[i] = rc_tcp(f->port);
	fx_wait_refused(f, 4);
	assert_int_equal(fx_stats(f).accepted, 4);
	for (int i = 0; i < 8; i++)
		rc_close(r[i]);
	fx_wait_conns(f, 0, 1);
	sleep_ms(600); /* a token back */
	fx_healthy(f);
	fx_close(f);
}

/* An argument runs only the tests whose names match it ("test_tls_*"). */
int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_ipc_pipelined),
	    cmocka_unit_test(test_ipc_garbage),
	    cmocka_unit_test(test_ipc_prefixes_and_split),
	    cmocka_unit_test(test_ipc_lengths),
	    cmocka_unit_test(test_ipc_close_states),
	    cmocka_unit_test(test_ipc_handshake_deadline),
	    cmocka_unit_test(test_ipc_max_conns),
	    cmocka_unit_test(test_ipc_declared_large),
	    cmocka_unit_test(test_ipc_request_deadline),
	    cmocka_unit_test(test_ipc_idle_deadline),
	    cmocka_unit_test(test_ipc_max_inflight),
	    cmocka_unit_test(test_ipc_unread_replies),
	    cmocka_unit_test(test_ipc_max_buffered),
	    cmocka_unit_test(test_close_inflight),
	    cmocka_unit_test(test_pub_slow_subscriber),
	    cmocka_unit_test(test_pub_threads),
	    cmocka_unit_test(test_tls_garbage),
	    cmocka_unit_test(test_tls_unauth_deadlines),
	    cmocka_unit_test(test_tls_tokens),
	    cmocka_unit_test(test_tls_wrong_tokens_pipelined),
	    cmocka_unit_test(test_tls_pipelined),
	    cmocka_unit_test(test_tls_stuck_reader),
	    cmocka_unit_test(test_tls_per_peer),
	};

	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
