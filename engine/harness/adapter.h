/* adapter.h - harness adapters: how a template's harness program is started
 * and how what it prints becomes Sanbox events. An ops table with named
 * fields, one per kind of harness (SPEC.md "Harness adapters").
 *
 * The host asks an adapter for the harness's argv and the environment it
 * needs (derived from the run's plan, so the record and the guest's SPEC
 * never differ); the guest's sanbox-adapt (tools/adapt.c) runs the harness
 * under an adapter that has a translator, passes its stdout through, and
 * writes the events the translator makes to $SANBOX_EVENTS, where they are
 * recorded as any harness line is: source harness, never trusted. What a
 * harness says it spent goes into its events as a `claim`, never as usage:
 * the gateway alone records usage.
 */
#ifndef SB_HARNESS_ADAPTER_H
#define SB_HARNESS_ADAPTER_H

#include <jansson.h>
#include <stddef.h>

#define SB_ADAPTER_NAME_MAX 32
#define SB_ADAPTER_ARGS_MAX 40 /* entries of an argv or an env an adapter adds */
#define SB_ADAPT_PATH	    "/usr/bin/sanbox-adapt" /* the translator in the guest */

/* What an adapter builds from. Strings are borrowed for the call. */
struct sb_harness_ctx {
	const char *harness;  /* the template's harness command */
	const char *prompt;   /* the run's prompt */
	const char *model;    /* the run's model (the gateway's name for it) */
	const char *base_url; /* the gateway as the harness sees it: http://H:P/v1 */
	int resume;	      /* 1: the harness starts again on a disk it ran on
			       * (a resume or a fork): it continues its session */
};

/* What an adapter fills: entries borrowed by argv/env point into buf. */
struct sb_harness_args {
	const char *v[SB_ADAPTER_ARGS_MAX + 1]; /* NULL-terminated */
	size_t n;
	char buf[16384]; /* the bytes of the entries that are made, not borrowed */
	size_t used;
};

/* An event the translator made: type and payload (a JSON object, the
 * callee's reference to drop). ctx is the caller's. */
typedef void (*sb_harness_emit_fn)(void *ctx, const char *type, json_t *payload);

struct sb_harness_ops {
	const char *name; /* "reference" */
	/* Fills out with the harness's argv for c (a resume's continues its
	 * own session). Errors: SB_ERR_TOOBIG (c's strings do not fit). */
	int (*argv)(const struct sb_harness_ctx *c, struct sb_harness_args *out);
	/* Fills out with the K=V entries the harness needs beyond what every
	 * run gets (the gateway's URL and the virtual key come as
	 * OPENAI_BASE_URL, ANTHROPIC_BASE_URL, OPENAI_API_KEY and
	 * ANTHROPIC_API_KEY): its own configuration, offline switches. NULL:
	 * none. Errors: SB_ERR_TOOBIG. */
	int (*env)(const struct sb_harness_ctx *c, struct sb_harness_args *out);
	/* The translator, in the guest (NULL: the harness writes its events
	 * itself): a state for one run of the harness, NULL when out of
	 * memory; each line it printed on stdout (without its newline, n
	 * bytes, any bytes at all); the end (the harness exited with
	 * status); the state freed. */
	void *(*reader_new)(void);
	void (*read_line)(void *st, const char *line, size_t n, sb_harness_emit_fn emit,
			  void *ctx);
	void (*read_end)(void *st, int status, sb_harness_emit_fn emit, void *ctx);
	void (*reader_free)(void *st);
};

extern const struct sb_harness_ops sb_harness_reference, sb_harness_command,
    sb_harness_opencode, sb_harness_codex, sb_harness_claude_code;

/* The adapter called name, or NULL when there is none. */
const struct sb_harness_ops *sb_harness_find(const char *name);

#endif
