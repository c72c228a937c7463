/* stubs.h - the built-in model stubs a daemon runs: one per script
 * directory in use, at most SB_STUBS_MAX, started on first use.
 *
 * A stub dies with the daemon: it is started with --parent, so the kernel
 * ends it when the thread that started it ends (a worker that lives as long
 * as the daemon), and it exits by itself when its parent is not the one it
 * was given. No stub outlives a daemon killed with SIGKILL.
 */
#ifndef SB_STUBS_H
#define SB_STUBS_H

#include "engine/gateway/models.h"

#define SB_STUBS_MAX 4

typedef struct sb_stubs sb_stubs;

/* Makes an empty set of stubs. Errors: SB_ERR_NOMEM. */
int sb_stubs_open(sb_stubs **out);

/* Writes the base URL of the stub answering from the scripts in
 * script_dir ("" for its own) into url, starting that stub when it does
 * not run (a stub that ended is started again). Safe from any thread; may
 * block while a stub starts (up to 5 s): call it off the loop.
 * Errors: SB_ERR_UNAVAIL (it cannot start: the detail says why),
 * SB_ERR_FULL (SB_STUBS_MAX script directories are in use). */
int sb_stubs_url(sb_stubs *s, const char *script_dir, char url[SB_URL_MAX]);

/* Ends every stub and frees s (NULL is fine). */
void sb_stubs_close(sb_stubs *s);

#endif
