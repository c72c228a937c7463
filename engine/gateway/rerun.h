/* rerun.h - a re-run's recorded model calls, and the comparison of each
 * new request with the recorded one (see SPEC.md, "Re-runs").
 *
 * A re-run's gateway answers its k-th model call with the k-th recorded
 * answer of the run it re-runs, after comparing the request with the
 * recorded k-th request: the model, the instructions or system prompt,
 * the messages or input, and the tools (not the headers, ids, bounds or
 * stream options). Thread-safe:
 * calls take their turn under the set's lock.
 */
#ifndef SB_RERUN_H
#define SB_RERUN_H

#include <stddef.h>
#include <stdint.h>

#include "engine/gateway/upstream.h"

typedef struct sb_rerun sb_rerun;

#define SB_RERUN_PATH_MAX 128 /* a divergence's JSON path and its NUL */

/* One recorded call: the request as it was forwarded and the answer as
 * it was received. */
struct sb_rerun_call {
	unsigned api; /* SB_API_* */
	int stream;
	long status;
	const char *request, *answer;
	size_t request_len, answer_len;
};

/* Where a re-run left its record: the call (from 1, numbered in the
 * whole record) and the first field that differs, a JSON path such as
 * "messages[3].content" ("" for a call past the recorded ones). */
struct sb_rerun_divergence {
	uint64_t call;
	char path[SB_RERUN_PATH_MAX];
};

/* Makes a set of n recorded calls (copied), in their order; skipped: the
 * recorded calls before calls[0] (a re-run from an offset past them, or
 * taken up after making them), so that a divergence names its call by its
 * place in the whole record (skipped + 1 for calls[0]); live: go on to the
 * provider after a divergence. The caller frees it with
 * sb_rerun_free (the gateway does, once it was given it). Errors:
 * SB_ERR_NOMEM. */
int sb_rerun_new(const struct sb_rerun_call *calls, size_t n, uint64_t skipped, int live,
		 sb_rerun **out);

/* Frees rr (NULL is fine). */
void sb_rerun_free(sb_rerun *rr);

/* 1 when rr goes on to the provider after a divergence. */
int sb_rerun_live(const sb_rerun *rr);

/* Takes the next call's turn for request body (len bytes) of dialect api:
 * SB_OK and *call, the recorded call's answer source for
 * sb_upstream_record (valid while rr is); or SB_ERR_STATE when it departs
 * from the record (its turn taken; *d says where), and on every call
 * after one that did (d->call 0 then). Errors: SB_ERR_STATE, SB_ERR_NOMEM. */
int sb_rerun_take(sb_rerun *rr, unsigned api, const char *body, size_t len,
		  const struct sb_rerun_call **call, struct sb_rerun_divergence *d);

/* Compares two request bodies on what a re-run keeps equal (model,
 * instructions, system, messages, input, tools, in that order) and writes the first
 * differing field's path into path ("" when equal; a body that is not JSON differs at
 * ""). Returns 1 when they differ, 0 when not. */
int sb_rerun_diff(const char *a, size_t alen, const char *b, size_t blen,
		  char path[SB_RERUN_PATH_MAX]);

#endif
