/* test_guest.c - the run's guest channel (engine/runs/guest.c) against a
 * hostile agent that writes frames itself over a socket pair: its
 * harness.input.ready and run.exited are recorded once each, past an empty
 * rate bucket and past the quota, and the output still held for masking
 * comes before run.exited; a reached quota stays reached; the text of
 * HELLO, DONE and of the drop warnings is masked before it is cut; every
 * drop is counted in the warnings, a harness line the agent dropped for
 * its length too; SYNCED's frozen counts only as a boolean true. Numbered
 * frames: each number recorded once, in order, as guest_seq, against a
 * hostile numbering (backwards, 0, a gap, a huge number, a resend that
 * differs); ACK only when the caller says the events are committed; a
 * channel taken up again asks for a resend and fills the gap in order; a
 * copy's frames count from its HELLO; a flood is paced, not dropped.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <sodium.h>
#include <sys/socket.h>
#include <xxhash.h>

#include "engine/log/blob.h"
#include "engine/mpack.h"
#include "engine/runs/guest.h"
#include "tests/unit/testutil.h"
#include "vmm/chan.h"

#define KEY "SECRETVALUE1"

struct seen {
	char type[64][SB_TYPE_MAX];
	json_t *payload[64];
	char *blob[64]; /* the blob handed with event i, or NULL */
	size_t blob_len[64];
	int src[64];
	int n;
	char warn[16][512];
	int nwarn;
	char version[64], error[512];
};

static void on_hello(void *ctx, const char *version, int resume)
{
	snprintf(((struct seen *)ctx)->version, 64, "%s", version);
}

static void on_event(void *ctx, const char *type, enum sb_source src, const void *p,
		     size_t len, const void *blob, size_t blob_len)
{
	struct seen *s = ctx;
	msgpack_zone zone;
	msgpack_object o;

	assert_true(s->n < 64);
	assert_true(msgpack_zone_init(&zone, 1024));
	assert_int_equal(sb_payload_parse(p, len, &zone, &o), SB_OK);
	snprintf(s->type[s->n], SB_TYPE_MAX, "%s", type);
	s->payload[s->n] = sb_msgpack_to_json(&o);
	s->blob[s->n] = blob ? strndup(blob, blob_len) : NULL;
	s->blob_len[s->n] = blob_len;
	s->src[s->n++] = src;
	msgpack_zone_destroy(&zone);
}

static void on_warn(void *ctx, const char *line)
{
	struct seen *s = ctx;

	assert_true(s->nwarn < 16);
	snprintf(s->warn[s->nwarn++], 512, "%s", line);
}

static void on_done(void *ctx, const char *error)
{
	snprintf(((struct seen *)ctx)->error, 512, "%s", error);
}

static void on_closed(void *ctx)
{
}

static uint64_t synced_id[8];
static int synced_frozen[8], nsynced;

static void on_synced(void *ctx, uint64_t id, int frozen)
{
	assert_true(nsynced < 8);
	synced_id[nsynced] = id;
	synced_frozen[nsynced++] = frozen;
}

static int on_connect(void *ctx, int *fd)
{
	return SB_ERR_STATE;
}

static const struct sb_guest_ops ops = {
    .hello = on_hello,
    .event = on_event,
    .warn = on_warn,
    .done = on_done,
    .closed = on_closed,
    .synced = on_synced,
    .connect = on_connect,
};

struct rig {
	sb_loop *loop;
	sb_guest *g;
	int peer; /* the agent's end */
	struct seen seen;
	uint64_t seq; /* the last guest seq the agent gave */
};

static void rig_open_files(struct rig *r, double rate, double burst, uint64_t quota,
			   uint64_t file_max, uint64_t files_quota)
{
	struct sb_guest_limits lim = {rate, burst, quota, file_max, files_quota};
	int sv[2];

	memset(r, 0, sizeof *r);
	assert_int_equal(sb_loop_open(&r->loop), SB_OK);
	assert_int_equal(sb_guest_open(r->loop, &lim, &ops, &r->seen, &r->g), SB_OK);
	assert_int_equal(sb_guest_mask(r->g, KEY, strlen(KEY), "K"), SB_OK);
	assert_int_equal(
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
	sb_guest_attach(r->g, sv[0], 0);
	r->peer = sv[1];
}

static void rig_open(struct rig *r, double rate, double burst, uint64_t quota)
{
	rig_open_files(r, rate, burst, quota, SB_CHAN_FILE_MAX, 256u << 20);
}

static void rig_close(struct rig *r)
{
	sb_guest_close(r->g);
	close(r->peer);
	sb_loop_close(r->loop);
	for (int i = 0; i < r->seen.n; i++) {
		json_decref(r->seen.payload[i]);
		free(r->seen.blob[i]);
	}
}

/* Sends a frame of kind on stream whose body is the JSON js (quotes as '). */
static void send_body_on(struct rig *r, int kind, uint64_t stream, const char *js)
{
	msgpack_sbuffer body, sb;
	msgpack_packer pk;
	size_t start;

	tu_json(&body, js);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	assert_int_equal(sb_chan_begin(&sb, &pk, kind, stream, &start), SB_OK);
	msgpack_sbuffer_write(&sb, body.data, body.size);
	assert_int_equal(sb_chan_end(&sb, start), SB_OK);
	assert_int_equal(write(r->peer, sb.data, sb.size), (ssize_t)sb.size);
	msgpack_sbuffer_destroy(&body);
	msgpack_sbuffer_destroy(&sb);
}

/* Sends a frame of kind whose body is the JSON js, numbered as the agent
 * numbers it when it is an EVENT or EVENT_JSON. */
static void send_body(struct rig *r, int kind, const char *js)
{
	send_body_on(r, kind, sb_chan_numbered(kind) ? ++r->seq : 0, js);
}

/* An agent's EVENT {type, payload}. */
static void send_event(struct rig *r, const char *type, const char *payload_js)
{
	char js[8192];

	snprintf(js, sizeof js, "{'type': '%s', 'payload': %s}", type, payload_js);
	send_body(r, SB_CHAN_EVENT, js);
}

static void send_output(struct rig *r, const char *data)
{
	char js[4096];

	snprintf(js, sizeof js, "{'stream': 'stdout', 'data': '%s'}", data);
	send_event(r, "agent.output", js);
}

/* The agent's agent.file.changed of path with content (its size and
 * XXH3-64; xxh3 overrides the hash when not NULL), the content key given
 * twice when twice (a hostile agent). */
static void send_file(struct rig *r, const char *path, const char *content,
		      const char *xxh3, int twice)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	size_t start, n = strlen(content);
	char hex[17];
	sb_mapw m;

	snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH3_64bits(content, n));
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	assert_int_equal(sb_chan_begin(&sb, &pk, SB_CHAN_EVENT, ++r->seq, &start), SB_OK);
	msgpack_pack_map(&pk, 2);
	sb_pack_kstr(&pk, "type", "agent.file.changed");
	sb_pack_str(&pk, "payload");
	sb_mapw_begin(&m, &pk);
	sb_mapw_str(&m, "path", path);
	sb_mapw_str(&m, "kind", "created");
	sb_mapw_u64(&m, "size", n);
	sb_mapw_str(&m, "xxh3", xxh3 ? xxh3 : hex);
	sb_mapw_bin(&m, "content", content, n);
	if (twice)
		sb_mapw_bin(&m, "content", "other", 5);
	assert_int_equal(sb_mapw_end(&m), SB_OK);
	assert_int_equal(sb_chan_end(&sb, start), SB_OK);
	assert_int_equal(write(r->peer, sb.data, sb.size), (ssize_t)sb.size);
	msgpack_sbuffer_destroy(&sb);
}

static void on_tick(void *ctx)
{
	sb_loop_break(ctx);
}

/* Lets the loop read what was sent. */
static void spin(struct rig *r)
{
	sb_watch *w = sb_loop_timer(r->loop, 0.05, 0, on_tick, r->loop);

	sb_loop_run(r->loop);
	sb_watch_stop(w);
}

/* The sum of "N what" over the "dropped guest events" warnings. */
static unsigned long dropped(const struct seen *s, const char *what)
{
	unsigned long sum = 0;

	for (int i = 0; i < s->nwarn; i++) {
		const char *p = s->warn[i], *end;
		if (strncmp(p, "dropped guest events: ", 22))
			continue;
		end = strstr(p, " (last: ");
		for (p += 22; p && p < end; p = strstr(p, ", "), p = p ? p + 2 : NULL) {
			char *after;
			unsigned long n = strtoul(p, &after, 10);
			if (!strncmp(after + 1, what, strlen(what)))
				sum += n;
		}
	}
	return sum;
}

static const char *data_of(const struct seen *s, int i)
{
	return json_string_value(json_object_get(s->payload[i], "data"));
}

/* SYNCED from a hostile agent: frozen is true only as a boolean true. */
static void test_synced(void **state)
{
	static const char *const bodies[] = {
	    "{'id': 1, 'frozen': true}", "{'id': 2, 'frozen': false}",
	    "{'id': 3, 'frozen': 1}",	 "{'id': 4, 'frozen': 'true'}",
	    "{'id': 5}",		 "{'frozen': true}",
	    "[1, true]",
	};
	static const int want_frozen[] = {1, 0, 0, 0, 0, 1, 0};
	static const uint64_t want_id[] = {1, 2, 3, 4, 5, 0, 0};
	struct rig r;

	nsynced = 0;
	rig_open(&r, 100, 100, 1 << 20);
	for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++)
		send_body(&r, SB_CHAN_SYNCED, bodies[i]);
	spin(&r);
	assert_int_equal(nsynced, 7);
	for (int i = 0; i < nsynced; i++) {
		assert_int_equal(synced_id[i], want_id[i]);
		assert_int_equal(synced_frozen[i], want_frozen[i]);
	}
	rig_close(&r);
}

/* Once-events: once each; an empty bucket makes reading wait, not drop;
 * held output before run.exited. */
static void test_once_events(void **state)
{
	struct rig r;
	struct seen *s = &r.seen;

	rig_open(&r, 0.001, 3, 1 << 20);
	send_event(&r, "harness.input.ready", "{'files': 0, 'bytes': 0}");
	send_output(&r, "x");
	send_output(&r, "y");
	send_output(&r, "tail SECRETV"); /* may begin the value: held */
	send_output(&r, "z");		 /* the bucket is empty */
	send_event(&r, "harness.input.ready", "{'files': 9, 'bytes': 9}");
	send_event(&r, "run.exited", "{'status': 0, 'signal': 0}");
	send_event(&r, "run.exited", "{'status': 77, 'signal': 0}");
	spin(&r);
	assert_int_equal(s->n, 4); /* the bucket is empty: reading waits */
	sb_guest_finish(r.g);	   /* the rest, past the rate: nothing dropped */
	assert_int_equal(s->n, 6);
	assert_string_equal(s->type[0], "harness.input.ready");
	assert_int_equal(json_integer_value(json_object_get(s->payload[0], "files")), 0);
	assert_string_equal(data_of(s, 1), "x");
	assert_string_equal(data_of(s, 2), "y");
	assert_string_equal(data_of(s, 3), "tail ");
	assert_string_equal(data_of(s, 4), "SECRETVz"); /* not the value after all */
	assert_string_equal(s->type[5], "run.exited");
	assert_int_equal(s->src[5], SB_SRC_GUEST);
	assert_int_equal(json_integer_value(json_object_get(s->payload[5], "status")), 0);
	assert_int_equal(json_integer_value(json_object_get(s->payload[5], "guest_seq")), 7);
	assert_int_equal(dropped(s, "repeated"), 2);
	rig_close(&r);
}

/* A run taken up again: what its record holds is not recorded twice. */
static void test_recorded(void **state)
{
	struct rig r;

	rig_open(&r, 100, 100, 1 << 20);
	sb_guest_recorded(r.g, "run.exited");
	sb_guest_recorded(r.g, "agent.output"); /* not a once-event: no effect */
	send_event(&r, "run.exited", "{'status': 0, 'signal': 0}");
	send_output(&r, "still");
	spin(&r);
	sb_guest_finish(r.g);
	assert_int_equal(r.seen.n, 1);
	assert_string_equal(data_of(&r.seen, 0), "still");
	assert_int_equal(dropped(&r.seen, "repeated"), 1);
	rig_close(&r);
}

/* A reached quota stays reached; once-events still go in. */
static void test_quota(void **state)
{
	struct rig r;
	struct seen *s = &r.seen;
	char big[101];
	int said = 0, summary = 0;

	memset(big, 'b', 100);
	big[100] = 0;
	rig_open(&r, 100, 100, 200);
	send_output(&r, big);  /* about 120 bytes: in */
	send_output(&r, big);  /* over 200: out, and the quota is said */
	send_output(&r, "ok"); /* would fit, but the quota is reached */
	send_event(&r, "harness.input.ready", "{'files': 0, 'bytes': 0}");
	send_event(&r, "run.exited", "{'status': 3, 'signal': 0}");
	spin(&r);
	sb_guest_finish(r.g);
	assert_int_equal(s->n, 3);
	assert_string_equal(data_of(s, 0), big);
	assert_string_equal(s->type[1], "harness.input.ready");
	assert_string_equal(s->type[2], "run.exited");
	for (int i = 0; i < s->nwarn; i++) {
		said +=
		    strstr(s->warn[i], "record quota of 200 bytes is reached") != NULL;
		summary +=
		    !strcmp(s->warn[i],
			    "not recorded past the record quota of 200 bytes: 2 events");
	}
	assert_int_equal(said, 1);
	assert_int_equal(summary, 1);
	rig_close(&r);
}

/* Guest text that the run records (HELLO's version, DONE's error, drop
 * details) is masked, then cut: no part of the value is left. */
static void test_masked_text(void **state)
{
	struct rig r;
	struct seen *s = &r.seen;
	char js[1024], line[600];
	int named = 0;

	rig_open(&r, 100, 100, 1 << 20);
	send_body(&r, SB_CHAN_HELLO, "{'version': 'v-" KEY "', 'resume': 0}");
	send_event(&r, KEY, "{}"); /* refused: the detail names the type */
	snprintf(line, sizeof line, "{'type': '%s', 'payload': {}}", KEY);
	for (char *c = line; *c; c++)
		if (*c == '\'')
			*c = '"';
	{
		msgpack_sbuffer sb;
		msgpack_packer pk;
		size_t start;
		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		assert_int_equal(
		    sb_chan_begin(&sb, &pk, SB_CHAN_EVENT_JSON, ++r.seq, &start), SB_OK);
		msgpack_pack_bin_with_body(&pk, line, strlen(line));
		assert_int_equal(sb_chan_end(&sb, start), SB_OK);
		assert_int_equal(write(r.peer, sb.data, sb.size), (ssize_t)sb.size);
		msgpack_sbuffer_destroy(&sb);
	}
	/* a value across the cut of DONE's error (255 bytes) */
	memset(js, 0, sizeof js);
	strcpy(js, "{'error': '");
	memset(js + strlen(js), 'e', 250);
	strcat(js, KEY "\\n'}");
	send_body(&r, SB_CHAN_DONE, js);
	spin(&r);
	sb_guest_finish(r.g);
	assert_string_equal(s->version, "v-[masked K]");
	assert_null(strstr(s->error, "SECRE"));
	assert_non_null(strstr(s->error, "eeee[mask")); /* the label cut, not the value */
	for (int i = 0; i < s->nwarn; i++) {
		assert_null(strstr(s->warn[i], "SECRE"));
		named += strstr(s->warn[i], "'[masked K]'") != NULL;
	}
	assert_true(named >= 1);
	assert_int_equal(dropped(s, "refused by the schema"), 2);
	assert_int_equal(s->n, 0);
	rig_close(&r);
}

/* The agent's report of a harness line over its limit ({too_long, head}
 * in an EVENT_JSON): counted as too long and quoted by its head, masked,
 * less a tail that may begin a secret; nothing is recorded of it, and
 * the lines after it are. */
static void test_long_line(void **state)
{
	static const char head[] = "{\"type\": \"agent.message\", \"payload\": "
				   "{\"t\": \"" KEY " and SECRETV";
	struct rig r;
	struct seen *s = &r.seen;
	int quoted = 0;

	rig_open(&r, 100, 100, 1 << 20);
	for (int i = 0; i < 2; i++) {
		msgpack_sbuffer sb;
		msgpack_packer pk;
		size_t start;
		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		assert_int_equal(
		    sb_chan_begin(&sb, &pk, SB_CHAN_EVENT_JSON, ++r.seq, &start), SB_OK);
		msgpack_pack_map(&pk, 2);
		sb_pack_ku64(&pk, "too_long", 65536);
		sb_pack_str(&pk, "head");
		msgpack_pack_bin_with_body(&pk, head, strlen(head));
		assert_int_equal(sb_chan_end(&sb, start), SB_OK);
		assert_int_equal(write(r.peer, sb.data, sb.size), (ssize_t)sb.size);
		msgpack_sbuffer_destroy(&sb);
	}
	send_body(&r, SB_CHAN_EVENT_JSON, "{'too_long': 65536}"); /* no head */
	send_event(&r, "run.exited", "{'status': 0, 'signal': 0}");
	spin(&r);
	sb_guest_finish(r.g);
	assert_int_equal(dropped(s, "too long"), 3);
	assert_int_equal(dropped(s, "malformed"), 0);
	for (int i = 0; i < s->nwarn; i++) {
		assert_null(strstr(s->warn[i], "SECRE"));
		quoted += strstr(s->warn[i], "a harness line over 65536 bytes: {\"type\": "
					     "\"agent.message\"") != NULL &&
			  strstr(s->warn[i], "[masked K] and") != NULL;
	}
	assert_true(quoted >= 1);
	assert_int_equal(s->n, 1);
	assert_string_equal(s->type[0], "run.exited");
	rig_close(&r);
}

static const char *field(const struct seen *s, int i, const char *key)
{
	return json_string_value(json_object_get(s->payload[i], key));
}

/* A file change's content: checked against its size and hash, recorded as
 * a blob its event names by key, masked, and left out over the caps. */
static void test_file_content(void **state)
{
	struct rig r;
	struct seen *s = &r.seen;
	uint8_t hash[SB_HASH_LEN];
	char key[SB_HASH_LEN * 2 + 1];

	rig_open_files(&r, 1000, 1000, 1 << 20, 16, 25);
	send_file(&r, "/workspace/a.txt", "hello", NULL, 0);
	send_file(&r, "/workspace/b.txt", "hello", "0000000000000000", 0); /* a lie */
	send_file(&r, "/workspace/c.txt", "k=" KEY, NULL, 0);
	send_file(&r, "/workspace/big.txt", "0123456789abcdefg", NULL, 0); /* 17 > 16 */
	send_file(&r, "/workspace/d.txt", "0123456789", NULL, 0); /* 5 + 12 + 10 > 25 */
	send_file(&r, "/workspace/e.txt", "", NULL, 0);	  /* empty: a blob still */
	send_file(&r, "/workspace/f.txt", "hello", NULL, 1); /* content twice */
	spin(&r);
	assert_int_equal(s->n, 6);
	assert_non_null(s->blob[4]);
	assert_int_equal(s->blob_len[4], 0);
	assert_int_equal(strlen(field(s, 4, "content")), 64);
	/* a.txt: the blob, named by its BLAKE2b-256 */
	sb_blob_hash("hello", 5, hash);
	sodium_bin2hex(key, sizeof key, hash, sizeof hash);
	assert_string_equal(field(s, 0, "path"), "/workspace/a.txt");
	assert_string_equal(field(s, 0, "content"), key);
	assert_non_null(s->blob[0]);
	assert_string_equal(s->blob[0], "hello");
	assert_null(json_object_get(s->payload[0], "masked"));
	/* b.txt: its hash is not its content's: dropped, said */
	assert_int_equal(dropped(s, "malformed"), 1);
	/* c.txt: masked, and said so */
	assert_string_equal(field(s, 1, "path"), "/workspace/c.txt");
	assert_non_null(s->blob[1]);
	assert_null(strstr(s->blob[1], KEY));
	assert_true(json_is_true(json_object_get(s->payload[1], "masked")));
	sb_blob_hash(s->blob[1], s->blob_len[1], hash);
	sodium_bin2hex(key, sizeof key, hash, sizeof hash);
	assert_string_equal(field(s, 1, "content"), key);
	/* big.txt: over the file cap */
	assert_string_equal(field(s, 2, "content"), "omitted");
	assert_string_equal(field(s, 2, "omitted"), "over the file cap");
	assert_null(s->blob[2]);
	/* d.txt: over the run's cap */
	assert_string_equal(field(s, 3, "content"), "omitted");
	assert_string_equal(field(s, 3, "omitted"), "over the run's cap");
	assert_null(s->blob[3]);
	/* f.txt: both content keys dropped, the first one's blob named once */
	sb_blob_hash("hello", 5, hash);
	sodium_bin2hex(key, sizeof key, hash, sizeof hash);
	assert_string_equal(field(s, 5, "path"), "/workspace/f.txt");
	assert_string_equal(field(s, 5, "content"), key);
	assert_int_equal(json_object_size(s->payload[5]), 6); /* and guest_seq */
	rig_close(&r);
}


/* The ACK frames the host sent since the last call: how many, and the
 * last one's seq and resend flag. */
static int read_acks(struct rig *r, uint64_t *seq, int *resend)
{
	sb_chan_reader *rd;
	struct sb_chan_frame f;
	char buf[65536];
	ssize_t n;
	int count = 0;

	assert_int_equal(sb_chan_reader_new(&rd), SB_OK);
	while ((n = read(r->peer, buf, sizeof buf)) > 0)
		assert_int_equal(sb_chan_reader_feed(rd, buf, (size_t)n), SB_OK);
	while (sb_chan_reader_next(rd, &f) == SB_OK) {
		if (f.kind != SB_CHAN_ACK)
			continue;
		count++;
		*seq = sb_map_u64(&f.body, "seq", UINT64_MAX);
		*resend = sb_map_bool(&f.body, "resend", 0);
	}
	sb_chan_reader_free(rd);
	return count;
}

static void send_output_seq(struct rig *r, uint64_t seq, const char *data)
{
	char js[4096];

	snprintf(js, sizeof js,
		 "{'type': 'agent.output', 'payload': {'stream': 'stdout', 'data': '%s'}}",
		 data);
	send_body_on(r, SB_CHAN_EVENT, seq, js);
}

static uint64_t seq_of(const struct seen *s, int i)
{
	return (uint64_t)json_integer_value(json_object_get(s->payload[i], "guest_seq"));
}

/* A hostile agent's numbering: each number is recorded once, the first
 * version wins, going backwards or 0 records nothing, a gap is counted as
 * missing, a huge number leaves nothing after it recorded but once-less
 * duplicates; a payload with its own guest_seq is refused. */
static void test_numbering(void **state)
{
	struct rig r;
	struct seen *s = &r.seen;

	rig_open(&r, 1000, 1000, 1 << 20);
	send_output_seq(&r, 1, "a");
	send_output_seq(&r, 1, "a again, other bytes"); /* a resend that differs */
	send_output_seq(&r, 2, "b");
	send_output_seq(&r, 0, "zero");
	send_output_seq(&r, 1, "back");
	send_output_seq(&r, 5, "e"); /* 3 and 4 never come */
	send_output_seq(&r, 4, "d late");
	send_body_on(&r, SB_CHAN_EVENT_JSON, 6, "{}");
	send_body_on(&r, SB_CHAN_EVENT, 7,
		     "{'type': 'agent.output', 'payload': {'stream': 'stdout', "
		     "'data': 'x', 'guest_seq': 1}}");
	send_output_seq(&r, UINT64_MAX, "huge");
	send_output_seq(&r, 8, "after huge");
	send_body_on(&r, SB_CHAN_EVENT, UINT64_MAX, "{'type': 'run.exited', "
						    "'payload': {'status': 0}}");
	spin(&r);
	sb_guest_finish(r.g);
	assert_int_equal(s->n, 4);
	assert_string_equal(data_of(s, 0), "a");
	assert_int_equal(seq_of(s, 0), 1);
	assert_string_equal(data_of(s, 1), "b");
	assert_int_equal(seq_of(s, 1), 2);
	assert_string_equal(data_of(s, 2), "e");
	assert_int_equal(seq_of(s, 2), 5);
	assert_string_equal(data_of(s, 3), "huge");
	assert_int_equal(dropped(s, "missing from the guest's numbering"),
			 2 + (UINT64_MAX - 7 - 1));
	assert_int_equal(dropped(s, "malformed"), 3); /* 0, not JSON, guest_seq */
	rig_close(&r);
}

/* ACK: sent once what was taken is committed (the caller says when),
 * only when there is something new. */
static void test_ack(void **state)
{
	struct rig r;
	uint64_t seq = 0;
	int resend = -1;

	rig_open(&r, 1000, 1000, 1 << 20);
	sb_guest_ack(r.g, sb_guest_taken(r.g));
	assert_int_equal(read_acks(&r, &seq, &resend), 0); /* nothing taken */
	send_output(&r, "a");
	send_output(&r, "b");
	send_output(&r, "c");
	spin(&r);
	assert_int_equal(read_acks(&r, &seq, &resend), 0); /* not committed yet */
	sb_guest_ack(r.g, sb_guest_taken(r.g));
	sb_guest_ack(r.g, sb_guest_taken(r.g));
	assert_int_equal(read_acks(&r, &seq, &resend), 1);
	assert_int_equal(seq, 3);
	assert_int_equal(resend, 0);
	rig_close(&r);
}

/* A channel taken up again: ACK {resend} names the last committed frame;
 * frames past a gap before RESEND wait for it, the agent's kept frames
 * after it are taken in order, what the host has is dropped; RESEND's next
 * past what the host has counts the rest as missing. */
static void test_resend(void **state)
{
	struct rig r;
	struct seen *s = &r.seen;
	uint64_t seq = 0;
	int resend = 0, sv[2];

	rig_open(&r, 1000, 1000, 1 << 20);
	sb_guest_committed(r.g, 10); /* the record holds 1..10 */
	assert_int_equal(
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
	sb_guest_attach(r.g, sv[0], 1);
	close(r.peer);
	r.peer = sv[1];
	assert_int_equal(read_acks(&r, &seq, &resend), 1);
	assert_int_equal(seq, 10);
	assert_int_equal(resend, 1);
	/* the tail of a frame cut by the old host, then a frame written
	 * before the agent read the ACK */
	assert_int_equal(write(r.peer, "\x01\x02\x03", 3), 3);
	send_output_seq(&r, 14, "n14 early");
	send_body_on(&r, SB_CHAN_RESEND, 0, "{'next': 9}");
	for (uint64_t i = 9; i <= 14; i++) {
		char d[16];
		snprintf(d, sizeof d, "n%llu", (unsigned long long)i);
		send_output_seq(&r, i, d);
	}
	spin(&r);
	assert_int_equal(s->n, 4);
	for (int i = 0; i < 4; i++) {
		char d[16];
		snprintf(d, sizeof d, "n%d", 11 + i);
		assert_string_equal(data_of(s, i), d);
		assert_int_equal(seq_of(s, i), 11 + i);
	}
	sb_guest_ack(r.g, sb_guest_taken(r.g));
	assert_int_equal(read_acks(&r, &seq, &resend), 1);
	assert_int_equal(seq, 14);
	assert_int_equal(resend, 0);
	/* another reconnection: the agent kept nothing before 20 */
	assert_int_equal(
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
	sb_guest_attach(r.g, sv[0], 1);
	close(r.peer);
	r.peer = sv[1];
	assert_int_equal(read_acks(&r, &seq, &resend), 1);
	assert_int_equal(seq, 14);
	send_body_on(&r, SB_CHAN_RESEND, 0, "{'next': 20}");
	send_output_seq(&r, 20, "n20");
	spin(&r);
	sb_guest_finish(r.g);
	assert_int_equal(s->n, 5);
	assert_string_equal(data_of(s, 4), "n20");
	assert_int_equal(dropped(s, "missing from the guest's numbering"), 5);
	assert_int_equal(dropped(s, "malformed"), 0);
	rig_close(&r);
}

/* A copy of a memory snapshot: frames numbered by the original's agent
 * before the copy's HELLO are not its own; it numbers from 1 after. */
static void test_restored(void **state)
{
	struct rig r;
	struct seen *s = &r.seen;

	rig_open(&r, 1000, 1000, 1 << 20);
	sb_guest_restored(r.g, NULL);
	send_output_seq(&r, 41, "the original");
	send_body(&r, SB_CHAN_HELLO, "{'version': '0.9.0', 'resume': 1}");
	send_output_seq(&r, 1, "the copy");
	spin(&r);
	sb_guest_finish(r.g);
	assert_int_equal(s->n, 1);
	assert_string_equal(data_of(s, 0), "the copy");
	assert_int_equal(dropped(s, "missing"), 0);
	rig_close(&r);
}

/* A flood past the rate: the guest waits, nothing is dropped, every file
 * change is recorded, in order. */
static void test_paced(void **state)
{
	struct rig r;
	struct seen *s = &r.seen;
	sb_watch *w;
	char path[32];

	rig_open(&r, 20, 5, 1 << 20);
	for (int i = 0; i < 20; i++) {
		snprintf(path, sizeof path, "/workspace/f%d", i);
		send_file(&r, path, "x", NULL, 0);
	}
	spin(&r); /* 50 ms: the burst, and one or two more */
	assert_true(s->n >= 5 && s->n < 20);
	w = sb_loop_timer(r.loop, 2.0, 0, on_tick, r.loop); /* 15 more take 0.75 s */
	sb_loop_run(r.loop);
	sb_watch_stop(w);
	assert_int_equal(s->n, 20);
	for (int i = 0; i < 20; i++) {
		snprintf(path, sizeof path, "/workspace/f%d", i);
		assert_string_equal(field(s, i, "path"), path);
	}
	assert_int_equal(s->nwarn, 0);
	rig_close(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_synced),
	    cmocka_unit_test(test_once_events),	 cmocka_unit_test(test_recorded),
	    cmocka_unit_test(test_quota),	 cmocka_unit_test(test_masked_text),
	    cmocka_unit_test(test_file_content),
	    cmocka_unit_test(test_long_line),
	    cmocka_unit_test(test_numbering),	 cmocka_unit_test(test_ack),
	    cmocka_unit_test(test_resend),	 cmocka_unit_test(test_restored),
	    cmocka_unit_test(test_paced),
	};
	if (sodium_init() < 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
