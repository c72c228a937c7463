/* compare.c - a re-run's outcome against its original's (compare.h). */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "engine/error.h"
#include "engine/mpack.h"
#include "engine/payload.h"
#include "engine/runs/compare.h"

/* One agent.file.changed. */
struct sb_compare_change {
	char *path;
	size_t order; /* its place in the run's record */
	int created, deleted, link;
	char xxh3[24];
};

/* A path's state at a run's end, folded from its changes. */
struct path_state {
	const char *path;
	int touched; /* the run changed it */
	int existed; /* it was there when the run began (its first change
		      * was not a creation) */
	int present; /* it is there at the end */
	int link;
	const char *xxh3;
};

static int side_change(struct sb_compare_side *s, const msgpack_object *p)
{
	char path[4096], kind[16] = "", type[16] = "", xxh3[24] = "";
	struct sb_compare_change *c;

	if (sb_map_str(p, "path", path, sizeof path) <= 0 ||
	    sb_map_str(p, "kind", kind, sizeof kind) <= 0)
		return SB_OK;
	sb_map_str(p, "type", type, sizeof type);
	sb_map_str(p, "xxh3", xxh3, sizeof xxh3);
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		if (!(c = realloc(s->changes, cap * sizeof *c)))
			return SB_ERR_NOMEM;
		s->changes = c;
		s->cap = cap;
	}
	c = &s->changes[s->n];
	if (!(c->path = strdup(path)))
		return SB_ERR_NOMEM;
	c->order = s->n++;
	c->created = !strcmp(kind, "created");
	c->deleted = !strcmp(kind, "deleted");
	c->link = !strcmp(type, "symlink");
	memcpy(c->xxh3, xxh3, sizeof c->xxh3);
	return SB_OK;
}

/* The XXH3-64 of a tool call's tool and args, as packed. */
static int side_tool(struct sb_compare_side *s, const msgpack_object *p)
{
	const msgpack_object *tool = sb_map_get(p, "tool"), *args = sb_map_get(p, "args");
	msgpack_sbuffer buf;
	msgpack_packer pk;
	uint64_t *more;
	int rc = SB_ERR_NOMEM;

	if (s->ntools == s->tools_cap) {
		size_t cap = s->tools_cap ? 2 * s->tools_cap : 64;
		if (!(more = realloc(s->tools, cap * sizeof *more)))
			return SB_ERR_NOMEM;
		s->tools = more;
		s->tools_cap = cap;
	}
	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 2);
	if (tool)
		msgpack_pack_object(&pk, *tool);
	else
		msgpack_pack_nil(&pk);
	if (args)
		msgpack_pack_object(&pk, *args);
	else
		msgpack_pack_nil(&pk);
	if (buf.data) {
		s->tools[s->ntools++] = XXH3_64bits(buf.data, buf.size);
		rc = SB_OK;
	}
	msgpack_sbuffer_destroy(&buf);
	return rc;
}

int sb_compare_side_add(struct sb_compare_side *s, const struct sb_event *ev)
{
	msgpack_zone zone;
	msgpack_object p;
	const msgpack_object *v;
	int rc = SB_OK;

	if (strcmp(ev->type, "agent.file.changed") && strcmp(ev->type, "run.exited") &&
	    strcmp(ev->type, "agent.tool.completed"))
		return SB_OK;
	if (!msgpack_zone_init(&zone, 1024))
		return SB_ERR_NOMEM;
	if (sb_payload_parse(ev->payload, ev->payload_len, &zone, &p) == SB_OK) {
		if (!strcmp(ev->type, "agent.file.changed")) {
			rc = side_change(s, &p);
		} else if (!strcmp(ev->type, "agent.tool.completed")) {
			rc = side_tool(s, &p);
		} else if ((v = sb_map_get(&p, "status")) &&
			   (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
			    v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)) {
			s->exited = 1;
			s->status = v->via.i64;
		}
	}
	msgpack_zone_destroy(&zone);
	return rc;
}

int sb_compare_side_read(sb_log *log, const char *run, uint64_t after,
			 struct sb_compare_side *s)
{
	sb_log_iter *it;
	struct sb_event e;
	int rc;

	if ((rc = sb_log_iter_open_run(log, run, 1, &it)))
		return rc;
	while ((rc = sb_log_iter_next(it, &e)) == SB_OK || rc == SB_ERR_CORRUPT)
		if (rc == SB_OK && e.offset > after && (rc = sb_compare_side_add(s, &e)))
			break;
	sb_log_iter_close(it);
	return rc == SB_END ? SB_OK : rc;
}

void sb_compare_side_free(struct sb_compare_side *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->changes[i].path);
	free(s->changes);
	free(s->tools);
	memset(s, 0, sizeof *s);
}

/* By path, then in the record's order. */
static int change_cmp(const void *a, const void *b)
{
	const struct sb_compare_change *x = a, *y = b;
	int c = strcmp(x->path, y->path);

	return c ? c : (x->order > y->order) - (x->order < y->order);
}

/* The state of the path at changes[*i] (sorted), *i moved past its
 * changes. */
static struct path_state side_next(const struct sb_compare_side *s, size_t *i)
{
	const struct sb_compare_change *first = &s->changes[*i], *last = first;
	struct path_state st = {.path = first->path, .touched = 1};

	while (*i < s->n && !strcmp(s->changes[*i].path, first->path))
		last = &s->changes[(*i)++];
	st.existed = !first->created;
	st.present = !last->deleted;
	st.link = last->link;
	st.xxh3 = last->deleted ? "" : last->xxh3;
	return st;
}

/* A path one run left as it was: its state as the other's first change
 * says it was at the start (its content not in the record). */
static struct path_state untouched(const struct path_state *other)
{
	struct path_state st = {.path = other->path,
				.existed = other->existed,
				.present = other->existed,
				.xxh3 = ""};
	return st;
}

/* "added", "removed" or "different" for the path's states in the
 * original a and the re-run b, or NULL when they are the same. */
static const char *path_diff(const struct path_state *a, const struct path_state *b)
{
	if (!a->present && !b->present)
		return NULL;
	if (!a->present)
		return "added";
	if (!b->present)
		return "removed";
	if (a->touched && b->touched && a->link == b->link && !strcmp(a->xxh3, b->xxh3))
		return NULL;
	return "different"; /* or the start's content, which the record lacks */
}

/* Packs the differing paths of a and b (sorted) into v, at most
 * SB_COMPARE_FILES_MAX; returns how many differ. */
static uint64_t files_pack(const struct sb_compare_side *a, const struct sb_compare_side *b,
			   msgpack_packer *v)
{
	size_t i = 0, j = 0;
	uint64_t ndiff = 0;

	while (i < a->n || j < b->n) {
		int c = i == a->n ? 1 : j == b->n ? -1 : strcmp(a->changes[i].path, b->changes[j].path);
		struct path_state x, y;
		const char *what;
		if (c <= 0)
			x = side_next(a, &i);
		if (c >= 0)
			y = side_next(b, &j);
		if (c < 0)
			y = untouched(&x);
		if (c > 0)
			x = untouched(&y);
		if (!(what = path_diff(&x, &y)) || ndiff++ >= SB_COMPARE_FILES_MAX)
			continue;
		if (v) {
			msgpack_pack_map(v, 4);
			sb_pack_kstr(v, "path", x.path);
			sb_pack_kstr(v, "change", what);
			sb_pack_kstr(v, "xxh3", y.xxh3);
			sb_pack_kstr(v, "original_xxh3", x.xxh3);
		}
	}
	return ndiff;
}

/* The first tool call (from 1) whose tool or args differ, or which one
 * side lacks; 0 when both made the same calls. */
static uint64_t tools_differ_at(const struct sb_compare_side *a, const struct sb_compare_side *b)
{
	size_t n = a->ntools < b->ntools ? a->ntools : b->ntools;

	for (size_t i = 0; i < n; i++)
		if (a->tools[i] != b->tools[i])
			return i + 1;
	return a->ntools == b->ntools ? 0 : n + 1;
}

int sb_compare_pack(struct sb_compare_side *orig, struct sb_compare_side *re,
		    const char *orig_run, const char *never_ran, msgpack_packer *pk,
		    int *same)
{
	uint64_t ndiff, at;
	msgpack_packer *v;
	sb_mapw m;

	if (orig->n)
		qsort(orig->changes, orig->n, sizeof *orig->changes, change_cmp);
	if (re->n)
		qsort(re->changes, re->n, sizeof *re->changes, change_cmp);
	ndiff = files_pack(orig, re, NULL);
	at = tools_differ_at(orig, re);
	*same = !never_ran && !ndiff && !at && orig->exited == re->exited &&
		(!orig->exited || orig->status == re->status);
	sb_mapw_begin(&m, pk);
	sb_mapw_str(&m, "original", orig_run);
	sb_mapw_bool(&m, "same", *same);
	sb_mapw_i64(&m, "status", re->exited ? re->status : -1);
	sb_mapw_i64(&m, "original_status", orig->exited ? orig->status : -1);
	v = sb_mapw_key(&m, "files");
	msgpack_pack_array(v, (uint32_t)(ndiff < SB_COMPARE_FILES_MAX ? ndiff : SB_COMPARE_FILES_MAX));
	files_pack(orig, re, v);
	sb_mapw_u64(&m, "files_differ", ndiff);
	sb_mapw_u64(&m, "tools", re->ntools);
	sb_mapw_u64(&m, "original_tools", orig->ntools);
	sb_mapw_u64(&m, "tools_differ_at", at);
	if (never_ran)
		sb_mapw_str(&m, "reason", never_ran);
	return sb_mapw_end(&m);
}
