/* qemu.c - the QEMU microvm command line (with the host TSC rate TCG
 * guests are told), spawning and reaping QEMU, and the unix sockets QEMU
 * connects to. */
#include "vmm/qemu.h"

#include "engine/error.h"
#include "engine/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* The fixed part of the kernel command line. */
#define QEMU_APPEND "console=ttyS0 quiet panic=-1"

/* A growing argv; the first failure sticks and later adds do nothing. */
struct qemu_av {
	char **v;
	size_t n, cap;
	int err;
};

static void av_addf(struct qemu_av *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void av_addf(struct qemu_av *a, const char *fmt, ...)
{
	va_list ap;
	char *s, **nv;

	if (a->err)
		return;
	if (a->n + 2 > a->cap) {
		a->cap = a->cap ? a->cap * 2 : 32;
		nv = realloc(a->v, a->cap * sizeof *nv);
		if (!nv) {
			a->err = SB_ERR_NOMEM;
			return;
		}
		a->v = nv;
	}
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0) {
		a->err = SB_ERR_NOMEM;
		s = NULL;
	}
	va_end(ap);
	if (!s)
		return;
	a->v[a->n++] = s;
	a->v[a->n] = NULL;
}

static void av_add2(struct qemu_av *a, const char *opt, const char *val)
{
	av_addf(a, "%s", opt);
	av_addf(a, "%s", val);
}

/* Doubles the commas of s, as QEMU's option syntax wants inside a value.
 * The caller frees the result; NULL when out of memory. */
static char *qemu_esc(const char *s)
{
	size_t n = strlen(s), i, j = 0;
	char *e = malloc(2 * n + 1);

	if (!e)
		return NULL;
	for (i = 0; i < n; i++) {
		e[j++] = s[i];
		if (s[i] == ',')
			e[j++] = ',';
	}
	e[j] = 0;
	return e;
}

char *sb_vm_shquote(const char *s)
{
	size_t n = strlen(s), i, j = 0;
	char *q = malloc(4 * n + 3);

	if (!q)
		return NULL;
	q[j++] = '\'';
	for (i = 0; i < n; i++) {
		if (s[i] == '\'') {
			memcpy(q + j, "'\\''", 4);
			j += 4;
		} else {
			q[j++] = s[i];
		}
	}
	q[j++] = '\'';
	q[j] = 0;
	return q;
}

char *sb_vm_save_uri(const char *path)
{
	char *part = NULL, *qf = sb_vm_shquote(path), *qp = NULL, *uri = NULL;

	if (qf && asprintf(&part, "%s" SB_VM_SAVE_PART, path) >= 0)
		qp = sb_vm_shquote(part);
	/* fd 3 carries the pipe into the background: an asynchronous list's
	 * own stdin is /dev/null */
	if (qp && asprintf(&uri, "exec:exec 3<&0; (cat <&3 >%s && mv -f %s %s) &", qp,
			   qp, qf) < 0)
		uri = NULL;
	free(qf);
	free(part);
	free(qp);
	return uri;
}

/* Adds opt and the value pre + val (commas doubled) + post. */
static void av_addesc(struct qemu_av *a, const char *opt, const char *pre,
		      const char *val, const char *post)
{
	char *e;

	if (a->err)
		return;
	e = qemu_esc(val);
	if (!e) {
		a->err = SB_ERR_NOMEM;
		return;
	}
	av_addf(a, "%s", opt);
	av_addf(a, "%s%s%s", pre, e, post);
	free(e);
}

#define QMP_CHARDEV "socket,id=qmp0,path=" /* then the path, commas doubled */

static int qemu_check(const struct sb_vm_config *c)
{
	const char *strs[] = {c->qemu,	   c->kernel,	   c->initrd,	  c->append_extra,
			      c->disk,	   c->chan_socket, c->qmp_socket, c->console_log,
			      c->incoming, c->tap,	   c->mac,	  c->ram_file};
	size_t i;

	if (!c->kernel || !*c->kernel)
		return sb_seterr(SB_ERR_INVAL, "VM config: no kernel");
	if (!c->console_log || !*c->console_log)
		return sb_seterr(SB_ERR_INVAL, "VM config: no console log");
	if (c->incoming && c->incoming_defer)
		return sb_seterr(SB_ERR_INVAL,
				 "VM config: an incoming file and a deferred incoming");
	if (c->tap && (!c->mac || strlen(c->mac) != 17))
		return sb_seterr(SB_ERR_INVAL, "VM config: a NIC needs a MAC address");
	if (c->accel != SB_ACCEL_KVM && c->accel != SB_ACCEL_TCG)
		return sb_seterr(SB_ERR_INVAL,
				 "VM config: accelerator not resolved (kvm or tcg)");
	if (c->cpus < 1 || c->cpus > 64)
		return sb_seterr(SB_ERR_INVAL, "VM config: %u cpus (1..64)", c->cpus);
	if (c->memory_mib < 64 || c->memory_mib > 1048576)
		return sb_seterr(SB_ERR_INVAL,
				 "VM config: %u MiB of memory (64..1048576)",
				 c->memory_mib);
	for (i = 0; i < sizeof strs / sizeof strs[0]; i++)
		if (strs[i] && strpbrk(strs[i], "\n\r"))
			return sb_seterr(SB_ERR_INVAL, "VM config: newline in \"%s\"",
					 strs[i]);
	return 0;
}

static unsigned qemu_tsc;
static pthread_once_t qemu_tsc_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) || defined(__i386__)
static int64_t qemu_ns(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

/* Reads the TSC between two clock reads; keeps the tightest of a few. */
static void qemu_tsc_sample(uint64_t *tsc, int64_t *ns)
{
	struct timespec a, b;
	int64_t best = INT64_MAX;
	uint64_t t;
	int i;

	for (i = 0; i < 8; i++) {
		clock_gettime(CLOCK_MONOTONIC_RAW, &a);
		t = __rdtsc();
		clock_gettime(CLOCK_MONOTONIC_RAW, &b);
		if (qemu_ns(&b) - qemu_ns(&a) < best) {
			best = qemu_ns(&b) - qemu_ns(&a);
			*tsc = t;
			*ns = (qemu_ns(&a) + qemu_ns(&b)) / 2;
		}
	}
}
#endif

static void qemu_tsc_measure(void)
{
#if defined(__x86_64__) || defined(__i386__)
	struct timespec nap = {0, 20 * 1000 * 1000};
	uint64_t t0 = 0, t1 = 0, khz;
	int64_t n0 = 0, n1 = 0;

	qemu_tsc_sample(&t0, &n0);
	while (nanosleep(&nap, &nap) < 0 && errno == EINTR)
		;
	qemu_tsc_sample(&t1, &n1);
	if (n1 <= n0 || t1 <= t0)
		return;
	khz = (t1 - t0) * 1000000 / (uint64_t)(n1 - n0);
	if (khz >= 100000 && khz <= 10000000)
		qemu_tsc = (unsigned)khz;
#endif
}

int sb_host_tsc_khz(unsigned *khz)
{
	pthread_once(&qemu_tsc_once, qemu_tsc_measure);
	if (!qemu_tsc)
		return sb_seterr(SB_ERR_UNAVAIL, "no usable host TSC");
	*khz = qemu_tsc;
	return 0;
}

const char *sb_vm_qemu(void)
{
	const char *q = getenv("SANBOX_QEMU");

	return q && *q ? q : SB_VM_QEMU_DEFAULT;
}

int sb_vm_argv(const struct sb_vm_config *c, char ***out)
{
	struct qemu_av a = {0};
	unsigned khz = c->tsc_khz;
	char tsc[32] = "", ram[96], *q = NULL;
	int rc;

	*out = NULL;
	rc = qemu_check(c);
	if (rc)
		return rc;
	if (c->accel == SB_ACCEL_TCG && !khz && sb_host_tsc_khz(&khz))
		khz = 0;

	av_addf(&a, "%s", c->qemu ? c->qemu : sb_vm_qemu());
	av_add2(&a, "-M",
		"microvm,x-option-roms=off,rtc=on,memory-backend=" SB_VM_RAM_ID);
	if (c->accel == SB_ACCEL_KVM) {
		av_add2(&a, "-accel", "kvm");
		av_add2(&a, "-cpu", "host,-arch-capabilities");
	} else {
		av_add2(&a, "-accel", "tcg,tb-size=64"); /* the 1 GiB default fills RSS */
		av_add2(&a, "-cpu", "max");
	}
	av_addf(&a, "-m");
	av_addf(&a, "%uM", c->memory_mib);
	if (c->ram_file) {
		snprintf(ram, sizeof ram,
			 "memory-backend-file,id=" SB_VM_RAM_ID ",size=%uM,mem-path=",
			 c->memory_mib);
		av_addesc(&a, "-object", ram, c->ram_file,
			  c->ram_shared ? ",share=on" : ",share=off");
	} else {
		av_addf(&a, "-object");
		av_addf(&a, "memory-backend-ram,id=" SB_VM_RAM_ID ",size=%uM",
			c->memory_mib);
	}
	av_addf(&a, "-smp");
	av_addf(&a, "%u", c->cpus);
	av_addf(&a, "-nodefaults");
	av_addf(&a, "-no-user-config");
	av_addf(&a, "-nographic");
	av_addf(&a, "-no-reboot");
	av_add2(&a, "-sandbox",
		"on,obsolete=deny,elevateprivileges=deny,resourcecontrol=deny");
	av_add2(&a, "-kernel", c->kernel);
	if (c->initrd)
		av_add2(&a, "-initrd", c->initrd);
	if (khz)
		snprintf(tsc, sizeof tsc, " tsc_early_khz=%u", khz);
	av_addf(&a, "-append");
	av_addf(&a, "%s%s%s%s", QEMU_APPEND, tsc, c->append_extra ? " " : "",
		c->append_extra ? c->append_extra : "");
	av_addesc(&a, "-chardev", "file,id=con0,path=", c->console_log, ",append=on");
	av_add2(&a, "-serial", "chardev:con0");
	if (c->disk) {
		av_addesc(&a, "-blockdev", "driver=file,filename=", c->disk,
			  ",node-name=" SB_VM_DISK_FILE_NODE);
		av_add2(&a, "-blockdev",
			"driver=qcow2,file=" SB_VM_DISK_FILE_NODE
			",node-name=" SB_VM_DISK_NODE);
		av_add2(&a, "-device", "virtio-blk-device,drive=" SB_VM_DISK_NODE);
	}
	if (c->chan_socket) {
		av_add2(&a, "-device", "virtio-serial-device");
		av_addesc(&a, "-chardev", "socket,id=chan0,path=", c->chan_socket,
			  ",reconnect=1");
		av_add2(&a, "-device",
			"virtserialport,chardev=chan0,name=" SB_VM_CHAN_NAME);
	}
	if (c->qmp_socket) {
		av_addesc(&a, "-chardev", QMP_CHARDEV, c->qmp_socket, ",reconnect=1");
		av_add2(&a, "-mon", "chardev=qmp0,mode=control");
	}
	if (c->tap) { /* after the disk and the channel: their numbers stay */
		av_addesc(&a, "-netdev",
			  "tap,id=net0,script=no,downscript=no,ifname=", c->tap, "");
		av_addesc(&a, "-device",
			  "virtio-net-device,netdev=net0,mac=", c->mac ? c->mac : "", "");
	}
	if (c->incoming) {
		q = sb_vm_shquote(c->incoming);
		if (!q)
			a.err = SB_ERR_NOMEM;
		av_addf(&a, "-S");
		av_addf(&a, "-incoming");
		av_addf(&a, "exec:cat %s", q);
	} else if (c->incoming_defer) {
		av_addf(&a, "-S");
		av_add2(&a, "-incoming", "defer");
	}
	free(q);
	if (a.err) {
		sb_argv_free(a.v);
		return sb_seterr(a.err, "building the QEMU command line");
	}
	*out = a.v;
	return 0;
}

void sb_argv_free(char **argv)
{
	size_t i;

	if (!argv)
		return;
	for (i = 0; argv[i]; i++)
		free(argv[i]);
	free(argv);
}

static int qemu_need_file(const char *what, const char *path)
{
	if (path && access(path, R_OK) < 0)
		return sb_seterr(SB_ERR_NOTFOUND, "%s %s: %s", what, path,
				 strerror(errno));
	return 0;
}

int sb_vm_spawn(const struct sb_vm_config *c, pid_t *pid)
{
	struct sb_spawn sp = {0};
	char exe[PATH_MAX], log[PATH_MAX], **argv = NULL;
	const char *slash;
	int out = -1, rc;

	rc = sb_vm_argv(c, &argv);
	if (rc)
		return rc;
	rc = sb_exe_find(argv[0], exe, sizeof exe);
	if (rc) {
		rc = strchr(argv[0], '/')
			 ? sb_seterr(SB_ERR_UNAVAIL, "QEMU binary %s", sb_errmsg(rc))
			 : sb_seterr(SB_ERR_UNAVAIL,
				     "QEMU binary %s not found in PATH (install "
				     "qemu-system-x86, or set SANBOX_QEMU)",
				     argv[0]);
		goto fail;
	}
	if ((rc = qemu_need_file("kernel", c->kernel)) ||
	    (rc = qemu_need_file("initrd", c->initrd)) ||
	    (rc = qemu_need_file("disk", c->disk)) ||
	    (rc = qemu_need_file("memory state", c->incoming)) ||
	    (rc = qemu_need_file("memory file", c->ram_shared ? NULL : c->ram_file)))
		goto fail;
	slash = strrchr(c->console_log, '/');
	if (!slash)
		snprintf(log, sizeof log, "qemu.log");
	else if ((size_t)snprintf(log, sizeof log, "%.*s/qemu.log",
				  (int)(slash - c->console_log),
				  c->console_log) >= sizeof log) {
		rc = sb_seterr(SB_ERR_INVAL, "console log path too long");
		goto fail;
	}
	out = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (out < 0) {
		rc = sb_seterr(SB_ERR_IO, "%s: %s", log, strerror(errno));
		goto fail;
	}
	sp.argv = argv;
	sp.in = -1;
	sp.out = sp.err = out;
	sp.new_session = 1;
	sp.die_with_parent = c->die_with_parent;
	sp.nice = SB_VM_NICE;
	rc = sb_spawn(&sp, pid);
fail:
	if (out >= 0)
		close(out);
	sb_argv_free(argv);
	return rc;
}

/* The QMP socket's path of the command line cmd (n bytes, its arguments
 * NUL-separated) into buf (commas undoubled); 0 when it names none. */
static int qemu_qmp_of(const char *cmd, size_t n, char *buf, size_t cap)
{
	const size_t pl = sizeof QMP_CHARDEV - 1;
	size_t i, j;

	for (i = 0; i < n; i += strnlen(cmd + i, n - i) + 1) {
		if (n - i < pl || strncmp(cmd + i, QMP_CHARDEV, pl))
			continue;
		for (i += pl, j = 0; i < n && cmd[i] && j + 1 < cap; i++) {
			if (cmd[i] == ',' && (i + 1 >= n || cmd[i + 1] != ','))
				break; /* the option's end */
			buf[j++] = cmd[i];
			i += cmd[i] == ',';
		}
		buf[j] = 0;
		return j > 0 && j + 1 < cap;
	}
	return 0;
}

/* The QMP socket's path process pid's command line names, into qmp
 * (cap bytes): 1, or 0 when it names none or cannot be read. */
static int qemu_qmp_of_pid(const char *pid, char *qmp, size_t cap)
{
	char path[64], cmd[16384];
	struct stat st;
	ssize_t got;
	size_t n;
	int fd, ok;

	if (snprintf(path, sizeof path, "/proc/%s/cmdline", pid) >= (int)sizeof path ||
	    (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	for (n = 0; n < sizeof cmd && (got = read(fd, cmd + n, sizeof cmd - n)) > 0;
	     n += (size_t)got)
		;
	ok = fstat(fd, &st) == 0 && st.st_uid == geteuid() &&
	     qemu_qmp_of(cmd, n, qmp, cap);
	close(fd);
	return ok;
}

/* 1 when pid's parent names the same QMP socket: pid is a child QEMU
 * forked (to run a migration's command, say) and has not exec'd yet. */
static int qemu_forked(const char *pid, const char *qmp)
{
	char path[64], line[512], ppid[16], pq[PATH_MAX];
	const char *p;
	FILE *f;
	int ok = 0, pp;

	snprintf(path, sizeof path, "/proc/%.20s/stat", pid); /* digits */
	if (!(f = fopen(path, "re")))
		return 0;
	/* pid (comm) state ppid ...: comm may hold anything but not ") " last */
	if (fgets(line, sizeof line, f) && (p = strrchr(line, ')')) &&
	    sscanf(p + 1, " %*c %d", &pp) == 1) {
		snprintf(ppid, sizeof ppid, "%d", pp);
		ok = qemu_qmp_of_pid(ppid, pq, sizeof pq) && !strcmp(pq, qmp);
	}
	fclose(f);
	return ok;
}

void sb_vm_each(const char *prefix, void (*fn)(void *ctx, pid_t pid, const char *qmp),
		void *ctx)
{
	char qmp[PATH_MAX];
	struct dirent *e;
	DIR *d;

	if (!(d = opendir("/proc")))
		return;
	while ((e = readdir(d)))
		if (strspn(e->d_name, "0123456789") == strlen(e->d_name) &&
		    qemu_qmp_of_pid(e->d_name, qmp, sizeof qmp) &&
		    !strncmp(qmp, prefix, strlen(prefix)) && !qemu_forked(e->d_name, qmp))
			fn(ctx, (pid_t)atoi(e->d_name), qmp);
	closedir(d);
}
