/* parse.c - option values and "did you mean" (see parse.h). */
#include "cli/parse.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/error.h"
#include "engine/units.h"

/* The edit distance of a and b (insertions, deletions, substitutions and
 * swaps of two neighbours: "frok" is one from "fork"), counted up to 63
 * bytes of each. */
static size_t edit_distance(const char *a, const char *b)
{
	size_t la = strnlen(a, 63), lb = strnlen(b, 63), d[64][64];

	for (size_t i = 0; i <= la; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= la; i++) {
		for (size_t j = 1; j <= lb; j++) {
			size_t v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			if (d[i - 1][j] + 1 < v)
				v = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < v)
				v = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] &&
			    a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
				v = d[i - 2][j - 2] + 1;
			d[i][j] = v;
		}
	}
	return d[la][lb];
}

void cli_suggest_init(struct cli_suggest *s, const char *word)
{
	s->word = word;
	s->best[0] = 0;
	s->dist = (size_t)-1;
}

void cli_suggest_add(struct cli_suggest *s, const char *cand, size_t len)
{
	char c[sizeof s->best];
	size_t d;

	if (len >= sizeof c)
		return;
	memcpy(c, cand, len);
	c[len] = 0;
	d = edit_distance(s->word, c);
	/* a prefix of the candidate, or a slip of a third of its letters */
	if (d < s->dist && (d * 3 <= len || !strncmp(c, s->word, strlen(s->word)))) {
		memcpy(s->best, c, len + 1);
		s->dist = d;
	}
}

const char *cli_suggest_hint(const struct cli_suggest *s, char *buf, size_t cap)
{
	if (!s->best[0] || !strcmp(s->best, s->word))
		return "";
	snprintf(buf, cap, "; did you mean '%s'?", s->best);
	return buf;
}

int cli_parse_duration(const char *s, uint64_t *secs)
{
	double v;
	int rc;

	if ((rc = sb_duration_parse(s, &v)))
		return rc;
	if (v > 1e12)
		return sb_seterr(SB_ERR_INVAL, "duration '%s' is too long", s);
	*secs = (uint64_t)(v + 0.5);
	if (*secs == 0)
		return sb_seterr(SB_ERR_INVAL, "duration '%s' must be at least a second",
				 s);
	return SB_OK;
}

/* The multiplier of a size suffix ("" is unit), or 0 when suf is none. */
static uint64_t size_suffix(const char *suf, uint64_t unit)
{
	static const char letters[] = "kmgt";
	const char *at;

	if (!*suf)
		return unit;
	if (!strcasecmp(suf, "b"))
		return 1;
	if (!(at = strchr(letters, suf[0] | 0x20)) || !*at)
		return 0;
	if (suf[1] && strcasecmp(suf + 1, "b") && strcasecmp(suf + 1, "ib"))
		return 0;
	return 1ull << (10 * (at - letters + 1));
}

int cli_parse_size(const char *s, uint64_t unit, uint64_t max, uint64_t *bytes)
{
	char *end;
	double v = strtod(s, &end);
	uint64_t mul;

	if (end == s || s[0] == '-' || !isfinite(v) || !(mul = size_suffix(end, unit)))
		return sb_seterr(SB_ERR_INVAL, "'%s' is not a size (e.g. 64K, 256M, 2G)",
				 s);
	if (v * (double)mul > (double)max)
		return sb_seterr(SB_ERR_INVAL, "size %s is above %llu bytes", s,
				 (unsigned long long)max);
	*bytes = (uint64_t)(v * (double)mul);
	if (*bytes == 0)
		return sb_seterr(SB_ERR_INVAL, "size %s must be positive", s);
	return SB_OK;
}

int cli_parse_size_mib(const char *s, uint64_t *mib)
{
	uint64_t bytes;
	int rc = cli_parse_size(s, 1ull << 20, 1ull << 40, &bytes);

	if (rc)
		return rc;
	*mib = bytes >> 20;
	if (*mib < 64)
		return sb_seterr(SB_ERR_INVAL, "memory %s is below the 64 MiB minimum",
				 s);
	return SB_OK;
}

int cli_parse_usd(const char *s, uint64_t *nusd)
{
	char *end;
	double v = strtod(s[0] == '$' ? s + 1 : s, &end);

	if (end == s || *end || v <= 0 || !isfinite(v) || v > 1e6)
		return sb_seterr(
		    SB_ERR_INVAL,
		    "'%.40s' is not a positive amount of USD (at most $1000000)", s);
	*nusd = (uint64_t)llround(v * 1e9);
	return SB_OK;
}

int cli_parse_num(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (!*s || *end || errno || s[0] == '-' || v < min || v > max)
		return sb_seterr(SB_ERR_INVAL,
				 "'%.40s' is not a number from %llu to %llu", s,
				 (unsigned long long)min, (unsigned long long)max);
	*out = v;
	return SB_OK;
}
