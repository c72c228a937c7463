/* wire.h - events and replies as they travel between daemon and clients.
 *
 * A wire event is a msgpack map {offset, seq, ts, type, run, source,
 * payload}; the payload is the stored map, copied byte for byte. A wire
 * record (events.read with records: true) is an event's stored record
 * (engine/record.h) as a msgpack bin, sent as it is: the daemon does not
 * repack it, and the client checks its checksum and header again.
 */
#ifndef SB_WIRE_H
#define SB_WIRE_H

#include <jansson.h>
#include <msgpack.h>

#include "engine/version.h"
#include "engine/log/event.h"

/* Packs ev as a wire event map through pk (as sb_mapw_begin's, engine/mpack.h).
 * Errors: as sb_mapw_end. */
int sb_wire_pack_event(msgpack_packer *pk, const struct sb_event *ev);

/* Reads a wire event map into ev (ev->payload is not set) and *payload
 * (borrowed from o). Errors: SB_ERR_PROTO. */
int sb_wire_unpack_event(const msgpack_object *o, struct sb_event *ev,
			 const msgpack_object **payload);

/* Packs a stored record (len bytes at rec) as a wire record through pk.
 * Errors: SB_ERR_NOMEM. */
int sb_wire_pack_record(msgpack_packer *pk, const void *rec, size_t len);

/* Reads a wire record o into ev and its payload map into *payload, whose
 * objects go to zone (the strings point into o's bytes). Errors:
 * SB_ERR_PROTO (not a bin, or its record or payload fails to decode; the
 * detail says why). */
int sb_wire_unpack_record(const msgpack_object *o, struct sb_event *ev, msgpack_zone *zone,
			  msgpack_object *payload);

/* Packs an error reply {ok: false, error, code} into buf. */
void sb_wire_error(msgpack_sbuffer *buf, int code, const char *msg);

/* Parses a reply: on {ok: true} sets *map to it (allocated in zone) and
 * returns SB_OK; on {ok: false} returns its code (negative) with its error
 * text as the thread's detail. Errors: SB_ERR_PROTO for a malformed reply. */
int sb_wire_reply(const void *buf, size_t len, msgpack_zone *zone, msgpack_object *map);

#endif
