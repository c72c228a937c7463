/* test_qemu.c - QEMU command line, spawning and reaping, finding QEMUs by
 * their arguments, unix sockets, qemu-img layers, accelerator names. No VM is booted here (test_qmp
 * does that); spawning is checked with a fake "QEMU" shell script. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#include "engine/proc.h"
#include "engine/sock.h"
#include "tests/unit/testutil.h"
#include "vmm/accel.h"
#include "vmm/disk.h"
#include "vmm/qemu.h"

/* Teardown kills a fake QEMU still running when a test fails and removes
 * the test's directory. */
static pid_t live_pid;
static char *tmp;

static int teardown(void **state)
{
	if (live_pid > 1) {
		sb_proc_kill(live_pid, SIGKILL);
		sb_proc_wait(live_pid, 5000, NULL);
	}
	live_pid = 0;
	tu_rmrf(tmp);
	tmp = NULL;
	return 0;
}

static size_t argc_of(char **argv)
{
	size_t n = 0;

	while (argv[n])
		n++;
	return n;
}

/* Returns the value after option opt (the first one at or after *from),
 * or NULL; *from moves past it. */
static const char *opt_after(char **argv, const char *opt, size_t *from)
{
	for (size_t i = *from; argv[i]; i++)
		if (!strcmp(argv[i], opt) && argv[i + 1]) {
			*from = i + 2;
			return argv[i + 1];
		}
	return NULL;
}

static const char *opt_val(char **argv, const char *opt)
{
	size_t from = 0;

	return opt_after(argv, opt, &from);
}

static int has_arg(char **argv, const char *a)
{
	for (size_t i = 0; argv[i]; i++)
		if (!strcmp(argv[i], a))
			return 1;
	return 0;
}

static void test_argv_tcg_full(void **state)
{
	struct sb_vm_config c = {
	    .qemu = "/opt/qemu/bin/qemu-system-x86_64",
	    .kernel = "/k/vmlinux",
	    .initrd = "/k/initrd.img",
	    .append_extra = "sanbox.run=abc",
	    .disk = "/runs/r1/root.qcow2",
	    .chan_socket = "/runs/r1/chan.sock",
	    .qmp_socket = "/runs/r1/qmp.sock",
	    .console_log = "/runs/r1/console.log",
	    .incoming = "/snap/mem.bin",
	    .cpus = 2,
	    .memory_mib = 512,
	    .accel = SB_ACCEL_TCG,
	    .tsc_khz = 2445404,
	};
	const char *want[] = {
	    "/opt/qemu/bin/qemu-system-x86_64",
	    "-M",
	    "microvm,x-option-roms=off,rtc=on,memory-backend=microvm.ram",
	    "-accel",
	    "tcg,tb-size=64",
	    "-cpu",
	    "max",
	    "-m",
	    "512M",
	    "-object",
	    "memory-backend-ram,id=microvm.ram,size=512M",
	    "-smp",
	    "2",
	    "-nodefaults",
	    "-no-user-config",
	    "-nographic",
	    "-no-reboot",
	    "-sandbox",
	    "on,obsolete=deny,elevateprivileges=deny,resourcecontrol=deny",
	    "-kernel",
	    "/k/vmlinux",
	    "-initrd",
	    "/k/initrd.img",
	    "-append",
	    "console=ttyS0 quiet panic=-1 tsc_early_khz=2445404 sanbox.run=abc",
	    "-chardev",
	    "file,id=con0,path=/runs/r1/console.log,append=on",
	    "-serial",
	    "chardev:con0",
	    "-blockdev",
	    "driver=file,filename=/runs/r1/root.qcow2,node-name=file0",
	    "-blockdev",
	    "driver=qcow2,file=file0,node-name=root0",
	    "-device",
	    "virtio-blk-device,drive=root0",
	    "-device",
	    "virtio-serial-device",
	    "-chardev",
	    "socket,id=chan0,path=/runs/r1/chan.sock,reconnect=1",
	    "-device",
	    "virtserialport,chardev=chan0,name=sanbox.0",
	    "-chardev",
	    "socket,id=qmp0,path=/runs/r1/qmp.sock,reconnect=1",
	    "-mon",
	    "chardev=qmp0,mode=control",
	    "-S",
	    "-incoming",
	    "exec:cat '/snap/mem.bin'",
	    NULL,
	};
	char **argv = NULL;
	size_t i;

	assert_int_equal(sb_vm_argv(&c, &argv), 0);
	for (i = 0; want[i]; i++) {
		assert_non_null(argv[i]);
		assert_string_equal(argv[i], want[i]);
	}
	assert_null(argv[i]);
	sb_argv_free(argv);
}

static void test_argv_kvm_minimal(void **state)
{
	struct sb_vm_config c = {
	    .kernel = "/k/vmlinux",
	    .console_log = "console.log",
	    .cpus = 1,
	    .memory_mib = 256,
	    .accel = SB_ACCEL_KVM,
	};
	char **argv = NULL;

	assert_int_equal(sb_vm_argv(&c, &argv), 0);
	assert_string_equal(argv[0], "qemu-system-x86_64");
	assert_string_equal(opt_val(argv, "-accel"), "kvm");
	assert_string_equal(opt_val(argv, "-cpu"), "host,-arch-capabilities");
	assert_string_equal(opt_val(argv, "-append"), "console=ttyS0 quiet panic=-1");
	assert_string_equal(opt_val(argv, "-m"), "256M");
	assert_string_equal(opt_val(argv, "-smp"), "1");
	assert_string_equal(opt_val(argv, "-kernel"), "/k/vmlinux");
	assert_string_equal(opt_val(argv, "-serial"), "chardev:con0");
	assert_null(opt_val(argv, "-initrd"));
	assert_null(opt_val(argv, "-blockdev"));
	assert_null(opt_val(argv, "-mon"));
	assert_null(opt_val(argv, "-incoming"));
	assert_false(has_arg(argv, "-S"));
	assert_false(has_arg(argv, "tcg"));
	/* Only the console chardev. */
	size_t from = 0;
	assert_non_null(opt_after(argv, "-chardev", &from));
	assert_null(opt_after(argv, "-chardev", &from));
	assert_true(argc_of(argv) > 20);
	sb_argv_free(argv);
	/* SANBOX_QEMU names the binary of a config without one. */
	setenv("SANBOX_QEMU", "/opt/q/qemu", 1);
	assert_string_equal(sb_vm_qemu(), "/opt/q/qemu");
	assert_int_equal(sb_vm_argv(&c, &argv), 0);
	assert_string_equal(argv[0], "/opt/q/qemu");
	sb_argv_free(argv);
	setenv("SANBOX_QEMU", "", 1);
	assert_string_equal(sb_vm_qemu(), SB_VM_QEMU_DEFAULT);
	unsetenv("SANBOX_QEMU");
}

/* Commas in values are doubled for QEMU; the incoming path is quoted for
 * the shell of "exec:". */
static void test_argv_escaping(void **state)
{
	struct sb_vm_config c = {
	    .kernel = "/k/vm,linux",
	    .console_log = "/r/a,b/console.log",
	    .disk = "/r/a,b/root.qcow2",
	    .qmp_socket = "/r/a,b/qmp.sock",
	    .incoming = "/r/it's here; rm -rf x.bin",
	    .cpus = 1,
	    .memory_mib = 128,
	    .accel = SB_ACCEL_KVM,
	};
	char **argv = NULL;
	size_t from = 0;

	assert_int_equal(sb_vm_argv(&c, &argv), 0);
	assert_string_equal(opt_val(argv, "-kernel"), "/k/vm,linux");
	assert_string_equal(opt_after(argv, "-chardev", &from),
			    "file,id=con0,path=/r/a,,b/console.log,append=on");
	assert_string_equal(opt_after(argv, "-chardev", &from),
			    "socket,id=qmp0,path=/r/a,,b/qmp.sock,reconnect=1");
	assert_string_equal(opt_val(argv, "-blockdev"),
			    "driver=file,filename=/r/a,,b/root.qcow2,node-name=file0");
	assert_string_equal(opt_val(argv, "-incoming"),
			    "exec:cat '/r/it'\\''s here; rm -rf x.bin'");
	sb_argv_free(argv);
}

/* The RAM in a file: shared (a warm image being built, its guest writes
 * the file) or private (a warm start: copy on write), the backend's id the
 * one plain RAM has, so that streams of both load into either; a warm
 * start waits for its state (-incoming defer). */
static void test_argv_ram_file(void **state)
{
	struct sb_vm_config c = {
	    .kernel = "/k/vmlinux",
	    .console_log = "/r/console.log",
	    .ram_file = "/w/a,b/k.ram",
	    .ram_shared = 1,
	    .cpus = 1,
	    .memory_mib = 128,
	    .accel = SB_ACCEL_KVM,
	};
	char **argv = NULL;

	assert_int_equal(sb_vm_argv(&c, &argv), 0);
	assert_string_equal(
	    opt_val(argv, "-M"),
	    "microvm,x-option-roms=off,rtc=on,memory-backend=" SB_VM_RAM_ID);
	assert_string_equal(opt_val(argv, "-m"), "128M");
	assert_string_equal(opt_val(argv, "-object"),
			    "memory-backend-file,id=microvm.ram,size=128M,"
			    "mem-path=/w/a,,b/k.ram,share=on");
	assert_null(opt_val(argv, "-incoming"));
	assert_false(has_arg(argv, "-S"));
	sb_argv_free(argv);

	c.ram_shared = 0;
	c.incoming_defer = 1;
	assert_int_equal(sb_vm_argv(&c, &argv), 0);
	assert_string_equal(opt_val(argv, "-object"),
			    "memory-backend-file,id=microvm.ram,size=128M,"
			    "mem-path=/w/a,,b/k.ram,share=off");
	assert_true(has_arg(argv, "-S"));
	assert_string_equal(opt_val(argv, "-incoming"), "defer");
	sb_argv_free(argv);

	/* one incoming or the other */
	c.incoming = "/w/k.mem";
	argv = (char **)1;
	assert_int_equal(sb_vm_argv(&c, &argv), SB_ERR_INVAL);
	assert_null(argv);
	tu_errmsg_has(SB_ERR_INVAL, "deferred");
	c.incoming = NULL;
	c.ram_file = "/w/k\n.ram";
	assert_int_equal(sb_vm_argv(&c, &argv), SB_ERR_INVAL);
	tu_errmsg_has(SB_ERR_INVAL, "newline");
}

/* Under TCG with tsc_khz 0 the host's TSC rate is measured and passed. */
static void test_argv_tcg_host_tsc(void **state)
{
	struct sb_vm_config c = {
	    .kernel = "/k/vmlinux",
	    .console_log = "/r/console.log",
	    .cpus = 1,
	    .memory_mib = 256,
	    .accel = SB_ACCEL_TCG,
	};
	char **argv = NULL, want[128];
	unsigned khz = 0, again = 0;

	assert_int_equal(sb_host_tsc_khz(&khz), 0);
	assert_int_equal(sb_host_tsc_khz(&again), 0);
	assert_int_equal(khz, again); /* measured once */
	assert_in_range(khz, 500000, 8000000);
	/* It agrees with the host kernel's figure in /proc/cpuinfo within 1%
	 * when that is the TSC's (constant_tsc). */
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[4096];
	double mhz = 0;
	int constant = 0;
	while (f && fgets(line, sizeof line, f)) {
		if (!mhz && sscanf(line, "cpu MHz : %lf", &mhz) == 1)
			continue;
		if (!strncmp(line, "flags", 5) && strstr(line, " constant_tsc") &&
		    strstr(line, " tsc_known_freq"))
			constant = 1;
	}
	if (f)
		fclose(f);
	if (constant && mhz > 0)
		assert_true(khz > mhz * 990 && khz < mhz * 1010);

	assert_int_equal(sb_vm_argv(&c, &argv), 0);
	snprintf(want, sizeof want, "console=ttyS0 quiet panic=-1 tsc_early_khz=%u", khz);
	assert_string_equal(opt_val(argv, "-append"), want);
	assert_string_equal(opt_val(argv, "-accel"), "tcg,tb-size=64");
	assert_string_equal(opt_val(argv, "-cpu"), "max");
	sb_argv_free(argv);
}

static void expect_bad(struct sb_vm_config c, const char *detail)
{
	char **argv = (char **)1;

	assert_int_equal(sb_vm_argv(&c, &argv), SB_ERR_INVAL);
	assert_null(argv);
	tu_errmsg_has(SB_ERR_INVAL, detail);
	assert_int_equal(sb_vm_spawn(&c, &(pid_t){0}), SB_ERR_INVAL);
}

static void test_argv_bad(void **state)
{
	struct sb_vm_config ok =
				{
				    .kernel = "/k/vmlinux",
				    .console_log = "/r/console.log",
				    .cpus = 1,
				    .memory_mib = 256,
				    .accel = SB_ACCEL_KVM,
				},
			    c;
	char **argv = NULL;

	assert_int_equal(sb_vm_argv(&ok, &argv), 0);
	sb_argv_free(argv);
	c = ok, c.kernel = NULL, expect_bad(c, "no kernel");
	c = ok, c.kernel = "", expect_bad(c, "no kernel");
	c = ok, c.console_log = NULL, expect_bad(c, "console");
	c = ok, c.accel = SB_ACCEL_AUTO, expect_bad(c, "not resolved");
	c = ok, c.accel = (sb_accel)7, expect_bad(c, "not resolved");
	c = ok, c.cpus = 0, expect_bad(c, "cpus");
	c = ok, c.cpus = 65, expect_bad(c, "cpus");
	c = ok, c.memory_mib = 0, expect_bad(c, "memory");
	c = ok, c.memory_mib = 32, expect_bad(c, "memory");
	c = ok, c.memory_mib = 2u << 20, expect_bad(c, "memory");
	c = ok, c.append_extra = "a\nb", expect_bad(c, "newline");
	c = ok, c.disk = "/r/x\r.qcow2", expect_bad(c, "newline");
}

/* A fake QEMU that reports how it was started into qemu.log. */
static char *write_script(const char *dir, const char *name, const char *body)
{
	char *path;
	FILE *f;

	assert_true(asprintf(&path, "%s/%s", dir, name) > 0);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "#!/bin/sh\n%s", body);
	fclose(f);
	assert_int_equal(chmod(path, 0755), 0);
	return path;
}

static char *read_all(const char *path)
{
	char *buf = calloc(1, 65536);
	FILE *f = fopen(path, "r");

	assert_non_null(buf);
	if (f) {
		size_t n = fread(buf, 1, 65535, f);
		buf[n] = 0;
		fclose(f);
	}
	return buf;
}

static void touch(const char *dir, const char *name, char *out, size_t len)
{
	int fd;

	snprintf(out, len, "%s/%s", dir, name);
	fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	close(fd);
}

static void test_spawn_fake(void **state)
{
	char *dir = tmp = tu_tmpdir(), *fake, *out, kernel[PATH_MAX], con[PATH_MAX],
	     qlog[PATH_MAX], want[64];
	struct sb_vm_config c = {
	    .kernel = kernel,
	    .console_log = con,
	    .cpus = 1,
	    .memory_mib = 256,
	    .accel = SB_ACCEL_KVM,
	};
	sigset_t blk, old;
	int leak, st = 0;
	pid_t pid = 0;

	fake = write_script(dir, "fake-qemu",
			    "echo \"argc=$# kernel=$(echo \"$@\" | grep -o 'vmlinux')\"\n"
			    "echo \"pgrp=$(cut -d' ' -f5 /proc/$$/stat) sid=$(cut -d' ' "
			    "-f6 /proc/$$/stat) pid=$$\"\n"
			    "echo \"stdin=$(readlink /proc/$$/fd/0)\"\n"
			    "sleep 0.3\n" /* the nice value is set after the exec */
			    "echo \"nice=$(cut -d' ' -f19 /proc/$$/stat)\"\n"
			    "while read -r l; do case $l in SigBlk*) echo \"$l\";; esac; "
			    "done </proc/self/status\n"
			    "printf 'fds: '; ls /proc/$$/fd | tr '\\n' ' '; echo\n"
			    "exit 3\n");
	touch(dir, "vmlinux", kernel, sizeof kernel);
	snprintf(con, sizeof con, "%s/console.log", dir);
	snprintf(qlog, sizeof qlog, "%s/qemu.log", dir);
	c.qemu = fake;

	/* An inheritable descriptor and a blocked signal in the parent must
	 * not reach QEMU; qemu.log is appended to, not truncated. */
	leak = open("/dev/null", O_RDONLY);
	assert_true(leak > 2);
	sigemptyset(&blk);
	sigaddset(&blk, SIGTERM);
	sigprocmask(SIG_BLOCK, &blk, &old);
	FILE *f = fopen(qlog, "w");
	fputs("earlier line\n", f);
	fclose(f);

	assert_int_equal(sb_vm_spawn(&c, &pid), 0);
	live_pid = pid;
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(leak);
	assert_true(pid > 1);
	assert_int_equal(sb_proc_wait(pid, 5000, &st), 0);
	live_pid = 0;
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 3);

	out = read_all(qlog);
	assert_non_null(strstr(out, "earlier line\n"));
	assert_non_null(strstr(out, "kernel=vmlinux"));
	snprintf(want, sizeof want, "pgrp=%d sid=%d pid=%d", (int)pid, (int)pid,
		 (int)pid);
	assert_non_null(strstr(out, want));
	assert_non_null(strstr(out, "stdin=/dev/null"));
	/* QEMU yields to the daemon */
	snprintf(want, sizeof want, "nice=%d\n",
		 getpriority(PRIO_PROCESS, 0) + SB_VM_NICE);
	if (!strstr(out, want))
		fail_msg("QEMU not at the daemon's nice + %d: %s", SB_VM_NICE, out);
	if (!strstr(out, "SigBlk:\t0000000000000000"))
		fail_msg("QEMU inherited blocked signals: %s", out);
	/* dash keeps fd 10 open on the script it reads; nothing else. */
	char *fds = strstr(out, "fds: ");
	assert_non_null(fds);
	fds[strcspn(fds, "\n")] = 0;
	if (strcmp(fds, "fds: 0 1 2 ") && strcmp(fds, "fds: 0 1 10 2 "))
		fail_msg("unexpected descriptors in QEMU: %s", fds);
	free(out);
	free(fake);
}

static void test_spawn_errors(void **state)
{
	char *dir = tmp = tu_tmpdir(), kernel[PATH_MAX], con[PATH_MAX];
	struct sb_vm_config c = {
	    .qemu = "qemu-system-nonexistent-arch",
	    .kernel = kernel,
	    .console_log = con,
	    .cpus = 1,
	    .memory_mib = 256,
	    .accel = SB_ACCEL_TCG,
	    .tsc_khz = 1000000,
	};
	pid_t pid = 0;

	touch(dir, "vmlinux", kernel, sizeof kernel);
	snprintf(con, sizeof con, "%s/console.log", dir);
	assert_int_equal(sb_vm_spawn(&c, &pid), SB_ERR_UNAVAIL);
	tu_errmsg_has(SB_ERR_UNAVAIL, "qemu-system-nonexistent-arch", "not found");
	c.qemu = "/nonexistent/qemu";
	assert_int_equal(sb_vm_spawn(&c, &pid), SB_ERR_UNAVAIL);
	tu_errmsg_has(SB_ERR_UNAVAIL, "/nonexistent/qemu");
	/* Executable but not a program: exec fails, nothing is left running. */
	char garbage[PATH_MAX];
	touch(dir, "garbage-qemu", garbage, sizeof garbage);
	assert_int_equal(truncate(garbage, 64), 0);
	assert_int_equal(chmod(garbage, 0755), 0);
	c.qemu = garbage;
	assert_int_equal(sb_vm_spawn(&c, &pid), SB_ERR_UNAVAIL);
	tu_errmsg_has(SB_ERR_UNAVAIL, "cannot execute", "garbage-qemu");
	assert_int_equal(pid, 0);

	c.qemu = "/bin/true";
	c.initrd = "/nonexistent/initrd";
	assert_int_equal(sb_vm_spawn(&c, &pid), SB_ERR_NOTFOUND);
	tu_errmsg_has(SB_ERR_NOTFOUND, "initrd", "/nonexistent/initrd");
	c.initrd = NULL;
	c.disk = "/nonexistent/root.qcow2";
	assert_int_equal(sb_vm_spawn(&c, &pid), SB_ERR_NOTFOUND);
	tu_errmsg_has(SB_ERR_NOTFOUND, "disk");
	c.disk = NULL;
	/* A private RAM file must be there (a shared one QEMU makes). */
	c.ram_file = "/nonexistent/k.ram";
	assert_int_equal(sb_vm_spawn(&c, &pid), SB_ERR_NOTFOUND);
	tu_errmsg_has(SB_ERR_NOTFOUND, "memory file", "/nonexistent/k.ram");
	c.ram_file = NULL;
	/* Console in a directory that does not exist: qemu.log cannot open. */
	c.console_log = "/nonexistent/dir/console.log";
	assert_int_equal(sb_vm_spawn(&c, &pid), SB_ERR_IO);
	tu_errmsg_has(SB_ERR_IO, "/nonexistent/dir/qemu.log");
	assert_int_equal(pid, 0);
}

static int proc_state(pid_t pid)
{
	char path[64], buf[512], *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')');
	return p && p[1] ? p[2] : 0;
}

/* Waiting times out on a live VM; killing the group ends QEMU and what it
 * forked; a second wait finds nothing. */
static void test_wait_kill(void **state)
{
	char *dir = tmp = tu_tmpdir(), *fake, *out, kernel[PATH_MAX], con[PATH_MAX],
	     qlog[PATH_MAX];
	struct sb_vm_config c = {
	    .kernel = kernel,
	    .console_log = con,
	    .cpus = 1,
	    .memory_mib = 256,
	    .accel = SB_ACCEL_KVM,
	};
	struct timespec t0, t1;
	int st = 0, kid = 0, i;
	pid_t pid = 0;

	fake = write_script(dir, "fake-qemu", "sleep 30 & echo kid=$!\nexec sleep 30\n");
	touch(dir, "vmlinux", kernel, sizeof kernel);
	snprintf(con, sizeof con, "%s/console.log", dir);
	snprintf(qlog, sizeof qlog, "%s/qemu.log", dir);
	c.qemu = fake;
	assert_int_equal(sb_vm_spawn(&c, &pid), 0);
	live_pid = pid;
	for (i = 0; i < 200 && !kid; i++) {
		usleep(10000);
		out = read_all(qlog);
		if (strstr(out, "kid="))
			kid = atoi(strstr(out, "kid=") + 4);
		free(out);
	}
	assert_true(kid > 1);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(sb_proc_wait(pid, 150, &st), SB_ERR_TIMEOUT);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_true(
	    (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 >= 140);
	assert_int_equal(sb_proc_kill(pid, SIGKILL), 0);
	assert_int_equal(sb_proc_wait(pid, 5000, &st), 0);
	live_pid = 0;
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGKILL);
	/* The background child got the signal too (gone, or a zombie of
	 * whoever adopted it). */
	for (i = 0; i < 100 && proc_state(kid) && proc_state(kid) != 'Z'; i++)
		usleep(10000);
	assert_true(proc_state(kid) == 0 || proc_state(kid) == 'Z');
	/* Already reaped: waiting again is not an error, status unknown. */
	assert_int_equal(sb_proc_wait(pid, 100, &st), 0);
	assert_int_equal(st, -1);
	assert_int_equal(sb_proc_kill(pid, SIGKILL), 0);
	assert_int_equal(sb_proc_kill(1, SIGKILL), SB_ERR_INVAL);
	assert_int_equal(sb_proc_wait(0, 10, NULL), SB_ERR_INVAL);
	free(fake);
}

static void test_unix_sockets(void **state)
{
	char *dir = tmp = tu_tmpdir(), path[PATH_MAX], file[PATH_MAX], longp[200];
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct stat st;
	struct timespec t0, t1;
	int lfd = -1, lfd2 = -1, cfd, afd = -1;

	snprintf(path, sizeof path, "%s/qmp.sock", dir);
	assert_int_equal(sb_unix_listen(path, &lfd), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_true(fcntl(lfd, F_GETFD) & FD_CLOEXEC);

	/* Nobody connects: a timeout, on time. */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(sb_unix_accept(lfd, 100, &afd), SB_ERR_TIMEOUT);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_true(
	    (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 >= 90);

	/* A client connects and data flows. */
	strcpy(sa.sun_path, path);
	cfd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_int_equal(connect(cfd, (struct sockaddr *)&sa, sizeof sa), 0);
	assert_int_equal(sb_unix_accept(lfd, 1000, &afd), 0);
	assert_int_equal(write(cfd, "hi", 2), 2);
	char b[2];
	assert_int_equal(read(afd, b, 2), 2);
	assert_memory_equal(b, "hi", 2);
	assert_true(fcntl(afd, F_GETFD) & FD_CLOEXEC);
	close(cfd);
	close(afd);

	/* Someone listens there: refused. */
	assert_int_equal(sb_unix_listen(path, &lfd2), SB_ERR_EXISTS);
	tu_errmsg_has(SB_ERR_EXISTS, "in use");
	/* The listener died (daemon restart): the stale socket is replaced. */
	close(lfd);
	assert_int_equal(sb_unix_listen(path, &lfd2), 0);
	close(lfd2);

	/* Not a socket: left alone. */
	touch(dir, "plain", file, sizeof file);
	assert_int_equal(sb_unix_listen(file, &lfd2), SB_ERR_EXISTS);
	assert_int_equal(stat(file, &st), 0);
	assert_true(S_ISREG(st.st_mode));

	memset(longp, 'a', sizeof longp - 1);
	longp[0] = '/';
	longp[sizeof longp - 1] = 0;
	assert_int_equal(sb_unix_listen(longp, &lfd2), SB_ERR_INVAL);
	tu_errmsg_has(SB_ERR_INVAL, "longer");
}

static void test_proc_run(void **state)
{
	char *echo[] = {"sh", "-c", "echo out; echo err >&2; exit 4", NULL};
	char *slow[] = {"sleep", "5", NULL};
	char *none[] = {"no-such-program-sanbox", NULL};
	char out[64], tiny[4];
	struct timespec t0, t1;
	int st = 0;

	assert_int_equal(sb_proc_run(echo, 5000, out, sizeof out, &st), 0);
	assert_string_equal(out, "out\nerr\n");
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 4);
	/* Output longer than the buffer is cut, the program still ends. */
	assert_int_equal(sb_proc_run(echo, 5000, tiny, sizeof tiny, &st), 0);
	assert_string_equal(tiny, "out");
	assert_int_equal(WEXITSTATUS(st), 4);
	assert_int_equal(sb_proc_run(none, 5000, out, sizeof out, &st), SB_ERR_UNAVAIL);
	tu_errmsg_has(SB_ERR_UNAVAIL, "no-such-program-sanbox");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(sb_proc_run(slow, 200, NULL, 0, &st), SB_ERR_TIMEOUT);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_true(t1.tv_sec - t0.tv_sec < 3);
}

/* What a process that is killed mid-way leaves: fn runs in a child
 * process with $SANBOX_QEMU a fake QEMU that writes its pid to DIR/pid and
 * sleeps; once that pid is there the child is killed with SIGKILL, and the
 * fake must be gone soon after (or a zombie of whoever adopted it). */
static void killed_midway(void (*fn)(const char *dir))
{
	char *dir = tmp = tu_tmpdir(), *fake, *body, pidf[PATH_MAX], *got;
	pid_t child, qpid = 0;
	int i;

	snprintf(pidf, sizeof pidf, "%s/pid", dir);
	assert_true(asprintf(&body, "echo $$ > %s.tmp; mv %s.tmp %s\nexec sleep 30\n",
			     pidf, pidf, pidf) > 0);
	fake = write_script(dir, "fake-qemu", body);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		setenv("SANBOX_QEMU", fake, 1);
		fn(dir);
		_exit(0);
	}
	for (i = 0; i < 500 && qpid <= 1; i++) {
		usleep(10000);
		got = read_all(pidf);
		qpid = atoi(got);
		free(got);
	}
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	assert_true(qpid > 1);
	for (i = 0; i < 200 && proc_state(qpid) && proc_state(qpid) != 'Z'; i++)
		usleep(10000);
	if (proc_state(qpid) && proc_state(qpid) != 'Z') {
		kill(qpid, SIGKILL);
		fail_msg("the fake QEMU (pid %d) outlived the process that started it",
			 (int)qpid);
	}
	free(body);
	free(fake);
}

static void probe_in(const char *dir)
{
	char kernel[PATH_MAX], initrd[PATH_MAX], why[256];
	int booted;

	touch(dir, "vmlinux", kernel, sizeof kernel);
	touch(dir, "initrd.img", initrd, sizeof initrd);
	sb_accel_probe(kernel, initrd, dir, &booted, why, sizeof why);
}

static void version_in(const char *dir)
{
	char *argv[] = {getenv("SANBOX_QEMU"), "-version", NULL}, out[64];
	int st;

	sb_proc_run(argv, 10000, out, sizeof out, &st);
}

/* A daemon killed during the KVM probe (up to SB_ACCEL_PROBE_MS), or while
 * a command runs to completion (qemu -version, qemu-img), leaves no QEMU
 * behind. */
static void test_killed_midway(void **state)
{
	killed_midway(probe_in);
	tu_rmrf(tmp);
	killed_midway(version_in);
}

/* Runs qemu-img or qemu-io (argv, the last argument the image) and fails
 * the test unless it exits 0 without a pattern mismatch. */
static void qemu_tool_ok(char *const argv[])
{
	char out[8192];
	int st = 0, i;

	assert_int_equal(sb_proc_run(argv, 10000, out, sizeof out, &st), 0);
	for (i = 0; argv[i + 1]; i++)
		;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || strstr(out, "Pattern verification failed"))
		fail_msg("%s %s: %s", argv[0], argv[i], out);
}

static void test_disk_layer(void **state)
{
	char *dir = tmp = tu_tmpdir(), base[PATH_MAX], layer[PATH_MAX], fork[PATH_MAX],
	     out[8192], cwd[PATH_MAX], huge[PATH_MAX];
	unsigned char hdr[104] = {'Q', 'F', 'I', 0xfb, 0, 0, 0, 3}; /* qcow2 v3 */
	char *info[] = {"qemu-img", "info", "--output=json", layer, NULL};
	char *check[] = {"qemu-img", "check", "-q", layer, NULL};
	char *check_fork[] = {"qemu-img", "check", "-q", fork, NULL};
	char *io[] = {"qemu-io", "-c", "write -P 0x5a 600M 64k", "-c", "read -P 0x5a 600M 64k",
		      "-c", "read -P 0 0 64k", fork, NULL};
	json_t *j;
	int fd, st = 0;

	snprintf(base, sizeof base, "%s/base.img", dir);
	snprintf(layer, sizeof layer, "%s/layer.qcow2", dir);
	snprintf(fork, sizeof fork, "%s/fork.qcow2", dir);
	fd = open(base, O_WRONLY | O_CREAT, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 64 << 20), 0);
	close(fd);

	/* A relative base is recorded absolute. */
	assert_non_null(getcwd(cwd, sizeof cwd));
	assert_int_equal(chdir(dir), 0);
	assert_int_equal(sb_disk_layer_create("base.img", "raw", layer), 0);
	assert_int_equal(chdir(cwd), 0);
	assert_int_equal(sb_proc_run(info, 10000, out, sizeof out, &st), 0);
	assert_int_equal(WEXITSTATUS(st), 0);
	j = json_loads(out, 0, NULL);
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "format")), "qcow2");
	assert_string_equal(json_string_value(json_object_get(j, "backing-filename")),
			    base);
	assert_string_equal(
	    json_string_value(json_object_get(j, "backing-filename-format")), "raw");
	assert_int_equal(json_integer_value(json_object_get(j, "virtual-size")),
			 64 << 20);
	json_decref(j);
	/* written here, not by qemu-img: qemu-img finds nothing wrong */
	qemu_tool_ok(check);

	/* A layer on a layer (a fork of a frozen disk), of 1 GiB: two L2
	 * tables' reach, written and read back past the first */
	assert_int_equal(truncate(base, 1 << 30), 0);
	unlink(layer);
	assert_int_equal(sb_disk_layer_create(base, "raw", layer), 0);
	assert_int_equal(sb_disk_layer_create(layer, "qcow2", fork), 0);
	qemu_tool_ok(check_fork);
	qemu_tool_ok(io);
	qemu_tool_ok(check_fork); /* after the write */

	assert_int_equal(sb_disk_layer_create(base, "raw", layer), SB_ERR_EXISTS);
	assert_int_equal(
	    sb_disk_layer_create("/nonexistent/base.img", "raw", "/tmp/x.qcow2"),
	    SB_ERR_NOTFOUND);
	assert_int_equal(sb_disk_layer_create(base, "vmdk", "/tmp/x.qcow2"),
			 SB_ERR_INVAL);
	/* an empty base: a layer of size 0, as qemu-img makes it */
	snprintf(fork, sizeof fork, "%s/empty.qcow2", dir);
	assert_int_equal(truncate(base, 0), 0);
	assert_int_equal(sb_disk_layer_create(base, "raw", fork), 0);
	qemu_tool_ok(check_fork);
	assert_int_equal(truncate(base, 1 << 30), 0);

	/* a qcow2 base whose header claims 2^60 bytes: refused, nothing made */
	snprintf(huge, sizeof huge, "%s/huge.qcow2", dir);
	hdr[24] = 0x10; /* the size, big-endian: 1 << 60 */
	fd = open(huge, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, hdr, sizeof hdr), (ssize_t)sizeof hdr);
	close(fd);
	snprintf(fork, sizeof fork, "%s/over-huge.qcow2", dir);
	assert_int_equal(sb_disk_layer_create(huge, "qcow2", fork), SB_ERR_INVAL);
	tu_errmsg_has(SB_ERR_INVAL, "huge.qcow2", "a size of 1152921504606846976 bytes");
	assert_int_equal(access(fork, F_OK), -1);

	/* a raw file given as qcow2 is not a qcow2 image; nothing is made */
	snprintf(fork, sizeof fork, "%s/bad.qcow2", dir);
	assert_int_equal(sb_disk_layer_create(base, "qcow2", fork), SB_ERR_IO);
	tu_errmsg_has(SB_ERR_IO, "disk base", "not a qcow2 image");
	assert_int_equal(access(fork, F_OK), -1);
}

static void test_accel_names(void **state)
{
	sb_accel a;
	char why[128] = "x";

	assert_int_equal(sb_accel_parse("kvm", &a), 0);
	assert_int_equal(a, SB_ACCEL_KVM);
	assert_int_equal(sb_accel_parse("tcg", &a), 0);
	assert_int_equal(a, SB_ACCEL_TCG);
	assert_int_equal(sb_accel_parse("auto", &a), 0);
	assert_int_equal(a, SB_ACCEL_AUTO);
	assert_int_equal(sb_accel_parse("xen", &a), SB_ERR_INVAL);
	assert_string_equal(sb_accel_name(SB_ACCEL_TCG), "tcg");
	assert_string_equal(sb_accel_name(SB_ACCEL_KVM), "kvm");
	/* TCG asked: TCG, no reason, no probe, no kernel needed. */
	assert_int_equal(
	    sb_accel_resolve(SB_ACCEL_TCG, NULL, NULL, NULL, &a, why, sizeof why), 0);
	assert_int_equal(a, SB_ACCEL_TCG);
	assert_string_equal(why, "");
	assert_int_equal(
	    sb_accel_resolve((sb_accel)9, NULL, NULL, NULL, &a, why, sizeof why),
	    SB_ERR_INVAL);
}

struct found {
	pid_t pid[4];
	char qmp[4][256];
	int n;
};

static void on_each(void *ctx, pid_t pid, const char *qmp)
{
	struct found *f = ctx;

	if (f->n < 4) {
		f->pid[f->n] = pid;
		snprintf(f->qmp[f->n++], sizeof f->qmp[0], "%s", qmp);
	}
}

/* Starts sh waiting, with arg among its arguments; returns its pid. */
static pid_t start_named(const char *arg)
{
	char *argv[] = {"/bin/sh", "-c", "sleep 30", "x", (char *)arg, NULL};
	struct sb_spawn sp = {
	    .argv = argv, .in = -1, .out = -1, .err = -1, .new_session = 1};
	pid_t pid;

	assert_int_equal(sb_spawn(&sp, &pid), SB_OK);
	return pid;
}

/* QEMUs are found by the QMP socket their arguments name: a comma in the
 * path (doubled on the command line) read back single, the prefix
 * matched; an argument that only looks like one (no path, a prefix of
 * another path) is not a QEMU of the prefix. */
static void test_each(void **state)
{
	char dir[] = "/tmp/sbeach.XXXXXX", arg[512], want[512], other[512];
	struct found f = {0};
	pid_t a, b, c;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(arg, sizeof arg,
		 "socket,id=qmp0,path=%s/a,,b/runs/0123456789ab/qmp.sock,reconnect=1",
		 dir);
	snprintf(want, sizeof want, "%s/a,b/runs/0123456789ab/qmp.sock", dir);
	a = start_named(arg);
	b = start_named("socket,id=qmp0,path=");
	snprintf(other, sizeof other, "socket,id=qmp0,path=%s/ab/runs/x/qmp.sock", dir);
	c = start_named(other);
	for (int i = 0; i < 1000 && !f.n; i++) {
		struct timespec ts = {0, 10 * 1000 * 1000};
		sb_vm_each(want, on_each, &f);
		if (!f.n)
			nanosleep(&ts, NULL); /* until the shell has exec'd */
	}
	assert_int_equal(f.n, 1);
	assert_int_equal(f.pid[0], a);
	assert_string_equal(f.qmp[0], want);
	f.n = 0;
	snprintf(want, sizeof want, "%s/a,b/", dir);
	sb_vm_each(want, on_each, &f);
	assert_int_equal(f.n, 1);
	f.n = 0;
	sb_vm_each("/nonexistent/", on_each, &f);
	assert_int_equal(f.n, 0);
	sb_proc_kill(a, SIGKILL);
	sb_proc_kill(b, SIGKILL);
	sb_proc_kill(c, SIGKILL);
	sb_proc_wait(a, -1, NULL);
	sb_proc_wait(b, -1, NULL);
	sb_proc_wait(c, -1, NULL);
	assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_argv_tcg_full, teardown),
	    cmocka_unit_test_teardown(test_argv_kvm_minimal, teardown),
	    cmocka_unit_test_teardown(test_argv_escaping, teardown),
	    cmocka_unit_test_teardown(test_argv_ram_file, teardown),
	    cmocka_unit_test_teardown(test_argv_tcg_host_tsc, teardown),
	    cmocka_unit_test_teardown(test_argv_bad, teardown),
	    cmocka_unit_test_teardown(test_spawn_fake, teardown),
	    cmocka_unit_test_teardown(test_spawn_errors, teardown),
	    cmocka_unit_test_teardown(test_wait_kill, teardown),
	    cmocka_unit_test_teardown(test_unix_sockets, teardown),
	    cmocka_unit_test_teardown(test_proc_run, teardown),
	    cmocka_unit_test_teardown(test_killed_midway, teardown),
	    cmocka_unit_test_teardown(test_disk_layer, teardown),
	    cmocka_unit_test_teardown(test_accel_names, teardown),
	    cmocka_unit_test_teardown(test_each, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
