/* error.h - Sanbox error codes.
 *
 * Every library function returns 0 (SB_OK) on success or a negative sb_err.
 * Iterators return SB_END (positive) when there is nothing more to read.
 * A function that fails may record a one-line detail with sb_seterr(); the
 * detail is per thread and stays valid until the next sb_seterr() on it.
 */
#ifndef SB_ERROR_H
#define SB_ERROR_H

enum sb_err {
	SB_OK = 0,
	SB_END = 1,           /* iteration finished (not an error) */
	SB_ERR_NOMEM = -1,    /* out of memory */
	SB_ERR_IO = -2,       /* system call or storage failure; errno kept */
	SB_ERR_INVAL = -3,    /* invalid argument or request */
	SB_ERR_NOTFOUND = -4, /* no such run, event, blob, key or file */
	SB_ERR_CORRUPT = -5,  /* stored data failed its checksum or decoding */
	SB_ERR_SCHEMA = -6,   /* event refused by the schema */
	SB_ERR_EXISTS = -7,   /* already exists */
	SB_ERR_FULL = -8,     /* storage or map full */
	SB_ERR_TIMEOUT = -9,  /* deadline passed */
	SB_ERR_PROTO = -10,   /* peer broke the protocol */
	SB_ERR_BUDGET = -11,  /* budget exhausted */
	SB_ERR_DENIED = -12,  /* not permitted */
	SB_ERR_UNAVAIL = -13, /* service or dependency not available */
	SB_ERR_TOOBIG = -14,  /* input larger than its limit */
	SB_ERR_STATE = -15,   /* operation not valid in the current state */
	SB_ERR_AMBIGUOUS = -16, /* a prefix matches more than one thing */
	SB_ERR_RESET = -17,   /* connection made again: messages may be missing */
};

/* Returns a static description of err ("event refused by the schema"). */
const char *sb_strerror(int err);

/* Records a detail message for the calling thread and returns err, so a
 * failing function can end with `return sb_seterr(SB_ERR_INVAL, "...")`. */
int sb_seterr(int err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Returns the calling thread's last detail, or sb_strerror(err) when the
 * detail was recorded for another error. Valid until the next sb_seterr()
 * on this thread. */
const char *sb_errmsg(int err);

/* Forgets the calling thread's detail. */
void sb_clearerr(void);

#endif
