/* units.h - durations written as people write them. */
#ifndef SB_UNITS_H
#define SB_UNITS_H

/* Parses a duration: a number of seconds, or a number with s, m, h or d
 * ("90", "90s", "2.5m", "8h", "1d") into *secs. Errors: SB_ERR_INVAL (also
 * for a value that is not positive and finite; the detail quotes it). */
int sb_duration_parse(const char *text, double *secs);

#endif
