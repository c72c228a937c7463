/* units.c - durations (see units.h). */
#include "engine/units.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/error.h"

int sb_duration_parse(const char *text, double *secs)
{
	char *end;
	double v = strtod(text, &end), mul = 0;

	if (end != text) {
		if (!*end || !strcmp(end, "s"))
			mul = 1;
		else if (!strcmp(end, "m"))
			mul = 60;
		else if (!strcmp(end, "h"))
			mul = 3600;
		else if (!strcmp(end, "d"))
			mul = 86400;
	}
	if (!mul || !isfinite(v) || !(v * mul > 0))
		return sb_seterr(SB_ERR_INVAL,
				 "'%.40s' is not a duration (e.g. 90, 90s, 10m, 8h)",
				 text);
	*secs = v * mul;
	return SB_OK;
}

int64_t sb_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t sb_deadline(int timeout_ms)
{
	return timeout_ms < 0 ? -1 : sb_now_ms() + timeout_ms;
}

int sb_ms_left(int64_t deadline)
{
	int64_t left;

	if (deadline < 0)
		return -1;
	left = deadline - sb_now_ms();
	return left < 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
}
