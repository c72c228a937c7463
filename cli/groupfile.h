/* groupfile.h - reading a group file (SPEC.md, "Group files"): a YAML file
 * that names a run group (name, goal, budget) and its runs, each as the
 * run.create spec that `sanbox run` would send for the same options
 * (cli/runspec.h, filled by the same parsers), and a table of where each
 * field is written, so that an error that names a field ("runs[2].budget")
 * can point at its line and column.
 *
 * The file is read with libyaml's event API under limits of its own: at
 * most CLI_GROUP_FILE_MAX bytes, CLI_GROUP_DEPTH_MAX levels of nesting and
 * CLI_GROUP_KEYS_MAX keys a map; no anchor and no alias (no alias bomb), no
 * duplicate key, no tag but YAML's core ones, one document. Every error is
 * one line "FILE:LINE:COL: PATH: message" (line and column 1-based; PATH
 * left out where the error is about the whole file), as sb_errmsg's detail;
 * FILE is the path as the caller gave it. The detail quotes what the file
 * holds as it is: print it through cli_fail or cli_note, which escape it.
 * Client side only: nothing here connects to the daemon or prints.
 */
#ifndef SB_CLI_GROUPFILE_H
#define SB_CLI_GROUPFILE_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "cli/runspec.h"
#include "engine/mpack.h"

#define CLI_GROUP_FILE_MAX   (1u << 20) /* bytes of a group file */
#define CLI_GROUP_DEPTH_MAX  16		/* lists and maps inside each other */
#define CLI_GROUP_KEYS_MAX   256	/* keys of one map */
#define CLI_GROUP_RUNS_MAX   256	/* runs of a group */
#define CLI_GROUP_GOAL_MAX   4096	/* bytes of a goal */
#define CLI_GROUP_LABELS_MAX 64		/* labels of a run */

/* A run's label. */
struct cli_label {
	const char *key, *value;
};

/* One run of a group file: its spec (spec.name its name, spec.group the
 * group's name, spec.group_budget the group's budget) and its labels,
 * defaults applied. */
struct cli_group_run {
	struct cli_run_spec spec;
	struct cli_label labels[CLI_GROUP_LABELS_MAX];
	int nlabels;
};

/* Where a field is written: path ("runs[2].budget", "defaults.memory",
 * "name"; "" for the whole document) and its value's line and column. A
 * run's field that its defaults gave has the position of the default, and
 * at names it ("defaults.memory"); else at is path. */
struct cli_group_pos {
	const char *path, *at;
	unsigned line, col;
};

struct cli_group_store; /* what the strings below point into */

/* A group file, read and checked. Every string is valid until
 * cli_group_free. */
struct cli_group {
	const char *file; /* the path as given to cli_group_load */
	const char *name;
	const char *goal; /* NULL when not given */
	uint64_t budget;  /* nano-USD; 0 when not given */
	struct cli_group_run *runs;
	size_t nruns;		   /* 1 to CLI_GROUP_RUNS_MAX */
	struct cli_group_pos *pos; /* every field of the file, and each run's fields
				    * its defaults gave (in no set order) */
	size_t npos;
	struct cli_group_store *store;
};

/* Reads and checks the group file at path into *out (free it with
 * cli_group_free). Relative input paths are taken from the file's folder;
 * each input is checked as `sanbox run --input` checks it (opened without
 * blocking, a regular file, 48 MiB in all a run) and closed again.
 * Errors: SB_ERR_INVAL (not a valid group file: the detail is the error
 * line), SB_ERR_TOOBIG (over CLI_GROUP_FILE_MAX bytes; an input over the
 * limit), SB_ERR_NOTFOUND (the file or an input is missing), SB_ERR_IO,
 * SB_ERR_NOMEM. */
int cli_group_load(const char *path, struct cli_group **out);

/* As cli_group_load, for a group file's len bytes at text (copied) named
 * name in errors; relative input paths are taken from name's folder
 * (".": the working directory). Errors: as cli_group_load's but
 * SB_ERR_NOTFOUND only for a missing input. */
int cli_group_parse(const char *name, const char *text, size_t len, struct cli_group **out);

/* Frees g (NULL is fine). */
void cli_group_free(struct cli_group *g);

/* Packs the spec map of run i of g (the value of run.create's "spec"),
 * the contents of its inputs read now. Errors: SB_ERR_INVAL (i out of
 * range), those of cli_inputs_open (an input changed since the load: the
 * detail is an error line) and of cli_spec_pack. */
int cli_group_pack_spec(const struct cli_group *g, size_t i, msgpack_packer *pk);

/* Packs into m the fields of group.create for g under the group name name
 * (name, goal, budget_nusd, runs: each run's spec with group = name; the
 * runs' spec.group now points at name). Errors: cli_group_pack_spec's. */
int cli_group_pack_create(const struct cli_group *g, const char *name, sb_mapw *m);

/* The position of path in g, or of its nearest ancestor that has one
 * ("runs[2].env.X" falls back to "runs[2].env", then "runs[2]", then the
 * document ""). Never NULL. A linear search: for errors, not for loops. */
const struct cli_group_pos *cli_group_find(const struct cli_group *g, const char *path);

/* Writes the error line "FILE:LINE:COL: PATH: msg" for path (positioned
 * by cli_group_find) into buf of cap bytes (cut to fit, always
 * terminated), e.g. for an error the daemon returns about a run's field. */
void cli_group_error(const struct cli_group *g, const char *path, const char *msg,
		     char *buf, size_t cap);

/* When msg is the daemon's error about one of g's runs ("runs[2]: ..."),
 * writes it as cli_group_error does, at that run's place in the file (at
 * its runner field for "no runner '...": "runs[2].runner", written where
 * the run, its defaults or the group gave it), and returns 1; else 0 (buf
 * untouched). */
int cli_group_run_error(const struct cli_group *g, const char *msg, char *buf, size_t cap);

#endif
