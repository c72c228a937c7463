/* history.c - a run's record read in one pass (see history.h). */
#include "engine/runs/history.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "engine/mpack.h"
#include "engine/payload.h"

/* Notes the layer of a snapshot.saved ev: the newest so far. */
static void fold_saved(struct sb_history *rec, const struct sb_event *ev)
{
	msgpack_zone zone;
	msgpack_object p;
	uint64_t n;

	if (!msgpack_zone_init(&zone, 512))
		return;
	if (!sb_payload_parse(ev->payload, ev->payload_len, &zone, &p) &&
	    (n = sb_map_u64(&p, "layer_no", UINT32_MAX + 1ull)) <= UINT32_MAX &&
	    (long)n > rec->saved)
		rec->saved = (long)n;
	msgpack_zone_destroy(&zone);
}

/* Notes a change of the run's grants (ev: net.grant.added or .removed). */
static void fold_grant(struct sb_history *rec, const struct sb_event *ev)
{
	struct sb_grant_change *n;
	msgpack_zone zone;
	msgpack_object p;
	char text[SB_NET_HOST_MAX + 32];
	struct sb_net_grant g = {0};

	if (!msgpack_zone_init(&zone, 512))
		return;
	if (!sb_payload_parse(ev->payload, ev->payload_len, &zone, &p) &&
	    sb_map_str(&p, "grant", text, sizeof text) > 0 &&
	    sb_net_grant_parse(text, strlen(text), &g) == SB_OK &&
	    (n = realloc(rec->grants, (rec->ngrants + 1) * sizeof *n))) {
		rec->grants = n;
		n[rec->ngrants].g = g;
		n[rec->ngrants].allow = !strcmp(ev->type, "net.grant.added");
		n[rec->ngrants++].offset = ev->offset;
	}
	msgpack_zone_destroy(&zone);
}

/* Applies to p the recorded changes of grants at offsets up to upto (0:
 * all): the grants the run had then. */
void sb_history_grants_apply(const struct sb_history *rec, uint64_t upto,
			     struct sb_netpolicy *p)
{
	for (size_t i = 0; i < rec->ngrants; i++) {
		const struct sb_grant_change *c = &rec->grants[i];
		size_t k;
		if (upto && c->offset > upto)
			break;
		for (k = 0; k < p->ngrants && !sb_net_grant_equal(&p->grants[k], &c->g);
		     k++)
			;
		if (c->allow && k == p->ngrants && k < SB_NET_GRANTS)
			p->grants[p->ngrants++] = c->g;
		else if (!c->allow && k < p->ngrants)
			memmove(&p->grants[k], &p->grants[k + 1],
				(--p->ngrants - k) * sizeof p->grants[0]);
	}
}

/* Notes the parent of a memory fork (run.forked ev, memory true). */
/* The harness's session was begun by ev's offset (the first such is kept). */
static void session_note(struct sb_history *rec, const struct sb_event *ev)
{
	if (!rec->session_at)
		rec->session_at = ev->offset;
}

/* A fork's start: a memory fork's parent; the session its disk holds; a
 * re-run's original and offset. */
static void fold_forked(struct sb_history *rec, const struct sb_event *ev)
{
	msgpack_zone zone;
	msgpack_object p;

	if (!msgpack_zone_init(&zone, 512))
		return;
	if (!sb_payload_parse(ev->payload, ev->payload_len, &zone, &p)) {
		if (sb_map_bool(&p, "memory", 0) == 1)
			sb_map_str(&p, "from_run", rec->forked_from,
				   sizeof rec->forked_from);
		if (sb_map_bool(&p, "session", 0) == 1)
			session_note(rec, ev);
		if (sb_map_bool(&p, "rerun", 0) == 1) {
			rec->rerun.mode = sb_map_bool(&p, "live_after_divergence", 0) == 1 ? 2 : 1;
			rec->rerun.at = sb_map_u64(&p, "at", 0);
			sb_map_str(&p, "from_run", rec->rerun.of, sizeof rec->rerun.of);
		}
	}
	msgpack_zone_destroy(&zone);
}

/* A re-run's model calls (gateway agent.message) and departure. */
static void fold_rerun(struct sb_history *rec, const struct sb_event *ev)
{
	if (ev->source != SB_SRC_GATEWAY)
		return;
	if (!strcmp(ev->type, "rerun.diverged"))
		rec->rerun.diverged = 1;
	else
		rec->rerun.calls++;
}

static void fold_turn(struct sb_history *rec, const struct sb_event *ev)
{
	session_note(rec, ev);
}

/* Notes the change ev (agent.file.changed) in rec's files. */
static void file_note(struct sb_history *rec, const struct sb_event *ev)
{
	char path[PATH_MAX], kind[16], type[16], key[2 * SB_HASH_LEN + 8];
	msgpack_zone zone;
	msgpack_object p;
	struct sb_roll_file *f = NULL;
	const char *rel;

	if (!msgpack_zone_init(&zone, 1024)) {
		rec->files_over = 1;
		return;
	}
	if (sb_payload_parse(ev->payload, ev->payload_len, &zone, &p) ||
	    sb_map_str(&p, "path", path, sizeof path) <= 0 ||
	    sb_map_str(&p, "kind", kind, sizeof kind) <= 0 ||
	    strncmp(path, "/workspace/", 11)) {
		rec->files_over = 1; /* a change the roll-forward cannot follow */
		goto out;
	}
	rel = path + 11; /* one too long for an input is kept cut, and omitted */
	for (size_t i = 0; i < rec->nfiles && !f; i++)
		if (!strncmp(rec->files[i].path, rel, sizeof f->path - 1) &&
		    rec->files[i].toolong == (strlen(rel) >= sizeof f->path))
			f = &rec->files[i];
	if (!f) {
		if (rec->nfiles == SB_HISTORY_FILES_MAX ||
		    (!rec->files &&
		     !(rec->files = calloc(SB_HISTORY_FILES_MAX, sizeof *rec->files)))) {
			rec->files_over = 1;
			goto out;
		}
		f = &rec->files[rec->nfiles++];
		snprintf(f->path, sizeof f->path, "%.*s", (int)sizeof f->path - 1, rel);
	}
	f->toolong = strlen(rel) >= sizeof f->path;
	f->deleted = !strcmp(kind, "deleted");
	f->link = !f->deleted && sb_map_str(&p, "type", type, sizeof type) > 0 &&
		  !strcmp(type, "symlink");
	f->offset = ev->offset;
	f->size = sb_map_u64(&p, "size", 0);
	f->content = !f->deleted &&
		     sb_map_str(&p, "content", key, sizeof key) == 2 * SB_HASH_LEN &&
		     sb_hash_parse(key, f->blob) == SB_OK;
out:
	msgpack_zone_destroy(&zone);
}

/* Notes the guest_seq of a guest's event (the agent numbers its frames). */
static void note_guest_seq(struct sb_history *rec, const struct sb_event *ev)
{
	msgpack_unpacked u;
	uint64_t seq;

	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, (const char *)ev->payload, ev->payload_len, NULL) ==
		MSGPACK_UNPACK_SUCCESS &&
	    (seq = sb_map_u64(&u.data, "guest_seq", 0)) > rec->guest_seq)
		rec->guest_seq = seq;
	msgpack_unpacked_destroy(&u);
}

/* The payload of run.created: the plan as asked for. */
static void fold_created(struct sb_history *rec, const struct sb_event *ev)
{
	if (!rec->created.size)
		msgpack_sbuffer_write(&rec->created, (const char *)ev->payload,
				      ev->payload_len);
}

/* The payload of run.policy.resolved: the plan as resolved. */
static void fold_policy(struct sb_history *rec, const struct sb_event *ev)
{
	if (!rec->policy.size)
		msgpack_sbuffer_write(&rec->policy, (const char *)ev->payload,
				      ev->payload_len);
}

static void fold_started(struct sb_history *rec, const struct sb_event *ev)
{
	rec->started_ns = ev->ts_ns;
	rec->queued.size = 0;
}

/* It waits for its runner's capacity: what it continues is in the payload. */
static void fold_queued(struct sb_history *rec, const struct sb_event *ev)
{
	rec->queued.size = 0;
	msgpack_sbuffer_write(&rec->queued, (const char *)ev->payload, ev->payload_len);
	rec->queued_offset = ev->offset;
}

static void fold_exited(struct sb_history *rec, const struct sb_event *ev)
{
	rec->exited = 1;
}

static void fold_ready(struct sb_history *rec, const struct sb_event *ev)
{
	rec->ready = 1;
}

/* A resume: a new start. */
static void fold_resumed(struct sb_history *rec, const struct sb_event *ev)
{
	msgpack_zone zone;
	msgpack_object p;

	if (msgpack_zone_init(&zone, 512)) {
		if (!sb_payload_parse(ev->payload, ev->payload_len, &zone, &p)) {
			if (sb_map_bool(&p, "session", 0) == 1)
				session_note(rec, ev);
			rec->budget_nusd = sb_map_u64(&p, "budget_nusd", rec->budget_nusd);
		}
		msgpack_zone_destroy(&zone);
	}
	rec->started_ns = 0;
	rec->queued.size = 0;
	rec->exited = rec->ready = 0;
	rec->guest_seq = 0;
	rec->resumed = 1;
}

/* A file changed: followed when it falls in what is asked for. */
static void fold_changed(struct sb_history *rec, const struct sb_event *ev)
{
	if (rec->offset_at && ev->offset > rec->from_offset && ev->offset <= rec->offset_at) {
		rec->changed_after++;
		file_note(rec, ev);
	}
}

static const struct fold {
	const char *type;
	void (*fn)(struct sb_history *rec, const struct sb_event *ev);
} folds[] = {
    {"run.created", fold_created},     {"run.policy.resolved", fold_policy},
    {"run.started", fold_started},     {"run.exited", fold_exited},
    {"run.queued", fold_queued},
    {"harness.input.ready", fold_ready}, {"run.resumed", fold_resumed},
    {"run.forked", fold_forked},     {"snapshot.saved", fold_saved},
    {"net.grant.added", fold_grant}, {"net.grant.removed", fold_grant},
    {"agent.file.changed", fold_changed},
    {"agent.turn.started", fold_turn},   {"agent.usage.updated", fold_turn},
    {"agent.message", fold_rerun},       {"rerun.diverged", fold_rerun},
};

static void history_fold(struct sb_history *rec, const struct sb_event *ev)
{
	if (ev->source == SB_SRC_GUEST || ev->source == SB_SRC_HARNESS)
		note_guest_seq(rec, ev);
	for (size_t i = 0; i < sizeof folds / sizeof folds[0]; i++) {
		if (!strcmp(ev->type, folds[i].type)) {
			folds[i].fn(rec, ev);
			return;
		}
	}
}

int sb_history_read(sb_log *log, const char *run, struct sb_history *h)
{
	uint64_t from = h->from_offset, at = h->offset_at;
	sb_log_iter *it;
	struct sb_event ev;
	int rc;

	memset(h, 0, sizeof *h);
	h->from_offset = from;
	h->offset_at = at;
	h->saved = -1;
	msgpack_sbuffer_init(&h->created);
	msgpack_sbuffer_init(&h->policy);
	msgpack_sbuffer_init(&h->queued);
	if ((rc = sb_log_iter_open_run(log, run, 1, &it)))
		return rc;
	while ((rc = sb_log_iter_next(it, &ev)) != SB_END) {
		if (rc == SB_ERR_CORRUPT)
			continue;
		if (rc)
			break;
		history_fold(h, &ev);
	}
	sb_log_iter_close(it);
	return rc == SB_END ? SB_OK : rc;
}

void sb_history_free(struct sb_history *h)
{
	msgpack_sbuffer_destroy(&h->created);
	msgpack_sbuffer_destroy(&h->policy);
	msgpack_sbuffer_destroy(&h->queued);
	free(h->files);
	free(h->grants);
}
