/* manager.c - the run manager put together (see runs.h, run.h): it opens
 * the recording (batch.c) and the capacity (queue.c), installs the hooks
 * through which queue.c starts an admitted run (runs.c) and runs.c hands
 * a guest's answers and a run's end to live.c, then takes up the runs a
 * previous daemon left (from.c). Nothing of the others calls in here.
 */
#include <pthread.h>
#include <stdlib.h>

#include "engine/error.h"
#include "engine/runs/run.h"
#include "projections/views.h"

/* What the record knows of run, as the runner's sweep asks: 0 nothing,
 * 1 it ended, 2 it is live (an error reading it counts as live), 3 it
 * was removed. */
static int run_known(void *ctx, const char *run)
{
	struct sb_runstate st;
	int rc = sb_runstate_get(ctx, run, &st);

	if (rc == SB_ERR_NOTFOUND)
		return 0;
	if (rc || sb_runstate_is_live(&st))
		return 2;
	return st.removed ? 3 : 1;
}

/* Takes up the runs the record says are live: each runner sweeps its own
 * machines first, then the queued among them start in their order. */
static int runs_take_up(struct sb_runs *rs)
{
	const struct sb_runs_env *env = &rs->env;
	char(*runs)[SB_RUN_MAX] = NULL;
	size_t n = 0;
	int rc;

	if ((rc = sb_projector_catch_up(env->proj, NULL)) ||
	    (rc = sb_runstate_live(env->proj, NULL, &runs, &n)))
		return rc;
	for (size_t i = 0; i < env->nrunners; i++) /* each its own machines */
		if (env->runners[i].ops->sweep)
			env->runners[i].ops->sweep(env->runners[i].ctx, run_known, env->proj);
	rs->pump_held = 1; /* the queued are started in their order, once all are in */
	for (size_t i = 0; i < n; i++)
		sb_runs_reattach(rs, runs[i]);
	rs->pump_held = 0;
	sb_runs_pump(rs);
	free(runs);
	return SB_OK;
}

int sb_runs_open(const struct sb_runs_env *env, struct sb_runs **out)
{
	struct sb_runs *rs = calloc(1, sizeof *rs);
	int rc;

	if (!rs)
		return SB_ERR_NOMEM;
	rs->env = *env;
	pthread_mutex_init(&rs->stop_mu, NULL);
	pthread_mutex_init(&rs->cap_mu, NULL);
	rs->start_admitted = sb_run_start_admitted;
	rs->live_ops = &sb_run_live_ops;
	if ((rc = sb_runs_capacity_init(rs)) || (rc = sb_runs_batch_open(rs)) ||
	    (rc = runs_take_up(rs))) {
		sb_runs_close(rs);
		return rc;
	}
	*out = rs;
	return SB_OK;
}

void sb_runs_close(struct sb_runs *rs)
{
	if (!rs)
		return;
	sb_runs_batch_close(rs);
	sb_runs_lifecycle_close(rs);
	sb_runs_capacity_free(rs);
	pthread_mutex_destroy(&rs->stop_mu);
	pthread_mutex_destroy(&rs->cap_mu);
	free(rs);
}
