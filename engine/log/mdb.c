/* mdb.c - LMDB's error codes in the project's terms (mdb.h). */
#include "engine/log/mdb.h"

#include <errno.h>
#include <lmdb.h>

#include "engine/error.h"

int sb_log_mdb_err(int rc, const char *what)
{
	switch (rc) {
	case 0: return SB_OK;
	case MDB_MAP_FULL:
	case ENOSPC: return sb_seterr(SB_ERR_FULL, "%s: %s", what, mdb_strerror(rc));
	case MDB_NOTFOUND: return sb_seterr(SB_ERR_NOTFOUND, "%s: not found", what);
	case ENOMEM: return SB_ERR_NOMEM;
	case EACCES:
	case EROFS: return sb_seterr(SB_ERR_DENIED, "%s: %s", what, mdb_strerror(rc));
	case MDB_CORRUPTED:
	case MDB_PAGE_NOTFOUND:
	case MDB_INVALID:
	case MDB_VERSION_MISMATCH: return sb_seterr(SB_ERR_CORRUPT, "%s: %s", what, mdb_strerror(rc));
	}
	return sb_seterr(SB_ERR_IO, "%s: %s", what, mdb_strerror(rc));
}
