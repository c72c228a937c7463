/* accel.c - choosing KVM or TCG: /dev/kvm check, boot probe, cached
 * verdict. */
#include "vmm/accel.h"

#include "engine/error.h"
#include "engine/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ACCEL_WHY_SLOW "KVM guest did not boot within 3s; using TCG"

const char *sb_accel_name(sb_accel a)
{
	switch (a) {
	case SB_ACCEL_AUTO: return "auto";
	case SB_ACCEL_KVM: return "kvm";
	case SB_ACCEL_TCG: return "tcg";
	}
	return "?";
}

int sb_accel_parse(const char *s, sb_accel *out)
{
	if (!strcmp(s, "auto"))
		*out = SB_ACCEL_AUTO;
	else if (!strcmp(s, "kvm"))
		*out = SB_ACCEL_KVM;
	else if (!strcmp(s, "tcg"))
		*out = SB_ACCEL_TCG;
	else
		return sb_seterr(SB_ERR_INVAL, "accelerator \"%s\" (auto, kvm or tcg)",
				 s);
	return 0;
}

static void accel_why(char *why, size_t whylen, const char *msg)
{
	if (why && whylen)
		snprintf(why, whylen, "%s", msg);
}

/* Reads up to len - 1 bytes of path into buf (NUL-terminated, "" when the
 * file cannot be read). */
static void accel_slurp(const char *path, char *buf, size_t len)
{
	ssize_t n;
	int fd;

	buf[0] = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, buf, len - 1);
	buf[n > 0 ? n : 0] = 0;
	close(fd);
}

/* The cache key: this host boot and this QEMU. */
static int accel_key(char *boot, size_t blen, char *qver, size_t qlen)
{
	char *argv[] = {(char *)sb_vm_qemu(), "-version", NULL};
	int rc, st;

	accel_slurp("/proc/sys/kernel/random/boot_id", boot, blen);
	boot[strcspn(boot, "\n")] = 0;
	rc = sb_proc_run(argv, 10000, qver, qlen, &st);
	if (rc &&
	    rc != SB_ERR_TIMEOUT) /* not found, not a program: as sb_vm_spawn says it */
		return sb_seterr(SB_ERR_UNAVAIL, "QEMU binary %s", sb_errmsg(rc));
	if (rc)
		return rc;
	qver[strcspn(qver, "\n")] = 0;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !qver[0])
		return sb_seterr(SB_ERR_UNAVAIL, "%s -version failed", argv[0]);
	return 0;
}

/* Looks the verdict up in the cache file; 0 when found. */
static int accel_cache_get(const char *file, const char *boot, const char *qver,
			   sb_accel *out, char *why, size_t whylen)
{
	const char *b, *q, *a, *w;
	sb_accel v;
	json_t *j;
	int rc = SB_ERR_NOTFOUND;

	j = json_load_file(file, 0, NULL);
	if (!j)
		return rc;
	if (json_unpack(j, "{s:s, s:s, s:s, s:s}", "boot_id", &b, "qemu", &q, "accel", &a,
			"why", &w) == 0 &&
	    !strcmp(b, boot) && !strcmp(q, qver) && sb_accel_parse(a, &v) == 0 &&
	    v != SB_ACCEL_AUTO) {
		*out = v;
		accel_why(why, whylen, w);
		rc = 0;
	}
	json_decref(j);
	return rc;
}

/* Writes the verdict to the cache file (atomically); failures are ignored:
 * the next resolve probes again. */
static void accel_cache_put(const char *file, const char *boot, const char *qver,
			    sb_accel a, const char *why)
{
	char tmp[PATH_MAX];
	json_t *j;

	if (!boot[0] || (size_t)snprintf(tmp, sizeof tmp, "%s.tmp", file) >= sizeof tmp)
		return;
	j = json_pack("{s:s, s:s, s:s, s:s}", "boot_id", boot, "qemu", qver, "accel",
		      sb_accel_name(a), "why", why);
	if (!j)
		return;
	if (json_dump_file(j, tmp, JSON_COMPACT) == 0 && rename(tmp, file) < 0)
		unlink(tmp);
	json_decref(j);
}

int sb_accel_probe(const char *kernel, const char *initrd, const char *tmpdir,
		   int *booted, char *why, size_t whylen)
{
	char dir[PATH_MAX], con[PATH_MAX + 16], qlog[PATH_MAX + 16];
	char buf[65536];
	struct sb_vm_config c = {
	    .kernel = kernel,
	    .initrd = initrd,
	    .append_extra = SB_VM_PROBE_ARG,
	    .cpus = 1,
	    .memory_mib = 256,
	    .accel = SB_ACCEL_KVM,
	    .die_with_parent = 1, /* a daemon killed meanwhile takes it along */
	};
	struct timespec t0, t;
	int rc, exited = 0;
	pid_t pid = 0;

	*booted = 0;
	if ((size_t)snprintf(dir, sizeof dir, "%s/accel-probe.XXXXXX", tmpdir) >=
	    sizeof dir)
		return sb_seterr(SB_ERR_INVAL, "cache path too long");
	if (!mkdtemp(dir))
		return sb_seterr(SB_ERR_IO, "mkdtemp %s: %s", dir, strerror(errno));
	snprintf(con, sizeof con, "%s/console.log", dir);
	snprintf(qlog, sizeof qlog, "%s/qemu.log", dir);
	c.console_log = con;
	rc = sb_vm_spawn(&c, &pid);
	if (rc)
		goto fail;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		/* Waiting for the exit doubles as the pause between looks. */
		exited = sb_proc_wait(pid, 20, NULL) == 0;
		accel_slurp(con, buf, sizeof buf);
		if (strstr(buf, SB_VM_PROBE_OK)) {
			*booted = 1;
			break;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (exited ||
		    (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >=
			SB_ACCEL_PROBE_MS)
			break;
	}
	if (!exited) {
		sb_proc_kill(pid, SIGKILL);
		sb_proc_wait(pid, -1, NULL);
	}
	if (!*booted && exited) {
		accel_slurp(qlog, buf, 200);
		buf[strcspn(buf, "\n")] = 0;
		snprintf(why, whylen,
			 "QEMU under KVM exited before the guest booted (%s); using TCG",
			 buf);
	} else if (!*booted) {
		accel_why(why, whylen, ACCEL_WHY_SLOW);
	}
fail:
	unlink(con);
	unlink(qlog);
	rmdir(dir);
	return rc;
}

int sb_accel_resolve(sb_accel want, const char *kernel, const char *initrd,
		     const char *cache_dir, sb_accel *out, char *why, size_t whylen)
{
	char boot[64], qver[256], file[PATH_MAX], msg[300];
	int fd, rc, booted;

	accel_why(why, whylen, "");
	if (want == SB_ACCEL_TCG) {
		*out = SB_ACCEL_TCG;
		return 0;
	}
	if (want != SB_ACCEL_KVM && want != SB_ACCEL_AUTO)
		return sb_seterr(SB_ERR_INVAL, "accelerator %d", (int)want);
	fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		snprintf(msg, sizeof msg, "cannot open /dev/kvm (%s)", strerror(errno));
		if (want == SB_ACCEL_KVM)
			return sb_seterr(SB_ERR_UNAVAIL, "%s", msg);
		*out = SB_ACCEL_TCG;
		if (why && whylen)
			snprintf(why, whylen, "%s; using TCG", msg);
		return 0;
	}
	close(fd);
	if (want == SB_ACCEL_KVM) {
		*out = SB_ACCEL_KVM;
		return 0;
	}
	if (!kernel)
		return sb_seterr(SB_ERR_INVAL, "no kernel to probe KVM with");
	rc = accel_key(boot, sizeof boot, qver, sizeof qver);
	if (rc)
		return rc;
	file[0] = 0;
	if (cache_dir) {
		if ((size_t)snprintf(file, sizeof file, "%s/accel", cache_dir) >=
		    sizeof file)
			return sb_seterr(SB_ERR_INVAL, "cache path too long");
		if (mkdir(cache_dir, 0700) < 0 && errno != EEXIST)
			return sb_seterr(SB_ERR_IO, "mkdir %s: %s", cache_dir,
					 strerror(errno));
		if (accel_cache_get(file, boot, qver, out, why, whylen) == 0)
			return 0;
	}
	msg[0] = 0;
	rc = sb_accel_probe(kernel, initrd, cache_dir ? cache_dir : "/tmp", &booted, msg,
			    sizeof msg);
	if (rc)
		return rc;
	*out = booted ? SB_ACCEL_KVM : SB_ACCEL_TCG;
	accel_why(why, whylen, msg);
	if (cache_dir)
		accel_cache_put(file, boot, qver, *out, msg);
	return 0;
}
