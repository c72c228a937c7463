/* runs.h - the run manager: turns a run spec into events and a microVM,
 * watches it, and ends it (exit, stop, timeout, failure).
 *
 * A run spec (the "spec" map of run.create, see SPEC.md) is resolved fully
 * before anything starts: template and its hash, limits, inputs, env names,
 * network mode, budget. Resolution errors refuse the run and write nothing.
 */
#ifndef SB_RUNS_H
#define SB_RUNS_H

#include <msgpack.h>

#include "engine/event.h"

struct sb_daemon;
struct sb_runs;

/* Opens the run manager and reconciles runs a previous daemon left
 * running: each gets run.failed (reason "daemon-restart") and run.stopped,
 * and a VM of it that still runs is ended. Errors: SB_ERR_NOMEM, SB_ERR_IO. */
int sb_runs_open(struct sb_daemon *d, struct sb_runs **out);

/* Stops watching runs (their VMs keep running) and frees (NULL is fine). */
void sb_runs_close(struct sb_runs *r);

/* Creates and starts a run from spec; writes its id into run.
 * Errors: SB_ERR_INVAL (bad spec; detail says which field), SB_ERR_NOTFOUND
 * (template), SB_ERR_UNAVAIL (QEMU or kernel missing), and log errors. */
int sb_runs_create(struct sb_runs *r, const msgpack_object *spec, char run[SB_RUN_MAX]);

/* Stops run: asks the harness to end (SIGTERM), then ends the VM after a
 * grace period. reason goes into run.stopped. Errors: SB_ERR_NOTFOUND,
 * SB_ERR_STATE (the run is not running). */
int sb_runs_stop(struct sb_runs *r, const char *run, const char *reason);

/* Number of runs with a live VM. */
unsigned sb_runs_active(struct sb_runs *r);

#endif
