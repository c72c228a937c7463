/* projector_int.h - the projector's handle, inside projections/ only:
 * projector.c opens it, folds the log into it and closes it; store.c reads
 * a projection's state through it. Neither the handle nor its table of
 * projections is seen beyond these two files.
 */
#ifndef SB_PROJECTOR_INT_H
#define SB_PROJECTOR_INT_H

#include <lmdb.h>
#include <msgpack.h>
#include <pthread.h>

#include "projections/projection.h"

struct sb_projector {
	sb_log *log;
	const struct sb_projection *const *proj; /* the built-in table, n entries */
	size_t n;
	MDB_dbi ckpt;	    /* name -> checkpoint offset (8 bytes BE) */
	pthread_mutex_t mu; /* one catch-up or rebuild at a time; guards zone */
	msgpack_zone zone;
	MDB_dbi dbi[]; /* projection i's database, for each of the n */
};

#endif
