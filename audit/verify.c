/* verify.c - checking audit bundles offline (bundle.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audit/bundle.h"
#include "engine/error.h"
#include "engine/log/blob.h"
#include "engine/payload.h"
#include "projections/tree.h"

#define SMALL_MAX (1u << 20) /* checkpoint, key: far less */

struct vrun {
	const char *run;
	uint64_t events, last_seq;
	json_t *m; /* its manifest entry */
};

struct vctx {
	const char *dir;
	struct sb_ckpt ck;
	json_t *manifest;
	struct vrun *runs;
	size_t nruns;
	int one; /* a one-event proof: no completeness */
	FILE *proof;
	uint64_t hashes; /* proof hashes read */
	struct sb_merkle_fold fold;
	msgpack_zone zone;
	json_t *redacted; /* offsets of redacted lines */
	struct sb_bundle_info info;
};

/* Opens dir/name for reading: a regular file only, never through a
 * symbolic link (a bundle is untrusted: its names must not reach the
 * verifier's own files, FIFOs or devices). */
static int bundle_open(const char *dir, const char *name, FILE **out)
{
	char path[4096];
	struct stat st;
	int fd;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	if ((fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)) < 0)
		return sb_seterr(SB_ERR_CORRUPT, "%s: %s", name,
				 errno == ELOOP ? "a symbolic link, not a file" : strerror(errno));
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return sb_seterr(SB_ERR_CORRUPT, "%s: not a regular file", name);
	}
	if (!(*out = fdopen(fd, "r"))) {
		close(fd);
		return SB_ERR_NOMEM;
	}
	return SB_OK;
}

/* Reads dir/name (at most SMALL_MAX bytes) into a new NUL-ended buffer. */
static int small_read(const char *dir, const char *name, char **out, size_t *len)
{
	FILE *f;
	char *b = malloc(SMALL_MAX + 1);
	int rc;

	if (!b)
		return SB_ERR_NOMEM;
	if ((rc = bundle_open(dir, name, &f))) {
		free(b);
		return rc;
	}
	*len = fread(b, 1, SMALL_MAX, f);
	fclose(f);
	b[*len] = 0;
	*out = b;
	return SB_OK;
}

static int hex_exact(const char *s, uint8_t *out, size_t n)
{
	size_t got = 0;

	return !s || strlen(s) != 2 * n || sodium_hex2bin(out, n, s, 2 * n, NULL, &got, NULL) || got != n;
}

/* The key to check the bundle against: key, else the bundle's own key
 * file, parsed into *own. */
static int bundle_key(struct vctx *c, const struct sb_note_key *key, struct sb_note_key *own,
		      const struct sb_note_key **use)
{
	char *k = NULL;
	size_t klen;
	int rc;

	*use = key;
	if (key)
		return SB_OK;
	if ((rc = small_read(c->dir, "key", &k, &klen)))
		return rc;
	rc = sb_key_parse(k, own);
	free(k);
	if (rc)
		return sb_seterr(SB_ERR_CORRUPT, "key: %s", sb_errmsg(rc));
	*use = own;
	return SB_OK;
}

/* Checks the checkpoint against key. */
static int ckpt_check(struct vctx *c, const struct sb_note_key *key)
{
	char *note = NULL;
	size_t len;
	int rc;

	if ((rc = small_read(c->dir, "checkpoint", &note, &len)))
		return rc;
	rc = sb_ckpt_verify(note, len, key, &c->ck);
	free(note);
	return rc;
}

/* Reads the manifest and its runs. */
static int manifest_read(struct vctx *c)
{
	json_error_t e;
	json_t *runs, *r;
	size_t i;
	FILE *f;
	int rc;

	if ((rc = bundle_open(c->dir, "manifest.json", &f)))
		return rc;
	c->manifest = json_loadf(f, 0, &e);
	fclose(f);
	if (!c->manifest)
		return sb_seterr(SB_ERR_CORRUPT, "manifest.json: line %d: %s", e.line, e.text);
	runs = json_object_get(c->manifest, "runs");
	c->one = !strcmp(json_string_value(json_object_get(c->manifest, "kind")) ?: "", "event");
	if (!json_is_array(runs) || !json_array_size(runs) || json_array_size(runs) > SB_BUNDLE_RUNS_MAX)
		return sb_seterr(SB_ERR_CORRUPT, "manifest.json: no list of runs");
	c->nruns = json_array_size(runs);
	if (!(c->runs = calloc(c->nruns, sizeof *c->runs)))
		return SB_ERR_NOMEM;
	json_array_foreach(runs, i, r) {
		c->runs[i].m = r;
		if (!(c->runs[i].run = json_string_value(json_object_get(r, "run"))))
			return sb_seterr(SB_ERR_CORRUPT, "manifest.json: run %zu has no id", i + 1);
	}
	if (json_integer_value(json_object_get(c->manifest, "tree_size")) != (json_int_t)c->ck.size)
		return sb_seterr(SB_ERR_CORRUPT, "manifest.json: tree_size is not the checkpoint's (%llu)",
				 (unsigned long long)c->ck.size);
	return SB_OK;
}

static int gap_cb(void *ctx, uint64_t lo, uint64_t hi)
{
	struct vctx *c = ctx;
	uint8_t h[SB_MERKLE_HASH];

	if (fread(h, 1, sizeof h, c->proof) != sizeof h)
		return sb_seterr(SB_ERR_CORRUPT, "proof: ends after %llu hashes; one is needed for leaves [%llu, %llu)",
				 (unsigned long long)c->hashes, (unsigned long long)lo,
				 (unsigned long long)hi);
	c->hashes++;
	return sb_merkle_fold_push(&c->fold, lo, hi, h);
}

/* Fills ev's header from line j. */
static int line_header(json_t *j, struct sb_event *ev)
{
	const char *type = json_string_value(json_object_get(j, "type"));
	const char *run = json_string_value(json_object_get(j, "run"));
	const char *src = json_string_value(json_object_get(j, "source"));
	json_t *off = json_object_get(j, "offset"), *seq = json_object_get(j, "seq"),
	       *ts = json_object_get(j, "ts");

	memset(ev, 0, sizeof *ev);
	if (!type || !run || !src || !json_is_integer(off) || !json_is_integer(seq) ||
	    !json_is_integer(ts) || json_integer_value(off) < 1 || json_integer_value(seq) < 1 ||
	    json_integer_value(ts) < 0)
		return sb_seterr(SB_ERR_CORRUPT, "a field is missing or of the wrong type");
	if (sb_event_init(ev, type, run, SB_SRC_HOST, NULL, 0) || sb_source_parse(src, &ev->source))
		return sb_seterr(SB_ERR_CORRUPT, "bad type, run or source");
	ev->offset = (uint64_t)json_integer_value(off);
	ev->seq = (uint64_t)json_integer_value(seq);
	ev->ts_ns = (uint64_t)json_integer_value(ts);
	return SB_OK;
}

/* The payload commitment of line j: its own when redacted, else made from
 * its salt and payload bytes, whose rendering must be its payload. */
static int line_commit(struct vctx *c, json_t *j, uint8_t commit[SB_MERKLE_HASH])
{
	const char *b64 = json_string_value(json_object_get(j, "payload_mp"));
	uint8_t salt[SB_SALT_LEN], *mp;
	size_t len = 0, cap;
	msgpack_object map;
	json_t *shown;
	int rc = SB_OK;

	if (json_is_true(json_object_get(j, "redacted"))) {
		if (hex_exact(json_string_value(json_object_get(j, "commitment")), commit, SB_MERKLE_HASH))
			return sb_seterr(SB_ERR_CORRUPT, "redacted, but no commitment");
		return SB_OK;
	}
	if (!b64 || hex_exact(json_string_value(json_object_get(j, "salt")), salt, SB_SALT_LEN))
		return sb_seterr(SB_ERR_CORRUPT, "no payload_mp or salt");
	cap = strlen(b64);
	if (!(mp = malloc(cap + 1)))
		return SB_ERR_NOMEM;
	if (sodium_base642bin(mp, cap, b64, cap, NULL, &len, NULL, sodium_base64_VARIANT_ORIGINAL)) {
		rc = sb_seterr(SB_ERR_CORRUPT, "payload_mp is not base64");
	} else {
		msgpack_zone_clear(&c->zone);
		if (sb_payload_parse(mp, len, &c->zone, &map))
			rc = sb_seterr(SB_ERR_CORRUPT, "payload_mp is not a msgpack map");
		else if (!(shown = sb_msgpack_to_json(&map)))
			rc = SB_ERR_NOMEM;
		else if (!json_equal(shown, json_object_get(j, "payload")) || (json_decref(shown), 0))
			rc = sb_seterr(SB_ERR_CORRUPT, "payload is not what payload_mp holds");
		else
			json_decref(shown);
	}
	if (!rc)
		sb_tree_commit(salt, mp, len, commit);
	free(mp);
	return rc;
}

/* Checks the order and sequence of ev against its run. */
static int line_order(struct vctx *c, const struct sb_event *ev, uint64_t prev)
{
	struct vrun *r = NULL;

	if (ev->offset <= prev)
		return sb_seterr(SB_ERR_CORRUPT, "offset %llu does not follow offset %llu",
				 (unsigned long long)ev->offset, (unsigned long long)prev);
	if (ev->offset > c->ck.size)
		return sb_seterr(SB_ERR_CORRUPT, "offset %llu is past the checkpoint's tree",
				 (unsigned long long)ev->offset);
	for (size_t i = 0; i < c->nruns && !r; i++)
		if (!strcmp(c->runs[i].run, ev->run))
			r = &c->runs[i];
	if (!r)
		return sb_seterr(SB_ERR_CORRUPT, "run %s is not in the manifest", ev->run);
	if (!c->one && ev->seq != r->last_seq + 1)
		return sb_seterr(SB_ERR_CORRUPT, "run %s: seq %llu after seq %llu (an event is missing or out of place)",
				 ev->run, (unsigned long long)ev->seq, (unsigned long long)r->last_seq);
	r->events++;
	r->last_seq = ev->seq;
	return SB_OK;
}

/* Checks one line (number no) and folds its leaf in. */
static int line_check(struct vctx *c, const char *text, uint64_t no, uint64_t *prev)
{
	uint8_t commit[SB_MERKLE_HASH], leaf[SB_TREE_LEAF_MAX], h[SB_MERKLE_HASH], want[SB_MERKLE_HASH];
	struct sb_event ev;
	json_error_t e;
	json_t *j = json_loads(text, 0, &e);
	int rc;

	if (!j)
		return sb_seterr(SB_ERR_CORRUPT, "events.jsonl line %llu: not JSON: %s",
				 (unsigned long long)no, e.text);
	if (!(rc = line_header(j, &ev)) && !(rc = line_order(c, &ev, *prev)) &&
	    !(rc = line_commit(c, j, commit))) {
		sb_merkle_leaf(leaf, sb_tree_leaf(&ev, commit, leaf), h);
		if (hex_exact(json_string_value(json_object_get(j, "leaf")), want, SB_MERKLE_HASH) ||
		    memcmp(h, want, SB_MERKLE_HASH))
			rc = sb_seterr(SB_ERR_CORRUPT, "its fields do not hash to its leaf");
	}
	if (!rc && json_is_true(json_object_get(j, "redacted")))
		json_array_append_new(c->redacted, json_integer((json_int_t)ev.offset));
	json_decref(j);
	if (rc)
		return sb_seterr(rc, "events.jsonl line %llu: %s", (unsigned long long)no, sb_errmsg(rc));
	if ((rc = sb_merkle_gap(*prev, ev.offset - 1, c->ck.size, gap_cb, c)) ||
	    (rc = sb_merkle_fold_push(&c->fold, ev.offset - 1, ev.offset, h)))
		return rc;
	*prev = ev.offset;
	c->info.events++;
	return SB_OK;
}

/* Reads events.jsonl line by line, then the proof's tail and the root. */
static int events_check(struct vctx *c)
{
	char *line = NULL, want[2 * SB_MERKLE_HASH + 1], got[2 * SB_MERKLE_HASH + 1];
	uint8_t root[SB_MERKLE_HASH];
	size_t cap = 0;
	uint64_t no = 0, prev = 0;
	ssize_t n;
	FILE *f;
	int rc = SB_OK;

	if ((rc = bundle_open(c->dir, "events.jsonl", &f)))
		return rc;
	if ((rc = bundle_open(c->dir, "proof", &c->proof))) {
		fclose(f);
		return rc;
	}
	sb_merkle_fold_init(&c->fold, c->ck.size);
	while (!rc && (n = getline(&line, &cap, f)) > 0)
		rc = line_check(c, line, ++no, &prev);
	free(line);
	fclose(f);
	if (!rc && !no)
		rc = sb_seterr(SB_ERR_CORRUPT, "events.jsonl: no events");
	if (!rc)
		rc = sb_merkle_gap(prev, c->ck.size, c->ck.size, gap_cb, c);
	if (!rc && fgetc(c->proof) != EOF)
		rc = sb_seterr(SB_ERR_CORRUPT, "proof: bytes left after the %llu hashes the events need",
			       (unsigned long long)c->hashes);
	if (!rc && !(rc = sb_merkle_fold_root(&c->fold, root)) &&
	    memcmp(root, c->ck.root, SB_MERKLE_HASH)) {
		sodium_bin2hex(got, sizeof got, root, SB_MERKLE_HASH);
		sodium_bin2hex(want, sizeof want, c->ck.root, SB_MERKLE_HASH);
		rc = sb_seterr(SB_ERR_CORRUPT, "proof: the events and the proof make root %s, the checkpoint's is %s",
			       got, want);
	}
	return rc;
}

/* Checks each blob the manifest lists against its name, and that blobs/
 * holds no other file. */
static int blobs_check(struct vctx *c)
{
	json_t *list = json_object_get(c->manifest, "blobs"), *b;
	char path[4096];
	size_t i, files = 0;
	struct stat dst;
	DIR *d;
	struct dirent *de;
	int rc;

	snprintf(path, sizeof path, "%s/blobs", c->dir);
	if (!lstat(path, &dst) && !S_ISDIR(dst.st_mode))
		return sb_seterr(SB_ERR_CORRUPT, "blobs: not a directory");

	json_array_foreach(list, i, b) {
		const char *key = json_string_value(b);
		uint8_t want[SB_HASH_LEN], got[SB_HASH_LEN];
		crypto_generichash_state st;
		unsigned char buf[65536];
		size_t n;
		FILE *f;
		if (!key || sb_hash_parse(key, want) || sb_hash_is_legacy(want))
			return sb_seterr(SB_ERR_CORRUPT, "manifest.json: blob %zu is not a key", i + 1);
		snprintf(path, sizeof path, "blobs/%s", key);
		if ((rc = bundle_open(c->dir, path, &f)))
			return rc;
		crypto_generichash_init(&st, NULL, 0, SB_HASH_LEN);
		while ((n = fread(buf, 1, sizeof buf, f)) > 0)
			crypto_generichash_update(&st, buf, n);
		fclose(f);
		crypto_generichash_final(&st, got, SB_HASH_LEN);
		if (memcmp(got, want, SB_HASH_LEN))
			return sb_seterr(SB_ERR_CORRUPT, "blobs/%s: its content does not hash to its name", key);
	}
	snprintf(path, sizeof path, "%s/blobs", c->dir);
	if ((d = opendir(path))) {
		while ((de = readdir(d)))
			files += de->d_name[0] != '.';
		closedir(d);
	}
	if (files != json_array_size(list))
		return sb_seterr(SB_ERR_CORRUPT, "blobs: %zu files, the manifest lists %zu", files,
				 json_array_size(list));
	c->info.blobs = files;
	return SB_OK;
}

/* Checks the manifest's counts, ends and redactions against the lines. */
static int counts_check(struct vctx *c)
{
	json_t *red = json_object_get(c->manifest, "redactions"), *r;
	size_t i;

	if (json_integer_value(json_object_get(c->manifest, "events")) != (json_int_t)c->info.events)
		return sb_seterr(SB_ERR_CORRUPT, "manifest.json: %lld events listed, events.jsonl has %llu",
				 (long long)json_integer_value(json_object_get(c->manifest, "events")),
				 (unsigned long long)c->info.events);
	for (i = 0; i < c->nruns; i++) {
		struct vrun *v = &c->runs[i];
		if (json_integer_value(json_object_get(v->m, "events")) != (json_int_t)v->events ||
		    (!c->one && json_integer_value(json_object_get(v->m, "last_seq")) != (json_int_t)v->last_seq))
			return sb_seterr(SB_ERR_CORRUPT, "manifest.json: run %s: %llu events to seq %llu in events.jsonl, not the counts listed",
					 v->run, (unsigned long long)v->events, (unsigned long long)v->last_seq);
	}
	if (json_array_size(red) != json_array_size(c->redacted))
		return sb_seterr(SB_ERR_CORRUPT, "manifest.json: %zu redactions listed, events.jsonl has %zu",
				 json_array_size(red), json_array_size(c->redacted));
	json_array_foreach(red, i, r)
		if (json_integer_value(json_object_get(r, "offset")) !=
		    json_integer_value(json_array_get(c->redacted, i)))
			return sb_seterr(SB_ERR_CORRUPT, "manifest.json: redaction %zu is not line's", i + 1);
	c->info.redacted = json_array_size(red);
	c->info.runs = c->nruns;
	return SB_OK;
}

/* Checks that the checkpoint extends the prior one (prior_len bytes). */
static int prior_check(struct vctx *c, const struct sb_note_key *key, const char *prior,
		       size_t prior_len)
{
	uint8_t proof[SB_MERKLE_PROOF_MAX + 1][SB_MERKLE_HASH];
	struct sb_ckpt old;
	size_t len = 0;
	FILE *f;
	int rc;

	if ((rc = sb_ckpt_verify(prior, prior_len, key, &old)))
		return sb_seterr(rc, "prior %s", sb_errmsg(rc));
	if ((rc = bundle_open(c->dir, "consistency", &f)))
		return sb_seterr(rc, "%s (export with --prior)", sb_errmsg(rc));
	len = fread(proof, 1, sizeof proof, f);
	fclose(f);
	if (len % SB_MERKLE_HASH || len > SB_MERKLE_PROOF_MAX * SB_MERKLE_HASH)
		return sb_seterr(SB_ERR_CORRUPT, "consistency: %zu bytes is not a list of hashes", len);
	if (!sb_merkle_consistency_check(old.size, c->ck.size, old.root, c->ck.root, proof,
					 len / SB_MERKLE_HASH))
		return sb_seterr(SB_ERR_CORRUPT, "consistency: the checkpoint (tree %llu) does not extend the prior one (tree %llu): the history differs",
				 (unsigned long long)c->ck.size, (unsigned long long)old.size);
	c->info.prior_size = old.size;
	return SB_OK;
}

int sb_bundle_verify(const char *dir, const struct sb_note_key *key, const char *prior,
		     size_t prior_len, struct sb_bundle_info *info)
{
	struct vctx c = {.dir = dir};
	const struct sb_note_key *use;
	struct sb_note_key own;
	int rc;

	msgpack_zone_init(&c.zone, 4096);
	if (!(c.redacted = json_array())) {
		rc = SB_ERR_NOMEM;
		goto out;
	}
	if (!(rc = bundle_key(&c, key, &own, &use)) && !(rc = ckpt_check(&c, use)) &&
	    !(rc = manifest_read(&c)) && !(rc = events_check(&c)) && !(rc = blobs_check(&c)) &&
	    !(rc = counts_check(&c)) && prior)
		rc = prior_check(&c, use, prior, prior_len);
	c.info.tree_size = c.ck.size;
	memcpy(c.info.root, c.ck.root, SB_MERKLE_HASH);
	if (info)
		*info = c.info;
out:
	if (c.proof)
		fclose(c.proof);
	json_decref(c.manifest);
	json_decref(c.redacted);
	free(c.runs);
	msgpack_zone_destroy(&c.zone);
	return rc;
}
