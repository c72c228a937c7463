/* loop.c - libev behind the sb_loop interface. */
#include "engine/daemon/loop.h"

#include <ev.h>
#include <stdlib.h>

#include "engine/error.h"

struct sb_loop {
	struct ev_loop *ev;
};

enum kind { K_IO, K_TIMER, K_CHILD, K_ASYNC, K_SIGNAL };

struct sb_watch {
	union {
		ev_io io;
		ev_timer timer;
		ev_child child;
		ev_async async;
		ev_signal sig;
	} w;
	enum kind kind;
	sb_loop *loop;
	void *ctx;
	union {
		void (*io)(void *ctx, int revents);
		void (*plain)(void *ctx);
		void (*child)(void *ctx, int status);
	} cb;
};

int sb_loop_open(sb_loop **out)
{
	sb_loop *l = calloc(1, sizeof *l);

	if (!l)
		return SB_ERR_NOMEM;
	l->ev = ev_default_loop(EVFLAG_AUTO);
	if (!l->ev) {
		free(l);
		return sb_seterr(SB_ERR_IO, "cannot create the event loop");
	}
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
	free(l);
}

double sb_loop_now(sb_loop *l)
{
	return ev_now(l->ev);
}

static sb_watch *watch_new(sb_loop *l, enum kind k, void *ctx)
{
	sb_watch *w = calloc(1, sizeof *w);

	if (w) {
		w->kind = k;
		w->loop = l;
		w->ctx = ctx;
	}
	return w;
}

static void io_cb(struct ev_loop *ev, ev_io *io, int revents)
{
	sb_watch *w = (sb_watch *)io;

	(void)ev;
	w->cb.io(w->ctx, (revents & EV_READ ? SB_READ : 0) | (revents & EV_WRITE ? SB_WRITE : 0));
}

static int ev_events(int events)
{
	return (events & SB_READ ? EV_READ : 0) | (events & SB_WRITE ? EV_WRITE : 0);
}

sb_watch *sb_loop_io(sb_loop *l, int fd, int events, void (*cb)(void *ctx, int revents), void *ctx)
{
	sb_watch *w = watch_new(l, K_IO, ctx);

	if (!w)
		return NULL;
	w->cb.io = cb;
	ev_io_init(&w->w.io, io_cb, fd, ev_events(events));
	ev_io_start(l->ev, &w->w.io);
	return w;
}

void sb_watch_io_set(sb_watch *w, int events)
{
	if (ev_events(events) == (w->w.io.events & (EV_READ | EV_WRITE)))
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

sb_watch *sb_loop_timer(sb_loop *l, double after, double repeat, void (*cb)(void *ctx), void *ctx)
{
	sb_watch *w = watch_new(l, K_TIMER, ctx);

	if (!w)
		return NULL;
	w->cb.plain = cb;
	ev_timer_init(&w->w.timer, timer_cb, after, repeat);
	ev_timer_start(l->ev, &w->w.timer);
	return w;
}

static void child_cb(struct ev_loop *ev, ev_child *c, int revents)
{
	sb_watch *w = (sb_watch *)c;

	(void)revents;
	ev_child_stop(ev, c);
	w->cb.child(w->ctx, c->rstatus);
}

sb_watch *sb_loop_child(sb_loop *l, pid_t pid, void (*cb)(void *ctx, int status), void *ctx)
{
	sb_watch *w = watch_new(l, K_CHILD, ctx);

	if (!w)
		return NULL;
	w->cb.child = cb;
	ev_child_init(&w->w.child, child_cb, pid, 0);
	ev_child_start(l->ev, &w->w.child);
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
	case K_CHILD: ev_child_stop(w->loop->ev, &w->w.child); break;
	case K_ASYNC: ev_async_stop(w->loop->ev, &w->w.async); break;
	case K_SIGNAL: ev_signal_stop(w->loop->ev, &w->w.sig); break;
	}
	free(w);
}
