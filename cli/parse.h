/* parse.h - the values of sanbox's options as people write them (sizes,
 * durations, dollars, numbers in a range) and "did you mean" for a
 * mistyped word. Pure: nothing here prints, connects or exits; errors are
 * return values with a detail (sb_errmsg) that quotes the value. `sanbox
 * run`'s options and a group file's fields (cli/groupfile.h) are read by
 * the same functions, so both take the same text.
 */
#ifndef SB_CLI_PARSE_H
#define SB_CLI_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* "Did you mean": the candidate nearest to a mistyped word. Init it with
 * the word (borrowed), add each candidate (len bytes of cand, copied),
 * then cli_suggest_hint writes "; did you mean 'BEST'?" into buf and
 * returns it, or returns "" when no candidate is near enough. */
struct cli_suggest {
	const char *word;
	char best[64];
	size_t dist;
};
void cli_suggest_init(struct cli_suggest *s, const char *word);
void cli_suggest_add(struct cli_suggest *s, const char *cand, size_t len);
const char *cli_suggest_hint(const struct cli_suggest *s, char *buf, size_t cap);

/* Parses s, a decimal number from min to max, into *out. Errors:
 * SB_ERR_INVAL ("'s' is not a number from MIN to MAX"). */
int cli_parse_num(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* Parses "10m", "90s", "2h", "1d" or a number of seconds.
 * Errors: SB_ERR_INVAL. */
int cli_parse_duration(const char *s, uint64_t *secs);

/* Parses a size into bytes: a number (fractions too) and a suffix B, K,
 * M, G or T (powers of 1024; "KiB" and "KB" spellings too, any case); a
 * bare number counts units of unit bytes. Errors: SB_ERR_INVAL (not a
 * size, not positive, or above max bytes). */
int cli_parse_size(const char *s, uint64_t unit, uint64_t max, uint64_t *bytes);

/* Parses a memory size, "256M", "4G" or "512" (MiB), at least 64 MiB.
 * Errors: SB_ERR_INVAL. */
int cli_parse_size_mib(const char *s, uint64_t *mib);

/* Parses "$1.50" or "1.5" into nano-USD. Errors: SB_ERR_INVAL. */
int cli_parse_usd(const char *s, uint64_t *nusd);

#endif
