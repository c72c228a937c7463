/* audit.c - bundles for export, prove and verify: the runs, the local
 * log, directories and tars. */
#include "cli/audit.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/home.h"
#include "engine/proc.h"

#define TAR_TIMEOUT_MS 600000

/* Adds run state map st to x: its id and what the manifest shows. */
static void run_add(const msgpack_object *st, char (*ids)[SB_RUN_MAX], const char **ptrs,
		    struct sb_export *x)
{
	static const char *const keys[] = {"name", "group", "template", "template_hash"};
	json_t *o = json_object();
	char v[128];

	if (x->nruns == SB_BUNDLE_RUNS_MAX)
		return;
	sb_map_str(st, "run", ids[x->nruns], SB_RUN_MAX);
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		if (sb_map_str(st, keys[i], v, sizeof v) >= 0) /* its length, or -1 */
			json_object_set_new(o, keys[i], json_string(v));
	json_object_set_new(x->runinfo, ids[x->nruns], o);
	ptrs[x->nruns] = ids[x->nruns];
	x->nruns++;
}

int cli_audit_runs(sb_client *c, const char *want, const char *group,
		   char (*ids)[SB_RUN_MAX], const char **ptrs, struct sb_export *x)
{
	const msgpack_object *runs;
	struct sb_reply rep;
	struct cli_req r;
	char run[SB_RUN_MAX];
	int rc;

	x->runinfo = json_object();
	x->runs = ptrs;
	if (!group && (rc = cli_resolve(c, want, run)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	cli_req_begin(&r, group ? "group.get" : "run.get");
	sb_mapw_str(&r.m, group ? "group" : "run", group ? group : run);
	if ((rc = cli_call(c, &r, &rep)))
		return cli_fail_request(rc);
	if (group) {
		runs = sb_map_get(&rep.map, "runs");
		for (uint32_t i = 0; runs && runs->type == MSGPACK_OBJECT_ARRAY && i < runs->via.array.size; i++)
			run_add(&runs->via.array.ptr[i], ids, ptrs, x);
	} else {
		run_add(sb_map_get(&rep.map, "run"), ids, ptrs, x);
	}
	sb_reply_free(&rep);
	if (!x->nruns)
		return cli_fail(SB_ERR_NOTFOUND, "group %s has no runs", group);
	return CLI_EXIT_OK;
}

static int rm_tree(const char *dir)
{
	char *argv[] = {"rm", "-rf", "--", (char *)dir, NULL};
	int st;

	return sb_proc_run(argv, TAR_TIMEOUT_MS, NULL, 0, &st);
}

/* Runs tar with argv; SB_ERR_IO when it fails. */
static int tar_run(char **argv)
{
	char out[512] = "";
	int st, rc = sb_proc_run(argv, TAR_TIMEOUT_MS, out, sizeof out, &st);

	if (!rc && st)
		rc = sb_seterr(SB_ERR_IO, "tar: %s", out[0] ? out : "failed");
	return rc;
}

/* Exports x into the new directory dir. */
static int export_dir(struct sb_export *x, const char *dir, struct sb_bundle_info *info)
{
	char path[4096];
	sb_log *log = NULL;
	int rc;

	if (mkdir(dir, 0755))
		return sb_seterr(SB_ERR_IO, "%s: %s", dir, strerror(errno));
	if (!(rc = sb_home_path(cli_home, "log", path, sizeof path)) &&
	    !(rc = sb_log_open(path, SB_LOG_RDONLY, &log)))
		rc = sb_bundle_export(log, x, dir, info);
	sb_log_close(log);
	return rc;
}

int cli_audit_write(struct sb_export *x, const char *out, int dir, struct sb_bundle_info *info)
{
	char tmp[4200];
	int rc;

	if (dir) {
		if ((rc = export_dir(x, out, info)))
			rm_tree(out);
		return rc ? cli_fail(rc, "%s", sb_errmsg(rc)) : 0;
	}
	snprintf(tmp, sizeof tmp, "%s.tmp%d", out, (int)getpid());
	if (!(rc = export_dir(x, tmp, info))) {
		char *argv[] = {"tar", "-cf", (char *)out, "-C", tmp, ".", NULL};
		rc = tar_run(argv);
	}
	rm_tree(tmp);
	return rc ? cli_fail(rc, "%s", sb_errmsg(rc)) : 0;
}

static int file_slurp(const char *path, char **note, size_t *len)
{
	FILE *f = fopen(path, "re");
	char *b = malloc(SB_CKPT_MAX + 1);

	if (!b || !f) {
		free(b);
		if (f)
			fclose(f);
		return b ? sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno)) : SB_ERR_NOMEM;
	}
	*len = fread(b, 1, SB_CKPT_MAX, f);
	fclose(f);
	b[*len] = 0;
	*note = b;
	return SB_OK;
}

struct ck_ctx {
	char **note;
	size_t *len;
};

static int ck_read(void *ctx, const char *dir)
{
	struct ck_ctx *c = ctx;
	char path[4200];

	snprintf(path, sizeof path, "%s/checkpoint", dir);
	return file_slurp(path, c->note, c->len);
}

int cli_audit_checkpoint(const char *bundle, char **note, size_t *len)
{
	struct ck_ctx c = {note, len};
	struct sb_ckpt ck;
	struct stat st;
	int rc;

	if (stat(bundle, &st))
		return sb_seterr(SB_ERR_IO, "%s: %s", bundle, strerror(errno));
	if (S_ISREG(st.st_mode) && st.st_size <= SB_CKPT_MAX && !(rc = file_slurp(bundle, note, len))) {
		if (!sb_ckpt_parse(*note, *len, &ck))
			return SB_OK; /* a checkpoint file */
		free(*note);
	}
	return cli_audit_dir(bundle, ck_read, &c);
}

int cli_audit_dir(const char *bundle, int (*fn)(void *ctx, const char *dir), void *ctx)
{
	char tmp[] = "/tmp/sanbox-bundle.XXXXXX";
	struct stat st;
	int rc;

	if (stat(bundle, &st))
		return sb_seterr(SB_ERR_IO, "%s: %s", bundle, strerror(errno));
	if (S_ISDIR(st.st_mode))
		return fn(ctx, bundle);
	if (!mkdtemp(tmp))
		return sb_seterr(SB_ERR_IO, "%s: %s", tmp, strerror(errno));
	{
		char *argv[] = {"tar", "-xf", (char *)bundle, "-C", tmp, "--no-same-owner",
				"--no-same-permissions", NULL};
		rc = tar_run(argv);
	}
	if (!rc)
		rc = fn(ctx, tmp);
	rm_tree(tmp);
	return rc;
}
