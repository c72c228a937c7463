/* fsread.h - reading a run's disk offline, never modifying it.
 *
 * A qemu-nbd child serves the run's qcow2 layer read-only with force-share
 * (it follows the layer's whole backing chain); libext2fs reads the ext4
 * file system through an io_manager whose block reads are NBD reads. No
 * copy of the disk is made. A layer that a running VM is writing is read
 * as it is at that moment, and what is still only in the guest's journal
 * is not seen.
 *
 * Guest paths are resolved inside the guest's file system only: they are
 * absolute, ".." never climbs above the guest's root, symlinks met on the
 * way are followed within the guest (absolute ones from the guest's root,
 * at most SB_FS_LINKS_MAX of them per path), and the last component of a
 * path is never followed unless the path ends with '/'. Nothing here opens
 * a host path named by the guest. A disk's contents are the guest's: every
 * field of an entry may hold anything the guest wrote (names and targets
 * are raw bytes; print them escaped).
 */
#ifndef SB_FSREAD_H
#define SB_FSREAD_H

#include <stddef.h>
#include <stdint.h>

typedef struct sb_fsread sb_fsread;

#define SB_FS_LINKS_MAX 40   /* symlinks followed while resolving one path */
#define SB_FS_PATH_MAX	4096 /* longest path, and longest symlink target + 1 */

enum sb_fs_type {
	SB_FS_UNKNOWN = 0, /* the inode cannot be read or has no known type */
	SB_FS_FILE,
	SB_FS_DIR,
	SB_FS_SYMLINK,
	SB_FS_FIFO,
	SB_FS_SOCKET,
	SB_FS_CHAR,  /* character device */
	SB_FS_BLOCK, /* block device */
};

/* One directory entry or looked-up path (lstat-like: a symlink describes
 * itself). */
struct sb_fs_entry {
	const char *name; /* the last component's raw bytes, NUL-terminated */
	size_t name_len;  /* its length (a hostile disk may hold a NUL in it) */
	enum sb_fs_type type;
	uint32_t mode; /* permission bits, 07777 */
	uint32_t uid, gid;
	uint64_t size;	    /* bytes */
	int64_t mtime;	    /* seconds since the epoch */
	const char *target; /* a symlink's raw target, NUL-terminated; NULL for
			     * other types and for a target that cannot be read */
	size_t target_len;
};

/* Returns a static word for type: "file", "dir", "symlink", "fifo",
 * "socket", "char", "block" or "unknown". */
const char *sb_fs_type_name(enum sb_fs_type type);

/* Opens the file system on the qcow2 layer at path layer (read-only, the
 * layer and its backing chain untouched); the caller closes *out with
 * sb_fsread_close. Errors: SB_ERR_NOTFOUND (no layer), SB_ERR_UNAVAIL
 * (qemu-nbd cannot be run), SB_ERR_IO (qemu-nbd refused the layer, or a
 * read failed), SB_ERR_CORRUPT (no ext2/3/4 file system on it),
 * SB_ERR_NOMEM. The detail names the cause. */
int sb_fsread_open(const char *layer, sb_fsread **out);

/* As sb_fsread_open, for a raw image (a template's root file system). */
int sb_fsread_open_raw(const char *image, sb_fsread **out);

/* Closes f and ends its qemu-nbd (NULL is fine). */
void sb_fsread_close(sb_fsread *f);

/* Describes the entry at path (its last component not followed) in *out,
 * whose strings are valid until the next call on f. Errors:
 * SB_ERR_INVAL (path not absolute, too long, or too many symlinks on the
 * way), SB_ERR_NOTFOUND (no such entry, or a component that is not a
 * directory), SB_ERR_CORRUPT, SB_ERR_IO, SB_ERR_NOMEM. */
int sb_fsread_stat(sb_fsread *f, const char *path, struct sb_fs_entry *out);

/* Called once per entry; e and its strings are valid during the call.
 * Returns 0 to go on, or a negative error that ends the listing. */
typedef int (*sb_fsread_entry_fn)(const struct sb_fs_entry *e, void *ctx);

/* Calls fn for every entry of the directory at path but "." and "..", in
 * the directory's order. An entry whose inode cannot be read is still
 * passed, with type SB_FS_UNKNOWN. Errors: those of sb_fsread_stat,
 * SB_ERR_INVAL (path is not a directory), or fn's error. */
int sb_fsread_list(sb_fsread *f, const char *path, sb_fsread_entry_fn fn, void *ctx);

/* Called with the next bytes of a file, in order; buf is valid during the
 * call. Returns 0 to go on, or a negative error that ends the read. */
typedef int (*sb_fsread_chunk_fn)(const void *buf, size_t len, void *ctx);

/* Passes the contents of the regular file at path to fn, in chunks of at
 * most 64 KiB (holes read as zeros). Errors: those of sb_fsread_stat,
 * SB_ERR_INVAL (not a regular file), or fn's error. */
int sb_fsread_read(sb_fsread *f, const char *path, sb_fsread_chunk_fn fn, void *ctx);

/* Reads up to cap bytes of the regular file at path from byte offset on
 * into buf (holes as zeros): *got gets how many (fewer only at its end),
 * *size the file's size. Errors: those of sb_fsread_read. */
int sb_fsread_pread(sb_fsread *f, const char *path, uint64_t offset, void *buf,
		    size_t cap, size_t *got, uint64_t *size);

/* Writes the contents of the regular file at path to fd. Errors: those of
 * sb_fsread_read, SB_ERR_IO when a write fails (errno kept). */
int sb_fsread_read_fd(sb_fsread *f, const char *path, int fd);

/* Copies the raw target of the symlink at path into buf (NUL-terminated)
 * and its length into *len. Errors: those of sb_fsread_stat,
 * SB_ERR_INVAL (not a symlink), SB_ERR_TOOBIG (cap too small). */
int sb_fsread_readlink(sb_fsread *f, const char *path, char *buf, size_t cap,
		       size_t *len);

/* Returns how many bytes f has read from the disk so far. */
uint64_t sb_fsread_bytes_read(const sb_fsread *f);

#endif
