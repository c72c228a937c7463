/* units.c - durations (see units.h). */
#include "engine/units.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
