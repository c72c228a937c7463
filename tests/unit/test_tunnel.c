/* test_tunnel.c - the host end of guest streams, on a real loop: each
 * stream's gateway connection comes from the run's connect op, here one
 * end of a socket pair whose other end a peer thread serves (an echo that
 * upper-cases, a peer that never reads, one that answers early and
 * closes). Bytes both ways, half-close, refused and hostile opens, frames
 * of the wrong type, for ended streams or after CLOSE, the backlog pause,
 * a stream whose peer does not read, and one whose peer stops reading. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>

#include "engine/gateway/tunnel.h"
#include "testutil.h"
#include "vmm/chan.h"

enum peer_kind {
	ECHO,  /* upper-cases what it reads until EOF, then closes */
	MUTE,  /* never reads; holds its end until the test ends */
	EARLY, /* reads a little, answers, closes without reading the rest */
};

#define PEERS (SB_TUNNEL_STREAMS + 8)

/* What the tunnel sent to the "guest", and the peers it connected to. */
struct guest {
	char data[1 << 20];
	size_t len;
	int closes, connects;
	uint64_t last_close;
	size_t backlog;
	int refuse; /* what connect returns (0: a peer) */
	enum peer_kind kind;
	pthread_t th[PEERS];
	int fds[PEERS]; /* the peers' ends */
	int npeers;
	int eofs; /* peers that saw EOF from the tunnel */
	pthread_mutex_t mu;
};

struct peer {
	struct guest *g;
	int fd;
};

static void *peer_main(void *arg)
{
	struct peer *p = arg;
	struct guest *g = p->g;
	char buf[4096];
	ssize_t n;

	if (g->kind == EARLY) {
		n = read(p->fd, buf, 10);
		if (n > 0 && write(p->fd, "EARLY", 5) != 5)
			n = -1;
		shutdown(p->fd, SHUT_RDWR);
	} else if (g->kind == ECHO) {
		while ((n = read(p->fd, buf, sizeof buf)) > 0) {
			for (ssize_t i = 0; i < n; i++)
				if (buf[i] >= 'a' && buf[i] <= 'z')
					buf[i] = (char)(buf[i] - 32);
			if (write(p->fd, buf, (size_t)n) != n)
				break;
		}
		if (n == 0) {
			pthread_mutex_lock(&g->mu);
			g->eofs++;
			pthread_mutex_unlock(&g->mu);
		}
		shutdown(p->fd, SHUT_RDWR);
	}
	free(p);
	return NULL;
}

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

/* A socket pair: the tunnel gets one end, a peer thread the other. */
static int g_connect(void *ctx, int *fd)
{
	struct guest *g = ctx;
	struct peer *p;
	int sv[2];

	g->connects++;
	if (g->refuse)
		return g->refuse;
	assert_true(g->npeers < PEERS);
	assert_int_equal(
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
	assert_non_null(p = malloc(sizeof *p));
	p->g = g;
	p->fd = sv[1];
	/* the peer blocks on its end */
	assert_int_equal(fcntl(sv[1], F_SETFL, 0), 0);
	g->fds[g->npeers] = sv[1];
	assert_int_equal(pthread_create(&g->th[g->npeers++], NULL, peer_main, p), 0);
	*fd = sv[0];
	return 0;
}

static const struct sb_tunnel_ops ops = {
    .send = g_send,
    .backlog = g_backlog,
    .connect = g_connect,
};

static struct guest *guest_new(enum peer_kind kind)
{
	struct guest *g = calloc(1, sizeof *g);

	assert_non_null(g);
	g->kind = kind;
	pthread_mutex_init(&g->mu, NULL);
	return g;
}

/* Ends the peers (a mute one is woken by shutting its end) and frees g. */
static void guest_free(struct guest *g)
{
	for (int i = 0; i < g->npeers; i++) {
		if (g->kind == MUTE)
			shutdown(g->fds[i], SHUT_RDWR);
		pthread_join(g->th[i], NULL);
		close(g->fds[i]);
	}
	pthread_mutex_destroy(&g->mu);
	free(g);
}

static int peer_eofs(struct guest *g)
{
	int n;

	pthread_mutex_lock(&g->mu);
	n = g->eofs;
	pthread_mutex_unlock(&g->mu);
	return n;
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
	struct guest *g = guest_new(ECHO);
	sb_loop *l;
	sb_tunnel *t;
	msgpack_object b = bin("hello gateway", 13), e = bin("", 0);

	assert_int_equal(sb_loop_open(&l), SB_OK);
	assert_int_equal(sb_tunnel_open(l, &ops, g, &t), SB_OK);
	sb_tunnel_frame(t, SB_CHAN_OPEN, 1, &nil);
	assert_int_equal(sb_tunnel_streams(t), 1);
	assert_int_equal(g->connects, 1);
	sb_tunnel_frame(t, SB_CHAN_DATA, 1, &e); /* empty: nothing */
	sb_tunnel_frame(t, SB_CHAN_DATA, 1, &b);
	spin(l, 0.2);
	assert_int_equal(g->len, 13);
	assert_memory_equal(g->data, "HELLO GATEWAY", 13);
	assert_int_equal(g->closes, 0);
	/* the guest half-closes: the peer sees EOF, closes, and so do we */
	sb_tunnel_frame(t, SB_CHAN_CLOSE, 1, &nil);
	spin(l, 0.2);
	assert_int_equal(peer_eofs(g), 1);
	assert_int_equal(g->closes, 1);
	assert_int_equal(g->last_close, 1);
	assert_int_equal(sb_tunnel_streams(t), 0);
	/* late frames of an ended stream are dropped */
	sb_tunnel_frame(t, SB_CHAN_DATA, 1, &b);
	sb_tunnel_frame(t, SB_CHAN_CLOSE, 1, &nil);
	assert_int_equal(g->closes, 1);
	assert_int_equal(g->len, 13);
	sb_tunnel_close(t);
	sb_loop_close(l);
	guest_free(g);
}

static void test_refused_opens(void **state)
{
	struct guest *g = guest_new(ECHO);
	sb_loop *l;
	sb_tunnel *t;

	assert_int_equal(sb_loop_open(&l), SB_OK);
	assert_int_equal(sb_tunnel_open(l, &ops, g, &t), SB_OK);
	/* the run refuses a connection (its share is held): CLOSE at once */
	g->refuse = SB_ERR_FULL;
	sb_tunnel_frame(t, SB_CHAN_OPEN, 1, &nil);
	assert_int_equal(g->closes, 1);
	assert_int_equal(g->last_close, 1);
	assert_int_equal(sb_tunnel_streams(t), 0);
	g->refuse = 0;
	sb_tunnel_frame(t, SB_CHAN_OPEN, 2, &nil); /* guest ids are odd */
	assert_int_equal(g->closes, 2);
	assert_int_equal(g->connects, 1); /* refused without a connection */
	sb_tunnel_frame(t, SB_CHAN_OPEN, 3, &nil);
	sb_tunnel_frame(t, SB_CHAN_OPEN, 3, &nil); /* a duplicate */
	assert_int_equal(g->closes, 3);
	assert_int_equal(sb_tunnel_streams(t), 1);
	for (uint64_t id = 5; id < 2 * SB_TUNNEL_STREAMS + 8; id += 2)
		sb_tunnel_frame(t, SB_CHAN_OPEN, id, &nil);
	assert_int_equal(sb_tunnel_streams(t), SB_TUNNEL_STREAMS);
	assert_int_equal(g->connects, 1 + SB_TUNNEL_STREAMS);
	assert_int_equal(g->closes, 3 + 3);
	/* closing with streams open closes every connection */
	sb_tunnel_close(t);
	sb_loop_close(l);
	for (int i = 0; i < g->npeers; i++)
		pthread_join(g->th[i], NULL);
	assert_int_equal(g->eofs, SB_TUNNEL_STREAMS);
	g->npeers = 0;
	guest_free(g);
}

static void test_hostile_frames(void **state)
{
	struct guest *g = guest_new(ECHO);
	msgpack_object num = {.type = MSGPACK_OBJECT_POSITIVE_INTEGER};
	msgpack_object str = {.type = MSGPACK_OBJECT_STR};
	msgpack_object b = bin("abc", 3);
	sb_loop *l;
	sb_tunnel *t;

	str.via.str.ptr = "xyz";
	str.via.str.size = 3;
	num.via.u64 = 7;
	assert_int_equal(sb_loop_open(&l), SB_OK);
	assert_int_equal(sb_tunnel_open(l, &ops, g, &t), SB_OK);
	/* frames of a stream never opened: dropped, no CLOSE */
	sb_tunnel_frame(t, SB_CHAN_DATA, 9, &b);
	sb_tunnel_frame(t, SB_CHAN_CLOSE, 9, &nil);
	sb_tunnel_frame(t, 99, 9, &b); /* not a stream kind */
	assert_int_equal(g->closes, 0);
	assert_int_equal(g->connects, 0);
	/* text is taken as bytes; a number ends the stream */
	sb_tunnel_frame(t, SB_CHAN_OPEN, 1, &nil);
	sb_tunnel_frame(t, SB_CHAN_DATA, 1, &str);
	spin(l, 0.2);
	assert_int_equal(g->len, 3);
	assert_memory_equal(g->data, "XYZ", 3);
	sb_tunnel_frame(t, SB_CHAN_DATA, 1, &num);
	assert_int_equal(g->closes, 1);
	assert_int_equal(sb_tunnel_streams(t), 0);
	/* after its CLOSE, a stream's DATA is dropped and CLOSE again ignored */
	sb_tunnel_frame(t, SB_CHAN_OPEN, 3, &nil);
	sb_tunnel_frame(t, SB_CHAN_CLOSE, 3, &nil);
	sb_tunnel_frame(t, SB_CHAN_DATA, 3, &b);
	sb_tunnel_frame(t, SB_CHAN_CLOSE, 3, &nil);
	spin(l, 0.2);
	assert_int_equal(g->len, 3); /* the peer got nothing to echo */
	assert_int_equal(g->closes, 2);
	assert_int_equal(sb_tunnel_streams(t), 0);
	sb_tunnel_close(t);
	sb_loop_close(l);
	guest_free(g);
}

static void test_backlog_pauses_reading(void **state)
{
	struct guest *g = guest_new(ECHO);
	sb_loop *l;
	sb_tunnel *t;
	msgpack_object b = bin("abc", 3);

	assert_int_equal(sb_loop_open(&l), SB_OK);
	assert_int_equal(sb_tunnel_open(l, &ops, g, &t), SB_OK);
	g->backlog = SB_TUNNEL_BACKLOG; /* the guest is not reading */
	sb_tunnel_frame(t, SB_CHAN_OPEN, 5, &nil);
	sb_tunnel_frame(t, SB_CHAN_DATA, 5, &b);
	spin(l, 0.2);
	assert_int_equal(g->len, 0);
	g->backlog = 0;
	sb_tunnel_drained(t);
	spin(l, 0.2);
	assert_int_equal(g->len, 3);
	assert_memory_equal(g->data, "ABC", 3);
	sb_tunnel_close(t);
	sb_loop_close(l);
	guest_free(g);
}

static void test_peer_not_reading(void **state)
{
	struct guest *g = guest_new(MUTE);
	char *chunk = malloc(SB_CHAN_DATA_MAX);
	msgpack_object b;
	sb_loop *l;
	sb_tunnel *t;

	assert_non_null(chunk);
	memset(chunk, 'x', SB_CHAN_DATA_MAX);
	b = bin(chunk, SB_CHAN_DATA_MAX);
	assert_int_equal(sb_loop_open(&l), SB_OK);
	assert_int_equal(sb_tunnel_open(l, &ops, g, &t), SB_OK);
	sb_tunnel_frame(t, SB_CHAN_OPEN, 7, &nil);
	spin(l, 0.1);
	/* far more than the socket buffers and the stream's limit hold */
	for (size_t sent = 0; sent < 2 * SB_TUNNEL_BUFFER && sb_tunnel_streams(t);
	     sent += SB_CHAN_DATA_MAX)
		sb_tunnel_frame(t, SB_CHAN_DATA, 7, &b);
	assert_int_equal(sb_tunnel_streams(t), 0);
	assert_int_equal(g->closes, 1);
	sb_tunnel_close(t);
	sb_loop_close(l);
	guest_free(g);
	free(chunk);
}

/* The gateway answers before it has read everything and closes (as it
 * does an oversized body): the guest still gets the answer, then CLOSE,
 * and what it goes on sending is dropped. */
static void test_peer_answers_early(void **state)
{
	struct guest *g = guest_new(EARLY);
	char *chunk = malloc(SB_CHAN_DATA_MAX);
	msgpack_object b;
	sb_loop *l;
	sb_tunnel *t;

	assert_non_null(chunk);
	memset(chunk, 'y', SB_CHAN_DATA_MAX);
	b = bin(chunk, SB_CHAN_DATA_MAX);
	assert_int_equal(sb_loop_open(&l), SB_OK);
	assert_int_equal(sb_tunnel_open(l, &ops, g, &t), SB_OK);
	sb_tunnel_frame(t, SB_CHAN_OPEN, 11, &nil);
	for (int i = 0; i < 64 && sb_tunnel_streams(t); i++) {
		sb_tunnel_frame(t, SB_CHAN_DATA, 11, &b);
		spin(l, 0.01);
	}
	spin(l, 0.3);
	assert_int_equal(g->len, 5);
	assert_memory_equal(g->data, "EARLY", 5);
	assert_int_equal(g->closes, 1);
	assert_int_equal(g->last_close, 11);
	assert_int_equal(sb_tunnel_streams(t), 0);
	sb_tunnel_frame(t, SB_CHAN_DATA, 11, &b); /* late: dropped */
	sb_tunnel_frame(t, SB_CHAN_CLOSE, 11, &nil);
	assert_int_equal(g->closes, 1);
	sb_tunnel_close(t);
	sb_loop_close(l);
	guest_free(g);
	free(chunk);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bytes_both_ways),
	    cmocka_unit_test(test_refused_opens),
	    cmocka_unit_test(test_hostile_frames),
	    cmocka_unit_test(test_backlog_pauses_reading),
	    cmocka_unit_test(test_peer_not_reading),
	    cmocka_unit_test(test_peer_answers_early),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
