/* bundle.h - audit bundles: a run's (or a group's) events with the blobs
 * they name, its plan, a signed checkpoint and one multi-leaf inclusion
 * proof, which a third party checks offline (SPEC.md, Audit).
 *
 * A bundle is a directory (or a tar of one, made by the CLI) holding
 * events.jsonl, blobs/KEY, plan.json, manifest.json, checkpoint, key,
 * proof and, with a prior checkpoint, prior-checkpoint and consistency.
 * Both export and verify stream the events: memory does not grow with
 * them (the manifest's lists grow with runs, blobs and redactions).
 *
 * Bundles sit above the log and the projections: an export reads the log
 * and the tree projection's tiles (projections/tree.h), and neither
 * includes anything of audit/.
 */
#ifndef SB_BUNDLE_H
#define SB_BUNDLE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/log/checkpoint.h"
#include "engine/log/log.h"

#define SB_BUNDLE_RUNS_MAX 256 /* each run is read in a transaction of its own */

/* What an export holds. */
struct sb_export {
	const char *const *runs; /* run ids (1 to SB_BUNDLE_RUNS_MAX) */
	size_t nruns;
	const char *group;	 /* the group exported, or NULL */
	json_t *runinfo;	 /* per run id: {name, group, template, template_hash}, or NULL */
	const char *const *redact; /* event types (or prefixes at a dot) or offsets */
	size_t nredact;
	uint64_t only;		 /* a one-event proof: this offset alone (0: every event) */
	const struct sb_note_key *key; /* signs the checkpoint */
	const char *prior;	 /* an older checkpoint note (prior_len bytes), or NULL */
	size_t prior_len;
	uint64_t wait_ms;	 /* how long to wait for the tree to reach the runs' events */
};

/* What an export or a verification found. */
struct sb_bundle_info {
	uint64_t events, redacted, blobs, runs, tree_size;
	uint8_t root[SB_MERKLE_HASH];
	uint64_t prior_size; /* with a prior checkpoint, its size (else 0) */
	int prior_differs;   /* export: the prior's root is not this log's at its size */
};

/* Writes the bundle of x from log into directory dir, which must exist
 * and be empty; *info (may be NULL) gets what it holds. Errors:
 * SB_ERR_NOTFOUND (a run with no events, or the offset not in the run),
 * SB_ERR_STATE (the tree does not reach the runs' events within
 * x->wait_ms), SB_ERR_INVAL (a bad prior checkpoint), SB_ERR_IO,
 * SB_ERR_NOMEM, SB_ERR_CORRUPT. */
int sb_bundle_export(sb_log *log, const struct sb_export *x, const char *dir,
		     struct sb_bundle_info *info);

/* Checks the bundle in directory dir: the checkpoint's signature by key
 * (NULL: the bundle's own key file, which proves only that the bundle is
 * whole), every event line, the blobs, the proof against the checkpoint,
 * completeness and the manifest's counts and redactions; with prior (an
 * older checkpoint note, prior_len bytes), that the bundle's checkpoint
 * extends it. Fills *info. Errors: SB_ERR_CORRUPT or SB_ERR_DENIED with a
 * detail naming the first file, line or proof that fails; SB_ERR_IO,
 * SB_ERR_NOMEM. */
int sb_bundle_verify(const char *dir, const struct sb_note_key *key, const char *prior,
		     size_t prior_len, struct sb_bundle_info *info);

#endif
