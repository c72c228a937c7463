/* access.h - a run's model access and secrets, resolved before it starts.
 *
 * From the run spec (SPEC.md, "Control API"): model (default: the
 * settings' default_model), models (more models the run may use), budget_nusd
 * (0: the settings' default_budget_usd), on_budget ("stop", the default, or
 * "continue"), and secrets (["NAME", "NAME:env", "NAME:model"]). Every
 * model must be in the model settings (engine/models.h), so every call has
 * a price; the key of each model's provider (its key_secret) is granted to
 * the run with scope model. Resolution reads and decrypts the secrets it
 * grants, and starts the built-in stub when a model needs it. Nothing here
 * writes events; the run manager records the result.
 */
#ifndef SB_ACCESS_H
#define SB_ACCESS_H

#include <msgpack.h>

#include "engine/mpack.h"
#include <stddef.h>
#include <stdint.h>

#include "engine/gateway/gateway.h"
#include "engine/gateway/models.h"
#include "engine/gateway/secrets.h"
#include "engine/gateway/stubs.h"
#include "engine/template.h"

#define SB_ACCESS_MODELS  16 /* models a run may name */
#define SB_ACCESS_SECRETS 32 /* secrets a run may be granted */

struct sb_access_grant {
	char name[SB_SECRET_NAME_MAX];
	int model_scope;	 /* 1: gateway only; 0: the harness's environment */
	struct sb_secret *value; /* decrypted (the access owns it); NULL until armed */
};

struct sb_access {
	char model[SB_MODEL_NAME_MAX]; /* the run's model (SANBOX_MODEL) */
	struct sb_gateway_model models[SB_ACCESS_MODELS];
	size_t nmodels;
	uint64_t budget_nusd;
	uint64_t group_budget_nusd; /* its group's budget, shared with the
				     * group's runs (0: none) */
	int stop_on_budget;
	struct sb_access_grant grants[SB_ACCESS_SECRETS];
	size_t ngrants;
};

/* Resolves spec into a (free it with sb_access_free, also on error), with
 * the template t's default model and secrets (a secret the spec names too
 * takes the spec's scope), and arms it (sb_access_arm). May block (files,
 * a stub starting): call it off the loop.
 * Errors: SB_ERR_INVAL (a bad field, an unknown model or one without a
 * price, a secret named twice: the detail says which), SB_ERR_NOTFOUND (a
 * secret that is not set), SB_ERR_CORRUPT (a secret that does not open),
 * SB_ERR_UNAVAIL (a provider that cannot be started), SB_ERR_NOMEM. */
int sb_access_resolve(const char *home, sb_stubs *stubs, const msgpack_object *spec,
		      const struct sb_template *t, struct sb_access *a);

/* Reads the access a run recorded (the fields sb_access_pack_policy packs,
 * in the map policy) into a, names and prices only: no provider, no secret
 * value. Errors: SB_ERR_CORRUPT (a field missing or malformed). */
int sb_access_from_record(const msgpack_object *policy, struct sb_access *a);

/* Arms a for a start: each model's provider (URL, APIs, key) from the
 * current model settings (its price stays the one a holds), each granted
 * secret's value. May block: call it off the loop. Errors: as
 * sb_access_resolve. */
int sb_access_arm(const char *home, sb_stubs *stubs, struct sb_access *a);

/* Packs the policy fields of a into the caller's map m: "model", "models",
 * "prices" ({model: {input, output, cached}} in nano-USD per million
 * tokens), "budget_nusd", "group_budget_nusd" (only when a group budget is
 * set), "on_budget" and "secrets" ([{name, scope}]). No secret value is
 * packed. Errors are m's (sb_mapw_end). */
void sb_access_pack_policy(const struct sb_access *a, sb_mapw *m);

/* Packs the payload of grant i's secret.granted event {name, scope} into a
 * map of its own. Errors: as sb_mapw_end. */
int sb_access_pack_grant(const struct sb_access *a, size_t i, msgpack_packer *pk);

/* Number of environment entries sb_access_pack_env packs. */
size_t sb_access_env_count(const struct sb_access *a);

/* Packs the harness's environment entries ("NAME=value" strings): the
 * run's model, the virtual key as OPENAI_API_KEY and ANTHROPIC_API_KEY, and
 * each env-scope secret. */
void sb_access_pack_env(const struct sb_access *a, const char *vkey, msgpack_packer *pk);

/* Wipes and frees what a holds. */
void sb_access_free(struct sb_access *a);

#endif
