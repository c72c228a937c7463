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

/* Packs "key": value pairs into a map whose header has been packed: one
 * whose pairs are counted in the code right above. A map whose pairs
 * depend on anything is packed with sb_mapw below. */
void sb_pack_kstr(msgpack_packer *pk, const char *key, const char *val);
void sb_pack_kstrn(msgpack_packer *pk, const char *key, const char *val, size_t n);
void sb_pack_ku64(msgpack_packer *pk, const char *key, uint64_t val);
void sb_pack_ki64(msgpack_packer *pk, const char *key, int64_t val);
void sb_pack_kbool(msgpack_packer *pk, const char *key, int val);
void sb_pack_str(msgpack_packer *pk, const char *s);

/* Appends len bytes that already are packed msgpack (whole objects) through
 * pk, as a value or values of what pk packs. Errors: SB_ERR_NOMEM. */
int sb_pack_raw(msgpack_packer *pk, const void *bytes, size_t len);

/* --- a map that counts its own pairs ---
 *
 * sb_mapw packs a msgpack map whose header says how many pairs were packed
 * into it, so that no caller counts them:
 *
 *	sb_mapw m;
 *	sb_mapw_begin(&m, &pk);
 *	sb_mapw_str(&m, "name", name);
 *	if (port)
 *		sb_mapw_u64(&m, "port", port);
 *	rc = sb_mapw_end(&m);
 *
 * The pairs go straight into the buffer under pk; sb_mapw_end moves them
 * up by the header's size and puts the header before them, in its smallest
 * form (fixmap, map16, map32: the bytes msgpack_pack_map gives for the same
 * count), so a map is packed byte for byte as a hand-counted one was.
 *
 * A value that is not a scalar is packed with the packer sb_mapw_key
 * returns: an array, raw packed bytes (sb_pack_raw), or a nested map begun
 * on that packer, which must be ended before the outer map takes its next
 * pair. A map in an array packed there is begun on it likewise.
 *
 * Ownership: an sb_mapw lives where its caller puts it (stack or struct)
 * and holds no memory, so there is nothing to free; its packer points at
 * it, so it must not be moved or copied between begin and end. The buffer
 * is the caller's and must outlive the map. A map given up without
 * sb_mapw_end leaves its pairs, headless, in the buffer: the caller
 * discards the buffer.
 *
 * Errors: every helper records the first error in the map (and in the maps
 * it is nested in) instead of returning it; sb_mapw_end returns it. */
typedef struct sb_mapw {
	msgpack_packer pk;     /* packs into the map: keys, values, nested maps */
	msgpack_sbuffer *buf;  /* the buffer the map is packed into */
	struct sb_mapw *up;    /* the map this one is nested in, or NULL */
	struct sb_mapw *child; /* the nested map begun and not yet ended */
	size_t start;          /* offset in buf of the map's first pair */
	uint32_t n;            /* pairs packed so far */
	int err;               /* the first error, 0 while there is none */
	int ended;
} sb_mapw;

/* Begins m at the end of what pk has packed. pk is either a packer on a
 * msgpack_sbuffer (msgpack_packer_init(pk, buf, msgpack_sbuffer_write)) or
 * the pk of an open sb_mapw: then m is nested in that map (or in an array
 * packed there). It does not fail; a nested map begun while another one is
 * open there makes both maps fail with SB_ERR_STATE. */
void sb_mapw_begin(sb_mapw *m, msgpack_packer *pk);

/* Begins m holding the pairs of map, a whole packed msgpack map of len
 * bytes (copied), so that more can be added. Errors (also recorded in m):
 * SB_ERR_CORRUPT when map does not start with a map header, SB_ERR_NOMEM. */
int sb_mapw_begin_from(sb_mapw *m, msgpack_packer *pk, const void *map, size_t len);

/* Counts one more pair in m and returns m's packer, with which the caller
 * packs its key and then its value: for a key that is not a C string. */
msgpack_packer *sb_mapw_pair(sb_mapw *m);

/* Counts one more pair, packs its key (the string key, or the n bytes at
 * key) and returns m's packer, with which the caller packs exactly one
 * value. */
msgpack_packer *sb_mapw_key(sb_mapw *m, const char *key);
msgpack_packer *sb_mapw_keyn(sb_mapw *m, const char *key, size_t n);

/* Packs one pair "key": value into m. */
void sb_mapw_str(sb_mapw *m, const char *key, const char *val);
void sb_mapw_strn(sb_mapw *m, const char *key, const char *val, size_t n);
void sb_mapw_bin(sb_mapw *m, const char *key, const void *val, size_t n);
void sb_mapw_u64(sb_mapw *m, const char *key, uint64_t val);
void sb_mapw_i64(sb_mapw *m, const char *key, int64_t val);
void sb_mapw_bool(sb_mapw *m, const char *key, int val);
void sb_mapw_nil(sb_mapw *m, const char *key);

/* Ends m: puts the header that counts its pairs before them. Then m packs
 * nothing more. Returns SB_OK, or the first error of m or of a map nested
 * in it: SB_ERR_NOMEM (a write into the buffer failed), SB_ERR_STATE (a
 * nested map left open, or m ended twice), SB_ERR_TOOBIG (more than
 * UINT32_MAX pairs), SB_ERR_CORRUPT (see sb_mapw_begin_from). On an error
 * but the second end, the buffer is cut back to where m began (the bytes
 * cut are zeroed), and the map m is nested in fails too. */
int sb_mapw_end(sb_mapw *m);

#endif
