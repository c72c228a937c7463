/* test_qmp.c - QMP against real microVMs under TCG (boot, stop/cont, the
 * snapshot-and-fork recipe, quit), against a hostile fake QMP peer, and the
 * accelerator probe.
 *
 * The guest kernel comes from $SANBOX_TEST_KERNEL (a vmlinux, or a
 * directory holding one), else from `sh tools/kernel.sh` run in the current
 * directory (the repository root). The initramfs is busybox with an /init
 * that prints a marker and then the guest's uptime every second. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "tests/unit/testutil.h"
#include "vmm/accel.h"
#include "vmm/disk.h"
#include "vmm/qemu.h"
#include "vmm/qmp.h"

#define MARK_UP "sanbox-test-init-up"

/* Set up once for the group. */
static char *kernel;
static char *shared_dir; /* holds initrd.img */
static char initrd[PATH_MAX];

/* Per test; teardown kills every VM still running and removes the dir. */
static pid_t vms[4];
static char *tmp;

static long ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

static void track(pid_t pid)
{
	for (size_t i = 0; i < sizeof vms / sizeof vms[0]; i++)
		if (!vms[i]) {
			vms[i] = pid;
			return;
		}
	fail_msg("too many VMs");
}

static void untrack(pid_t pid)
{
	for (size_t i = 0; i < sizeof vms / sizeof vms[0]; i++)
		if (vms[i] == pid)
			vms[i] = 0;
}

static int teardown(void **state)
{
	for (size_t i = 0; i < sizeof vms / sizeof vms[0]; i++)
		if (vms[i] > 1) {
			sb_vm_kill(vms[i], SIGKILL);
			sb_vm_wait(vms[i], 10000, NULL);
			vms[i] = 0;
		}
	tu_rmrf(tmp);
	tmp = NULL;
	return 0;
}

/* Finds the kernel as the suite does; NULL (and a message) when it cannot. */
static char *find_kernel(void)
{
	const char *env = getenv("SANBOX_TEST_KERNEL");
	char line[PATH_MAX], last[PATH_MAX] = "", *k;
	struct stat st;
	FILE *p;

	if (env && *env) {
		snprintf(last, sizeof last, "%s", env);
	} else {
		p = popen("sh tools/kernel.sh", "r");
		if (!p)
			return NULL;
		while (fgets(line, sizeof line, p))
			if (line[0] != '\n')
				snprintf(last, sizeof last, "%s", line);
		if (pclose(p) != 0) {
			fprintf(stderr, "test_qmp: sh tools/kernel.sh failed\n");
			return NULL;
		}
		last[strcspn(last, "\n")] = 0;
	}
	if (stat(last, &st) < 0) {
		fprintf(stderr, "test_qmp: kernel %s: %s\n", last, strerror(errno));
		return NULL;
	}
	if (S_ISDIR(st.st_mode)) {
		if (asprintf(&k, "%s/vmlinux", last) < 0)
			return NULL;
		return k;
	}
	return strdup(last);
}

static int group_setup(void **state)
{
	char cmd[16384];

	kernel = find_kernel();
	if (!kernel)
		return -1;
	shared_dir = strdup("/tmp/sb-test-XXXXXX");
	if (!shared_dir || !mkdtemp(shared_dir))
		return -1;
	snprintf(initrd, sizeof initrd, "%s/initrd.img", shared_dir);
	snprintf(cmd, sizeof cmd,
		 "set -e; d='%s/root'; mkdir -p \"$d/bin\" \"$d/proc\"\n"
		 "cp \"$(command -v busybox)\" \"$d/bin/busybox\"\n"
		 "cat >\"$d/init\" <<'EOF'\n"
		 "#!/bin/busybox sh\n"
		 "/bin/busybox mount -t proc proc /proc\n"
		 "read -r cmdline </proc/cmdline\n"
		 "case \" $cmdline \" in\n"
		 "*' " SB_VM_PROBE_ARG " '*) echo " SB_VM_PROBE_OK
		 "; /bin/busybox poweroff -f ;;\n"
		 "esac\n"
		 "echo " MARK_UP "\n"
		 "while :; do read -r up rest </proc/uptime; echo \"tick $up\"; "
		 "/bin/busybox sleep 1; done\n"
		 "EOF\n"
		 "chmod 755 \"$d/init\"\n"
		 "(cd \"$d\" && find . | cpio -o -H newc --quiet) | gzip -1 >'%s'\n",
		 shared_dir, initrd);
	if (system(cmd) != 0) {
		fprintf(stderr, "test_qmp: building the initramfs failed\n");
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	tu_rmrf(shared_dir);
	free(kernel);
	return 0;
}

static char *slurp(const char *path)
{
	char *buf = calloc(1, 1 << 20);
	FILE *f = fopen(path, "r");

	assert_non_null(buf);
	if (f) {
		buf[fread(buf, 1, (1 << 20) - 1, f)] = 0;
		fclose(f);
	}
	return buf;
}

/* Waits up to ms for needle in the file; returns the file's text then. */
static char *wait_for_text(const char *path, const char *needle, int ms)
{
	struct timespec t0;
	char *s;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		s = slurp(path);
		if (strstr(s, needle))
			return s;
		if (ms_since(&t0) > ms)
			fail_msg("no \"%s\" in %s after %d ms:\n%s", needle, path, ms, s);
		free(s);
		usleep(20000);
	}
}

/* The uptime of the last "tick" line in text, or -1. */
static double last_tick(const char *text)
{
	const char *p = text, *t;
	double up = -1;

	while ((t = strstr(p, "tick "))) {
		sscanf(t + 5, "%lf", &up);
		p = t + 5;
	}
	return up;
}

static const char *status_of(sb_qmp *q)
{
	static char st[64];
	json_t *r = NULL;

	assert_int_equal(sb_qmp_command(q, "query-status", NULL, 5000, &r), 0);
	snprintf(st, sizeof st, "%s", json_string_value(json_object_get(r, "status")));
	json_decref(r);
	return st;
}

/* Waits for event name, skipping others. */
static void expect_event(sb_qmp *q, const char *name)
{
	json_t *ev;
	int rc;

	for (;;) {
		rc = sb_qmp_event_wait(q, 5000, &ev);
		if (rc)
			fail_msg("waiting for event %s: %s", name, sb_errmsg(rc));
		if (!strcmp(json_string_value(json_object_get(ev, "event")), name)) {
			assert_non_null(json_object_get(ev, "timestamp"));
			json_decref(ev);
			return;
		}
		json_decref(ev);
	}
}

static void cmd_ok(sb_qmp *q, const char *cmd, json_t *args)
{
	int rc = sb_qmp_command(q, cmd, args, 10000, NULL);

	if (rc)
		fail_msg("QMP %s: %s", cmd, sb_errmsg(rc));
	json_decref(args);
}

struct vm {
	char dir[PATH_MAX], qmp[PATH_MAX], chan[PATH_MAX], con[PATH_MAX];
	int lq, lc, cfd;
	sb_qmp *q;
	pid_t pid;
	long greet_ms;
};

/* Starts a VM named name in tmp with disk and incoming (may be NULL) and
 * opens its QMP and channel connections. */
static void vm_start(struct vm *v, const char *name, const char *disk,
		     const char *incoming)
{
	struct sb_vm_config c = {
	    .kernel = kernel,
	    .initrd = initrd,
	    .disk = disk,
	    .incoming = incoming,
	    .cpus = 1,
	    .memory_mib = 256,
	    .accel = SB_ACCEL_TCG,
	};
	struct timespec t0;
	int fd, rc;

	snprintf(v->dir, sizeof v->dir, "%s/%s", tmp, name);
	assert_int_equal(mkdir(v->dir, 0700), 0);
	assert_true(snprintf(v->qmp, sizeof v->qmp, "%s/qmp.sock", v->dir) <
		    (int)sizeof v->qmp);
	assert_true(snprintf(v->chan, sizeof v->chan, "%s/chan.sock", v->dir) <
		    (int)sizeof v->chan);
	assert_true(snprintf(v->con, sizeof v->con, "%s/console.log", v->dir) <
		    (int)sizeof v->con);
	c.qmp_socket = v->qmp;
	c.chan_socket = v->chan;
	c.console_log = v->con;
	assert_int_equal(sb_unix_listen(v->qmp, &v->lq), 0);
	assert_int_equal(sb_unix_listen(v->chan, &v->lc), 0);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = sb_vm_spawn(&c, &v->pid);
	if (rc)
		fail_msg("spawn: %s", sb_errmsg(rc));
	track(v->pid);
	rc = sb_unix_accept(v->lq, 15000, &fd);
	if (rc)
		fail_msg("QEMU did not connect to QMP: %s", sb_errmsg(rc));
	rc = sb_qmp_open(fd, 10000, &v->q);
	if (rc)
		fail_msg("QMP open: %s", sb_errmsg(rc));
	v->greet_ms = ms_since(&t0);
	assert_int_equal(sb_unix_accept(v->lc, 5000, &v->cfd), 0);
}

/* quit: QEMU exits by itself with status 0 and is reaped. */
static void vm_quit(struct vm *v)
{
	int st = -2;

	cmd_ok(v->q, "quit", NULL);
	assert_int_equal(sb_vm_wait(v->pid, 10000, &st), 0);
	untrack(v->pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	sb_qmp_close(v->q);
	close(v->cfd);
	close(v->lq);
	close(v->lc);
}

/* Boot, QMP status, stop/cont with their events, the block nodes named for
 * snapshots; then freeze the disk and save memory (the fork recipe), quit,
 * and start a fork from the saved state: its guest continues (its uptime
 * goes on from where it was, no second boot). */
static void test_vm_lifecycle(void **state)
{
	char base[PATH_MAX], root[PATH_MAX], top[PATH_MAX], mem[PATH_MAX], fork[PATH_MAX],
	    *con, *s;
	struct vm a = {0}, b = {0};
	struct timespec t0;
	json_t *r = NULL, *mr;
	double up_before, up_after;
	size_t i;
	int fd, found_root = 0, found_file = 0;

	tmp = tu_tmpdir();
	snprintf(base, sizeof base, "%s/base.img", tmp);
	snprintf(root, sizeof root, "%s/root.qcow2", tmp);
	snprintf(top, sizeof top, "%s/top.qcow2", tmp);
	snprintf(mem, sizeof mem, "%s/mem state's.bin", tmp);
	snprintf(fork, sizeof fork, "%s/fork.qcow2", tmp);
	fd = open(base, O_WRONLY | O_CREAT, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 16 << 20), 0);
	close(fd);
	assert_int_equal(sb_disk_layer_create(base, "raw", root), 0);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	vm_start(&a, "a", root, NULL);
	print_message("spawn to QMP greeting: %ld ms\n", a.greet_ms);
	assert_string_equal(status_of(a.q), "running");
	free(wait_for_text(a.con, MARK_UP, 30000));
	print_message("spawn to guest init output: %ld ms\n", ms_since(&t0));

	assert_int_equal(sb_qmp_command(a.q, "query-named-block-nodes", NULL, 5000, &r),
			 0);
	for (i = 0; i < json_array_size(r); i++) {
		s = (char *)json_string_value(
		    json_object_get(json_array_get(r, i), "node-name"));
		found_root |= s && !strcmp(s, SB_VM_DISK_NODE);
		found_file |= s && !strcmp(s, SB_VM_DISK_FILE_NODE);
	}
	json_decref(r);
	assert_true(found_root && found_file);

	cmd_ok(a.q, "stop", NULL);
	assert_string_equal(status_of(a.q), "paused");
	expect_event(a.q, "STOP");
	cmd_ok(a.q, "cont", NULL);
	assert_string_equal(status_of(a.q), "running");
	expect_event(a.q, "RESUME");
	/* QEMU's own refusal carries its description. */
	assert_int_equal(sb_qmp_command(a.q, "no-such-command", NULL, 5000, NULL),
			 SB_ERR_PROTO);
	tu_errmsg_has(SB_ERR_PROTO, "QMP no-such-command: ", "has not been found");

	/* A daemon restart: both connections and listeners go away; QEMU
	 * reconnects to the new listeners on the same paths by itself. */
	sb_qmp_close(a.q);
	close(a.cfd);
	close(a.lq);
	close(a.lc);
	assert_int_equal(sb_unix_listen(a.qmp, &a.lq), 0);
	assert_int_equal(sb_unix_listen(a.chan, &a.lc), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(sb_unix_accept(a.lq, 5000, &fd), 0);
	assert_int_equal(sb_qmp_open(fd, 5000, &a.q), 0);
	assert_int_equal(sb_unix_accept(a.lc, 5000, &a.cfd), 0);
	print_message("reconnect after a daemon restart: %ld ms\n", ms_since(&t0));
	assert_string_equal(status_of(a.q), "running");

	/* The fork recipe: freeze the disk layer, save memory, quit. */
	free(wait_for_text(a.con, "tick ", 10000));
	cmd_ok(a.q, "stop", NULL);
	con = slurp(a.con);
	up_before = last_tick(con);
	free(con);
	assert_true(up_before >= 0);
	cmd_ok(a.q, "blockdev-snapshot-sync",
	       json_pack("{s:s, s:s, s:s, s:s}", "node-name", SB_VM_DISK_NODE,
			 "snapshot-file", top, "snapshot-node-name", "top0", "format",
			 "qcow2"));
	/* Same quoting rule as sb_vm_argv's -incoming. */
	char uri[PATH_MAX + 64];
	snprintf(uri, sizeof uri, "exec:cat > '%s/mem state'\\''s.bin'", tmp);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	cmd_ok(a.q, "migrate", json_pack("{s:s}", "uri", uri));
	for (;;) {
		mr = NULL;
		assert_int_equal(sb_qmp_command(a.q, "query-migrate", NULL, 5000, &mr),
				 0);
		s = (char *)json_string_value(json_object_get(mr, "status"));
		if (s && !strcmp(s, "completed")) {
			json_decref(mr);
			break;
		}
		if (s && (!strcmp(s, "failed") || !strcmp(s, "cancelled")))
			fail_msg("migration %s", s);
		json_decref(mr);
		if (ms_since(&t0) > 30000)
			fail_msg("migration did not complete");
		usleep(50000);
	}
	print_message("saving memory: %ld ms\n", ms_since(&t0));
	vm_quit(&a);

	/* The fork: a layer on the frozen disk, memory from the file. */
	assert_int_equal(sb_disk_layer_create(root, "qcow2", fork), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	vm_start(&b, "b", fork, mem);
	/* -S: loaded, then paused until cont. */
	for (;;) {
		s = (char *)status_of(b.q);
		if (strcmp(s, "inmigrate"))
			break;
		if (ms_since(&t0) > 30000)
			fail_msg("incoming migration did not finish");
		usleep(50000);
	}
	assert_string_equal(s, "paused");
	cmd_ok(b.q, "cont", NULL);
	assert_string_equal(status_of(b.q), "running");
	print_message("fork start to running: %ld ms\n", ms_since(&t0));
	con = wait_for_text(b.con, "tick ", 15000);
	up_after = last_tick(con);
	assert_null(strstr(con, MARK_UP)); /* it did not boot again */
	free(con);
	assert_true(up_after >= up_before);
	vm_quit(&b);
}

/* ---- a hostile QMP peer ---- */

struct chunk {
	const char *s;
	int delay_ms; /* before this chunk */
};

struct peer {
	int fd;
	const struct chunk *script;
	size_t step;	      /* bytes per write, 0 = all at once */
	const char *close_on; /* after the script: NULL = read until EOF,
			       * "" = close, else read until this is seen */
	pthread_t th;
};

static void *peer_main(void *arg)
{
	struct peer *p = arg;
	char buf[4096];

	for (const struct chunk *c = p->script; c->s; c++) {
		size_t len = strlen(c->s), off = 0, n;

		if (c->delay_ms)
			usleep(c->delay_ms * 1000);
		while (off < len) {
			n = p->step && p->step < len - off ? p->step : len - off;
			ssize_t w = send(p->fd, c->s + off, n, MSG_NOSIGNAL);
			if (w <= 0)
				goto out;
			off += w;
			if (p->step)
				usleep(100);
		}
	}
	if (!p->close_on || *p->close_on) {
		size_t got = 0;
		ssize_t n;

		while ((n = read(p->fd, buf + got, sizeof buf - 1 - got)) > 0) {
			got += n;
			buf[got] = 0;
			if (p->close_on && strstr(buf, p->close_on))
				break;
			if (got > sizeof buf / 2) { /* keep the tail */
				memmove(buf, buf + got - 256, 256);
				got = 256;
			}
		}
	}
out:
	close(p->fd);
	return NULL;
}

/* Starts a peer thread on one end of a socketpair; returns the other. */
static int peer_start(struct peer *p, const struct chunk *script, size_t step,
		      const char *close_on)
{
	int sv[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	p->fd = sv[1];
	p->script = script;
	p->step = step;
	p->close_on = close_on;
	assert_int_equal(pthread_create(&p->th, NULL, peer_main, p), 0);
	return sv[0];
}

#define GREETING                                                                         \
	"{\"QMP\": {\"version\": {\"qemu\": {\"micro\": 0, \"minor\": 2, \"major\": "    \
	"7}}, \"capabilities\": []}}\r\n"
#define CAPS_OK "{\"return\": {}, \"id\": 1}\r\n"

static void open_fails(const char *greeting, const char *close_on, int want,
		       const char *detail)
{
	const struct chunk script[] = {{greeting, 0}, {NULL, 0}};
	struct peer p;
	sb_qmp *q = (sb_qmp *)1;
	int fd = peer_start(&p, script, 0, close_on);

	assert_int_equal(sb_qmp_open(fd, 2000, &q), want);
	assert_null(q);
	tu_errmsg_has(want, detail);
	pthread_join(p.th, NULL); /* our end was closed: the peer saw EOF */
}

static void test_qmp_bad_greetings(void **state)
{
	open_fails("hello world\r\n", NULL, SB_ERR_PROTO, "bad JSON");
	open_fails("{\"return\": {}}\r\n", NULL, SB_ERR_PROTO, "greeting");
	open_fails("[1, 2]\r\n", NULL, SB_ERR_PROTO, "not a JSON object");
	open_fails("{\"QMP\": {}} trailing\r\n", NULL, SB_ERR_PROTO, "bad JSON");
	open_fails("{\"QMP\": {", "", SB_ERR_IO, "closed");
	open_fails("\x01\xff\xfe binary\n", NULL, SB_ERR_PROTO, "bad JSON");
	open_fails(GREETING "{\"error\": {\"class\": \"GenericError\", "
			    "\"desc\": \"caps refused\"}, \"id\": 1}\r\n",
		   NULL, SB_ERR_PROTO, "caps refused");

	/* A peer that says nothing: a timeout, on time. */
	const struct chunk silent[] = {{NULL, 0}};
	struct peer p;
	struct timespec t0;
	sb_qmp *q;
	int fd = peer_start(&p, silent, 0, NULL);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(sb_qmp_open(fd, 200, &q), SB_ERR_TIMEOUT);
	assert_in_range(ms_since(&t0), 190, 1500);
	pthread_join(p.th, NULL);
}

/* Replies dribbled a byte at a time, interleaved with events, stale
 * replies and blank lines; then an error reply, garbage, and EOF. */
static void test_qmp_stream(void **state)
{
	const struct chunk script[] = {
	    {GREETING CAPS_OK, 0},
	    {"{\"event\": \"STOP\", \"timestamp\": {\"seconds\": 1, \"microseconds\": "
	     "2}}\r\n"
	     "{\"return\": {\"stale\": true}, \"id\": 99}\r\n"
	     "\r\n"
	     "{\"return\": {\"status\": \"running\", \"running\": true}, \"id\": 2}\r\n"
	     "{\"error\": {\"class\": \"GenericError\", \"desc\": \"no such thing\"}, "
	     "\"id\": 3}\r\n"
	     "garbage{\r\n"
	     "{\"event\": \"RESUME\", \"timestamp\": {\"seconds\": 3, \"microseconds\": "
	     "4}}\r\n"
	     "{\"return\": 7, \"id\": 5}\r\n"
	     "{\"id\": 6}\r\n",
	     0},
	    {NULL, 0},
	};
	struct peer p;
	sb_qmp *q = NULL;
	json_t *r = NULL, *ev = NULL;
	int fd = peer_start(&p, script, 1, "\"w\"");

	assert_int_equal(sb_qmp_open(fd, 5000, &q), 0);
	assert_int_equal(sb_qmp_fd(q), fd);
	assert_true(fcntl(fd, F_GETFL) & O_NONBLOCK);
	assert_int_equal(sb_qmp_command(q, "query-status", NULL, 5000, &r), 0);
	assert_string_equal(json_string_value(json_object_get(r, "status")), "running");
	json_decref(r);
	assert_int_equal(sb_qmp_event_next(q, &ev), 0);
	assert_string_equal(json_string_value(json_object_get(ev, "event")), "STOP");
	json_decref(ev);

	json_t *args = json_pack("{s:s}", "x", "y");
	assert_int_equal(sb_qmp_command(q, "bad", args, 5000, &r), SB_ERR_PROTO);
	assert_int_equal(args->refcount, 1); /* borrowed, not taken */
	json_decref(args);
	assert_null(r);
	tu_errmsg_has(SB_ERR_PROTO, "bad", "no such thing");
	assert_int_equal(sb_qmp_command(q, "x", NULL, 5000, &r), SB_ERR_PROTO);
	tu_errmsg_has(SB_ERR_PROTO, "bad JSON");
	/* The stream goes on after a bad line: the event after it is queued,
	 * id 4's reply never came (the garbage took its place), id 5 is
	 * answered with a non-object result, id 6 with nothing usable. */
	assert_int_equal(sb_qmp_command(q, "y", NULL, 5000, &r), 0);
	assert_int_equal(json_integer_value(r), 7);
	json_decref(r);
	assert_int_equal(sb_qmp_command(q, "z", NULL, 5000, &r), SB_ERR_PROTO);
	tu_errmsg_has(SB_ERR_PROTO, "without a result");
	/* EOF: the queued event is still delivered, then the error sticks. */
	assert_int_equal(sb_qmp_command(q, "w", NULL, 5000, NULL), SB_ERR_IO);
	assert_int_equal(sb_qmp_command(q, "w", NULL, 5000, NULL), SB_ERR_IO);
	assert_int_equal(sb_qmp_event_next(q, &ev), 0);
	assert_string_equal(json_string_value(json_object_get(ev, "event")), "RESUME");
	json_decref(ev);
	assert_int_equal(sb_qmp_event_next(q, &ev), SB_ERR_IO);
	sb_qmp_close(q);
	pthread_join(p.th, NULL);
}

/* A command that times out; its late reply is dropped, the next command
 * gets its own. No event: SB_END at once, a timeout when waiting. */
static void test_qmp_timeouts(void **state)
{
	const struct chunk script[] = {
	    {GREETING CAPS_OK, 0},
	    {"{\"return\": {\"late\": true}, \"id\": 2}\r\n", 400},
	    {"{\"return\": {\"mine\": true}, \"id\": 3}\r\n", 0},
	    {NULL, 0},
	};
	struct peer p;
	struct timespec t0;
	sb_qmp *q = NULL;
	json_t *r = NULL, *ev = NULL;
	int fd = peer_start(&p, script, 0, NULL);

	assert_int_equal(sb_qmp_open(fd, 5000, &q), 0);
	assert_int_equal(sb_qmp_event_next(q, &ev), SB_END);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(sb_qmp_command(q, "slow", NULL, 150, &r), SB_ERR_TIMEOUT);
	assert_in_range(ms_since(&t0), 140, 380);
	tu_errmsg_has(SB_ERR_TIMEOUT, "slow");
	assert_int_equal(sb_qmp_command(q, "next", NULL, 5000, &r), 0);
	assert_true(json_is_true(json_object_get(r, "mine")));
	json_decref(r);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(sb_qmp_event_wait(q, 100, &ev), SB_ERR_TIMEOUT);
	assert_in_range(ms_since(&t0), 90, 1000);
	sb_qmp_close(q);
	pthread_join(p.th, NULL);
}

/* quit answered by a closed connection is success; a line without end
 * past 8 MiB is refused; at most 1024 events are kept, the newest. */
static void test_qmp_limits(void **state)
{
	const struct chunk quit[] = {{GREETING CAPS_OK, 0}, {NULL, 0}};
	struct peer p;
	sb_qmp *q = NULL;
	json_t *ev = NULL;
	char *big, *events;
	size_t i, off;
	int fd;

	fd = peer_start(&p, quit, 0, "quit");
	assert_int_equal(sb_qmp_open(fd, 5000, &q), 0);
	assert_int_equal(sb_qmp_command(q, "quit", NULL, 5000, NULL), 0);
	sb_qmp_close(q);
	pthread_join(p.th, NULL);

	big = malloc(9u << 20);
	assert_non_null(big);
	memset(big, 'a', (9u << 20) - 1);
	big[(9u << 20) - 1] = 0;
	const struct chunk huge[] = {{GREETING CAPS_OK, 0}, {big, 0}, {NULL, 0}};
	fd = peer_start(&p, huge, 0, NULL);
	assert_int_equal(sb_qmp_open(fd, 5000, &q), 0);
	assert_int_equal(sb_qmp_command(q, "x", NULL, 10000, NULL), SB_ERR_PROTO);
	tu_errmsg_has(SB_ERR_PROTO, "8 MiB");
	sb_qmp_close(q);
	pthread_join(p.th, NULL);
	free(big);

	events = malloc(1100 * 100 + 100);
	assert_non_null(events);
	off = 0;
	for (i = 0; i < 1100; i++)
		off += sprintf(
		    events + off,
		    "{\"event\": \"E\", \"data\": {\"n\": %zu}, \"timestamp\": {}}\n", i);
	sprintf(events + off, "{\"return\": {}, \"id\": 2}\n");
	const struct chunk many[] = {{GREETING CAPS_OK, 0}, {events, 0}, {NULL, 0}};
	fd = peer_start(&p, many, 0, NULL);
	assert_int_equal(sb_qmp_open(fd, 5000, &q), 0);
	assert_int_equal(sb_qmp_command(q, "x", NULL, 5000, NULL), 0);
	for (i = 0; sb_qmp_event_next(q, &ev) == 0; i++) {
		assert_int_equal(
		    json_integer_value(json_object_get(json_object_get(ev, "data"), "n")),
		    1100 - 1024 + i);
		json_decref(ev);
	}
	assert_int_equal(i, 1024);
	sb_qmp_close(q);
	pthread_join(p.th, NULL);
	free(events);
}

/* auto: /dev/kvm opens here but a KVM guest hangs, so the probe falls back
 * to TCG with the reason, once; the verdict is cached for this boot. */
static void test_accel_auto(void **state)
{
	char why[256] = "", why2[256] = "", cache[PATH_MAX], *c;
	struct timespec t0;
	sb_accel a = SB_ACCEL_AUTO, a2 = SB_ACCEL_AUTO;
	long first, second;
	int rc;

	tmp = tu_tmpdir();
	snprintf(cache, sizeof cache, "%s/cache", tmp);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = sb_accel_resolve(SB_ACCEL_AUTO, kernel, initrd, cache, &a, why, sizeof why);
	if (rc)
		fail_msg("accel resolve: %s", sb_errmsg(rc));
	first = ms_since(&t0);
	print_message("accel auto: %s (%s) in %ld ms\n", sb_accel_name(a), why, first);
	if (access("/dev/kvm", R_OK | W_OK) < 0) {
		assert_int_equal(a, SB_ACCEL_TCG);
		assert_non_null(strstr(why, "/dev/kvm"));
	} else if (a == SB_ACCEL_TCG) {
		/* This machine: the nested KVM guest hangs. */
		assert_string_equal(why, "KVM guest did not boot within 3s; using TCG");
		assert_in_range(first, SB_ACCEL_PROBE_MS, SB_ACCEL_PROBE_MS + 5000);
	} else {
		assert_string_equal(why, "");
	}
	/* The probe left nothing behind but the cache. */
	snprintf(cache, sizeof cache, "%s/cache/accel", tmp);
	c = slurp(cache);
	assert_non_null(strstr(c, sb_accel_name(a)));
	assert_non_null(strstr(c, "boot_id"));
	free(c);
	char cmd[PATH_MAX + 64];
	snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s/cache' | grep -v '^accel$')\"",
		 tmp);
	assert_int_equal(system(cmd), 0);

	/* Again: the cached verdict, without a probe. */
	snprintf(cache, sizeof cache, "%s/cache", tmp);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(sb_accel_resolve(SB_ACCEL_AUTO, kernel, initrd, cache, &a2, why2,
					  sizeof why2),
			 0);
	second = ms_since(&t0);
	print_message("accel auto, cached: %s in %ld ms\n", sb_accel_name(a2), second);
	assert_int_equal(a2, a);
	assert_string_equal(why2, why);
	assert_true(second < 1000);

	/* Asked for explicitly, KVM is given when /dev/kvm opens. */
	rc = sb_accel_resolve(SB_ACCEL_KVM, NULL, NULL, NULL, &a2, why2, sizeof why2);
	if (access("/dev/kvm", R_OK | W_OK) == 0) {
		assert_int_equal(rc, 0);
		assert_int_equal(a2, SB_ACCEL_KVM);
	} else {
		assert_int_equal(rc, SB_ERR_UNAVAIL);
	}
	/* auto needs a kernel to probe with; a missing one is named. */
	if (access("/dev/kvm", R_OK | W_OK) == 0) {
		assert_int_equal(
		    sb_accel_resolve(SB_ACCEL_AUTO, NULL, NULL, NULL, &a2, NULL, 0),
		    SB_ERR_INVAL);
		assert_int_equal(sb_accel_resolve(SB_ACCEL_AUTO, "/nonexistent/vmlinux",
						  NULL, NULL, &a2, NULL, 0),
				 SB_ERR_NOTFOUND);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_vm_lifecycle, teardown),
	    cmocka_unit_test_teardown(test_qmp_bad_greetings, teardown),
	    cmocka_unit_test_teardown(test_qmp_stream, teardown),
	    cmocka_unit_test_teardown(test_qmp_timeouts, teardown),
	    cmocka_unit_test_teardown(test_qmp_limits, teardown),
	    cmocka_unit_test_teardown(test_accel_auto, teardown),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
