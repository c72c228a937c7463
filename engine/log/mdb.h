/* mdb.h - what every LMDB user of the log folder shares (the log, the blob
 * table, projections and audit export read the same environment): LMDB's
 * error codes in the project's terms. */
#ifndef SB_LOG_MDB_H
#define SB_LOG_MDB_H

/* Maps an LMDB error code (or an errno LMDB returned) to an sb_err,
 * recording "what: LMDB's text" as the detail: 0 -> SB_OK, MDB_MAP_FULL and
 * ENOSPC -> SB_ERR_FULL, MDB_NOTFOUND -> SB_ERR_NOTFOUND, ENOMEM ->
 * SB_ERR_NOMEM, EACCES and EROFS -> SB_ERR_DENIED, a corrupt or foreign
 * file -> SB_ERR_CORRUPT, anything else -> SB_ERR_IO. */
int sb_log_mdb_err(int mdb_rc, const char *what);

#endif
