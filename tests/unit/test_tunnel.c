/* test_tunnel.c - the host end of guest streams, on a real loop against a
 * TCP echo peer on loopback: bytes both ways, half-close, ties, refused
 * opens, the backlog pause, and a stream whose peer does not read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include "engine/gateway/tunnel.h"
#include "testutil.h"
#include "vmm/chan.h"

/* What the tunnel sent to the "guest". */
struct guest {
	char data[1 << 20];
	size_t len;
	int closes, opens_tied, ties_open;
	uint64_t last_close;
	size_t backlog;
	sb_loop *loop;
};

static void g_send(void *ctx, int kind, uint64_t stream, const void *data, size_t len)
{
	struct guest *g = ctx;

	if (kind == SB_CHAN_CLOSE) {
		g->closes++;
		g->last_close = stream;
		return;
	}
	assert_int_equal(kind, SB_CHAN_DATA);
	assert_true(len <= SB_CHAN_DATA_MAX);
	if (g->len + len <= sizeof g->data) {
		memcpy(g->data + g->len, data, len);
		g->len += len;
	}
}

static size_t g_backlog(void *ctx)
{
	return ((struct guest *)ctx)->backlog;
}

static void g_tie(void *ctx, uint16_t port, int open)
{
	struct guest *g = ctx;

	assert_true(port > 0);
	g->ties_open += open ? 1 : -1;
	g->opens_tied += open;
}

static const struct sb_tunnel_ops ops = {g_send, g_backlog, g_tie};

/* A peer on loopback: echoes what it reads, upper-cased, until EOF, then
 * closes; or with mute set, accepts and never reads. */
struct peer {
	int lfd;
	uint16_t port;
	int mute, mfd;
	pthread_t th;
};

static void *peer_main(void *arg)
{
	struct peer *p = arg;
	char buf[4096];
	int fd = accept(p->lfd, NULL, NULL);
	ssize_t n;

	if (fd < 0)
		return NULL;
	if (p->mute) {
		p->mfd = fd; /* held open, never read, until peer_stop */
		return NULL;
	}
	while ((n = read(fd, buf, sizeof buf)) > 0) {
		for (ssize_t i = 0; i < n; i++)
			buf[i] =
			    (char)(buf[i] >= 'a' && buf[i] <= 'z' ? buf[i] - 32 : buf[i]);
		if (write(fd, buf, (size_t)n) != n)
			break;
	}
	close(fd);
	return NULL;
}

static void peer_start(struct peer *p, int mute)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof sa;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	p->mute = mute;
	p->mfd = -1;
	assert_true((p->lfd = socket(AF_INET, SOCK_STREAM, 0)) >= 0);
	assert_int_equal(bind(p->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(listen(p->lfd, 4), 0);
	assert_int_equal(getsockname(p->lfd, (struct sockaddr *)&sa, &len), 0);
	p->port = ntohs(sa.sin_port);
	assert_int_equal(pthread_create(&p->th, NULL, peer_main, p), 0);
}

static void peer_stop(struct peer *p)
{
	shutdown(p->lfd, SHUT_RDWR);
	pthread_join(p->th, NULL);
	if (p->mfd >= 0)
		close(p->mfd);
	close(p->lfd);
}

static void on_tick(void *ctx)
{
	sb_loop_break(ctx);
}

/* Runs the loop for about s seconds. */
static void spin(sb_loop *l, double s)
{
	sb_watch *w = sb_loop_timer(l, s, 0, on_tick, l);

	sb_loop_run(l);
	sb_watch_stop(w);
}

static msgpack_object bin(const char *s, size_t n)
{
	msgpack_object o = {.type = MSGPACK_OBJECT_BIN};

	o.via.bin.ptr = s;
	o.via.bin.size = (uint32_t)n;
	return o;
}

static const msgpack_object nil = {.type = MSGPACK_OBJECT_NIL};

static void test_bytes_both_ways(void **state)
{
	static struct guest g;
	struct peer p;
	sb_loop *l;
	sb_tunnel *t;
	msgpack_object b = bin("hello gateway", 13);

	memset(&g, 0, sizeof g);
	peer_start(&p, 0);
	assert_int_equal(sb_loop_open(&l), SB_OK);
	assert_int_equal(sb_tunnel_open(l, p.port, &ops, &g, &t), SB_OK);
	sb_tunnel_frame(t, SB_CHAN_OPEN, 1, &nil);
	assert_int_equal(sb_tunnel_streams(t), 1);
	assert_int_equal(g.ties_open, 1);
	sb_tunnel_frame(t, SB_CHAN_DATA, 1, &b); /* before connect completes: buffered */
	spin(l, 0.2);
	assert_int_equal(g.len, 13);
	assert_memory_equal(g.data, "HELLO GATEWAY", 13);
	/* the guest half-closes: the peer sees EOF, closes, and so do we */
	sb_tunnel_frame(t, SB_CHAN_CLOSE, 1, &nil);
	spin(l, 0.2);
	assert_int_equal(g.closes, 1);
	assert_int_equal(g.last_close, 1);
	assert_int_equal(sb_tunnel_streams(t), 0);
	assert_int_equal(g.ties_open, 0);
	/* late frames of an ended stream are dropped */
	sb_tunnel_frame(t, SB_CHAN_DATA, 1, &b);
	assert_int_equal(g.closes, 1);
	sb_tunnel_close(t);
	peer_stop(&p);
	sb_loop_close(l);
}

static void test_refused_opens(void **state)
{
	static struct guest g;
	sb_loop *l;
	sb_tunnel *t;

	memset(&g, 0, sizeof g);
	assert_int_equal(sb_loop_open(&l), SB_OK);
	/* port 1 on loopback: nothing listens, connect fails */
	assert_int_equal(sb_tunnel_open(l, 1, &ops, &g, &t), SB_OK);
	sb_tunnel_frame(t, SB_CHAN_OPEN, 2, &nil); /* guest ids are odd */
	assert_int_equal(g.closes, 1);
	sb_tunnel_frame(t, SB_CHAN_OPEN, 3, &nil);
	sb_tunnel_frame(t, SB_CHAN_OPEN, 3, &nil); /* a duplicate */
	assert_int_equal(g.closes, 2);
	spin(l, 0.2); /* the refused connection ends the stream */
	assert_int_equal(g.closes, 3);
	assert_int_equal(sb_tunnel_streams(t), 0);
	assert_int_equal(g.ties_open, 0);
	for (uint64_t id = 1; id < 2 * SB_TUNNEL_STREAMS + 4; id += 2)
		sb_tunnel_frame(t, SB_CHAN_OPEN, id, &nil);
	assert_int_equal(sb_tunnel_streams(t), SB_TUNNEL_STREAMS);
	assert_int_equal(g.closes, 3 + 2);
	sb_tunnel_close(t); /* closing with streams open unties them all */
	assert_int_equal(g.ties_open, 0);
	sb_loop_close(l);
}

static void test_backlog_pauses_reading(void **state)
{
	static struct guest g;
	struct peer p;
	sb_loop *l;
	sb_tunnel *t;
	msgpack_object b = bin("abc", 3);

	memset(&g, 0, sizeof g);
	peer_start(&p, 0);
	assert_int_equal(sb_loop_open(&l), SB_OK);
	assert_int_equal(sb_tunnel_open(l, p.port, &ops, &g, &t), SB_OK);
	g.backlog = SB_TUNNEL_BACKLOG; /* the guest is not reading */
	sb_tunnel_frame(t, SB_CHAN_OPEN, 5, &nil);
	sb_tunnel_frame(t, SB_CHAN_DATA, 5, &b);
	spin(l, 0.2);
	assert_int_equal(g.len, 0);
	g.backlog = 0;
	sb_tunnel_drained(t);
	spin(l, 0.2);
	assert_int_equal(g.len, 3);
	assert_memory_equal(g.data, "ABC", 3);
	sb_tunnel_close(t);
	peer_stop(&p);
	sb_loop_close(l);
}

static void test_peer_not_reading(void **state)
{
	static struct guest g;
	struct peer p;
	sb_loop *l;
	sb_tunnel *t;
	char *chunk = malloc(SB_CHAN_DATA_MAX);
	msgpack_object b;

	memset(&g, 0, sizeof g);
	assert_non_null(chunk);
	memset(chunk, 'x', SB_CHAN_DATA_MAX);
	b = bin(chunk, SB_CHAN_DATA_MAX);
	peer_start(&p, 1);
	assert_int_equal(sb_loop_open(&l), SB_OK);
	assert_int_equal(sb_tunnel_open(l, p.port, &ops, &g, &t), SB_OK);
	sb_tunnel_frame(t, SB_CHAN_OPEN, 7, &nil);
	spin(l, 0.1);
	/* far more than the socket buffers and the stream's limit hold */
	for (size_t sent = 0; sent < 2 * SB_TUNNEL_BUFFER && sb_tunnel_streams(t);
	     sent += SB_CHAN_DATA_MAX)
		sb_tunnel_frame(t, SB_CHAN_DATA, 7, &b);
	assert_int_equal(sb_tunnel_streams(t), 0);
	assert_int_equal(g.closes, 1);
	assert_int_equal(g.ties_open, 0);
	sb_tunnel_close(t);
	peer_stop(&p);
	sb_loop_close(l);
	free(chunk);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bytes_both_ways),
	    cmocka_unit_test(test_refused_opens),
	    cmocka_unit_test(test_backlog_pauses_reading),
	    cmocka_unit_test(test_peer_not_reading),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
