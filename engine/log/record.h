/* record.h - the stored form of an event.
 *
 * A record is: a msgpack array [version, offset, type, run, seq, ts_ns,
 * source], then the payload map as it was appended, then the XXH3-64 of all
 * preceding bytes as 8 big-endian bytes. The checksum is verified on every
 * decode; the payload is exposed as bytes and parsed only on demand.
 *
 * The header is written and read by hand (not through msgpack-c): it is a
 * fixed shape of seven scalars, and reading it is the hot path of replay and
 * catch-up. The bytes are the ones msgpack-c's packer gives (smallest
 * encodings); the reader also takes any other valid encoding of the same
 * values (array16/32, wider or signed non-negative integers, str8/16/32).
 */
#ifndef SB_RECORD_H
#define SB_RECORD_H

#include <msgpack.h>

#include "engine/log/event.h"

#define SB_RECORD_VERSION 1

/* Returns the length of ev's record (ev->type, ev->run and the payload set),
 * or 0 when ev has no payload and so cannot be encoded. */
size_t sb_record_size(const struct sb_event *ev);

/* Writes ev's record, exactly sb_record_size(ev) (non-zero) bytes, to out:
 * header, payload and checksum. */
void sb_record_write(const struct sb_event *ev, uint8_t *out);

/* Appends the record of ev to out (ev->offset and ev->seq must be set).
 * Errors: SB_ERR_INVAL (no payload), SB_ERR_NOMEM. */
int sb_record_encode(const struct sb_event *ev, msgpack_sbuffer *out);

/* Decodes the record in buf into ev. ev->payload points into buf and is valid
 * as long as buf is. Never reads outside [buf, buf+len). Errors: SB_ERR_CORRUPT
 * (checksum mismatch, truncated or malformed record; detail says which). */
int sb_record_decode(const void *buf, size_t len, struct sb_event *ev);

#endif
