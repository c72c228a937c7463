/* test_loop.c - posting to a loop: functions posted from other threads run
 * on the loop's thread once each, in the order posted; a post's node is the
 * caller's again once its function runs (it may post it again), and a loop
 * closed with posts pending drops them without touching the nodes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <pthread.h>

#include "engine/error.h"
#include "engine/loop.h"

#define POSTERS 4
#define PER_POSTER 2000

static void keep_alive(void *ctx)
{
	(void)ctx;
}

/* Runs l until a callback breaks it: a timer far away keeps it running
 * (posts alone do not keep a loop from returning). */
static void run_until_break(sb_loop *l)
{
	sb_watch *keep = sb_loop_timer(l, 3600, 0, keep_alive, NULL);

	assert_non_null(keep);
	sb_loop_run(l);
	sb_watch_stop(keep);
}

/* What ran, in order; touched on the loop's thread only. */
struct seen {
	sb_loop *loop;
	pthread_t loop_thread;
	int wrong_thread;
	uint32_t last[POSTERS]; /* each poster's last number + 1 */
	int out_of_order;
	size_t count, want;
};

/* One posted function call: its poster, its number and its node. */
struct item {
	struct seen *s;
	int poster;
	uint32_t n;
	struct sb_post post;
};

static void on_item(void *ctx)
{
	struct item *it = ctx;
	struct seen *s = it->s;

	if (!pthread_equal(pthread_self(), s->loop_thread))
		s->wrong_thread = 1;
	if (it->n != s->last[it->poster])
		s->out_of_order = 1;
	s->last[it->poster] = it->n + 1;
	if (++s->count == s->want)
		sb_loop_break(s->loop);
}

/* A poster: each item posted through its own node. */
struct poster {
	struct seen *s;
	int id;
	struct item *items;
	pthread_t th;
};

static void *poster_main(void *arg)
{
	struct poster *p = arg;

	for (uint32_t i = 0; i < PER_POSTER; i++) {
		struct item *it = &p->items[i];
		*it = (struct item){.s = p->s, .poster = p->id, .n = i};
		sb_loop_post(p->s->loop, &it->post, on_item, it);
	}
	return NULL;
}

static void test_post_order(void **state)
{
	struct seen s = {.want = POSTERS * PER_POSTER};
	struct poster p[POSTERS];

	(void)state;
	assert_int_equal(sb_loop_open(&s.loop), SB_OK);
	s.loop_thread = pthread_self();
	for (int i = 0; i < POSTERS; i++) {
		p[i] = (struct poster){.s = &s, .id = i};
		p[i].items = calloc(PER_POSTER, sizeof *p[i].items);
		assert_non_null(p[i].items);
		assert_int_equal(pthread_create(&p[i].th, NULL, poster_main, &p[i]), 0);
	}
	run_until_break(s.loop);
	for (int i = 0; i < POSTERS; i++) {
		pthread_join(p[i].th, NULL);
		assert_int_equal(s.last[i], PER_POSTER);
		free(p[i].items);
	}
	assert_int_equal(s.count, s.want);
	assert_false(s.wrong_thread);
	assert_false(s.out_of_order);
	sb_loop_close(s.loop);
}

/* A node posted again from its own function: it is the caller's then. */
struct again {
	sb_loop *loop;
	struct sb_post post;
	int runs;
};

static void on_again(void *ctx)
{
	struct again *a = ctx;

	if (++a->runs < 5)
		sb_loop_post(a->loop, &a->post, on_again, a);
	else
		sb_loop_break(a->loop);
}

static void test_post_again(void **state)
{
	struct again a = {0};

	(void)state;
	assert_int_equal(sb_loop_open(&a.loop), SB_OK);
	sb_loop_post(a.loop, &a.post, on_again, &a);
	run_until_break(a.loop);
	assert_int_equal(a.runs, 5);
	sb_loop_close(a.loop);
}

static void never(void *ctx)
{
	(*(int *)ctx)++;
}

/* Closing a loop with posts pending: none runs, and the nodes are left
 * alone (a node on this stack freed by the loop would crash). */
static void test_close_pending(void **state)
{
	struct sb_post node[2];
	sb_loop *l;
	int ran = 0;

	(void)state;
	assert_int_equal(sb_loop_open(&l), SB_OK);
	sb_loop_post(l, &node[0], never, &ran);
	sb_loop_post(l, &node[1], never, &ran);
	sb_loop_close(l);
	assert_int_equal(ran, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_post_order),
	    cmocka_unit_test(test_post_again),
	    cmocka_unit_test(test_close_pending),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
