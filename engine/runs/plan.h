/* plan.h - a run's plan: everything resolved before it starts.
 *
 * One structure holds it; the run's record (run.created and
 * run.policy.resolved, SPEC.md "The run plan") and the guest's SPEC frame
 * are both derived from it, and it can be read back from the record alone
 * (inputs from the blob table), so a run can be started again, resumed or
 * re-run from its log. Secret values are never in the record: the plan
 * names its secrets, and arming it (sb_access_arm) decrypts them.
 */
#ifndef SB_PLAN_H
#define SB_PLAN_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/gateway/access.h"
#include "engine/harness/adapter.h"
#include "engine/log/log.h"
#include "engine/template.h"
#include "netpolicy/net.h"
#include "netpolicy/netpolicy.h"

#define SB_PLAN_VERSION	 1 /* the "plan" field of run.policy.resolved */
#define SB_PLAN_NAME_MAX 64
#define SB_PLAN_RUNNER_MAX     32      /* a runner's name, with its NUL */
#define SB_PLAN_RUNNER_DEFAULT "local" /* a spec's, and an older record's */

/* An input's mode bits of a symbolic link (S_IFLNK): its content is the
 * link's target, at most SB_PLAN_LINK_MAX bytes (a roll-forward's). */
#define SB_PLAN_LINK	 0120000
#define SB_PLAN_LINK_MAX 4095

struct sb_plan_input {
	char path[256]; /* relative to /workspace */
	uint32_t mode;	/* permission bits; with SB_PLAN_LINK, a link */
	uint64_t size;
	uint8_t blob[SB_HASH_LEN]; /* the contents' key in the blob table */
	const void *data;	   /* the contents while the plan has them, else NULL */
};

struct sb_plan {
	char run[SB_RUN_MAX];
	char name[SB_PLAN_NAME_MAX], group[SB_PLAN_NAME_MAX];
	char runner[SB_PLAN_RUNNER_MAX]; /* the runner its machine runs on
					  * (engine/runs/runner.h), by name */
	struct sb_template t; /* name, hash, kernel, harness, files */
	char adapter[SB_ADAPTER_NAME_MAX]; /* the harness adapter (recorded) */
	int resume; /* 1: the harness starts again on a disk it ran on (a
		     * resume or a fork of a disk snapshot): it continues its
		     * own session; not recorded (run.resumed, run.forked say it) */
	char **argv;	      /* the command given (NULL-terminated), or none */
	size_t argc;
	char *prompt; /* for the template's harness; "" with a command */
	char **env;   /* "K=V" for the harness (NULL-terminated): the
		       * template's, then the run's */
	size_t nenv;
	struct sb_plan_input *inputs;
	size_t ninputs;
	char (*removes)[256]; /* paths under /workspace the agent deletes before
			       * writing the inputs (a resume's roll-forward) */
	size_t nremoves;
	uint64_t input_bytes;
	uint64_t cpus, memory_mib, timeout_s;
	uint64_t record_quota; /* bytes the guest may put in the record */
	char accel[8];	       /* auto, kvm or tcg */
	char snapshots[8];     /* turn (after each agent turn and at the end),
				* stop (at the end only) or off */
	struct sb_netpolicy net;
	struct sb_access access;
	void **loaded; /* input contents read from blobs (owned) */
	/* a re-run's: the seed and clock its original's guest started its
	 * harness with (its harness.input.ready), given in the SPEC */
	struct {
		int given;
		uint8_t seed[32];
		uint64_t clock_s;
	} start;
};

/* What resolving a plan reads from. */
struct sb_plan_ctx {
	const char *home;
	sb_stubs *stubs;
	uint64_t record_quota; /* the default */
	sb_net *net;	       /* network acl on this host, or NULL: refused */
};

/* Resolves spec (the run.create spec, SPEC.md "Control API") for run id
 * into p (free it with sb_plan_free, also on error): template, limits,
 * command or prompt, env, inputs (their contents borrowed from spec, which
 * must outlive p's use of them), network, model access (armed), the
 * runner's name (its syntax only: which runners there are is the run
 * manager's to check). Blocks
 * (files, secrets, a stub starting): call it off the loop.
 * Errors: SB_ERR_INVAL (a bad field: the detail names it), SB_ERR_TOOBIG
 * (inputs over the limits), SB_ERR_NOTFOUND (template, secret),
 * SB_ERR_UNAVAIL (accel kvm on a host whose /dev/kvm does not open; network
 * acl where it is not enforced), and those of sb_access_resolve. */
int sb_plan_resolve(const struct sb_plan_ctx *c, const char *run,
		    const msgpack_object *spec, struct sb_plan *p);

/* Packs the payload of run.created {name, group, template, model,
 * runner}. pk is as sb_mapw_begin's. Errors: as sb_mapw_end. */
int sb_plan_pack_created(const struct sb_plan *p, msgpack_packer *pk);

/* Packs the payload of run.policy.resolved: the whole plan but secret
 * values and input contents (inputs carry their blob keys). pk is as
 * sb_mapw_begin's. Errors: as sb_mapw_end. */
int sb_plan_pack_policy(const struct sb_plan *p, msgpack_packer *pk);

/* Fills blobs (room for p->ninputs) with the input contents, to be stored
 * with the run's first events (sb_log_append_blobs). Returns the count. */
size_t sb_plan_blobs(const struct sb_plan *p, struct sb_blob *blobs);

/* Appends the SPEC frame the guest agent receives (argv, env with the
 * access's entries and the virtual key vkey, the adapter's argv and env
 * for a prompt, cwd, inputs, tunnel_port,
 * and the NIC net when not NULL: network acl) and the INPUT frames of the
 * inputs to out; contents p does not hold are
 * read from log's blob table. The frames hold secret values: the caller
 * wipes out once sent. Errors: SB_ERR_NOTFOUND (an input's blob),
 * SB_ERR_CORRUPT, SB_ERR_NOMEM, those of the adapter's argv and env. */
int sb_plan_pack_guest(const struct sb_plan *p, const char *vkey, uint16_t tunnel_port,
		       const struct sb_net_iface *net, sb_log *log, msgpack_sbuffer *out);

/* Reads a plan back from a run's run.created and run.policy.resolved
 * payloads (maps) into p: no secret value, no input contents (their keys
 * only), template files not loaded (sb_plan_load_template). Errors:
 * SB_ERR_CORRUPT (a field missing or malformed: the detail names it). */
int sb_plan_from_record(const char *run, const msgpack_object *created,
			const msgpack_object *policy, struct sb_plan *p);

/* Loads the template p names from the store of home and checks it is the
 * one recorded (its hash). Errors: SB_ERR_NOTFOUND, SB_ERR_STATE (the
 * template changed since: the detail says so), those of sb_template_load. */
int sb_plan_load_template(const char *home, struct sb_plan *p);

/* Frees what p holds, wiping secret values (p itself is the caller's). */
void sb_plan_free(struct sb_plan *p);

/* 1 when s (n bytes) is a path an input may have, or a roll-forward may
 * write or delete: relative to /workspace, plain components (no "", "."
 * or ".."), under 256 bytes, no NUL. The guest agent checks the same. */
int sb_plan_path_ok(const char *s, size_t n);

#endif
