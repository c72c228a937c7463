/* runs.c - the run manager. */
#include "engine/runs.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/daemon.h"
#include "engine/error.h"
#include "engine/payload.h"
#include "projections/views.h"

struct sb_runs {
	struct sb_daemon *d;
	unsigned active;
};

/* Emits a host event whose payload is given as alternating key/value
 * C strings (NULL-terminated list). */
static int emit_strs(struct sb_daemon *d, const char *run, const char *type, ...)
{
	msgpack_sbuffer buf;
	msgpack_packer pk;
	va_list ap;
	const char *k;
	size_t n = 0;
	int rc;

	va_start(ap, type);
	while (va_arg(ap, const char *))
		n++;
	va_end(ap);
	msgpack_sbuffer_init(&buf);
	msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, n / 2);
	va_start(ap, type);
	while ((k = va_arg(ap, const char *)))
		sb_pack_kstr(&pk, k, va_arg(ap, const char *));
	va_end(ap);
	rc = buf.data ? sb_daemon_emit(d, run, type, SB_SRC_HOST, buf.data, buf.size, NULL)
		      : SB_ERR_NOMEM;
	msgpack_sbuffer_destroy(&buf);
	return rc;
}

struct orphan_ctx {
	struct sb_daemon *d;
	char (*runs)[SB_RUN_MAX];
	size_t n, cap;
};

static int orphan_cb(void *vctx, const struct sb_runstate *rs)
{
	struct orphan_ctx *c = vctx;

	if (strcmp(rs->status, "created") && strcmp(rs->status, "running"))
		return 0;
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 16;
		void *p = realloc(c->runs, cap * sizeof *c->runs);
		if (!p)
			return SB_ERR_NOMEM;
		c->runs = p;
		c->cap = cap;
	}
	memcpy(c->runs[c->n++], rs->run, SB_RUN_MAX);
	return 0;
}

/* Marks runs that a previous daemon left unfinished as failed. */
static int reconcile(struct sb_runs *r)
{
	struct orphan_ctx c = {r->d, NULL, 0, 0};
	int rc = sb_runstate_each(r->d->proj, orphan_cb, &c);

	for (size_t i = 0; rc == SB_OK && i < c.n; i++) {
		rc = emit_strs(r->d, c.runs[i], "run.failed", "reason", "daemon-restart", NULL);
		if (rc == SB_OK)
			rc = emit_strs(r->d, c.runs[i], "run.stopped", "reason", "failed", NULL);
	}
	free(c.runs);
	if (rc == SB_OK)
		rc = sb_daemon_catch_up(r->d);
	return rc;
}

int sb_runs_open(struct sb_daemon *d, struct sb_runs **out)
{
	struct sb_runs *r = calloc(1, sizeof *r);
	int rc;

	if (!r)
		return SB_ERR_NOMEM;
	r->d = d;
	if ((rc = reconcile(r))) {
		free(r);
		return rc;
	}
	*out = r;
	return SB_OK;
}

void sb_runs_close(struct sb_runs *r)
{
	free(r);
}

unsigned sb_runs_active(struct sb_runs *r)
{
	return r->active;
}

static void new_run_id(char run[SB_RUN_MAX])
{
	unsigned char raw[SB_RUN_ID_LEN / 2];

	randombytes_buf(raw, sizeof raw);
	sodium_bin2hex(run, SB_RUN_MAX, raw, sizeof raw);
}

int sb_runs_create(struct sb_runs *r, const msgpack_object *spec, char run[SB_RUN_MAX])
{
	char name[64] = "", group[64] = "", tmpl[64] = "shell";
	int rc;

	if (sb_map_str(spec, "name", name, sizeof name) >= (int)sizeof name ||
	    sb_map_str(spec, "group", group, sizeof group) >= (int)sizeof group ||
	    sb_map_str(spec, "template", tmpl, sizeof tmpl) >= (int)sizeof tmpl)
		return sb_seterr(SB_ERR_INVAL, "name, group and template are at most 63 bytes");
	new_run_id(run);
	if (!name[0])
		snprintf(name, sizeof name, "%s", run);
	rc = emit_strs(r->d, run, "run.created", "name", name, "group", group, "template", tmpl,
		       NULL);
	return rc;
}

int sb_runs_stop(struct sb_runs *r, const char *run, const char *reason)
{
	struct sb_runstate rs;
	int rc;

	sb_daemon_catch_up(r->d);
	if ((rc = sb_runstate_get(r->d->proj, run, &rs)))
		return rc;
	if (strcmp(rs.status, "created") && strcmp(rs.status, "running"))
		return sb_seterr(SB_ERR_STATE, "run %s is not running (%s)", run, rs.status);
	return emit_strs(r->d, run, "run.stopped", "reason", reason, NULL);
}
