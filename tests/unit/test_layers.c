/* test_layers.c - a run's disk layers on real qcow2 files (made with
 * qemu-img, written and read with qemu-io) under a temporary SANBOX home:
 * layer 0 over a raw base and a resume's layer over a snapshot, the
 * snapshot of a live machine (QEMU simulated with qemu-img), the backing
 * name read from a header (hostile headers included), who reads a layer
 * across runs (a fork), removing a layer (refused while read or the top;
 * otherwise the layers on it are rebased and read the same), and paths
 * too long for the buffers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "engine/runs/layers.h"
#include "tests/unit/testutil.h"
#include "vmm/disk.h"

static char *tmp;
static char home[PATH_MAX];
static char base[PATH_MAX];  /* a 4 MiB raw file of zeros: a template's root */
static char store[PATH_MAX]; /* the template store it is in */

static int setup(void **state)
{
	tmp = tu_tmpdir();
	snprintf(home, sizeof home, "%s/home", tmp);
	/* the base is a template's root file system, in the template store */
	snprintf(base, sizeof base, "%s/templates/t/rootfs.img", tmp);
	snprintf(store, sizeof store, "%s/templates", tmp);
	setenv("SANBOX_TEMPLATES", store, 1);
	return 0;
}

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
	char cmd[8192];
	int n = snprintf(cmd, sizeof cmd, "cd '%s' && ", tmp);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd + n, sizeof cmd - (size_t)n, fmt, ap);
	va_end(ap);
	if (system(cmd) != 0)
		fail_msg("command failed: %s", cmd);
}

static void make_base(void)
{
	sh("mkdir -p templates/t && qemu-img create -q -f raw templates/t/rootfs.img 4M");
}

/* The path of run's layer n (under home h). */
static const char *lpath_in(const char *h, const char *run, unsigned n)
{
	static char buf[4][SB_LAYER_PATH_MAX];
	static int next;
	char *p = buf[next++ % 4];

	assert_int_equal(sb_layers_path(h, run, n, p, SB_LAYER_PATH_MAX), SB_OK);
	return p;
}

static const char *lpath(const char *run, unsigned n)
{
	return lpath_in(home, run, n);
}

/* Asserts that run's disk.qcow2 is a symbolic link to layers/N.qcow2. */
static void assert_link(const char *h, const char *run, unsigned n)
{
	char link[SB_LAYER_PATH_MAX], target[64], want[64];
	struct stat st;
	ssize_t len;

	snprintf(link, sizeof link, "%s/runs/%s/disk.qcow2", h, run);
	assert_int_equal(lstat(link, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	len = readlink(link, target, sizeof target - 1);
	assert_true(len > 0);
	target[len] = 0;
	snprintf(want, sizeof want, "layers/%u.qcow2", n);
	assert_string_equal(target, want);
	/* and it resolves: a reader of the run's disk opens the top */
	assert_int_equal(stat(link, &st), 0);
}

/* Asserts that the backing name in the header of file is want. */
static void assert_backing(const char *file, const char *want)
{
	char b[PATH_MAX];
	int rc = sb_disk_backing(file, b, sizeof b);

	if (rc)
		fail_msg("backing of %s: %s", file, sb_errmsg(rc));
	assert_string_equal(b, want);
}

static mode_t mode_of(const char *file)
{
	struct stat st;

	assert_int_equal(stat(file, &st), 0);
	return st.st_mode & 07777;
}

static int exists(const char *file)
{
	struct stat st;

	return lstat(file, &st) == 0;
}

/* A live machine's snapshot, as the runner makes it: the next layer's path,
 * QEMU making it over the top (here qemu-img, naming the backing file by
 * the path of the old top), then advance. Returns the new layer's number. */
static unsigned snapshot_in(const char *h, const char *run)
{
	char path[SB_LAYER_PATH_MAX];
	unsigned top, n;

	assert_int_equal(sb_layers_top(h, run, &top), SB_OK);
	assert_int_equal(sb_layers_next(h, run, &n, path, sizeof path), SB_OK);
	assert_int_equal(n, top + 1);
	{
		/* the name QEMU writes as the next layer's backing: canonical */
		char dir[SB_LAYER_PATH_MAX], real[PATH_MAX], want[SB_LAYER_PATH_MAX + 32];
		snprintf(dir, sizeof dir, "%s/runs/%s/layers", h, run);
		assert_non_null(realpath(dir, real));
		snprintf(want, sizeof want, "%s/%u.qcow2", real, n);
		assert_string_equal(path, want);
	}
	assert_false(exists(path));
	sh("qemu-img create -q -f qcow2 -b '%s' -F qcow2 '%s'", lpath_in(h, run, top),
	   path);
	assert_int_equal(sb_layers_advance(h, run, n), SB_OK);
	assert_int_equal(mode_of(lpath_in(h, run, top)), 0444);
	assert_link(h, run, n);
	assert_int_equal(sb_layers_top(h, run, &top), SB_OK);
	assert_int_equal(top, n);
	return n;
}

static unsigned snapshot(const char *run)
{
	return snapshot_in(home, run);
}

/* Runs qemu-io with command c on file; 1 when it exits 0 and its output
 * has no failed pattern check and no error. */
static int qemu_io_ok(const char *c, const char *file, const char *flags)
{
	char cmd[8192], out[4096];
	size_t n;
	FILE *p;
	int st;

	snprintf(cmd, sizeof cmd, "qemu-io %s -c '%s' '%s' 2>&1", flags, c, file);
	assert_non_null(p = popen(cmd, "r"));
	n = fread(out, 1, sizeof out - 1, p);
	out[n] = 0;
	st = pclose(p);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 ||
	    strstr(out, "Pattern verification failed") || strstr(out, "qemu-io:") ||
	    !strstr(out, "bytes at offset")) {
		print_message("qemu-io %s -c '%s' %s:\n%s", flags, c, file, out);
		return 0;
	}
	return 1;
}

static void write_pattern(const char *file, const char *c)
{
	if (!qemu_io_ok(c, file, ""))
		fail_msg("qemu-io -c '%s' %s failed", c, file);
}

/* Reads through file (read-only) checking the pattern of c. */
static int reads(const char *file, const char *c)
{
	return qemu_io_ok(c, file, "-r");
}

/* Creates run's first layer over the raw base. */
static void new_run(const char *run)
{
	unsigned n = 99;

	assert_int_equal(sb_layers_create(home, run, base, "raw", &n), SB_OK);
	assert_int_equal(n, 0);
}

/* Layer 0 over a raw base; a resume's layer over a snapshot; what is not
 * a layer's name does not count; create's errors. */
static void test_create(void **state)
{
	char real[PATH_MAX], dir[SB_LAYER_PATH_MAX];
	unsigned n = 99, top = 99;

	make_base();
	assert_int_equal(sb_layers_top(home, "aaaa", &top), SB_ERR_NOTFOUND);
	assert_int_equal(sb_layers_create(home, "aaaa", base, "raw", &n), SB_OK);
	assert_int_equal(n, 0);
	assert_int_equal(sb_layers_top(home, "aaaa", &top), SB_OK);
	assert_int_equal(top, 0);
	assert_link(home, "aaaa", 0);
	assert_non_null(realpath(base, real));
	assert_backing(lpath("aaaa", 0), real);
	assert_true(reads(lpath("aaaa", 0), "read -P 0 0 64k"));

	/* a resume: a new top over a frozen layer of the run */
	assert_int_equal(sb_layers_freeze(home, "aaaa", 0), SB_OK);
	assert_int_equal(mode_of(lpath("aaaa", 0)), 0444);
	assert_int_equal(sb_layers_create(home, "aaaa", lpath("aaaa", 0), "qcow2", &n),
			 SB_OK);
	assert_int_equal(n, 1);
	assert_int_equal(sb_layers_top(home, "aaaa", &top), SB_OK);
	assert_int_equal(top, 1);
	assert_link(home, "aaaa", 1);
	assert_backing(lpath("aaaa", 1), lpath("aaaa", 0));
	assert_int_equal(mode_of(lpath("aaaa", 0)), 0444);

	/* files that are not N.qcow2 are not layers: the top stays 1 */
	snprintf(dir, sizeof dir, "%s/runs/aaaa/layers", home);
	sh("cd '%s' && touch -- 01.qcow2 7.qcow2.tmp x.qcow2 -3.qcow2 +4.qcow2 6"
	   " ' 5.qcow2' 99999999999999999999.qcow2 8.qcow2x .9.qcow2",
	   dir);
	assert_int_equal(sb_layers_top(home, "aaaa", &top), SB_OK);
	assert_int_equal(top, 1);
	/* layer numbers sort as numbers, not as names */
	assert_int_equal(sb_layers_create(home, "aaaa", lpath("aaaa", 1), "qcow2", &n),
			 SB_OK);
	assert_int_equal(n, 2);
	for (unsigned want = 3; want <= 10; want++) {
		assert_int_equal(sb_layers_create(home, "aaaa", base, "raw", &n), SB_OK);
		assert_int_equal(n, want);
	}
	assert_int_equal(sb_layers_top(home, "aaaa", &top), SB_OK);
	assert_int_equal(top, 10);
	assert_link(home, "aaaa", 10);

	/* errors: a bad format, a missing base; nothing is made */
	assert_int_equal(sb_layers_create(home, "bbbb", base, "vmdk", &n), SB_ERR_INVAL);
	assert_int_equal(sb_layers_create(home, "bbbb", base, NULL, &n), SB_ERR_INVAL);
	snprintf(dir, sizeof dir, "%s/none.raw", tmp);
	assert_int_equal(sb_layers_create(home, "bbbb", dir, "raw", &n), SB_ERR_NOTFOUND);
	assert_int_equal(sb_layers_top(home, "bbbb", &top), SB_ERR_NOTFOUND);
	assert_false(exists(lpath("bbbb", 0)));
}

/* A live machine's snapshot: next is top + 1 and not there; advance
 * freezes the old top and moves disk.qcow2. */
static void test_next_advance(void **state)
{
	char path[SB_LAYER_PATH_MAX], small[16];
	unsigned n = 99;

	make_base();
	assert_int_equal(sb_layers_next(home, "aaaa", &n, path, sizeof path),
			 SB_ERR_NOTFOUND);
	new_run("aaaa");
	assert_true(mode_of(lpath("aaaa", 0)) & 0200); /* the top is written */
	assert_int_equal(snapshot("aaaa"), 1);
	assert_int_equal(snapshot("aaaa"), 2);
	assert_int_equal(mode_of(lpath("aaaa", 0)), 0444);
	assert_int_equal(mode_of(lpath("aaaa", 1)), 0444);
	assert_true(mode_of(lpath("aaaa", 2)) & 0200);
	assert_backing(lpath("aaaa", 2), lpath("aaaa", 1));
	assert_backing(lpath("aaaa", 1), lpath("aaaa", 0));
	/* next twice without a snapshot between: the same layer */
	assert_int_equal(sb_layers_next(home, "aaaa", &n, path, sizeof path), SB_OK);
	assert_int_equal(n, 3);
	assert_int_equal(sb_layers_next(home, "aaaa", &n, path, sizeof path), SB_OK);
	assert_int_equal(n, 3);
	assert_false(exists(path));
	/* a buffer too small for the path */
	assert_int_equal(sb_layers_next(home, "aaaa", &n, small, sizeof small),
			 SB_ERR_TOOBIG);
	assert_int_equal(snapshot("aaaa"), 3);
	assert_int_equal(mode_of(lpath("aaaa", 2)), 0444);
	/* advance to a layer over a missing old top; freezing a missing layer */
	assert_int_equal(sb_layers_advance(home, "aaaa", 9), SB_ERR_IO);
	assert_link(home, "aaaa", 3);
	assert_int_equal(sb_layers_freeze(home, "aaaa", 42), SB_ERR_IO);
}

/* A snapshot that failed half-way: QEMU made layer 3 over the top, 2, but
 * did not switch to it (disk.qcow2 still names 2, the machine writes 2).
 * The snapshot made again must end with 2, which the new layer reads,
 * frozen, and next must not leave the half-made file to be taken for a
 * layer (layers.h: "it is removed first"). */
static void test_half_made_snapshot(void **state)
{
	char path[SB_LAYER_PATH_MAX];
	unsigned n = 99;

	make_base();
	new_run("aaaa");
	assert_int_equal(snapshot("aaaa"), 1);
	assert_int_equal(snapshot("aaaa"), 2);
	sh("qemu-img create -q -f qcow2 -b '%s' -F qcow2 '%s'", lpath("aaaa", 2),
	   lpath("aaaa", 3));
	assert_link(home, "aaaa", 2);
	assert_int_equal(sb_layers_next(home, "aaaa", &n, path, sizeof path), SB_OK);
	assert_false(exists(path));
	sh("qemu-img create -q -f qcow2 -b '%s' -F qcow2 '%s'", lpath("aaaa", 2), path);
	assert_int_equal(sb_layers_advance(home, "aaaa", n), SB_OK);
	assert_link(home, "aaaa", n);
	if (mode_of(lpath("aaaa", 2)) != 0444)
		fail_msg("layer 2, read by the new top %u, is mode %o, not frozen", n,
			 mode_of(lpath("aaaa", 2)));
	assert_int_equal(n, 3);
}

/* Writes the big-endian backing_file_offset and size into file's header. */
static void patch_header(const char *file, uint64_t off, uint32_t len)
{
	unsigned char h[12];
	int fd;

	for (int i = 0; i < 8; i++)
		h[i] = (unsigned char)(off >> (56 - 8 * i));
	for (int i = 0; i < 4; i++)
		h[8 + i] = (unsigned char)(len >> (24 - 8 * i));
	assert_true((fd = open(file, O_WRONLY)) >= 0);
	assert_int_equal(pwrite(fd, h, sizeof h, 8), (ssize_t)sizeof h);
	close(fd);
}

/* The backing name from a header: of a layer, of none; not qcow2 files;
 * missing files; hostile offsets and sizes; a name at the bound of cap. */
static void test_backing(void **state)
{
	char file[PATH_MAX], b[PATH_MAX], small[16];
	struct stat st;

	make_base();
	new_run("aaaa");
	assert_backing(lpath("aaaa", 0), realpath(base, b));
	/* a qcow2 file with no backing file */
	sh("qemu-img create -q -f qcow2 plain.qcow2 1M");
	snprintf(file, sizeof file, "%s/plain.qcow2", tmp);
	strcpy(b, "junk");
	assert_int_equal(sb_disk_backing(file, b, sizeof b), SB_OK);
	assert_string_equal(b, "");
	/* not qcow2: raw, empty, short, text, a directory */
	assert_int_equal(sb_disk_backing(base, b, sizeof b), SB_ERR_CORRUPT);
	sh(": > empty && printf 'QFI\\373\\0\\0\\0\\3' > short && echo hello > text");
	snprintf(file, sizeof file, "%s/empty", tmp);
	assert_int_equal(sb_disk_backing(file, b, sizeof b), SB_ERR_CORRUPT);
	snprintf(file, sizeof file, "%s/short", tmp);
	assert_int_equal(sb_disk_backing(file, b, sizeof b), SB_ERR_CORRUPT);
	snprintf(file, sizeof file, "%s/text", tmp);
	assert_int_equal(sb_disk_backing(file, b, sizeof b), SB_ERR_CORRUPT);
	assert_int_not_equal(sb_disk_backing(tmp, b, sizeof b), SB_OK);
	/* missing */
	snprintf(file, sizeof file, "%s/none.qcow2", tmp);
	assert_int_equal(sb_disk_backing(file, b, sizeof b), SB_ERR_NOTFOUND);
	snprintf(file, sizeof file, "%s/none/x.qcow2", tmp);
	assert_int_equal(sb_disk_backing(file, b, sizeof b), SB_ERR_NOTFOUND);

	/* hostile headers over a real layer with a backing name "/x/backing"
	 * (10 bytes); the size of the file is st.st_size */
	sh("qemu-img create -q -f qcow2 -b /x/backing -F raw -u hostile.qcow2 1M && "
	   "cp hostile.qcow2 good.qcow2");
	snprintf(file, sizeof file, "%s/hostile.qcow2", tmp);
	assert_backing(file, "/x/backing");
	assert_int_equal(stat(file, &st), 0);
	const struct {
		uint64_t off;
		uint32_t len;
	} bad[] = {
	    {(uint64_t)st.st_size, 10},	    /* right at the end */
	    {(uint64_t)st.st_size - 4, 10}, /* over the end */
	    {(uint64_t)st.st_size + 4096, 10},
	    {1ull << 40, 10},
	    {(uint64_t)INT64_MAX, 10},
	    {(uint64_t)INT64_MAX - 4, 10}, /* off + len overflows off_t */
	    {(uint64_t)INT64_MAX + 1, 10},
	    {UINT64_MAX, 10},
	    {UINT64_MAX, UINT32_MAX},
	    {512, UINT32_MAX}, /* huge sizes */
	    {512, 0x80000000u},
	    {512, PATH_MAX}, /* longer than cap - 1 */
	    {0, 0x10},	     /* off 0 and a size: no backing, or corrupt */
	    {8, 12},	     /* the name overlaps the header: has NUL bytes */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int rc;

		sh("cp good.qcow2 hostile.qcow2");
		patch_header(file, bad[i].off, bad[i].len);
		strcpy(b, "junk");
		rc = sb_disk_backing(file, b, sizeof b);
		if (bad[i].off == 0) {
			assert_true(rc == SB_OK || rc == SB_ERR_CORRUPT);
			if (rc == SB_OK)
				assert_string_equal(b, "");
			continue;
		}
		if (rc != SB_ERR_CORRUPT)
			fail_msg("offset %llu size %u: %d (%s)",
				 (unsigned long long)bad[i].off, bad[i].len, rc,
				 rc ? sb_errmsg(rc) : b);
	}
	/* a name of cap - 1 bytes fits; of cap bytes it does not */
	sh("cp good.qcow2 hostile.qcow2");
	assert_int_equal(sb_disk_backing(file, small, 11), SB_OK);
	assert_string_equal(small, "/x/backing");
	assert_int_equal(sb_disk_backing(file, small, 10), SB_ERR_CORRUPT);
	/* a layer whose header is garbage in another run is no reader, and does
	 * not stop the question */
	sh("mkdir -p home/runs/cccc/layers && cp text home/runs/cccc/layers/0.qcow2");
	size_t count = 9;
	char users[4][SB_RUN_MAX];
	assert_int_equal(sb_layers_users(home, "aaaa", 0, users, 4, &count), SB_OK);
	assert_int_equal(count, 0);
}

/* Run A: 0, 1, 2 over the base; run B: 0 over A's 1 (a fork). */
static void make_fork(void)
{
	unsigned n = 99;

	make_base();
	new_run("aaaa");
	assert_int_equal(snapshot("aaaa"), 1);
	assert_int_equal(snapshot("aaaa"), 2);
	assert_int_equal(sb_layers_create(home, "bbbb", lpath("aaaa", 1), "qcow2", &n),
			 SB_OK);
	assert_int_equal(n, 0);
	assert_backing(lpath("bbbb", 0), lpath("aaaa", 1));
}

/* 1 when home/rel exists (a link counts, dangling or not). */
static int there(const char *rel)
{
	char path[PATH_MAX + 64];
	struct stat st;

	snprintf(path, sizeof path, "%s/%s", home, rel);
	return lstat(path, &st) == 0;
}

/* Releasing a removed run: A's 2 (nobody reads it) and its files go, its
 * 1 and 0 (B reads them) stay; a dry run deletes nothing and counts the
 * same; once B is released too, A's layers go and its directory with
 * them. */
static void test_release(void **state)
{
	struct sb_layers_freed dry, f;

	make_fork();
	sh("echo console > home/runs/aaaa/console.log && mkdir home/runs/aaaa/sub && "
	   "echo x > home/runs/aaaa/sub/f && echo m > home/runs/aaaa/layers/2.mem");
	assert_int_equal(sb_layers_release(home, "aaaa", 1, &dry), SB_OK);
	assert_int_equal(dry.kept, 2);
	assert_int_equal(dry.layers, 1);
	assert_true(there("runs/aaaa/layers/2.qcow2") && there("runs/aaaa/console.log"));
	assert_int_equal(sb_layers_release(home, "aaaa", 0, &f), SB_OK);
	assert_int_equal(f.kept, 2);
	assert_true(f.bytes == dry.bytes && f.bytes > 0);
	assert_false(there("runs/aaaa/layers/2.qcow2") || there("runs/aaaa/layers/2.mem") ||
		     there("runs/aaaa/disk.qcow2") || there("runs/aaaa/console.log") ||
		     there("runs/aaaa/sub"));
	assert_true(there("runs/aaaa/layers/0.qcow2") && there("runs/aaaa/layers/1.qcow2"));
	/* B's disk still reads through A's kept layers */
	assert_int_equal(sb_layers_check(home, lpath("bbbb", 0)), SB_OK);
	assert_int_equal(sb_layers_release(home, "bbbb", 0, &f), SB_OK);
	assert_int_equal(f.kept, 0);
	assert_false(there("runs/bbbb"));
	assert_int_equal(sb_layers_release(home, "aaaa", 0, &f), SB_OK);
	assert_int_equal(f.kept, 0);
	assert_int_equal(f.layers, 2);
	assert_false(there("runs/aaaa"));
	/* a run with nothing left frees nothing */
	assert_int_equal(sb_layers_release(home, "aaaa", 0, &f), SB_OK);
	assert_int_equal(f.bytes + f.layers + f.kept, 0);
}

/* Who reads a layer: B reads A's 1 and, through it, A's 0; nobody A's 2;
 * A reads none of B's; a run with a run's own resumes; room for fewer. */
static void test_users(void **state)
{
	char users[4][SB_RUN_MAX], one[1][SB_RUN_MAX];
	size_t count = 99;
	unsigned n;

	make_fork();
	assert_int_equal(sb_layers_users(home, "aaaa", 0, users, 4, &count), SB_OK);
	assert_int_equal(count, 1);
	assert_string_equal(users[0], "bbbb");
	count = 99;
	assert_int_equal(sb_layers_users(home, "aaaa", 1, users, 4, &count), SB_OK);
	assert_int_equal(count, 1);
	assert_string_equal(users[0], "bbbb");
	count = 99;
	assert_int_equal(sb_layers_users(home, "aaaa", 2, users, 4, &count), SB_OK);
	assert_int_equal(count, 0);
	count = 99;
	assert_int_equal(sb_layers_users(home, "bbbb", 0, users, 4, &count), SB_OK);
	assert_int_equal(count, 0);
	assert_int_equal(sb_layers_users(home, "aaaa", 7, users, 4, &count),
			 SB_ERR_NOTFOUND);
	assert_int_equal(sb_layers_users(home, "zzzz", 0, users, 4, &count),
			 SB_ERR_NOTFOUND);

	/* C forks A's 0, D is made over B's 0 (reads A's 1 and 0 through B),
	 * E a run with no layers, F one over the base only */
	assert_int_equal(sb_layers_create(home, "cccc", lpath("aaaa", 0), "qcow2", &n),
			 SB_OK);
	assert_int_equal(sb_layers_freeze(home, "bbbb", 0), SB_OK);
	assert_int_equal(sb_layers_create(home, "dddd", lpath("bbbb", 0), "qcow2", &n),
			 SB_OK);
	sh("mkdir -p home/runs/eeee home/runs/.hidden/layers");
	new_run("ffff");
	count = 99;
	assert_int_equal(sb_layers_users(home, "aaaa", 0, users, 4, &count), SB_OK);
	assert_int_equal(count, 2); /* B and C: D reads A only through B's layer */
	assert_true((!strcmp(users[0], "bbbb") && !strcmp(users[1], "cccc")) ||
		    (!strcmp(users[0], "cccc") && !strcmp(users[1], "bbbb")));
	count = 99;
	assert_int_equal(sb_layers_users(home, "aaaa", 1, users, 4, &count), SB_OK);
	assert_int_equal(count, 1);
	assert_string_equal(users[0], "bbbb");
	count = 99;
	assert_int_equal(sb_layers_users(home, "bbbb", 0, users, 4, &count), SB_OK);
	assert_int_equal(count, 1);
	assert_string_equal(users[0], "dddd");
	/* room for one: the count is all of them */
	count = 99;
	memset(one, 0, sizeof one);
	assert_int_equal(sb_layers_users(home, "aaaa", 0, one, 1, &count), SB_OK);
	assert_int_equal(count, 2);
	assert_true(!strcmp(one[0], "bbbb") || !strcmp(one[0], "cccc"));
	count = 99;
	assert_int_equal(sb_layers_users(home, "aaaa", 0, NULL, 0, &count), SB_OK);
	assert_int_equal(count, 2);

	/* A's own later layers and resumes are not users of A's layers */
	assert_int_equal(sb_layers_create(home, "aaaa", lpath("aaaa", 1), "qcow2", &n),
			 SB_OK);
	assert_int_equal(n, 3);
	count = 99;
	assert_int_equal(sb_layers_users(home, "aaaa", 2, users, 4, &count), SB_OK);
	assert_int_equal(count, 0);
}

/* Removing: refused while another run reads the layer (the detail names
 * it) or for the top; otherwise the layers on it are rebased onto its
 * backing file and read the same. */
static void test_remove(void **state)
{
	char users[4][SB_RUN_MAX];
	size_t count;
	unsigned top;

	make_fork();
	assert_int_equal(sb_layers_remove(home, "aaaa", 1), SB_ERR_STATE);
	tu_errmsg_has(SB_ERR_STATE, "bbbb");
	assert_int_equal(sb_layers_remove(home, "aaaa", 0), SB_ERR_STATE);
	tu_errmsg_has(SB_ERR_STATE, "bbbb");
	assert_int_equal(sb_layers_remove(home, "aaaa", 2), SB_ERR_STATE); /* the top */
	assert_int_equal(sb_layers_remove(home, "bbbb", 0), SB_ERR_STATE); /* the top */
	assert_int_equal(sb_layers_remove(home, "aaaa", 5), SB_ERR_NOTFOUND);
	assert_int_equal(sb_layers_remove(home, "zzzz", 0), SB_ERR_NOTFOUND);
	for (unsigned i = 0; i < 3; i++)
		assert_true(exists(lpath("aaaa", i)));

	/* C: 0 (0x11 at 0), 1 (0x22 at 64k), 2 (0x33 at 192k), each written
	 * while it was the top */
	new_run("cccc");
	write_pattern(lpath("cccc", 0), "write -P 0x11 0 64k");
	assert_int_equal(snapshot("cccc"), 1);
	write_pattern(lpath("cccc", 1), "write -P 0x22 64k 64k");
	assert_int_equal(snapshot("cccc"), 2);
	write_pattern(lpath("cccc", 2), "write -P 0x33 192k 64k");
	assert_true(reads(lpath("cccc", 2), "read -P 0x22 64k 64k"));
	count = 99;
	assert_int_equal(sb_layers_users(home, "cccc", 1, users, 4, &count), SB_OK);
	assert_int_equal(count, 0);

	sh("printf mem > home/runs/cccc/layers/1.mem"); /* a memory snapshot's */
	assert_int_equal(sb_layers_remove(home, "cccc", 1), SB_OK);
	assert_false(exists(lpath("cccc", 1)));
	{
		char mem[SB_LAYER_PATH_MAX];
		snprintf(mem, sizeof mem, "%s/runs/cccc/layers/1.mem", home);
		assert_false(exists(mem));
	}
	assert_backing(lpath("cccc", 2), lpath("cccc", 0));
	assert_true(reads(lpath("cccc", 2), "read -P 0x11 0 64k"));
	assert_true(reads(lpath("cccc", 2), "read -P 0x22 64k 64k"));
	assert_true(reads(lpath("cccc", 2), "read -P 0 128k 64k"));
	assert_true(reads(lpath("cccc", 2), "read -P 0x33 192k 64k"));
	assert_true(reads(lpath("cccc", 2), "read -P 0 256k 64k"));
	assert_true(mode_of(lpath("cccc", 2)) & 0200); /* the top stays writable */
	assert_int_equal(mode_of(lpath("cccc", 0)), 0444);
	assert_int_equal(sb_layers_top(home, "cccc", &top), SB_OK);
	assert_int_equal(top, 2);
	assert_link(home, "cccc", 2);
	/* A and B are untouched */
	assert_backing(lpath("bbbb", 0), lpath("aaaa", 1));
	for (unsigned i = 0; i < 3; i++)
		assert_true(exists(lpath("aaaa", i)));

	/* the next snapshot goes on after the gap; then layer 0 goes, its
	 * readers rebased onto the raw base */
	assert_int_equal(snapshot("cccc"), 3);
	assert_int_equal(sb_layers_remove(home, "cccc", 0), SB_OK);
	assert_false(exists(lpath("cccc", 0)));
	assert_backing(lpath("cccc", 2), realpath(base, (char[PATH_MAX]){0}));
	assert_int_equal(mode_of(lpath("cccc", 2)), 0444); /* frozen again */
	assert_true(reads(lpath("cccc", 3), "read -P 0x11 0 64k"));
	assert_true(reads(lpath("cccc", 3), "read -P 0x22 64k 64k"));
	assert_true(reads(lpath("cccc", 3), "read -P 0x33 192k 64k"));
	assert_true(reads(lpath("cccc", 3), "read -P 0 256k 64k"));
	assert_int_equal(sb_layers_remove(home, "cccc", 1), SB_ERR_NOTFOUND);
	assert_int_equal(sb_layers_remove(home, "cccc", 3), SB_ERR_STATE);
}

/* A resumed run: layers 2 and 3 both made on 1; removing 1 rebases both. */
static void test_remove_resumed(void **state)
{
	unsigned n;

	make_base();
	new_run("aaaa");
	write_pattern(lpath("aaaa", 0), "write -P 0x11 0 64k");
	assert_int_equal(snapshot("aaaa"), 1);
	write_pattern(lpath("aaaa", 1), "write -P 0x22 64k 64k");
	assert_int_equal(snapshot("aaaa"), 2);
	write_pattern(lpath("aaaa", 2), "write -P 0x33 64k 64k");
	assert_int_equal(sb_layers_freeze(home, "aaaa", 2), SB_OK);
	assert_int_equal(sb_layers_create(home, "aaaa", lpath("aaaa", 1), "qcow2", &n),
			 SB_OK);
	assert_int_equal(n, 3);
	assert_int_equal(sb_layers_remove(home, "aaaa", 1), SB_OK);
	assert_false(exists(lpath("aaaa", 1)));
	assert_backing(lpath("aaaa", 2), lpath("aaaa", 0));
	assert_backing(lpath("aaaa", 3), lpath("aaaa", 0));
	assert_int_equal(mode_of(lpath("aaaa", 2)), 0444);
	assert_true(reads(lpath("aaaa", 2), "read -P 0x33 64k 64k"));
	assert_true(reads(lpath("aaaa", 2), "read -P 0x11 0 64k"));
	assert_true(reads(lpath("aaaa", 3), "read -P 0x22 64k 64k"));
	assert_true(reads(lpath("aaaa", 3), "read -P 0x11 0 64k"));
}

/* A home not spelled canonically (SANBOX_HOME is taken as it is: through
 * a symbolic link, or with a trailing slash): a snapshot's layer names its
 * backing file by the path QEMU was given, the one sb_layers_next gave,
 * under that home. The chain is still one chain: a fork is still a reader,
 * and a removal still rebases the layers made on the one removed. */
static void odd_home(const char *lhome)
{
	char users[4][SB_RUN_MAX];
	size_t count = 99;
	unsigned n;
	int rc;

	make_base();
	sh("mkdir -p real && ln -s real link");
	assert_int_equal(sb_layers_create(lhome, "aaaa", base, "raw", &n), SB_OK);
	write_pattern(lpath_in(lhome, "aaaa", 0), "write -P 0x11 0 64k");
	assert_int_equal(snapshot_in(lhome, "aaaa"), 1);
	write_pattern(lpath_in(lhome, "aaaa", 1), "write -P 0x22 64k 64k");
	assert_int_equal(snapshot_in(lhome, "aaaa"), 2);
	assert_int_equal(
	    sb_layers_create(lhome, "bbbb", lpath_in(lhome, "aaaa", 1), "qcow2", &n),
	    SB_OK);
	/* B reads A's 1 and, through it, A's 0: A's 0 may not go */
	rc = sb_layers_remove(lhome, "aaaa", 0);
	if (rc != SB_ERR_STATE || !exists(lpath_in(lhome, "aaaa", 0)))
		fail_msg("home %s: removing A's layer 0, read by B through A's 1: %d, "
			 "the file %s",
			 lhome, rc,
			 exists(lpath_in(lhome, "aaaa", 0)) ? "kept" : "deleted");
	assert_int_equal(sb_layers_users(lhome, "aaaa", 0, users, 4, &count), SB_OK);
	assert_int_equal(count, 1);
	/* without B, A's 1 goes: A's 2 is rebased onto A's 0, reads the same */
	sh("rm -rf real/runs/bbbb");
	assert_int_equal(sb_layers_remove(lhome, "aaaa", 1), SB_OK);
	assert_true(reads(lpath_in(lhome, "aaaa", 2), "read -P 0x11 0 64k"));
	assert_true(reads(lpath_in(lhome, "aaaa", 2), "read -P 0x22 64k 64k"));
}

/* The chain a reader follows: layers of runs of home down to a template's
 * root; a header naming any other host file, directly or further down, or
 * an external data file, is refused before anything follows it. */
static void test_check(void **state)
{
	char path[SB_LAYER_PATH_MAX], dir[SB_LAYER_PATH_MAX];

	make_base();
	new_run("aaaa");
	snapshot("aaaa");
	assert_int_equal(sb_layers_check(home, lpath("aaaa", 1)), SB_OK);
	assert_int_equal(sb_layers_check(home, lpath("aaaa", 0)), SB_OK);
	snprintf(path, sizeof path, "%s/runs/aaaa/disk.qcow2", home);
	assert_int_equal(sb_layers_check(home, path), SB_OK);
	/* a fork's layer over A's snapshot */
	assert_int_equal(
	    sb_layers_create(home, "bbbb", lpath("aaaa", 0), "qcow2", &(unsigned){0}),
	    SB_OK);
	assert_int_equal(sb_layers_check(home, lpath("bbbb", 0)), SB_OK);

	/* a layer over a host file */
	sh("printf secret > secret.raw && mkdir -p home/runs/cccc/layers && "
	   "qemu-img create -q -f qcow2 -b \"$PWD/secret.raw\" -F raw "
	   "home/runs/cccc/layers/0.qcow2");
	assert_int_equal(sb_layers_check(home, lpath("cccc", 0)), SB_ERR_CORRUPT);
	assert_non_null(strstr(sb_errmsg(SB_ERR_CORRUPT), "secret.raw"));
	/* ... further down: a layer of a run over a qcow2 outside the home */
	sh("qemu-img create -q -f qcow2 -b \"$PWD/templates/t/rootfs.img\" -F raw "
	   "out.qcow2 && "
	   "mkdir -p home/runs/dddd/layers && qemu-img create -q -f qcow2 -b "
	   "\"$PWD/out.qcow2\" "
	   "-F qcow2 home/runs/dddd/layers/0.qcow2");
	assert_int_equal(sb_layers_check(home, lpath("dddd", 0)), SB_ERR_CORRUPT);
	/* a file in a run's directory that is not a layer */
	sh("qemu-img create -q -f qcow2 -b \"$PWD/templates/t/rootfs.img\" -F raw "
	   "home/runs/dddd/other.qcow2 && qemu-img create -q -f qcow2 -b "
	   "\"$PWD/home/runs/dddd/other.qcow2\" -F qcow2 home/runs/dddd/layers/1.qcow2");
	assert_int_equal(sb_layers_check(home, lpath("dddd", 1)), SB_ERR_CORRUPT);
	/* an external data file */
	sh("mkdir -p home/runs/eeee/layers && qemu-img create -q -f qcow2 -o "
	   "data_file=\"$PWD/secret.raw\",data_file_raw=on home/runs/eeee/layers/0.qcow2 "
	   "4M");
	assert_int_equal(sb_layers_check(home, lpath("eeee", 0)), SB_ERR_CORRUPT);
	assert_non_null(strstr(sb_errmsg(SB_ERR_CORRUPT), "another file"));
	/* a root file system of another directory than the store */
	snprintf(dir, sizeof dir, "%s/elsewhere", tmp);
	setenv("SANBOX_TEMPLATES", dir, 1);
	assert_int_equal(sb_layers_check(home, lpath("aaaa", 0)), SB_ERR_CORRUPT);
	setenv("SANBOX_TEMPLATES", store, 1);
	/* a fork refuses such a base: sb_layers_remove too */
	assert_int_equal(sb_layers_remove(home, "cccc", 0) != SB_OK, 1);
}

/* disk.qcow2 follows the layer QEMU says it writes: a newer one (the
 * daemon died before the link moved) is advanced to, the old top frozen;
 * a file of another run is refused. */
static void test_settle(void **state)
{
	char path[SB_LAYER_PATH_MAX], dir[SB_LAYER_PATH_MAX], real[PATH_MAX];
	unsigned n, top;

	make_base();
	new_run("aaaa");
	assert_int_equal(sb_layers_next(home, "aaaa", &n, path, sizeof path), SB_OK);
	sh("qemu-img create -q -f qcow2 -b '%s' -F qcow2 '%s'", lpath("aaaa", 0), path);
	/* the daemon dies here: the link still names layer 0 */
	assert_link(home, "aaaa", 0);
	assert_int_equal(sb_layers_settle(home, "aaaa", path), SB_OK);
	assert_link(home, "aaaa", 1);
	assert_int_equal(mode_of(lpath("aaaa", 0)), 0444);
	assert_int_equal(sb_layers_settle(home, "aaaa", path),
			 SB_OK); /* again: the same */
	assert_int_equal(sb_layers_top(home, "aaaa", &top), SB_OK);
	assert_int_equal(top, 1);
	/* the next snapshot's layer is 2: layer 1 is not taken for half-made */
	assert_int_equal(sb_layers_next(home, "aaaa", &n, path, sizeof path), SB_OK);
	assert_int_equal(n, 2);
	assert_true(exists(lpath("aaaa", 1)));
	new_run("bbbb");
	snprintf(dir, sizeof dir, "%s/runs/bbbb/layers", home);
	assert_non_null(realpath(dir, real));
	snprintf(path, sizeof path, "%s/0.qcow2", real);
	assert_int_equal(sb_layers_settle(home, "aaaa", path), SB_ERR_PROTO);
	assert_int_equal(sb_layers_settle(home, "aaaa", "/etc/passwd"), SB_ERR_PROTO);
	assert_link(home, "aaaa", 1);
}

static void test_symlinked_home(void **state)
{
	char lhome[PATH_MAX];

	snprintf(lhome, sizeof lhome, "%s/link", tmp);
	odd_home(lhome);
}

static void test_trailing_slash_home(void **state)
{
	char lhome[PATH_MAX];

	snprintf(lhome, sizeof lhome, "%s/real/", tmp);
	odd_home(lhome);
}

/* Paths longer than the buffers: SB_ERR_TOOBIG or another error, never a
 * crash or a write past a buffer (run it under make asan). */
static void test_too_long(void **state)
{
	char *h = malloc(4300), path[SB_LAYER_PATH_MAX], users[2][SB_RUN_MAX];
	size_t count, len;
	unsigned n;
	int rc;

	assert_non_null(h);
	make_base();
	/* a home of 4200 bytes: no layer path fits */
	memset(h, 'h', 4200);
	h[0] = '/';
	h[4200] = 0;
	assert_int_equal(sb_layers_path(h, "aaaa", 0, path, sizeof path), SB_ERR_TOOBIG);
	assert_int_equal(sb_layers_top(h, "aaaa", &n), SB_ERR_TOOBIG);
	assert_int_equal(sb_layers_create(h, "aaaa", base, "raw", &n), SB_ERR_TOOBIG);
	assert_int_equal(sb_layers_next(h, "aaaa", &n, path, sizeof path), SB_ERR_TOOBIG);
	assert_int_equal(sb_layers_advance(h, "aaaa", 1), SB_ERR_TOOBIG);
	assert_int_equal(sb_layers_freeze(h, "aaaa", 0), SB_ERR_TOOBIG);
	assert_int_equal(sb_layers_users(h, "aaaa", 0, users, 2, &count), SB_ERR_TOOBIG);
	assert_int_equal(sb_layers_remove(h, "aaaa", 0), SB_ERR_TOOBIG);
	/* a home of 4100 bytes: the path fits the buffer (PATH_MAX + 64) but not
	 * the system: errors, no crash */
	h[4100] = 0;
	assert_int_equal(sb_layers_path(h, "aaaa", 0, path, sizeof path), SB_OK);
	assert_int_equal(strlen(path), 4100 + strlen("/runs/aaaa/layers/0.qcow2"));
	assert_int_not_equal(sb_layers_top(h, "aaaa", &n), SB_OK);
	assert_int_not_equal(sb_layers_create(h, "aaaa", base, "raw", &n), SB_OK);
	assert_int_not_equal(sb_layers_next(h, "aaaa", &n, path, sizeof path), SB_OK);
	assert_int_not_equal(sb_layers_advance(h, "aaaa", 0), SB_OK);
	assert_int_not_equal(sb_layers_users(h, "aaaa", 0, users, 2, &count), SB_OK);
	assert_int_not_equal(sb_layers_remove(h, "aaaa", 0), SB_OK);
	/* the bound of cap: a path of len bytes needs len + 1 */
	len = strlen(home) + strlen("/runs/aaaa/layers/12.qcow2");
	assert_int_equal(sb_layers_path(home, "aaaa", 12, path, len + 1), SB_OK);
	assert_int_equal(strlen(path), len);
	path[len] = 'x';
	assert_int_equal(sb_layers_path(home, "aaaa", 12, path, len), SB_ERR_TOOBIG);
	assert_true(path[len] == 'x'); /* nothing written past cap */
	/* a small buffer given to next */
	new_run("aaaa");
	rc = sb_layers_next(home, "aaaa", &n, path, 16);
	assert_int_equal(rc, SB_ERR_TOOBIG);
	/* a name too long for the run's directory name */
	memset(h, 'r', 300);
	h[300] = 0;
	assert_int_not_equal(sb_layers_create(home, h, base, "raw", &n), SB_OK);
	free(h);
}

/* A fork of a snapshot whose chain is longer than the bound gets its own
 * base: layer 0 reads the root directly with every layer's data, frozen,
 * its top over it; it reads none of its parent's layers, so they can go;
 * a fork of a short chain is a layer over the snapshot, as before. */
static void test_fork_flattens(void **state)
{
	char users[2][SB_RUN_MAX], c[128];
	size_t count = 99;
	unsigned n = 99, top;

	make_base();
	new_run("aaaa");
	for (unsigned i = 0; i < 12; i++) { /* layer i holds 64 KiB of byte i+1 */
		snprintf(c, sizeof c, "write -P %u %u 64k", i + 1, i * 65536);
		write_pattern(lpath("aaaa", i), c);
		assert_int_equal(snapshot("aaaa"), i + 1);
	}
	assert_int_equal(sb_layers_fork(home, "bbbb", lpath("aaaa", 11), 4, &n), SB_OK);
	assert_int_equal(n, 1);
	assert_int_equal(mode_of(lpath("bbbb", 0)), 0444);
	assert_backing(lpath("bbbb", 0), base);
	assert_backing(lpath("bbbb", 1), lpath("bbbb", 0));
	assert_link(home, "bbbb", 1);
	for (unsigned i = 0; i < 12; i++) {
		snprintf(c, sizeof c, "read -P %u %u 64k", i + 1, i * 65536);
		assert_true(reads(lpath("bbbb", 1), c));
	}
	assert_true(reads(lpath("bbbb", 1), "read -P 0 786432 64k"));
	for (unsigned i = 0; i < 12; i++) {
		assert_int_equal(sb_layers_users(home, "aaaa", i, users, 2, &count), SB_OK);
		assert_int_equal(count, 0);
	}
	assert_int_equal(sb_layers_remove(home, "aaaa", 5), SB_OK);
	assert_true(reads(lpath("bbbb", 1), "read -P 6 327680 64k"));
	/* its own snapshots go on from 1 */
	assert_int_equal(snapshot("bbbb"), 2);
	assert_int_equal(sb_layers_top(home, "bbbb", &top), SB_OK);
	assert_int_equal(top, 2);
	/* the bound reached, not passed: a layer over the snapshot */
	assert_int_equal(sb_layers_fork(home, "cccc", lpath("aaaa", 3), 4, &n), SB_OK);
	assert_int_equal(n, 0);
	assert_backing(lpath("cccc", 0), lpath("aaaa", 3));
	/* a run that has layers gets no base over them */
	assert_int_equal(sb_layers_fork(home, "bbbb", lpath("aaaa", 11), 4, &n),
			 SB_ERR_EXISTS);
	assert_int_equal(sb_layers_top(home, "bbbb", &top), SB_OK);
	assert_int_equal(top, 2);
	/* a header naming a file out of the home is refused before anything */
	assert_int_equal(sb_layers_fork(home, "dddd", "/etc/passwd", 4, &n), SB_ERR_CORRUPT);
	assert_false(exists(lpath("dddd", 0)));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_create, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_next_advance, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_half_made_snapshot, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_backing, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_users, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_remove, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_remove_resumed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_check, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_settle, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_symlinked_home, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_trailing_slash_home, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_too_long, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_fork_flattens, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_release, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
