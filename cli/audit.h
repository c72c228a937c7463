/* audit.h - what export, prove and verify share: the log read locally,
 * bundles as directories or tars (cli/audit.c). */
#ifndef SB_CLI_AUDIT_H
#define SB_CLI_AUDIT_H

#include "audit/bundle.h"
#include "engine/daemon/client.h"

/* Fills x's runs (ids) and runinfo from the daemon for run want (an id
 * prefix or a name) or, with group set, every run of group; ids is room
 * for SB_BUNDLE_RUNS_MAX ids. Prints the error and returns its exit code,
 * or 0. The caller decrefs x->runinfo. */
int cli_audit_runs(sb_client *c, const char *want, const char *group,
		   char (*ids)[SB_RUN_MAX], const char **ptrs, struct sb_export *x);

/* Writes the bundle x into out: a directory made for it (dir set), else a
 * tar; prints the error and returns its exit code, or 0 (and *info). */
int cli_audit_write(struct sb_export *x, const char *out, int dir, struct sb_bundle_info *info);

/* Reads the checkpoint of bundle (a directory, a tar, or a checkpoint
 * file) into a new buffer *note (the caller frees). Errors: SB_ERR_IO,
 * SB_ERR_NOMEM, SB_ERR_CORRUPT. */
int cli_audit_checkpoint(const char *bundle, char **note, size_t *len);

/* Calls fn on bundle's directory: bundle itself, or a tar unpacked into
 * a temporary one removed after. Returns fn's result, or SB_ERR_IO. */
int cli_audit_dir(const char *bundle, int (*fn)(void *ctx, const char *dir), void *ctx);

/* Exports run want (an id prefix or a name) or group's runs into out (a
 * tar, or with dir a directory): the events of the types or offsets in
 * redact left out but for their commitments; only: that event alone (a
 * one-event proof); prior: an older bundle or checkpoint to prove this
 * one extends (may be NULL). Prints what it wrote (JSON with json) or the
 * error; returns the exit code (cli/cmd_export.c). */
int cli_export_run(const char *want, const char *group, const char *const *redact,
		   size_t nredact, uint64_t only, const char *prior, const char *out, int dir,
		   int json);

#endif
