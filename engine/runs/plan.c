/* plan.c - a run's plan (see plan.h). */
#include "engine/runs/plan.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "engine/mpack.h"
#include "engine/runs/mask.h"
#include "engine/spec.h"
#include "vmm/accel.h"
#include "vmm/chan.h"

#define PROMPT_MAX  8192
#define ARGV_MAX    4096
#define ENV_MAX	    4096
#define CPUS_MAX    64
#define MEMORY_MAX  (1u << 20) /* MiB */
#define MEMORY_MIN  64
#define TIMEOUT_MAX (366ull * 86400)
#define QUOTA_MAX   (1ull << 40)

/* Copies the strings of array o (may be NULL) into a NULL-terminated
 * vector. Returns 0, or -1 when out of memory. */
static int strv_copy(const msgpack_object *o, char ***out, size_t *n)
{
	uint32_t len = o ? o->via.array.size : 0;
	char **v = calloc(len + 1, sizeof *v);

	if (!v)
		return -1;
	for (uint32_t i = 0; i < len; i++) {
		if (!(v[i] = strndup(o->via.array.ptr[i].via.str.ptr,
				     o->via.array.ptr[i].via.str.size))) {
			while (i--)
				free(v[i]);
			free(v);
			return -1;
		}
	}
	*out = v;
	*n = len;
	return 0;
}

/* The harness's env: the template's entries, then the run's (o, may be
 * NULL), into a NULL-terminated vector. Returns 0, or -1 when out of
 * memory. */
static int env_merge(const struct sb_template *t, const msgpack_object *o, char ***out,
		     size_t *n)
{
	char **run, **v;
	size_t nrun;

	if (strv_copy(o, &run, &nrun))
		return -1;
	if (!(v = calloc(t->nenv + nrun + 1, sizeof *v))) {
		while (nrun--)
			free(run[nrun]);
		free(run);
		return -1;
	}
	for (size_t i = 0; i < t->nenv; i++)
		if (!(v[i] = strdup(t->env[i]))) {
			while (i--)
				free(v[i]);
			free(v);
			while (nrun--)
				free(run[nrun]);
			free(run);
			return -1;
		}
	memcpy(v + t->nenv, run, nrun * sizeof *run);
	free(run);
	*out = v;
	*n = t->nenv + nrun;
	return 0;
}

static void strv_free(char **v, size_t n, int wipe)
{
	for (size_t i = 0; v && i < n; i++) {
		if (wipe)
			sodium_memzero(v[i], strlen(v[i]));
		free(v[i]);
	}
	free(v);
}

int sb_plan_path_ok(const char *s, size_t n)
{
	size_t i = 0, start;

	if (n == 0 || n > 255 || s[0] == '/' || memchr(s, 0, n))
		return 0;
	while (i < n) {
		start = i;
		while (i < n && s[i] != '/')
			i++;
		if (i == start || (i - start == 1 && s[start] == '.') ||
		    (i - start == 2 && s[start] == '.' && s[start + 1] == '.'))
			return 0;
		i++;
		if (i == n) /* a trailing slash */
			return 0;
	}
	return 1;
}

static int inputs_resolve(const msgpack_object *spec, struct sb_plan *p)
{
	const msgpack_object *ins = sb_map_get(spec, "inputs");

	if (!ins || ins->type == MSGPACK_OBJECT_NIL)
		return SB_OK;
	if (ins->type != MSGPACK_OBJECT_ARRAY)
		return sb_seterr(SB_ERR_INVAL, "inputs must be a list");
	if (ins->via.array.size > SB_CHAN_INPUT_FILES)
		return sb_seterr(SB_ERR_TOOBIG, "more than %u input files",
				 SB_CHAN_INPUT_FILES);
	if (!(p->inputs = calloc(ins->via.array.size + 1, sizeof *p->inputs)))
		return SB_ERR_NOMEM;
	for (uint32_t i = 0; i < ins->via.array.size; i++) {
		const msgpack_object *in = &ins->via.array.ptr[i];
		const msgpack_object *path = sb_map_get(in, "path"),
				     *d = sb_map_get(in, "data");
		const msgpack_object *mode = sb_map_get(in, "mode");
		struct sb_plan_input *x = &p->inputs[i];

		if (!path || path->type != MSGPACK_OBJECT_STR ||
		    !sb_plan_path_ok(path->via.str.ptr, path->via.str.size) || !d ||
		    d->type != MSGPACK_OBJECT_BIN)
			return sb_seterr(SB_ERR_INVAL,
					 "input %u needs a relative path and data",
					 i);
		memcpy(x->path, path->via.str.ptr, path->via.str.size);
		x->path[path->via.str.size] = 0;
		x->size = d->via.bin.size;
		x->data = d->via.bin.ptr;
		x->mode = mode && mode->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
				  (mode->via.u64 & 07777)
			      ? (uint32_t)(mode->via.u64 & 07777)
			      : 0644;
		sb_blob_hash(x->data, x->size, x->blob);
		p->input_bytes += x->size;
		p->ninputs++;
	}
	if (p->input_bytes > SB_CHAN_INPUTS_MAX)
		return sb_seterr(
		    SB_ERR_TOOBIG, "inputs total %llu bytes, above the %u MiB limit",
		    (unsigned long long)p->input_bytes, SB_CHAN_INPUTS_MAX >> 20);
	return SB_OK;
}

/* The network a template gives its runs (template.conf network, allow). */
static int template_net(const struct sb_template *t, struct sb_netpolicy *n)
{
	int rc;

	memset(n, 0, sizeof *n);
	n->mode = !strcmp(t->network, "acl") ? SB_NET_ACL : SB_NET_NONE;
	for (size_t i = 0; i < t->nallow; i++)
		if ((rc = sb_net_grant_parse(t->allow[i], strlen(t->allow[i]),
					     &n->grants[n->ngrants++])))
			return sb_seterr(rc, "template %s: %s", t->name, sb_errmsg(rc));
	return SB_OK;
}

int sb_plan_resolve(const struct sb_plan_ctx *c, const char *run,
		    const msgpack_object *spec, struct sb_plan *p)
{
	struct sb_netpolicy tnet;
	const msgpack_object *argv, *env;
	char tmpl[64] = "shell", prompt[PROMPT_MAX];
	sb_accel accel;
	uint64_t quota;
	int rc;

	memset(p, 0, sizeof *p);
	snprintf(p->run, sizeof p->run, "%s", run);
	strcpy(p->accel, "auto");
	strcpy(p->snapshots, "turn");
	strcpy(p->runner, SB_PLAN_RUNNER_DEFAULT);
	prompt[0] = 0;
	if ((rc = sb_spec_name(spec, "name", p->name, sizeof p->name)) ||
	    (rc = sb_spec_name(spec, "group", p->group, sizeof p->group)) ||
	    (rc = sb_spec_str(spec, "template", tmpl, sizeof tmpl)) ||
	    (rc = sb_spec_str(spec, "accel", p->accel, sizeof p->accel)) ||
	    (rc = sb_spec_str(spec, "snapshots", p->snapshots, sizeof p->snapshots)) ||
	    (rc = sb_spec_name(spec, "runner", p->runner, sizeof p->runner)) ||
	    (rc = sb_spec_str(spec, "prompt", prompt, sizeof prompt)) ||
	    (rc = sb_spec_strs(spec, "argv", ARGV_MAX, &argv)) ||
	    (rc = sb_spec_strs(spec, "env", ENV_MAX, &env)) ||
	    (rc = sb_spec_u64(spec, "cpus", CPUS_MAX, &p->cpus)) ||
	    (rc = sb_spec_u64(spec, "memory_mib", MEMORY_MAX, &p->memory_mib)) ||
	    (rc = sb_spec_u64(spec, "timeout_s", TIMEOUT_MAX, &p->timeout_s)) ||
	    (rc = sb_spec_u64(spec, "record_quota", QUOTA_MAX, &quota)))
		return rc;
	if ((rc = sb_accel_parse(p->accel, &accel)))
		return rc;
	/* a run that must have KVM is refused, unrecorded, where there is none */
	if (accel == SB_ACCEL_KVM &&
	    (rc = sb_accel_resolve(accel, NULL, NULL, NULL, &accel, NULL, 0)))
		return rc;
	if (strcmp(p->snapshots, "turn") && strcmp(p->snapshots, "stop") &&
	    strcmp(p->snapshots, "off"))
		return sb_seterr(SB_ERR_INVAL,
				 "snapshots must be turn, stop or off");
	if (!p->runner[0])
		return sb_seterr(SB_ERR_INVAL, "runner must not be empty");
	if ((!argv || argv->via.array.size == 0) && !prompt[0])
		return sb_seterr(SB_ERR_INVAL, "give a command (argv) or a prompt");
	if (p->memory_mib && p->memory_mib < MEMORY_MIN)
		return sb_seterr(SB_ERR_INVAL, "memory below the %u MiB minimum",
				 MEMORY_MIN);
	for (uint32_t i = 0; env && i < env->via.array.size; i++) {
		const msgpack_object *e = &env->via.array.ptr[i];
		const char *eq = memchr(e->via.str.ptr, '=', e->via.str.size);
		if (!eq || eq == e->via.str.ptr ||
		    memchr(e->via.str.ptr, 0, e->via.str.size))
			return sb_seterr(SB_ERR_INVAL, "env entry %u is not K=V",
					 i);
	}
	for (uint32_t i = 0; argv && i < argv->via.array.size; i++)
		if (memchr(argv->via.array.ptr[i].via.str.ptr, 0,
			   argv->via.array.ptr[i].via.str.size))
			return sb_seterr(SB_ERR_INVAL,
					 "argv entry %u holds a NUL byte", i);
	if ((rc = inputs_resolve(spec, p)) ||
	    (rc = sb_template_load(c->home, tmpl, &p->t)) ||
	    (rc = template_net(&p->t, &tnet)) ||
	    (rc = sb_netpolicy_resolve(spec, &tnet, &p->net)))
		return rc;
	/* a run never starts with less isolation than it asked for */
	if (p->net.mode == SB_NET_ACL &&
	    (rc = c->net ? sb_net_check(c->net)
			 : sb_seterr(SB_ERR_UNAVAIL, "network acl is not enforced here")))
		return rc;
	if (!sb_harness_find(p->t.adapter))
		return sb_seterr(SB_ERR_CORRUPT, "template %s: unknown adapter '%s'",
				 p->t.name, p->t.adapter);
	snprintf(p->adapter, sizeof p->adapter, "%s", p->t.adapter);
	if (strv_copy(argv, &p->argv, &p->argc) || env_merge(&p->t, env, &p->env, &p->nenv) ||
	    !(p->prompt = strdup(p->argc ? "" : prompt)))
		return SB_ERR_NOMEM;
	p->cpus = p->cpus ? p->cpus : p->t.cpus;
	p->memory_mib = p->memory_mib ? p->memory_mib : p->t.memory_mib;
	p->timeout_s = p->timeout_s ? p->timeout_s : p->t.timeout_s;
	p->record_quota = quota ? quota : c->record_quota;
	if (!p->name[0])
		snprintf(p->name, sizeof p->name, "%s", run);
	if ((rc = sb_access_resolve(c->home, c->stubs, spec, &p->t, &p->access)))
		return rc;
	if (p->access.group_budget_nusd && !p->group[0])
		return sb_seterr(SB_ERR_INVAL, "a group budget needs a group: set group");
	/* what the guest is given is masked in what it records */
	for (size_t i = 0; i < p->access.ngrants; i++) {
		const struct sb_access_grant *g = &p->access.grants[i];
		if (!g->model_scope && g->value->len > SB_MASK_HOLD_MAX)
			return sb_seterr(
			    SB_ERR_INVAL,
			    "secret %s has %zu bytes: one given to the guest (scope "
			    "env) is at most %d, so that it can be masked in the record",
			    g->name, g->value->len, SB_MASK_HOLD_MAX);
	}
	return SB_OK;
}

int sb_plan_pack_created(const struct sb_plan *p, msgpack_packer *pk)
{
	sb_mapw m;

	sb_mapw_begin(&m, pk);
	sb_mapw_str(&m, "name", p->name);
	sb_mapw_str(&m, "group", p->group);
	sb_mapw_str(&m, "template", p->t.name);
	sb_mapw_str(&m, "model", p->access.model);
	sb_mapw_str(&m, "runner", p->runner);
	return sb_mapw_end(&m);
}

static void pack_strv(sb_mapw *m, const char *key, char *const *v, size_t n)
{
	msgpack_packer *pk = sb_mapw_key(m, key);

	msgpack_pack_array(pk, n);
	for (size_t i = 0; i < n; i++)
		sb_pack_str(pk, v[i]);
}

/* Packs the inputs of run.policy.resolved: [{path, size, mode, blob}]. */
static void pack_policy_inputs(const struct sb_plan *p, msgpack_packer *pk)
{
	char hex[SB_HASH_HEX];
	sb_mapw m;

	msgpack_pack_array(pk, p->ninputs);
	for (size_t i = 0; i < p->ninputs; i++) {
		const struct sb_plan_input *x = &p->inputs[i];
		sb_mapw_begin(&m, pk);
		sb_mapw_str(&m, "path", x->path);
		sb_mapw_u64(&m, "size", x->size);
		sb_mapw_u64(&m, "mode", x->mode);
		sb_hash_hex(x->blob, hex);
		sb_mapw_str(&m, "blob", hex);
		sb_mapw_end(&m);
	}
}

int sb_plan_pack_policy(const struct sb_plan *p, msgpack_packer *pk)
{
	sb_mapw m;

	sb_mapw_begin(&m, pk);
	sb_mapw_u64(&m, "plan", SB_PLAN_VERSION);
	sb_mapw_str(&m, "template_hash", p->t.hash);
	sb_mapw_str(&m, "kernel", p->t.kernel_version);
	sb_mapw_str(&m, "harness", p->t.harness);
	sb_mapw_str(&m, "adapter", p->adapter);
	pack_strv(&m, "argv", p->argv, p->argc);
	sb_mapw_str(&m, "prompt", p->prompt);
	pack_strv(&m, "env", p->env, p->nenv);
	pack_policy_inputs(p, sb_mapw_key(&m, "inputs"));
	sb_mapw_u64(&m, "cpus", p->cpus);
	sb_mapw_u64(&m, "memory_mib", p->memory_mib);
	sb_mapw_u64(&m, "timeout_s", p->timeout_s);
	sb_mapw_str(&m, "accel", p->accel);
	sb_mapw_str(&m, "snapshots", p->snapshots);
	sb_mapw_u64(&m, "record_quota", p->record_quota);
	sb_mapw_u64(&m, "input_bytes", p->input_bytes);
	sb_netpolicy_pack(&p->net, &m);
	sb_access_pack_policy(&p->access, &m);
	sb_mapw_str(&m, "run", p->run);
	return sb_mapw_end(&m);
}

size_t sb_plan_blobs(const struct sb_plan *p, struct sb_blob *blobs)
{
	size_t n = 0;

	for (size_t i = 0; i < p->ninputs; i++)
		if (p->inputs[i].data) {
			blobs[n].data = p->inputs[i].data;
			blobs[n++].len = p->inputs[i].size;
		}
	return n;
}

/* The harness's argv for the run's prompt and the env its adapter adds
 * (none with a command: it is run as given). */
static int harness_args(const struct sb_plan *p, uint16_t tunnel_port,
			struct sb_harness_args *argv, struct sb_harness_args *env)
{
	const struct sb_harness_ops *a = sb_harness_find(p->adapter);
	char url[64];
	struct sb_harness_ctx c = {p->t.harness, p->prompt, p->access.model, url, p->resume};
	int rc;

	if (!a)
		return sb_seterr(SB_ERR_CORRUPT, "unknown adapter '%s'", p->adapter);
	if (p->argc)
		return SB_OK;
	snprintf(url, sizeof url, "http://127.0.0.1:%u/v1", (unsigned)tunnel_port);
	if ((rc = a->argv(&c, argv)) || (a->env && (rc = a->env(&c, env))))
		return rc;
	return SB_OK;
}

/* Packs the SPEC frame's body: {argv, env, cwd, inputs, remove?,
 * tunnel_port, net?}. hargv and henv are room for the adapter's. */
static int pack_spec(const struct sb_plan *p, const char *vkey, uint16_t tunnel_port,
		     const struct sb_net_iface *net, struct sb_harness_args *hargv,
		     struct sb_harness_args *henv, msgpack_packer *pk)
{
	char kv[SB_RUN_MAX + 16];
	msgpack_packer *v;
	sb_mapw m, in;
	int rc;

	if ((rc = harness_args(p, tunnel_port, hargv, henv)))
		return rc;
	sb_mapw_begin(&m, pk);
	if (p->argc)
		pack_strv(&m, "argv", p->argv, p->argc);
	else
		pack_strv(&m, "argv", (char *const *)hargv->v, hargv->n);
	v = sb_mapw_key(&m, "env");
	msgpack_pack_array(v, p->nenv + henv->n + 2 + sb_access_env_count(&p->access));
	for (size_t i = 0; i < p->nenv; i++)
		sb_pack_str(v, p->env[i]);
	for (size_t i = 0; i < henv->n; i++)
		sb_pack_str(v, henv->v[i]);
	snprintf(kv, sizeof kv, "SANBOX_RUN=%s", p->run);
	sb_pack_str(v, kv);
	sb_pack_str(v, "HOME=/root");
	sb_access_pack_env(&p->access, vkey, v);
	sb_mapw_str(&m, "cwd", "/workspace");
	v = sb_mapw_key(&m, "inputs");
	msgpack_pack_array(v, p->ninputs);
	for (size_t i = 0; i < p->ninputs; i++) {
		sb_mapw_begin(&in, v);
		sb_mapw_str(&in, "path", p->inputs[i].path);
		sb_mapw_u64(&in, "size", p->inputs[i].size);
		sb_mapw_u64(&in, "mode", p->inputs[i].mode);
		sb_mapw_end(&in);
	}
	if (p->nremoves) {
		v = sb_mapw_key(&m, "remove");
		msgpack_pack_array(v, p->nremoves);
		for (size_t i = 0; i < p->nremoves; i++)
			sb_pack_str(v, p->removes[i]);
	}
	sb_mapw_u64(&m, "tunnel_port", tunnel_port);
	if (p->start.given) { /* a re-run: its original's start */
		sb_mapw_bin(&m, "seed", p->start.seed, sizeof p->start.seed);
		sb_mapw_u64(&m, "clock_s", p->start.clock_s);
	}
	if (net)
		sb_net_iface_pack(net, sb_mapw_key(&m, "net"));
	return sb_mapw_end(&m);
}

int sb_plan_pack_guest(const struct sb_plan *p, const char *vkey, uint16_t tunnel_port,
		       const struct sb_net_iface *net, sb_log *log, msgpack_sbuffer *out)
{
	struct sb_harness_args *args = calloc(2, sizeof *args); /* argv, env */
	msgpack_packer pk;
	size_t start;
	int rc;

	if (!args)
		return SB_ERR_NOMEM;
	msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
	if ((rc = sb_chan_begin(out, &pk, SB_CHAN_SPEC, 0, &start)) == SB_OK &&
	    (rc = pack_spec(p, vkey, tunnel_port, net, args, args + 1, &pk)) == SB_OK)
		rc = sb_chan_end(out, start);
	free(args);
	if (rc)
		return rc;
	/* the contents follow the SPEC in INPUT frames (vmm/chan.h) */
	for (size_t i = 0; i < p->ninputs && rc == SB_OK; i++) {
		const struct sb_plan_input *x = &p->inputs[i];
		void *data = NULL;
		size_t len = 0;
		if (!x->data && x->size && (rc = sb_blob_get(log, x->blob, &data, &len)))
			return rc;
		if (!x->data && len != x->size) {
			free(data);
			return sb_seterr(SB_ERR_CORRUPT,
					 "input %s: its blob has %zu bytes, not %llu",
					 x->path, len, (unsigned long long)x->size);
		}
		rc = sb_chan_pack_input(out, (uint32_t)i, x->data ? x->data : data,
					x->size);
		free(data);
	}
	return rc;
}

/* Reads the string array key of m into a vector. */
static int record_strv(const msgpack_object *m, const char *key, char ***v, size_t *n)
{
	const msgpack_object *o = sb_map_get(m, key);

	if (o && o->type != MSGPACK_OBJECT_ARRAY)
		return sb_seterr(SB_ERR_CORRUPT, "the recorded plan's %s is not a list",
				 key);
	for (uint32_t i = 0; o && i < o->via.array.size; i++)
		if (o->via.array.ptr[i].type != MSGPACK_OBJECT_STR)
			return sb_seterr(SB_ERR_CORRUPT,
					 "the recorded plan's %s holds a non-string",
					 key);
	return strv_copy(o, v, n) ? SB_ERR_NOMEM : SB_OK;
}

int sb_plan_from_record(const char *run, const msgpack_object *created,
			const msgpack_object *pol, struct sb_plan *p)
{
	const msgpack_object *ins = sb_map_get(pol, "inputs");
	char prompt[PROMPT_MAX] = "";
	sb_accel accel;
	int rc;

	memset(p, 0, sizeof *p);
	snprintf(p->run, sizeof p->run, "%s", run);
	if (sb_map_str(created, "name", p->name, sizeof p->name) < 0 ||
	    sb_map_str(created, "group", p->group, sizeof p->group) < 0 ||
	    sb_map_str(created, "template", p->t.name, sizeof p->t.name) <= 0 ||
	    sb_map_str(pol, "template_hash", p->t.hash, sizeof p->t.hash) <= 0)
		return sb_seterr(SB_ERR_CORRUPT,
				 "run %s: its record has no name or template", run);
	if (sb_map_str(created, "runner", p->runner, sizeof p->runner) <= 0)
		strcpy(p->runner, SB_PLAN_RUNNER_DEFAULT); /* a record from before runners */
	sb_map_str(pol, "kernel", p->t.kernel_version, sizeof p->t.kernel_version);
	sb_map_str(pol, "harness", p->t.harness, sizeof p->t.harness);
	if (sb_map_str(pol, "adapter", p->adapter, sizeof p->adapter) <= 0)
		strcpy(p->adapter, "reference"); /* a record from before adapters */
	if (!sb_harness_find(p->adapter))
		return sb_seterr(SB_ERR_CORRUPT, "run %s: its recorded adapter '%s' is unknown",
				 run, p->adapter);
	sb_map_str(pol, "prompt", prompt, sizeof prompt);
	if (sb_map_str(pol, "accel", p->accel, sizeof p->accel) <= 0 ||
	    sb_accel_parse(p->accel, &accel))
		strcpy(p->accel, "auto");
	if (sb_map_str(pol, "snapshots", p->snapshots, sizeof p->snapshots) <= 0)
		strcpy(p->snapshots, "off"); /* a record from before snapshots */
	p->cpus = sb_map_u64(pol, "cpus", 0);
	p->memory_mib = sb_map_u64(pol, "memory_mib", 0);
	p->timeout_s = sb_map_u64(pol, "timeout_s", 0);
	p->record_quota = sb_map_u64(pol, "record_quota", 0);
	p->input_bytes = sb_map_u64(pol, "input_bytes", 0);
	if (!p->cpus || !p->memory_mib || !p->timeout_s)
		return sb_seterr(SB_ERR_CORRUPT,
				 "run %s: its recorded limits are missing", run);
	if ((rc = record_strv(pol, "argv", &p->argv, &p->argc)) ||
	    (rc = record_strv(pol, "env", &p->env, &p->nenv)))
		return rc;
	if (!(p->prompt = strdup(prompt)))
		return SB_ERR_NOMEM;
	if (ins && ins->type != MSGPACK_OBJECT_ARRAY)
		return sb_seterr(SB_ERR_CORRUPT,
				 "run %s: its recorded inputs are not a list", run);
	if (ins && !(p->inputs = calloc(ins->via.array.size + 1, sizeof *p->inputs)))
		return SB_ERR_NOMEM;
	for (uint32_t i = 0; ins && i < ins->via.array.size; i++) {
		const msgpack_object *in = &ins->via.array.ptr[i];
		struct sb_plan_input *x = &p->inputs[i];
		char hex[2 * SB_HASH_LEN + 8];
		if (sb_map_str(in, "path", x->path, sizeof x->path) <= 0 ||
		    sb_map_str(in, "blob", hex, sizeof hex) <= 0 ||
		    sb_hash_parse(hex, x->blob))
			return sb_seterr(SB_ERR_CORRUPT,
					 "run %s: recorded input %u is malformed", run,
					 i);
		x->size = sb_map_u64(in, "size", 0);
		x->mode = (uint32_t)sb_map_u64(in, "mode", 0644);
		x->mode &=
		    (x->mode & 0170000) == SB_PLAN_LINK ? SB_PLAN_LINK | 07777 : 07777;
		p->ninputs++;
	}
	if ((rc = sb_netpolicy_resolve(pol, NULL, &p->net)))
		return sb_seterr(SB_ERR_CORRUPT, "run %s: its recorded network: %s", run,
				 sb_errmsg(rc));
	return sb_access_from_record(pol, &p->access);
}

int sb_plan_load_template(const char *home, struct sb_plan *p)
{
	char hash[sizeof p->t.hash], name[sizeof p->t.name];
	int rc;

	memcpy(hash, p->t.hash, sizeof hash);
	memcpy(name, p->t.name, sizeof name); /* loading fills p->t afresh */
	if ((rc = sb_template_load(home, name, &p->t)))
		return rc;
	if (strcmp(hash, p->t.hash))
		return sb_seterr(
		    SB_ERR_STATE,
		    "template %s changed since the run started (hash %.12s, now %.12s)",
		    p->t.name, hash, p->t.hash);
	return SB_OK;
}

void sb_plan_free(struct sb_plan *p)
{
	strv_free(p->argv, p->argc, 0);
	strv_free(p->env, p->nenv, 0);
	free(p->prompt);
	free(p->inputs);
	free(p->removes);
	sb_access_free(&p->access);
	memset(p, 0, sizeof *p);
}
