/* payload.h - event payloads: the msgpack helpers of engine/mpack.h, and
 * conversion between msgpack and JSON for the CLI, the guest and exports.
 */
#ifndef SB_PAYLOAD_H
#define SB_PAYLOAD_H

#include <jansson.h>
#include <msgpack.h>
#include <stdint.h>

#include "engine/mpack.h"

/* Converts a msgpack object into a new JSON value (the caller decrefs).
 * Strings that are not valid UTF-8 get U+FFFD for each bad byte; binary
 * becomes a base64 string. Returns NULL when out of memory. */
json_t *sb_msgpack_to_json(const msgpack_object *o);

/* Packs a JSON value as msgpack (integers stay integers, reals become
 * float64). Errors: SB_ERR_INVAL for nesting deeper than 32. */
int sb_json_to_msgpack(const json_t *j, msgpack_packer *pk);

#endif
