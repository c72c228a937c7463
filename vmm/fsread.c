/* fsread.c - offline reads of a run's ext4 disk: libext2fs over NBD.
 *
 * sb_fsread_open starts `qemu-nbd -r --image-opts ...,force-share=on` through
 * libnbd's systemd socket activation and opens the file system with an
 * io_manager (fsr_io_*) whose reads are nbd_pread calls. Paths are resolved
 * here, one ext2fs_lookup per component, rather than with ext2fs_namei:
 * namei reads a symlink's target trusting its i_size (a hostile disk can
 * make it read past its buffer), and here every target is bounded.
 */
#include "vmm/fsread.h"

#include <errno.h>
#include <et/com_err.h>
#include <ext2fs/ext2_fs.h>
#include <ext2fs/ext2fs.h>
#include <fcntl.h>
#include <libnbd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/proc.h"

#define FSR_CHUNK   65536
#define FSR_NBD_MAX (32u << 20) /* one nbd_pread; libnbd allows 64 MiB */

/* The NBD export, shared by the handle (which owns it) and the io_channel
 * (which borrows it). */
struct fsr_dev {
	struct nbd_handle *nbd;
	uint64_t size;
	uint64_t bytes_read;
	struct struct_io_stats stats;
	char err[256]; /* libnbd's message for the last failed read */
};

struct sb_fsread {
	struct fsr_dev dev;
	ext2_filsys fs;
	char name[EXT2_NAME_LEN + 1];
	char target[SB_FS_PATH_MAX];
	char *chunk; /* FSR_CHUNK bytes for reads */
};

/* -- errors */

/* Turns a libext2fs error about what into an sb_err with a detail (for a
 * failed NBD read, libnbd's message). */
static int fsr_err(sb_fsread *f, errcode_t e, const char *what)
{
	switch (e) {
	case EXT2_ET_FILE_NOT_FOUND:
		return sb_seterr(SB_ERR_NOTFOUND, "%s: no such file or directory", what);
	case EXT2_ET_NO_MEMORY: return sb_seterr(SB_ERR_NOMEM, "%s: out of memory", what);
	case EIO:
		return sb_seterr(SB_ERR_IO, "%s: reading the disk: %s", what, f->dev.err);
	case EXT2_ET_SHORT_READ:
		return sb_seterr(SB_ERR_IO, "%s: %s (is the disk truncated?)", what,
				 error_message(e));
	}
	return sb_seterr(SB_ERR_CORRUPT, "%s: %s", what, error_message(e));
}

/* -- the io_manager: block reads are NBD reads */

static errcode_t fsr_io_open(const char *name, int flags, io_channel *out);

static errcode_t fsr_io_close(io_channel ch)
{
	if (--ch->refcount > 0)
		return 0;
	free(ch->name);
	free(ch);
	return 0;
}

static errcode_t fsr_io_set_blksize(io_channel ch, int blksize)
{
	if (blksize <= 0)
		return EXT2_ET_INVALID_ARGUMENT;
	ch->block_size = blksize;
	return 0;
}

static errcode_t fsr_io_read_blk64(io_channel ch, unsigned long long block, int count,
				   void *data)
{
	struct fsr_dev *d = ch->private_data;
	uint64_t bs = (uint64_t)ch->block_size, off, len;
	char *p = data;

	len = count < 0 ? (uint64_t) - (int64_t)count : (uint64_t)count * bs;
	if (block > d->size / bs || len > d->size - block * bs) {
		memset(data, 0, len);
		return EXT2_ET_SHORT_READ;
	}
	off = block * bs;
	while (len) {
		size_t n = len > FSR_NBD_MAX ? FSR_NBD_MAX : (size_t)len;
		if (nbd_pread(d->nbd, p, n, off, 0) < 0) {
			snprintf(d->err, sizeof d->err, "%s", nbd_get_error());
			return EIO;
		}
		d->bytes_read += n;
		d->stats.bytes_read += n;
		p += n;
		off += n;
		len -= n;
	}
	return 0;
}

static errcode_t fsr_io_read_blk(io_channel ch, unsigned long block, int count,
				 void *data)
{
	return fsr_io_read_blk64(ch, block, count, data);
}

static errcode_t fsr_io_write_blk64(io_channel ch, unsigned long long block, int count,
				    const void *data)
{
	return EXT2_ET_RO_FILSYS;
}

static errcode_t fsr_io_write_blk(io_channel ch, unsigned long block, int count,
				  const void *data)
{
	return EXT2_ET_RO_FILSYS;
}

static errcode_t fsr_io_flush(io_channel ch)
{
	return 0;
}

static errcode_t fsr_io_set_option(io_channel ch, const char *opt, const char *arg)
{
	return EXT2_ET_INVALID_ARGUMENT;
}

static errcode_t fsr_io_get_stats(io_channel ch, io_stats *stats)
{
	*stats = &((struct fsr_dev *)ch->private_data)->stats;
	return 0;
}

static struct struct_io_manager fsr_io_manager = {
    .magic = EXT2_ET_MAGIC_IO_MANAGER,
    .name = "sanbox NBD I/O manager",
    .open = fsr_io_open,
    .close = fsr_io_close,
    .set_blksize = fsr_io_set_blksize,
    .read_blk = fsr_io_read_blk,
    .write_blk = fsr_io_write_blk,
    .flush = fsr_io_flush,
    .set_option = fsr_io_set_option,
    .get_stats = fsr_io_get_stats,
    .read_blk64 = fsr_io_read_blk64,
    .write_blk64 = fsr_io_write_blk64,
};

/* name is "sanbox-nbd:%p" of the struct fsr_dev, as unixfd_io_manager's
 * name is a descriptor's number. */
static errcode_t fsr_io_open(const char *name, int flags, io_channel *out)
{
	struct fsr_dev *d = NULL;
	io_channel ch;

	if (flags & IO_FLAG_RW)
		return EXT2_ET_RO_FILSYS;
	if (sscanf(name, "sanbox-nbd:%p", (void **)&d) != 1 || !d)
		return EXT2_ET_BAD_DEVICE_NAME;
	if (!(ch = calloc(1, sizeof *ch)) || !(ch->name = strdup(name))) {
		free(ch);
		return EXT2_ET_NO_MEMORY;
	}
	ch->magic = EXT2_ET_MAGIC_IO_CHANNEL;
	ch->manager = &fsr_io_manager;
	ch->block_size = 1024;
	ch->refcount = 1;
	ch->private_data = d;
	d->stats.num_fields = 2;
	*out = ch;
	return 0;
}

/* -- the NBD export */

/* The --image-opts value for layer: a qcow2 (or, with raw, a raw) node
 * over a file node, with force-share so that the lock of a running VM
 * does not stop the read. Commas in the path are doubled (QEMU's option
 * quoting); the caller frees. */
static char *fsr_image_opts(const char *layer, int raw)
{
	const char *pre = raw ? "driver=raw,file.driver=file,file.filename="
			      : "driver=qcow2,file.driver=file,file.filename=";
	static const char post[] = ",force-share=on";
	size_t n = strlen(layer), o = strlen(pre);
	char *s = malloc(o + 2 * n + sizeof post);

	if (!s)
		return NULL;
	memcpy(s, pre, o);
	for (size_t i = 0; i < n; i++)
		if ((s[o++] = layer[i]) == ',')
			s[o++] = ',';
	memcpy(s + o, post, sizeof post);
	return s;
}

/* The last line qemu-nbd wrote to its standard error (in the memfd errfd),
 * without its "qemu-nbd: " prefix, into buf. */
static void fsr_child_error(int errfd, char *buf, size_t cap)
{
	char all[4096];
	ssize_t n = pread(errfd, all, sizeof all - 1, 0);
	char *line, *end;

	buf[0] = 0;
	if (n <= 0)
		return;
	all[n] = 0;
	while (n > 0 && (all[n - 1] == '\n' || all[n - 1] == '\r'))
		all[--n] = 0;
	line = (end = strrchr(all, '\n')) ? end + 1 : all;
	if (!strncmp(line, "qemu-nbd: ", 10))
		line += 10;
	n = (ssize_t)strlen(line);
	if ((size_t)n >= cap)
		n = (ssize_t)cap - 1;
	memcpy(buf, line, (size_t)n);
	buf[n] = 0;
}

/* Starts qemu-nbd on layer and connects d to it. The child gets /dev/null
 * as standard input and output and a memfd as standard error, so that
 * nothing it says reaches the terminal and its complaint becomes the
 * detail: descriptors 0-2 of this process are swapped for the duration of
 * the call (the CLI is single-threaded). */
static int fsr_dev_connect(struct fsr_dev *d, const char *layer, int raw)
{
	int saved[3] = {-1, -1, -1}, null = -1, errfd = -1, rc = SB_OK, r;
	char *opts = fsr_image_opts(layer, raw), msg[512];
	char *argv[] = {"qemu-nbd", "-r", "--image-opts", opts, NULL};
	int64_t size;

	if (!opts || !(d->nbd = nbd_create())) {
		rc = sb_seterr(SB_ERR_NOMEM, "%s",
			       opts ? nbd_get_error() : "out of memory");
		goto fail;
	}
	null = open("/dev/null", O_RDWR | O_CLOEXEC);
	errfd = memfd_create("sanbox-qemu-nbd", MFD_CLOEXEC);
	if (null < 0 || errfd < 0) {
		rc = sb_seterr(SB_ERR_IO, "qemu-nbd: %s", strerror(errno));
		goto fail;
	}
	fflush(stdout);
	for (int i = 0; i < 3; i++)
		saved[i] = fcntl(i, F_DUPFD_CLOEXEC, 3);
	dup2(null, 0);
	dup2(null, 1);
	dup2(errfd, 2);
	r = nbd_connect_systemd_socket_activation(d->nbd, argv);
	snprintf(msg, sizeof msg, "%s", r < 0 ? nbd_get_error() : "");
	for (int i = 0; i < 3; i++) {
		if (saved[i] >= 0) {
			dup2(saved[i], i);
			close(saved[i]);
		} else {
			close(i);
		}
	}
	if (r < 0) {
		char child[512], *why;
		fsr_child_error(errfd, child, sizeof child);
		if (!strcmp(child, "No such file or directory") ||
		    !strcmp(child, "Permission denied"))
			rc = sb_seterr(SB_ERR_UNAVAIL,
				       "cannot run qemu-nbd: %s (install qemu-utils)",
				       child);
		else if ((why = strstr(child, "': ")) &&
			 !strncmp(child, "Failed to blk_new_open", 22))
			rc = sb_seterr(SB_ERR_IO, "%s: %s", layer, why + 3);
		else
			rc = sb_seterr(SB_ERR_IO, "qemu-nbd: %s", child[0] ? child : msg);
		goto fail;
	}
	if ((size = nbd_get_size(d->nbd)) < 0) {
		rc = sb_seterr(SB_ERR_IO, "qemu-nbd: %s", nbd_get_error());
		goto fail;
	}
	d->size = (uint64_t)size;
	close(errfd);
	close(null);
	free(opts);
	return SB_OK;
fail:
	if (errfd >= 0)
		close(errfd);
	if (null >= 0)
		close(null);
	nbd_close(d->nbd);
	d->nbd = NULL;
	free(opts);
	return rc;
}

/* -- open and close */

/* sb_fsread_open, or of a raw image with raw. */
static int fsr_open(const char *layer, int raw, sb_fsread **out)
{
	char name[64];
	sb_fsread *f;
	errcode_t e;
	int rc;

	if (access(layer, R_OK))
		return sb_seterr(errno == ENOENT ? SB_ERR_NOTFOUND : SB_ERR_IO, "%s: %s",
				 layer, strerror(errno));
	initialize_ext2_error_table();
	if (!(f = calloc(1, sizeof *f)) || !(f->chunk = malloc(FSR_CHUNK))) {
		rc = SB_ERR_NOMEM;
		goto fail;
	}
	if ((rc = fsr_dev_connect(&f->dev, layer, raw)))
		goto fail;
	snprintf(name, sizeof name, "sanbox-nbd:%p", (void *)&f->dev);
	if ((e = ext2fs_open2(name, NULL, EXT2_FLAG_64BITS, 0, 0, &fsr_io_manager,
			      &f->fs))) {
		f->fs = NULL;
		rc = fsr_err(f, e, "no ext4 file system on the disk");
		goto fail;
	}
	*out = f;
	return SB_OK;
fail:
	sb_fsread_close(f);
	return rc;
}

int sb_fsread_open(const char *layer, sb_fsread **out)
{
	return fsr_open(layer, 0, out);
}

int sb_fsread_open_raw(const char *image, sb_fsread **out)
{
	return fsr_open(image, 1, out);
}

void sb_fsread_close(sb_fsread *f)
{
	if (!f)
		return;
	if (f->fs)
		ext2fs_close_free(&f->fs);
	if (f->dev.nbd) {
		nbd_shutdown(f->dev.nbd, 0);
		nbd_close(f->dev.nbd);
	}
	free(f->chunk);
	free(f);
}

uint64_t sb_fsread_bytes_read(const sb_fsread *f)
{
	return f->dev.bytes_read;
}

const char *sb_fs_type_name(enum sb_fs_type type)
{
	switch (type) {
	case SB_FS_FILE: return "file";
	case SB_FS_DIR: return "dir";
	case SB_FS_SYMLINK: return "symlink";
	case SB_FS_FIFO: return "fifo";
	case SB_FS_SOCKET: return "socket";
	case SB_FS_CHAR: return "char";
	case SB_FS_BLOCK: return "block";
	case SB_FS_UNKNOWN: break;
	}
	return "unknown";
}

/* -- inodes */

static enum sb_fs_type fsr_type(uint16_t mode)
{
	if (LINUX_S_ISREG(mode))
		return SB_FS_FILE;
	if (LINUX_S_ISDIR(mode))
		return SB_FS_DIR;
	if (LINUX_S_ISLNK(mode))
		return SB_FS_SYMLINK;
	if (LINUX_S_ISFIFO(mode))
		return SB_FS_FIFO;
	if (LINUX_S_ISSOCK(mode))
		return SB_FS_SOCKET;
	if (LINUX_S_ISCHR(mode))
		return SB_FS_CHAR;
	if (LINUX_S_ISBLK(mode))
		return SB_FS_BLOCK;
	return SB_FS_UNKNOWN;
}

/* Reads inode ino into *in. Errors: SB_ERR_CORRUPT, SB_ERR_IO. */
static int fsr_inode(sb_fsread *f, ext2_ino_t ino, struct ext2_inode_large *in)
{
	errcode_t e;

	memset(in, 0, sizeof *in);
	e = ext2fs_read_inode_full(f->fs, ino, (struct ext2_inode *)in, sizeof *in);
	return e ? fsr_err(f, e, "reading an inode") : SB_OK;
}

/* libext2fs copies inline data into a buffer of three blocks without
 * checking its size; refuses more than one block of it. */
static int fsr_inline_ok(sb_fsread *f, ext2_ino_t ino, const struct ext2_inode_large *in)
{
	size_t size;
	errcode_t e;

	if (!(in->i_flags & EXT4_INLINE_DATA_FL))
		return SB_OK;
	if ((e = ext2fs_inline_data_size(f->fs, ino, &size)))
		return fsr_err(f, e, "inline data");
	if (size > f->fs->blocksize)
		return sb_seterr(SB_ERR_CORRUPT, "inline data of %zu bytes", size);
	return SB_OK;
}

/* Reads the target of symlink ino into f->target (NUL-terminated), its
 * length into *len. Errors: SB_ERR_CORRUPT, SB_ERR_IO. */
static int fsr_target(sb_fsread *f, ext2_ino_t ino, struct ext2_inode_large *in,
		      size_t *len)
{
	struct ext2_inode *i = (struct ext2_inode *)in;
	uint64_t size = EXT2_I_SIZE(i);
	ext2_file_t file = NULL;
	unsigned int got = 0;
	errcode_t e = 0;
	int rc;

	if (size == 0 || size >= sizeof f->target)
		return sb_seterr(SB_ERR_CORRUPT, "symlink target of %llu bytes",
				 (unsigned long long)size);
	if (ext2fs_is_fast_symlink(i)) {
		memcpy(f->target, i->i_block, size);
		got = (unsigned int)size;
	} else if ((rc = fsr_inline_ok(f, ino, in))) {
		return rc;
	} else if (!(e = ext2fs_file_open2(f->fs, ino, i, 0, &file))) {
		e = ext2fs_file_read(file, f->target, (unsigned int)size, &got);
		ext2fs_file_close(file);
	}
	if (e)
		return fsr_err(f, e, "reading a symlink");
	if (got != size)
		return sb_seterr(SB_ERR_CORRUPT, "symlink target shorter than its size");
	f->target[got] = 0;
	*len = got;
	return SB_OK;
}

/* Fills *e from inode in (name set by the caller). A symlink whose target
 * cannot be read gets target NULL. */
static void fsr_entry(sb_fsread *f, ext2_ino_t ino, struct ext2_inode_large *in,
		      struct sb_fs_entry *e)
{
	struct ext2_inode *i = (struct ext2_inode *)in;
	int64_t mtime = (int32_t)i->i_mtime;
	size_t have = EXT2_GOOD_OLD_INODE_SIZE + in->i_extra_isize;

	/* the epoch bits of i_mtime_extra, where the inode is large enough */
	if (EXT2_INODE_SIZE(f->fs->super) > EXT2_GOOD_OLD_INODE_SIZE &&
	    have >= offsetof(struct ext2_inode_large, i_mtime_extra) +
			sizeof in->i_mtime_extra)
		mtime += (int64_t)(in->i_mtime_extra & EXT4_EPOCH_MASK) << 32;
	e->type = fsr_type(i->i_mode);
	e->mode = i->i_mode & 07777;
	e->uid = inode_uid(*i);
	e->gid = inode_gid(*i);
	e->size = EXT2_I_SIZE(i);
	e->mtime = mtime;
	e->target = NULL;
	e->target_len = 0;
	if (e->type == SB_FS_SYMLINK && fsr_target(f, ino, in, &e->target_len) == SB_OK)
		e->target = f->target;
}

/* -- paths */

/* Resolves the absolute path into *ino (and its inode into *in): symlinks
 * on the way are followed inside the guest; the last component is followed
 * only when the path ends with '/'. The last component's name goes to
 * f->name. */
static int fsr_resolve(sb_fsread *f, const char *path, ext2_ino_t *ino,
		       struct ext2_inode_large *in)
{
	size_t plen = strlen(path), cap = 2 * SB_FS_PATH_MAX + 2, rlen, tlen;
	ext2_ino_t dir = EXT2_ROOT_INO, cur;
	char *rest = NULL, *p;
	int links = 0, rc;
	errcode_t e;

	if (path[0] != '/' || plen >= SB_FS_PATH_MAX)
		return sb_seterr(SB_ERR_INVAL, "%s: %s", path,
				 path[0] != '/' ? "not an absolute path"
						: "path too long");
	if (!(rest = malloc(cap)))
		return SB_ERR_NOMEM;
	memcpy(rest, path, plen + 1);
	p = rest;
	cur = EXT2_ROOT_INO;
	memcpy(f->name, "/", 2);
	if ((rc = fsr_inode(f, cur, in)))
		goto fail;
	for (;;) {
		char *name, *end;
		size_t nlen;
		int last, slash;

		while (*p == '/')
			p++;
		if (!*p)
			break;
		name = p;
		end = strchr(p, '/');
		nlen = end ? (size_t)(end - p) : strlen(p);
		p += nlen;
		slash = *p == '/';
		while (*p == '/')
			p++;
		last = !*p;
		if (nlen > EXT2_NAME_LEN) {
			rc = sb_seterr(SB_ERR_NOTFOUND, "%s: no such file or directory",
				       path);
			goto fail;
		}
		if (fsr_type(in->i_mode) != SB_FS_DIR) {
			rc = sb_seterr(SB_ERR_NOTFOUND, "%s: not a directory", path);
			goto fail;
		}
		dir = cur;
		if (nlen == 1 && name[0] == '.') {
			/* stays */
		} else if (nlen == 2 && name[0] == '.' && name[1] == '.' &&
			   cur == EXT2_ROOT_INO) {
			/* the guest's root is its own parent */
		} else if ((e = ext2fs_lookup(f->fs, cur, name, (int)nlen, NULL, &cur))) {
			rc = fsr_err(f, e, path);
			goto fail;
		}
		memcpy(f->name, name, nlen);
		f->name[nlen] = 0;
		if ((rc = fsr_inode(f, cur, in)))
			goto fail;
		if (fsr_type(in->i_mode) != SB_FS_SYMLINK || (last && !slash)) {
			if (last && slash && fsr_type(in->i_mode) != SB_FS_DIR) {
				rc = sb_seterr(SB_ERR_NOTFOUND, "%s: not a directory",
					       path);
				goto fail;
			}
			continue;
		}
		/* a symlink on the way: its target, then what is left */
		if (++links > SB_FS_LINKS_MAX) {
			rc = sb_seterr(SB_ERR_INVAL,
				       "%s: too many levels of symbolic links", path);
			goto fail;
		}
		if ((rc = fsr_target(f, cur, in, &tlen)))
			goto fail;
		rlen = strlen(p);
		if (tlen + 1 + rlen >= cap) {
			rc = sb_seterr(SB_ERR_INVAL, "%s: path too long", path);
			goto fail;
		}
		memmove(rest + tlen + 1, p, rlen + 1);
		memcpy(rest, f->target, tlen);
		rest[tlen] = '/';
		p = rest;
		cur = rest[0] == '/' ? EXT2_ROOT_INO : dir;
		if ((rc = fsr_inode(f, cur, in)))
			goto fail;
	}
	*ino = cur;
	rc = SB_OK;
fail:
	free(rest);
	return rc;
}

int sb_fsread_stat(sb_fsread *f, const char *path, struct sb_fs_entry *out)
{
	struct ext2_inode_large in;
	ext2_ino_t ino;
	int rc;

	if ((rc = fsr_resolve(f, path, &ino, &in)))
		return rc;
	out->name = f->name;
	out->name_len = strlen(f->name);
	fsr_entry(f, ino, &in, out);
	if (out->type == SB_FS_SYMLINK && !out->target)
		return sb_seterr(SB_ERR_CORRUPT, "%s: cannot read the symlink's target",
				 path);
	return SB_OK;
}

int sb_fsread_readlink(sb_fsread *f, const char *path, char *buf, size_t cap, size_t *len)
{
	struct sb_fs_entry e;
	int rc;

	if ((rc = sb_fsread_stat(f, path, &e)))
		return rc;
	if (e.type != SB_FS_SYMLINK)
		return sb_seterr(SB_ERR_INVAL, "%s: not a symlink", path);
	if (e.target_len >= cap)
		return sb_seterr(SB_ERR_TOOBIG, "%s: target of %zu bytes", path,
				 e.target_len);
	memcpy(buf, e.target, e.target_len + 1);
	*len = e.target_len;
	return SB_OK;
}

struct fsr_list {
	sb_fsread *f;
	sb_fsread_entry_fn fn;
	void *ctx;
	int rc;
};

static int fsr_list_one(struct ext2_dir_entry *d, int offset, int blocksize, char *buf,
			void *priv)
{
	struct fsr_list *l = priv;
	struct ext2_inode_large in;
	struct sb_fs_entry e;
	char name[EXT2_NAME_LEN + 1];
	int len = ext2fs_dirent_name_len(d);

	if ((len == 1 && d->name[0] == '.') || (len == 2 && !memcmp(d->name, "..", 2)))
		return 0;
	memcpy(name, d->name, (size_t)len);
	name[len] = 0;
	memset(&e, 0, sizeof e);
	if (fsr_inode(l->f, d->inode, &in) == SB_OK)
		fsr_entry(l->f, d->inode, &in, &e);
	e.name = name;
	e.name_len = (size_t)len;
	if ((l->rc = l->fn(&e, l->ctx)))
		return DIRENT_ABORT;
	return 0;
}

int sb_fsread_list(sb_fsread *f, const char *path, sb_fsread_entry_fn fn, void *ctx)
{
	struct fsr_list l = {f, fn, ctx, 0};
	struct ext2_inode_large in;
	ext2_ino_t ino;
	errcode_t e;
	int rc;

	if ((rc = fsr_resolve(f, path, &ino, &in)))
		return rc;
	if (fsr_type(in.i_mode) != SB_FS_DIR)
		return sb_seterr(SB_ERR_INVAL, "%s: not a directory", path);
	if ((rc = fsr_inline_ok(f, ino, &in)))
		return rc;
	e = ext2fs_dir_iterate(f->fs, ino, 0, NULL, fsr_list_one, &l);
	if (l.rc)
		return l.rc;
	return e ? fsr_err(f, e, path) : SB_OK;
}

/* Opens the regular file at path (its inode into *in) for reading. */
static int fsr_file_open(sb_fsread *f, const char *path, struct ext2_inode_large *in,
			 ext2_file_t *file)
{
	ext2_ino_t ino;
	errcode_t e;
	int rc;

	if ((rc = fsr_resolve(f, path, &ino, in)))
		return rc;
	if (fsr_type(in->i_mode) != SB_FS_FILE)
		return sb_seterr(SB_ERR_INVAL, "%s: not a regular file", path);
	if ((rc = fsr_inline_ok(f, ino, in)))
		return rc;
	if ((e = ext2fs_file_open2(f->fs, ino, (struct ext2_inode *)in, 0, file)))
		return fsr_err(f, e, path);
	return SB_OK;
}

int sb_fsread_read(sb_fsread *f, const char *path, sb_fsread_chunk_fn fn, void *ctx)
{
	struct ext2_inode_large in;
	ext2_file_t file = NULL;
	unsigned int got;
	errcode_t e;
	int rc;

	if ((rc = fsr_file_open(f, path, &in, &file)))
		return rc;
	for (;;) {
		if ((e = ext2fs_file_read(file, f->chunk, FSR_CHUNK, &got))) {
			rc = fsr_err(f, e, path);
			goto fail;
		}
		if (!got)
			break;
		if ((rc = fn(f->chunk, got, ctx)))
			goto fail;
	}
	rc = SB_OK;
fail:
	ext2fs_file_close(file);
	return rc;
}

int sb_fsread_pread(sb_fsread *f, const char *path, uint64_t offset, void *buf,
		    size_t cap, size_t *got, uint64_t *size)
{
	struct ext2_inode_large in;
	ext2_file_t file = NULL;
	unsigned int n;
	errcode_t e;
	int rc;

	*got = 0;
	if ((rc = fsr_file_open(f, path, &in, &file)))
		return rc;
	*size = EXT2_I_SIZE(&in);
	if (offset < *size && (e = ext2fs_file_llseek(file, offset, EXT2_SEEK_SET, NULL))) {
		rc = fsr_err(f, e, path);
		goto fail;
	}
	while (offset + *got < *size && *got < cap) {
		size_t want = cap - *got < FSR_CHUNK ? cap - *got : FSR_CHUNK;
		if ((e = ext2fs_file_read(file, (char *)buf + *got, (unsigned)want, &n))) {
			rc = fsr_err(f, e, path);
			goto fail;
		}
		if (!n)
			break;
		*got += n;
	}
	rc = SB_OK;
fail:
	ext2fs_file_close(file);
	return rc;
}

static int fsr_write_fd(const void *buf, size_t len, void *ctx)
{
	return sb_write_full(*(int *)ctx, buf, len);
}

int sb_fsread_read_fd(sb_fsread *f, const char *path, int fd)
{
	return sb_fsread_read(f, path, fsr_write_fd, &fd);
}
