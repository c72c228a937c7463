/* bundle.c - writing audit bundles (verify.c checks them). */
#include "audit/bundle.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/payload.h"
#include "engine/version.h"
#include "engine/log/event.h"
#include "engine/log/mdb.h"
#include "projections/tree.h"

/* One run's events, read in order while the runs are merged by offset. */
struct xrun {
	const char *run;
	sb_log_iter *it;
	struct sb_event ev;
	int have; /* ev holds its next event */
	uint64_t events, last_seq, first, last;
	char last_type[SB_TYPE_MAX];
};

struct xctx {
	sb_log *log;
	const struct sb_export *x;
	const char *dir;
	MDB_txn *txn;
	struct sb_proj_txn t;
	uint64_t n, next; /* the tree's size; the first leaf not yet covered */
	FILE *events, *proof;
	msgpack_zone zone;
	json_t *blobs, *redactions, *plan;
	struct xrun *runs;
	struct sb_bundle_info info;
};

/* Opens dir/name for writing. */
static int file_open(const char *dir, const char *name, FILE **out)
{
	char path[4096];

	snprintf(path, sizeof path, "%s/%s", dir, name);
	if (!(*out = fopen(path, "wxe")))
		return sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
	return SB_OK;
}

/* Writes len bytes of data as dir/name. */
static int file_write(const char *dir, const char *name, const void *data, size_t len)
{
	FILE *f;
	int rc = file_open(dir, name, &f);

	if (rc)
		return rc;
	if (fwrite(data, 1, len, f) != len)
		rc = sb_seterr(SB_ERR_IO, "%s/%s: %s", dir, name, strerror(errno));
	if (fclose(f) && !rc)
		rc = sb_seterr(SB_ERR_IO, "%s/%s: %s", dir, name, strerror(errno));
	return rc;
}

static int json_write(const char *dir, const char *name, json_t *j)
{
	char *s = json_dumps(j, JSON_INDENT(1) | JSON_SORT_KEYS);
	int rc;

	if (!s)
		return SB_ERR_NOMEM;
	rc = file_write(dir, name, s, strlen(s));
	free(s);
	return rc;
}

static void hex(const uint8_t *b, size_t n, char *out)
{
	sodium_bin2hex(out, 2 * n + 1, b, n);
}

/* 1 when event ev is redacted by x: its offset, its type or a prefix of
 * its type at a dot is listed. */
static int redacted(const struct sb_export *x, const struct sb_event *ev)
{
	for (size_t i = 0; i < x->nredact; i++) {
		const char *r = x->redact[i];
		size_t n = strlen(r);
		if (n && strspn(r, "0123456789") == n) {
			if (strtoull(r, NULL, 10) == ev->offset)
				return 1;
		} else if (!strncmp(ev->type, r, n) && (ev->type[n] == 0 || ev->type[n] == '.')) {
			return 1;
		}
	}
	return 0;
}

static int gap_cb(void *ctx, uint64_t lo, uint64_t hi)
{
	struct xctx *c = ctx;
	uint8_t h[SB_MERKLE_HASH];
	int rc = sb_merkle_range(sb_tree_read, &c->t, lo, hi, h);

	if (rc)
		return rc;
	if (fwrite(h, 1, sizeof h, c->proof) != sizeof h)
		return sb_seterr(SB_ERR_IO, "proof: %s", strerror(errno));
	return SB_OK;
}

/* Writes blob key (64 hex digits) to blobs/KEY once, when the log has it. */
static int blob_out(struct xctx *c, const char *key)
{
	uint8_t h[SB_HASH_LEN];
	char name[80];
	void *data = NULL;
	size_t len;
	int rc;

	if (sb_hash_parse(key, h) || sb_hash_is_legacy(h))
		return SB_OK;
	snprintf(name, sizeof name, "blobs/%s", key);
	for (size_t i = 0; i < json_array_size(c->blobs); i++)
		if (!strcmp(json_string_value(json_array_get(c->blobs, i)), key))
			return SB_OK;
	rc = sb_blob_get(c->log, h, &data, &len);
	if (rc == SB_ERR_NOTFOUND)
		return SB_OK; /* a string that looks like a key but is not one */
	if (!rc && !(rc = file_write(c->dir, name, data, len)))
		json_array_append_new(c->blobs, json_string(key));
	free(data);
	return rc;
}

/* Writes every blob a string of o names (64 lowercase hex digits). */
static int blobs_walk(struct xctx *c, const msgpack_object *o)
{
	char key[SB_HASH_HEX];
	int rc = SB_OK;

	switch (o->type) {
	case MSGPACK_OBJECT_STR:
		if (o->via.str.size != 64)
			return SB_OK;
		memcpy(key, o->via.str.ptr, 64);
		key[64] = 0;
		return blob_out(c, key);
	case MSGPACK_OBJECT_ARRAY:
		for (uint32_t i = 0; i < o->via.array.size && !rc; i++)
			rc = blobs_walk(c, &o->via.array.ptr[i]);
		return rc;
	case MSGPACK_OBJECT_MAP:
		for (uint32_t i = 0; i < o->via.map.size && !rc; i++)
			rc = blobs_walk(c, &o->via.map.ptr[i].val);
		return rc;
	default: return SB_OK;
	}
}

/* The JSON line of ev: as `events --json` prints it, with its leaf hash,
 * and either its payload's msgpack bytes and salt or, redacted, only the
 * payload's commitment. */
static json_t *event_line(const struct sb_event *ev, const msgpack_object *payload, int red,
			  const uint8_t salt[SB_SALT_LEN], const uint8_t commit[SB_MERKLE_HASH],
			  const uint8_t leaf[SB_MERKLE_HASH])
{
	msgpack_object empty = {.type = MSGPACK_OBJECT_MAP};
	json_t *j = sb_event_json(ev, red ? &empty : payload);
	char h[2 * SB_MERKLE_HASH + 1];
	size_t cap = sodium_base64_ENCODED_LEN(ev->payload_len, sodium_base64_VARIANT_ORIGINAL);
	char *b;

	if (!j)
		return NULL;
	hex(leaf, SB_MERKLE_HASH, h);
	json_object_set_new(j, "leaf", json_string(h));
	if (red) {
		json_object_del(j, "payload");
		hex(commit, SB_MERKLE_HASH, h);
		json_object_set_new(j, "commitment", json_string(h));
		json_object_set_new(j, "redacted", json_true());
		return j;
	}
	if (!(b = malloc(cap))) {
		json_decref(j);
		return NULL;
	}
	sodium_bin2base64(b, cap, ev->payload, ev->payload_len, sodium_base64_VARIANT_ORIGINAL);
	json_object_set_new(j, "payload_mp", json_string(b));
	free(b);
	hex(salt, SB_SALT_LEN, h);
	json_object_set_new(j, "salt", json_string(h));
	return j;
}

/* Exports one event: its proof gap, its line, its blobs, its plan. */
static int event_out(struct xctx *c, struct xrun *r)
{
	const struct sb_event *ev = &r->ev;
	uint8_t salt[SB_SALT_LEN], commit[SB_MERKLE_HASH], leaf[SB_TREE_LEAF_MAX], h[SB_MERKLE_HASH];
	int red = redacted(c->x, ev), rc;
	msgpack_object map;
	json_t *j;

	if ((rc = sb_merkle_gap(c->next, ev->offset - 1, c->n, gap_cb, c)))
		return rc;
	c->next = ev->offset;
	if ((rc = sb_log_salt(c->log, c->txn, ev->offset, 0, salt)))
		return rc;
	sb_tree_commit(salt, ev->payload, ev->payload_len, commit);
	sb_merkle_leaf(leaf, sb_tree_leaf(ev, commit, leaf), h);
	msgpack_zone_clear(&c->zone);
	if ((rc = sb_payload_parse(ev->payload, ev->payload_len, &c->zone, &map)))
		return rc;
	if (!(j = event_line(ev, &map, red, salt, commit, h)))
		return SB_ERR_NOMEM;
	if (json_dumpf(j, c->events, JSON_COMPACT) || fputc('\n', c->events) == EOF)
		rc = sb_seterr(SB_ERR_IO, "events.jsonl: %s", strerror(errno));
	json_decref(j);
	if (rc)
		return rc;
	if (red) {
		c->info.redacted++;
		json_array_append_new(c->redactions, json_pack("{s:I,s:s,s:s}", "offset",
							       (json_int_t)ev->offset, "type",
							       ev->type, "run", ev->run));
	} else {
		if ((rc = blobs_walk(c, &map)))
			return rc;
		if (!strcmp(ev->type, "run.policy.resolved"))
			json_object_set_new(c->plan, ev->run, sb_msgpack_to_json(&map));
	}
	c->info.events++;
	if (!r->events++)
		r->first = ev->offset;
	r->last = ev->offset;
	r->last_seq = ev->seq;
	snprintf(r->last_type, sizeof r->last_type, "%s", ev->type);
	return SB_OK;
}

/* Reads run r's next event (one at or below the tree's size). */
static int run_next(struct xctx *c, struct xrun *r)
{
	int rc = sb_log_iter_next(r->it, &r->ev);

	r->have = rc == SB_OK && r->ev.offset <= c->n;
	if (rc == SB_END || (rc == SB_OK && !r->have))
		return SB_OK;
	return rc;
}

/* Merges the runs' events by offset and exports each (one alone for a
 * one-event proof). */
static int events_out(struct xctx *c)
{
	int rc = SB_OK;

	for (size_t i = 0; i < c->x->nruns && !rc; i++)
		if (!(rc = sb_log_iter_open_run(c->log, c->x->runs[i], 1, &c->runs[i].it)))
			rc = run_next(c, &c->runs[i]);
	while (!rc) {
		struct xrun *min = NULL;
		for (size_t i = 0; i < c->x->nruns; i++)
			if (c->runs[i].have && (!min || c->runs[i].ev.offset < min->ev.offset))
				min = &c->runs[i];
		if (!min)
			break;
		if (!c->x->only || min->ev.offset == c->x->only)
			rc = event_out(c, min);
		if (!rc)
			rc = run_next(c, min);
	}
	if (!rc && !c->info.events)
		rc = c->x->only ? sb_seterr(SB_ERR_NOTFOUND, "offset %llu is not an event of the run",
					    (unsigned long long)c->x->only)
				: sb_seterr(SB_ERR_NOTFOUND, "no events to export");
	if (!rc)
		rc = sb_merkle_gap(c->next, c->n, c->n, gap_cb, c);
	return rc;
}

/* The manifest's runs: per run its counts, ends and what run.get said. */
static json_t *runs_json(struct xctx *c)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < c->x->nruns; i++) {
		struct xrun *r = &c->runs[i];
		json_t *info = c->x->runinfo ? json_object_get(c->x->runinfo, r->run) : NULL;
		json_t *o = info ? json_deep_copy(info) : json_object();
		json_object_set_new(o, "run", json_string(r->run));
		json_object_set_new(o, "events", json_integer((json_int_t)r->events));
		json_object_set_new(o, "first_offset", json_integer((json_int_t)r->first));
		json_object_set_new(o, "last_offset", json_integer((json_int_t)r->last));
		json_object_set_new(o, "last_seq", json_integer((json_int_t)r->last_seq));
		json_object_set_new(o, "last_type", json_string(r->last_type));
		json_array_append_new(a, o);
	}
	return a;
}

static json_t *manifest_json(struct xctx *c, const struct sb_ckpt *ck)
{
	char root[2 * SB_MERKLE_HASH + 1];
	json_t *m;

	hex(ck->root, SB_MERKLE_HASH, root);
	m = json_pack("{s:i, s:s, s:s, s:s?, s:o, s:I, s:I, s:s, s:O, s:O}", "bundle", 1,
		      "kind", c->x->only ? "event" : "runs", "software", SB_VERSION, "group",
		      c->x->group, "runs", runs_json(c), "events", (json_int_t)c->info.events,
		      "tree_size", (json_int_t)ck->size, "root", root, "blobs", c->blobs,
		      "redactions", c->redactions);
	if (m && c->info.prior_size)
		json_object_set_new(m, "prior_tree_size", json_integer((json_int_t)c->info.prior_size));
	return m;
}

/* With a prior checkpoint: copies it and writes the consistency proof
 * from its size to the tree's. */
static int prior_out(struct xctx *c)
{
	uint8_t proof[SB_MERKLE_PROOF_MAX][SB_MERKLE_HASH], root[SB_MERKLE_HASH];
	struct sb_ckpt old;
	size_t len;
	int rc;

	if (!c->x->prior)
		return SB_OK;
	if ((rc = sb_ckpt_verify(c->x->prior, c->x->prior_len, c->x->key, &old)))
		return sb_seterr(SB_ERR_INVAL, "the prior %s", sb_errmsg(rc));
	if (old.size > c->n)
		return sb_seterr(SB_ERR_INVAL, "the prior checkpoint's tree (%llu) is larger than the log's (%llu)",
				 (unsigned long long)old.size, (unsigned long long)c->n);
	if ((rc = sb_merkle_consistency(sb_tree_read, &c->t, old.size, c->n, proof, &len)) ||
	    (rc = sb_merkle_root(sb_tree_read, &c->t, old.size, root)))
		return rc;
	c->info.prior_size = old.size;
	c->info.prior_differs = !!memcmp(root, old.root, SB_MERKLE_HASH);
	if ((rc = file_write(c->dir, "prior-checkpoint", c->x->prior, c->x->prior_len)))
		return rc;
	return file_write(c->dir, "consistency", proof, len * SB_MERKLE_HASH);
}

/* Writes the checkpoint, key, plan and manifest. */
static int finish(struct xctx *c)
{
	char note[SB_CKPT_MAX], vk[SB_VKEY_MAX];
	struct sb_ckpt ck;
	json_t *m;
	int rc;

	if ((rc = sb_tree_checkpoint(&c->t, c->x->key, &ck, note)) || (rc = prior_out(c)))
		return rc;
	c->info.tree_size = ck.size;
	memcpy(c->info.root, ck.root, SB_MERKLE_HASH);
	c->info.blobs = json_array_size(c->blobs);
	c->info.runs = c->x->nruns;
	sb_key_verifier(c->x->key, vk);
	strcat(vk, "\n");
	if ((rc = file_write(c->dir, "checkpoint", note, strlen(note))) ||
	    (rc = file_write(c->dir, "key", vk, strlen(vk))) ||
	    (rc = json_write(c->dir, "plan.json", c->plan)))
		return rc;
	if (!(m = manifest_json(c, &ck)))
		return SB_ERR_NOMEM;
	rc = json_write(c->dir, "manifest.json", m);
	json_decref(m);
	return rc;
}

/* Opens the read transaction and the tree, waiting up to x->wait_ms for
 * the tree to hold every record the log has now. */
static int tree_begin(struct xctx *c)
{
	uint64_t last, waited = 0;
	int rc;

	if ((rc = sb_log_last_offset(c->log, &last)))
		return rc;
	for (;;) {
		if ((rc = mdb_txn_begin(sb_log_env(c->log), NULL, MDB_RDONLY, &c->txn))) {
			c->txn = NULL;
			return sb_log_mdb_err(rc, "export: read");
		}
		rc = sb_tree_open(c->log, c->txn, &c->t);
		if (!rc && !(rc = sb_tree_size(&c->t, &c->n)) && c->n >= last)
			return SB_OK;
		if (rc && rc != SB_ERR_NOTFOUND)
			return rc;
		mdb_txn_abort(c->txn);
		c->txn = NULL;
		if (waited >= c->x->wait_ms)
			return sb_seterr(SB_ERR_STATE, "the tree holds %llu of the log's %llu records "
				"(the daemon adds them): try again", (unsigned long long)c->n,
				(unsigned long long)last);
		nanosleep(&(struct timespec){0, 50000000}, NULL);
		waited += 50;
	}
}

int sb_bundle_export(sb_log *log, const struct sb_export *x, const char *dir,
		     struct sb_bundle_info *info)
{
	struct xctx c = {.log = log, .x = x, .dir = dir};
	char sub[4096];
	int rc;

	if (!x->nruns || x->nruns > SB_BUNDLE_RUNS_MAX)
		return sb_seterr(SB_ERR_INVAL, "a bundle holds 1 to %d runs", SB_BUNDLE_RUNS_MAX);
	msgpack_zone_init(&c.zone, 4096);
	c.blobs = json_array();
	c.redactions = json_array();
	c.plan = json_object();
	c.runs = calloc(x->nruns, sizeof *c.runs);
	if (!c.blobs || !c.redactions || !c.plan || !c.runs) {
		rc = SB_ERR_NOMEM;
		goto out;
	}
	for (size_t i = 0; i < x->nruns; i++)
		c.runs[i].run = x->runs[i];
	snprintf(sub, sizeof sub, "%s/blobs", dir);
	if (mkdir(sub, 0755)) {
		rc = sb_seterr(SB_ERR_IO, "%s: %s", sub, strerror(errno));
		goto out;
	}
	if ((rc = tree_begin(&c)) || (rc = file_open(dir, "events.jsonl", &c.events)) ||
	    (rc = file_open(dir, "proof", &c.proof)) || (rc = events_out(&c)))
		goto out;
	if (fclose(c.events) | fclose(c.proof))
		rc = sb_seterr(SB_ERR_IO, "%s: %s", dir, strerror(errno));
	c.events = c.proof = NULL;
	if (!rc)
		rc = finish(&c);
	if (!rc && info)
		*info = c.info;
out:
	if (c.events)
		fclose(c.events);
	if (c.proof)
		fclose(c.proof);
	for (size_t i = 0; c.runs && i < x->nruns; i++)
		sb_log_iter_close(c.runs[i].it);
	if (c.txn)
		mdb_txn_abort(c.txn);
	free(c.runs);
	json_decref(c.blobs);
	json_decref(c.redactions);
	json_decref(c.plan);
	msgpack_zone_destroy(&c.zone);
	return rc;
}
