/* event.h - the event: one immutable fact in a run's record.
 *
 * An event has a type from the schema (engine/schema.h), the run it belongs
 * to, a per-run sequence number and a global offset (both assigned by the log
 * when the event is appended), a timestamp, its source and a payload: one
 * msgpack map, kept as encoded bytes.
 */
#ifndef SB_EVENT_H
#define SB_EVENT_H

#include <jansson.h>
#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#define SB_TYPE_MAX    40      /* longest event type name + 1 */
#define SB_RUN_MAX     24      /* longest run id + 1 */
#define SB_RUN_ID_LEN  12      /* run ids the daemon makes: 12 lowercase hex */
#define SB_PAYLOAD_MAX (256u << 10) /* larger bodies go to the blob table */

enum sb_source {
	SB_SRC_HOST = 0,    /* the daemon itself */
	SB_SRC_GUEST = 1,   /* the guest agent or the harness: never trusted */
	SB_SRC_GATEWAY = 2, /* the model gateway: authoritative for usage */
	SB_SRC_OPERATOR = 3, /* a person or tool through events.append */
	SB_SRC_HARNESS = 4, /* a line the harness wrote to $SANBOX_EVENTS */
	SB_SRC_LAST = SB_SRC_HARNESS,
};

struct sb_event {
	uint64_t offset;          /* global offset, from 1; set by the log */
	uint64_t seq;             /* per-run sequence, from 1; set by the log */
	uint64_t ts_ns;           /* wall clock, ns; 0 on append = now */
	enum sb_source source;
	char type[SB_TYPE_MAX];   /* "agent.tool.completed" */
	char run[SB_RUN_MAX];     /* run id */
	const uint8_t *payload;   /* one msgpack map; not owned */
	size_t payload_len;
};

/* Returns "host", "guest", "gateway", "operator" or "harness" ("?" for
 * anything else). */
const char *sb_source_name(enum sb_source src);

/* Parses a source name (see sb_source_name) into *out. Errors: SB_ERR_INVAL. */
int sb_source_parse(const char *name, enum sb_source *out);

/* Fills type and run of ev, checking their lengths. Errors: SB_ERR_INVAL. */
int sb_event_init(struct sb_event *ev, const char *type, const char *run,
		  enum sb_source src, const void *payload, size_t len);

/* Returns ev with its payload (a map) as a JSON object {offset, seq, ts,
 * type, run, source, payload} (the caller decrefs), or NULL when out of
 * memory. */
json_t *sb_event_json(const struct sb_event *ev, const msgpack_object *payload);

#endif
