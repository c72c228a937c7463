/* error.c - error strings and the per-thread error detail. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char err_detail[512];
static _Thread_local int err_code;

const char *sb_strerror(int err)
{
	switch (err) {
	case SB_OK: return "success";
	case SB_END: return "end of data";
	case SB_ERR_NOMEM: return "out of memory";
	case SB_ERR_IO: return "input/output error";
	case SB_ERR_INVAL: return "invalid argument";
	case SB_ERR_NOTFOUND: return "not found";
	case SB_ERR_CORRUPT: return "corrupt data";
	case SB_ERR_SCHEMA: return "event refused by the schema";
	case SB_ERR_EXISTS: return "already exists";
	case SB_ERR_FULL: return "storage full";
	case SB_ERR_TIMEOUT: return "timed out";
	case SB_ERR_PROTO: return "protocol error";
	case SB_ERR_BUDGET: return "budget exhausted";
	case SB_ERR_DENIED: return "permission denied";
	case SB_ERR_UNAVAIL: return "not available";
	case SB_ERR_TOOBIG: return "too big";
	case SB_ERR_STATE: return "not possible in the current state";
	case SB_ERR_AMBIGUOUS: return "ambiguous";
	case SB_ERR_RESET: return "connection reset";
	}
	return "unknown error";
}

int sb_seterr(int err, const char *fmt, ...)
{
	char buf[sizeof err_detail];
	va_list ap;

	/* Formats aside first: an argument may be the detail itself, as in
	 * sb_seterr(rc, "offset %llu: %s", off, sb_errmsg(rc)). */
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	memcpy(err_detail, buf, sizeof buf);
	err_code = err;
	return err;
}

const char *sb_errmsg(int err)
{
	if (err_code == err && err_detail[0])
		return err_detail;
	return sb_strerror(err);
}

void sb_clearerr(void)
{
	err_detail[0] = 0;
	err_code = 0;
}
