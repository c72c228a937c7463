/* schema.h - the table of event types and their required payload fields.
 *
 * Every event type the product writes is declared once here, with the
 * payload fields it must carry, their types, and the sources allowed to emit
 * it. The log refuses an event that does not match.
 */
#ifndef SB_SCHEMA_H
#define SB_SCHEMA_H

#include <stddef.h>

#include "engine/log/event.h"

enum sb_ftype {
	SB_F_STR,  /* msgpack str */
	SB_F_UINT, /* non-negative integer */
	SB_F_INT,  /* any integer */
	SB_F_BOOL,
	SB_F_MAP,
	SB_F_ARRAY,
	SB_F_HASH, /* str of 64 lowercase hex digits: a blob key (engine/log/blob.h) */
};

struct sb_field {
	const char *name;
	enum sb_ftype type;
};

#define SB_FIELDS_MAX 8

/* Source bits for sb_event_schema.sources. */
#define SB_FROM_HOST    (1u << SB_SRC_HOST)
#define SB_FROM_GUEST   (1u << SB_SRC_GUEST)
#define SB_FROM_GATEWAY (1u << SB_SRC_GATEWAY)
#define SB_FROM_OPERATOR (1u << SB_SRC_OPERATOR)
#define SB_FROM_HARNESS (1u << SB_SRC_HARNESS)

struct sb_event_schema {
	const char *type;
	unsigned sources;                      /* SB_FROM_* bits */
	struct sb_field fields[SB_FIELDS_MAX]; /* required; ends at name NULL */
};

/* Returns the schema of type, or NULL when the type is unknown. */
const struct sb_event_schema *sb_schema_find(const char *type);

/* Returns the whole table and its length through *n. */
const struct sb_event_schema *sb_schema_all(size_t *n);

/* Checks that an event of type from src with this payload is allowed: known
 * type, allowed source, payload one msgpack map of at most SB_PAYLOAD_MAX
 * bytes with string keys, every required field present with its type.
 * Errors: SB_ERR_SCHEMA, with a detail naming the type and field. */
int sb_schema_check(const char *type, enum sb_source src, const void *payload,
		    size_t len);

#endif
