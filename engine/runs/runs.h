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

#include "engine/log/event.h"

struct sb_daemon;
struct sb_runs;

/* Opens the run manager and reconciles runs a previous daemon left
 * running: each gets run.failed (reason "daemon-restart") and run.stopped,
 * and a VM of it that still runs is ended. The guest agent's boot deadline
 * is $SANBOX_BOOT_TIMEOUT (seconds, "90s", "3m"; default 120 s); the QEMU
 * binary is sb_vm_qemu() ($SANBOX_QEMU). Errors: SB_ERR_INVAL (bad
 * SANBOX_BOOT_TIMEOUT), SB_ERR_NOMEM, SB_ERR_IO. */
int sb_runs_open(struct sb_daemon *d, struct sb_runs **out);

/* Stops watching runs and frees (NULL is fine). A VM still running is
 * left to the next daemon's reconciliation. */
void sb_runs_close(struct sb_runs *r);

/* Creates and starts a run from spec; writes its id into run. A run that
 * is recorded but cannot start (QEMU missing, no room for its disk layer)
 * is not an error: its run.failed and run.stopped say why. The inputs'
 * contents go to the guest in INPUT frames after the SPEC (vmm/chan.h).
 * Errors: SB_ERR_INVAL (bad spec; detail says which field), SB_ERR_TOOBIG
 * (inputs above SB_CHAN_INPUTS_MAX bytes or SB_CHAN_INPUT_FILES files),
 * SB_ERR_NOTFOUND (template), SB_ERR_FULL (the log cannot take the run's
 * events; the detail names the state directory), and log errors. */
int sb_runs_create(struct sb_runs *r, const msgpack_object *spec, char run[SB_RUN_MAX]);

/* Stops run: asks the harness to end (SIGTERM), then ends the VM after a
 * grace period. reason goes into run.stopped. Errors: SB_ERR_NOTFOUND,
 * SB_ERR_STATE (the run is not running). */
int sb_runs_stop(struct sb_runs *r, const char *run, const char *reason);

/* Stops every run with a live VM as sb_runs_stop does. Once the daemon is
 * stopping (sb_daemon.stopping), the last run to end breaks its loop. */
void sb_runs_stop_all(struct sb_runs *r, const char *reason);

/* Number of runs with a live VM. */
unsigned sb_runs_active(struct sb_runs *r);

#endif
