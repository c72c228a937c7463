/* test_fsread.c - the offline disk reader on real ext4 images (made with
 * mkfs.ext4 -d) under qcow2 layers: stat, list, read, readlink, the paths
 * (links on the way, loops, the link bound, '..' at the root), what a 4 GiB
 * disk costs to read a small file from, the standard streams left as they
 * were, a missing qemu-nbd, and disks corrupted at random (run it under
 * make asan). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sys/stat.h>

#include "tests/unit/testutil.h"
#include "vmm/fsread.h"

static char *tmp;

static int teardown(void **state)
{
	tu_rmrf(tmp);
	tmp = NULL;
	return 0;
}

/* Runs the shell command fmt in tmp; fails the test when it fails. */
static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
	char cmd[4096];
	int n = snprintf(cmd, sizeof cmd, "cd '%s' && ", tmp);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd + n, sizeof cmd - (size_t)n, fmt, ap);
	va_end(ap);
	if (system(cmd) != 0)
		fail_msg("command failed: %s", cmd);
}

/* A guest tree in tmp/root, its image tmp/base.img (size; mkfs.ext4
 * options opts) and a qcow2 layer over it, tmp/disk.qcow2. */
static void make_disk_opts(const char *size, const char *opts)
{
	tmp = tu_tmpdir();
	sh("mkdir -p root/workspace/d root/etc && printf hello > "
	   "root/workspace/hello.txt &&"
	   " printf guest > root/etc/passwd && head -c 200000 /dev/zero | tr '\\0' x >"
	   " root/workspace/big && ln -s /etc/passwd root/workspace/abs &&"
	   " ln -s ../../../etc root/workspace/up && ln -s d root/workspace/dl &&"
	   " ln -s self root/workspace/self && printf in > root/workspace/d/in.txt &&"
	   " mkfifo root/workspace/fifo && printf n > \"root/workspace/$(printf "
	   "'a\\nb')\"");
	/* a chain of SB_FS_LINKS_MAX links and one of one more */
	sh("cd root/workspace && i=1 && while [ $i -le %d ]; do ln -s l$((i - 1)) l$i;"
	   " i=$((i + 1)); done && ln -s d l0",
	   SB_FS_LINKS_MAX + 1);
	sh("mkfs.ext4 -q -F -b 4096 -E lazy_itable_init=1,nodiscard %s -d root base.img "
	   "%s"
	   " >/dev/null && qemu-img create -q -f qcow2 -b base.img -F raw disk.qcow2",
	   opts, size);
}

static void make_disk(const char *size)
{
	make_disk_opts(size, "");
}

/* The byte offset of block blk of path in image img (debugfs bmap). */
static long block_of(const char *img, const char *path, int blk)
{
	char cmd[1024];
	long b = -1;
	FILE *p;

	snprintf(cmd, sizeof cmd, "debugfs -R 'bmap %s %d' '%s' 2>/dev/null", path, blk,
		 img);
	assert_non_null(p = popen(cmd, "r"));
	if (fscanf(p, "%ld", &b) != 1)
		b = -1;
	pclose(p);
	assert_true(b > 0);
	return b * 4096;
}

static sb_fsread *open_disk(void)
{
	char layer[512];
	sb_fsread *f = NULL;

	snprintf(layer, sizeof layer, "%s/disk.qcow2", tmp);
	int rc = sb_fsread_open(layer, &f);
	if (rc)
		fail_msg("open: %s", sb_errmsg(rc));
	return f;
}

struct names {
	char all[4096];
	int n, dirs, links, fifos;
};

static int collect(const struct sb_fs_entry *e, void *ctx)
{
	struct names *nm = ctx;

	assert_int_equal(strlen(e->name), e->name_len);
	strncat(nm->all, e->name, sizeof nm->all - strlen(nm->all) - 2);
	strcat(nm->all, "|");
	nm->n++;
	nm->dirs += e->type == SB_FS_DIR;
	nm->links += e->type == SB_FS_SYMLINK && e->target != NULL;
	nm->fifos += e->type == SB_FS_FIFO;
	return 0;
}

static int stop_at_two(const struct sb_fs_entry *e, void *ctx)
{
	return ++*(int *)ctx == 2 ? SB_ERR_FULL : 0;
}

struct buf {
	size_t n, chunks;
	char data[256];
	int bad;
};

static int gather(const void *p, size_t len, void *ctx)
{
	struct buf *b = ctx;

	if (len > 65536)
		b->bad = 1;
	if (b->n + len < sizeof b->data)
		memcpy(b->data + b->n, p, len);
	b->n += len;
	b->chunks++;
	return 0;
}

static int refuse(const void *p, size_t len, void *ctx)
{
	return SB_ERR_DENIED;
}

static void test_read_paths(void **state)
{
	struct sb_fs_entry e;
	struct names nm = {.all = "|"};
	struct buf b = {0};
	char target[64], small[4];
	size_t len;
	int n = 0;
	sb_fsread *f;

	make_disk("32M");
	f = open_disk();
	assert_int_equal(sb_fsread_stat(f, "/workspace/hello.txt", &e), SB_OK);
	assert_int_equal(e.type, SB_FS_FILE);
	assert_int_equal(e.size, 5);
	assert_string_equal(e.name, "hello.txt");
	assert_null(e.target);
	/* the last component is not followed; those on the way are */
	assert_int_equal(sb_fsread_stat(f, "/workspace/abs", &e), SB_OK);
	assert_int_equal(e.type, SB_FS_SYMLINK);
	assert_int_equal(e.target_len, 11);
	assert_string_equal(e.target, "/etc/passwd");
	assert_int_equal(sb_fsread_stat(f, "/workspace/dl/in.txt", &e), SB_OK);
	assert_int_equal(e.size, 2);
	assert_int_equal(sb_fsread_stat(f, "/workspace/dl/", &e), SB_OK);
	assert_int_equal(e.type, SB_FS_DIR);
	assert_int_equal(sb_fsread_read(f, "/workspace/up/passwd", gather, &b), SB_OK);
	assert_int_equal(b.n, 5);
	assert_memory_equal(b.data, "guest", 5);
	b.n = 0;
	assert_int_equal(sb_fsread_read(f, "/../../etc/./passwd", gather, &b), SB_OK);
	assert_memory_equal(b.data, "guest", 5);
	/* the link bound: SB_FS_LINKS_MAX links are followed, one more is not */
	char p[64];
	snprintf(p, sizeof p, "/workspace/l%d/in.txt", SB_FS_LINKS_MAX - 1);
	assert_int_equal(sb_fsread_stat(f, p, &e), SB_OK);
	snprintf(p, sizeof p, "/workspace/l%d/in.txt", SB_FS_LINKS_MAX + 1);
	assert_int_equal(sb_fsread_stat(f, p, &e), SB_ERR_INVAL);
	assert_non_null(strstr(sb_errmsg(SB_ERR_INVAL), "too many levels"));
	assert_int_equal(sb_fsread_stat(f, "/workspace/self/x", &e), SB_ERR_INVAL);
	assert_int_equal(sb_fsread_stat(f, "/workspace/self", &e), SB_OK);
	/* errors */
	assert_int_equal(sb_fsread_stat(f, "workspace", &e), SB_ERR_INVAL);
	assert_int_equal(sb_fsread_stat(f, "/workspace/none", &e), SB_ERR_NOTFOUND);
	assert_int_equal(sb_fsread_stat(f, "/workspace/hello.txt/x", &e),
			 SB_ERR_NOTFOUND);
	char longname[300];
	memset(longname, 'a', sizeof longname - 1);
	longname[0] = '/';
	longname[sizeof longname - 1] = 0;
	assert_int_equal(sb_fsread_stat(f, longname, &e), SB_ERR_NOTFOUND);
	char *huge = malloc(SB_FS_PATH_MAX + 10);
	memset(huge, '/', SB_FS_PATH_MAX + 9);
	huge[SB_FS_PATH_MAX + 9] = 0;
	assert_int_equal(sb_fsread_stat(f, huge, &e), SB_ERR_INVAL);
	free(huge);
	assert_int_equal(sb_fsread_read(f, "/workspace/d", gather, &b), SB_ERR_INVAL);
	assert_int_equal(sb_fsread_read(f, "/workspace/abs", gather, &b), SB_ERR_INVAL);
	assert_int_equal(sb_fsread_read(f, "/workspace/fifo", gather, &b), SB_ERR_INVAL);
	assert_int_equal(sb_fsread_list(f, "/workspace/hello.txt", collect, &nm),
			 SB_ERR_INVAL);
	assert_int_equal(sb_fsread_list(f, "/workspace/dl", collect, &nm), SB_ERR_INVAL);
	/* readlink */
	assert_int_equal(
	    sb_fsread_readlink(f, "/workspace/up", target, sizeof target, &len), SB_OK);
	assert_int_equal(len, 12);
	assert_string_equal(target, "../../../etc");
	assert_int_equal(
	    sb_fsread_readlink(f, "/workspace/up", small, sizeof small, &len),
	    SB_ERR_TOOBIG);
	assert_int_equal(
	    sb_fsread_readlink(f, "/workspace/d", target, sizeof target, &len),
	    SB_ERR_INVAL);
	/* list: every entry but . and .., the newline name included */
	assert_int_equal(sb_fsread_list(f, "/workspace", collect, &nm), SB_OK);
	assert_int_equal(nm.n, 9 + SB_FS_LINKS_MAX + 2);
	assert_int_equal(nm.dirs, 1);
	assert_int_equal(nm.fifos, 1);
	assert_int_equal(nm.links, 4 + SB_FS_LINKS_MAX + 2);
	assert_non_null(strstr(nm.all, "|a\nb|"));
	assert_null(strstr(nm.all, "|.|"));
	assert_int_equal(sb_fsread_list(f, "/workspace", stop_at_two, &n), SB_ERR_FULL);
	assert_int_equal(n, 2);
	/* read: in chunks of at most 64 KiB, a callback's error ends it */
	memset(&b, 0, sizeof b);
	assert_int_equal(sb_fsread_read(f, "/workspace/big", gather, &b), SB_OK);
	assert_int_equal(b.n, 200000);
	assert_true(b.chunks >= 4);
	assert_false(b.bad);
	assert_int_equal(sb_fsread_read(f, "/workspace/big", refuse, NULL),
			 SB_ERR_DENIED);
	sb_fsread_close(f);
	sb_fsread_close(NULL);
}

/* A small file on a 4 GiB disk costs a few hundred KiB of reads, and
 * reading a file costs at least its size: the count is real. */
static void test_big_disk(void **state)
{
	struct buf b = {0};
	uint64_t opened, after;
	sb_fsread *f;

	make_disk("4G");
	f = open_disk();
	opened = sb_fsread_bytes_read(f);
	assert_true(opened > 1024);
	assert_int_equal(sb_fsread_read(f, "/workspace/hello.txt", gather, &b), SB_OK);
	assert_memory_equal(b.data, "hello", 5);
	after = sb_fsread_bytes_read(f);
	assert_true(after > opened);
	assert_true(after < (4u << 20));
	assert_int_equal(sb_fsread_read(f, "/workspace/big", gather, &b), SB_OK);
	assert_true(sb_fsread_bytes_read(f) >= after + 200000);
	sb_fsread_close(f);
}

/* The standard streams are this process's again after an open, failed or
 * not; a missing qemu-nbd is SB_ERR_UNAVAIL. */
static void test_streams_and_errors(void **state)
{
	struct stat before[3], now;
	struct sb_fs_entry e;
	char layer[512], *path;
	sb_fsread *f = NULL;

	make_disk("32M");
	for (int i = 0; i < 3; i++)
		assert_int_equal(fstat(i, &before[i]), 0);
	f = open_disk();
	sb_fsread_close(f);
	snprintf(layer, sizeof layer, "%s/base.img", tmp);
	assert_int_equal(sb_fsread_open(layer, &f), SB_ERR_IO); /* raw, not qcow2 */
	assert_non_null(strstr(sb_errmsg(SB_ERR_IO), "qcow2"));
	/* as a raw image it opens: the base's files, none of the layer's */
	assert_int_equal(sb_fsread_open_raw(layer, &f), SB_OK);
	assert_int_equal(sb_fsread_stat(f, "/", &e), SB_OK);
	assert_int_equal(e.type, SB_FS_DIR);
	sb_fsread_close(f);
	f = NULL;
	snprintf(layer, sizeof layer, "%s/none.qcow2", tmp);
	assert_int_equal(sb_fsread_open(layer, &f), SB_ERR_NOTFOUND);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(fstat(i, &now), 0);
		assert_int_equal(now.st_ino, before[i].st_ino);
		assert_int_equal(now.st_dev, before[i].st_dev);
	}
	path = strdup(getenv("PATH") ? getenv("PATH") : "");
	setenv("PATH", tmp, 1);
	snprintf(layer, sizeof layer, "%s/disk.qcow2", tmp);
	assert_int_equal(sb_fsread_open(layer, &f), SB_ERR_UNAVAIL);
	setenv("PATH", path, 1);
	free(path);
}

static int walk_one(const struct sb_fs_entry *e, void *ctx)
{
	(void)e;
	++*(int *)ctx;
	return 0;
}

/* Takes up to 16 MiB (a corrupt size may make a file of exabytes). */
static int sink(const void *p, size_t len, void *ctx)
{
	size_t *n = ctx;

	*n += len;
	return *n > (16u << 20) ? SB_ERR_TOOBIG : 0;
}

static int known(int rc)
{
	return rc == SB_OK || rc == SB_ERR_CORRUPT || rc == SB_ERR_IO ||
	       rc == SB_ERR_NOTFOUND || rc == SB_ERR_INVAL || rc == SB_ERR_NOMEM ||
	       rc == SB_ERR_TOOBIG;
}

/* Random bytes written over the file system's metadata (superblock, group
 * descriptors, bitmaps, the first inodes) or over the blocks of its
 * directories and of a slow symlink, on a disk with metadata checksums
 * and one without (a hostile guest writes right checksums): every call
 * returns a known error or succeeds, nothing crashes (and under make asan
 * nothing reads or writes out of bounds). */
static void corrupt_rounds(const char *opts, int rounds, unsigned seed)
{
	static const char *paths[] = {"/",
				      "/workspace",
				      "/workspace/hello.txt",
				      "/workspace/big",
				      "/workspace/abs",
				      "/workspace/up/passwd",
				      "/workspace/dl/in.txt",
				      "/workspace/l40/in.txt",
				      "/workspace/slow",
				      "/workspace/slow/x"};
	char img[512], layer[512], target[SB_FS_PATH_MAX];
	long where[5][2];
	int opened = 0, failed = 0;

	make_disk_opts("32M", opts);
	/* a symlink too long for the inode: its target is in a block */
	sh("debugfs -w -R 'symlink /workspace/slow /%0300d' base.img >/dev/null 2>&1", 0);
	snprintf(img, sizeof img, "%s/base.img", tmp);
	snprintf(layer, sizeof layer, "%s/disk.qcow2", tmp);
	where[0][0] = 0, where[0][1] = 40 * 4096; /* sb, gdt, bitmaps, first inodes */
	where[1][0] = block_of(img, "/", 0), where[1][1] = 4096;
	where[2][0] = block_of(img, "/workspace", 0), where[2][1] = 4096;
	where[3][0] = block_of(img, "/workspace/d", 0), where[3][1] = 4096;
	where[4][0] = block_of(img, "/workspace/slow", 0), where[4][1] = 4096;
	sh("cp base.img good.img");
	for (int round = 0; round < rounds; round++) {
		long *w = where[round % 5];
		FILE *fp;
		sb_fsread *f = NULL;
		int rc, n = 0;

		sh("cp good.img base.img");
		assert_non_null(fp = fopen(img, "r+b"));
		for (int k = 0; k < 1 + round % 4 * 8; k++) {
			long off = w[0] + (long)(rand_r(&seed) % (unsigned)w[1]);
			unsigned char v = (unsigned char)rand_r(&seed);
			/* now and then a run of one byte */
			int len = rand_r(&seed) % 5 ? 1 : 1 + rand_r(&seed) % 64;
			fseek(fp, off, SEEK_SET);
			for (int j = 0; j < len; j++)
				fputc(v, fp);
		}
		fclose(fp);
		rc = sb_fsread_open(layer, &f);
		assert_true(known(rc));
		if (rc)
			continue;
		opened++;
		for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
			struct sb_fs_entry e;
			size_t len, got = 0;
			int r[3] = {sb_fsread_stat(f, paths[i], &e),
				    sb_fsread_list(f, paths[i], walk_one, &n),
				    sb_fsread_read(f, paths[i], sink, &got)};
			for (int j = 0; j < 3; j++) {
				assert_true(known(r[j]));
				failed += r[j] == SB_ERR_CORRUPT || r[j] == SB_ERR_IO;
			}
			rc = sb_fsread_readlink(f, paths[i], target, sizeof target, &len);
			assert_true(known(rc));
			if (!rc)
				assert_true(strlen(target) <= len && len < sizeof target);
		}
		sb_fsread_close(f);
	}
	print_message("%d of %d corrupted disks opened, %d reads found the damage (%s)\n",
		      opened, rounds, failed, opts[0] ? opts : "default features");
	assert_true(opened > 0); /* some rounds got past the superblock */
	assert_true(failed > 0); /* and the damage was met */
	tu_rmrf(tmp);
	tmp = NULL;
}

static void test_corrupted(void **state)
{
	corrupt_rounds("", 40, 12345);
	corrupt_rounds("-O ^metadata_csum", 60, 777);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_read_paths, teardown),
	    cmocka_unit_test_teardown(test_big_disk, teardown),
	    cmocka_unit_test_teardown(test_streams_and_errors, teardown),
	    cmocka_unit_test_teardown(test_corrupted, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
