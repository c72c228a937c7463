/* access.c - resolving a run's models, budget and secrets (see access.h). */
#include "engine/gateway/access.h"

#include <stdio.h>
#include <string.h>

#include "engine/daemon/daemon.h"
#include "engine/error.h"
#include "engine/mpack.h"
#include "engine/runs/spec.h"

static struct sb_access_grant *grant_find(struct sb_access *a, const char *name)
{
	for (size_t i = 0; i < a->ngrants; i++)
		if (!strcmp(a->grants[i].name, name))
			return &a->grants[i];
	return NULL;
}

/* Grants secret name with the scope, decrypting it. */
static int grant_add(struct sb_access *a, struct sb_daemon *d, const char *name,
		     int model_scope)
{
	struct sb_access_grant *g;
	int rc;

	if (!sb_secret_name_ok(name))
		return sb_seterr(SB_ERR_INVAL, "spec: '%.64s' is not a secret name",
				 name);
	if (grant_find(a, name))
		return sb_seterr(SB_ERR_INVAL, "spec: secret %s is granted twice", name);
	if (a->ngrants == SB_ACCESS_SECRETS)
		return sb_seterr(SB_ERR_INVAL, "spec: at most %d secrets",
				 SB_ACCESS_SECRETS);
	g = &a->grants[a->ngrants];
	snprintf(g->name, sizeof g->name, "%s", name);
	g->model_scope = model_scope;
	if ((rc = sb_secret_get(d->home, name, &g->value)))
		return rc;
	a->ngrants++;
	return SB_OK;
}

/* Parses "NAME", "NAME:env" or "NAME:model" of len bytes; from_template:
 * skipped when the spec granted it already. */
static int grant_parse(struct sb_access *a, struct sb_daemon *d, const char *s,
		       size_t len, int from_template)
{
	char buf[SB_SECRET_NAME_MAX + 8], *colon;
	int model_scope = 0;

	if (len >= sizeof buf)
		return sb_seterr(SB_ERR_INVAL, "spec: secret '%.*s...' is too long", 20,
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
			    "spec: secret %s: scope must be env or model, not '%s'", buf,
			    colon);
	}
	if (from_template && grant_find(a, buf))
		return SB_OK;
	return grant_add(a, d, buf, model_scope);
}

/* Resolves one allowed model: its price, provider, URL and key. */
static int model_add(struct sb_access *a, struct sb_daemon *d, const struct sb_models *ms,
		     const char *name)
{
	const struct sb_model *m = sb_models_find(ms, name);
	const struct sb_provider *p;
	struct sb_gateway_model *gm;
	struct sb_access_grant *g;
	int rc;

	for (size_t i = 0; i < a->nmodels; i++)
		if (!strcmp(a->models[i].model.name, name))
			return SB_OK; /* named twice: once is enough */
	if (!m)
		return sb_seterr(SB_ERR_INVAL,
				 "model '%s' has no price in the model settings "
				 "(STATE_DIR/models.json)",
				 name);
	if (a->nmodels == SB_ACCESS_MODELS)
		return sb_seterr(SB_ERR_INVAL, "spec: at most %d models",
				 SB_ACCESS_MODELS);
	p = sb_models_provider(ms, m->provider);
	gm = &a->models[a->nmodels];
	memset(gm, 0, sizeof *gm);
	gm->model = *m;
	gm->apis = p->apis;
	if (p->builtin && (rc = sb_daemon_stub_url(d, p->script_dir, gm->base_url)))
		return rc;
	if (!p->builtin)
		snprintf(gm->base_url, sizeof gm->base_url, "%s", p->base_url);
	if (p->key_secret[0]) {
		if (!(g = grant_find(a, p->key_secret))) {
			if ((rc = grant_add(a, d, p->key_secret, 1)))
				return rc;
			g = grant_find(a, p->key_secret);
		}
		gm->key = g->value->value;
	}
	a->nmodels++;
	return SB_OK;
}

int sb_access_resolve(struct sb_daemon *d, const msgpack_object *spec,
		      const struct sb_template *t, struct sb_access *a)
{
	const msgpack_object *models, *secrets;
	struct sb_models *ms = NULL;
	char policy[16] = "";
	uint64_t budget;
	int rc;

	memset(a, 0, sizeof *a);
	if ((rc = sb_spec_str(spec, "model", a->model, sizeof a->model)) ||
	    (rc = sb_spec_str(spec, "on_budget", policy, sizeof policy)) ||
	    (rc = sb_spec_strs(spec, "models", SB_ACCESS_MODELS, &models)) ||
	    (rc = sb_spec_strs(spec, "secrets", SB_ACCESS_SECRETS, &secrets)) ||
	    (rc = sb_spec_u64(spec, "budget_nusd", UINT64_MAX / 4, &budget)))
		return rc;
	if (policy[0] && strcmp(policy, "stop") && strcmp(policy, "continue"))
		return sb_seterr(SB_ERR_INVAL,
				 "spec: on_budget must be stop or continue");
	a->stop_on_budget = strcmp(policy, "continue") != 0;
	if ((rc = sb_models_load(d->home, &ms)))
		return rc;
	a->budget_nusd = budget ? budget : ms->default_budget_nusd;
	if (!a->model[0])
		snprintf(a->model, sizeof a->model, "%s",
			 t->model[0] ? t->model : ms->default_model);
	for (uint32_t i = 0; rc == SB_OK && secrets && i < secrets->via.array.size; i++)
		rc = grant_parse(a, d, secrets->via.array.ptr[i].via.str.ptr,
				 secrets->via.array.ptr[i].via.str.size, 0);
	for (size_t i = 0; rc == SB_OK && i < t->nsecrets; i++)
		rc = grant_parse(a, d, t->secrets[i], strlen(t->secrets[i]), 1);
	if (rc == SB_OK)
		rc = model_add(a, d, ms, a->model);
	for (uint32_t i = 0; rc == SB_OK && models && i < models->via.array.size; i++) {
		const msgpack_object *n = &models->via.array.ptr[i];
		char name[SB_MODEL_NAME_MAX];
		if (n->via.str.size >= sizeof name) {
			rc = sb_seterr(SB_ERR_INVAL, "spec: a model name is too long");
			break;
		}
		memcpy(name, n->via.str.ptr, n->via.str.size);
		name[n->via.str.size] = 0;
		rc = model_add(a, d, ms, name);
	}
	sb_models_free(ms);
	return rc;
}

void sb_access_pack_policy(const struct sb_access *a, msgpack_packer *pk)
{
	sb_pack_kstr(pk, "model", a->model);
	sb_pack_str(pk, "models");
	msgpack_pack_array(pk, a->nmodels);
	for (size_t i = 0; i < a->nmodels; i++)
		sb_pack_str(pk, a->models[i].model.name);
	sb_pack_str(pk, "prices");
	msgpack_pack_map(pk, a->nmodels);
	for (size_t i = 0; i < a->nmodels; i++) {
		const struct sb_model *m = &a->models[i].model;
		sb_pack_str(pk, m->name);
		msgpack_pack_map(pk, 3);
		sb_pack_ku64(pk, "input", m->in_price);
		sb_pack_ku64(pk, "output", m->out_price);
		sb_pack_ku64(pk, "cached", m->cached_price);
	}
	sb_pack_ku64(pk, "budget_nusd", a->budget_nusd);
	sb_pack_kstr(pk, "on_budget", a->stop_on_budget ? "stop" : "continue");
	sb_pack_str(pk, "secrets");
	msgpack_pack_array(pk, a->ngrants);
	for (size_t i = 0; i < a->ngrants; i++)
		sb_access_pack_grant(a, i, pk);
}

void sb_access_pack_grant(const struct sb_access *a, size_t i, msgpack_packer *pk)
{
	msgpack_pack_map(pk, 2);
	sb_pack_kstr(pk, "name", a->grants[i].name);
	sb_pack_kstr(pk, "scope", a->grants[i].model_scope ? "model" : "env");
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
