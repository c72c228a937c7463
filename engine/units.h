/* units.h - durations written as people write them, and the monotonic
 * clock with the deadlines poll() and timers take.
 */
#ifndef SB_UNITS_H
#define SB_UNITS_H

#include <stdint.h>

/* Milliseconds of the monotonic clock. */
int64_t sb_now_ms(void);

/* The deadline timeout_ms from now (-1, for no timeout: none, -1). */
int64_t sb_deadline(int timeout_ms);

/* Milliseconds left until deadline, in poll()'s convention: -1 for none,
 * 0 once it has passed. */
int sb_ms_left(int64_t deadline);

/* Parses a duration: a number of seconds, or a number with s, m, h or d
 * ("90", "90s", "2.5m", "8h", "1d") into *secs. Errors: SB_ERR_INVAL (also
 * for a value that is not positive and finite; the detail quotes it). */
int sb_duration_parse(const char *text, double *secs);

#endif
