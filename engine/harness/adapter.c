/* adapter.c - the table of harness adapters, the reference and command
 * adapters (see adapter.h). */
#include "engine/harness/adapter.h"

#include <string.h>

#include "engine/error.h"
#include "engine/harness/common.h"

static const struct sb_harness_ops *const adapters[] = {
    &sb_harness_reference,
    &sb_harness_command,
    &sb_harness_opencode,
    &sb_harness_codex,
    &sb_harness_claude_code,
};

const struct sb_harness_ops *sb_harness_find(const char *name)
{
	for (size_t i = 0; i < sizeof adapters / sizeof adapters[0]; i++)
		if (!strcmp(adapters[i]->name, name))
			return adapters[i];
	return NULL;
}

/* --- reference: tools/harness.c, started as [harness, prompt]; it writes
 * its events to $SANBOX_EVENTS itself and continues its conversation from
 * $SANBOX_CONVERSATION. --- */

static int ref_argv(const struct sb_harness_ctx *c, struct sb_harness_args *out)
{
	int rc;

	if ((rc = sb_harness_args_add(out, c->harness)) ||
	    (rc = sb_harness_args_add(out, c->prompt)))
		return rc;
	return SB_OK;
}

const struct sb_harness_ops sb_harness_reference = {
    .name = "reference",
    .argv = ref_argv,
};

/* --- command: any program. The harness command is split at spaces into
 * words, the prompt is its last argument and $SANBOX_PROMPT; a resumed
 * run has SANBOX_RESUME=1. It writes its events to $SANBOX_EVENTS. --- */

static int cmd_argv(const struct sb_harness_ctx *c, struct sb_harness_args *out)
{
	const char *p = c->harness;
	int rc;

	while (*p) {
		size_t n = strcspn(p, " \t");
		if (n && (rc = sb_harness_args_addf(out, "%.*s", (int)n, p)))
			return rc;
		p += n;
		p += strspn(p, " \t");
	}
	if (!out->n)
		return sb_seterr(SB_ERR_INVAL, "the template's harness command is empty");
	return sb_harness_args_add(out, c->prompt);
}

static int cmd_env(const struct sb_harness_ctx *c, struct sb_harness_args *out)
{
	int rc;

	if ((rc = sb_harness_args_addf(out, "SANBOX_PROMPT=%s", c->prompt)))
		return rc;
	return c->resume ? sb_harness_args_add(out, "SANBOX_RESUME=1") : SB_OK;
}

const struct sb_harness_ops sb_harness_command = {
    .name = "command",
    .argv = cmd_argv,
    .env = cmd_env,
};
