/* mpack.h - msgpack helpers shared by the host and the static guest agent:
 * bounds checks for untrusted bytes, reading map fields, packing key/value
 * pairs. They depend on msgpack-c and engine/error.h only.
 */
#ifndef SB_MPACK_H
#define SB_MPACK_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

/* Checks that buf starts with one whole msgpack object in which no string,
 * array or map declares more than the bytes left could hold, and sets
 * *objlen to its length. msgpack_unpack allocates for a declared array or
 * map size before reading it, so untrusted bytes go through this first.
 * Errors: SB_ERR_CORRUPT. */
int sb_msgpack_check(const void *buf, size_t len, size_t *objlen);

/* Parses payload bytes into *map, allocating from zone (the caller owns the
 * zone; *map is valid until the zone is cleared and while the bytes live).
 * Errors: SB_ERR_CORRUPT when the bytes are not exactly one msgpack map. */
int sb_payload_parse(const void *payload, size_t len, msgpack_zone *zone,
		     msgpack_object *map);

/* Returns the value of key in map (a MAP object), or NULL. Borrowed. */
const msgpack_object *sb_map_get(const msgpack_object *map, const char *key);

/* Returns 1 when o is the string s (exactly), else 0. */
int sb_obj_is_str(const msgpack_object *o, const char *s);

/* Copies the string value of key into buf (NUL-terminated, cut to cap-1).
 * Returns the full length, or -1 when the key is absent or not a string. */
int sb_map_str(const msgpack_object *map, const char *key, char *buf, size_t cap);

/* Returns the unsigned value of key, or dflt when absent or not an integer
 * >= 0. */
uint64_t sb_map_u64(const msgpack_object *map, const char *key, uint64_t dflt);

/* Returns the boolean value of key (0 or 1), or dflt when absent or not a
 * boolean. */
int sb_map_bool(const msgpack_object *map, const char *key, int dflt);

/* Returns the signed value of key, or dflt when absent or not an integer. */
int64_t sb_map_i64(const msgpack_object *map, const char *key, int64_t dflt);

/* Packs "key": value pairs (the caller has packed the map header). */
void sb_pack_kstr(msgpack_packer *pk, const char *key, const char *val);
void sb_pack_kstrn(msgpack_packer *pk, const char *key, const char *val, size_t n);
void sb_pack_ku64(msgpack_packer *pk, const char *key, uint64_t val);
void sb_pack_ki64(msgpack_packer *pk, const char *key, int64_t val);
void sb_pack_kbool(msgpack_packer *pk, const char *key, int val);
void sb_pack_str(msgpack_packer *pk, const char *s);

#endif
