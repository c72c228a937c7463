/* tools_disk.c - the MCP tools that read what a run wrote: fs_read and
 * fs_list (its disk read through the daemon, cli/disk.c, as `sanbox fs`
 * does, --remote too; at an offset rolled forward as `fs ls --at` and
 * `fs cat --at` have it, cli/fsroll.c) and diff (its recorded file
 * changes). */
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "engine/text.h"
#include "engine/runs/roll.h"
#include "mcp/toolkit.h"
#include "mcp/tools.h"
#include "vmm/fsread.h"

#define READ_DEFAULT (64u << 10)

/* Opens the disk args names (run, snapshot or at) into *f, sel set as
 * `sanbox fs` sets it (cli_fs_pick: at before the first snapshot is the
 * run's start). A live run's guest is asked to write its files out first
 * (run.sync). */
static int disk_open(const json_t *args, struct cli_fs_at *sel, cli_disk **f)
{
	char run[SB_RUN_MAX];
	struct sb_reply rep = {0};
	struct cli_req r;
	sb_client *c = NULL;
	int rc;

	memset(sel, 0, sizeof *sel);
	sel->snapshot = mcp_arg_str(args, "snapshot");
	sel->at = mcp_arg_u64(args, "at", 0);
	if ((rc = mcp_connect(&c)) || (rc = mcp_resolve(c, "run", mcp_arg_str(args, "run"), run)))
		goto done;
	if (sel->snapshot || sel->at) {
		if ((rc = cli_fs_pick(c, run, sel)) == SB_ERR_NOTFOUND)
			rc = mcp_field_err(rc, "snapshot");
	} else {
		cli_req_begin(&r, "run.sync");
		sb_mapw_str(&r.m, "run", run);
		mcp_call(c, &r, &rep); /* not synced: its disk is read as it is */
	}
	if (rc == SB_OK &&
	    (rc = cli_disk_open(c, run, sel->snap_id[0] ? sel->snap_id : NULL, f)) == SB_OK)
		c = NULL; /* the disk's */
done:
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}

/* Where a path's error comes from: "path: ...". */
static int path_err(int rc)
{
	return rc == SB_ERR_NOTFOUND || rc == SB_ERR_INVAL ? mcp_field_err(rc, "path") : rc;
}

struct span {
	uint64_t skip, want; /* bytes still to skip, still wanted */
	char *buf;
	size_t len;
};

static int span_take(const void *p, size_t n, void *ctx)
{
	struct span *s = ctx;
	const char *b = p;

	if (s->skip >= n) {
		s->skip -= n;
		return 0;
	}
	b += s->skip;
	n -= (size_t)s->skip;
	s->skip = 0;
	n = n < s->want ? n : (size_t)s->want;
	memcpy(s->buf + s->len, b, n);
	s->len += n;
	s->want -= n;
	return s->want ? 0 : SB_ERR_FULL; /* enough: stop reading */
}

/* The bytes read as {content} when they are UTF-8, else {content_base64}. */
static void content_set(json_t *o, const char *p, size_t n)
{
	size_t cap;
	char *b64;

	if (sb_utf8_valid(p, n)) {
		json_object_set_new(o, "content", json_stringn(p, n));
		return;
	}
	cap = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
	if (!(b64 = malloc(cap)))
		return;
	sodium_bin2base64(b64, cap, (const unsigned char *)p, n, sodium_base64_VARIANT_ORIGINAL);
	json_object_set_new(o, "content_base64", json_string(b64));
	free(b64);
}

/* Reads s's span of regular file gp of f; its size into *size. */
static int read_disk(cli_disk *f, const char *gp, struct span *s, uint64_t *size)
{
	struct sb_fs_entry e;
	int rc;

	if ((rc = cli_disk_stat(f, gp, &e)))
		return rc;
	if (e.type != SB_FS_FILE)
		return sb_seterr(SB_ERR_INVAL, "%s is a %s, not a regular file", gp,
				 sb_fs_type_name(e.type));
	*size = e.size;
	if (s->skip < e.size && (rc = cli_disk_read(f, gp, span_take, s)) == SB_ERR_FULL)
		rc = SB_OK;
	return rc;
}

/* Reads s's span of blob key (a file's content in the record); its size
 * into *size. */
static int read_blob(sb_client *c, const char *key, struct span *s, uint64_t *size)
{
	char *data;
	size_t n;
	int rc;

	if ((rc = cli_blob_read(c, key, &data, &n)))
		return rc;
	*size = n;
	if (s->skip < n)
		span_take(data, n, s);
	free(data);
	return SB_OK;
}

/* Reads s's span of gp as sel has it: past the snapshot's offset, as the
 * record has it then (cli_fs_at_file, as `fs cat --at`); note gets what
 * the record lacks. */
static int read_at(cli_disk *f, const struct cli_fs_at *sel, const char *gp, struct span *s,
		   uint64_t *size, char *note, size_t cap)
{
	sb_client *c = cli_disk_client(f);
	struct cli_at_file a;
	int rc;

	if ((rc = cli_fs_at_file(c, sel, gp, &a)))
		return rc;
	switch (a.kind) {
	case CLI_AT_DELETED:
		return sb_seterr(SB_ERR_NOTFOUND, "%s was deleted at offset %llu", gp,
				 (unsigned long long)a.offset);
	case CLI_AT_LINK:
		return sb_seterr(SB_ERR_INVAL, "%s is a symlink at offset %llu", gp,
				 (unsigned long long)a.offset);
	case CLI_AT_OMITTED:
		snprintf(note, cap,
			 "changed at offset %llu, its content is not in the record (%s): this "
			 "is %s",
			 (unsigned long long)a.offset, a.why,
			 a.key[0] ? "the run's input" : "its content at the snapshot");
		break;
	default:
		break;
	}
	return a.key[0] ? read_blob(c, a.key, s, size) : read_disk(f, gp, s, size);
}

int mcp_tool_fs_read(struct sb_mcp_call *call, const json_t *args, json_t **out)
{
	uint64_t off = mcp_arg_u64(args, "offset", 0), len = mcp_arg_u64(args, "length", READ_DEFAULT);
	uint64_t size = 0, next;
	char gp[SB_FS_PATH_MAX + 16], note[256] = "";
	struct span s = {off, len, NULL, 0};
	struct cli_fs_at sel;
	cli_disk *f = NULL;
	int rc;

	cli_guest_path(mcp_arg_str(args, "path"), gp, sizeof gp);
	if ((rc = disk_open(args, &sel, &f)))
		return rc;
	if (!(s.buf = malloc(len)))
		rc = SB_ERR_NOMEM;
	else
		rc = read_at(f, &sel, gp, &s, &size, note, sizeof note);
	if (rc == SB_OK) {
		next = off + s.len;
		*out = json_pack("{s:s, s:I, s:I, s:I, s:b}", "path", gp, "size", (json_int_t)size,
				 "offset", (json_int_t)off, "length", (json_int_t)s.len, "eof",
				 next >= size);
		if (*out && next < size)
			json_object_set_new(*out, "next_offset", json_integer((json_int_t)next));
		if (*out && note[0])
			json_object_set_new(*out, "note", json_string(note));
		if (*out)
			content_set(*out, s.buf, s.len);
	}
	free(s.buf);
	cli_disk_close(f);
	return rc ? path_err(rc) : SB_OK;
}

/* The entries of gp as sel chooses, from f, into l: at an offset past
 * sel's snapshot and under /workspace, rolled forward from the record as
 * `sanbox fs ls --at` has them (cli_fs_list_at), else as on the disk. */
static int list_read(cli_disk *f, const struct cli_fs_at *sel, const char *gp,
		     struct cli_fs_list *l)
{
	struct sb_fs_entry e;
	struct sb_roll roll;
	int rc;

	if (sel->at && sel->at > sel->snap_offset && !strncmp(gp, "/workspace", 10) &&
	    (!gp[10] || gp[10] == '/'))
		return cli_fs_list_at(f, sel, gp, l, &roll);
	if ((rc = cli_disk_stat(f, gp, &e)))
		return rc;
	return e.type == SB_FS_DIR ? cli_disk_list(f, gp, cli_fs_list_add, l)
				   : cli_fs_list_put(l, &e);
}

int mcp_tool_fs_list(struct sb_mcp_call *call, const json_t *args, json_t **out)
{
	const char *path = mcp_arg_str(args, "path");
	uint64_t skip = mcp_arg_u64(args, "offset", 0), limit = mcp_arg_u64(args, "limit", 1000);
	char gp[SB_FS_PATH_MAX + 16];
	struct cli_fs_list l = {0};
	struct cli_fs_at sel;
	cli_disk *f = NULL;
	json_t *list, *o;
	int rc;

	cli_guest_path(path ? path : "/workspace", gp, sizeof gp);
	if ((rc = disk_open(args, &sel, &f)))
		return rc;
	rc = list_read(f, &sel, gp, &l);
	cli_disk_close(f);
	if (rc == SB_OK) {
		cli_fs_list_sort(&l);
		list = json_array();
		for (size_t i = skip; i < l.n && i - skip < limit; i++) {
			if ((o = cli_fs_json(&l.v[i].e)) && l.v[i].missing) /* as fs ls --json */
				json_object_set_new(o, "content", json_string("missing"));
			json_array_append_new(list, o);
		}
		*out = json_pack("{s:s, s:o, s:I}", "path", gp, "entries", list, "total",
				 (json_int_t)l.n);
		if (*out && skip + limit < l.n)
			json_object_set_new(*out, "next_offset", json_integer((json_int_t)(skip + limit)));
	}
	cli_fs_list_free(&l);
	return rc ? path_err(rc) : SB_OK;
}

int mcp_tool_diff(struct sb_mcp_call *call, const json_t *args, json_t **out)
{
	uint64_t from = mcp_arg_u64(args, "from", 0), to = mcp_arg_u64(args, "to", UINT64_MAX - 1);
	char run[SB_RUN_MAX];
	sb_client *c = NULL;
	json_t *changes = NULL;
	int rc;

	if (from > to)
		return sb_seterr(SB_ERR_INVAL, "from: %llu is after to, %llu",
				 (unsigned long long)from, (unsigned long long)to);
	if ((rc = mcp_connect(&c)) == SB_OK &&
	    (rc = mcp_resolve(c, "run", mcp_arg_str(args, "run"), run)) == SB_OK &&
	    (rc = cli_diff_json(c, run, from, to, &changes)) == SB_OK)
		*out = json_pack("{s:s, s:o}", "run", run, "changes", changes);
	sb_client_close(c);
	return rc;
}
