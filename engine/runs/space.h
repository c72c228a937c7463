/* space.h - what runs take on a runner's disks, in the figures a runner
 * reports (runner.h: release and usage) and the daemon answers with
 * (run.rm, space). Plain structs: no calls, no state.
 */
#ifndef SB_SPACE_H
#define SB_SPACE_H

/* What releasing a removed run's files freed (or, dry, would free), in
 * allocated bytes, and the layers it kept for other runs. */
struct sb_layers_freed {
	unsigned long long bytes;
	unsigned layers, kept;
};

/* The space runs take, by kind (allocated blocks). */
struct sb_layers_usage {
	unsigned long long runs;      /* their current disk layers, logs, ... */
	unsigned long long snapshots; /* frozen disk layers */
	unsigned long long memory;    /* memory snapshots (N.mem) */
	unsigned nruns, nsnapshots, nmemory;
};

#endif
