/* loop.c - libev behind the sb_loop interface. */
#include "engine/loop.h"

#include <errno.h>
#include <ev.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/pidfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/error.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

struct sb_loop {
	struct ev_loop *ev;
	ev_async post_w;    /* wakes the loop for posted functions */
	pthread_mutex_t mu; /* guards the post queue */
	struct sb_post *head, **tail;
};

enum kind { K_IO, K_TIMER, K_CHILD, K_ASYNC, K_SIGNAL, K_IDLE_END };

struct sb_watch {
	union {
		ev_io io;
		ev_timer timer;
		ev_async async;
		ev_signal sig;
		ev_prepare prep;
	} w;
	enum kind kind;
	sb_loop *loop;
	void *ctx;
	int fd;	  /* K_CHILD: the pidfd, or -1 once closed */
	int gone; /* K_CHILD: the process was gone at the start (w.timer) */
	pid_t pid;
	union {
		void (*io)(void *ctx, int revents);
		void (*plain)(void *ctx);
		void (*child)(void *ctx, int status);
	} cb;
};

static void post_cb(struct ev_loop *ev, ev_async *a, int revents)
{
	sb_loop *l = (sb_loop *)((char *)a - offsetof(sb_loop, post_w));
	struct sb_post *p;

	(void)ev;
	(void)revents;
	pthread_mutex_lock(&l->mu);
	p = l->head;
	l->head = NULL;
	l->tail = &l->head;
	pthread_mutex_unlock(&l->mu);
	while (p) {
		/* once fn runs, the post is the caller's again */
		struct sb_post *next = p->next;
		p->fn(p->ctx);
		p = next;
	}
}

int sb_loop_open(sb_loop **out)
{
	sb_loop *l = calloc(1, sizeof *l);

	if (!l)
		return SB_ERR_NOMEM;
	l->ev = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
	if (!l->ev) {
		free(l);
		return sb_seterr(SB_ERR_IO, "cannot create an event loop");
	}
	pthread_mutex_init(&l->mu, NULL);
	l->tail = &l->head;
	ev_async_init(&l->post_w, post_cb);
	ev_async_start(l->ev, &l->post_w);
	ev_unref(l->ev); /* posting is not a reason to keep running */
	*out = l;
	return SB_OK;
}

void sb_loop_run(sb_loop *l)
{
	ev_run(l->ev, 0);
}

void sb_loop_break(sb_loop *l)
{
	ev_break(l->ev, EVBREAK_ALL);
}

void sb_loop_close(sb_loop *l)
{
	if (!l)
		return;
	ev_ref(l->ev);
	ev_async_stop(l->ev, &l->post_w);
	l->head = NULL; /* dropped: the posts are their callers' */
	ev_loop_destroy(l->ev);
	pthread_mutex_destroy(&l->mu);
	free(l);
}

double sb_loop_now(sb_loop *l)
{
	return ev_now(l->ev);
}

void sb_loop_post(sb_loop *l, struct sb_post *p, void (*fn)(void *ctx), void *ctx)
{
	p->fn = fn;
	p->ctx = ctx;
	p->next = NULL;
	pthread_mutex_lock(&l->mu);
	*l->tail = p;
	l->tail = &p->next;
	pthread_mutex_unlock(&l->mu);
	ev_async_send(l->ev, &l->post_w);
}

static sb_watch *watch_new(sb_loop *l, enum kind k, void *ctx)
{
	sb_watch *w = calloc(1, sizeof *w);

	if (w) {
		w->kind = k;
		w->loop = l;
		w->ctx = ctx;
		w->fd = -1;
	}
	return w;
}

static void io_cb(struct ev_loop *ev, ev_io *io, int revents)
{
	sb_watch *w = (sb_watch *)io;

	(void)ev;
	w->cb.io(w->ctx,
		 (revents & EV_READ ? SB_READ : 0) | (revents & EV_WRITE ? SB_WRITE : 0));
}

static int ev_events(int events)
{
	return (events & SB_READ ? EV_READ : 0) | (events & SB_WRITE ? EV_WRITE : 0);
}

sb_watch *sb_loop_io(sb_loop *l, int fd, int events, void (*cb)(void *ctx, int revents),
		     void *ctx)
{
	sb_watch *w = watch_new(l, K_IO, ctx);

	if (!w)
		return NULL;
	w->cb.io = cb;
	ev_io_init(&w->w.io, io_cb, fd, ev_events(events));
	if (events)
		ev_io_start(l->ev, &w->w.io);
	return w;
}

void sb_watch_io_set(sb_watch *w, int events)
{
	if (ev_events(events) == (w->w.io.events & (EV_READ | EV_WRITE)) &&
	    ev_is_active(&w->w.io) == (events != 0))
		return;
	ev_io_stop(w->loop->ev, &w->w.io);
	ev_io_set(&w->w.io, w->w.io.fd, ev_events(events));
	if (events)
		ev_io_start(w->loop->ev, &w->w.io);
}

static void timer_cb(struct ev_loop *ev, ev_timer *t, int revents)
{
	sb_watch *w = (sb_watch *)t;

	(void)ev;
	(void)revents;
	w->cb.plain(w->ctx);
}

sb_watch *sb_loop_timer(sb_loop *l, double after, double repeat, void (*cb)(void *ctx),
			void *ctx)
{
	sb_watch *w = watch_new(l, K_TIMER, ctx);

	if (!w)
		return NULL;
	w->cb.plain = cb;
	ev_timer_init(&w->w.timer, timer_cb, after, repeat);
	ev_timer_start(l->ev, &w->w.timer);
	return w;
}

/* The pidfd is readable: the process ended. Reap it if it is ours. */
static void child_cb(struct ev_loop *ev, ev_io *io, int revents)
{
	sb_watch *w = (sb_watch *)io;
	siginfo_t si = {0};
	int status = -1;

	(void)revents;
	ev_io_stop(ev, io);
	if (w->fd >= 0 &&
	    waitid((idtype_t)P_PIDFD, (id_t)w->fd, &si, WEXITED | WNOHANG) == 0 &&
	    si.si_pid) {
		if (si.si_code == CLD_EXITED)
			status = (si.si_status & 0xff) << 8;
		else
			status = si.si_status & 0x7f; /* killed or dumped */
	}
	if (w->fd >= 0)
		close(w->fd);
	w->fd = -1;
	w->cb.child(w->ctx, status); /* may stop (free) w */
}

/* A process that was gone before the watch began: report it at once. */
static void child_gone_cb(struct ev_loop *ev, ev_timer *t, int revents)
{
	sb_watch *w = (sb_watch *)((char *)t - offsetof(sb_watch, w));
	int status = -1;

	(void)revents;
	ev_timer_stop(ev, t);
	if (w->pid > 0 && waitpid(w->pid, &status, WNOHANG) <= 0)
		status = -1;
	w->cb.child(w->ctx, status);
}

sb_watch *sb_loop_child(sb_loop *l, pid_t pid, void (*cb)(void *ctx, int status),
			void *ctx)
{
	sb_watch *w = watch_new(l, K_CHILD, ctx);

	if (!w)
		return NULL;
	w->cb.child = cb;
	w->pid = pid;
	w->fd = pid > 0 ? pidfd_open(pid, 0) : -1;
	if (w->fd < 0) {
		w->gone = 1;
		ev_timer_init(&w->w.timer, child_gone_cb, 0, 0);
		ev_timer_start(l->ev, &w->w.timer);
		return w;
	}
	ev_io_init(&w->w.io, child_cb, w->fd, EV_READ);
	ev_io_start(l->ev, &w->w.io);
	return w;
}

static void async_cb(struct ev_loop *ev, ev_async *a, int revents)
{
	sb_watch *w = (sb_watch *)a;

	(void)ev;
	(void)revents;
	w->cb.plain(w->ctx);
}

sb_watch *sb_loop_async(sb_loop *l, void (*cb)(void *ctx), void *ctx)
{
	sb_watch *w = watch_new(l, K_ASYNC, ctx);

	if (!w)
		return NULL;
	w->cb.plain = cb;
	ev_async_init(&w->w.async, async_cb);
	ev_async_start(l->ev, &w->w.async);
	return w;
}

void sb_watch_wake(sb_watch *w)
{
	ev_async_send(w->loop->ev, &w->w.async);
}

static void prepare_cb(struct ev_loop *ev, ev_prepare *p, int revents)
{
	sb_watch *w = (sb_watch *)p;

	(void)ev;
	(void)revents;
	w->cb.plain(w->ctx);
}

sb_watch *sb_loop_idle_end(sb_loop *l, void (*cb)(void *ctx), void *ctx)
{
	sb_watch *w = watch_new(l, K_IDLE_END, ctx);

	if (!w)
		return NULL;
	w->cb.plain = cb;
	ev_prepare_init(&w->w.prep, prepare_cb);
	ev_prepare_start(l->ev, &w->w.prep);
	ev_unref(l->ev); /* it alone does not keep the loop running */
	return w;
}

static void signal_cb(struct ev_loop *ev, ev_signal *s, int revents)
{
	sb_watch *w = (sb_watch *)s;

	(void)ev;
	(void)revents;
	w->cb.plain(w->ctx);
}

sb_watch *sb_loop_signal(sb_loop *l, int signo, void (*cb)(void *ctx), void *ctx)
{
	sb_watch *w = watch_new(l, K_SIGNAL, ctx);

	if (!w)
		return NULL;
	w->cb.plain = cb;
	ev_signal_init(&w->w.sig, signal_cb, signo);
	ev_signal_start(l->ev, &w->w.sig);
	return w;
}

void sb_watch_stop(sb_watch *w)
{
	if (!w)
		return;
	switch (w->kind) {
	case K_IO: ev_io_stop(w->loop->ev, &w->w.io); break;
	case K_TIMER: ev_timer_stop(w->loop->ev, &w->w.timer); break;
	case K_CHILD:
		if (w->gone) {
			ev_timer_stop(w->loop->ev, &w->w.timer);
		} else {
			ev_io_stop(w->loop->ev, &w->w.io);
			if (w->fd >= 0)
				close(w->fd);
		}
		break;
	case K_ASYNC: ev_async_stop(w->loop->ev, &w->w.async); break;
	case K_SIGNAL: ev_signal_stop(w->loop->ev, &w->w.sig); break;
	case K_IDLE_END:
		ev_ref(w->loop->ev);
		ev_prepare_stop(w->loop->ev, &w->w.prep);
		break;
	}
	free(w);
}
