/* fsroll.c - a directory of a run's disk as it was at an offset: the
 * entries of its newest snapshot at or before it, with the file changes
 * recorded after the snapshot rolled forward as a fork --at that offset
 * would have them (engine/runs/roll.c); and the listing fs ls keeps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/log/blob.h"
#include "engine/runs/plan.h"
#include "engine/runs/roll.h"
#include "vmm/fsread.h"

/* -- the listing */

static char *ent_dup(const char *s, size_t len)
{
	char *d = malloc(len + 1);

	if (d) {
		memcpy(d, s, len);
		d[len] = 0;
	}
	return d;
}

/* The entry of l named name, or NULL. */
static struct cli_fs_ent *ent_find(struct cli_fs_list *l, const char *name, size_t len)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].e.name_len == len && !memcmp(l->v[i].e.name, name, len))
			return &l->v[i];
	return NULL;
}

static void ent_clear(struct cli_fs_ent *x)
{
	free(x->name);
	free(x->target);
	memset(x, 0, sizeof *x);
}

/* Sets x to a copy of e; x's old strings freed. */
static int ent_set(struct cli_fs_ent *x, const struct sb_fs_entry *e)
{
	char *name = ent_dup(e->name, e->name_len);
	char *target = e->target ? ent_dup(e->target, e->target_len) : NULL;

	if (!name || (e->target && !target)) {
		free(name);
		free(target);
		return SB_ERR_NOMEM;
	}
	ent_clear(x);
	x->e = *e;
	x->e.name = x->name = name;
	x->e.target = x->target = target;
	return SB_OK;
}

int cli_fs_list_put(struct cli_fs_list *l, const struct sb_fs_entry *e)
{
	struct cli_fs_ent *x = ent_find(l, e->name, e->name_len);

	if (!x && l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		struct cli_fs_ent *v = realloc(l->v, cap * sizeof *v);
		if (!v)
			return SB_ERR_NOMEM;
		l->v = v;
		l->cap = cap;
	}
	if (!x) {
		x = &l->v[l->n];
		memset(x, 0, sizeof *x);
		if (ent_set(x, e))
			return SB_ERR_NOMEM;
		l->n++;
		return SB_OK;
	}
	return ent_set(x, e);
}

int cli_fs_list_add(const struct sb_fs_entry *e, void *ctx)
{
	return cli_fs_list_put(ctx, e);
}

/* Removes the entry named name from l, if there is one. */
static void list_drop(struct cli_fs_list *l, const char *name)
{
	struct cli_fs_ent *x = ent_find(l, name, strlen(name));

	if (x) {
		ent_clear(x);
		*x = l->v[--l->n];
	}
}

/* By the names' raw bytes. */
static int ent_cmp(const void *a, const void *b)
{
	const struct sb_fs_entry *x = &((const struct cli_fs_ent *)a)->e,
				 *y = &((const struct cli_fs_ent *)b)->e;
	int c = memcmp(x->name, y->name,
		       x->name_len < y->name_len ? x->name_len : y->name_len);

	return c ? c : (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

void cli_fs_list_sort(struct cli_fs_list *l)
{
	if (l->n)
		qsort(l->v, l->n, sizeof *l->v, ent_cmp);
}

void cli_fs_list_free(struct cli_fs_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		ent_clear(&l->v[i]);
	free(l->v);
	memset(l, 0, sizeof *l);
}

/* -- the record's changes */

/* Each path's last change in the range, and when it was made. */
struct changes {
	struct sb_roll_file *v;
	int64_t *ts; /* seconds since the epoch, per file */
	size_t n, cap;
	int rc;
};

static int change_note(void *ctx, const struct cli_file_change *ch)
{
	struct changes *cs = ctx;
	const char *rel = ch->path + 11;
	struct sb_roll_file *f = NULL;

	if (strncmp(ch->path, "/workspace/", 11) || !rel[0])
		return 0; /* the agent watches /workspace only */
	for (size_t i = 0; i < cs->n && !f; i++)
		if (!strncmp(cs->v[i].path, rel, sizeof f->path - 1) &&
		    cs->v[i].toolong == (strlen(rel) >= sizeof f->path))
			f = &cs->v[i];
	if (!f && cs->n == cs->cap) {
		size_t cap = cs->cap ? 2 * cs->cap : 64;
		struct sb_roll_file *v = realloc(cs->v, cap * sizeof *v);
		int64_t *ts = v ? realloc(cs->ts, cap * sizeof *ts) : NULL;
		if (v)
			cs->v = v;
		if (!ts)
			return (cs->rc = SB_ERR_NOMEM);
		cs->ts = ts;
		cs->cap = cap;
	}
	if (!f) {
		f = &cs->v[cs->n++];
		memset(f, 0, sizeof *f);
		snprintf(f->path, sizeof f->path, "%.*s", (int)sizeof f->path - 1, rel);
	}
	f->toolong = strlen(rel) >= sizeof f->path;
	f->deleted = !strcmp(ch->kind, "deleted");
	f->link = !f->deleted && ch->link;
	f->offset = ch->offset;
	f->size = ch->size;
	f->content = !f->deleted && ch->content && strlen(ch->content) == 2 * SB_HASH_LEN &&
		     sb_hash_parse(ch->content, f->blob) == SB_OK;
	cs->ts[f - cs->v] = (int64_t)(ch->ts_ns / 1000000000u);
	return 0;
}

/* sb_roll_probe_fn on the snapshot's disk (ctx: its cli_disk), as the
 * roll-forward of a fork reads it. */
static int roll_probe(void *ctx, const char *prefix)
{
	char path[SB_FS_PATH_MAX];
	struct sb_fs_entry e;

	snprintf(path, sizeof path, "/workspace%s%s", prefix[0] ? "/" : "", prefix);
	return cli_disk_stat(ctx, path, &e) || e.type == SB_FS_DIR;
}

/* -- the run's own inputs, for its start */

/* One input {path, size, mode, blob} of the record into in. */
static int input_parse(const msgpack_object *o, struct sb_plan_input *in)
{
	char key[SB_HASH_HEX];

	memset(in, 0, sizeof *in);
	if (sb_map_str(o, "path", in->path, sizeof in->path) <= 0 ||
	    sb_map_str(o, "blob", key, sizeof key) != 2 * SB_HASH_LEN ||
	    sb_hash_parse(key, in->blob))
		return sb_seterr(SB_ERR_CORRUPT, "a recorded input is malformed");
	in->size = sb_map_u64(o, "size", 0);
	in->mode = (uint32_t)sb_map_u64(o, "mode", 0644);
	return SB_OK;
}

int cli_run_inputs(sb_client *c, const char *run, struct sb_plan *p, int64_t *ts)
{
	struct sb_reply rep = {0};
	const msgpack_object *ev, *ins = NULL;
	int rc;

	if ((rc = cli_first_event(c, run, "run.policy.resolved", &rep, &ev))) {
		sb_reply_free(&rep);
		return rc;
	}
	if (ev) {
		ins = sb_map_get(sb_map_get(ev, "payload"), "inputs");
		*ts = (int64_t)(sb_map_u64(ev, "ts", 0) / 1000000000u);
	}
	if (!ins || ins->type != MSGPACK_OBJECT_ARRAY)
		rc = sb_seterr(SB_ERR_CORRUPT, "run %s: its inputs are not in its record", run);
	else if (ins->via.array.size &&
		 !(p->inputs = calloc(ins->via.array.size, sizeof *p->inputs)))
		rc = SB_ERR_NOMEM;
	for (uint32_t i = 0; rc == SB_OK && i < ins->via.array.size; i++)
		if ((rc = input_parse(&ins->via.array.ptr[i], &p->inputs[p->ninputs])) == SB_OK)
			p->ninputs++;
	sb_reply_free(&rep);
	return rc;
}

/* -- the directory rolled forward */

/* Whether directory dir ("" for /workspace) holds path p, somewhere below. */
static int dir_holds(const char *dir, const char *p)
{
	size_t n = strlen(dir);

	return !n ? p[0] != 0 : !strncmp(dir, p, n) && p[n] == '/';
}

/* p's part below dir (which holds it). */
static const char *below(const char *dir, const char *p)
{
	return p + strlen(dir) + (dir[0] != 0);
}

/* The roll-forward's view of one directory. */
struct view {
	sb_client *c;
	const char *dir; /* relative to /workspace, "" for it */
	struct cli_fs_list *l;
	int64_t now;   /* a made entry's mtime */
	int64_t start; /* a kept input's mtime: when the run started */
};

/* Puts entry name (its first len bytes) as a directory the agent makes,
 * unless one is there. */
static int view_dir(struct view *v, const char *name, size_t len)
{
	struct cli_fs_ent *x = ent_find(v->l, name, len);
	struct sb_fs_entry e = {.name = name, .name_len = len, .type = SB_FS_DIR,
				.mode = 0755, .mtime = v->now};

	return x && x->e.type == SB_FS_DIR ? SB_OK : cli_fs_list_put(v->l, &e);
}

/* Puts the plan's input in as the agent writes it. */
static int view_input(struct view *v, const struct sb_plan_input *in, int64_t ts)
{
	const char *rest = below(v->dir, in->path), *slash = strchr(rest, '/');
	struct sb_fs_entry e = {.name = rest, .name_len = strlen(rest), .type = SB_FS_FILE,
				.mode = in->mode & 07777, .size = in->size, .mtime = ts};
	char key[SB_HASH_HEX], *target = NULL;
	size_t len = 0;
	int rc;

	if (slash)
		return view_dir(v, rest, (size_t)(slash - rest));
	if ((in->mode & SB_PLAN_LINK) == SB_PLAN_LINK) {
		sb_hash_hex(in->blob, key);
		e.type = SB_FS_SYMLINK;
		if (cli_blob_read(v->c, key, &target, &len) == SB_OK) {
			e.target = target;
			e.target_len = len;
		}
		sb_clearerr();
	}
	rc = cli_fs_list_put(v->l, &e);
	free(target);
	return rc;
}

/* Whether a change in cs after f's replaced a directory above f. */
static int replaced(const struct changes *cs, const struct sb_roll_file *f)
{
	for (size_t i = 0; i < cs->n; i++)
		if (cs->v[i].offset > f->offset && dir_holds(cs->v[i].path, f->path))
			return 1;
	return 0;
}

/* Marks (or puts) the files whose last change's content the record lacks:
 * a fork keeps the snapshot's content of these, or lacks them. */
static int view_missing(struct view *v, const struct changes *cs)
{
	for (size_t i = 0; i < cs->n; i++) {
		const struct sb_roll_file *f = &cs->v[i];
		const char *rest = below(v->dir, f->path), *slash;
		struct cli_fs_ent *x;
		struct sb_fs_entry e = {.type = SB_FS_FILE, .mode = 0644,
					.size = f->size, .mtime = cs->ts[i]};
		int rc;

		if (f->deleted || f->content || f->toolong || !dir_holds(v->dir, f->path) ||
		    replaced(cs, f))
			continue;
		if ((slash = strchr(rest, '/'))) {
			if ((rc = view_dir(v, rest, (size_t)(slash - rest))))
				return rc;
			continue;
		}
		if (!(x = ent_find(v->l, rest, strlen(rest)))) {
			e.name = rest;
			e.name_len = strlen(rest);
			if ((rc = cli_fs_list_put(v->l, &e)))
				return rc;
			x = ent_find(v->l, rest, strlen(rest));
		}
		x->e.size = f->size;
		x->missing = 1;
	}
	return SB_OK;
}

/* The change time of input path in cs (dflt: none). */
static int64_t change_ts(const struct changes *cs, const char *path, int64_t dflt)
{
	for (size_t i = 0; i < cs->n; i++)
		if (!strcmp(cs->v[i].path, path))
			return cs->ts[i];
	return dflt;
}

/* Applies plan p's removes and inputs, and the files the record lacks, to
 * v's listing. */
static int view_apply(struct view *v, const struct sb_plan *p, const struct changes *cs)
{
	int rc;

	for (size_t i = 0; i < p->nremoves; i++)
		if (dir_holds(v->dir, p->removes[i]) &&
		    !strchr(below(v->dir, p->removes[i]), '/'))
			list_drop(v->l, below(v->dir, p->removes[i]));
	for (size_t i = 0; i < p->ninputs; i++)
		if (dir_holds(v->dir, p->inputs[i].path) &&
		    (rc = view_input(v, &p->inputs[i], change_ts(cs, p->inputs[i].path, v->start))))
			return rc;
	return view_missing(v, cs);
}

/* Whether the plan removes dir or a directory above it, and whether it
 * (or the record's files it lacks) puts anything below dir. */
static void view_fate(const struct view *v, const struct sb_plan *p,
		      const struct changes *cs, int *gone, int *filled)
{
	*gone = *filled = 0;
	for (size_t i = 0; i < p->nremoves; i++)
		if (!strcmp(p->removes[i], v->dir) || dir_holds(p->removes[i], v->dir))
			*gone = 1;
	for (size_t i = 0; i < p->ninputs; i++)
		if (dir_holds(v->dir, p->inputs[i].path))
			*filled = 1;
	for (size_t i = 0; i < cs->n; i++)
		if (!cs->v[i].deleted && !cs->v[i].content && !cs->v[i].toolong &&
		    dir_holds(v->dir, cs->v[i].path) && !replaced(cs, &cs->v[i]))
			*filled = 1;
}

/* Lists v's directory (gp on the disk) rolled forward by p and cs into
 * v's listing; *isdir 0 (nothing listed) when it is not a directory then.
 * Errors: those of the snapshot's reads, SB_ERR_NOMEM. */
static int view_dir_list(struct view *v, cli_disk *f, const char *gp,
			 const struct sb_plan *p, const struct changes *cs, int *isdir)
{
	struct sb_fs_entry e;
	int gone, filled, rc;

	view_fate(v, p, cs, &gone, &filled);
	*isdir = !v->dir[0] || filled;
	for (size_t i = 0; !*isdir && !gone && i < p->ninputs; i++)
		if (!strcmp(p->inputs[i].path, v->dir))
			gone = 1; /* a file or a link where it was */
	if (!*isdir && !gone)
		*isdir = cli_disk_stat(f, gp, &e) == SB_OK && e.type == SB_FS_DIR;
	sb_clearerr();
	if (!*isdir)
		return SB_OK;
	if (!gone && (rc = cli_disk_stat(f, gp, &e)) == SB_OK && e.type == SB_FS_DIR &&
	    (rc = cli_disk_list(f, gp, cli_fs_list_add, v->l)))
		return rc;
	sb_clearerr();
	return view_apply(v, p, cs);
}

/* Lists gp (relative: rel) rolled forward into v's listing: a directory's
 * entries, or the entry itself, found in its directory's. Errors:
 * SB_ERR_NOTFOUND, those of view_dir_list. */
static int view_path(struct view *v, cli_disk *f, char *gp, char *rel,
		     const struct sb_plan *p, const struct changes *cs)
{
	struct cli_fs_list up = {0};
	struct view pv = *v;
	char *gslash = strrchr(gp, '/'), *rslash = strrchr(rel, '/'), *name;
	struct cli_fs_ent *x = NULL;
	int isdir, rc;

	if ((rc = view_dir_list(v, f, gp, p, cs, &isdir)) || isdir)
		return rc;
	*gslash = 0; /* gp is under /workspace: its parent is too */
	name = rslash ? rslash + 1 : rel;
	if (rslash)
		*rslash = 0;
	pv.dir = rslash ? rel : "";
	pv.l = &up;
	if (!(rc = view_dir_list(&pv, f, gp, p, cs, &isdir)))
		rc = isdir && (x = ent_find(&up, name, strlen(name)))
			 ? cli_fs_list_put(v->l, &x->e)
			 : sb_seterr(SB_ERR_NOTFOUND, "%s/%s: no such file or directory",
				     gp, name);
	if (!rc && x && x->missing)
		v->l->v[v->l->n - 1].missing = 1;
	cli_fs_list_free(&up);
	return rc;
}

/* The path rel (under /workspace, gp on the disk) with cs rolled forward
 * into l. Errors: those of view_path, SB_ERR_NOMEM. */
static int view_list(sb_client *c, cli_disk *f, char *gp, char *rel, const struct cli_fs_at *sel,
		     const struct changes *cs, struct cli_fs_list *l, struct sb_roll *roll)
{
	struct sb_plan *p = calloc(1, sizeof *p);
	struct view v = {.c = c, .dir = rel, .l = l};
	int rc = SB_OK;

	if (!p)
		return SB_ERR_NOMEM;
	for (size_t i = 0; i < cs->n; i++)
		v.now = cs->ts[i] > v.now ? cs->ts[i] : v.now;
	/* from the start: the run's own inputs too, as a fork from it keeps them */
	if (sel->start)
		rc = cli_run_inputs(c, sel->run, p, &v.start);
	if (!rc && !(rc = sb_roll_plan(cs->v, cs->n, sel->start, roll_probe, f, p, roll)))
		rc = view_path(&v, f, gp, rel, p, cs);
	free(p->inputs);
	free(p->removes);
	free(p);
	return rc;
}

int cli_fs_list_at(cli_disk *f, const struct cli_fs_at *sel, const char *gp,
		   struct cli_fs_list *l, struct sb_roll *roll)
{
	char rel[SB_FS_PATH_MAX], path[SB_FS_PATH_MAX + 16];
	struct changes cs = {0};
	sb_client *c;
	size_t n;
	int rc;

	memset(roll, 0, sizeof *roll);
	if (strcmp(gp, "/workspace") && strncmp(gp, "/workspace/", 11))
		return SB_ERR_INVAL; /* the record says nothing of it */
	snprintf(rel, sizeof rel, "%s", gp[10] ? gp + 11 : "");
	for (n = strlen(rel); n && rel[n - 1] == '/'; n--)
		rel[n - 1] = 0;
	snprintf(path, sizeof path, "/workspace%s%s", rel[0] ? "/" : "", rel);
	c = cli_disk_client(f);
	rc = cli_file_changes(c, sel->run, sel->snap_offset, sel->at, change_note, &cs);
	if (!rc && cs.rc)
		rc = cs.rc;
	if (!rc)
		rc = view_list(c, f, path, rel, sel, &cs, l, roll);
	free(cs.v);
	free(cs.ts);
	return rc;
}

/* -- one file at an offset */

/* The last recorded change of out's path, kept in out (ctx: struct at_ctx). */
struct at_ctx {
	const char *path;
	struct cli_at_file *out;
};

static int at_change(void *ctx, const struct cli_file_change *ch)
{
	struct at_ctx *a = ctx;
	struct cli_at_file *o = a->out;

	if (strcmp(ch->path, a->path))
		return 0;
	memset(o, 0, sizeof *o);
	o->offset = ch->offset;
	if (!strcmp(ch->kind, "deleted")) {
		o->kind = CLI_AT_DELETED;
	} else if (ch->content && strlen(ch->content) == 2 * SB_HASH_LEN) {
		o->kind = ch->link ? CLI_AT_LINK : CLI_AT_BLOB;
		snprintf(o->key, sizeof o->key, "%s", ch->content);
	} else {
		o->kind = CLI_AT_OMITTED;
		snprintf(o->why, sizeof o->why, "%s", ch->omitted ? ch->omitted : "not recorded");
	}
	return 0;
}

/* The input the run started with at gp, if any, into out (an omitted
 * change keeps its kind: the input is the nearest content there is). */
static int at_input(sb_client *c, const struct cli_fs_at *sel, const char *gp,
		    struct cli_at_file *out)
{
	struct sb_plan p = {0};
	int64_t ts;
	int rc;

	if (strncmp(gp, "/workspace/", 11))
		return SB_OK; /* the inputs are all in the workspace */
	rc = cli_run_inputs(c, sel->run, &p, &ts);
	for (size_t i = 0; rc == SB_OK && i < p.ninputs; i++) {
		if (strcmp(p.inputs[i].path, gp + 11))
			continue;
		if (out->kind == CLI_AT_DISK)
			out->kind = (p.inputs[i].mode & SB_PLAN_LINK) == SB_PLAN_LINK
					? CLI_AT_LINK
					: CLI_AT_BLOB;
		sb_hash_hex(p.inputs[i].blob, out->key);
	}
	free(p.inputs);
	return rc;
}

int cli_fs_at_file(sb_client *c, const struct cli_fs_at *sel, const char *gp,
		   struct cli_at_file *out)
{
	struct at_ctx a = {gp, out};
	int rc;

	memset(out, 0, sizeof *out);
	if (!sel->at || !sel->run[0] || sel->at <= sel->snap_offset)
		return SB_OK;
	if ((rc = cli_file_changes(c, sel->run, sel->snap_offset, sel->at, at_change, &a)))
		return rc;
	if ((out->kind == CLI_AT_DISK || out->kind == CLI_AT_OMITTED) && sel->start)
		return at_input(c, sel, gp, out);
	return SB_OK;
}
