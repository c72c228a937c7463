/* fields.c - struct <-> msgpack map through a field table. */
#include "projections/fields.h"

#include <string.h>

#include "engine/error.h"
#include "engine/payload.h"
#include "projections/projection.h"

int sb_fields_pack(const struct sb_fdesc *f, size_t n, const void *s, msgpack_packer *pk)
{
	const char *base = s;
	sb_mapw map;

	sb_mapw_begin(&map, pk);
	for (size_t i = 0; i < n; i++) {
		const void *m = base + f[i].off;
		switch (f[i].kind) {
		case SB_FK_STR: sb_mapw_str(&map, f[i].name, m); break;
		case SB_FK_U64: sb_mapw_u64(&map, f[i].name, *(const uint64_t *)m); break;
		case SB_FK_I64: sb_mapw_i64(&map, f[i].name, *(const int64_t *)m); break;
		}
	}
	return sb_mapw_end(&map);
}

int sb_fields_unpack(const struct sb_fdesc *f, size_t n, const msgpack_object *map, void *s)
{
	char *base = s;

	if (map->type != MSGPACK_OBJECT_MAP)
		return sb_seterr(SB_ERR_CORRUPT, "projection record is not a map");
	for (size_t i = 0; i < n; i++) {
		const msgpack_object *v = sb_map_get(map, f[i].name);
		void *m = base + f[i].off;
		if (!v)
			continue;
		if (f[i].kind == SB_FK_STR && v->type == MSGPACK_OBJECT_STR)
			sb_map_str(map, f[i].name, m, f[i].size);
		else if (f[i].kind == SB_FK_U64 && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
			*(uint64_t *)m = v->via.u64;
		else if (f[i].kind == SB_FK_I64 && (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
						    v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER))
			*(int64_t *)m = v->via.i64;
		else
			return sb_seterr(SB_ERR_CORRUPT, "projection field '%s' has a wrong type",
					 f[i].name);
	}
	return SB_OK;
}

int sb_fields_load(struct sb_proj_txn *t, const void *key, size_t klen, const struct sb_fdesc *f,
		   size_t n, void *s, size_t ssize)
{
	msgpack_zone zone;
	msgpack_object map;
	MDB_val v;
	int rc;

	memset(s, 0, ssize);
	if ((rc = sb_proj_get(t, key, klen, &v)))
		return rc;
	if (!msgpack_zone_init(&zone, 1024))
		return SB_ERR_NOMEM;
	rc = sb_payload_parse(v.mv_data, v.mv_size, &zone, &map);
	if (rc == SB_OK)
		rc = sb_fields_unpack(f, n, &map, s);
	msgpack_zone_destroy(&zone);
	return rc;
}

int sb_fields_store(struct sb_proj_txn *t, const void *key, size_t klen, const struct sb_fdesc *f,
		    size_t n, const void *s)
{
	msgpack_sbuffer buf;
	msgpack_packer pk;
	int rc;

	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	if ((rc = sb_fields_pack(f, n, s, &pk)) == SB_OK)
		rc = sb_proj_put(t, key, klen, buf.data, buf.size);
	msgpack_sbuffer_destroy(&buf);
	return rc;
}
