/* fields.h - packing a C struct as a msgpack map through a field table, so
 * each projection states its record layout once. Internal to projections/. */
#ifndef SB_FIELDS_H
#define SB_FIELDS_H

#include <msgpack.h>
#include <stddef.h>

enum sb_fkind { SB_FK_STR, SB_FK_U64, SB_FK_I64 };

struct sb_fdesc {
	const char *name;
	enum sb_fkind kind;
	size_t off;  /* offsetof the member */
	size_t size; /* sizeof the member (char arrays) */
};

#define SB_FSTR(T, m) {#m, SB_FK_STR, offsetof(T, m), sizeof(((T *)0)->m)}
#define SB_FU64(T, m) {#m, SB_FK_U64, offsetof(T, m), 8}
#define SB_FI64(T, m) {#m, SB_FK_I64, offsetof(T, m), 8}

/* Packs the n fields of s as one map in table order. pk is as
 * sb_mapw_begin's. Errors: as sb_mapw_end. */
int sb_fields_pack(const struct sb_fdesc *f, size_t n, const void *s, msgpack_packer *pk);

/* Fills s from map; unknown keys are ignored, missing ones left as they are.
 * Errors: SB_ERR_CORRUPT (not a map, or a value of the wrong type). */
int sb_fields_unpack(const struct sb_fdesc *f, size_t n, const msgpack_object *map, void *s);

/* Reads key from t and unpacks it into s (zeroed first). Errors:
 * SB_ERR_NOTFOUND, SB_ERR_CORRUPT, SB_ERR_IO. */
struct sb_proj_txn;
int sb_fields_load(struct sb_proj_txn *t, const void *key, size_t klen,
		   const struct sb_fdesc *f, size_t n, void *s, size_t ssize);

/* Packs s and writes it at key. Errors: SB_ERR_FULL, SB_ERR_IO, SB_ERR_NOMEM. */
int sb_fields_store(struct sb_proj_txn *t, const void *key, size_t klen,
		    const struct sb_fdesc *f, size_t n, const void *s);

#endif
