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
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "engine/proc.h"
#include "engine/sock.h"
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
			sb_proc_kill(vms[i], SIGKILL);
			sb_proc_wait(vms[i], 10000, NULL);
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
	assert_int_equal(sb_proc_wait(v->pid, 10000, &st), 0);
	untrack(v->pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	sb_qmp_close(v->q);
	close(v->cfd);
	close(v->lq);
	close(v->lc);
}

static sb_qmp *real_qemu_async(int fd, json_t *events);

/* Boot, QMP status, stop/cont with their events, the block nodes named for
 * snapshots; then freeze the disk and save memory (the fork recipe), quit,
 * and start a fork from the saved state: its guest continues (its uptime
 * goes on from where it was, no second boot). */
static void test_vm_lifecycle(void **state)
{
	char base[PATH_MAX], root[PATH_MAX], top[PATH_MAX], mem[PATH_MAX], fork[PATH_MAX],
	    *con, *s;
	struct vm a = {0}, b = {0};
	json_t *async_events = json_array();
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
	a.q = real_qemu_async(fd, async_events);
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
	json_decref(async_events);
}

/* ---- a hostile QMP peer ---- */

struct chunk {
	const char *s;
	int delay_ms;      /* before this chunk */
	const char *after; /* sent once the client has written this (NULL: at once) */
};

struct peer {
	int fd;
	const struct chunk *script;
	size_t step;	      /* bytes per write, 0 = all at once */
	const char *close_on; /* after the script: NULL = read until EOF,
			       * "" = close, else read until this is seen */
	pthread_t th;
	char heard[8192];     /* what the client wrote, past the last `after` */
	size_t nheard;
};

/* Reads what the client writes until it has written s; 0 on EOF. */
static int peer_await(struct peer *p, const char *s)
{
	char *at;
	ssize_t n;

	for (;;) {
		p->heard[p->nheard] = 0;
		if ((at = strstr(p->heard, s))) {
			p->nheard -= (size_t)(at - p->heard) + strlen(s);
			memmove(p->heard, at + strlen(s), p->nheard);
			return 1;
		}
		if (p->nheard == sizeof p->heard - 1) { /* keep the tail */
			memmove(p->heard, p->heard + p->nheard - 256, 256);
			p->nheard = 256;
		}
		n = read(p->fd, p->heard + p->nheard, sizeof p->heard - 1 - p->nheard);
		if (n <= 0)
			return 0;
		p->nheard += (size_t)n;
	}
}

static void *peer_main(void *arg)
{
	struct peer *p = arg;
	char buf[4096];

	for (const struct chunk *c = p->script; c->s; c++) {
		size_t len = strlen(c->s), off = 0, n;

		if (c->after && !peer_await(p, c->after))
			goto out;
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
	if (!p->close_on)
		while (read(p->fd, buf, sizeof buf) > 0)
			;
	else if (*p->close_on)
		peer_await(p, p->close_on);
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
	p->nheard = 0;
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
	const struct chunk script[] = {{greeting, 0, NULL}, {NULL, 0, NULL}};
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
	const struct chunk silent[] = {{NULL, 0, NULL}};
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
	    {GREETING CAPS_OK, 0, NULL},
	    {"{\"event\": \"STOP\", \"timestamp\": {\"seconds\": 1, \"microseconds\": "
	     "2}}\r\n"
	     "{\"return\": {\"stale\": true}, \"id\": 99}\r\n"
	     "\r\n"
	     "{\"return\": {\"status\": \"running\", \"running\": true}, \"id\": 2}\r\n",
	     0, "\"id\":2"},
	    {"{\"error\": {\"class\": \"GenericError\", \"desc\": \"no such thing\"}, "
	     "\"id\": 3}\r\n",
	     0, "\"id\":3"},
	    {"garbage{\r\n"
	     "{\"event\": \"RESUME\", \"timestamp\": {\"seconds\": 3, \"microseconds\": "
	     "4}}\r\n",
	     0, "\"id\":4"},
	    {"{\"return\": 7, \"id\": 5}\r\n", 0, "\"id\":5"},
	    {"{\"id\": 6}\r\n", 0, "\"id\":6"},
	    {NULL, 0, NULL},
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

/* A command that times out, not early; its reply, sent only once the
 * next command is written (so after the timeout, whatever the scheduler
 * does), is dropped, and the next command gets its own. No event: SB_END
 * at once, a timeout when waiting. */
static void test_qmp_timeouts(void **state)
{
	const struct chunk script[] = {
	    {GREETING CAPS_OK, 0, NULL},
	    {"{\"return\": {\"late\": true}, \"id\": 2}\r\n", 0, "\"id\":3"},
	    {"{\"return\": {\"mine\": true}, \"id\": 3}\r\n", 0, NULL},
	    {NULL, 0, NULL},
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
	assert_true(ms_since(&t0) >= 140);
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
 * past 1 MiB is refused; at most 1024 events are kept, the newest. */
static void test_qmp_limits(void **state)
{
	const struct chunk quit[] = {{GREETING CAPS_OK, 0, NULL}, {NULL, 0, NULL}};
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
	const struct chunk huge[] = {{GREETING CAPS_OK, 0, NULL}, {big, 0, NULL}, {NULL, 0, NULL}};
	fd = peer_start(&p, huge, 0, NULL);
	assert_int_equal(sb_qmp_open(fd, 5000, &q), 0);
	assert_int_equal(sb_qmp_command(q, "x", NULL, 10000, NULL), SB_ERR_PROTO);
	tu_errmsg_has(SB_ERR_PROTO, "1024 KiB");
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
	const struct chunk many[] = {{GREETING CAPS_OK, 0, NULL}, {events, 0, "\"id\":2"}, {NULL, 0, NULL}};
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

/* ---- the asynchronous core ----
 *
 * The test is both QEMU and the caller's loop: it writes the server's
 * lines to its end of a socketpair, reads what the client wrote, and calls
 * sb_qmp_io and sb_qmp_tick itself with a clock of its own, so no test
 * waits for time to pass. */

/* What one command's callback saw; calls counts them (exactly one). */
struct outcome {
	int calls, rc;
	json_t *ret;
	char detail[256];
	sb_qmp *q;          /* for callbacks that act on the handle */
	int close_in_cb;    /* sb_qmp_close from the callback */
	int send_in_cb;     /* sb_qmp_send of "again" from the callback */
	struct outcome *next_out;
};

static void on_outcome(void *ctx, int rc, json_t *ret)
{
	struct outcome *o = ctx;

	o->calls++;
	o->rc = rc;
	o->ret = ret ? json_incref(ret) : NULL;
	snprintf(o->detail, sizeof o->detail, "%s", rc ? sb_errmsg(rc) : "");
	if (o->send_in_cb)
		assert_int_equal(sb_qmp_send(o->q, 0, "again", NULL, -1, on_outcome, o->next_out),
				 SB_OK);
	if (o->close_in_cb)
		sb_qmp_close(o->q);
}

static void outcome_free(struct outcome *o, size_t n)
{
	for (size_t i = 0; i < n; i++)
		json_decref(o[i].ret);
}

struct fake {
	int srv;       /* the server's end, non-blocking */
	sb_qmp *q;
	int64_t now;
	json_t *events; /* names seen by ops.event */
	int downs, down_rc;
	char down_detail[256];
	char in[1 << 16]; /* what the client wrote, not yet taken */
	size_t nin;
};

static void fake_event(void *ctx, json_t *ev)
{
	struct fake *f = ctx;

	json_array_append_new(f->events, json_string(json_string_value(json_object_get(ev, "event"))));
}

static void fake_down(void *ctx, int err)
{
	struct fake *f = ctx;

	f->downs++;
	f->down_rc = err;
	snprintf(f->down_detail, sizeof f->down_detail, "%s", sb_errmsg(err));
}

static const struct sb_qmp_ops fake_ops = {.event = fake_event, .down = fake_down};

/* A client on one end of a socketpair, the handshake to finish within
 * 1000 ms of clock 0. */
static void fake_start(struct fake *f)
{
	int sv[2];

	memset(f, 0, sizeof *f);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	f->srv = sv[1];
	assert_int_equal(fcntl(f->srv, F_SETFL, O_NONBLOCK), 0);
	assert_non_null(f->events = json_array());
	assert_int_equal(sb_qmp_open_async(sv[0], 0, 1000, &fake_ops, f, &f->q), SB_OK);
	assert_int_equal(sb_qmp_fd(f->q), sv[0]);
	assert_true(fcntl(sv[0], F_GETFL) & O_NONBLOCK);
}

static void fake_end(struct fake *f)
{
	sb_qmp_close(f->q);
	close(f->srv);
	json_decref(f->events);
}

/* Lets the client do what its socket is ready for. */
static void pump(struct fake *f)
{
	sb_qmp_io(f->q, SB_QMP_READ | SB_QMP_WRITE);
}

/* The server writes s (all of it: pumping the client while the socket is
 * full), then the client reads it. */
static void say(struct fake *f, const char *s, size_t len)
{
	size_t off = 0;

	while (off < len) {
		ssize_t n = send(f->srv, s + off, len - off, MSG_NOSIGNAL);
		if (n > 0)
			off += (size_t)n;
		else if (n < 0 && errno == EAGAIN)
			pump(f);
		else
			fail_msg("server write: %s", strerror(errno));
	}
	pump(f);
}

#define SAY(f, s) say((f), (s), strlen(s))

/* The next command the client wrote, as an object (the caller decrefs),
 * or NULL when it wrote no complete line. */
static json_t *heard(struct fake *f)
{
	char *nl;
	ssize_t n;
	json_t *j;

	pump(f);
	while ((n = read(f->srv, f->in + f->nin, sizeof f->in - f->nin)) > 0)
		f->nin += (size_t)n;
	if (!(nl = memchr(f->in, '\n', f->nin)))
		return NULL;
	j = json_loadb(f->in, (size_t)(nl - f->in), 0, NULL);
	assert_non_null(j);
	f->nin -= (size_t)(nl - f->in) + 1;
	memmove(f->in, nl + 1, f->nin);
	return j;
}

/* The id of the next command heard, which must be cmd. */
static json_int_t heard_cmd(struct fake *f, const char *cmd)
{
	json_t *j = heard(f);
	json_int_t id;

	if (!j)
		fail_msg("the client did not send %s", cmd);
	assert_string_equal(json_string_value(json_object_get(j, "execute")), cmd);
	id = json_integer_value(json_object_get(j, "id"));
	json_decref(j);
	return id;
}

static void answer(struct fake *f, json_int_t id, const char *ret_json)
{
	char line[512];

	snprintf(line, sizeof line, "{\"return\": %s, \"id\": %lld}\r\n", ret_json, (long long)id);
	SAY(f, line);
}

/* Greeting and capabilities, with nothing else pending. */
static void handshake(struct fake *f)
{
	SAY(f, GREETING);
	answer(f, heard_cmd(f, "qmp_capabilities"), "{}");
	assert_true(sb_qmp_deadline(f->q) == -1);
}

static int event_seen(struct fake *f, size_t i, const char *name)
{
	return i < json_array_size(f->events) &&
	       !strcmp(json_string_value(json_array_get(f->events, i)), name);
}

/* Commands sent before the greeting wait for the handshake, then go out
 * pipelined; replies come out of order and are matched by id; events come
 * between; a callback may send; a second reply to an id is dropped. */
static void test_qmp_async_pipelined(void **state)
{
	struct outcome o[4] = {{0}};
	struct fake f;
	json_int_t id[3], caps, again;
	json_t *args = json_pack("{s:i}", "n", 2);

	fake_start(&f);
	o[0].q = f.q;
	o[0].send_in_cb = 1;
	o[0].next_out = &o[3];
	assert_int_equal(sb_qmp_send(f.q, 0, "first", NULL, 5000, on_outcome, &o[0]), SB_OK);
	assert_int_equal(sb_qmp_send(f.q, 0, "second", args, 5000, on_outcome, &o[1]), SB_OK);
	assert_int_equal(args->refcount, 1); /* borrowed */
	json_decref(args);
	assert_int_equal(sb_qmp_send(f.q, 10, "third", NULL, -1, on_outcome, &o[2]), SB_OK);
	/* nothing goes out before the greeting; the handshake's deadline is first */
	assert_int_equal(sb_qmp_wants(f.q), SB_QMP_READ);
	assert_true(sb_qmp_deadline(f.q) == 1000);
	assert_null(heard(&f));
	SAY(&f, GREETING);
	caps = heard_cmd(&f, "qmp_capabilities");
	assert_null(heard(&f)); /* the commands wait for its answer */
	answer(&f, caps, "{}");
	assert_true(sb_qmp_deadline(f.q) == 5000);
	id[0] = heard_cmd(&f, "first");
	{
		json_t *j = heard(&f);
		assert_non_null(j);
		assert_string_equal(json_string_value(json_object_get(j, "execute")), "second");
		assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "arguments"), "n")), 2);
		id[1] = json_integer_value(json_object_get(j, "id"));
		json_decref(j);
	}
	id[2] = heard_cmd(&f, "third");
	assert_true(id[0] != id[1] && id[1] != id[2] && id[0] != id[2] && caps != id[0]);
	assert_int_equal(sb_qmp_wants(f.q), SB_QMP_READ);

	/* third, an event, first, an event, second (an error), in one write */
	{
		char lines[1024];
		snprintf(lines, sizeof lines,
			 "{\"return\": {\"for\": \"third\"}, \"id\": %lld}\r\n"
			 "{\"event\": \"STOP\", \"timestamp\": {\"seconds\": 1, \"microseconds\": 2}}\r\n"
			 "{\"return\": {\"for\": \"first\"}, \"id\": %lld}\r\n"
			 "{\"event\": \"RESUME\", \"data\": {}, \"timestamp\": {}}\r\n"
			 "{\"error\": {\"class\": \"GenericError\", \"desc\": \"boom\"}, \"id\": %lld}\r\n",
			 (long long)id[2], (long long)id[0], (long long)id[1]);
		SAY(&f, lines);
	}
	for (int i = 0; i < 3; i++)
		assert_int_equal(o[i].calls, 1);
	assert_int_equal(o[0].rc, 0);
	assert_string_equal(json_string_value(json_object_get(o[0].ret, "for")), "first");
	assert_int_equal(o[2].rc, 0);
	assert_string_equal(json_string_value(json_object_get(o[2].ret, "for")), "third");
	assert_int_equal(o[1].rc, SB_ERR_PROTO);
	assert_null(o[1].ret);
	assert_non_null(strstr(o[1].detail, "second"));
	assert_non_null(strstr(o[1].detail, "boom"));
	assert_int_equal(json_array_size(f.events), 2);
	assert_true(event_seen(&f, 0, "STOP") && event_seen(&f, 1, "RESUME"));

	/* the command sent from first's callback went out and is answered */
	again = heard_cmd(&f, "again");
	assert_true(sb_qmp_deadline(f.q) == -1); /* no timeout */
	answer(&f, again, "[1, 2]");
	assert_int_equal(o[3].calls, 1);
	assert_int_equal(o[3].rc, 0);
	assert_int_equal(json_array_size(o[3].ret), 2);

	/* answered twice, or for ids never used: dropped */
	answer(&f, id[0], "{\"for\": \"first again\"}");
	answer(&f, 4242, "{}");
	answer(&f, -1, "{}");
	SAY(&f, "{\"return\": {}, \"id\": \"first\"}\r\n{\"return\": {}}\r\n");
	for (int i = 0; i < 4; i++)
		assert_int_equal(o[i].calls, 1);
	assert_int_equal(f.downs, 0);
	assert_int_equal(sb_qmp_wants(f.q), SB_QMP_READ);
	fake_end(&f);
	outcome_free(o, 4);
}

/* A command times out by the caller's clock, and its late reply is
 * dropped while the next command still gets its own. */
static void test_qmp_async_timeout(void **state)
{
	struct outcome o[2] = {{0}};
	struct fake f;
	json_int_t a, b;

	fake_start(&f);
	handshake(&f);
	f.now = 1000;
	assert_int_equal(sb_qmp_send(f.q, f.now, "slow", NULL, 100, on_outcome, &o[0]), SB_OK);
	assert_int_equal(sb_qmp_send(f.q, f.now, "fine", NULL, 500, on_outcome, &o[1]), SB_OK);
	a = heard_cmd(&f, "slow");
	b = heard_cmd(&f, "fine");
	assert_true(sb_qmp_deadline(f.q) == 1100);
	sb_qmp_tick(f.q, 1099);
	assert_int_equal(o[0].calls, 0);
	sb_qmp_tick(f.q, 1100);
	assert_int_equal(o[0].calls, 1);
	assert_int_equal(o[0].rc, SB_ERR_TIMEOUT);
	assert_non_null(strstr(o[0].detail, "slow"));
	assert_non_null(strstr(o[0].detail, "no reply within 100 ms"));
	assert_true(sb_qmp_deadline(f.q) == 1500);
	answer(&f, a, "{\"late\": true}");
	assert_int_equal(o[0].calls, 1);
	assert_int_equal(o[1].calls, 0);
	answer(&f, b, "{\"mine\": true}");
	assert_int_equal(o[1].calls, 1);
	assert_int_equal(o[1].rc, 0);
	assert_true(json_is_true(json_object_get(o[1].ret, "mine")));
	assert_true(sb_qmp_deadline(f.q) == -1);
	sb_qmp_tick(f.q, 99999);
	assert_int_equal(o[0].calls + o[1].calls, 2);
	assert_int_equal(f.downs, 0);
	fake_end(&f);
	outcome_free(o, 2);
}

/* No greeting: the handshake's deadline ends the connection, failing the
 * command that waited for it; a first message that is not a greeting, and
 * capabilities refused, end it too. */
static void test_qmp_async_handshake(void **state)
{
	struct outcome o[3] = {{0}};
	struct fake f;

	fake_start(&f);
	assert_int_equal(sb_qmp_send(f.q, 0, "early", NULL, 5000, on_outcome, &o[0]), SB_OK);
	assert_true(sb_qmp_deadline(f.q) == 1000);
	sb_qmp_tick(f.q, 999);
	assert_int_equal(f.downs, 0);
	sb_qmp_tick(f.q, 1000);
	assert_int_equal(f.downs, 1);
	assert_int_equal(f.down_rc, SB_ERR_TIMEOUT);
	assert_non_null(strstr(f.down_detail, "no greeting within 1000 ms"));
	assert_int_equal(o[0].calls, 1);
	assert_int_equal(o[0].rc, SB_ERR_TIMEOUT);
	assert_int_equal(sb_qmp_wants(f.q), 0);
	assert_true(sb_qmp_deadline(f.q) == -1);
	assert_int_equal(sb_qmp_send(f.q, 0, "after", NULL, 5000, on_outcome, &o[1]), SB_ERR_IO);
	tu_errmsg_has(SB_ERR_IO, "no greeting");
	sb_qmp_tick(f.q, 5000);
	pump(&f);
	assert_int_equal(f.downs, 1);
	assert_int_equal(o[0].calls + o[1].calls, 1);
	fake_end(&f);

	fake_start(&f);
	assert_int_equal(sb_qmp_send(f.q, 0, "early", NULL, 5000, on_outcome, &o[2]), SB_OK);
	SAY(&f, "{\"return\": {}, \"id\": 1}\r\n");
	assert_int_equal(f.downs, 1);
	assert_int_equal(f.down_rc, SB_ERR_PROTO);
	assert_non_null(strstr(f.down_detail, "not a QMP greeting"));
	assert_int_equal(o[2].calls, 1);
	assert_int_equal(o[2].rc, SB_ERR_PROTO);
	assert_null(heard(&f)); /* nothing was sent, not even the capabilities */
	fake_end(&f);

	fake_start(&f);
	SAY(&f, GREETING);
	SAY(&f, "{\"error\": {\"class\": \"GenericError\", \"desc\": \"caps refused\"}, \"id\": 1}\n");
	assert_int_equal(f.downs, 1);
	assert_int_equal(f.down_rc, SB_ERR_PROTO);
	assert_non_null(strstr(f.down_detail, "caps refused"));
	fake_end(&f);
	outcome_free(o, 3);
}

/* A garbage line fails every command waiting, once, and the stream goes
 * on: later replies to those commands are dropped, new commands work. */
static void test_qmp_async_garbage(void **state)
{
	static const char *const garbage[] = {
	    "garbage{\r\n", "[1, 2]\n", "\x01\xff\xfe binary\n", "{\"a\": 1} trailing\n",
	    "\"just a string\"\n", "{\"unterminated\": \"\n",
	};
	struct outcome o[2 * 6 + 1];
	struct fake f;
	json_int_t id[2];

	memset(o, 0, sizeof o);
	fake_start(&f);
	handshake(&f);
	for (size_t g = 0; g < 6; g++) {
		struct outcome *p = &o[2 * g];
		assert_int_equal(sb_qmp_send(f.q, 0, "one", NULL, 5000, on_outcome, &p[0]), SB_OK);
		assert_int_equal(sb_qmp_send(f.q, 0, "two", NULL, 5000, on_outcome, &p[1]), SB_OK);
		id[0] = heard_cmd(&f, "one");
		id[1] = heard_cmd(&f, "two");
		SAY(&f, "\r\n \t\r\n"); /* blank lines are nothing */
		assert_int_equal(p[0].calls + p[1].calls, 0);
		SAY(&f, garbage[g]);
		for (int i = 0; i < 2; i++) {
			if (p[i].calls != 1 || p[i].rc != SB_ERR_PROTO)
				fail_msg("garbage %zu: command %d: %d calls, rc %d", g, i, p[i].calls,
					 p[i].rc);
		}
		assert_true(strstr(p[0].detail, "bad JSON") || strstr(p[0].detail, "not a JSON object"));
		answer(&f, id[0], "{}");
		answer(&f, id[1], "{}");
		assert_int_equal(p[0].calls + p[1].calls, 2);
		assert_int_equal(f.downs, 0);
	}
	assert_int_equal(sb_qmp_send(f.q, 0, "after", NULL, 5000, on_outcome, &o[12]), SB_OK);
	answer(&f, heard_cmd(&f, "after"), "7");
	assert_int_equal(o[12].calls, 1);
	assert_int_equal(json_integer_value(o[12].ret), 7);
	fake_end(&f);
	outcome_free(o, 13);
}

/* The peer closes in the middle of a reply: every command waiting fails
 * once (but "quit", which a closing connection answers), the owner hears
 * of it once, and the handle refuses new commands. */
static void test_qmp_async_peer_closes(void **state)
{
	struct outcome o[4] = {{0}};
	struct fake f;
	char half[128];
	json_int_t a;

	fake_start(&f);
	handshake(&f);
	assert_int_equal(sb_qmp_send(f.q, 0, "a", NULL, 5000, on_outcome, &o[0]), SB_OK);
	assert_int_equal(sb_qmp_send(f.q, 0, "b", NULL, -1, on_outcome, &o[1]), SB_OK);
	assert_int_equal(sb_qmp_send(f.q, 0, "quit", NULL, 5000, on_outcome, &o[2]), SB_OK);
	a = heard_cmd(&f, "a");
	snprintf(half, sizeof half, "{\"return\": {\"big\": \"and then noth");
	SAY(&f, half);
	assert_int_equal(o[0].calls, 0);
	close(f.srv);
	f.srv = -1;
	pump(&f);
	assert_int_equal(o[0].calls, 1);
	assert_int_equal(o[0].rc, SB_ERR_IO);
	assert_non_null(strstr(o[0].detail, "closed by QEMU"));
	assert_int_equal(o[1].calls, 1);
	assert_int_equal(o[1].rc, SB_ERR_IO);
	assert_int_equal(o[2].calls, 1);
	assert_int_equal(o[2].rc, 0); /* quit */
	assert_int_equal(f.downs, 1);
	assert_int_equal(f.down_rc, SB_ERR_IO);
	assert_int_equal(sb_qmp_wants(f.q), 0);
	assert_true(sb_qmp_deadline(f.q) == -1);
	assert_int_equal(sb_qmp_send(f.q, 0, "c", NULL, 5000, on_outcome, &o[3]), SB_ERR_IO);
	pump(&f);
	sb_qmp_tick(f.q, 100000);
	assert_int_equal(f.downs, 1);
	for (int i = 0; i < 3; i++)
		assert_int_equal(o[i].calls, 1);
	assert_int_equal(o[3].calls, 0);
	(void)a;
	sb_qmp_close(f.q);
	json_decref(f.events);
	outcome_free(o, 4);
}

/* 1 MiB without a newline: refused, the connection shut (the peer reads
 * EOF), the command waiting failed once; the client never holds much more
 * than the limit, however much is sent. */
static void test_qmp_async_flood(void **state)
{
	size_t len = SB_QMP_LINE_MAX, off = 0;
	char *junk = malloc(len), buf[64];
	struct outcome o = {0};
	struct fake f;
	ssize_t n;

	assert_non_null(junk);
	memset(junk, 'x', len);
	fake_start(&f);
	handshake(&f);
	assert_int_equal(sb_qmp_send(f.q, 0, "x", NULL, -1, on_outcome, &o), SB_OK);
	heard_cmd(&f, "x");
	while (off < len && f.downs == 0) {
		n = send(f.srv, junk + off, len - off, MSG_NOSIGNAL);
		if (n > 0)
			off += (size_t)n;
		else
			assert_true(n < 0 && errno == EAGAIN);
		pump(&f);
	}
	assert_int_equal(off, len);
	assert_int_equal(f.downs, 1);
	assert_int_equal(f.down_rc, SB_ERR_PROTO);
	assert_non_null(strstr(f.down_detail, "longer than 1024 KiB"));
	assert_int_equal(o.calls, 1);
	assert_int_equal(o.rc, SB_ERR_PROTO);
	assert_int_equal(sb_qmp_wants(f.q), 0);
	/* the client shut the socket: the peer reads EOF and cannot write */
	while ((n = read(f.srv, buf, sizeof buf)) > 0)
		;
	assert_int_equal(n, 0);
	assert_true(send(f.srv, "more", 4, MSG_NOSIGNAL) < 0);
	fake_end(&f);
	free(junk);
}

/* A peer that does not read: commands pile up to SB_QMP_OUT_MAX, then
 * are refused; closing the handle fails the waiting ones once each. */
static void test_qmp_async_not_reading(void **state)
{
	enum { N = 64 };
	struct outcome *o = calloc(N, sizeof *o);
	char *big = malloc(64 << 10);
	json_t *args;
	struct fake f;
	int sent = 0, rc = 0;

	assert_true(o && big);
	memset(big, 'y', (64 << 10) - 1);
	big[(64 << 10) - 1] = 0;
	fake_start(&f);
	handshake(&f);
	args = json_pack("{s:s}", "blob", big);
	while (sent < N && !(rc = sb_qmp_send(f.q, 0, "fat", args, -1, on_outcome, &o[sent]))) {
		sent++;
		pump(&f);
	}
	json_decref(args);
	assert_int_equal(rc, SB_ERR_FULL);
	tu_errmsg_has(SB_ERR_FULL, "does not read");
	assert_true(sent > (int)(SB_QMP_OUT_MAX / (64 << 10)) && sent < N);
	assert_int_equal(sb_qmp_wants(f.q), SB_QMP_READ | SB_QMP_WRITE);
	sb_qmp_close(f.q);
	f.q = NULL;
	for (int i = 0; i < sent; i++) {
		assert_int_equal(o[i].calls, 1);
		assert_int_equal(o[i].rc, SB_ERR_IO);
		assert_non_null(strstr(o[i].detail, "closed by the client"));
	}
	assert_int_equal(o[sent].calls, 0);
	assert_int_equal(f.downs, 0); /* a close is not a connection ending */
	close(f.srv);
	json_decref(f.events);
	outcome_free(o, N);
	free(o);
	free(big);
}

/* A callback that closes the handle: the replies read with its own are
 * not delivered; the command still waiting fails once, inside the close. */
static void test_qmp_async_close_in_callback(void **state)
{
	struct outcome o[3] = {{0}};
	struct fake f;
	json_int_t id[3];
	char lines[256];

	fake_start(&f);
	handshake(&f);
	o[0].q = f.q;
	o[0].close_in_cb = 1;
	assert_int_equal(sb_qmp_send(f.q, 0, "closer", NULL, 5000, on_outcome, &o[0]), SB_OK);
	assert_int_equal(sb_qmp_send(f.q, 0, "next", NULL, 5000, on_outcome, &o[1]), SB_OK);
	assert_int_equal(sb_qmp_send(f.q, 0, "last", NULL, 5000, on_outcome, &o[2]), SB_OK);
	id[0] = heard_cmd(&f, "closer");
	id[1] = heard_cmd(&f, "next");
	id[2] = heard_cmd(&f, "last");
	snprintf(lines, sizeof lines,
		 "{\"return\": {}, \"id\": %lld}\n{\"return\": {}, \"id\": %lld}\n"
		 "{\"event\": \"STOP\"}\n",
		 (long long)id[0], (long long)id[1]);
	assert_true(send(f.srv, lines, strlen(lines), 0) == (ssize_t)strlen(lines));
	sb_qmp_io(f.q, SB_QMP_READ); /* frees the handle on its way out */
	f.q = NULL;
	assert_int_equal(o[0].calls, 1);
	assert_int_equal(o[0].rc, 0);
	for (int i = 1; i < 3; i++) {
		assert_int_equal(o[i].calls, 1);
		assert_int_equal(o[i].rc, SB_ERR_IO);
	}
	assert_int_equal(json_array_size(f.events), 0);
	assert_int_equal(f.downs, 0);
	close(f.srv);
	json_decref(f.events);
	(void)id[2];
	outcome_free(o, 3);
}

static int64_t mono_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Drives q with poll, as a loop would, until each of the n outcomes came
 * (or 10 s passed). */
static void async_until(sb_qmp *q, struct outcome *o, size_t n)
{
	int64_t t0 = mono_now();

	for (;;) {
		struct pollfd pfd = {.fd = sb_qmp_fd(q)};
		unsigned want = sb_qmp_wants(q), ready = 0;
		int64_t d = sb_qmp_deadline(q), now = mono_now();
		size_t done = 0;

		for (size_t i = 0; i < n; i++)
			done += o[i].calls;
		if (done == n)
			return;
		if (now - t0 > 10000 || !want)
			fail_msg("%zu of %zu commands answered", done, n);
		pfd.events = (want & SB_QMP_READ ? POLLIN : 0) | (want & SB_QMP_WRITE ? POLLOUT : 0);
		if (poll(&pfd, 1, d < 0 ? 100 : d <= now ? 0 : (int)(d - now)) > 0)
			ready = (pfd.revents & ~POLLOUT ? SB_QMP_READ : 0) |
				(pfd.revents & POLLOUT ? SB_QMP_WRITE : 0);
		sb_qmp_io(q, ready);
		sb_qmp_tick(q, mono_now());
	}
}

/* On QEMU's QMP connection fd: the asynchronous client, with three
 * commands pipelined before the greeting is read (one QEMU refuses), each
 * answered as its own; then the handle serves the blocking calls of the
 * rest of the test. Events go to events (kept as names). */
static sb_qmp *real_qemu_async(int fd, json_t *events)
{
	static struct fake sink; /* ops.event and ops.down write here */
	struct outcome o[3] = {{0}};
	sb_qmp *q;

	memset(&sink, 0, sizeof sink);
	sink.events = events;
	assert_int_equal(sb_qmp_open_async(fd, mono_now(), 5000, &fake_ops, &sink, &q), SB_OK);
	assert_int_equal(sb_qmp_send(q, mono_now(), "query-status", NULL, 5000, on_outcome, &o[0]), 0);
	assert_int_equal(sb_qmp_send(q, mono_now(), "no-such-command", NULL, 5000, on_outcome, &o[1]),
			 0);
	assert_int_equal(sb_qmp_send(q, mono_now(), "query-name", NULL, 5000, on_outcome, &o[2]), 0);
	async_until(q, o, 3);
	assert_int_equal(o[0].rc, 0);
	assert_string_equal(json_string_value(json_object_get(o[0].ret, "status")), "running");
	assert_int_equal(o[1].rc, SB_ERR_PROTO);
	assert_non_null(strstr(o[1].detail, "has not been found"));
	assert_int_equal(o[2].rc, 0);
	assert_true(json_is_object(o[2].ret));
	assert_int_equal(sink.downs, 0);
	outcome_free(o, 3);
	return q;
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
	/* The probe left nothing behind but the cache (no probe, no cache,
	 * without /dev/kvm). */
	snprintf(cache, sizeof cache, "%s/cache/accel", tmp);
	c = slurp(cache);
	if (access("/dev/kvm", R_OK | W_OK) == 0) {
		assert_non_null(strstr(c, sb_accel_name(a)));
		assert_non_null(strstr(c, "boot_id"));
	} else {
		assert_string_equal(c, "");
	}
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
	    cmocka_unit_test(test_qmp_async_pipelined),
	    cmocka_unit_test(test_qmp_async_timeout),
	    cmocka_unit_test(test_qmp_async_handshake),
	    cmocka_unit_test(test_qmp_async_garbage),
	    cmocka_unit_test(test_qmp_async_peer_closes),
	    cmocka_unit_test(test_qmp_async_flood),
	    cmocka_unit_test(test_qmp_async_not_reading),
	    cmocka_unit_test(test_qmp_async_close_in_callback),
	    cmocka_unit_test_teardown(test_accel_auto, teardown),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
