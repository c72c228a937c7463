/* models.h - model access settings: providers, models and their prices.
 *
 * The settings are the built-in ones (the model stub, sanbox-model-stub,
 * which the daemon starts itself) merged with STATE_DIR/models.json when it
 * exists: its providers and models add to or replace the built-in ones by
 * name, and its defaults replace the built-in defaults.
 *
 *   {
 *     "default_model": "stub/scripted",
 *     "default_budget_usd": 1.0,
 *     "providers": {
 *       "openai": {"base_url": "https://api.openai.com/v1", "api": "openai",
 *                  "key_secret": "OPENAI_API_KEY"}
 *     },
 *     "models": {
 *       "openai/gpt-4o": {"provider": "openai", "upstream": "gpt-4o",
 *                         "input": 2.5, "output": 10, "cached": 1.25,
 *                         "max_output": 4096}
 *     }
 *   }
 *
 * Prices are USD per million tokens (input, output, and cached input,
 * which defaults to the input price); they are kept as integer nano-USD per
 * million tokens so every cost is exact. A model without a price is not a
 * model: runs may only name models listed here.
 */
#ifndef SB_MODELS_H
#define SB_MODELS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "engine/gateway/secrets.h"

#define SB_MODEL_NAME_MAX    96
#define SB_PROVIDER_NAME_MAX 32
#define SB_URL_MAX	     512

#define SB_API_OPENAI	 1u /* POST /chat/completions */
#define SB_API_ANTHROPIC 2u /* POST /messages */
#define SB_API_RESPONSES 4u /* POST /responses (OpenAI) */

struct sb_provider {
	char name[SB_PROVIDER_NAME_MAX];
	char base_url[SB_URL_MAX];	     /* ".../v1"; "" for the built-in stub */
	unsigned apis;			     /* SB_API_* bits */
	char key_secret[SB_SECRET_NAME_MAX]; /* secret holding its API key; "" = none */
	int builtin;		     /* 1: the model stub, started by the daemon */
	char script_dir[SB_URL_MAX]; /* built-in stub: its scripts ("" = its own) */
};

struct sb_model {
	char name[SB_MODEL_NAME_MAX];	  /* as runs name it: "stub/scripted" */
	char upstream[SB_MODEL_NAME_MAX]; /* as the provider names it */
	char provider[SB_PROVIDER_NAME_MAX];
	uint64_t in_price, out_price, cached_price; /* nano-USD per million tokens */
	uint64_t max_output; /* max_tokens given to requests that set none */
};

struct sb_models {
	struct sb_provider *providers;
	size_t nproviders;
	struct sb_model *models;
	size_t nmodels;
	char default_model[SB_MODEL_NAME_MAX];
	uint64_t default_budget_nusd;
};

/* Loads the built-in settings merged with home/models.json (if present)
 * into *out (the caller frees with sb_models_free). Errors: SB_ERR_INVAL
 * (the file is not valid JSON or breaks a rule: the detail names the file
 * and the field), SB_ERR_IO, SB_ERR_NOMEM. */
int sb_models_load(const char *home, struct sb_models **out);

/* Returns the model called name, or NULL. Borrowed from ms. */
const struct sb_model *sb_models_find(const struct sb_models *ms, const char *name);

/* Returns the provider called name, or NULL. Borrowed from ms. */
const struct sb_provider *sb_models_provider(const struct sb_models *ms,
					     const char *name);

/* Frees ms (NULL is fine). */
void sb_models_free(struct sb_models *ms);

/* Cost in nano-USD of the tokens at model m's prices, rounded up to the
 * next nano-USD: input tokens (cached ones among them priced as cached),
 * output tokens. Saturates at UINT64_MAX. */
uint64_t sb_model_cost(const struct sb_model *m, uint64_t input, uint64_t cached,
		       uint64_t output);

/* Finds the model stub: $SANBOX_STUB_BIN, else sanbox-model-stub beside
 * the running program or one directory up; writes its path into buf.
 * Errors: SB_ERR_UNAVAIL. */
int sb_stub_find(char *buf, size_t cap);

/* Starts the model stub (sanbox-model-stub beside the running program) on
 * an ephemeral loopback port, with scripts from script_dir (NULL or "":
 * its own), and writes its base URL (http://127.0.0.1:PORT/v1) into url
 * and its pid into *pid. It ends when the calling thread ends (it is
 * given this process as its --parent). The caller ends it with
 * sb_stub_stop. Errors:
 * SB_ERR_UNAVAIL (not found, or it did not start: the detail says why),
 * SB_ERR_IO. */
int sb_stub_start(const char *script_dir, pid_t *pid, char url[SB_URL_MAX]);

/* Ends a stub started by sb_stub_start (SIGTERM, then SIGKILL after 2 s)
 * and reaps it. */
void sb_stub_stop(pid_t pid);

#endif
