/* warm.c - warm images of templates (see warm.h). */
#include "engine/runs/warm.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/home.h"
#include "engine/proc.h"
#include "engine/sock.h"
#include "engine/units.h"
#include "vmm/chan.h"
#include "vmm/disk.h"
#include "vmm/qmp.h"

#define WARM_BOOT_MS  90000 /* QEMU start to the agent's HELLO */
#define WARM_SAVE_MS  60000 /* saving the state */
#define WARM_STALE_S  300   /* a build lock this old is a dead build's */
#define WARM_PATH_MAX (PATH_MAX + 64)

/* The QEMU binary as a path (searched in PATH when it has no slash). */
static int qemu_path(char *buf, size_t cap)
{
	const char *q = sb_vm_qemu(), *path = getenv("PATH");
	char *dup, *dir, *save;

	if (strchr(q, '/')) {
		snprintf(buf, cap, "%s", q);
		return access(buf, X_OK) ? SB_ERR_UNAVAIL : SB_OK;
	}
	if (!path || !(dup = strdup(path)))
		return SB_ERR_UNAVAIL;
	for (dir = strtok_r(dup, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		snprintf(buf, cap, "%s/%s", dir, q);
		if (access(buf, X_OK) == 0) {
			free(dup);
			return SB_OK;
		}
	}
	free(dup);
	return SB_ERR_UNAVAIL;
}

int sb_warm_key(const struct sb_warm_spec *w, char key[SB_WARM_KEY_LEN + 1])
{
	char qemu[PATH_MAX], buf[PATH_MAX * 2 + 512];
	unsigned char h[SB_WARM_KEY_LEN / 2];
	struct stat st;

	if (qemu_path(qemu, sizeof qemu) || stat(qemu, &st))
		return sb_seterr(SB_ERR_UNAVAIL, "QEMU binary %s not found",
				 sb_vm_qemu());
	/* warm 2: the RAM in a file of its own, the state without it */
	snprintf(buf, sizeof buf, "warm 2\n%s\n%s\n%lld %lld\n%d %u %u\n%s\n",
		 w->template_hash, qemu, (long long)st.st_size, (long long)st.st_mtime,
		 (int)w->accel, w->cpus, w->memory_mib, SB_CHAN_VERSION);
	crypto_generichash(h, sizeof h, (const unsigned char *)buf, strlen(buf), NULL, 0);
	sodium_bin2hex(key, SB_WARM_KEY_LEN + 1, h, sizeof h);
	return SB_OK;
}

int sb_warm_find(const char *home, const char *key, char *state, char *ram, size_t cap)
{
	if ((size_t)snprintf(state, cap, "%s/cache/warm/%s.mem", home, key) >= cap ||
	    (size_t)snprintf(ram, cap, "%s/cache/warm/%s.ram", home, key) >= cap)
		return sb_seterr(SB_ERR_TOOBIG, "state directory path too long");
	return access(state, R_OK) == 0 && access(ram, R_OK | W_OK) == 0
		   ? SB_OK
		   : SB_ERR_NOTFOUND;
}

void sb_warm_drop(const char *home, const char *key)
{
	char state[WARM_PATH_MAX], ram[WARM_PATH_MAX];

	if (sb_warm_find(home, key, state, ram, sizeof state) != SB_ERR_TOOBIG) {
		unlink(state); /* the image is gone with its state */
		unlink(ram);
	}
}

/* --- building --- */

struct build {
	char dir[WARM_PATH_MAX + 16];
	char disk[WARM_PATH_MAX + 32], chan[WARM_PATH_MAX + 32], qmp[WARM_PATH_MAX + 32],
	    console[WARM_PATH_MAX + 32], pidfile[WARM_PATH_MAX + 32],
	    ram[WARM_PATH_MAX + 32], state[WARM_PATH_MAX + 32];
	int chan_lfd, qmp_lfd, chan_fd;
	pid_t pid;
};

static void build_clean(struct build *b)
{
	if (b->pid > 1) {
		sb_proc_kill(b->pid, SIGKILL);
		sb_proc_wait(b->pid, 5000, NULL);
	}
	if (b->chan_fd >= 0)
		close(b->chan_fd);
	if (b->chan_lfd >= 0)
		close(b->chan_lfd);
	if (b->qmp_lfd >= 0)
		close(b->qmp_lfd);
	unlink(b->disk);
	unlink(b->chan);
	unlink(b->qmp);
	unlink(b->console);
	unlink(b->pidfile);
	unlink(b->ram);
	unlink(b->state);
	if (snprintf(b->console, sizeof b->console, "%s" SB_VM_SAVE_PART, b->state) <
	    (int)sizeof b->console)
		unlink(b->console); /* a writer that never finished */
	snprintf(b->console, sizeof b->console, "%s/qemu.log", b->dir);
	unlink(b->console);
	rmdir(b->dir);
}

/* Takes the build lock (the directory); a stale one (a build that died)
 * is taken over, its QEMU ended. */
static int build_lock(struct build *b)
{
	struct stat st;
	FILE *f;
	int pid;

	if (mkdir(b->dir, 0700) == 0)
		return SB_OK;
	if (errno != EEXIST || stat(b->dir, &st))
		return sb_seterr(SB_ERR_IO, "%s: %s", b->dir, strerror(errno));
	pid = 0;
	if ((f = fopen(b->pidfile, "re"))) {
		if (fscanf(f, "%d", &pid) != 1)
			pid = 0;
		fclose(f);
	}
	/* its QEMU (its command line names the directory) still runs: a live
	 * build, unless it is past WARM_STALE_S; no QEMU: a dead one, once a
	 * starting build has had the time to write its pid */
	if (sb_proc_cmdline_has(pid, b->dir)) {
		if (time(NULL) - st.st_mtime < WARM_STALE_S)
			return sb_seterr(SB_ERR_EXISTS,
					 "a warm image is being built in %s", b->dir);
		sb_proc_kill(pid, SIGKILL);
	} else if (!pid && time(NULL) - st.st_mtime < WARM_STALE_S) {
		return sb_seterr(SB_ERR_EXISTS, "a warm image is being built in %s",
				 b->dir);
	}
	build_clean(b);
	return mkdir(b->dir, 0700)
		   ? sb_seterr(SB_ERR_EXISTS, "%s: %s", b->dir, strerror(errno))
		   : SB_OK;
}

/* Reads frames from the guest until HELLO, up to deadline (ms, monotonic). */
static int wait_hello(int fd, int64_t deadline)
{
	sb_chan_reader *rd;
	struct sb_chan_frame f;
	char buf[4096];
	int rc;

	if ((rc = sb_chan_reader_new(&rd)))
		return rc;
	for (;;) {
		struct pollfd p = {fd, POLLIN, 0};
		int64_t left = deadline - sb_now_ms();
		ssize_t n;

		while ((rc = sb_chan_reader_next(rd, &f)) == SB_OK)
			if (f.kind == SB_CHAN_HELLO)
				goto out;
		if (left <= 0) {
			rc = sb_seterr(SB_ERR_TIMEOUT,
				       "the guest did not say HELLO in time");
			goto out;
		}
		if (poll(&p, 1, (int)left) < 0 && errno != EINTR) {
			rc = sb_seterr(SB_ERR_IO, "poll: %s", strerror(errno));
			goto out;
		}
		n = read(fd, buf, sizeof buf);
		if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
			rc = sb_seterr(SB_ERR_IO,
				       "the guest's channel closed before HELLO");
			goto out;
		}
		if (n > 0 && (rc = sb_chan_reader_feed(rd, buf, (size_t)n)))
			goto out;
	}
out:
	sb_chan_reader_free(rd);
	return rc;
}

/* Saves the guest's device state into file through QMP on q: paused, with
 * its RAM (the shared file) left out. */
static int save_state(sb_qmp *q, const char *file, int64_t deadline)
{
	json_t *ret = NULL;
	int rc;

	if ((rc = sb_qmp_command(q, "stop", NULL, 10000, NULL)))
		return rc;
	{
		json_t *caps = json_pack("{s:[{s:s, s:b}]}", "capabilities", "capability",
					 SB_WARM_MIGRATE_CAP, "state", 1);
		rc = caps ? sb_qmp_command(q, "migrate-set-capabilities", caps, 10000,
					   NULL)
			  : SB_ERR_NOMEM;
		json_decref(caps);
		if (rc)
			return rc;
	}
	{
		/* paused: saved as fast as the disk takes it */
		json_t *sp =
		    json_pack("{s:I}", "max-bandwidth", (json_int_t)(64ll << 30));
		rc = sp ? sb_qmp_command(q, "migrate-set-parameters", sp, 10000, NULL)
			: SB_ERR_NOMEM;
		json_decref(sp);
		if (rc)
			return rc;
	}
	{
		char *uri = sb_vm_save_uri(file);
		json_t *args = uri ? json_pack("{s:s}", "uri", uri) : NULL;
		rc =
		    args ? sb_qmp_command(q, "migrate", args, 10000, NULL) : SB_ERR_NOMEM;
		json_decref(args);
		free(uri);
	}
	while (rc == SB_OK) {
		const char *st;
		if ((rc = sb_qmp_command(q, "query-migrate", NULL, 10000, &ret)))
			break;
		st = json_string_value(json_object_get(ret, "status"));
		if (st && !strcmp(st, "completed") && access(file, F_OK) == 0) {
			json_decref(ret);
			return SB_OK; /* sent, and its writer done */
		}
		if (st && (!strcmp(st, "failed") || !strcmp(st, "cancelled")))
			rc =
			    sb_seterr(SB_ERR_IO, "saving the warm image failed (%s)", st);
		else if (sb_now_ms() > deadline)
			rc = sb_seterr(SB_ERR_TIMEOUT,
				       "saving the warm image took too long");
		json_decref(ret);
		ret = NULL;
		usleep(20000);
	}
	return rc;
}

/* Makes the build's file from into the image's file to: on the disk,
 * read-only, then renamed. */
static int install(const char *from, const char *to)
{
	int fd = open(from, O_RDONLY | O_CLOEXEC), rc = SB_OK;

	if (fd < 0 || fsync(fd) || fchmod(fd, 0444) || rename(from, to))
		rc = sb_seterr(SB_ERR_IO, "%s: %s", to, strerror(errno));
	if (fd >= 0)
		close(fd);
	return rc;
}

int sb_warm_build(const char *home, const char *key, const struct sb_warm_spec *w)
{
	struct build b = {.chan_lfd = -1, .qmp_lfd = -1, .chan_fd = -1};
	struct sb_vm_config vc = {0};
	char cache[WARM_PATH_MAX], state[WARM_PATH_MAX], ram[WARM_PATH_MAX], pidbuf[32];
	int64_t deadline;
	sb_qmp *q = NULL;
	FILE *f;
	int rc, fd;

	snprintf(cache, sizeof cache, "%s/cache/warm", home);
	if ((rc = sb_mkdirs(cache, 0700)))
		return rc;
	if (sb_warm_find(home, key, state, ram, sizeof state) == SB_OK)
		return SB_OK;
	snprintf(b.dir, sizeof b.dir, "%s/%s.build", cache, key);
	snprintf(b.disk, sizeof b.disk, "%s/disk.qcow2", b.dir);
	snprintf(b.chan, sizeof b.chan, "%s/chan.sock", b.dir);
	snprintf(b.qmp, sizeof b.qmp, "%s/qmp.sock", b.dir);
	snprintf(b.console, sizeof b.console, "%s/console.log", b.dir);
	snprintf(b.pidfile, sizeof b.pidfile, "%s/qemu.pid", b.dir);
	snprintf(b.ram, sizeof b.ram, "%s/ram", b.dir);
	snprintf(b.state, sizeof b.state, "%s/state", b.dir);
	if ((rc = build_lock(&b)))
		return rc;
	if (sb_warm_find(home, key, state, ram, sizeof state) == SB_OK)
		goto out; /* a build that held the lock made it */
	/* half an image (one file without the other) goes first: the new RAM
	 * must never be found beside an old state */
	sb_warm_drop(home, key);
	if ((rc = sb_disk_layer_create(w->rootfs, "raw", b.disk)) ||
	    (rc = sb_unix_listen(b.chan, &b.chan_lfd)) ||
	    (rc = sb_unix_listen(b.qmp, &b.qmp_lfd)))
		goto out;
	vc.kernel = w->kernel;
	vc.initrd = w->initrd;
	vc.disk = b.disk;
	vc.chan_socket = b.chan;
	vc.qmp_socket = b.qmp;
	vc.console_log = b.console;
	vc.cpus = w->cpus;
	vc.memory_mib = w->memory_mib;
	vc.accel = w->accel;
	vc.ram_file = b.ram; /* the guest's RAM is the image's */
	vc.ram_shared = 1;
	vc.die_with_parent = 1; /* a daemon that exits takes its build with it */
	if ((rc = sb_vm_spawn(&vc, &b.pid)))
		goto out;
	if ((f = fopen(b.pidfile, "we"))) {
		snprintf(pidbuf, sizeof pidbuf, "%d\n", (int)b.pid);
		fputs(pidbuf, f);
		fclose(f);
	}
	deadline = sb_now_ms() + WARM_BOOT_MS;
	if ((rc = sb_unix_accept(b.chan_lfd, WARM_BOOT_MS, &b.chan_fd)) ||
	    (rc = wait_hello(b.chan_fd, deadline)) ||
	    (rc = sb_unix_accept(b.qmp_lfd, 10000, &fd)) ||
	    (rc = sb_qmp_open(fd, 10000, &q)) ||
	    (rc = save_state(q, b.state, sb_now_ms() + WARM_SAVE_MS)))
		goto out;
	/* QEMU goes before its RAM is the image's: nothing writes it then */
	sb_proc_kill(b.pid, SIGKILL);
	sb_proc_wait(b.pid, 5000, NULL);
	b.pid = 0;
	/* the state last: its name is the image's being there */
	if ((rc = install(b.ram, ram)) || (rc = install(b.state, state)))
		goto out;
	if ((fd = open(cache, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		fsync(fd);
		close(fd);
	}
out:
	sb_qmp_close(q);
	build_clean(&b);
	return rc;
}

/* A build's arguments, owned by its thread. */
struct build_job {
	char home[PATH_MAX], key[SB_WARM_KEY_LEN + 1];
	char hash[80], kernel[PATH_MAX], initrd[PATH_MAX], rootfs[PATH_MAX];
	struct sb_warm_spec w;
};

static void *build_thread(void *arg)
{
	struct build_job *j = arg;
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL); /* the daemon's signals are not ours */
	sb_warm_build(j->home, j->key, &j->w);
	free(j);
	return NULL;
}

int sb_warm_build_async(const char *home, const char *key, const struct sb_warm_spec *w)
{
	struct build_job *j;
	pthread_attr_t at;
	pthread_t t;
	char state[WARM_PATH_MAX], ram[WARM_PATH_MAX];
	int err;

	if (sb_warm_find(home, key, state, ram, sizeof state) == SB_OK)
		return SB_OK;
	if (!(j = calloc(1, sizeof *j)))
		return SB_ERR_NOMEM;
	snprintf(j->home, sizeof j->home, "%s", home);
	snprintf(j->key, sizeof j->key, "%s", key);
	snprintf(j->hash, sizeof j->hash, "%s", w->template_hash);
	snprintf(j->kernel, sizeof j->kernel, "%s", w->kernel);
	snprintf(j->initrd, sizeof j->initrd, "%s", w->initrd ? w->initrd : "");
	snprintf(j->rootfs, sizeof j->rootfs, "%s", w->rootfs);
	j->w = *w;
	j->w.template_hash = j->hash;
	j->w.kernel = j->kernel;
	j->w.initrd = j->initrd[0] ? j->initrd : NULL;
	j->w.rootfs = j->rootfs;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	err = pthread_create(&t, &at, build_thread, j);
	pthread_attr_destroy(&at);
	if (err) {
		free(j);
		return sb_seterr(SB_ERR_IO, "cannot start the warm image's build: %s",
				 strerror(err));
	}
	return SB_OK;
}
