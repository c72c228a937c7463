/* common.h - what the harness adapters (opencode.c, codex.c, claude.c
 * and the two in adapter.c) share: building an argv or an env, and, for
 * translators, cutting text and closing a turn the harness left open. It
 * calls no adapter and not the table (adapter.c), so the adapters and the
 * table both build on it.
 */
#ifndef SB_HARNESS_COMMON_H
#define SB_HARNESS_COMMON_H

#include <jansson.h>
#include <stddef.h>

#include "engine/harness/adapter.h"

/* For adapters: appends s to out (borrowed, must outlive out's use).
 * Errors: SB_ERR_TOOBIG (full). */
int sb_harness_args_add(struct sb_harness_args *out, const char *s);

/* For adapters: appends a printf-made entry, kept in out->buf. Errors:
 * SB_ERR_TOOBIG. */
int sb_harness_args_addf(struct sb_harness_args *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* For translators: text cut to at most max bytes on a UTF-8 boundary
 * (with "..." when cut), as a new JSON string (NULL when out of memory). */
json_t *sb_harness_text(const char *s, size_t n, size_t max);

/* For translators: a one-line summary of a tool's input object (its
 * fields as k=v, strings cut), at most max bytes, as a new JSON string. */
json_t *sb_harness_summary(json_t *input, size_t max);

/* For translators, at the harness's end: when *open (it ended inside a
 * turn), clears it and emits agent.turn.completed {turn, cut: true}. */
void sb_harness_turn_cut(int *open, int turn, sb_harness_emit_fn emit, void *ctx);

#endif
