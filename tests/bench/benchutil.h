/* benchutil.h - helpers shared by the benchmark programs: a monotonic clock,
 * sorting and medians, and removing a work directory. Header-only. */
#ifndef SB_BENCHUTIL_H
#define SB_BENCHUTIL_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Seconds since an arbitrary point (CLOCK_MONOTONIC). */
static inline double bench_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* qsort(3)'s comparison of doubles, ascending. */
static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The median of v's n values (n > 0); sorts v. */
static inline double bench_median(double *v, size_t n)
{
	qsort(v, n, sizeof v[0], bench_cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static inline int bench_rm_one(const char *path, const struct stat *st, int flag,
			       struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(path);
}

/* Removes dir and everything in it. */
static inline void bench_rmrf(const char *dir)
{
	nftw(dir, bench_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
