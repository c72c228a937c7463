/* record.c - what the CLI reads of a run's record through the daemon,
 * beside its events: the file changes it recorded (agent.file.changed) and
 * the blobs that hold their contents; fs, cp, diff and replay read them. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/proc.h"

/* A string field of map into a new string (NULL when absent). */
static char *field_dup(const msgpack_object *map, const char *key)
{
	const msgpack_object *v = sb_map_get(map, key);

	return v && v->type == MSGPACK_OBJECT_STR
		   ? strndup(v->via.str.ptr, v->via.str.size)
		   : NULL;
}

int cli_file_changes(sb_client *c, const char *run, uint64_t from, uint64_t to,
		     int (*cb)(void *ctx, const struct cli_file_change *ch), void *ctx)
{
	uint64_t next = from + 1;
	int rc = SB_OK, stop = 0;

	while (!stop && next <= to) {
		struct cli_req r;
		struct sb_reply rep = {0};
		const msgpack_object *evs;
		uint32_t n;

		cli_req_begin(&r, "events.read");
		sb_mapw_str(&r.m, "run", run);
		sb_mapw_u64(&r.m, "from", next);
		sb_mapw_u64(&r.m, "limit", 1000);
		msgpack_pack_array(sb_mapw_key(&r.m, "types"), 1);
		sb_pack_str(&r.m.pk, "agent.file.changed");
		if ((rc = cli_call(c, &r, &rep)))
			return rc;
		evs = sb_map_get(&rep.map, "events");
		n = evs && evs->type == MSGPACK_OBJECT_ARRAY ? evs->via.array.size : 0;
		for (uint32_t i = 0; i < n && !stop; i++) {
			const msgpack_object *e = &evs->via.array.ptr[i];
			const msgpack_object *p = sb_map_get(e, "payload");
			struct cli_file_change ch = {.offset = sb_map_u64(e, "offset", 0),
						     .ts_ns = sb_map_u64(e, "ts", 0)};
			char *path = field_dup(p, "path"), *kind = field_dup(p, "kind"),
			     *content = field_dup(p, "content"),
			     *omitted = field_dup(p, "omitted"), *type = field_dup(p, "type");
			if (ch.offset > to) {
				stop = 1;
			} else if (path && kind) {
				ch.path = path;
				ch.kind = kind;
				ch.size = sb_map_u64(p, "size", 0);
				ch.content = content;
				ch.omitted = omitted;
				ch.link = type && !strcmp(type, "symlink");
				stop = cb(ctx, &ch);
				rc = stop > 0 ? SB_OK : stop;
			}
			next = ch.offset + 1;
			free(path);
			free(kind);
			free(content);
			free(omitted);
			free(type);
		}
		sb_reply_free(&rep);
		if (!n)
			break;
	}
	return rc;
}

/* Asks for blob key: its bytes in *d, valid until rep is freed (the
 * caller frees rep also on an error). Errors: those of blob.get,
 * SB_ERR_PROTO. */
static int blob_call(sb_client *c, const char *key, struct sb_reply *rep,
		     const msgpack_object **d)
{
	struct cli_req r;
	int rc;

	cli_req_begin(&r, "blob.get");
	sb_mapw_str(&r.m, "blob", key);
	if ((rc = cli_call(c, &r, rep)))
		return rc;
	*d = sb_map_get(&rep->map, "data");
	if (!*d || (*d)->type != MSGPACK_OBJECT_BIN)
		return sb_seterr(SB_ERR_PROTO, "blob.get: malformed reply");
	return SB_OK;
}

int cli_blob_write(sb_client *c, const char *key, int fd)
{
	struct sb_reply rep = {0};
	const msgpack_object *d;
	int rc;

	if ((rc = blob_call(c, key, &rep, &d)) == SB_OK)
		rc = sb_write_full(fd, d->via.bin.ptr, d->via.bin.size);
	sb_reply_free(&rep);
	return rc;
}

int cli_blob_read(sb_client *c, const char *key, char **data, size_t *len)
{
	struct sb_reply rep = {0};
	const msgpack_object *d;
	int rc;

	if ((rc = blob_call(c, key, &rep, &d)) == SB_OK) {
		if ((*data = malloc(d->via.bin.size + 1))) {
			memcpy(*data, d->via.bin.ptr, d->via.bin.size);
			(*data)[d->via.bin.size] = 0;
			*len = d->via.bin.size;
		} else {
			rc = SB_ERR_NOMEM;
		}
	}
	sb_reply_free(&rep);
	return rc;
}
