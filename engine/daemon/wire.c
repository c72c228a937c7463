/* wire.c - packing and unpacking what crosses the control API. */
#include "engine/daemon/wire.h"

#include <string.h>

#include "engine/error.h"
#include "engine/payload.h"
#include "engine/log/record.h"

int sb_wire_pack_event(msgpack_packer *pk, const struct sb_event *ev)
{
	sb_mapw m;

	sb_mapw_begin(&m, pk);
	sb_mapw_u64(&m, "offset", ev->offset);
	sb_mapw_u64(&m, "seq", ev->seq);
	sb_mapw_u64(&m, "ts", ev->ts_ns);
	sb_mapw_str(&m, "type", ev->type);
	sb_mapw_str(&m, "run", ev->run);
	sb_mapw_str(&m, "source", sb_source_name(ev->source));
	sb_pack_raw(sb_mapw_key(&m, "payload"), ev->payload, ev->payload_len);
	return sb_mapw_end(&m);
}

int sb_wire_unpack_event(const msgpack_object *o, struct sb_event *ev, const msgpack_object **payload)
{
	char src[16];

	memset(ev, 0, sizeof *ev);
	*payload = sb_map_get(o, "payload");
	if (!*payload || (*payload)->type != MSGPACK_OBJECT_MAP ||
	    sb_map_str(o, "type", ev->type, sizeof ev->type) <= 0 ||
	    sb_map_str(o, "run", ev->run, sizeof ev->run) <= 0 ||
	    sb_map_str(o, "source", src, sizeof src) <= 0 || sb_source_parse(src, &ev->source))
		return sb_seterr(SB_ERR_PROTO, "malformed event from the daemon");
	ev->offset = sb_map_u64(o, "offset", 0);
	ev->seq = sb_map_u64(o, "seq", 0);
	ev->ts_ns = sb_map_u64(o, "ts", 0);
	return SB_OK;
}

int sb_wire_pack_record(msgpack_packer *pk, const void *rec, size_t len)
{
	if (msgpack_pack_bin(pk, len) || msgpack_pack_bin_body(pk, rec, len))
		return SB_ERR_NOMEM;
	return SB_OK;
}

int sb_wire_unpack_record(const msgpack_object *o, struct sb_event *ev, msgpack_zone *zone,
			  msgpack_object *payload)
{
	int rc;

	if (o->type != MSGPACK_OBJECT_BIN)
		return sb_seterr(SB_ERR_PROTO, "malformed record from the daemon");
	if ((rc = sb_record_decode(o->via.bin.ptr, o->via.bin.size, ev)) ||
	    (rc = sb_payload_parse(ev->payload, ev->payload_len, zone, payload)))
		return sb_seterr(SB_ERR_PROTO, "record from the daemon: %s", sb_errmsg(rc));
	return SB_OK;
}

void sb_wire_error(msgpack_sbuffer *buf, int code, const char *msg)
{
	msgpack_packer pk;

	msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 3);
	sb_pack_kbool(&pk, "ok", 0);
	sb_pack_kstr(&pk, "error", msg);
	sb_pack_ki64(&pk, "code", code);
}

int sb_wire_reply(const void *buf, size_t len, msgpack_zone *zone, msgpack_object *map)
{
	const msgpack_object *ok;
	char msg[512];
	int64_t code;

	if (sb_payload_parse(buf, len, zone, map))
		return sb_seterr(SB_ERR_PROTO, "malformed reply from the daemon");
	ok = sb_map_get(map, "ok");
	if (!ok || ok->type != MSGPACK_OBJECT_BOOLEAN)
		return sb_seterr(SB_ERR_PROTO, "malformed reply from the daemon");
	if (ok->via.boolean)
		return SB_OK;
	code = sb_map_i64(map, "code", SB_ERR_PROTO);
	if (code >= 0 || code < -100)
		code = SB_ERR_PROTO;
	if (sb_map_str(map, "error", msg, sizeof msg) < 0)
		snprintf(msg, sizeof msg, "%s", sb_strerror((int)code));
	return sb_seterr((int)code, "%s", msg);
}
