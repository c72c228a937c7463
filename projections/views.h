/* views.h - the built-in projections and how to read them.
 *
 *   runstate  one record per run: status, settings, times, exit, last event
 *   costs     token and cost totals per run, per group and per model
 *   resume    per run, the snapshots it saved (and did not remove, nor
 *             the run), by offset:
 *             its resume points
 *   groups    per group: its name, goal and budget, and its runs in order
 *
 * Costs are integers in nano-USD (1e-9 USD), so totals are exact.
 */
#ifndef SB_VIEWS_H
#define SB_VIEWS_H

#include <msgpack.h>
#include <stdint.h>

#include "engine/log/schema.h"
#include "projections/projection.h"

extern const struct sb_projection sb_proj_runstate;
extern const struct sb_projection sb_proj_costs;
extern const struct sb_projection sb_proj_resume;
extern const struct sb_projection sb_proj_groups;

struct sb_runstate {
	char run[SB_RUN_MAX];
	char name[64];
	char group[64];
	char template[64];      /* template name */
	char template_hash[72];
	char model[96];
	char network[16];
	char status[16];        /* created queued running exited stopped timeout budget failed */
	char reason[128];       /* why it stopped or failed */
	char parent[SB_RUN_MAX]; /* run it was resumed or forked from */
	char last_type[SB_TYPE_MAX];
	uint64_t parent_offset;
	uint64_t cpus, memory_mib, timeout_s, budget_nusd;
	uint64_t created_ns, started_ns, ended_ns;
	int64_t exit_status;    /* valid when has_exit */
	uint64_t has_exit;
	uint64_t cost_nusd;     /* authoritative: from gateway usage events */
	uint64_t last_offset, last_seq, events;
	uint64_t forks;		/* runs forked from it */
	uint64_t snapshots;	/* its snapshots (saved and not removed) */
	char parent_snapshot[16]; /* the parent's snapshot it continues */
	uint64_t resumed_offset;  /* its last run.resumed (0: never resumed) */
	uint64_t net_lookups;	  /* granted names its stub answered (net.resolved) */
	uint64_t net_denied;	  /* what its network refused (net.denied counts) */
	uint64_t net_changes;	  /* live changes of its grants */
	uint64_t active_ns;	  /* the time of its ended segments, each from its
				   * run.started to its run.stopped */
	char progress_label[SB_LABEL_MAX + 1]; /* its latest agent.progress ("": none) */
	uint64_t progress_count, progress_total; /* ... total 0: none given */
	uint64_t turns;		  /* agent.turn.completed events */
	uint64_t tool_calls;	  /* agent.tool.completed events */
	uint64_t removed;	  /* 1: run.removed (its disk and snapshots freed) */
	char runner[32];	  /* the runner its machine runs on (run.created's;
				   * "local" in records from before runners) */
};

/* Applies event ev, whose payload map is map, to rs, the state of ev's
 * run, as the runstate projection does: all of it but the count of forks
 * a forked run's parent keeps (it is the parent's state). For a client
 * that follows a run from its state (sanbox wait). */
void sb_runstate_fold(struct sb_runstate *rs, const struct sb_event *ev,
		      const msgpack_object *map);

/* Packs rs as a msgpack map with a fixed key order. pk is as
 * sb_mapw_begin's (engine/mpack.h). Errors: as sb_mapw_end. */
int sb_runstate_pack(const struct sb_runstate *rs, msgpack_packer *pk);

/* Fills rs from a map made by sb_runstate_pack (missing keys stay zero).
 * Errors: SB_ERR_CORRUPT. */
int sb_runstate_unpack(const msgpack_object *map, struct sb_runstate *rs);

/* Reads run's state. Errors: SB_ERR_NOTFOUND, SB_ERR_CORRUPT, SB_ERR_IO. */
int sb_runstate_get(sb_projector *p, const char *run, struct sb_runstate *rs);

/* Calls fn for every run in id order until fn returns non-zero (which is
 * returned). Errors: SB_ERR_CORRUPT, SB_ERR_IO. */
int sb_runstate_each(sb_projector *p, int (*fn)(void *ctx, const struct sb_runstate *rs),
		     void *ctx);

/* Returns 1 when the run is created, queued or running (not yet ended). */
int sb_runstate_is_live(const struct sb_runstate *rs);

/* Lists the ids of live runs, of group only when group is not NULL, into a
 * new array *runs of *n ids (the caller frees it; NULL when none).
 * Errors: SB_ERR_NOMEM, SB_ERR_CORRUPT, SB_ERR_IO. */
int sb_runstate_live(sb_projector *p, const char *group, char (**runs)[SB_RUN_MAX],
		     size_t *n);

struct sb_cost {
	uint64_t input_tokens, output_tokens, cached_tokens, cost_nusd, calls;
};

/* Reads the totals of scope ("run", "group" or "model") id; an id with no
 * usage gives zeros. Errors: SB_ERR_CORRUPT, SB_ERR_IO. */
int sb_costs_get(sb_projector *p, const char *scope, const char *id, struct sb_cost *c);

/* Calls fn for every id of scope, in order, until fn returns non-zero. */
int sb_costs_each(sb_projector *p, const char *scope,
		  int (*fn)(void *ctx, const char *id, const struct sb_cost *c), void *ctx);

struct sb_resume_point {
	uint64_t offset, seq, ts_ns; /* of its snapshot.saved */
	char snapshot[72];	      /* "sN" */
	char kind[16];		      /* disk or memory */
	char trigger[16];	      /* demand, turn or end */
	char layer[160], memory[160]; /* files, relative to the state directory */
	uint64_t bytes, memory_bytes; /* all of it; its memory file */
	uint64_t synced; /* 1: the guest wrote its files out first */
};

/* Calls fn for each resume point of run, oldest first, until fn returns
 * non-zero. Errors: SB_ERR_CORRUPT, SB_ERR_IO. */
int sb_resume_each(sb_projector *p, const char *run,
		   int (*fn)(void *ctx, const struct sb_resume_point *rp), void *ctx);

/* Finds the newest resume point of run at or before offset.
 * Errors: SB_ERR_NOTFOUND, SB_ERR_CORRUPT, SB_ERR_IO. */
int sb_resume_find(sb_projector *p, const char *run, uint64_t offset,
		   struct sb_resume_point *rp);

/* A group: from its group.created, or from the first run created with its
 * label (then id, goal and budget are empty). */
struct sb_group {
	char id[SB_RUN_MAX];	/* its stream in the log ("g-" and 10 hex), or "" */
	char name[64];
	char goal[4096];
	uint64_t budget_nusd;	/* its shared budget (0: none) */
	uint64_t created_ns;
	uint64_t planned;	/* runs its group.created planned */
	uint64_t runs;		/* runs created with its label */
};

/* Reads group name. Errors: SB_ERR_NOTFOUND, SB_ERR_CORRUPT, SB_ERR_IO. */
int sb_group_get(sb_projector *p, const char *name, struct sb_group *g);

/* Sets *runs (the caller frees it) to the ids of group name's runs, in the
 * order they were created, and *n to their number (0: none or no such
 * group). Errors: SB_ERR_NOMEM, SB_ERR_IO. */
int sb_group_runs(sb_projector *p, const char *name, char (**runs)[SB_RUN_MAX], size_t *n);

/* Calls fn for every group, by name, until fn returns non-zero.
 * Errors: SB_ERR_CORRUPT, SB_ERR_IO, SB_ERR_NOMEM. */
int sb_group_each(sb_projector *p, int (*fn)(void *ctx, const struct sb_group *g), void *ctx);

/* Packs g as a msgpack map with a fixed key order. pk is as
 * sb_mapw_begin's (engine/mpack.h). Errors: as sb_mapw_end. */
int sb_group_pack(const struct sb_group *g, msgpack_packer *pk);

#endif
