/* stubs.c - the daemon's model stubs (see stubs.h). */
#include "engine/gateway/stubs.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "engine/error.h"

struct stub {
	pid_t pid; /* 0 when not running */
	char script_dir[SB_URL_MAX];
	char url[SB_URL_MAX];
};

struct sb_stubs {
	pthread_mutex_t mu;
	struct stub s[SB_STUBS_MAX];
};

int sb_stubs_open(sb_stubs **out)
{
	sb_stubs *s = calloc(1, sizeof *s);

	if (!s)
		return SB_ERR_NOMEM;
	pthread_mutex_init(&s->mu, NULL);
	*out = s;
	return SB_OK;
}

/* Reaps a stub that ended. Called with s->mu held. */
static void stub_check(struct stub *st)
{
	int status;

	if (st->pid && waitpid(st->pid, &status, WNOHANG) == st->pid) {
		fprintf(stderr, "sanboxd: the model stub (pid %d) ended with status %d\n",
			(int)st->pid, status);
		st->pid = 0;
	}
}

int sb_stubs_url(sb_stubs *s, const char *script_dir, char url[SB_URL_MAX])
{
	struct stub *free_one = NULL;
	int rc = SB_OK;

	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < SB_STUBS_MAX; i++) {
		struct stub *st = &s->s[i];
		stub_check(st);
		if (st->pid && !strcmp(st->script_dir, script_dir)) {
			memcpy(url, st->url, SB_URL_MAX);
			goto out;
		}
		if (!st->pid && !free_one)
			free_one = st;
	}
	if (!free_one) {
		rc = sb_seterr(
		    SB_ERR_FULL,
		    "the built-in model stub runs for %d script directories already",
		    SB_STUBS_MAX);
		goto out;
	}
	if ((rc = sb_stub_start(script_dir, &free_one->pid, free_one->url)))
		goto out;
	snprintf(free_one->script_dir, sizeof free_one->script_dir, "%s", script_dir);
	memcpy(url, free_one->url, SB_URL_MAX);
out:
	pthread_mutex_unlock(&s->mu);
	return rc;
}

void sb_stubs_close(sb_stubs *s)
{
	if (!s)
		return;
	for (int i = 0; i < SB_STUBS_MAX; i++)
		sb_stub_stop(s->s[i].pid);
	pthread_mutex_destroy(&s->mu);
	free(s);
}
