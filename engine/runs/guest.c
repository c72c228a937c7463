/* guest.c - a run's channel to its guest agent (see guest.h). */
#include "engine/runs/guest.h"

#include <errno.h>
#include <jansson.h>
#include <msgpack.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "engine/bucket.h"
#include "engine/error.h"
#include "engine/gateway/tunnel.h"
#include "engine/log/blob.h"
#include "engine/log/schema.h"
#include "engine/payload.h"
#include "engine/runs/mask.h"
#include "engine/text.h"
#include "vmm/chan.h"

#define GUEST_READ_BUDGET (256u << 10) /* bytes read from one guest per wake-up */
#define WARN_EVERY_S	  1.0

enum drop { D_MISSING, D_MALFORMED, D_SCHEMA, D_REPEATED, D_LONG, D_QUOTA, D_COUNT };

static const char *const drop_what[D_COUNT] = {"missing from the guest's numbering",
					       "malformed",
					       "refused by the schema",
					       "repeated",
					       "too long",
					       "past the record quota"};

/* The agent's events that happen once in a run (see once_bit). */
enum { ONCE_READY = 1, ONCE_EXITED = 2 };

/* An output stream whose end is held back for masking. */
struct stream {
	char name[16];
	struct sb_mask_stream hold;
};

struct sb_guest {
	sb_loop *loop;
	const struct sb_guest_ops *ops;
	void *ctx;
	struct sb_guest_limits lim;
	int fd;
	sb_watch *w;
	sb_chan_reader *rd;
	msgpack_sbuffer out; /* bytes waiting to go to the guest */
	size_t out_off;
	sb_tunnel *tunnel;
	sb_mask *mask;
	struct stream streams[2];
	struct sb_bucket bucket;
	uint64_t recorded;	   /* payload bytes recorded */
	uint64_t files_recorded;   /* file content bytes recorded */
	uint64_t dropped[D_COUNT]; /* events dropped, by why */
	uint64_t warned[D_COUNT];  /* ... as of the last warning */
	char last_detail[200];	   /* why the last one was dropped */
	double warned_at;
	int quota_said; /* the quota is reached: nothing more but once-events */
	unsigned once;	/* ONCE_* recorded */
	/* numbered frames (vmm/chan.h) */
	uint64_t seen;	  /* the last guest seq taken: recorded, or dropped for good */
	uint64_t acked;	  /* the last one the guest was told is committed */
	uint64_t cur_seq; /* of the frame being handled: its events' guest_seq */
	int resend_wait;  /* ACK {resend} sent: frames past a gap come again */
	int restoring;	  /* RESTORED sent: the copy numbers from its HELLO */
	int finishing;	  /* the last read: no pacing */
	sb_watch *pace_w; /* reading waits for the rate's next token */
};

static void guest_warn(sb_guest *g, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Copies guest text (n bytes) into out (cap bytes, cap > 0) masked, as
 * one line (control bytes become spaces) cut on a UTF-8 boundary: the
 * masking comes before the cut, so no part of a value is left. */
static void guest_text(const sb_guest *g, const char *in, size_t n, char *out, size_t cap)
{
	msgpack_sbuffer buf;
	size_t len = 0;

	msgpack_sbuffer_init(&buf);
	sb_mask_apply(g->mask, in, n, &buf);
	if (buf.data)
		len = sb_utf8_cut(buf.data, buf.size, cap - 1);
	for (size_t i = 0; i < len; i++)
		out[i] = (unsigned char)buf.data[i] < 0x20 || buf.data[i] == 0x7f
			     ? ' '
			     : buf.data[i];
	out[len] = 0;
	if (buf.data)
		sodium_memzero(buf.data, buf.size);
	msgpack_sbuffer_destroy(&buf);
}

/* guest_text of the string body[key] ("" when it is none); returns 1
 * when there was one. */
static int guest_field(const sb_guest *g, const msgpack_object *body, const char *key,
		       char *out, size_t cap)
{
	const msgpack_object *v = sb_map_get(body, key);

	if (!v || v->type != MSGPACK_OBJECT_STR) {
		out[0] = 0;
		return 0;
	}
	guest_text(g, v->via.str.ptr, v->via.str.size, out, cap);
	return 1;
}

static void guest_warn(sb_guest *g, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	g->ops->warn(g->ctx, line);
}

/* Says what was dropped since the last warning (at most once a second
 * unless now is set). */
static void drops_report(sb_guest *g, int now)
{
	char line[512];
	size_t at = 0;
	double t = sb_loop_now(g->loop);

	if (!now && t - g->warned_at < WARN_EVERY_S)
		return;
	for (int i = 0; i < D_COUNT; i++) {
		uint64_t n = g->dropped[i] - g->warned[i];
		if (!n)
			continue;
		at +=
		    (size_t)snprintf(line + at, sizeof line - at, "%s%llu %s",
				     at ? ", " : "", (unsigned long long)n, drop_what[i]);
		g->warned[i] = g->dropped[i];
		if (at >= sizeof line)
			break;
	}
	if (!at)
		return;
	g->warned_at = t;
	guest_warn(g, "dropped guest events: %s (last: %s)", line, g->last_detail);
}

static void drop(sb_guest *g, enum drop why, const char *detail)
{
	g->dropped[why]++;
	/* the detail may quote the guest (a refused type): masked */
	guest_text(g, detail, strlen(detail), g->last_detail, sizeof g->last_detail);
	drops_report(g, 0);
}

/* The agent's events that happen once (its run needs them to end right):
 * ONCE_*, or 0 for another type or source. */
static unsigned once_bit(const char *type, enum sb_source src)
{
	if (src != SB_SRC_GUEST)
		return 0;
	return !strcmp(type, "harness.input.ready") ? ONCE_READY
	       : !strcmp(type, "run.exited")	    ? ONCE_EXITED
						    : 0;
}

/* Counts an event past the quota; the first says the quota is reached. */
static void quota_drop(sb_guest *g)
{
	if (!g->quota_said) {
		g->quota_said = 1;
		guest_warn(
		    g,
		    "the run's record quota of %llu bytes is reached: its output and "
		    "events are no longer recorded, only counted",
		    (unsigned long long)g->lim.quota);
	}
	g->dropped[D_QUOTA]++;
	g->warned[D_QUOTA] = g->dropped[D_QUOTA]; /* said in the summary */
}

/* Packs into out the map in buf (one msgpack map, as the schema checked)
 * with guest_seq: seq added as its last field. Errors: as sb_mapw_end. */
static int payload_seq(const msgpack_sbuffer *buf, uint64_t seq, msgpack_sbuffer *out)
{
	msgpack_packer pk;
	sb_mapw m;

	msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
	sb_mapw_begin_from(&m, &pk, buf->data, buf->size);
	sb_mapw_u64(&m, "guest_seq", seq);
	return sb_mapw_end(&m);
}

/* Checks and records one event whose payload is packed in buf, with
 * blob (or NULL) beside it. */
static void record_blob(sb_guest *g, const char *type, enum sb_source src,
			const msgpack_sbuffer *buf, const msgpack_sbuffer *blob)
{
	msgpack_sbuffer seq;
	int rc;

	msgpack_sbuffer_init(&seq);
	if (!buf->data) {
		drop(g, D_MALFORMED, "out of memory");
		return;
	}
	if ((rc = sb_schema_check(type, src, buf->data, buf->size))) {
		drop(g, D_SCHEMA, sb_errmsg(rc));
		return;
	}
	if (!once_bit(type, src) &&
	    (g->quota_said || g->recorded + buf->size > g->lim.quota)) {
		quota_drop(g);
		return;
	}
	if ((rc = payload_seq(buf, g->cur_seq, &seq))) {
		drop(g, D_MALFORMED, sb_errmsg(rc));
		goto out;
	}
	g->once |= once_bit(type, src);
	g->recorded += buf->size;
	g->ops->event(g->ctx, type, src, seq.data, seq.size,
		      blob ? (blob->data ? blob->data : "")
			   : NULL, /* an empty file's too */
		      blob ? blob->size : 0);
out:
	if (seq.data)
		sodium_memzero(seq.data, seq.size);
	msgpack_sbuffer_destroy(&seq);
}

static void record_packed(sb_guest *g, const char *type, enum sb_source src,
			  const msgpack_sbuffer *buf)
{
	record_blob(g, type, src, buf, NULL);
}

/* The agent's agent.file.changed with its content (a bin): the content
 * must have the size and XXH3-64 the event says. It is recorded as a blob
 * (masked as the rest; `masked: true` when that changed it) whose key is
 * the event's `content`, or left out (`content: "omitted"`, `omitted`:
 * why) over a cap. */
static void file_event(sb_guest *g, const msgpack_object *payload)
{
	const msgpack_object *content = sb_map_get(payload, "content");
	const char *data = content->via.bin.ptr, *omitted = NULL;
	size_t n = content->via.bin.size, masked = 0;
	char hex[17], want[24], key[SB_HASH_LEN * 2 + 1];
	uint8_t hash[SB_HASH_LEN];
	msgpack_sbuffer buf, blob;
	msgpack_packer pk;
	sb_mapw m;

	snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH3_64bits(data, n));
	if (sb_map_u64(payload, "size", UINT64_MAX) != n ||
	    sb_map_str(payload, "xxh3", want, sizeof want) != 16 || strcmp(want, hex)) {
		drop(g, D_MALFORMED, "a file's content that is not its size or hash");
		return;
	}
	msgpack_sbuffer_init(&blob);
	if (n > g->lim.file_max)
		omitted = "over the file cap";
	else if (g->files_recorded + n > g->lim.files_quota)
		omitted = "over the run's cap";
	else if ((masked = sb_mask_apply(g->mask, data, n, &blob)), n && !blob.data) {
		drop(g, D_MALFORMED, "out of memory");
		return;
	}
	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	for (uint32_t i = 0; i < payload->via.map.size; i++) {
		const msgpack_object_kv *kv = &payload->via.map.ptr[i];
		if (sb_obj_is_str(&kv->key, "content"))
			continue;
		sb_mask_object(g->mask, &kv->key, sb_mapw_pair(&m));
		sb_mask_object(g->mask, &kv->val, &m.pk);
	}
	if (omitted) {
		sb_mapw_str(&m, "content", "omitted");
		sb_mapw_str(&m, "omitted", omitted);
	} else {
		sb_blob_hash(blob.data ? blob.data : "", blob.size, hash);
		sodium_bin2hex(key, sizeof key, hash, sizeof hash);
		sb_mapw_str(&m, "content", key);
		if (masked)
			sb_mapw_bool(&m, "masked", 1);
		g->files_recorded += blob.size;
	}
	if (sb_mapw_end(&m))
		drop(g, D_MALFORMED, "out of memory");
	else
		record_blob(g, "agent.file.changed", SB_SRC_GUEST, &buf,
			    omitted ? NULL : &blob);
	if (blob.data)
		sodium_memzero(blob.data, blob.size);
	msgpack_sbuffer_destroy(&blob);
	msgpack_sbuffer_destroy(&buf);
}

static struct stream *stream_of(sb_guest *g, const char *name, size_t n)
{
	for (int i = 0; i < 2; i++) {
		struct stream *s = &g->streams[i];
		if (!s->name[0] && n < sizeof s->name) {
			memcpy(s->name, name, n);
			s->name[n] = 0;
		}
		if (strlen(s->name) == n && !memcmp(s->name, name, n))
			return s;
	}
	return NULL;
}

/* Packs agent.output {stream, data} with data masked as its stream goes
 * (a value split over two chunks is still found); end: the stream's held
 * tail too. Returns 0 when there is nothing to record yet. */
static int pack_output(sb_guest *g, struct stream *s, const char *data, size_t n, int end,
		       msgpack_sbuffer *buf)
{
	msgpack_sbuffer masked;
	msgpack_packer pk;
	int any;

	msgpack_sbuffer_init(&masked);
	sb_mask_stream(g->mask, &s->hold, data, n, end, &masked);
	any = masked.size > 0;
	if (any) {
		msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
		msgpack_pack_map(&pk, 2);
		sb_pack_kstr(&pk, "stream", s->name);
		sb_pack_kstrn(&pk, "data", masked.data, masked.size);
	}
	if (masked.data)
		sodium_memzero(masked.data, masked.size);
	msgpack_sbuffer_destroy(&masked);
	return any;
}

/* Records the output each stream still holds back for masking. */
static void streams_flush(sb_guest *g)
{
	msgpack_sbuffer buf;

	for (int i = 0; i < 2; i++) {
		struct stream *s = &g->streams[i];
		if (!s->name[0] || !s->hold.nhold)
			continue;
		msgpack_sbuffer_init(&buf);
		if (pack_output(g, s, "", 0, 1, &buf))
			record_packed(g, "agent.output", SB_SRC_GUEST, &buf);
		if (buf.data)
			sodium_memzero(buf.data, buf.size);
		msgpack_sbuffer_destroy(&buf);
	}
}

/* An event the guest sent: rate, masking, schema, quota, then recorded.
 * The agent's once-events are not rate-limited (a flood of harness lines
 * must not cost the run its run.exited) and a second one is dropped. */
static void guest_event(sb_guest *g, const char *type, enum sb_source src,
			const msgpack_object *payload)
{
	const msgpack_object *stream = sb_map_get(payload, "stream");
	const msgpack_object *data = sb_map_get(payload, "data"), *content;
	unsigned once = once_bit(type, src);
	msgpack_sbuffer buf;
	msgpack_packer pk;
	struct stream *s;

	if (once & g->once) {
		drop(g, D_REPEATED, type);
		return;
	}
	if (sb_map_get(payload, "guest_seq")) {
		drop(g, D_MALFORMED, "a payload with a guest_seq of its own");
		return;
	}
	if (!once) { /* paced: reading waits while the bucket is empty */
		sb_bucket_refill(&g->bucket, sb_loop_now(g->loop));
		g->bucket.tokens -= 1;
	}
	if (!once && g->quota_said) {
		quota_drop(g); /* not worth masking */
		return;
	}
	if (once == ONCE_EXITED)
		streams_flush(g); /* the output's end comes before run.exited */
	content = sb_map_get(payload, "content");
	if (src == SB_SRC_GUEST && !strcmp(type, "agent.file.changed") && content &&
	    content->type == MSGPACK_OBJECT_BIN) {
		file_event(g, payload);
		return;
	}
	msgpack_sbuffer_init(&buf);
	if (src == SB_SRC_GUEST && !strcmp(type, "agent.output") &&
	    payload->via.map.size == 2 && stream && stream->type == MSGPACK_OBJECT_STR &&
	    data && data->type == MSGPACK_OBJECT_STR &&
	    (s = stream_of(g, stream->via.str.ptr, stream->via.str.size))) {
		if (pack_output(g, s, data->via.str.ptr, data->via.str.size, 0, &buf))
			record_packed(g, type, src, &buf);
	} else {
		msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
		sb_mask_object(g->mask, payload, &pk);
		record_packed(g, type, src, &buf);
	}
	if (buf.data)
		sodium_memzero(buf.data, buf.size);
	msgpack_sbuffer_destroy(&buf);
}

/* A line the agent dropped for its length ({too_long, head}): counted,
 * quoted by its head masked, less a tail that may begin a secret value. */
static void long_line(sb_guest *g, const msgpack_object *body)
{
	const msgpack_object *head = sb_map_get(body, "head");
	struct sb_mask_stream st = {0};
	msgpack_sbuffer buf;
	char detail[200];

	msgpack_sbuffer_init(&buf);
	if (head && head->type == MSGPACK_OBJECT_BIN)
		sb_mask_stream(g->mask, &st, head->via.bin.ptr, head->via.bin.size, 0, &buf);
	snprintf(detail, sizeof detail, "a harness line over %llu bytes: %.*s",
		 (unsigned long long)sb_map_u64(body, "too_long", 0),
		 buf.data ? (int)buf.size : 0, buf.data ? buf.data : "");
	drop(g, D_LONG, detail);
	sodium_memzero(&st, sizeof st);
	msgpack_sbuffer_destroy(&buf);
}

/* A line the harness wrote to $SANBOX_EVENTS: {"type": ..., "payload": {...}}. */
static void harness_line(sb_guest *g, const msgpack_object *body)
{
	json_error_t jerr;
	json_t *j, *type, *payload;
	msgpack_sbuffer buf;
	msgpack_packer pk;
	msgpack_zone zone;
	msgpack_object obj;

	if (body->type == MSGPACK_OBJECT_MAP && sb_map_get(body, "too_long")) {
		long_line(g, body);
		return;
	}
	if (body->type != MSGPACK_OBJECT_BIN && body->type != MSGPACK_OBJECT_STR) {
		drop(g, D_MALFORMED, "a harness line frame without bytes");
		return;
	}
	j = json_loadb(body->via.bin.ptr, body->via.bin.size, JSON_REJECT_DUPLICATES,
		       &jerr);
	type = json_object_get(j, "type");
	payload = json_object_get(j, "payload");
	if (!j || !json_is_string(type) || json_string_length(type) >= SB_TYPE_MAX ||
	    !json_is_object(payload)) {
		drop(g, D_MALFORMED,
		     j ? "a harness line needs {\"type\": ..., \"payload\": {...}}"
		       : jerr.text);
		json_decref(j);
		return;
	}
	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	if (!msgpack_zone_init(&zone, 2048)) {
		drop(g, D_MALFORMED, "out of memory");
	} else {
		if (sb_json_to_msgpack(payload, &pk) == SB_OK && buf.data &&
		    sb_payload_parse(buf.data, buf.size, &zone, &obj) == SB_OK)
			guest_event(g, json_string_value(type), SB_SRC_HARNESS, &obj);
		else
			drop(g, D_MALFORMED, "a harness line's payload nests too deep");
		msgpack_zone_destroy(&zone);
	}
	msgpack_sbuffer_destroy(&buf);
	json_decref(j);
}

/* --- frames to the guest --- */

static void out_flush(sb_guest *g)
{
	while (g->fd >= 0 && g->out_off < g->out.size) {
		ssize_t n =
		    write(g->fd, g->out.data + g->out_off, g->out.size - g->out_off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		g->out_off += (size_t)n;
	}
	if (g->out_off == g->out.size) {
		/* what went out may have held secrets (the SPEC's environment) */
		if (g->out.size)
			sodium_memzero(g->out.data, g->out.size);
		g->out.size = g->out_off = 0;
	}
	if (g->w)
		sb_watch_io_set(g->w, (g->pace_w ? 0 : SB_READ) | (g->out.size ? SB_WRITE : 0));
	if (g->tunnel && g->out.size - g->out_off < SB_TUNNEL_BACKLOG)
		sb_tunnel_drained(g->tunnel);
}

void sb_guest_send(sb_guest *g, const void *frames, size_t len)
{
	msgpack_sbuffer_write(&g->out, frames, len);
	out_flush(g);
}

/* Packs the body of a SIGNAL {signal}, SYNC {id, freeze?}, THAW {} or ACK
 * {seq, resend?} frame from stream and arg (as send_frame's). Errors: as
 * sb_mapw_end. */
static int pack_control(msgpack_packer *pk, int kind, uint64_t stream, int arg)
{
	sb_mapw m;

	sb_mapw_begin(&m, pk);
	if (kind == SB_CHAN_SIGNAL)
		sb_mapw_u64(&m, "signal", (uint64_t)arg);
	if (kind == SB_CHAN_SYNC)
		sb_mapw_u64(&m, "id", stream);
	if (kind == SB_CHAN_SYNC && arg)
		sb_mapw_bool(&m, "freeze", 1);
	if (kind == SB_CHAN_ACK)
		sb_mapw_u64(&m, "seq", stream);
	if (kind == SB_CHAN_ACK && arg)
		sb_mapw_bool(&m, "resend", 1);
	return sb_mapw_end(&m);
}

/* Sends a frame of kind, its body made here from stream, bin and arg
 * (SIGNAL's signal number, SYNC's freeze flag, ACK's resend flag; ACK's
 * seq is stream). */
static void send_frame(sb_guest *g, int kind, uint64_t stream, const void *bin,
		       size_t len, int arg)
{
	msgpack_sbuffer buf;
	msgpack_packer pk;
	size_t start;
	int rc = SB_OK;

	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	if (sb_chan_begin(&buf, &pk, kind, kind == SB_CHAN_ACK ? 0 : stream, &start) ==
	    SB_OK) {
		if (kind == SB_CHAN_DATA)
			msgpack_pack_bin_with_body(&pk, bin, len);
		else if (kind == SB_CHAN_CLOSE)
			msgpack_pack_nil(&pk);
		else
			rc = pack_control(&pk, kind, stream, arg);
		if (rc == SB_OK && sb_chan_end(&buf, start) == SB_OK)
			sb_guest_send(g, buf.data, buf.size);
	}
	msgpack_sbuffer_destroy(&buf);
}

void sb_guest_signal(sb_guest *g, int sig)
{
	send_frame(g, SB_CHAN_SIGNAL, 0, NULL, 0, sig);
}

void sb_guest_sync(sb_guest *g, uint64_t id, int freeze)
{
	send_frame(g, SB_CHAN_SYNC, id, NULL, 0, freeze);
}

void sb_guest_thaw(sb_guest *g)
{
	send_frame(g, SB_CHAN_THAW, 0, NULL, 0, 0);
}

void sb_guest_restored(sb_guest *g, const struct sb_net_iface *net)
{
	msgpack_sbuffer buf;
	msgpack_packer pk;
	unsigned char seed[32], id[16];
	char id_hex[33];
	struct timespec ts;
	size_t start;
	sb_mapw m;

	clock_gettime(CLOCK_REALTIME, &ts);
	randombytes_buf(seed, sizeof seed);
	randombytes_buf(id, sizeof id);
	sodium_bin2hex(id_hex, sizeof id_hex, id, sizeof id);
	g->restoring = 1; /* the copy's frames count from its HELLO */
	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	if (sb_chan_begin(&buf, &pk, SB_CHAN_RESTORED, 0, &start) == SB_OK) {
		sb_mapw_begin(&m, &pk);
		sb_mapw_u64(&m, "time_ns",
			    (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
		sb_mapw_bin(&m, "seed", seed, sizeof seed);
		sb_mapw_str(&m, "machine_id", id_hex); /* a copy is another machine */
		if (net) /* ... with its own addresses */
			sb_net_iface_pack(net, sb_mapw_key(&m, "net"));
		if (sb_mapw_end(&m) == SB_OK && sb_chan_end(&buf, start) == SB_OK)
			sb_guest_send(g, buf.data, buf.size);
	}
	sodium_memzero(seed, sizeof seed);
	if (buf.data)
		sodium_memzero(buf.data, buf.size);
	msgpack_sbuffer_destroy(&buf);
}

/* --- the tunnel's view of the guest (engine/gateway/tunnel.h) --- */

static void tun_send(void *ctx, int kind, uint64_t stream, const void *data, size_t len)
{
	send_frame(ctx, kind == SB_CHAN_CLOSE ? SB_CHAN_CLOSE : SB_CHAN_DATA, stream,
		   data, len, 0);
}

static size_t tun_backlog(void *ctx)
{
	sb_guest *g = ctx;

	return g->out.size - g->out_off;
}

static int tun_connect(void *ctx, int *fd)
{
	sb_guest *g = ctx;

	return g->ops->connect(g->ctx, fd);
}

static const struct sb_tunnel_ops tunnel_ops = {
    .send = tun_send,
    .backlog = tun_backlog,
    .connect = tun_connect,
};

/* --- frames from the guest --- */

/* Counts n numbers the guest skipped, from..from + n - 1. */
static void missing(sb_guest *g, uint64_t from, uint64_t n)
{
	char detail[80];

	g->dropped[D_MISSING] += n - 1;
	snprintf(detail, sizeof detail, "guest seq %llu to %llu never came",
		 (unsigned long long)from, (unsigned long long)(from + n - 1));
	drop(g, D_MISSING, detail);
}

/* Takes the number seq of a frame: 1 when it is the next one (it is
 * handled), 0 when it is one the host has (sent again), a copy's before
 * its HELLO, or past a gap that a RESEND is to fill. A gap otherwise is
 * counted as missing and the frame is handled. */
static int seq_take(sb_guest *g, uint64_t seq)
{
	if (g->restoring)
		return 0; /* numbered by the original's agent */
	if (seq == 0) {
		drop(g, D_MALFORMED, "a numbered frame without a number");
		return 0;
	}
	if (seq <= g->seen)
		return 0;
	if (seq > g->seen + 1) {
		if (g->resend_wait)
			return 0;
		missing(g, g->seen + 1, seq - g->seen - 1);
	}
	g->seen = g->cur_seq = seq;
	return 1;
}

/* RESEND {next}: the agent's kept frames follow, from next on; it kept
 * none before next, so those the host lacks are missing. */
static void on_resend(sb_guest *g, const msgpack_object *body)
{
	uint64_t next = sb_map_u64(body, "next", 0);

	if (next > g->seen + 1 && !g->restoring) {
		missing(g, g->seen + 1, next - g->seen - 1);
		g->seen = next - 1;
	}
	g->resend_wait = 0;
}

static void on_frame(sb_guest *g, const struct sb_chan_frame *f)
{
	const msgpack_object *type, *payload;
	char t[SB_TYPE_MAX], version[32], error[256];

	if (sb_chan_numbered(f->kind) && !seq_take(g, f->stream))
		return;
	switch (f->kind) {
	case SB_CHAN_HELLO:
		g->restoring = 0;
		if (!guest_field(g, &f->body, "version", version, sizeof version))
			snprintf(version, sizeof version, "?");
		g->ops->hello(g->ctx, version, sb_map_u64(&f->body, "resume", 0) == 1);
		break;
	case SB_CHAN_RESEND: on_resend(g, &f->body); break;
	case SB_CHAN_EVENT:
		type = sb_map_get(&f->body, "type");
		payload = sb_map_get(&f->body, "payload");
		if (!type || type->type != MSGPACK_OBJECT_STR ||
		    type->via.str.size >= sizeof t || !payload ||
		    payload->type != MSGPACK_OBJECT_MAP) {
			drop(g, D_MALFORMED, "an event frame without {type, payload}");
			break;
		}
		memcpy(t, type->via.str.ptr, type->via.str.size);
		t[type->via.str.size] = 0;
		guest_event(g, t, SB_SRC_GUEST, payload);
		break;
	case SB_CHAN_EVENT_JSON: harness_line(g, &f->body); break;
	case SB_CHAN_OPEN:
	case SB_CHAN_DATA:
	case SB_CHAN_CLOSE:
		sb_tunnel_frame(g->tunnel, f->kind, f->stream, &f->body);
		break;
	case SB_CHAN_SYNCED:
		if (g->ops->synced)
			g->ops->synced(g->ctx, sb_map_u64(&f->body, "id", 0),
				       sb_map_bool(&f->body, "frozen", 0));
		break;
	case SB_CHAN_EXEC_OUT:
	case SB_CHAN_EXEC_EXIT:
	case SB_CHAN_PUT_DONE:
		if (g->ops->answer)
			g->ops->answer(g->ctx, f->kind, f->stream, &f->body);
		break;
	case SB_CHAN_DONE:
		guest_field(g, &f->body, "error", error,
			    sizeof error); /* recorded as a reason */
		g->ops->done(g->ctx, error);
		break;
	default: break; /* LOG: the agent's diagnostics, not recorded */
	}
}

static void chan_drop(sb_guest *g)
{
	sb_watch_stop(g->w);
	g->w = NULL;
	if (g->fd >= 0)
		close(g->fd);
	g->fd = -1;
	g->ops->closed(g->ctx);
}

static void on_paced(void *ctx);

/* 1 when reading waits for the rate's next token (a timer set), and the
 * channel's reading is stopped until then: the guest slows down, nothing
 * is dropped for the rate. */
static int paced(sb_guest *g)
{
	if (g->finishing)
		return 0;
	if (g->pace_w)
		return 1;
	sb_bucket_refill(&g->bucket, sb_loop_now(g->loop));
	if (g->bucket.tokens >= 1)
		return 0;
	g->pace_w = sb_loop_timer(g->loop, sb_bucket_wait(&g->bucket), 0, on_paced, g);
	if (!g->pace_w)
		return 0; /* out of memory: not paced */
	if (g->w)
		sb_watch_io_set(g->w, g->out.size ? SB_WRITE : 0);
	return 1;
}

/* Handles the whole frames the reader holds. Returns SB_END when it needs
 * more bytes, SB_OK when it stopped (paced, or the channel closed), or the
 * reader's framing error. */
static int frames_take(sb_guest *g)
{
	struct sb_chan_frame f;
	int rc;

	while (!paced(g)) {
		rc = sb_chan_reader_next(g->rd, &f);
		if (rc == SB_END || (rc != SB_OK && sb_chan_reader_error(g->rd)))
			return rc;
		if (rc == SB_OK)
			on_frame(g, &f);
		else
			drop(g, D_MALFORMED, sb_errmsg(rc)); /* a bad frame, skipped */
		if (g->fd < 0 && !g->finishing)
			return SB_OK;
	}
	return SB_OK;
}

/* Handles what the reader holds, then reads one budget's worth from the
 * guest. Returns 1 while more may be there, 0 when it would block, waits
 * for the rate or the channel closed. */
static int chan_read(sb_guest *g)
{
	char buf[65536];
	size_t budget = GUEST_READ_BUDGET;
	ssize_t n;
	int rc;

	for (;;) {
		if ((rc = frames_take(g)) == SB_OK)
			return 0;
		if (rc != SB_END)
			break; /* framing lost */
		if (g->fd < 0)
			return 0;
		if (budget == 0)
			return 1;
		n = read(g->fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n <= 0) {
			chan_drop(g); /* the guest side closed: QEMU is ending */
			return 0;
		}
		budget -= (size_t)n > budget ? budget : (size_t)n;
		if ((rc = sb_chan_reader_feed(g->rd, buf, (size_t)n)))
			break;
	}
	guest_warn(g, "the guest channel broke its framing (%s); closing it",
		   sb_errmsg(rc));
	chan_drop(g);
	return 0;
}

static void on_paced(void *ctx)
{
	sb_guest *g = ctx;

	sb_watch_stop(g->pace_w); /* a fired timer is still ours to free */
	g->pace_w = NULL;
	if (g->w)
		sb_watch_io_set(g->w, SB_READ | (g->out.size ? SB_WRITE : 0));
	chan_read(g);
}

static void on_chan_io(void *ctx, int revents)
{
	sb_guest *g = ctx;

	if (revents & SB_WRITE)
		out_flush(g);
	if (revents & SB_READ)
		chan_read(g); /* fairness: the rest on the next loop turn */
}

int sb_guest_open(sb_loop *loop, const struct sb_guest_limits *lim,
		  const struct sb_guest_ops *ops, void *ctx, sb_guest **out)
{
	sb_guest *g = calloc(1, sizeof *g);
	int rc;

	if (!g)
		return SB_ERR_NOMEM;
	g->loop = loop;
	g->ops = ops;
	g->ctx = ctx;
	g->lim = *lim;
	g->fd = -1;
	msgpack_sbuffer_init(&g->out);
	sb_bucket_init(&g->bucket, lim->rate, lim->burst, sb_loop_now(loop));
	if ((rc = sb_chan_reader_new(&g->rd)) || (rc = sb_mask_new(&g->mask)) ||
	    (rc = sb_tunnel_open(loop, &tunnel_ops, g, &g->tunnel))) {
		sb_guest_close(g);
		return rc;
	}
	*out = g;
	return SB_OK;
}

int sb_guest_mask(sb_guest *g, const void *value, size_t n, const char *label)
{
	return sb_mask_add(g->mask, value, n, label);
}

size_t sb_guest_mask_apply(const sb_guest *g, const void *in, size_t n, msgpack_sbuffer *out)
{
	return sb_mask_apply(g->mask, in, n, out);
}

void sb_guest_recorded(sb_guest *g, const char *type)
{
	g->once |= once_bit(type, SB_SRC_GUEST);
}

int sb_guest_attach(sb_guest *g, int fd, int resync)
{
	sb_watch_stop(g->w);
	if (g->fd >= 0) {
		close(g->fd);
		resync = 1;
	}
	g->fd = fd;
	g->out.size = g->out_off = 0; /* what was queued for the old one */
	if (!(g->w = sb_loop_io(g->loop, fd, g->pace_w ? 0 : SB_READ, on_chan_io, g))) {
		close(fd);
		g->fd = -1;
		return SB_ERR_NOMEM;
	}
	if (!resync)
		return SB_OK;
	sb_chan_reader_resync(g->rd);
	/* the agent talked to another host, or this one lost frames with the
	 * connection: it sends again what it kept past the committed ones */
	g->resend_wait = 1;
	send_frame(g, SB_CHAN_ACK, g->acked, NULL, 0, 1);
	return SB_OK;
}

void sb_guest_committed(sb_guest *g, uint64_t seq)
{
	g->seen = g->acked = g->cur_seq = seq;
}

uint64_t sb_guest_taken(const sb_guest *g)
{
	return g->seen;
}

void sb_guest_ack(sb_guest *g, uint64_t seq)
{
	if (seq > g->seen)
		seq = g->seen;
	if (g->fd < 0 || seq <= g->acked)
		return;
	g->acked = seq;
	send_frame(g, SB_CHAN_ACK, g->acked, NULL, 0, 0);
}

int sb_guest_connected(const sb_guest *g)
{
	return g->fd >= 0;
}

void sb_guest_finish(sb_guest *g)
{
	g->finishing = 1; /* what was sent is read now, past the rate */
	sb_watch_stop(g->pace_w);
	g->pace_w = NULL;
	while (chan_read(g))
		;
	streams_flush(g);
	if (g->dropped[D_QUOTA])
		guest_warn(
		    g, "not recorded past the record quota of %llu bytes: %llu events",
		    (unsigned long long)g->lim.quota,
		    (unsigned long long)g->dropped[D_QUOTA]);
	drops_report(g, 1);
}

void sb_guest_close(sb_guest *g)
{
	if (!g)
		return;
	sb_watch_stop(g->w);
	sb_watch_stop(g->pace_w);
	if (g->fd >= 0)
		close(g->fd);
	sb_tunnel_close(g->tunnel); /* closes its gateway connections */
	sb_chan_reader_free(g->rd);
	sb_mask_free(g->mask);
	sodium_memzero(g->streams, sizeof g->streams);
	msgpack_sbuffer_destroy(&g->out);
	free(g);
}
