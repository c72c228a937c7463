/* access.c - resolving a run's models, budget and secrets (see access.h).
 *
 * Resolution is in two steps: the names (models, secrets and their scopes,
 * budget, policy: what the record keeps), then arming (each model's price
 * and provider, each secret's value: what a start needs). A run that starts
 * again from its record (a restarted daemon) arms the names it recorded.
 */
#include "engine/gateway/access.h"

#include <stdio.h>
#include <string.h>

#include "engine/error.h"
#include "engine/mpack.h"
#include "engine/spec.h"

static struct sb_access_grant *grant_find(struct sb_access *a, const char *name)
{
	for (size_t i = 0; i < a->ngrants; i++)
		if (!strcmp(a->grants[i].name, name))
			return &a->grants[i];
	return NULL;
}

/* Grants secret name with the scope (its value comes when armed). */
static int grant_add(struct sb_access *a, const char *name, int model_scope)
{
	struct sb_access_grant *g;

	if (!sb_secret_name_ok(name))
		return sb_seterr(SB_ERR_INVAL, "'%.64s' is not a secret name",
				 name);
	if (grant_find(a, name))
		return sb_seterr(SB_ERR_INVAL, "secret %s is granted twice", name);
	if (a->ngrants == SB_ACCESS_SECRETS)
		return sb_seterr(SB_ERR_INVAL, "at most %d secrets",
				 SB_ACCESS_SECRETS);
	g = &a->grants[a->ngrants++];
	memset(g, 0, sizeof *g);
	snprintf(g->name, sizeof g->name, "%s", name);
	g->model_scope = model_scope;
	return SB_OK;
}

/* Parses "NAME", "NAME:env" or "NAME:model" of len bytes; from_template:
 * skipped when the spec granted it already. */
static int grant_parse(struct sb_access *a, const char *s, size_t len, int from_template)
{
	char buf[SB_SECRET_NAME_MAX + 8], *colon;
	int model_scope = 0;

	if (len >= sizeof buf)
		return sb_seterr(SB_ERR_INVAL, "secret '%.*s...' is too long", 20,
				 s);
	memcpy(buf, s, len);
	buf[len] = 0;
	if ((colon = strchr(buf, ':'))) {
		*colon++ = 0;
		if (!strcmp(colon, "model"))
			model_scope = 1;
		else if (strcmp(colon, "env"))
			return sb_seterr(
			    SB_ERR_INVAL,
			    "secret %s: scope must be env or model, not '%s'", buf,
			    colon);
	}
	if (from_template && grant_find(a, buf))
		return SB_OK;
	return grant_add(a, buf, model_scope);
}

/* Adds model name with its price from the settings (once). */
static int model_name_add(struct sb_access *a, const struct sb_models *ms,
			  const char *name)
{
	const struct sb_model *m = sb_models_find(ms, name);

	for (size_t i = 0; i < a->nmodels; i++)
		if (!strcmp(a->models[i].model.name, name))
			return SB_OK; /* named twice: once is enough */
	if (!m)
		return sb_seterr(SB_ERR_INVAL,
				 "unknown model '%s' (models are set in models.json in the "
				 "state directory)",
				 name);
	if (a->nmodels == SB_ACCESS_MODELS)
		return sb_seterr(SB_ERR_INVAL, "at most %d models",
				 SB_ACCESS_MODELS);
	memset(&a->models[a->nmodels], 0, sizeof a->models[0]);
	a->models[a->nmodels++].model = *m;
	return SB_OK;
}

/* Gives model gm its provider from the settings: URL, APIs and key (the
 * provider's key secret granted with scope model when not yet granted). */
static int model_arm(struct sb_access *a, sb_stubs *stubs, const struct sb_models *ms,
		     struct sb_gateway_model *gm)
{
	const struct sb_model *m = sb_models_find(ms, gm->model.name);
	const struct sb_provider *p;
	int rc;

	if (!m || !(p = sb_models_provider(ms, m->provider)))
		return sb_seterr(
		    SB_ERR_INVAL,
		    "unknown model '%s' (models are set in models.json in the state "
		    "directory)",
		    gm->model.name);
	/* the price stays the one resolved (recorded) for the run */
	snprintf(gm->model.upstream, sizeof gm->model.upstream, "%s", m->upstream);
	snprintf(gm->model.provider, sizeof gm->model.provider, "%s", m->provider);
	gm->model.max_output = m->max_output;
	gm->apis = p->apis;
	gm->key = NULL;
	if (p->builtin && (rc = sb_stubs_url(stubs, p->script_dir, gm->base_url)))
		return rc;
	if (!p->builtin)
		snprintf(gm->base_url, sizeof gm->base_url, "%s", p->base_url);
	if (p->key_secret[0] && !grant_find(a, p->key_secret) &&
	    (rc = grant_add(a, p->key_secret, 1)))
		return rc;
	return SB_OK;
}

int sb_access_arm(const char *home, sb_stubs *stubs, struct sb_access *a)
{
	struct sb_models *ms = NULL;
	int rc;

	if ((rc = sb_models_load(home, &ms)))
		return rc;
	for (size_t i = 0; rc == SB_OK && i < a->nmodels; i++)
		rc = model_arm(a, stubs, ms, &a->models[i]);
	for (size_t i = 0; rc == SB_OK && i < a->ngrants; i++)
		if (!a->grants[i].value)
			rc = sb_secret_get(home, a->grants[i].name, &a->grants[i].value);
	for (size_t i = 0; rc == SB_OK && i < a->nmodels; i++) {
		const struct sb_provider *p = sb_models_provider(
		    ms, sb_models_find(ms, a->models[i].model.name)->provider);
		if (p->key_secret[0])
			a->models[i].key = grant_find(a, p->key_secret)->value->value;
	}
	sb_models_free(ms);
	return rc;
}

int sb_access_resolve(const char *home, sb_stubs *stubs, const msgpack_object *spec,
		      const struct sb_template *t, struct sb_access *a)
{
	const msgpack_object *models, *secrets;
	struct sb_models *ms = NULL;
	char policy[16] = "";
	uint64_t budget, group_budget;
	int rc;

	memset(a, 0, sizeof *a);
	if ((rc = sb_spec_str(spec, "model", a->model, sizeof a->model)) ||
	    (rc = sb_spec_str(spec, "on_budget", policy, sizeof policy)) ||
	    (rc = sb_spec_strs(spec, "models", SB_ACCESS_MODELS, &models)) ||
	    (rc = sb_spec_strs(spec, "secrets", SB_ACCESS_SECRETS, &secrets)) ||
	    (rc = sb_spec_u64(spec, "budget_nusd", UINT64_MAX / 4, &budget)) ||
	    (rc = sb_spec_u64(spec, "group_budget_nusd", UINT64_MAX / 4, &group_budget)))
		return rc;
	a->group_budget_nusd = group_budget;
	if (policy[0] && strcmp(policy, "stop") && strcmp(policy, "continue"))
		return sb_seterr(SB_ERR_INVAL,
				 "on_budget must be stop or continue");
	a->stop_on_budget = strcmp(policy, "continue") != 0;
	if ((rc = sb_models_load(home, &ms)))
		return rc;
	a->budget_nusd = budget ? budget : ms->default_budget_nusd;
	if (!a->model[0])
		snprintf(a->model, sizeof a->model, "%s",
			 t->model[0] ? t->model : ms->default_model);
	for (uint32_t i = 0; rc == SB_OK && secrets && i < secrets->via.array.size; i++)
		rc = grant_parse(a, secrets->via.array.ptr[i].via.str.ptr,
				 secrets->via.array.ptr[i].via.str.size, 0);
	for (size_t i = 0; rc == SB_OK && i < t->nsecrets; i++)
		rc = grant_parse(a, t->secrets[i], strlen(t->secrets[i]), 1);
	if (rc == SB_OK)
		rc = model_name_add(a, ms, a->model);
	for (uint32_t i = 0; rc == SB_OK && models && i < models->via.array.size; i++) {
		const msgpack_object *n = &models->via.array.ptr[i];
		char name[SB_MODEL_NAME_MAX];
		if (n->via.str.size >= sizeof name) {
			rc = sb_seterr(SB_ERR_INVAL, "a model name is too long");
			break;
		}
		memcpy(name, n->via.str.ptr, n->via.str.size);
		name[n->via.str.size] = 0;
		rc = model_name_add(a, ms, name);
	}
	sb_models_free(ms);
	return rc ? rc : sb_access_arm(home, stubs, a);
}

/* Copies string o into buf; 0, or -1 when it is not a string that fits. */
static int obj_str(const msgpack_object *o, char *buf, size_t cap)
{
	if (!o || o->type != MSGPACK_OBJECT_STR || o->via.str.size >= cap ||
	    memchr(o->via.str.ptr, 0, o->via.str.size))
		return -1;
	memcpy(buf, o->via.str.ptr, o->via.str.size);
	buf[o->via.str.size] = 0;
	return 0;
}

int sb_access_from_record(const msgpack_object *p, struct sb_access *a)
{
	const msgpack_object *models = sb_map_get(p, "models"),
			     *prices = sb_map_get(p, "prices");
	const msgpack_object *secrets = sb_map_get(p, "secrets");
	char policy[16];

	memset(a, 0, sizeof *a);
	if (sb_map_str(p, "model", a->model, sizeof a->model) <= 0 ||
	    sb_map_str(p, "on_budget", policy, sizeof policy) <= 0 || !models ||
	    models->type != MSGPACK_OBJECT_ARRAY ||
	    models->via.array.size > SB_ACCESS_MODELS || !prices ||
	    prices->type != MSGPACK_OBJECT_MAP || !secrets ||
	    secrets->type != MSGPACK_OBJECT_ARRAY ||
	    secrets->via.array.size > SB_ACCESS_SECRETS)
		return sb_seterr(SB_ERR_CORRUPT,
				 "the recorded model access is incomplete");
	a->budget_nusd = sb_map_u64(p, "budget_nusd", 0);
	a->group_budget_nusd = sb_map_u64(p, "group_budget_nusd", 0);
	a->stop_on_budget = strcmp(policy, "continue") != 0;
	for (uint32_t i = 0; i < models->via.array.size; i++) {
		struct sb_model *m = &a->models[a->nmodels].model;
		const msgpack_object *pr;
		if (obj_str(&models->via.array.ptr[i], m->name, sizeof m->name) ||
		    !(pr = sb_map_get(prices, m->name)))
			return sb_seterr(SB_ERR_CORRUPT, "recorded model %u has no price",
					 i);
		m->in_price = sb_map_u64(pr, "input", 0);
		m->out_price = sb_map_u64(pr, "output", 0);
		m->cached_price = sb_map_u64(pr, "cached", 0);
		a->nmodels++;
	}
	for (uint32_t i = 0; i < secrets->via.array.size; i++) {
		struct sb_access_grant *g = &a->grants[a->ngrants];
		const msgpack_object *s = &secrets->via.array.ptr[i];
		char scope[8];
		if (obj_str(sb_map_get(s, "name"), g->name, sizeof g->name) ||
		    obj_str(sb_map_get(s, "scope"), scope, sizeof scope))
			return sb_seterr(SB_ERR_CORRUPT,
					 "recorded secret %u is malformed", i);
		g->model_scope = !strcmp(scope, "model");
		a->ngrants++;
	}
	return SB_OK;
}

void sb_access_pack_policy(const struct sb_access *a, sb_mapw *m)
{
	msgpack_packer *pk;
	sb_mapw prices, price;

	sb_mapw_str(m, "model", a->model);
	pk = sb_mapw_key(m, "models");
	msgpack_pack_array(pk, a->nmodels);
	for (size_t i = 0; i < a->nmodels; i++)
		sb_pack_str(pk, a->models[i].model.name);
	sb_mapw_begin(&prices, sb_mapw_key(m, "prices"));
	for (size_t i = 0; i < a->nmodels; i++) {
		const struct sb_model *mo = &a->models[i].model;
		sb_mapw_begin(&price, sb_mapw_key(&prices, mo->name));
		sb_mapw_u64(&price, "input", mo->in_price);
		sb_mapw_u64(&price, "output", mo->out_price);
		sb_mapw_u64(&price, "cached", mo->cached_price);
		sb_mapw_end(&price);
	}
	sb_mapw_end(&prices);
	sb_mapw_u64(m, "budget_nusd", a->budget_nusd);
	if (a->group_budget_nusd)
		sb_mapw_u64(m, "group_budget_nusd", a->group_budget_nusd);
	sb_mapw_str(m, "on_budget", a->stop_on_budget ? "stop" : "continue");
	pk = sb_mapw_key(m, "secrets");
	msgpack_pack_array(pk, a->ngrants);
	for (size_t i = 0; i < a->ngrants; i++)
		sb_access_pack_grant(a, i, pk);
}

int sb_access_pack_grant(const struct sb_access *a, size_t i, msgpack_packer *pk)
{
	sb_mapw m;

	sb_mapw_begin(&m, pk);
	sb_mapw_str(&m, "name", a->grants[i].name);
	sb_mapw_str(&m, "scope", a->grants[i].model_scope ? "model" : "env");
	return sb_mapw_end(&m);
}

size_t sb_access_env_count(const struct sb_access *a)
{
	size_t n = 3;

	for (size_t i = 0; i < a->ngrants; i++)
		n += !a->grants[i].model_scope;
	return n;
}

/* Packs "name=value" without a copy of value. */
static void pack_kv(msgpack_packer *pk, const char *name, const char *value, size_t vlen)
{
	size_t n = strlen(name);

	msgpack_pack_str(pk, n + 1 + vlen);
	msgpack_pack_str_body(pk, name, n);
	msgpack_pack_str_body(pk, "=", 1);
	msgpack_pack_str_body(pk, value, vlen);
}

void sb_access_pack_env(const struct sb_access *a, const char *vkey, msgpack_packer *pk)
{
	pack_kv(pk, "SANBOX_MODEL", a->model, strlen(a->model));
	pack_kv(pk, "OPENAI_API_KEY", vkey, strlen(vkey));
	pack_kv(pk, "ANTHROPIC_API_KEY", vkey, strlen(vkey));
	for (size_t i = 0; i < a->ngrants; i++)
		if (!a->grants[i].model_scope)
			pack_kv(pk, a->grants[i].name, a->grants[i].value->value,
				a->grants[i].value->len);
}

void sb_access_free(struct sb_access *a)
{
	for (size_t i = 0; i < a->ngrants; i++)
		sb_secret_free(a->grants[i].value);
	memset(a, 0, sizeof *a);
}
