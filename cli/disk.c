/* disk.c - a run's disk read through the daemon (fs.stat, fs.list,
 * fs.read): what fs, cp and diff read, locally or with --remote alike. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/proc.h"

#define DISK_CHUNK (1u << 20) /* bytes asked for in one fs.read */

struct cli_disk {
	sb_client *c;
	char run[SB_RUN_MAX];
	char snapshot[72];     /* "" for the current disk */
	struct sb_reply last;  /* the last fs.stat's: its entry's strings */
	char *name, *target;   /* cli_disk_stat's copies */
};

int cli_disk_open(sb_client *c, const char *run, const char *snapshot, cli_disk **out)
{
	cli_disk *d = calloc(1, sizeof *d);

	if (!d)
		return SB_ERR_NOMEM;
	d->c = c;
	snprintf(d->run, sizeof d->run, "%s", run);
	snprintf(d->snapshot, sizeof d->snapshot, "%s", snapshot ? snapshot : "");
	*out = d;
	return SB_OK;
}

void cli_disk_close(cli_disk *d)
{
	if (!d)
		return;
	sb_reply_free(&d->last);
	free(d->name);
	free(d->target);
	sb_client_close(d->c);
	free(d);
}

sb_client *cli_disk_client(cli_disk *d)
{
	return d->c;
}

/* Begins request op on d's disk at path. */
static void disk_req(cli_disk *d, struct cli_req *r, const char *op, const char *path)
{
	cli_req_begin(r, op);
	sb_mapw_str(&r->m, "run", d->run);
	if (d->snapshot[0])
		sb_mapw_str(&r->m, "snapshot", d->snapshot);
	sb_mapw_str(&r->m, "path", path);
}

/* A bin or str field of map: its bytes in *p, *len (borrowed); 0 when
 * absent or of another type. */
static int field_bytes(const msgpack_object *map, const char *key, const char **p,
		       size_t *len)
{
	const msgpack_object *v = sb_map_get(map, key);

	if (v && v->type == MSGPACK_OBJECT_BIN) {
		*p = v->via.bin.ptr;
		*len = v->via.bin.size;
		return 1;
	}
	if (v && v->type == MSGPACK_OBJECT_STR) {
		*p = v->via.str.ptr;
		*len = v->via.str.size;
		return 1;
	}
	return 0;
}

/* Reads a packed entry (pack_fs_entry's) into e, its name and target
 * copied into *name and *target (NUL-terminated, the caller's; old ones
 * freed). Errors: SB_ERR_PROTO, SB_ERR_NOMEM. */
static int entry_read(const msgpack_object *o, struct sb_fs_entry *e, char **name,
		      char **target)
{
	static const char *types[] = {"unknown", "file",   "dir",  "symlink",
				      "fifo",	 "socket", "char", "block"};
	char type[16] = "";
	const char *p;
	size_t len;

	free(*name);
	free(*target);
	*name = *target = NULL;
	memset(e, 0, sizeof *e);
	if (o->type != MSGPACK_OBJECT_MAP || !field_bytes(o, "name", &p, &len))
		return sb_seterr(SB_ERR_PROTO, "fs: malformed entry");
	if (!(*name = malloc(len + 1)))
		return SB_ERR_NOMEM;
	memcpy(*name, p, len);
	(*name)[len] = 0;
	e->name = *name;
	e->name_len = len;
	sb_map_str(o, "type", type, sizeof type);
	for (size_t i = 0; i < sizeof types / sizeof *types; i++)
		if (!strcmp(type, types[i]))
			e->type = (enum sb_fs_type)i;
	e->mode = (uint32_t)sb_map_u64(o, "mode", 0) & 07777;
	e->uid = (uint32_t)sb_map_u64(o, "uid", 0);
	e->gid = (uint32_t)sb_map_u64(o, "gid", 0);
	e->size = sb_map_u64(o, "size", 0);
	e->mtime = sb_map_i64(o, "mtime", 0);
	if (e->type == SB_FS_SYMLINK && field_bytes(o, "target", &p, &len)) {
		if (!(*target = malloc(len + 1)))
			return SB_ERR_NOMEM;
		memcpy(*target, p, len);
		(*target)[len] = 0;
		e->target = *target;
		e->target_len = len;
	}
	return SB_OK;
}

int cli_disk_stat(cli_disk *d, const char *path, struct sb_fs_entry *out)
{
	struct cli_req r;
	const msgpack_object *o;
	int rc;

	sb_reply_free(&d->last);
	memset(&d->last, 0, sizeof d->last);
	disk_req(d, &r, "fs.stat", path);
	if ((rc = cli_call(d->c, &r, &d->last)))
		return rc;
	if (!(o = sb_map_get(&d->last.map, "entry")) || o->type != MSGPACK_OBJECT_MAP)
		return sb_seterr(SB_ERR_PROTO, "fs.stat: malformed reply");
	return entry_read(o, out, &d->name, &d->target);
}

/* Calls fn for each entry of one fs.list reply; *next gets where the next
 * page starts (0: none). */
static int list_page(const struct sb_reply *rep, sb_fsread_entry_fn fn, void *ctx,
		     uint64_t *next)
{
	const msgpack_object *v = sb_map_get(&rep->map, "entries");
	char *name = NULL, *target = NULL;
	struct sb_fs_entry e;
	int rc = SB_OK;

	*next = sb_map_u64(&rep->map, "next", 0);
	if (!v || v->type != MSGPACK_OBJECT_ARRAY)
		return sb_seterr(SB_ERR_PROTO, "fs.list: malformed reply");
	for (uint32_t i = 0; i < v->via.array.size && !rc; i++)
		if (!(rc = entry_read(&v->via.array.ptr[i], &e, &name, &target)))
			rc = fn(&e, ctx);
	free(name);
	free(target);
	return rc;
}

int cli_disk_list(cli_disk *d, const char *path, sb_fsread_entry_fn fn, void *ctx)
{
	uint64_t from = 0, next = 0;
	int rc;

	do {
		struct cli_req r;
		struct sb_reply rep = {0};
		const msgpack_object *dir;

		disk_req(d, &r, "fs.list", path);
		sb_mapw_u64(&r.m, "offset", from);
		if ((rc = cli_call(d->c, &r, &rep)) == SB_OK) {
			dir = sb_map_get(&rep.map, "dir");
			if (!dir || dir->type != MSGPACK_OBJECT_BOOLEAN || !dir->via.boolean)
				rc = sb_seterr(SB_ERR_INVAL, "%s: not a directory", path);
			else
				rc = list_page(&rep, fn, ctx, &next);
		}
		sb_reply_free(&rep);
		if (!rc && next <= from)
			break;
		from = next;
	} while (!rc);
	return rc;
}

int cli_disk_read(cli_disk *d, const char *path, sb_fsread_chunk_fn fn, void *ctx)
{
	uint64_t off = 0;
	int rc, eof = 0;

	while (!eof) {
		struct cli_req r;
		struct sb_reply rep = {0};
		const msgpack_object *data, *end;

		disk_req(d, &r, "fs.read", path);
		sb_mapw_u64(&r.m, "offset", off);
		sb_mapw_u64(&r.m, "length", DISK_CHUNK);
		if ((rc = cli_call(d->c, &r, &rep)) == SB_OK) {
			data = sb_map_get(&rep.map, "data");
			end = sb_map_get(&rep.map, "eof");
			if (!data || data->type != MSGPACK_OBJECT_BIN || !end ||
			    end->type != MSGPACK_OBJECT_BOOLEAN ||
			    (!end->via.boolean && !data->via.bin.size))
				rc = sb_seterr(SB_ERR_PROTO, "fs.read: malformed reply");
			else if (data->via.bin.size)
				rc = fn(data->via.bin.ptr, data->via.bin.size, ctx);
			if (!rc) {
				off += data->via.bin.size;
				eof = end->via.boolean;
			}
		}
		sb_reply_free(&rep);
		if (rc)
			return rc;
	}
	return SB_OK;
}

static int write_chunk(const void *buf, size_t len, void *ctx)
{
	return sb_write_full(*(int *)ctx, buf, len);
}

int cli_disk_read_fd(cli_disk *d, const char *path, int fd)
{
	return cli_disk_read(d, path, write_chunk, &fd);
}
