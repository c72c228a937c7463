/* bucket.h - a token bucket: at most `rate` events a second, `burst` at
 * once. The caller passes the time (seconds of any monotonic clock), so
 * the bucket itself never reads a clock and can be tested exactly.
 */
#ifndef SB_BUCKET_H
#define SB_BUCKET_H

struct sb_bucket {
	double rate, burst, tokens, at;
};

/* A full bucket at time now. */
static inline void sb_bucket_init(struct sb_bucket *b, double rate, double burst,
				  double now)
{
	b->rate = rate;
	b->burst = burst;
	b->tokens = burst;
	b->at = now;
}

/* Adds the tokens earned since the last call. */
static inline void sb_bucket_refill(struct sb_bucket *b, double now)
{
	if (now > b->at) {
		b->tokens += (now - b->at) * b->rate;
		if (b->tokens > b->burst)
			b->tokens = b->burst;
		b->at = now;
	}
}

/* Seconds until the bucket holds a whole token (0: it does). */
static inline double sb_bucket_wait(const struct sb_bucket *b)
{
	return b->tokens >= 1 ? 0 : (1 - b->tokens) / b->rate;
}

/* Takes one token at time now: returns 1, or 0 when the bucket is empty. */
static inline int sb_bucket_take(struct sb_bucket *b, double now)
{
	sb_bucket_refill(b, now);
	if (b->tokens < 1)
		return 0;
	b->tokens -= 1;
	return 1;
}

#endif
