/* test_beneath.c - writing and deleting under a directory that a hostile
 * guest filled with links: to a directory outside (as /etc), to "..", in a
 * loop, a link replaced by a file and a file by a link, a directory where a
 * file is to go, absurdly long paths and names, control bytes, a tree too
 * deep to delete. Nothing outside the root is ever written or deleted,
 * whatever the tree holds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/unit/testutil.h"
#include "vmm/beneath.h"

static char *tmp;
static char ws[PATH_MAX], out[PATH_MAX]; /* the root, and a directory beside it */
static int root = -1;

static int setup(void **state)
{
	tmp = tu_tmpdir();
	snprintf(ws, sizeof ws, "%s/ws", tmp);
	snprintf(out, sizeof out, "%s/outside", tmp);
	if (mkdir(ws, 0755) || mkdir(out, 0755))
		return -1;
	root = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return root < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	close(root);
	tu_rmrf(tmp);
	tmp = NULL;
	return 0;
}

/* Makes a link at ws/rel to target. */
static void link_in(const char *rel, const char *target)
{
	char p[PATH_MAX * 2];

	snprintf(p, sizeof p, "%s/%s", ws, rel);
	assert_int_equal(symlink(target, p), 0);
}

/* The lstat type of ws/rel (0: none). */
static mode_t type_of(const char *dir, const char *rel)
{
	char p[PATH_MAX * 2];
	struct stat sb;

	snprintf(p, sizeof p, "%s/%s", dir, rel);
	return lstat(p, &sb) ? 0 : sb.st_mode & S_IFMT;
}

/* Writes "x" to rel through sb_beneath_create; returns 0 or the errno. */
static int write_rel(const char *rel)
{
	int fd = sb_beneath_create(root, rel, 0644);

	if (fd < 0)
		return errno;
	assert_int_equal(write(fd, "x", 1), 1);
	close(fd);
	return 0;
}

static int entries(const char *dir)
{
	char cmd[PATH_MAX + 64];
	FILE *f;
	int n = 0, c;

	snprintf(cmd, sizeof cmd, "find '%s' -mindepth 1 | wc -l", dir);
	f = popen(cmd, "r");
	assert_non_null(f);
	c = fscanf(f, "%d", &n);
	pclose(f);
	assert_int_equal(c, 1);
	return n;
}

static void test_links_on_the_way(void **state)
{
	char outside_abs[PATH_MAX + 8];

	snprintf(outside_abs, sizeof outside_abs, "%s", out);
	link_in("d", outside_abs); /* as /workspace/d -> /etc */
	link_in("up", "..");
	link_in("loop", "loop");
	assert_int_equal(write_rel("d/evil"), ELOOP);
	assert_int_equal(write_rel("up/outside/evil"), ELOOP);
	assert_int_equal(write_rel("loop/x"), ELOOP);
	assert_int_equal(sb_beneath_symlink(root, "d/l", "/x"), -1);
	assert_int_equal(errno, ELOOP);
	assert_int_equal(sb_beneath_remove(root, "d/keep"), -1);
	assert_int_equal(errno, ELOOP);
	assert_int_equal(entries(out), 0);

	/* a file outside that a deletion through the link would have taken */
	{
		char p[PATH_MAX + 16];
		snprintf(p, sizeof p, "%s/keep", out);
		close(open(p, O_WRONLY | O_CREAT, 0644));
	}
	assert_int_equal(sb_beneath_remove(root, "d/keep"), -1);
	assert_int_equal(type_of(out, "keep"), S_IFREG);

	/* the link itself goes; what it names stays */
	assert_int_equal(sb_beneath_remove(root, "d"), 0);
	assert_int_equal(type_of(ws, "d"), 0);
	assert_int_equal(type_of(out, "keep"), S_IFREG);
	/* replaced by a directory, a file below it is written there */
	assert_int_equal(write_rel("d/evil"), 0);
	assert_int_equal(type_of(ws, "d"), S_IFDIR);
	assert_int_equal(type_of(ws, "d/evil"), S_IFREG);
	assert_int_equal(entries(out), 1);
	/* a missing path, or one below a missing directory, is already gone */
	assert_int_equal(sb_beneath_remove(root, "nothing/here"), 0);
	assert_int_equal(sb_beneath_remove(root, "nothing"), 0);
}

static void test_replacing(void **state)
{
	char target[PATH_MAX + 16];

	snprintf(target, sizeof target, "%s/target", out);
	close(open(target, O_WRONLY | O_CREAT, 0644));
	/* a link at the path is replaced by the file, never written through */
	link_in("f", target);
	assert_int_equal(write_rel("f"), 0);
	assert_int_equal(type_of(ws, "f"), S_IFREG);
	{
		struct stat sb;
		assert_int_equal(stat(target, &sb), 0);
		assert_int_equal(sb.st_size, 0);
	}
	/* a loop at the path too */
	link_in("self", "self");
	assert_int_equal(write_rel("self"), 0);
	assert_int_equal(type_of(ws, "self"), S_IFREG);
	/* a file replaced by a link, and a link by a link */
	assert_int_equal(sb_beneath_symlink(root, "f", "/etc/passwd"), 0);
	assert_int_equal(type_of(ws, "f"), S_IFLNK);
	assert_int_equal(sb_beneath_symlink(root, "f", target), 0);
	{
		char buf[PATH_MAX + 16];
		char p[PATH_MAX + 8];
		ssize_t n;
		snprintf(p, sizeof p, "%s/f", ws);
		n = readlink(p, buf, sizeof buf - 1);
		assert_true(n > 0);
		buf[n] = 0;
		assert_string_equal(buf, target);
	}
	/* a directory (with a link out inside) where a file is to go */
	assert_int_equal(write_rel("tree/a/b"), 0);
	link_in("tree/a/out", out);
	assert_int_equal(write_rel("tree"), 0);
	assert_int_equal(type_of(ws, "tree"), S_IFREG);
	assert_int_equal(type_of(out, "target"), S_IFREG);
	/* a FIFO where a file is to go is replaced, not opened */
	{
		char p[PATH_MAX + 8];
		snprintf(p, sizeof p, "%s/fifo", ws);
		assert_int_equal(mkfifo(p, 0644), 0);
	}
	assert_int_equal(write_rel("fifo"), 0);
	assert_int_equal(type_of(ws, "fifo"), S_IFREG);
	assert_int_equal(entries(out), 1);
}

static void test_bad_paths(void **state)
{
	static char longp[PATH_MAX + 100], longname[NAME_MAX + 10];
	const char *bad[] = {"", "/abs", "a//b", "./a", "a/..", "../x", "a/", "..", "."};

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		assert_int_equal(write_rel(bad[i]), EINVAL);
		assert_int_equal(sb_beneath_remove(root, bad[i]), -1);
	}
	for (size_t i = 0; i + 2 < sizeof longp; i += 2)
		memcpy(longp + i, "a/", 2);
	longp[sizeof longp - 2] = 'a';
	assert_int_equal(write_rel(longp), ENAMETOOLONG);
	memset(longname, 'n', sizeof longname - 1);
	assert_int_equal(write_rel(longname), ENAMETOOLONG);
	assert_int_equal(entries(ws), 0);
	/* control bytes and non-UTF-8 are names like any other */
	assert_int_equal(write_rel("a\nb/\x01\x1b[31m\xff"), 0);
	assert_int_equal(type_of(ws, "a\nb/\x01\x1b[31m\xff"), S_IFREG);
	assert_int_equal(sb_beneath_remove(root, "a\nb"), 0);
	assert_int_equal(entries(ws), 0);
}

static void test_deep_tree(void **state)
{
	char rel[2048] = "t", keep[PATH_MAX + 8];

	/* 80 levels, each with a link out: too deep to delete, and nothing
	 * outside is touched on the way */
	for (int i = 0; i < 80; i++) {
		size_t n = strlen(rel);
		snprintf(rel + n, sizeof rel - n, "/file");
		assert_int_equal(write_rel(rel), 0);
		snprintf(rel + n, sizeof rel - n, "/l");
		link_in(rel, out);
		snprintf(rel + n, sizeof rel - n, "/d");
	}
	snprintf(keep, sizeof keep, "%s/keep", out);
	close(open(keep, O_WRONLY | O_CREAT, 0644));
	assert_int_equal(sb_beneath_remove(root, "t"), -1);
	assert_int_equal(errno, ELOOP);
	assert_int_equal(entries(out), 1);
	/* cut at 40 levels, both halves go */
	rel[2 * 40 + 1] = 0;
	assert_int_equal(sb_beneath_remove(root, rel), 0);
	assert_int_equal(sb_beneath_remove(root, "t"), 0);
	assert_int_equal(entries(ws), 0);
	assert_int_equal(entries(out), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_links_on_the_way, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_replacing, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_paths, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_deep_tree, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
