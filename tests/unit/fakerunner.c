/* fakerunner.c - a runner whose machines are threads speaking the guest
 * channel (see fakerunner.h). */
#include "tests/unit/fakerunner.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "engine/error.h"
#include "engine/mpack.h"
#include "engine/payload.h"
#include "vmm/chan.h"

#define SCRIPTS_MAX 32
#define LAYERS_MAX  256
#define POLL_MS	    20 /* a guest looks at its orders at least this often */
#define POWER_OFF   "the VM powered off before the harness reported (see console.log)"

/* A disk layer: run's number n, over base of base_run (has_base). */
struct layer {
	char run[SB_RUN_MAX];
	unsigned n;
	int frozen, lost, has_base;
	char base_run[SB_RUN_MAX];
	unsigned base;
	uint64_t memory_bytes; /* frozen with its memory */
};

struct script_entry {
	char name[SB_PLAN_NAME_MAX];
	int any; /* the default: no name */
	const struct fr_script *s;
};

struct fakerunner {
	sb_loop *loop;
	pthread_mutex_t mu; /* everything below, and each machine's info and orders */
	struct sb_machine *machines, **tail; /* oldest first */
	struct script_entry scripts[SCRIPTS_MAX];
	size_t nscripts;
	struct layer layers[LAYERS_MAX];
	size_t nlayers;
	unsigned made, frozen;
	uint64_t cpus, memory_mib; /* its capacity */
};

/* The guest's side: its thread's alone. */
struct guest {
	int fd; /* its end of the channel; -1 while the host is away */
	sb_chan_reader *rd;
	struct sb_chan_ring ring;
	msgpack_sbuffer out; /* bytes for the host not yet written */
	size_t out_off;
	int set_up, deaf, sig, spec, restored;
	unsigned lost; /* connections lost (closed by the host, or replaced) */
	uint64_t files, bytes, left; /* the SPEC's inputs; bytes still to come */
};

struct sb_machine {
	struct fakerunner *fr;
	struct sb_machine *next;
	const struct fr_script *script;
	struct fr_machine_info info; /* under fr->mu */
	/* orders to the thread, under fr->mu */
	int adopt_fd; /* a new connection's guest end, or -1 */
	int stop, stop_status;
	char stop_why[256];
	int efd; /* wakes the thread */
	pthread_t th;
	int th_on;
	struct guest g;
	/* the loop's */
	const struct sb_machine_events *ev; /* NULL: detached */
	void *ctx;
	int chan_fd, chan_again, chan_posted, told_end;
	struct sb_post chan_post;  /* the loop's: a connection's to its run */
	struct sb_post ended_post; /* the guest thread's: the end's, once */
	int reattached; /* found again: it did not start from memory now */
	sb_watch *op_w; /* a snapshot's or merge's end, to report */
	sb_snapshot_fn op_cb;
	void *op_ctx;
	int op_merge;
	struct sb_snapshot_info op_info;
};

static void lock(struct fakerunner *fr)
{
	pthread_mutex_lock(&fr->mu);
}

static void unlock(struct fakerunner *fr)
{
	pthread_mutex_unlock(&fr->mu);
}

/* --- layers (under fr->mu) --- */

static struct layer *layer_find(struct fakerunner *fr, const char *run, unsigned n)
{
	for (size_t i = 0; i < fr->nlayers; i++)
		if (fr->layers[i].n == n && !strcmp(fr->layers[i].run, run))
			return &fr->layers[i];
	return NULL;
}

/* Makes run's next layer, over base of base_run (NULL: the template's);
 * its number in *n. Errors: SB_ERR_FULL. */
static int layer_new(struct fakerunner *fr, const char *run, const char *base_run,
		     unsigned base, unsigned *n)
{
	struct layer *l;
	unsigned next = 0;

	if (fr->nlayers == LAYERS_MAX)
		return sb_seterr(SB_ERR_FULL, "the fake runner holds %d layers",
				 LAYERS_MAX);
	for (size_t i = 0; i < fr->nlayers; i++)
		if (!strcmp(fr->layers[i].run, run) && fr->layers[i].n >= next)
			next = fr->layers[i].n + 1;
	l = &fr->layers[fr->nlayers++];
	memset(l, 0, sizeof *l);
	snprintf(l->run, sizeof l->run, "%s", run);
	l->n = *n = next;
	if (base_run) {
		l->has_base = 1;
		snprintf(l->base_run, sizeof l->base_run, "%s", base_run);
		l->base = base;
	}
	return SB_OK;
}

/* --- orders and reports --- */

static void wake(struct sb_machine *m)
{
	uint64_t one = 1;

	if (write(m->efd, &one, sizeof one) < 0) {
		/* a counter at its maximum wakes the thread anyway */
	}
}

/* Orders m to end with wait status and why (under fr->mu). A machine
 * never started just ends. */
static void order_end(struct sb_machine *m, int status, const char *why)
{
	if (m->info.ended || m->stop)
		return;
	if (!m->th_on) {
		m->info.ended = 1;
		m->info.end_status = status;
		snprintf(m->info.end_why, sizeof m->info.end_why, "%s", why);
		return;
	}
	m->stop = 1;
	m->stop_status = status;
	snprintf(m->stop_why, sizeof m->stop_why, "%s", why);
	wake(m);
}

/* On the loop: the machine's channel is connected. */
static void on_channel(void *ctx)
{
	struct sb_machine *m = ctx;
	int fd = m->chan_fd;

	m->chan_posted = 0;
	if (fd < 0)
		return;
	m->chan_fd = -1;
	if (!m->ev) {
		close(fd);
		return;
	}
	m->ev->channel(m->ctx, fd, m->chan_again);
}

/* Hands the host end fd of a new connection to m's run, later. */
static void channel_post(struct sb_machine *m, int fd, int again)
{
	if (m->chan_fd >= 0)
		close(m->chan_fd);
	m->chan_fd = fd;
	m->chan_again = again;
	if (!m->chan_posted) {
		m->chan_posted = 1;
		sb_loop_post(m->fr->loop, &m->chan_post, on_channel, m);
	}
}

/* On the loop: the machine has ended; its run hears it once. */
static void on_ended(void *ctx)
{
	struct sb_machine *m = ctx;
	char why[sizeof m->info.end_why];
	int status;

	if (!m->ev || m->told_end)
		return;
	lock(m->fr);
	status = m->info.end_status;
	memcpy(why, m->info.end_why, sizeof why);
	unlock(m->fr);
	m->told_end = 1;
	m->ev->ended(m->ctx, status, why); /* may free (detach) m */
}

/* --- the guest: frames out --- */

static void g_raw(struct sb_machine *m, const void *buf, size_t len)
{
	if (m->g.fd >= 0)
		msgpack_sbuffer_write(&m->g.out, buf, len);
}

/* Sends a frame of kind (not numbered) whose body is body's bytes. */
/* Sends a frame of kind on stream with body. */
static void g_frame_on(struct sb_machine *m, int kind, uint64_t stream,
		       const msgpack_sbuffer *body)
{
	msgpack_sbuffer f;

	msgpack_sbuffer_init(&f);
	if (body->data && sb_chan_encode(kind, stream, body->data, body->size, &f) == SB_OK)
		g_raw(m, f.data, f.size);
	msgpack_sbuffer_destroy(&f);
}

static void g_frame(struct sb_machine *m, int kind, const msgpack_sbuffer *body)
{
	g_frame_on(m, kind, 0, body);
}

/* Numbers, keeps and sends a frame of kind (EVENT or EVENT_JSON). */
static void g_numbered(struct sb_machine *m, int kind, const msgpack_sbuffer *body)
{
	const struct sb_chan_kept *k;

	if (!body->data || sb_chan_ring_add(&m->g.ring, kind, body->data, body->size, &k))
		return;
	g_raw(m, k->frame, k->len);
	lock(m->fr);
	m->info.seq = m->g.ring.seq;
	m->info.kept = m->g.ring.n;
	unlock(m->fr);
}

static void g_hello(struct sb_machine *m, int resume)
{
	msgpack_sbuffer b;
	msgpack_packer pk;

	msgpack_sbuffer_init(&b);
	msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 3);
	sb_pack_kstr(&pk, "version", SB_CHAN_VERSION);
	sb_pack_kstr(&pk, "kernel", "fake");
	sb_pack_ku64(&pk, "resume", (uint64_t)resume);
	g_frame(m, SB_CHAN_HELLO, &b);
	msgpack_sbuffer_destroy(&b);
	lock(m->fr);
	m->info.hellos++;
	unlock(m->fr);
}

/* Starts an EVENT body {type, payload: a map of n fields} in b. */
static void g_event_begin(msgpack_sbuffer *b, msgpack_packer *pk, const char *type,
			  uint32_t n)
{
	msgpack_sbuffer_init(b);
	msgpack_packer_init(pk, b, msgpack_sbuffer_write);
	msgpack_pack_map(pk, 2);
	sb_pack_kstr(pk, "type", type);
	sb_pack_str(pk, "payload");
	msgpack_pack_map(pk, n);
}

static void g_event_send(struct sb_machine *m, msgpack_sbuffer *b)
{
	g_numbered(m, SB_CHAN_EVENT, b);
	msgpack_sbuffer_destroy(b);
}

/* --- the guest: frames in --- */

static void g_host_gone(struct sb_machine *m)
{
	m->g.lost++;
	close(m->g.fd);
	m->g.fd = -1;
	m->g.out.size = m->g.out_off = 0;
	sb_chan_reader_free(m->g.rd);
	m->g.rd = NULL;
	sb_chan_reader_new(&m->g.rd);
	lock(m->fr);
	m->info.connected = 0;
	unlock(m->fr);
}

/* A new connection: what the old one had goes, the host hears HELLO. */
static void g_adopt(struct sb_machine *m, int fd)
{
	if (m->g.fd >= 0)
		g_host_gone(m);
	m->g.fd = fd;
	m->g.deaf = 0;
	lock(m->fr);
	m->info.connected = 1;
	unlock(m->fr);
	g_hello(m, m->g.set_up);
}

static void g_flush(struct sb_machine *m)
{
	struct guest *g = &m->g;
	ssize_t n;

	while (g->fd >= 0 && g->out_off < g->out.size) {
		n = send(g->fd, g->out.data + g->out_off, g->out.size - g->out_off,
			 MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n < 0) {
			g_host_gone(m);
			return;
		}
		g->out_off += (size_t)n;
	}
	g->out.size = g->out_off = 0;
}

/* ACK {seq, resend?}: the kept frames up to seq go (unless deaf);
 * resend: RESEND {next}, then every kept frame again. */
static void g_ack(struct sb_machine *m, const msgpack_object *body)
{
	const struct sb_chan_kept *k;
	msgpack_sbuffer b;
	msgpack_packer pk;

	if (!m->g.deaf)
		sb_chan_ring_ack(&m->g.ring, sb_map_u64(body, "seq", 0));
	if (sb_map_bool(body, "resend", 0)) {
		msgpack_sbuffer_init(&b);
		msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
		msgpack_pack_map(&pk, 1);
		sb_pack_ku64(&pk, "next", sb_chan_ring_next(&m->g.ring));
		g_frame(m, SB_CHAN_RESEND, &b);
		msgpack_sbuffer_destroy(&b);
		for (size_t i = 0; (k = sb_chan_ring_at(&m->g.ring, i)); i++)
			g_raw(m, k->frame, k->len);
	}
	lock(m->fr);
	m->info.resends += sb_map_bool(body, "resend", 0);
	m->info.kept = m->g.ring.n;
	unlock(m->fr);
}

/* SPEC: its inputs' count and bytes (their INPUT frames follow), its
 * argv for the test. */
static void g_spec(struct sb_machine *m, const msgpack_object *body)
{
	const msgpack_object *in = sb_map_get(body, "inputs"),
			     *argv = sb_map_get(body, "argv");
	char line[sizeof m->info.argv] = "";
	size_t at = 0;

	m->g.files = m->g.bytes = 0;
	for (uint32_t i = 0;
	     in && in->type == MSGPACK_OBJECT_ARRAY && i < in->via.array.size; i++) {
		m->g.files++;
		m->g.bytes += sb_map_u64(&in->via.array.ptr[i], "size", 0);
	}
	for (uint32_t i = 0;
	     argv && argv->type == MSGPACK_OBJECT_ARRAY && i < argv->via.array.size;
	     i++) {
		const msgpack_object *a = &argv->via.array.ptr[i];
		if (a->type == MSGPACK_OBJECT_STR && at < sizeof line)
			at += (size_t)snprintf(line + at, sizeof line - at, "%s%.*s",
					       i ? " " : "", (int)a->via.str.size,
					       a->via.str.ptr);
	}
	m->g.left = m->g.bytes;
	m->g.spec = 1;
	lock(m->fr);
	m->info.specs++;
	m->info.input_files = m->g.files;
	m->info.input_bytes = 0;
	memcpy(m->info.argv, line, sizeof line);
	unlock(m->fr);
}

static void g_synced(struct sb_machine *m, const msgpack_object *body)
{
	msgpack_sbuffer b;
	msgpack_packer pk;

	msgpack_sbuffer_init(&b);
	msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 2);
	sb_pack_ku64(&pk, "id", sb_map_u64(body, "id", 0));
	sb_pack_kbool(&pk, "frozen", sb_map_bool(body, "freeze", 0));
	g_frame(m, SB_CHAN_SYNCED, &b);
	msgpack_sbuffer_destroy(&b);
	lock(m->fr);
	m->info.syncs++;
	unlock(m->fr);
}

static void g_signal(struct sb_machine *m, const msgpack_object *body)
{
	int sig = (int)sb_map_u64(body, "signal", 0);

	if (!m->g.sig)
		m->g.sig = sig;
	lock(m->fr);
	if (m->info.nsignals < FR_SIGNALS_MAX)
		m->info.signals[m->info.nsignals++] = sig;
	unlock(m->fr);
}

static void g_on_frame(struct sb_machine *m, const struct sb_chan_frame *f)
{
	size_t n;

	switch (f->kind) {
	case SB_CHAN_ACK: g_ack(m, &f->body); break;
	case SB_CHAN_SPEC: g_spec(m, &f->body); break;
	case SB_CHAN_SYNC: g_synced(m, &f->body); break;
	case SB_CHAN_SIGNAL: g_signal(m, &f->body); break;
	case SB_CHAN_INPUT:
		n = f->body.type == MSGPACK_OBJECT_BIN ? f->body.via.bin.size : 0;
		m->g.left -= n < m->g.left ? n : m->g.left;
		lock(m->fr);
		m->info.input_bytes += n;
		unlock(m->fr);
		break;
	case SB_CHAN_RESTORED:
		m->g.restored = 1;
		lock(m->fr);
		m->info.restored++;
		unlock(m->fr);
		break;
	default: break; /* THAW, the tunnel's frames */
	}
}

static void g_read(struct sb_machine *m)
{
	char buf[65536];
	struct sb_chan_frame f;
	ssize_t n = read(m->g.fd, buf, sizeof buf);
	int rc;

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n <= 0) {
		g_host_gone(m); /* the daemon went away */
		return;
	}
	sb_chan_reader_feed(m->g.rd, buf, (size_t)n);
	while ((rc = sb_chan_reader_next(m->g.rd, &f)) != SB_END) {
		if (rc == SB_OK)
			g_on_frame(m, &f);
		else if (sb_chan_reader_error(m->g.rd))
			sb_chan_reader_resync(m->g.rd);
	}
}

/* Waits up to POLL_MS for the channel, a new connection or an order, and
 * handles what came. Returns 1 once the machine is to end. */
static int g_pump(struct sb_machine *m)
{
	struct pollfd p[2];
	uint64_t v;
	int stop, fd;

	g_flush(m);
	p[0] = (struct pollfd){.fd = m->efd, .events = POLLIN};
	p[1] = (struct pollfd){.fd = m->g.fd,
			       .events = POLLIN | (m->g.out.size ? POLLOUT : 0)};
	if (poll(p, 2, POLL_MS) < 0)
		p[0].revents = p[1].revents = 0;
	if (p[0].revents && read(m->efd, &v, sizeof v) < 0)
		v = 0;
	lock(m->fr);
	stop = m->stop;
	fd = m->adopt_fd;
	m->adopt_fd = -1;
	unlock(m->fr);
	if (stop) {
		if (fd >= 0)
			close(fd);
		return 1;
	}
	if (fd >= 0)
		g_adopt(m, fd);
	else if (p[1].revents && m->g.fd >= 0)
		g_read(m);
	g_flush(m);
	return 0;
}

/* --- the guest's life --- */

/* The machine is over: its channel closes, its end is reported. */
static void g_off(struct sb_machine *m, int status, const char *why)
{
	if (m->g.fd >= 0)
		close(m->g.fd);
	m->g.fd = -1;
	lock(m->fr);
	m->info.ended = 1;
	m->info.end_status = status;
	snprintf(m->info.end_why, sizeof m->info.end_why, "%s", why);
	m->info.connected = 0;
	if (m->adopt_fd >= 0)
		close(m->adopt_fd);
	m->adopt_fd = -1;
	unlock(m->fr);
	sb_loop_post(m->fr->loop, &m->ended_post, on_ended, m);
}

/* Ended by an order (stop, signal, kill, close). */
static void g_stopped(struct sb_machine *m)
{
	char why[sizeof m->stop_why];
	int status;

	lock(m->fr);
	status = m->stop_status;
	memcpy(why, m->stop_why, sizeof why);
	unlock(m->fr);
	g_off(m, status, why);
}

static int until_spec(struct sb_machine *m, const void *arg)
{
	return m->g.spec && !m->g.left;
}

static int until_restored(struct sb_machine *m, const void *arg)
{
	return m->g.restored;
}

static int until_signal(struct sb_machine *m, const void *arg)
{
	return m->g.sig != 0;
}

static int until_acked(struct sb_machine *m, const void *arg)
{
	return m->g.ring.n == 0;
}

/* A connection was lost since *arg connections were (a new one may have
 * replaced it already). */
static int until_gone(struct sb_machine *m, const void *arg)
{
	return m->g.lost > *(const unsigned *)arg;
}

static int until_back(struct sb_machine *m, const void *arg)
{
	return m->g.fd >= 0;
}

static int until_flushed(struct sb_machine *m, const void *arg)
{
	return m->g.fd < 0 || !m->g.out.size;
}

static int until_time(struct sb_machine *m, const void *arg)
{
	struct timespec now;
	const struct timespec *end = arg;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec > end->tv_sec ||
	       (now.tv_sec == end->tv_sec && now.tv_nsec >= end->tv_nsec);
}

/* Answers the host until cond holds (0), or the machine is ordered to end
 * (1: it has). */
static int g_wait(struct sb_machine *m,
		  int (*cond)(struct sb_machine *m, const void *arg), const void *arg)
{
	while (!cond(m, arg)) {
		if (g_pump(m)) {
			g_stopped(m);
			return 1;
		}
	}
	return 0;
}

/* The harness ended (status, sig): run.exited, DONE once every frame is
 * acknowledged, power off. Returns 1: the machine is over. */
static int g_harness_end(struct sb_machine *m, int status, int sig, const char *error)
{
	msgpack_sbuffer b;
	msgpack_packer pk;
	sb_mapw done;

	if (!error) {
		g_event_begin(&b, &pk, "run.exited", 2);
		sb_pack_ki64(&pk, "status", status);
		sb_pack_ku64(&pk, "signal", (uint64_t)sig);
		g_event_send(m, &b);
	}
	if (g_wait(m, until_acked, NULL))
		return 1;
	msgpack_sbuffer_init(&b);
	msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
	sb_mapw_begin(&done, &pk);
	if (error)
		sb_mapw_str(&done, "error", error);
	sb_mapw_end(&done);
	g_frame(m, SB_CHAN_DONE, &b);
	msgpack_sbuffer_destroy(&b);
	if (g_wait(m, until_flushed, NULL))
		return 1;
	g_off(m, 0, POWER_OFF);
	return 1;
}

/* The JSON text js, single quotes standing for double ones, parsed; NULL
 * for NULL, for a text that is no JSON, or when out of memory. */
static json_t *quoted_json(const char *js)
{
	char *t = js ? strdup(js) : NULL;
	json_t *j = NULL;

	for (char *c = t; c && *c; c++)
		if (*c == '\'')
			*c = '"';
	if (t)
		j = json_loads(t, 0, NULL);
	free(t);
	return j;
}

/* EVENT {type, payload: the JSON text js, single quotes for double}. */
static void g_event_json(struct sb_machine *m, const char *type, const char *js)
{
	json_t *j = quoted_json(js ? js : "{}");
	msgpack_sbuffer b;
	msgpack_packer pk;

	msgpack_sbuffer_init(&b);
	msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 2);
	sb_pack_kstr(&pk, "type", type);
	sb_pack_str(&pk, "payload");
	if (!j || sb_json_to_msgpack(j, &pk))
		msgpack_pack_map(&pk, 0); /* a test's typo: the schema refuses it */
	g_event_send(m, &b);
	json_decref(j);
}

static void g_file(struct sb_machine *m, const char *path, const char *data)
{
	size_t n = strlen(data);
	msgpack_sbuffer b;
	msgpack_packer pk;
	char hex[17];

	snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH3_64bits(data, n));
	g_event_begin(&b, &pk, "agent.file.changed", 5);
	sb_pack_kstr(&pk, "path", path);
	sb_pack_kstr(&pk, "kind", "created");
	sb_pack_ku64(&pk, "size", n);
	sb_pack_kstr(&pk, "xxh3", hex);
	sb_pack_str(&pk, "content");
	msgpack_pack_bin_with_body(&pk, data, n);
	g_event_send(m, &b);
}

/* A frame of kind on stream, its body the JSON text js (single quotes for
 * double) or, for NULL, a msgpack string. */
static void g_answer(struct sb_machine *m, int kind, uint64_t stream, const char *js)
{
	json_t *j = quoted_json(js);
	msgpack_sbuffer b;
	msgpack_packer pk;

	msgpack_sbuffer_init(&b);
	msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
	if (!j || sb_json_to_msgpack(j, &pk))
		sb_pack_str(&pk, "garbage");
	g_frame_on(m, kind, stream, &b);
	msgpack_sbuffer_destroy(&b);
	json_decref(j);
}

/* Sends what step s says. */
static void g_emit(struct sb_machine *m, const struct fr_step *s)
{
	msgpack_sbuffer b;
	msgpack_packer pk;

	switch (s->op) {
	case FR_EVENT: g_event_json(m, s->type, s->text); break;
	case FR_OUTPUT:
		g_event_begin(&b, &pk, "agent.output", 2);
		sb_pack_kstr(&pk, "stream", "stdout");
		sb_pack_kstr(&pk, "data", s->text);
		g_event_send(m, &b);
		break;
	case FR_FILE: g_file(m, s->text, s->data); break;
	case FR_ANSWER: g_answer(m, s->n, s->stream, s->text); break;
	case FR_LINE:
		msgpack_sbuffer_init(&b);
		msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
		msgpack_pack_bin_with_body(&pk, s->text, strlen(s->text));
		g_numbered(m, SB_CHAN_EVENT_JSON, &b);
		msgpack_sbuffer_destroy(&b);
		break;
	default: break;
	}
}

/* Plays step s. Returns 1 once the machine is over. */
static int g_step(struct sb_machine *m, const struct fr_step *s)
{
	struct timespec end;
	unsigned lost;

	switch (s->op) {
	case FR_EXIT: return g_harness_end(m, s->n, 0, NULL);
	case FR_SIGNALLED:
		if (g_wait(m, until_signal, NULL))
			return 1;
		return g_harness_end(m, 128 + m->g.sig, m->g.sig, NULL);
	case FR_DIE: g_off(m, s->n, s->text); return 1;
	case FR_SETUP_FAIL: return g_harness_end(m, 0, 0, s->text);
	case FR_ACKED: return g_wait(m, until_acked, NULL);
	case FR_HOST_GONE: lost = m->g.lost; return g_wait(m, until_gone, &lost);
	case FR_DEAF: m->g.deaf = 1; return 0;
	case FR_SLEEP:
		clock_gettime(CLOCK_MONOTONIC, &end);
		end.tv_sec += s->n / 1000;
		end.tv_nsec += (long)(s->n % 1000) * 1000000;
		if (end.tv_nsec >= 1000000000) {
			end.tv_sec++;
			end.tv_nsec -= 1000000000;
		}
		return g_wait(m, until_time, &end);
	default: g_emit(m, s); return 0;
	}
}

/* The boot: HELLO (a late guest's on its second connection), the SPEC
 * and its inputs, harness.input.ready; a copy of a memory snapshot waits
 * for RESTORED and says HELLO {resume 1}.
 * Returns 1 once the machine is over. */
static int g_boot(struct sb_machine *m)
{
	msgpack_sbuffer b;
	msgpack_packer pk;
	unsigned none = 0;

	if (m->info.memory_bytes) {
		if (g_wait(m, until_restored, NULL))
			return 1;
		m->g.set_up = 1;
		g_hello(m, 1);
		return 0;
	}
	if (m->script && m->script->late) {
		/* its first host goes first; the next hears HELLO on adopting */
		if (g_wait(m, until_gone, &none) || g_wait(m, until_back, NULL))
			return 1;
	} else {
		g_hello(m, 0);
	}
	if (g_wait(m, until_spec, NULL))
		return 1;
	g_event_begin(&b, &pk, "harness.input.ready", 2);
	sb_pack_ku64(&pk, "files", m->g.files);
	sb_pack_ku64(&pk, "bytes", m->g.bytes);
	g_event_send(m, &b);
	m->g.set_up = 1;
	return 0;
}

static void *guest_main(void *arg)
{
	struct sb_machine *m = arg;
	const struct fr_step *s = m->script ? m->script->steps : NULL;

	if (m->script && m->script->mute) {
		while (!g_pump(m))
			;
		g_stopped(m);
		return NULL;
	}
	if (g_boot(m))
		return NULL;
	for (; s && s->op != FR_END; s++)
		if (g_step(m, s))
			return NULL;
	while (!g_pump(m)) /* the harness runs on */
		;
	g_stopped(m);
	return NULL;
}

/* --- the ops --- */

static const struct fr_script *script_of(struct fakerunner *fr, const char *name)
{
	const struct fr_script *s = NULL;

	lock(fr);
	for (size_t i = 0; i < fr->nscripts; i++) {
		if (!fr->scripts[i].any && !strcmp(fr->scripts[i].name, name)) {
			s = fr->scripts[i].s;
			break;
		}
		if (fr->scripts[i].any)
			s = fr->scripts[i].s;
	}
	unlock(fr);
	return s;
}

static void machine_free(struct sb_machine *m)
{
	if (m->g.fd >= 0)
		close(m->g.fd);
	if (m->chan_fd >= 0)
		close(m->chan_fd);
	if (m->adopt_fd >= 0)
		close(m->adopt_fd);
	if (m->efd >= 0)
		close(m->efd);
	sb_watch_stop(m->op_w);
	sb_chan_reader_free(m->g.rd);
	sb_chan_ring_free(&m->g.ring);
	msgpack_sbuffer_destroy(&m->g.out);
	free(m);
}

static struct sb_machine *machine_new(struct fakerunner *fr, const struct sb_plan *p,
				      const struct fr_script *s)
{
	struct sb_machine *m = calloc(1, sizeof *m);

	if (!m)
		return NULL;
	m->fr = fr;
	m->script = s;
	m->g.fd = m->adopt_fd = m->chan_fd = -1;
	msgpack_sbuffer_init(&m->g.out);
	snprintf(m->info.run, sizeof m->info.run, "%s", p->run);
	m->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (m->efd < 0 || sb_chan_reader_new(&m->g.rd)) {
		machine_free(m);
		return NULL;
	}
	return m;
}

/* create and create_from: a machine of plan p on a new layer over
 * from_run's frozen layer base (from_run NULL: the template). */
static int fr_make(struct fakerunner *fr, const struct sb_plan *p, const char *from_run,
		   unsigned base, uint64_t memory_bytes, sb_machine **out, char *accel,
		   char *warning, size_t cap)
{
	const struct fr_script *s = script_of(fr, p->name);
	struct sb_machine *m;
	struct layer *l;
	int rc = SB_OK;

	if (s && s->create_rc)
		return sb_seterr(s->create_rc, "%s",
				 s->create_why ? s->create_why : "the fake runner fails");
	if (!(m = machine_new(fr, p, s)))
		return SB_ERR_NOMEM;
	lock(fr);
	if (from_run && (!(l = layer_find(fr, from_run, base)) || !l->frozen || l->lost))
		rc = sb_seterr(SB_ERR_NOTFOUND,
			       "snapshot s%u of run %s: its layer is gone", base,
			       from_run);
	else if (from_run && memory_bytes && l->memory_bytes != memory_bytes)
		rc =
		    sb_seterr(l->memory_bytes ? SB_ERR_CORRUPT : SB_ERR_NOTFOUND,
			      "snapshot s%u of run %s: its memory holds %llu bytes, %llu "
			      "were saved",
			      base, from_run, (unsigned long long)l->memory_bytes,
			      (unsigned long long)memory_bytes);
	if (rc == SB_OK &&
	    (rc = layer_new(fr, p->run, from_run, base, &m->info.layer)) == SB_OK) {
		m->info.from = from_run != NULL;
		snprintf(m->info.from_run, sizeof m->info.from_run, "%s",
			 from_run ? from_run : "");
		m->info.base_layer = base;
		m->info.memory_bytes = memory_bytes;
		*fr->tail = m;
		fr->tail = &m->next;
		fr->made++;
	}
	unlock(fr);
	if (rc) {
		machine_free(m);
		return rc;
	}
	snprintf(accel, 8, "fake");
	if (cap)
		warning[0] = 0;
	*out = m;
	return SB_OK;
}

static int fr_create(void *runner, const struct sb_plan *p, sb_machine **out, char *accel,
		     char *warning, size_t cap)
{
	return fr_make(runner, p, NULL, 0, 0, out, accel, warning, cap);
}

static int fr_create_from(void *runner, const struct sb_plan *p, const char *from_run,
			  unsigned base_layer, uint64_t memory_bytes, sb_machine **out,
			  char *accel, char *warning, size_t cap)
{
	return fr_make(runner, p, from_run, base_layer, memory_bytes, out, accel, warning,
		       cap);
}

/* A socket pair: the host's end (non-blocking) in *host, the guest's in
 * *guest. */
static int pair_open(int *host, int *guest)
{
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv))
		return sb_seterr(SB_ERR_IO, "socketpair: %s", strerror(errno));
	*host = sv[0];
	*guest = sv[1];
	return SB_OK;
}

static int fr_start(sb_machine *m, const struct sb_machine_events *ev, void *ctx)
{
	int host, rc;

	if ((rc = pair_open(&host, &m->g.fd)))
		return rc;
	m->ev = ev;
	m->ctx = ctx;
	lock(m->fr);
	m->info.started = m->info.connected = 1;
	if ((rc = pthread_create(&m->th, NULL, guest_main, m)) == 0)
		m->th_on = 1;
	unlock(m->fr);
	if (rc) {
		close(host);
		return sb_seterr(SB_ERR_IO, "pthread_create: %s", strerror(rc));
	}
	channel_post(m, host, m->info.memory_bytes > 0);
	return SB_OK;
}

static int fr_signal(sb_machine *m, int sig)
{
	char why[200];
	int rc = SB_OK;

	snprintf(why, sizeof why,
		 "QEMU was killed by signal %d (%s) before the harness reported", sig,
		 strsignal(sig));
	lock(m->fr);
	if (m->info.ended || m->stop)
		rc = sb_seterr(SB_ERR_STATE, "the VM of run %s has ended", m->info.run);
	else
		order_end(m, sig, why);
	unlock(m->fr);
	return rc;
}

static void fr_stop(sb_machine *m, double grace_s)
{
	lock(m->fr);
	order_end(m, 0, POWER_OFF);
	unlock(m->fr);
}

static void on_op_done(void *ctx)
{
	struct sb_machine *m = ctx;
	sb_snapshot_fn cb = m->op_cb;

	sb_watch_stop(m->op_w);
	m->op_w = NULL;
	cb(m->op_ctx, SB_OK, m->op_merge ? NULL : &m->op_info); /* may free m */
}

static int op_later(sb_machine *m, sb_snapshot_fn cb, void *ctx, int merge)
{
	if (!(m->op_w = sb_loop_timer(m->fr->loop, 0, 0, on_op_done, m)))
		return SB_ERR_NOMEM;
	m->op_cb = cb;
	m->op_ctx = ctx;
	m->op_merge = merge;
	return SB_OK;
}

/* Freezes m's layer (with its memory); a live machine goes on in a new
 * one. Fills m->op_info. Under fr->mu. */
static int snap_take(sb_machine *m, int memory)
{
	struct sb_snapshot_info *in = &m->op_info;
	struct layer *l = layer_find(m->fr, m->info.run, m->info.layer);

	if (!l)
		return sb_seterr(SB_ERR_STATE, "run %s has no layer", m->info.run);
	if (!m->info.ended &&
	    layer_new(m->fr, m->info.run, m->info.run, l->n, &m->info.layer))
		return SB_ERR_FULL;
	in->layer = l->n; /* the table is fixed: l stays valid */
	l->frozen = 1;
	l->memory_bytes = memory ? FR_MEMORY_BYTES : 0;
	m->fr->frozen++;
	snprintf(in->layer_name, sizeof in->layer_name, "fakerunner/%s/layers/%u",
		 m->info.run, in->layer);
	in->memory_name[0] = 0;
	if (memory)
		snprintf(in->memory_name, sizeof in->memory_name,
			 "fakerunner/%s/layers/%u.mem", m->info.run, in->layer);
	in->memory_bytes = l->memory_bytes;
	in->bytes = 4096 + in->memory_bytes;
	in->paused_ms = memory ? 1 : 0;
	in->duration_ms = 1;
	return SB_OK;
}

static int fr_snapshot(sb_machine *m, const struct sb_snapshot_req *req,
		       sb_snapshot_fn cb, void *ctx)
{
	int rc;

	if (m->op_w)
		return sb_seterr(SB_ERR_STATE, "a snapshot of run %s is being taken",
				 m->info.run);
	lock(m->fr);
	if (m->info.ended && req->memory)
		rc = sb_seterr(SB_ERR_STATE, "run %s has ended: no memory to save",
			       m->info.run);
	else
		rc = snap_take(m, req->memory);
	unlock(m->fr);
	return rc ? rc : op_later(m, cb, ctx, 0);
}

static int fr_merge(sb_machine *m, unsigned layer, sb_snapshot_fn cb, void *ctx)
{
	struct layer *l;
	int rc = SB_OK;

	if (m->op_w)
		return sb_seterr(SB_ERR_STATE, "a snapshot of run %s is being taken",
				 m->info.run);
	lock(m->fr);
	if (m->info.ended)
		rc = sb_seterr(SB_ERR_STATE, "the VM of run %s has ended", m->info.run);
	else if (!(l = layer_find(m->fr, m->info.run, layer)) || l->lost)
		rc = sb_seterr(SB_ERR_NOTFOUND, "run %s has no layer %u", m->info.run,
			       layer);
	else
		l->lost = 1; /* merged into the one above it */
	unlock(m->fr);
	return rc ? rc : op_later(m, cb, ctx, 1);
}

static int fr_readers(void *runner, const char *run, unsigned layer,
		      char (*users)[SB_RUN_MAX], size_t max, size_t *count)
{
	struct fakerunner *fr = runner;
	int rc = SB_OK;

	*count = 0;
	lock(fr);
	if (!layer_find(fr, run, layer))
		rc = sb_seterr(SB_ERR_NOTFOUND, "run %s has no layer %u", run, layer);
	for (size_t i = 0; i < fr->nlayers; i++) {
		const struct layer *l = &fr->layers[i];
		if (!l->has_base || l->lost || l->base != layer || strcmp(l->base_run, run) ||
		    !strcmp(l->run, run))
			continue;
		if (*count < max)
			snprintf(users[*count], SB_RUN_MAX, "%s", l->run);
		++*count;
	}
	unlock(fr);
	return rc;
}

/* 1 when a layer left reads l: another run's, or one of l's run's that
 * keep (indexed as fr->layers) says is kept. Under fr->mu. */
static int layer_read(struct fakerunner *fr, const struct layer *l,
		      const unsigned char *keep)
{
	for (size_t j = 0; j < fr->nlayers; j++) {
		const struct layer *r = &fr->layers[j];
		if (!r->lost && r->has_base && r->base == l->n && !strcmp(r->base_run, l->run) &&
		    (strcmp(r->run, l->run) || keep[j]))
			return 1;
	}
	return 0;
}

/* Its layers but those read (a reader comes after what it reads in
 * fr->layers, so one pass from the newest finds what its kept ones
 * read) go, FR_LAYER_BYTES each and their memory's. */
static int fr_release(void *runner, const char *run, int dry, struct sb_layers_freed *out)
{
	struct fakerunner *fr = runner;
	unsigned char keep[LAYERS_MAX] = {0};

	memset(out, 0, sizeof *out);
	lock(fr);
	for (size_t i = fr->nlayers; i-- > 0;) {
		struct layer *l = &fr->layers[i];
		if (l->lost || strcmp(l->run, run))
			continue;
		if ((keep[i] = (unsigned char)layer_read(fr, l, keep))) {
			out->kept++;
			continue;
		}
		out->layers++;
		out->bytes += FR_LAYER_BYTES + l->memory_bytes;
	}
	for (size_t i = 0; !dry && i < fr->nlayers; i++)
		if (!keep[i] && !strcmp(fr->layers[i].run, run))
			fr->layers[i].lost = 1;
	unlock(fr);
	return SB_OK;
}

/* Its layers left, FR_LAYER_BYTES each: a frozen one a snapshot's, else
 * a run's; their memory states. */
static int fr_usage(void *runner, struct sb_layers_usage *u)
{
	struct fakerunner *fr = runner;

	memset(u, 0, sizeof *u);
	lock(fr);
	for (size_t i = 0; i < fr->nlayers; i++) {
		const struct layer *l = &fr->layers[i];
		size_t j = 0;
		if (l->lost)
			continue;
		while (j < i && (fr->layers[j].lost || strcmp(fr->layers[j].run, l->run)))
			j++;
		u->nruns += j == i; /* its run's first layer left */
		if (l->frozen) {
			u->snapshots += FR_LAYER_BYTES;
			u->nsnapshots++;
		} else {
			u->runs += FR_LAYER_BYTES;
		}
		if (l->memory_bytes) {
			u->memory += l->memory_bytes;
			u->nmemory++;
		}
	}
	unlock(fr);
	return SB_OK;
}

/* The newest machine of run that lives and no run holds, or NULL. Under
 * fr->mu. */
static struct sb_machine *live_of(struct fakerunner *fr, const char *run, int detached)
{
	struct sb_machine *found = NULL;

	for (struct sb_machine *m = fr->machines; m; m = m->next)
		if (!strcmp(m->info.run, run) && m->info.started && !m->info.ended &&
		    !m->stop && (!detached || !m->ev))
			found = m;
	return found;
}

static int fr_reattach(void *runner, const struct sb_plan *p,
		       const struct sb_machine_events *ev, void *ctx, sb_machine **out)
{
	struct fakerunner *fr = runner;
	struct sb_machine *m;
	int host, guest, rc;

	if ((rc = pair_open(&host, &guest)))
		return rc;
	lock(fr);
	if ((m = live_of(fr, p->run, 1))) {
		if (m->adopt_fd >= 0)
			close(m->adopt_fd);
		m->adopt_fd = guest;
		wake(m);
	}
	unlock(fr);
	if (!m) {
		close(host);
		close(guest);
		return sb_seterr(SB_ERR_NOTFOUND, "the VM of run %s is gone", p->run);
	}
	m->ev = ev;
	m->ctx = ctx;
	m->reattached = 1;
	channel_post(m, host, 1);
	*out = m;
	return SB_OK;
}

static void fr_reap(void *runner, const char *run)
{
	struct fakerunner *fr = runner;

	lock(fr);
	for (struct sb_machine *m = fr->machines; m; m = m->next)
		if (!strcmp(m->info.run, run))
			order_end(m, SIGKILL, "reaped");
	unlock(fr);
}

static void fr_sweep(void *runner, int (*known)(void *ctx, const char *run), void *ctx)
{
	struct fakerunner *fr = runner;
	char run[SB_RUN_MAX];
	int k;

	for (size_t i = 0;; i++) { /* known reads the record: not under fr->mu */
		lock(fr);
		if (i >= fr->nlayers) {
			unlock(fr);
			break;
		}
		snprintf(run, sizeof run, "%s", fr->layers[i].run);
		unlock(fr);
		if ((k = known(ctx, run)) == 2)
			continue;
		lock(fr);
		for (struct sb_machine *m = fr->machines; m; m = m->next)
			if (!strcmp(m->info.run, run))
				order_end(m, SIGKILL, "swept: its run is not live");
		for (size_t j = 0; !k && j < fr->nlayers; j++)
			if (!strcmp(fr->layers[j].run, run))
				fr->layers[j].lost = 1; /* no record has the run */
		unlock(fr);
	}
}

static void fr_free(sb_machine *m)
{
	if (!m)
		return;
	m->ev = NULL; /* its thread goes on, for a reattach */
	m->ctx = NULL;
	if (m->chan_fd >= 0)
		close(m->chan_fd);
	m->chan_fd = -1;
	sb_watch_stop(m->op_w);
	m->op_w = NULL;
}

static void fr_discard(sb_machine *m)
{
	struct layer *l;

	if (!m)
		return;
	lock(m->fr);
	if ((l = layer_find(m->fr, m->info.run, m->info.layer)))
		l->lost = 1;
	order_end(m, 0, "discarded");
	unlock(m->fr);
	fr_free(m);
}

static int fr_restored(sb_machine *m)
{
	return m->info.memory_bytes > 0 && !m->reattached; /* as QEMU's -incoming */
}

static int fr_warm(sb_machine *m)
{
	return 0;
}

static int fr_iface(sb_machine *m, struct sb_net_iface *out)
{
	return sb_seterr(SB_ERR_NOTFOUND, "run %s has no network device", m->info.run);
}

static void fr_capacity(void *runner, uint64_t *cpus, uint64_t *memory_mib)
{
	struct fakerunner *fr = runner;

	lock(fr);
	*cpus = fr->cpus;
	*memory_mib = fr->memory_mib;
	unlock(fr);
}

const struct sb_runner_ops fakerunner_ops = {
    .name = "fake",
    .create = fr_create,
    .start = fr_start,
    .signal = fr_signal,
    .stop = fr_stop,
    .snapshot = fr_snapshot,
    .merge = fr_merge,
    .readers = fr_readers,
    .release = fr_release,
    .usage = fr_usage,
    .create_from = fr_create_from,
    .reattach = fr_reattach,
    .reap = fr_reap,
    .sweep = fr_sweep,
    .capacity = fr_capacity,
    .free = fr_free,
    .discard = fr_discard,
    .restored = fr_restored,
    .warm = fr_warm,
    .iface = fr_iface,
};

/* --- the test's side --- */

int fakerunner_open(sb_loop *loop, struct fakerunner **out)
{
	struct fakerunner *fr = calloc(1, sizeof *fr);

	if (!fr)
		return SB_ERR_NOMEM;
	fr->loop = loop;
	fr->tail = &fr->machines;
	fr->cpus = FR_CPUS;
	fr->memory_mib = FR_MEMORY_MIB;
	pthread_mutex_init(&fr->mu, NULL);
	*out = fr;
	return SB_OK;
}

void fakerunner_close(struct fakerunner *fr)
{
	struct sb_machine *m;

	if (!fr)
		return;
	lock(fr);
	for (m = fr->machines; m; m = m->next)
		order_end(m, SIGKILL, "the fake runner closed");
	unlock(fr);
	while ((m = fr->machines)) {
		fr->machines = m->next;
		if (m->th_on)
			pthread_join(m->th, NULL);
		machine_free(m);
	}
	pthread_mutex_destroy(&fr->mu);
	free(fr);
}

int fakerunner_script(struct fakerunner *fr, const char *name, const struct fr_script *s)
{
	size_t i;
	int rc = SB_OK;

	lock(fr);
	for (i = 0; i < fr->nscripts; i++)
		if (name ? !fr->scripts[i].any && !strcmp(fr->scripts[i].name, name)
			 : fr->scripts[i].any)
			break;
	if (i == SCRIPTS_MAX) {
		rc = sb_seterr(SB_ERR_FULL, "the fake runner holds %d scripts",
			       SCRIPTS_MAX);
	} else {
		fr->scripts[i].any = !name;
		snprintf(fr->scripts[i].name, sizeof fr->scripts[i].name, "%s",
			 name ? name : "");
		fr->scripts[i].s = s;
		fr->nscripts += i == fr->nscripts;
	}
	unlock(fr);
	return rc;
}

int fakerunner_machine(struct fakerunner *fr, const char *run, unsigned nth,
		       struct fr_machine_info *out)
{
	int rc = sb_seterr(SB_ERR_NOTFOUND, "run %s has no machine %u", run, nth);

	lock(fr);
	for (struct sb_machine *m = fr->machines; m; m = m->next) {
		if (strcmp(m->info.run, run) || nth--)
			continue;
		*out = m->info;
		rc = SB_OK;
		break;
	}
	unlock(fr);
	return rc;
}

void fakerunner_capacity(struct fakerunner *fr, uint64_t cpus, uint64_t memory_mib)
{
	lock(fr);
	fr->cpus = cpus;
	fr->memory_mib = memory_mib;
	unlock(fr);
}

unsigned fakerunner_made(struct fakerunner *fr)
{
	unsigned n;

	lock(fr);
	n = fr->made;
	unlock(fr);
	return n;
}

unsigned fakerunner_frozen(struct fakerunner *fr)
{
	unsigned n;

	lock(fr);
	n = fr->frozen;
	unlock(fr);
	return n;
}

int fakerunner_kill(struct fakerunner *fr, const char *run, int status, const char *why)
{
	struct sb_machine *m;

	lock(fr);
	if ((m = live_of(fr, run, 0)))
		order_end(m, status, why);
	unlock(fr);
	return m ? SB_OK : sb_seterr(SB_ERR_NOTFOUND, "no machine of run %s lives", run);
}

int fakerunner_lose(struct fakerunner *fr, const char *run, unsigned layer)
{
	struct layer *l;

	lock(fr);
	if ((l = layer_find(fr, run, layer)))
		l->lost = 1;
	unlock(fr);
	return l ? SB_OK
		 : sb_seterr(SB_ERR_NOTFOUND, "run %s has no layer %u", run, layer);
}
