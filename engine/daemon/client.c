/* client.c - requests with typed replies; following events. */
#include "engine/daemon/client.h"

#include <string.h>
#include <time.h>

#include "engine/error.h"
#include "engine/payload.h"
#include "engine/daemon/wire.h"

/* Parses the reply bytes raw (taken over by rep) into rep. */
static int reply_parse(void *raw, size_t len, struct sb_reply *rep)
{
	size_t chunk;

	rep->raw = raw;
	/* Unpacked, a reply takes several times its size (an object is 24
	 * bytes); one chunk of that size spares thousands of 4 KiB chunks
	 * (and their page faults) for a large events.read reply. */
	chunk = len < 512 ? 4096 : len < (4u << 20) ? 8 * len : 32u << 20;
	if (!msgpack_zone_init(&rep->zone, chunk))
		return SB_ERR_NOMEM;
	return sb_wire_reply(rep->raw, len, &rep->zone, &rep->map);
}

int sb_request(sb_client *c, const msgpack_sbuffer *req, int timeout_ms, struct sb_reply *rep)
{
	void *raw;
	size_t len;
	int rc;

	memset(rep, 0, sizeof *rep);
	if ((rc = sb_client_call(c, req->data, req->size, timeout_ms, &raw, &len)))
		return rc;
	return reply_parse(raw, len, rep);
}

void sb_reply_free(struct sb_reply *rep)
{
	if (rep->zone.chunk_size)
		msgpack_zone_destroy(&rep->zone);
	sb_bus_free(rep->raw);
	memset(rep, 0, sizeof *rep);
}

struct follow_state {
	struct sb_follow_opts *o;
	sb_follow_fn fn;
	void *ctx;
	uint64_t next;      /* next offset to read from the log */
	uint64_t last_off;  /* newest offset delivered (0: none) */
	uint64_t last_seq;  /* its per-run sequence */
};

static int wanted(const struct sb_follow_opts *o, const char *type)
{
	if (!o->types)
		return 1;
	for (const char *const *t = o->types; *t; t++) {
		size_t n = strlen(*t);
		if (!strncmp(type, *t, n) && (type[n] == 0 || type[n] == '.'))
			return 1;
	}
	return 0;
}

static int deliver(struct follow_state *s, const struct sb_event *ev, const msgpack_object *p)
{
	if (ev->offset <= s->last_off)
		return SB_OK; /* already seen */
	s->last_off = ev->offset;
	s->last_seq = ev->seq;
	if (ev->offset >= s->next)
		s->next = ev->offset + 1;
	return wanted(s->o, ev->type) ? s->fn(s->ctx, ev, p) : SB_OK;
}

/* Asks for the events from offset from (an events.read request). */
static int backlog_send(sb_client *c, const struct follow_state *s, uint64_t from,
			sb_call **call)
{
	msgpack_sbuffer req;
	msgpack_packer pk;
	sb_mapw m;
	int rc;

	msgpack_sbuffer_init(&req);
	msgpack_packer_init(&pk, &req, msgpack_sbuffer_write);
	sb_mapw_begin(&m, &pk);
	sb_mapw_str(&m, "op", "events.read");
	sb_mapw_str(&m, "run", s->o->run);
	sb_mapw_u64(&m, "from", from);
	sb_mapw_u64(&m, "limit", 10000);
	sb_mapw_bool(&m, "records", 1); /* stored records, not repacked */
	if (s->o->token)
		sb_mapw_str(&m, "token", s->o->token);
	if ((rc = sb_mapw_end(&m)) == SB_OK)
		rc = sb_client_send(c, req.data, req.size, 30000, call);
	msgpack_sbuffer_destroy(&req);
	return rc;
}

/* Delivers the events of one events.read reply: stored records (what this
 * client asks for) or wire event maps (what a daemon that does not know
 * records sends). Payloads are parsed into zone, cleared for each. */
static int deliver_reply(struct follow_state *s, const msgpack_object *map, msgpack_zone *zone)
{
	const msgpack_object *recs = sb_map_get(map, "records"), *evs = sb_map_get(map, "events");
	const msgpack_object *list = recs ? recs : evs, *p;
	msgpack_object payload;
	struct sb_event ev;
	int rc = SB_OK;

	if (!list || list->type != MSGPACK_OBJECT_ARRAY)
		return sb_seterr(SB_ERR_PROTO, "malformed events reply");
	for (uint32_t i = 0; rc == SB_OK && i < list->via.array.size; i++) {
		if (!recs) {
			rc = sb_wire_unpack_event(&list->via.array.ptr[i], &ev, &p);
		} else {
			msgpack_zone_clear(zone);
			rc = sb_wire_unpack_record(&list->via.array.ptr[i], &ev, zone, &payload);
			p = &payload;
		}
		if (rc == SB_OK)
			rc = deliver(s, &ev, p);
	}
	return rc;
}

/* Reads the log from s->next to its end and delivers what it finds. The
 * request for the next part goes out before this part is delivered, so the
 * daemon reads while the client decodes and delivers. */
static int read_backlog(sb_client *c, struct follow_state *s)
{
	uint64_t from = s->next;
	sb_call *call = NULL;
	msgpack_zone zone;
	int rc;

	if (!msgpack_zone_init(&zone, 8192))
		return SB_ERR_NOMEM;
	rc = backlog_send(c, s, from, &call);
	while (rc == SB_OK && call && !(s->o->stop && *s->o->stop)) {
		struct sb_reply rep;
		const msgpack_object *end;
		uint64_t next;
		void *raw;
		size_t len;

		memset(&rep, 0, sizeof rep);
		rc = sb_client_wait(call, &raw, &len);
		call = NULL;
		if (rc == SB_OK)
			rc = reply_parse(raw, len, &rep);
		end = sb_map_get(&rep.map, "end");
		next = sb_map_u64(&rep.map, "next", from);
		/* "next" also covers events the daemon skipped (types); no
		 * progress means nothing more to ask for */
		if (rc == SB_OK && !(end && end->via.boolean) && next > from)
			rc = backlog_send(c, s, next, &call);
		if (rc == SB_OK)
			rc = deliver_reply(s, &rep.map, &zone);
		if (rc == SB_OK && next > s->next)
			s->next = next;
		from = next;
		sb_reply_free(&rep);
	}
	sb_client_cancel(call);
	msgpack_zone_destroy(&zone);
	return rc;
}

/* Is ev the direct successor of what was delivered? */
static int in_order(const struct follow_state *s, const struct sb_event *ev)
{
	if (!s->last_off)
		return 0; /* nothing seen yet: let the log say what came first */
	return s->o->run[0] ? ev->seq == s->last_seq + 1 : ev->offset == s->last_off + 1;
}

/* A remote daemon has no event feed for us (it could not check a token):
 * read the log, then poll it every 200 ms. */
static int follow_remote(sb_client *c, struct follow_state *s)
{
	const struct timespec tick = {0, 200000000};
	int rc;

	while ((rc = read_backlog(c, s)) == SB_OK && !(s->o->stop && *s->o->stop))
		nanosleep(&tick, NULL);
	return rc;
}

int sb_follow(sb_client *c, struct sb_follow_opts *o, sb_follow_fn fn, void *ctx)
{
	struct follow_state s = {o, fn, ctx, o->from ? o->from : 1, 0, 0};
	sb_sub *sub = NULL;
	msgpack_zone zone;
	int quiet_checked = 0, rc;

	if (o->follow && !strncmp(o->home, "tls+tcp://", 10))
		return follow_remote(c, &s);
	if (o->follow && (rc = sb_sub_open(o->home, o->ca_pem, o->run, &sub)))
		return rc;
	/* Subscribed first, read the log second: whatever is committed after
	 * the read arrives on the feed, and duplicates are dropped by offset. */
	if ((rc = read_backlog(c, &s)) || !o->follow) {
		sb_sub_close(sub);
		return rc;
	}
	if (!msgpack_zone_init(&zone, 4096)) {
		sb_sub_close(sub);
		return SB_ERR_NOMEM;
	}
	while (rc == SB_OK && !(o->stop && *o->stop)) {
		msgpack_object map;
		const msgpack_object *payload;
		struct sb_event ev;
		void *msg;
		size_t len;

		rc = sb_sub_next(sub, 250, &msg, &len);
		if (rc == SB_ERR_RESET) {
			/* a new connection (the daemon restarted): the log
			 * has what the feed lost meanwhile */
			rc = read_backlog(c, &s);
			continue;
		}
		if (rc == SB_ERR_TIMEOUT) {
			/* The feed went quiet: read the log once for what it may
			 * not have carried, such as an event published before the
			 * daemon had attached this subscriber (a gap only shows
			 * when a later event arrives, and none may come). */
			rc = quiet_checked ? SB_OK : read_backlog(c, &s);
			quiet_checked = 1;
			continue;
		}
		if (rc)
			break;
		quiet_checked = 0;
		msgpack_zone_clear(&zone);
		if (sb_payload_parse(msg, len, &zone, &map) ||
		    sb_wire_unpack_event(&map, &ev, &payload)) {
			sb_bus_free(msg);
			continue; /* not an event: ignore */
		}
		if (ev.offset <= s.last_off) {
			rc = SB_OK;
		} else if (in_order(&s, &ev)) {
			rc = deliver(&s, &ev, payload);
		} else {
			if (s.last_off)
				o->gaps++;
			rc = read_backlog(c, &s); /* fills the gap, this event included */
		}
		sb_bus_free(msg);
	}
	msgpack_zone_destroy(&zone);
	sb_sub_close(sub);
	return rc;
}
