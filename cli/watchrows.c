/* watchrows.c - the rows of sanbox watch, folded from events. */
#include "cli/watchrows.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/error.h"
#include "engine/payload.h"
#include "engine/text.h"

void cli_wrows_init(struct cli_wrows *w, enum cli_wscope scope, const char *group)
{
	memset(w, 0, sizeof *w);
	w->scope = scope;
	if (scope == CLI_WSCOPE_GROUP && group)
		snprintf(w->group, sizeof w->group, "%s", group);
}

void cli_wrows_free(struct cli_wrows *w)
{
	free(w->v);
	w->v = NULL;
	w->n = w->cap = 0;
}

struct cli_wrow *cli_wrows_find(struct cli_wrows *w, const char *run)
{
	for (size_t i = 0; i < w->n; i++)
		if (!strcmp(w->v[i].rs.run, run))
			return &w->v[i];
	return NULL;
}

int cli_wrows_add(struct cli_wrows *w, const struct sb_runstate *rs, struct cli_wrow **out)
{
	struct cli_wrow *r = cli_wrows_find(w, rs->run);

	if (!r) {
		if (w->n == w->cap) {
			size_t cap = w->cap ? 2 * w->cap : 16;
			struct cli_wrow *v = realloc(w->v, cap * sizeof *v);
			if (!v)
				return SB_ERR_NOMEM;
			w->v = v;
			w->cap = cap;
		}
		r = &w->v[w->n++];
		memset(r, 0, sizeof *r);
		r->rs = *rs;
	}
	if (out)
		*out = r;
	return SB_OK;
}

/* Does the scope take the run a run.created (payload p) makes? */
static int scope_takes(const struct cli_wrows *w, const msgpack_object *p)
{
	char group[sizeof w->group];

	if (w->scope == CLI_WSCOPE_ALL)
		return 1;
	if (w->scope == CLI_WSCOPE_RUNS || !p)
		return 0;
	return sb_map_str(p, "group", group, sizeof group) > 0 && !strcmp(group, w->group);
}

/* A row for the run ev (its run.created) makes, as runstate starts one. */
static int row_new(struct cli_wrows *w, const struct sb_event *ev, struct cli_wrow **out)
{
	struct sb_runstate rs;

	memset(&rs, 0, sizeof rs);
	snprintf(rs.run, sizeof rs.run, "%s", ev->run);
	snprintf(rs.status, sizeof rs.status, "created");
	rs.created_ns = ev->ts_ns;
	return cli_wrows_add(w, &rs, out);
}

int cli_wrows_apply(struct cli_wrows *w, const struct sb_event *ev, const msgpack_object *payload,
		    struct cli_wrow **changed)
{
	static const msgpack_object none = {.type = MSGPACK_OBJECT_NIL};
	const msgpack_object *p = payload ? payload : &none;
	struct cli_wrow *r = cli_wrows_find(w, ev->run);
	int rc;

	*changed = NULL;
	if (!strncmp(ev->type, "group.", 6))
		return SB_OK; /* a group's stream, not a run's */
	if (!r && !strcmp(ev->type, "run.created") && scope_takes(w, payload) &&
	    (rc = row_new(w, ev, &r)))
		return rc;
	if (!r || ev->offset <= r->rs.last_offset)
		return SB_OK;
	if (!strcmp(ev->type, "agent.usage.updated") && ev->source == SB_SRC_GATEWAY) {
		r->in_tokens += sb_map_u64(p, "input_tokens", 0);
		r->out_tokens += sb_map_u64(p, "output_tokens", 0);
	} else if (!strcmp(ev->type, "snapshot.saved")) {
		r->snap_ns = ev->ts_ns;
	}
	sb_runstate_fold(&r->rs, ev, p);
	*changed = r;
	return SB_OK;
}

void cli_wrows_totals(const struct cli_wrows *w, struct cli_wtotals *t)
{
	memset(t, 0, sizeof *t);
	t->runs = w->n;
	for (size_t i = 0; i < w->n; i++) {
		const struct sb_runstate *rs = &w->v[i].rs;
		if (!strcmp(rs->status, "queued"))
			t->queued++;
		else if (sb_runstate_is_live(rs))
			t->live++;
		else if (!strcmp(rs->status, "exited") && rs->has_exit && rs->exit_status == 0)
			t->done++;
		else
			t->failed++;
		t->cost_nusd += rs->cost_nusd;
		t->budget_nusd += rs->budget_nusd;
		t->in_tokens += w->v[i].in_tokens;
		t->out_tokens += w->v[i].out_tokens;
	}
}

int cli_wrows_ended(const struct cli_wrows *w)
{
	for (size_t i = 0; i < w->n; i++)
		if (sb_runstate_is_live(&w->v[i].rs))
			return 0;
	return w->scope != CLI_WSCOPE_GROUP || w->n >= w->planned;
}

int cli_wrow_match(const struct cli_wrow *r, const char *filter)
{
	return !filter[0] || strcasestr(r->rs.name[0] ? r->rs.name : r->rs.run, filter);
}

void cli_wpane_select(struct cli_wpane *p, const char *run)
{
	if (!strcmp(p->run, run))
		return;
	snprintf(p->run, sizeof p->run, "%s", run);
	p->n = 0;
}

void cli_wpane_put(struct cli_wpane *p, const char *run, uint64_t offset, const char *line)
{
	size_t at = p->n, len;
	unsigned char slot;

	if (strcmp(p->run, run))
		return;
	while (at > 0 && p->offset[at - 1] > offset)
		at--;
	if ((at > 0 && p->offset[at - 1] == offset) || (at == 0 && p->n == CLI_WPANE_LINES))
		return; /* held, or older than all of a full pane */
	if (p->n == CLI_WPANE_LINES) { /* the oldest goes, its slot taken */
		slot = p->slot[0];
		at--;
		memmove(p->offset, p->offset + 1, at * sizeof p->offset[0]);
		memmove(p->slot, p->slot + 1, at * sizeof p->slot[0]);
	} else { /* slots 0 to n-1 are taken */
		slot = (unsigned char)p->n;
		memmove(p->offset + at + 1, p->offset + at, (p->n - at) * sizeof p->offset[0]);
		memmove(p->slot + at + 1, p->slot + at, (p->n - at) * sizeof p->slot[0]);
		p->n++;
	}
	p->offset[at] = offset;
	p->slot[at] = slot;
	len = sb_utf8_cut(line, strlen(line), CLI_WPANE_LINE - 1);
	memcpy(p->text[slot], line, len);
	p->text[slot][len] = 0;
}

const char *cli_wpane_line(const struct cli_wpane *p, size_t i)
{
	return p->text[p->slot[i]];
}
