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
	SB_F_LABEL, /* str of 1 to SB_LABEL_MAX bytes of printable text
		     * (sb_text_check: no control byte, valid UTF-8) */
};

/* Or'd into a field's type: the field may be absent; when present it must
 * have the type. */
#define SB_F_OPTIONAL 0x100u

#define SB_LABEL_MAX 64

struct sb_field {
	const char *name;
	unsigned type; /* an sb_ftype, with SB_F_OPTIONAL for a field that may be absent */
};

/* The sb_ftype of field f, without SB_F_OPTIONAL. */
static inline enum sb_ftype sb_field_kind(const struct sb_field *f)
{
	return (enum sb_ftype)(f->type & ~SB_F_OPTIONAL);
}

#define SB_FIELDS_MAX 9

/* Source bits for sb_event_schema.sources. */
#define SB_FROM_HOST    (1u << SB_SRC_HOST)
#define SB_FROM_GUEST   (1u << SB_SRC_GUEST)
#define SB_FROM_GATEWAY (1u << SB_SRC_GATEWAY)
#define SB_FROM_OPERATOR (1u << SB_SRC_OPERATOR)
#define SB_FROM_HARNESS (1u << SB_SRC_HARNESS)

struct sb_event_schema {
	const char *type;
	unsigned sources;                      /* SB_FROM_* bits */
	struct sb_field fields[SB_FIELDS_MAX]; /* required unless SB_F_OPTIONAL;
						* ends at name NULL */
};

/* Returns the schema of type, or NULL when the type is unknown. */
const struct sb_event_schema *sb_schema_find(const char *type);

/* Returns the whole table and its length through *n. */
const struct sb_event_schema *sb_schema_all(size_t *n);

/* Checks that an event of type from src with this payload is allowed: known
 * type, allowed source, payload one msgpack map of at most SB_PAYLOAD_MAX
 * bytes with string keys, every required field present with its type, and
 * each optional field that is present with its type.
 * Errors: SB_ERR_SCHEMA, with a detail naming the type and field. */
int sb_schema_check(const char *type, enum sb_source src, const void *payload,
		    size_t len);

#endif
