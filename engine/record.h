/* record.h - the stored form of an event.
 *
 * A record is: a msgpack array [version, offset, type, run, seq, ts_ns,
 * source], then the payload map as it was appended, then the XXH3-64 of all
 * preceding bytes as 8 big-endian bytes. The checksum is verified on every
 * decode; the payload is exposed as bytes and parsed only on demand.
 */
#ifndef SB_RECORD_H
#define SB_RECORD_H

#include <msgpack.h>

#include "engine/event.h"

#define SB_RECORD_VERSION 1

/* Appends the record of ev to out (ev->offset and ev->seq must be set).
 * Errors: SB_ERR_INVAL (no payload), SB_ERR_NOMEM. */
int sb_record_encode(const struct sb_event *ev, msgpack_sbuffer *out);

/* Decodes the record in buf into ev. ev->payload points into buf and is valid
 * as long as buf is. Never reads outside [buf, buf+len). Errors: SB_ERR_CORRUPT
 * (checksum mismatch, truncated or malformed record; detail says which). */
int sb_record_decode(const void *buf, size_t len, struct sb_event *ev);

#endif
