/* cmd_fs.c - sanbox fs ls|cat: read a run's disk offline; and what
 * sanbox cp shares with it (opening a run's disk, guest paths, errors). */
#include <jansson.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/log/blob.h"
#include "engine/payload.h"
#include "engine/proc.h"
#include "engine/runs/roll.h"
#include "engine/text.h"
#include "vmm/fsread.h"

void cli_guest_path(const char *p, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s%s",
		 p[0] == '/' ? ""
		 : p[0]	     ? "/workspace/"
			     : "/workspace",
		 p);
}

int cli_fs_fail(int rc)
{
	/* a missing qemu-nbd is not an unavailable daemon (exit 4); the
	 * line is escaped by cli_fail */
	return cli_fail(rc == SB_ERR_UNAVAIL ? SB_ERR_IO : rc, "%s", sb_errmsg(rc));
}

int cli_fs_pick(sb_client *c, const char *run, struct cli_fs_at *sel)
{
	struct cli_req r;
	struct sb_reply rep = {0};
	const msgpack_object *list, *best = NULL;
	char id[72];
	uint64_t off = 0;
	int rc;

	cli_req_begin(&r, "snapshots.list");
	sb_mapw_str(&r.m, "run", run);
	if ((rc = cli_call(c, &r, &rep)))
		return rc;
	list = sb_map_get(&rep.map, "snapshots");
	for (uint32_t i = 0;
	     list && list->type == MSGPACK_OBJECT_ARRAY && i < list->via.array.size;
	     i++) {
		const msgpack_object *s = &list->via.array.ptr[i];
		uint64_t o = sb_map_u64(s, "offset", 0);
		if (sel->snapshot ? sb_map_str(s, "snapshot", id, sizeof id) > 0 &&
					!strcmp(id, sel->snapshot)
				  : o <= sel->at && (!best || o >= off)) {
			best = s;
			off = o;
		}
	}
	if (!best && !sel->snapshot) { /* the run's start, as a fork --at has it */
		snprintf(sel->snap_id, sizeof sel->snap_id, "start");
		sel->start = 1;
		off = 0;
	} else if (!best ||
		   sb_map_str(best, "snapshot", sel->snap_id, sizeof sel->snap_id) <= 0) {
		sb_reply_free(&rep);
		return sb_seterr(SB_ERR_NOTFOUND, "run %s has no snapshot %s", run,
				 sel->snapshot);
	}
	sb_reply_free(&rep);
	sel->snap_offset = off;
	snprintf(sel->run, sizeof sel->run, "%s", run);
	return SB_OK;
}

/* Has a running run's guest write its files out first (run.sync), so
 * that its disk shows what the guest sees; says so when it could not. */
static void live_sync(sb_client *c, const char *run)
{
	struct cli_req r;
	struct sb_reply rep;
	int rc;

	cli_req_begin(&r, "run.sync");
	sb_mapw_str(&r.m, "run", run);
	if ((rc = cli_call(c, &r, &rep)))
		cli_note("run %s: %s; its disk is read as it is", run, sb_errmsg(rc));
	sb_reply_free(&rep);
}

/* SB_ERR_STATE when run was removed (its disk is gone), else SB_OK. */
static int refuse_removed(sb_client *c, const char *run)
{
	struct sb_reply rep;
	int live, rc = cli_run_get(c, run, &rep, &live);

	if (rc == SB_OK && sb_map_u64(sb_map_get(&rep.map, "run"), "removed", 0))
		rc = sb_seterr(SB_ERR_STATE, "run %s was removed: its disk and snapshots are "
					     "gone (its record stays: sanbox events, diff)",
			       run);
	sb_reply_free(&rep);
	return rc;
}

int cli_fs_open(const char *want, struct cli_fs_at *sel, cli_disk **out)
{
	char run[SB_RUN_MAX];
	sb_client *c;
	int rc;

	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if ((rc = cli_resolve(c, want, run)) || (rc = refuse_removed(c, run))) {
		sb_client_close(c);
		return cli_fail(rc, "%s", sb_errmsg(rc));
	}
	if (sel && (sel->snapshot || sel->at)) {
		if ((rc = cli_fs_pick(c, run, sel)))
			rc = cli_fail(rc, "%s", sb_errmsg(rc));
	} else
		live_sync(c, run);
	if (!rc && (rc = cli_disk_open(c, run, sel && sel->snap_id[0] ? sel->snap_id : NULL,
				       out)))
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
	if (rc)
		sb_client_close(c);
	return rc;
}

int cli_fs_refuse(const char *path, const struct sb_fs_entry *e, const char *why)
{
	static const char *what[] = {
	    [SB_FS_UNKNOWN] = "of no known type",
	    [SB_FS_FILE] = "a regular file",
	    [SB_FS_DIR] = "a directory",
	    [SB_FS_SYMLINK] = "a symlink",
	    [SB_FS_FIFO] = "a FIFO",
	    [SB_FS_SOCKET] = "a socket",
	    [SB_FS_CHAR] = "a character device",
	    [SB_FS_BLOCK] = "a block device",
	};
	/* cli_fail escapes the line; a target is cut at a NUL byte */
	if (e->type == SB_FS_SYMLINK)
		return cli_fail(SB_ERR_INVAL, "%s is a symlink to %.*s%s", path,
				e->target ? (int)e->target_len : 1,
				e->target ? e->target : "?", why ? why : "");
	return cli_fail(SB_ERR_INVAL, "%s is %s%s", path, what[e->type], why ? why : "");
}

/* Fails as fs cat does for a symbolic link, its target read from the
 * blob key (the record's content of a link). */
static int cat_link(sb_client *c, const char *gp, const char *key, uint64_t offset)
{
	char target[SB_FS_PATH_MAX + 1];
	int fd = memfd_create("sanbox-link", MFD_CLOEXEC), rc;
	ssize_t n = -1;

	if (fd >= 0 && (rc = cli_blob_write(c, key, fd)) == SB_OK)
		n = pread(fd, target, sizeof target - 1, 0);
	if (fd >= 0)
		close(fd);
	if (n < 0)
		return cli_fail(SB_ERR_INVAL, "%s is a symlink at offset %llu (its target "
					      "cannot be read)",
				gp, (unsigned long long)offset);
	return cli_fail(SB_ERR_INVAL, "%s is a symlink to %.*s (at offset %llu)", gp, (int)n,
			target, (unsigned long long)offset);
}

/* fs cat --at OFFSET past its snapshot: the file as the record has it at
 * OFFSET (cli_fs_at_file). Returns CAT_SNAPSHOT when the snapshot's file
 * is the answer, else the exit code (an error's exit code 1 must not read
 * as that). */
#define CAT_SNAPSHOT (-1)
static int cat_recorded(const struct cli_fs_at *sel, const char *gp, int fd)
{
	struct cli_at_file a;
	sb_client *c;
	int rc;

	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if ((rc = cli_fs_at_file(c, sel, gp, &a))) {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
	} else if (a.kind == CLI_AT_DELETED) {
		rc = cli_fail(SB_ERR_NOTFOUND, "%s: deleted at offset %llu", gp,
			      (unsigned long long)a.offset);
	} else if (a.kind == CLI_AT_LINK) {
		rc = cat_link(c, gp, a.key, a.offset);
	} else if (a.kind == CLI_AT_DISK || (a.kind == CLI_AT_OMITTED && !a.key[0])) {
		if (a.kind == CLI_AT_OMITTED)
			cli_note("%s changed at offset %llu, its content is not in the record "
				 "(%s): this is its content at offset %llu",
				 gp, (unsigned long long)a.offset, a.why,
				 (unsigned long long)sel->snap_offset);
		rc = CAT_SNAPSHOT;
	} else {
		if (a.kind == CLI_AT_OMITTED)
			cli_note("%s changed at offset %llu, its content is not in the record "
				 "(%s): this is the run's input",
				 gp, (unsigned long long)a.offset, a.why);
		fflush(stdout);
		if ((rc = cli_blob_write(c, a.key, fd)))
			rc = cli_fail(rc, "%s", sb_errmsg(rc));
	}
	sb_client_close(c);
	return rc;
}

int cli_fs_cat(const char *want, struct cli_fs_at *sel, const char *path, int fd)
{
	char gp[SB_FS_PATH_MAX + 16];
	struct sb_fs_entry e;
	cli_disk *f;
	int rc;

	cli_guest_path(path, gp, sizeof gp);
	if ((rc = cli_fs_open(want, sel, &f)))
		return rc;
	if (sel && sel->at && sel->run[0] && sel->at > sel->snap_offset &&
	    (rc = cat_recorded(sel, gp, fd)) != CAT_SNAPSHOT) {
		cli_disk_close(f);
		return rc;
	}
	if ((rc = cli_disk_stat(f, gp, &e))) {
		rc = cli_fs_fail(rc);
	} else if (e.type != SB_FS_FILE) {
		rc = cli_fs_refuse(gp, &e, NULL);
	} else {
		fflush(stdout);
		if ((rc = cli_disk_read_fd(f, gp, fd)))
			rc = cli_fs_fail(rc);
	}
	cli_disk_close(f);
	return rc;
}

/* -- fs ls */

/* "drwxr-xr-x", as ls -l writes it. */
static void fs_mode(const struct sb_fs_entry *e, char out[11])
{
	static const char types[] = {
	    [SB_FS_UNKNOWN] = '?', [SB_FS_FILE] = '-',	[SB_FS_DIR] = 'd',
	    [SB_FS_SYMLINK] = 'l', [SB_FS_FIFO] = 'p',	[SB_FS_SOCKET] = 's',
	    [SB_FS_CHAR] = 'c',	   [SB_FS_BLOCK] = 'b',
	};
	uint32_t m = e->mode;

	out[0] = types[e->type];
	for (int i = 0; i < 3; i++) {
		uint32_t bits = m >> (6 - 3 * i);
		out[1 + 3 * i] = bits & 4 ? 'r' : '-';
		out[2 + 3 * i] = bits & 2 ? 'w' : '-';
		out[3 + 3 * i] = bits & 1 ? 'x' : '-';
	}
	if (m & 04000)
		out[3] = m & 0100 ? 's' : 'S';
	if (m & 02000)
		out[6] = m & 0010 ? 's' : 'S';
	if (m & 01000)
		out[9] = m & 0001 ? 't' : 'T';
	out[10] = 0;
}

static void fs_print_text(const struct sb_fs_entry *e, int missing)
{
	char mode[11], when[32] = "?";
	char *name = sb_text_escape_dup(e->name, e->name_len);
	time_t t = (time_t)e->mtime;
	struct tm tm;

	fs_mode(e, mode);
	if (gmtime_r(&t, &tm))
		strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm);
	printf("%s %5u %5u %12llu %s %s", mode, e->uid, e->gid,
	       (unsigned long long)e->size, when, name ? name : "?");
	if (e->type == SB_FS_SYMLINK) {
		char *to =
		    e->target ? sb_text_escape_dup(e->target, e->target_len) : NULL;
		printf(" -> %s", to ? to : "(unreadable)");
		free(to);
	}
	puts(missing ? " (content not in the record)" : "");
	free(name);
}

/* Sets key to the bytes s as a JSON string; bytes that are not valid
 * UTF-8 also get key_base64, and key holds them with U+FFFD for each bad
 * byte. */
static int fs_json_bytes(json_t *o, const char *key, const char *s, size_t len)
{
	char k64[32], *lossy, *b64;
	size_t n, cap;

	if (sb_utf8_valid(s, len))
		return json_object_set_new(o, key, json_stringn(s, len));
	if (!(lossy = sb_utf8_lossy(s, len, &n)))
		return -1;
	json_object_set_new(o, key, json_stringn(lossy, n));
	free(lossy);
	cap = sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL);
	if (!(b64 = malloc(cap)))
		return -1;
	sodium_bin2base64(b64, cap, (const unsigned char *)s, len,
			  sodium_base64_VARIANT_ORIGINAL);
	snprintf(k64, sizeof k64, "%s_base64", key);
	json_object_set_new(o, k64, json_string(b64));
	free(b64);
	return 0;
}

json_t *cli_fs_json(const struct sb_fs_entry *e)
{
	json_t *o = json_pack("{s:s,s:i,s:I,s:I,s:I,s:I}", "type",
			      sb_fs_type_name(e->type), "mode", (int)e->mode, "uid",
			      (json_int_t)e->uid, "gid", (json_int_t)e->gid, "size",
			      (json_int_t)e->size, "mtime", (json_int_t)e->mtime);

	if (!o)
		return NULL;
	fs_json_bytes(o, "name", e->name, e->name_len);
	if (e->type == SB_FS_SYMLINK && e->target)
		fs_json_bytes(o, "target", e->target, e->target_len);
	else if (e->type == SB_FS_SYMLINK)
		json_object_set_new(o, "target", json_null());
	return o;
}

/* The entries of gp as sel chooses into l; prints the error. */
static int fs_ls_read(const char *want, struct cli_fs_at *sel, const char *gp,
		      struct cli_fs_list *l)
{
	struct sb_fs_entry e;
	struct sb_roll roll;
	cli_disk *f;
	int rc, rolled;

	if ((rc = cli_fs_open(want, sel, &f)))
		return rc;
	rolled = sel->at && sel->run[0] && sel->at > sel->snap_offset &&
		 !strncmp(gp, "/workspace", 10) && (!gp[10] || gp[10] == '/');
	if (rolled) {
		rc = cli_fs_list_at(f, sel, gp, l, &roll);
	} else if ((rc = cli_disk_stat(f, gp, &e)) == SB_OK) {
		rc = e.type == SB_FS_DIR ? cli_disk_list(f, gp, cli_fs_list_add, l)
					 : cli_fs_list_put(l, &e);
	}
	cli_disk_close(f);
	if (rc)
		return cli_fs_fail(rc);
	if (rolled && roll.omitted)
		cli_note("%zu file change%s recorded up to offset %llu cannot be rolled "
			 "forward (%s%s): %s as of offset %llu",
			 roll.omitted, roll.omitted == 1 ? "" : "s",
			 (unsigned long long)sel->at, roll.named[0],
			 roll.omitted > 1 ? ", ..." : "",
			 roll.omitted == 1 ? "it is listed" : "they are listed",
			 (unsigned long long)sel->snap_offset);
	return SB_OK;
}

static int fs_ls(const char *want, struct cli_fs_at *sel, const char *path, int json)
{
	char gp[SB_FS_PATH_MAX + 16];
	struct cli_fs_list l = {0};
	int rc;

	cli_guest_path(path, gp, sizeof gp);
	if ((rc = fs_ls_read(want, sel, gp, &l)))
		goto done;
	cli_fs_list_sort(&l);
	if (json) {
		json_t *arr = json_array();
		for (size_t i = 0; i < l.n; i++) {
			json_t *o = cli_fs_json(&l.v[i].e);
			if (o && l.v[i].missing)
				json_object_set_new(o, "content", json_string("missing"));
			json_array_append_new(arr, o);
		}
		cli_print_json(arr);
	} else {
		for (size_t i = 0; i < l.n; i++)
			fs_print_text(&l.v[i].e, l.v[i].missing);
	}
done:
	cli_fs_list_free(&l);
	return rc;
}

int cmd_fs(int argc, char **argv)
{
	static const struct option opts[] = {
	    CLI_OPT_HELP,
	    {"json", no_argument, NULL, 'j'},
	    {"at", required_argument, NULL, 'a'},
	    {"snapshot", required_argument, NULL, 's'},
	    {NULL, 0, NULL, 0},
	};
	struct cli_fs_at sel = {0};
	int json = 0, ch, rc, n;

	while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("fs");
		case 'j': json = 1; break;
		case 'a':
			if ((rc = cli_parse_u64("--at", optarg, 1, UINT64_MAX - 1,
						&sel.at)))
				return rc;
			break;
		case 's': sel.snapshot = optarg; break;
		default: return cli_badopt("fs", argv, ch);
		}
	}
	if (sel.at && sel.snapshot)
		return cli_fail_code(CLI_EXIT_USAGE, "give --at or --snapshot, not both");
	n = argc - optind;
	if (n >= 2 && n <= 3 && !strcmp(argv[optind], "ls"))
		return fs_ls(argv[optind + 1], &sel, n == 3 ? argv[optind + 2] : "",
			     json);
	if (n == 3 && !strcmp(argv[optind], "cat") && !json)
		return cli_fs_cat(argv[optind + 1], &sel, argv[optind + 2], STDOUT_FILENO);
	return cli_usage("fs");
}
