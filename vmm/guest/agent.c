/* agent.c - the guest agent: the microVM's /init.
 *
 * Boot: mount proc/sys/dev, load the initramfs's modules, bring lo up, open
 * the virtio port named sanbox.0, send HELLO and wait for SPEC. Run: mount
 * /dev/vda at /newroot, chroot there, write the inputs (INPUT frames after
 * the SPEC, see vmm/chan.h) into /workspace, create the events FIFO, start
 * the harness, then one poll loop forwards its output, the workspace
 * changes, its event lines and the tunnel until it exits. End: run.exited,
 * kill what is left, sync, unmount, DONE, power off. A setup failure is a
 * LOG frame and DONE {error} without run.exited.
 * Kernel command line `sanbox.probe=1`: print sanbox-probe-ok and power off.
 */
#include "vmm/guest/agent.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/random.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/bucket.h"
#include "engine/error.h"
#include "engine/mpack.h"
#include "engine/text.h"
#include "vmm/beneath.h"
#include "vmm/chan.h"

#define OUTPUT_RATE    64    /* agent.output events per second */
#define LINE_MAX_BYTES 65536 /* longest line forwarded from the FIFO */
#define LINE_HEAD      64    /* of a longer one, the bytes the host is told */
#define DRAIN_MS       1000  /* wait for the pipes after the harness exits */
#define DEFAULT_PATH   "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* An input file the SPEC announced; its content comes in INPUT frames. */
struct input {
	char *path; /* relative to the workspace, checked by path_ok */
	uint64_t size;
	mode_t mode;
};

struct spec {
	char **argv;	      /* NULL-terminated */
	char **env;	      /* NULL-terminated, the harness's whole environment */
	size_t nenv, env_cap; /* entries, and room for them (NULL after) */
	char *cwd;
	uint16_t tunnel_port;
	struct input *inputs;
	size_t ninputs;
	char **removes; /* workspace paths deleted before the inputs are written */
	size_t nremoves;
	struct agent_net net; /* its NIC (network acl) */
	unsigned char seed[32]; /* the seed given (a re-run's: its original's) */
	int seeded;
	uint64_t clock_s; /* the clock given at the harness's start, or 0 */
};

struct outpipe {
	int fd;		  /* -1 once at end of file */
	const char *name; /* "stdout" or "stderr" */
	char carry[4];	  /* an incomplete UTF-8 sequence kept for the next event */
	size_t ncarry;
};

struct agent {
	struct agent_port port;
	char machine_id[33]; /* a copy's new /etc/machine-id (RESTORED), or "" */
	int rooted;	     /* in the run's root file system */
	sb_chan_reader *rd;
	int port_hup; /* host not connected: retry later */
	int64_t port_retry;
	int announce; /* the host came back: say HELLO {resume} first */
	struct spec spec;
	pid_t harness;		 /* also its process group; 0 before start */
	int exited, status, sig; /* harness wait status, once exited */
	struct outpipe out[2];
	struct sb_bucket output; /* agent.output events: OUTPUT_RATE a second */
	int fifo_rd, fifo_wr;
	char *line;
	size_t line_len;
	int line_drop;
	struct watch *watch;
	struct tunnel *tunnel;
	int sigfd;
	int oldroot; /* the initramfs root, to leave the chroot */
	int mounted; /* how many of run_mounts[] are mounted */
	int cg_procs, cg_freeze; /* the harness's cgroup (-1: no freezer) */
	int frozen;		  /* cgroup.freeze is 1 (SYNC freeze) */
	int64_t frozen_at;	  /* since when (agent_now_ms) */
	struct execs execs;	  /* commands the host runs beside the harness */
};

/* Mounts made in /newroot, in order; unmounted in reverse. */
static const struct {
	const char *src, *dir, *type;
	unsigned long flags;
	const char *opts;
} run_mounts[] = {
    {"/dev/vda", AGENT_ROOT, "ext4", MS_NOATIME, NULL},
    {"proc", AGENT_ROOT "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL},
    {"sysfs", AGENT_ROOT "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL},
    {"devtmpfs", AGENT_ROOT "/dev", "devtmpfs", MS_NOSUID, NULL},
    {"devpts", AGENT_ROOT "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "ptmxmode=0666"},
    {"tmpfs", AGENT_ROOT "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"},
    {"tmpfs", AGENT_ROOT "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755"},
};
#define NRUN_MOUNTS (sizeof run_mounts / sizeof run_mounts[0])

/* ---- frames in ---- */

/* Reads what the port has into the reader. Returns 0, or -1 when the host
 * is not connected (read gives end of file). */
static int port_read(struct agent *ag)
{
	static char buf[65536];
	ssize_t n = read(ag->port.fd, buf, sizeof buf);

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return 0;
	if (n <= 0)
		return -1;
	if (sb_chan_reader_feed(ag->rd, buf, (size_t)n))
		agent_log(&ag->port, "channel: %s", sb_errmsg(SB_ERR_NOMEM));
	return 0;
}

/* Takes the next frame; logs and skips bad ones. Returns 0 or SB_END. */
static int next_frame(struct agent *ag, struct sb_chan_frame *f)
{
	int ret;

	for (;;) {
		ret = sb_chan_reader_next(ag->rd, f);
		if (ret == 0 || ret == SB_END)
			return ret;
		agent_log(&ag->port, "bad frame from host: %s", sb_errmsg(ret));
		if (!sb_chan_reader_error(ag->rd))
			continue; /* that frame was skipped */
		/* Framing lost (bad length): look for the next frame. */
		sb_chan_reader_resync(ag->rd);
	}
}

static void send_hello(struct agent *ag, int resume);

/* The host went away (its end of the port closed): the reader looks for
 * the next whole frame (the last one may have been cut), and the next
 * daemon gets HELLO again. */
static void host_gone(struct agent *ag)
{
	sb_chan_reader_resync(ag->rd);
	ag->announce = 1;
}

/* Waits for the next frame from the host (it may not be connected yet),
 * answering ACK itself. A host that went away and came back (a restarted
 * daemon) gets HELLO again: it has not seen the SPEC's request. */
static void wait_frame(struct agent *ag, struct sb_chan_frame *f)
{
	for (;;) {
		while (next_frame(ag, f) == SB_END) {
			if (ag->announce) {
				ag->announce = 0;
				send_hello(ag, 0); /* blocks until a host is there */
			}
			if (port_read(ag)) { /* host not connected */
				host_gone(ag);
				usleep(100 * 1000);
			}
		}
		if (f->kind != SB_CHAN_ACK)
			return;
		agent_ack(&ag->port, &f->body);
	}
}

/* ---- the spec ---- */

static char *dup_str(const msgpack_object *o)
{
	if (!o || o->type != MSGPACK_OBJECT_STR ||
	    memchr(o->via.str.ptr, 0, o->via.str.size))
		return NULL;
	return strndup(o->via.str.ptr, o->via.str.size);
}

/* Copies an array of strings into a NULL-terminated vector with room for
 * extra more entries. */
static char **dup_strv(const msgpack_object *o, size_t extra, size_t *count)
{
	char **v;
	uint32_t i;

	if (!o || o->type != MSGPACK_OBJECT_ARRAY)
		return NULL;
	v = calloc(o->via.array.size + extra + 1, sizeof *v);
	if (!v)
		return NULL;
	for (i = 0; i < o->via.array.size; i++) {
		v[i] = dup_str(&o->via.array.ptr[i]);
		if (!v[i]) {
			while (i--)
				free(v[i]);
			free(v);
			return NULL;
		}
	}
	*count = o->via.array.size;
	return v;
}

/* The variables spec_parse sets (env_set) beside the SPEC's own. */
#define ENV_SET 7

/* Sets key=value in the environment unless key is there (or always when
 * force is set). */
static void env_set(struct spec *s, const char *key, const char *value, int force)
{
	size_t i, klen = strlen(key);
	char *kv;

	if (asprintf(&kv, "%s=%s", key, value) < 0)
		return;
	for (i = 0; i < s->nenv; i++) {
		if (strncmp(s->env[i], key, klen) == 0 && s->env[i][klen] == '=') {
			if (force) {
				free(s->env[i]);
				s->env[i] = kv;
			} else {
				free(kv);
			}
			return;
		}
	}
	if (s->nenv == s->env_cap) { /* more than ENV_SET: a bug, not a crash */
		free(kv);
		return;
	}
	s->env[s->nenv++] = kv;
}

/* A relative path of plain components: no "", "." or "..", no NUL. */
static int path_ok(const char *p, size_t n)
{
	size_t i = 0, start;

	if (n == 0 || n > 3000 || p[0] == '/' || memchr(p, 0, n))
		return 0;
	while (i < n) {
		start = i;
		while (i < n && p[i] != '/')
			i++;
		if (i == start || (i - start == 1 && p[start] == '.') ||
		    (i - start == 2 && p[start] == '.' && p[start + 1] == '.'))
			return 0;
		i++;
		if (i == n) /* trailing slash */
			return 0;
	}
	return 1;
}

/* Fills s->inputs from the SPEC's [{path, size, mode}], checking the paths
 * and the limits of vmm/chan.h; returns an error message or NULL. */
static const char *inputs_parse(const msgpack_object *list, struct spec *s)
{
	uint64_t total = 0;
	uint32_t i;

	if (!list || list->type == MSGPACK_OBJECT_NIL)
		return NULL;
	if (list->type != MSGPACK_OBJECT_ARRAY)
		return "SPEC inputs must be an array";
	if (list->via.array.size > SB_CHAN_INPUT_FILES)
		return "SPEC has too many input files";
	s->inputs = calloc(list->via.array.size + 1, sizeof *s->inputs);
	if (!s->inputs)
		return "out of memory";
	for (i = 0; i < list->via.array.size; i++) {
		const msgpack_object *in = &list->via.array.ptr[i];
		const msgpack_object *p = sb_map_get(in, "path");
		const msgpack_object *z = sb_map_get(in, "size");
		const msgpack_object *m = sb_map_get(in, "mode");
		struct input *x = &s->inputs[s->ninputs];

		if (!p || p->type != MSGPACK_OBJECT_STR ||
		    !path_ok(p->via.str.ptr, p->via.str.size))
			return "SPEC input path must be relative, without '.' or '..'";
		if (!z || z->type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
		    z->via.u64 > SB_CHAN_INPUTS_MAX - total)
			return "SPEC input sizes are missing or above the inputs limit";
		total += z->via.u64;
		x->size = z->via.u64;
		x->mode = 0644;
		if (m && m->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
		    (m->via.u64 & 07777))
			x->mode = m->via.u64 & 07777;
		if (m && m->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
		    (m->via.u64 & S_IFMT) == S_IFLNK) { /* its content: the target */
			if (x->size == 0 || x->size >= PATH_MAX)
				return "SPEC input link target must be 1 to 4095 bytes";
			x->mode |= S_IFLNK;
		}
		if (m && m->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
		    (m->via.u64 & S_IFMT) == S_IFDIR) { /* no content */
			if (x->size)
				return "SPEC input directory must have size 0";
			x->mode |= S_IFDIR;
		}
		if (!(x->path = dup_str(p)))
			return "out of memory";
		s->ninputs++;
	}
	return NULL;
}

/* SPEC remove: [path, ...]: workspace paths (as input paths) a resume's
 * roll-forward deletes. */
static const char *removes_parse(const msgpack_object *list, struct spec *s)
{
	if (!list || list->type == MSGPACK_OBJECT_NIL)
		return NULL;
	if (list->type != MSGPACK_OBJECT_ARRAY ||
	    list->via.array.size > SB_CHAN_INPUT_FILES)
		return "SPEC remove must be an array of at most 1024 paths";
	for (uint32_t i = 0; i < list->via.array.size; i++) {
		const msgpack_object *p = &list->via.array.ptr[i];
		if (p->type != MSGPACK_OBJECT_STR ||
		    !path_ok(p->via.str.ptr, p->via.str.size))
			return "SPEC remove paths must be relative, without '.' or '..'";
	}
	s->removes = dup_strv(list, 0, &s->nremoves);
	return s->removes ? NULL : "out of memory";
}

/* Fills s from the SPEC body; returns an error message or NULL. */
/* The SPEC's seed? (bin, 32 bytes) and clock_s? (uint) into s. */
static const char *start_parse(const msgpack_object *body, struct spec *s)
{
	const msgpack_object *seed = sb_map_get(body, "seed"), *t = sb_map_get(body, "clock_s");

	if (seed && (seed->type != MSGPACK_OBJECT_BIN || seed->via.bin.size != sizeof s->seed))
		return "SPEC seed must be 32 bytes";
	if (t && (t->type != MSGPACK_OBJECT_POSITIVE_INTEGER || t->via.u64 > INT32_MAX * 4ull))
		return "SPEC clock_s must be seconds since the epoch";
	if (seed)
		memcpy(s->seed, seed->via.bin.ptr, sizeof s->seed);
	s->seeded = seed != NULL;
	s->clock_s = t ? t->via.u64 : 0;
	return NULL;
}

static const char *spec_parse(const msgpack_object *body, struct spec *s)
{
	const msgpack_object *argv = sb_map_get(body, "argv");
	const msgpack_object *cwd = sb_map_get(body, "cwd");
	const msgpack_object *port = sb_map_get(body, "tunnel_port");
	const msgpack_object *env = sb_map_get(body, "env");
	msgpack_object none = {.type = MSGPACK_OBJECT_ARRAY};
	const char *err;
	size_t n = 0, i;
	char buf[64];

	if (body->type != MSGPACK_OBJECT_MAP)
		return "SPEC body is not a map";
	s->argv = dup_strv(argv, 0, &n);
	if (!s->argv || n == 0)
		return "SPEC argv must be a non-empty array of strings";
	if (env && env->type == MSGPACK_OBJECT_NIL)
		env = NULL;
	s->env = dup_strv(env ? env : &none, ENV_SET, &s->nenv);
	if (!s->env)
		return "SPEC env must be an array of strings";
	s->env_cap = s->nenv + ENV_SET;
	for (i = 0; i < s->nenv; i++)
		if (!strchr(s->env[i], '=') || s->env[i][0] == '=')
			return "SPEC env entries must be KEY=VALUE";
	s->cwd = cwd ? dup_str(cwd) : strdup(AGENT_WORKSPACE);
	if (!s->cwd || s->cwd[0] != '/')
		return "SPEC cwd must be an absolute path";
	if (port &&
	    (port->type != MSGPACK_OBJECT_POSITIVE_INTEGER || port->via.u64 > 65535))
		return "SPEC tunnel_port must be 0..65535";
	s->tunnel_port = port ? (uint16_t)port->via.u64 : 0;
	if ((err = inputs_parse(sb_map_get(body, "inputs"), s)))
		return err;
	if ((err = removes_parse(sb_map_get(body, "remove"), s)))
		return err;
	if ((err = agent_net_parse(sb_map_get(body, "net"), &s->net)))
		return err;
	if ((err = start_parse(body, s)))
		return err;

	env_set(s, "PATH", DEFAULT_PATH, 0);
	env_set(s, "HOME", "/root", 0);
	env_set(s, "SANBOX_EVENTS", AGENT_EVENTS, 1);
	env_set(s, "SANBOX_CONVERSATION", AGENT_CONVERSATION, 0);
	if (s->tunnel_port) {
		snprintf(buf, sizeof buf, "http://127.0.0.1:%u/v1", s->tunnel_port);
		env_set(s, "OPENAI_BASE_URL", buf, 0);
		snprintf(buf, sizeof buf, "http://127.0.0.1:%u", s->tunnel_port);
		env_set(s, "ANTHROPIC_BASE_URL", buf, 0);
	}
	return NULL;
}

static void handle_frame(struct agent *ag, const struct sb_chan_frame *f);

/* Receives the content of input file i, in (INPUT frames on stream i),
 * into fd (-1: drops it); returns an error message or NULL. Once the
 * harness runs (a PUT's files), the other frames that come meanwhile are
 * handled as the loop does. */
static const char *input_receive(struct agent *ag, const struct input *in, uint32_t i,
				 int fd)
{
	struct sb_chan_frame f;
	uint64_t got = 0;

	while (got < in->size) {
		wait_frame(ag, &f);
		if (f.kind == SB_CHAN_SIGNAL && !ag->harness)
			return "stopped by the host before the harness started";
		if (f.kind != SB_CHAN_INPUT && ag->harness && f.kind != SB_CHAN_PUT) {
			handle_frame(ag, &f);
			continue;
		}
		if (f.kind != SB_CHAN_INPUT) {
			agent_log(&ag->port,
				  "ignored %s frame while receiving the inputs",
				  sb_chan_kind_name(f.kind));
			continue;
		}
		if (f.stream != i || f.body.type != MSGPACK_OBJECT_BIN ||
		    f.body.via.bin.size == 0 || f.body.via.bin.size > SB_CHAN_DATA_MAX ||
		    f.body.via.bin.size > in->size - got)
			return "INPUT frame out of order, empty, too big or past the "
			       "file's size";
		if (fd >= 0 && agent_write_all(fd, f.body.via.bin.ptr, f.body.via.bin.size))
			return strerror(errno);
		got += f.body.via.bin.size;
	}
	return NULL;
}

/* The paths of the SPEC that could not be written or deleted under the
 * workspace without following a link (named to the host, at most
 * SKIPPED_NAMED of them). */
#define SKIPPED_NAMED 8
struct skipped {
	char paths[SKIPPED_NAMED][256];
	size_t n;
};

/* Notes rel as skipped (errno: why) when errno says a link or a
 * non-directory was in its way; returns 0 then, -1 for any other error. */
static int skip(struct agent *ag, struct skipped *sk, const char *rel, const char *what)
{
	int e = errno;

	if (e != ELOOP && e != ENOTDIR && e != EISDIR && e != ENAMETOOLONG && e != EINVAL)
		return -1;
	agent_log(&ag->port, "%s " AGENT_WORKSPACE "/%.300s skipped: %s", what, rel,
		  strerror(e));
	if (sk->n < SKIPPED_NAMED)
		snprintf(sk->paths[sk->n], sizeof sk->paths[0], "%s", rel);
	sk->n++;
	return 0;
}

/* Deletes the paths the SPEC names under the workspace (ws: its
 * descriptor; a file, a link, or a directory and all in it), before the
 * inputs are written; never through a link (vmm/beneath.h). */
static const char *remove_paths(struct agent *ag, int ws, struct skipped *sk)
{
	static char err[512];

	for (size_t i = 0; i < ag->spec.nremoves; i++) {
		const char *rel = ag->spec.removes[i];
		if ((ws < 0 ? (errno = ELOOP, -1) : sb_beneath_remove(ws, rel)) &&
		    skip(ag, sk, rel, "removing")) {
			snprintf(err, sizeof err, "removing " AGENT_WORKSPACE "/%.400s: %s",
				 rel, strerror(errno));
			return err;
		}
	}
	return NULL;
}

/* Makes input i, a link, under the workspace (ws): its target from its
 * INPUT frames (through a pipe: at most 4095 bytes). Returns an error
 * message, or NULL with *made 0 when it was skipped (errno: why). */
static const char *write_link(struct agent *ag, int ws, const struct input *in, uint32_t i,
			      int *made)
{
	char target[PATH_MAX];
	const char *why;
	int p[2];

	if (pipe2(p, O_CLOEXEC | O_NONBLOCK))
		return strerror(errno);
	why = input_receive(ag, in, i, p[1]);
	close(p[1]);
	if (!why && read(p[0], target, in->size) != (ssize_t)in->size)
		why = "a link's target was cut short";
	close(p[0]);
	if (why)
		return why;
	target[in->size] = 0;
	*made = !sb_beneath_symlink(ws, in->path, target);
	return NULL;
}

/* Makes directory in under the workspace (ws), or keeps the one there;
 * a link or a file at its path is replaced, never followed. Returns 0, or
 * -1 with errno set. */
static int write_dir(int ws, const struct input *in)
{
	const char *last;
	struct stat st;
	int dir, rc = -1;

	if ((dir = sb_beneath_parent(ws, in->path, 1, &last)) < 0)
		return -1;
	if (fstatat(dir, last, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode) &&
	    unlinkat(dir, last, 0))
		goto out;
	if (mkdirat(dir, last, in->mode & 07777) && errno != EEXIST)
		goto out;
	rc = fstatat(dir, last, &st, AT_SYMLINK_NOFOLLOW) || !S_ISDIR(st.st_mode)
		 ? (errno = ENOTDIR, -1)
		 : 0;
out:
	close(dir);
	return rc;
}

/* Writes the n inputs announced (a SPEC's or a PUT's) under the workspace
 * (ws), each from its INPUT frames, never through a link: a link at an
 * input's path is replaced; one on its way makes it skipped (its frames
 * read and dropped). */
static const char *write_inputs(struct agent *ag, int ws, const struct input *inputs,
				size_t n, struct skipped *sk, uint64_t *files,
				uint64_t *bytes)
{
	static char err[512];
	const char *why = NULL;
	uint32_t i;
	int fd;

	for (i = 0; i < n; i++) {
		const struct input *in = &inputs[i];
		int made = 0;

		if (S_ISDIR(in->mode)) {
			if ((ws < 0 ? (errno = ELOOP, -1) : write_dir(ws, in)) &&
			    skip(ag, sk, in->path, "input")) {
				why = strerror(errno);
				goto fail;
			}
			continue;
		}
		if (ws >= 0 && S_ISLNK(in->mode)) {
			if ((why = write_link(ag, ws, in, i, &made)))
				goto fail;
			if (!made && skip(ag, sk, in->path, "input")) {
				why = strerror(errno);
				goto fail;
			}
			*files += made;
			continue;
		}
		fd = ws < 0 ? (errno = ELOOP, -1) : sb_beneath_create(ws, in->path, in->mode);
		if (fd < 0 && !skip(ag, sk, in->path, "input")) {
			if ((why = input_receive(ag, in, i, -1))) /* its frames dropped */
				goto fail;
			continue;
		}
		if (fd < 0) {
			why = strerror(errno);
		} else {
			why = input_receive(ag, in, i, fd);
			if (!why && fchmod(fd, in->mode))
				why = strerror(errno);
			if (close(fd) && !why)
				why = strerror(errno);
		}
		if (why)
			goto fail;
		(*files)++;
		*bytes += in->size;
	}
	return NULL;
fail:
	snprintf(err, sizeof err, "input " AGENT_WORKSPACE "/%.400s: %s", inputs[i].path, why);
	return err;
}

/* Mounts the root disk and the file systems inside it, then chroots there. */
static const char *enter_root(struct agent *ag)
{
	static char err[256];
	size_t i;

	if (agent_wait_path("/dev/vda", 3000))
		return "no /dev/vda (root disk missing?)";
	for (i = 0; i < NRUN_MOUNTS; i++) {
		mkdir(run_mounts[i].dir, 0755);
		if (mount(run_mounts[i].src, run_mounts[i].dir, run_mounts[i].type,
			  run_mounts[i].flags, run_mounts[i].opts)) {
			snprintf(err, sizeof err, "mount %s: %s", run_mounts[i].dir,
				 strerror(errno));
			return err;
		}
		ag->mounted = (int)i + 1;
	}
	ag->oldroot = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (ag->oldroot < 0 || chdir(AGENT_ROOT) || chroot(".") || chdir("/"))
		return "chroot into the root disk failed";
	if (mkdir(AGENT_WORKSPACE, 0755) && errno != EEXIST)
		return "cannot create /workspace";
	return NULL;
}

/* Creates the events FIFO and opens both its ends (our writer keeps the
 * reader from seeing end of file when the harness closes it). */
static const char *open_fifo(struct agent *ag)
{
	if (agent_mkdirs(AGENT_EVENTS) ||
	    (mkfifo(AGENT_EVENTS, 0666) && errno != EEXIST) || chmod(AGENT_EVENTS, 0666))
		return "cannot create " AGENT_EVENTS;
	ag->fifo_rd = open(AGENT_EVENTS, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	ag->fifo_wr = open(AGENT_EVENTS, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
	ag->line = malloc(LINE_MAX_BYTES);
	if (ag->fifo_rd < 0 || ag->fifo_wr < 0 || !ag->line)
		return "cannot open " AGENT_EVENTS;
	return NULL;
}

/* The harness's own cgroup (v2), whose freezer stops all its processes
 * for a memory snapshot. Without one (a kernel without cgroup v2) the run
 * goes on: its copies may then run a moment before they are reseeded. */
static void cgroup_open(struct agent *ag)
{
	if ((mount("cgroup2", AGENT_CGROUP_FS, "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC,
		   NULL) &&
	     errno != EBUSY) ||
	    (mkdir(AGENT_CGROUP, 0755) && errno != EEXIST) ||
	    (ag->cg_procs = open(AGENT_CGROUP "/cgroup.procs", O_WRONLY | O_CLOEXEC)) < 0 ||
	    (ag->cg_freeze = open(AGENT_CGROUP "/cgroup.freeze", O_WRONLY | O_CLOEXEC)) < 0) {
		agent_log(&ag->port, "no cgroup freezer (%s): the harness is not frozen for "
				     "memory snapshots", strerror(errno));
		if (ag->cg_procs >= 0)
			close(ag->cg_procs);
		ag->cg_procs = -1;
	}
}

/* Freezes the harness's processes: none of them runs user code from the
 * write on (a task traps at its next return to user space, also in a
 * copy of this memory). Returns 1 when frozen. */
static int harness_freeze(struct agent *ag)
{
	if (!ag->frozen && ag->cg_freeze >= 0 && pwrite(ag->cg_freeze, "1", 1, 0) == 1) {
		ag->frozen = 1;
		ag->frozen_at = agent_now_ms();
	}
	return ag->frozen;
}

static void harness_thaw(struct agent *ag)
{
	if (ag->frozen && pwrite(ag->cg_freeze, "0", 1, 0) != 1)
		agent_log(&ag->port, "cannot thaw the harness: %s", strerror(errno));
	ag->frozen = 0;
}

/* Forks the harness: its own session and process group, chdir, pipes. */
static const char *start_harness(struct agent *ag)
{
	int out[2] = {-1, -1}, errp[2] = {-1, -1}, null;
	sigset_t none;
	size_t i;
	pid_t pid;

	if (pipe2(out, O_CLOEXEC) || pipe2(errp, O_CLOEXEC))
		return "pipe failed";
	pid = fork();
	if (pid < 0)
		return "fork failed";
	if (pid == 0) {
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		setsid();
		if (ag->cg_procs >= 0 && write(ag->cg_procs, "0", 1) != 1)
			dprintf(2, "sanbox-agent: joining the harness cgroup: %s\n",
				strerror(errno));
		null = open("/dev/null", O_RDWR);
		if (null >= 0)
			dup2(null, 0);
		dup2(out[1], 1);
		dup2(errp[1], 2);
		if (chdir(ag->spec.cwd)) {
			dprintf(2, "sanbox-agent: chdir %s: %s\n", ag->spec.cwd,
				strerror(errno));
			_exit(127);
		}
		environ = ag->spec.env;
		execvp(ag->spec.argv[0], ag->spec.argv);
		dprintf(2, "sanbox-agent: exec %s: %s\n", ag->spec.argv[0],
			strerror(errno));
		_exit(127);
	}
	ag->harness = pid;
	close(out[1]);
	close(errp[1]);
	ag->out[0] = (struct outpipe){.fd = out[0], .name = "stdout"};
	ag->out[1] = (struct outpipe){.fd = errp[0], .name = "stderr"};
	for (i = 0; i < 2; i++)
		fcntl(ag->out[i].fd, F_SETFL, O_NONBLOCK);
	return NULL;
}

/* HELLO {version, kernel, resume}: resume 1 once the run is set up. */
static void send_hello(struct agent *ag, int resume)
{
	struct agent_frame f;
	struct utsname u;
	sb_mapw *m;

	if (uname(&u))
		strcpy(u.release, "?");
	agent_frame_begin(&f, SB_CHAN_HELLO, 0);
	m = agent_frame_map(&f);
	sb_mapw_str(m, "version", AGENT_VERSION);
	sb_mapw_str(m, "kernel", u.release);
	sb_mapw_u64(m, "resume", (uint64_t)resume);
	agent_frame_send(&ag->port, &f);
}

/* Writes the machine id RESTORED gave into the run's /etc/machine-id, over
 * its old bytes: truncating it first would have ext4 write the file out
 * at close (auto_da_alloc), work a resume's first output waits for. */
static void machine_id_write(struct agent *ag)
{
	char line[34];
	struct stat st;
	size_t n;
	int fd;

	if (!ag->machine_id[0] || !ag->rooted)
		return;
	n = (size_t)snprintf(line, sizeof line, "%s\n", ag->machine_id);
	fd = open("/etc/machine-id", O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0444);
	if (fd < 0 || pwrite(fd, line, n, 0) != (ssize_t)n || fstat(fd, &st) ||
	    (st.st_size != (off_t)n && ftruncate(fd, (off_t)n)))
		agent_log(&ag->port, "cannot write /etc/machine-id: %s", strerror(errno));
	if (fd >= 0)
		close(fd);
}

/* A booted guest's machine id (none came with RESTORED): 16 bytes of the
 * kernel's randomness in hex, so no two runs share one, also a fork of a
 * disk snapshot, whose disk holds its parent's. */
static void machine_id_fresh(struct agent *ag)
{
	unsigned char b[16];
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);

	if (fd >= 0 && read(fd, b, sizeof b) == (ssize_t)sizeof b)
		for (size_t i = 0; i < sizeof b; i++)
			snprintf(ag->machine_id + 2 * i, 3, "%02x", b[i]);
	else
		agent_log(&ag->port, "cannot read /dev/urandom: %s", strerror(errno));
	if (fd >= 0)
		close(fd);
}

/* Mixes the n bytes of seed (16 to 64) into the kernel's pool, then has
 * the generator reseeded now (not at its next periodic reseed: a copy's
 * first bytes must differ already). */
static void entropy_add(struct agent *ag, const void *seed, size_t n)
{
	struct {
		int entropy_count, buf_size;
		unsigned char buf[64];
	} ent;
	int fd;

	ent.entropy_count = (int)n * 8;
	ent.buf_size = (int)n;
	memcpy(ent.buf, seed, n);
	if ((fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC)) < 0 ||
	    ioctl(fd, RNDADDENTROPY, &ent) || ioctl(fd, RNDRESEEDCRNG))
		agent_log(&ag->port, "cannot reseed the kernel's randomness: %s",
			  strerror(errno));
	if (fd >= 0)
		close(fd);
}

/* The harness's start: its seed (the SPEC's, else 32 fresh bytes) mixed
 * into the kernel's pool and given as SANBOX_SEED (64 hex digits), and the
 * clock set to a whole second (the SPEC's clock_s, else now's); both told
 * to the host in m (harness.input.ready's seed and clock_s), so a re-run
 * can be given them. */
static void start_seed(struct agent *ag, sb_mapw *m)
{
	struct spec *s = &ag->spec;
	struct timespec ts = {0};
	char hex[2 * sizeof s->seed + 1];
	int fd = -1;

	if (!s->seeded && ((fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC)) < 0 ||
			   read(fd, s->seed, sizeof s->seed) != (ssize_t)sizeof s->seed))
		agent_log(&ag->port, "cannot read /dev/urandom: %s", strerror(errno));
	if (!s->seeded && fd >= 0)
		close(fd);
	entropy_add(ag, s->seed, sizeof s->seed);
	for (size_t i = 0; i < sizeof s->seed; i++)
		snprintf(hex + 2 * i, 3, "%02x", s->seed[i]);
	env_set(s, "SANBOX_SEED", hex, 1);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec = s->clock_s ? (time_t)s->clock_s : ts.tv_sec;
	ts.tv_nsec = 0;
	if (clock_settime(CLOCK_REALTIME, &ts))
		agent_log(&ag->port, "cannot set the clock: %s", strerror(errno));
	sb_mapw_str(m, "seed", hex);
	sb_mapw_u64(m, "clock_s", (uint64_t)ts.tv_sec);
}

/* RESTORED {time_ns, seed, machine_id, net?}: this guest is a copy of a memory snapshot.
 * Its clock is the snapshot's and its randomness the snapshot's (a fork
 * would share both with its siblings): the host's time and fresh bytes
 * for the kernel's pool, then HELLO, so the host knows it is up. */
static void restored(struct agent *ag, const msgpack_object *body, int resume)
{
	const msgpack_object *t = sb_map_get(body, "time_ns"),
			     *seed = sb_map_get(body, "seed"),
			     *id = sb_map_get(body, "machine_id"),
			     *net = sb_map_get(body, "net");
	if (t && t->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
		struct timespec ts = {(time_t)(t->via.u64 / 1000000000u),
				      (long)(t->via.u64 % 1000000000u)};
		if (clock_settime(CLOCK_REALTIME, &ts))
			agent_log(&ag->port, "cannot set the clock: %s", strerror(errno));
	}
	if (seed && seed->type == MSGPACK_OBJECT_BIN && seed->via.bin.size >= 16 &&
	    seed->via.bin.size <= 64)
		entropy_add(ag, seed->via.bin.ptr, seed->via.bin.size);
	/* a copy of a run with a NIC: its new addresses */
	if (net) {
		struct agent_net n;
		const char *err = agent_net_parse(net, &n);
		if (err)
			agent_log(&ag->port, "RESTORED: %s", err);
		else if (agent_net_up(&ag->port, &ag->spec.net, &n) == 0) {
			ag->spec.net = n;
			if (ag->rooted && agent_net_resolv(&n))
				agent_log(&ag->port, "cannot write /etc/resolv.conf");
		}
	}
	/* a copy is another machine: its own id (now, or once rooted) */
	if (id && id->type == MSGPACK_OBJECT_STR && id->via.str.size == 32 &&
	    strspn(id->via.str.ptr, "0123456789abcdef") >= 32) {
		memcpy(ag->machine_id, id->via.str.ptr, 32);
		ag->machine_id[32] = 0;
		machine_id_write(ag);
	}
	/* what it kept is the original's, whose agent still has it: a copy
	 * numbers its own frames from 1 */
	sb_chan_ring_reset(&ag->port.ring);
	harness_thaw(ag); /* a copy's harness goes on only now */
	send_hello(ag, resume);
}

/* Waits for SPEC and sets the run up; returns an error message or NULL. */
/* Packs files, bytes and, when some were skipped, skipped and
 * skipped_paths (the first SKIPPED_NAMED) into m. */
static void pack_written(sb_mapw *m, uint64_t files, uint64_t bytes,
			 const struct skipped *sk)
{
	msgpack_packer *pk;

	sb_mapw_u64(m, "files", files);
	sb_mapw_u64(m, "bytes", bytes);
	if (!sk->n)
		return;
	sb_mapw_u64(m, "skipped", sk->n);
	pk = sb_mapw_key(m, "skipped_paths");
	msgpack_pack_array(pk, sk->n < SKIPPED_NAMED ? sk->n : SKIPPED_NAMED);
	for (size_t i = 0; i < sk->n && i < SKIPPED_NAMED; i++)
		sb_pack_str(pk, sk->paths[i]);
}

static const char *run_setup(struct agent *ag)
{
	struct sb_chan_frame f;
	struct agent_frame ev;
	uint64_t files = 0, bytes = 0;
	struct skipped sk = {0};
	const char *err;
	sb_mapw *m;
	int ws = -1;

	for (;;) {
		wait_frame(ag, &f);
		if (f.kind == SB_CHAN_SPEC)
			break;
		if (f.kind == SB_CHAN_RESTORED) { /* a warm start: a copy of this guest */
			restored(ag, &f.body, 0);
			continue;
		}
		agent_log(&ag->port, "ignored %s frame before SPEC",
			  sb_chan_kind_name(f.kind));
	}
	err = spec_parse(&f.body, &ag->spec);
	if (!err && agent_net_up(&ag->port, NULL, &ag->spec.net))
		err = "cannot configure the network device";
	if (!err && !(err = enter_root(ag))) {
		ag->rooted = 1;
		if (!ag->machine_id[0])
			machine_id_fresh(ag); /* a boot's */
		machine_id_write(ag);	      /* or a warm start's */
		if (agent_net_resolv(&ag->spec.net))
			err = "cannot write /etc/resolv.conf";
	}
	if (!err && (ag->spec.nremoves || ag->spec.ninputs))
		ws = open(AGENT_WORKSPACE, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (!err)
		err = remove_paths(ag, ws, &sk);
	if (!err)
		err = write_inputs(ag, ws, ag->spec.inputs, ag->spec.ninputs, &sk, &files,
				   &bytes);
	if (ws >= 0)
		close(ws);
	if (err)
		return err;
	if ((err = open_fifo(ag)))
		return err;
	if (watch_open(AGENT_WORKSPACE, &ag->port, &ag->watch))
		agent_log(&ag->port, "cannot watch " AGENT_WORKSPACE ": %s",
			  strerror(errno));
	if (ag->spec.tunnel_port &&
	    tunnel_open(ag->spec.tunnel_port, &ag->port, &ag->tunnel))
		return "cannot listen on the tunnel port";
	cgroup_open(ag);
	m = agent_event_begin(&ev, "harness.input.ready");
	pack_written(m, files, bytes, &sk);
	start_seed(ag, m);
	agent_frame_send(&ag->port, &ev);
	return start_harness(ag);
}

/* PUT {inputs} on stream id: writes the files that follow in INPUT frames
 * under the workspace as the SPEC's inputs are (never through a link),
 * then PUT_DONE {files, bytes, skipped?, skipped_paths?, error?}. */
static void put_handle(struct agent *ag, uint64_t id, const msgpack_object *body)
{
	struct spec s = {0};
	struct skipped sk = {0};
	struct agent_frame f;
	uint64_t files = 0, bytes = 0;
	const char *err;
	sb_mapw *m;
	int ws = -1;

	err = inputs_parse(sb_map_get(body, "inputs"), &s);
	if (!err)
		ws = open(AGENT_WORKSPACE, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (!err)
		err = write_inputs(ag, ws, s.inputs, s.ninputs, &sk, &files, &bytes);
	if (ws >= 0)
		close(ws);
	for (size_t i = 0; i < s.ninputs; i++)
		free(s.inputs[i].path);
	free(s.inputs);
	if (err)
		agent_log(&ag->port, "put %llu: %s", (unsigned long long)id, err);
	agent_frame_begin(&f, SB_CHAN_PUT_DONE, id);
	m = agent_frame_map(&f);
	pack_written(m, files, bytes, &sk);
	if (err)
		sb_mapw_str(m, "error", err);
	agent_frame_send(&ag->port, &f);
}

/* ---- the loop ---- */

static void send_output(struct agent *ag, struct outpipe *o, const char *data, size_t len)
{
	struct agent_frame f;

	sb_mapw *m = agent_event_begin(&f, "agent.output");

	sb_mapw_str(m, "stream", o->name);
	sb_mapw_strn(m, "data", data, len);
	agent_frame_send(&ag->port, &f);
	ag->output.tokens -= 1; /* the pipe was read only with a token there */
}

/* Reads one event's worth of a harness pipe. */
static void out_read(struct agent *ag, struct outpipe *o)
{
	char buf[SB_CHAN_OUTPUT_MAX];
	size_t total, keep;
	ssize_t n;

	memcpy(buf, o->carry, o->ncarry);
	n = read(o->fd, buf + o->ncarry, sizeof buf - o->ncarry);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		if (o->ncarry)
			send_output(ag, o, buf, o->ncarry);
		o->ncarry = 0;
		close(o->fd);
		o->fd = -1;
		return;
	}
	total = o->ncarry + (size_t)n;
	keep = total - sb_utf8_cut(buf, total, total); /* an unfinished character waits */
	if (total > keep)
		send_output(ag, o, buf, total - keep);
	memcpy(o->carry, buf + total - keep, keep);
	o->ncarry = keep;
}

static void send_event_json(struct agent *ag, const char *line, size_t len)
{
	struct agent_frame f;

	agent_frame_begin(&f, SB_CHAN_EVENT_JSON, 0);
	msgpack_pack_bin(&f.pk, len);
	msgpack_pack_bin_body(&f.pk, line, len);
	agent_frame_send(&ag->port, &f);
}

/* Tells the host a line over LINE_MAX_BYTES was dropped (it counts and
 * warns): an EVENT_JSON whose body is {too_long, head} instead of the
 * line's bytes, head being its first LINE_HEAD bytes. */
static void send_line_dropped(struct agent *ag, const char *head, size_t len)
{
	struct agent_frame f;
	sb_mapw *m;

	agent_frame_begin(&f, SB_CHAN_EVENT_JSON, 0);
	m = agent_frame_map(&f);
	sb_mapw_u64(m, "too_long", LINE_MAX_BYTES);
	sb_mapw_bin(m, "head", head, len < LINE_HEAD ? len : LINE_HEAD);
	agent_frame_send(&ag->port, &f);
}

/* 1 while the events FIFO holds bytes not read yet (the harness ended
 * while the host was behind: they are sent before the end). */
static int fifo_pending(const struct agent *ag)
{
	int n = 0;

	return ag->fifo_rd >= 0 && ioctl(ag->fifo_rd, FIONREAD, &n) == 0 && n > 0;
}

/* Forwards each whole line the FIFO holds; drops lines over the limit.
 * Stops once the host is behind (agent_port_full): a harness writing as
 * fast as it is read would otherwise never let the FIFO empty, and the
 * kept frames would grow until the guest's memory ran out. */
static void fifo_read(struct agent *ag)
{
	char buf[16384], *p, *nl, *end;
	size_t seg;
	ssize_t n;

	while (!agent_port_full(&ag->port)) {
		n = read(ag->fifo_rd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		for (p = buf, end = buf + n; p < end; p = nl ? nl + 1 : end) {
			nl = memchr(p, '\n', (size_t)(end - p));
			seg = (size_t)((nl ? nl : end) - p);
			if (!ag->line_drop && ag->line_len + seg > LINE_MAX_BYTES) {
				send_line_dropped(ag, ag->line, ag->line_len);
				ag->line_drop = 1;
				ag->line_len = 0;
			}
			if (!ag->line_drop) {
				memcpy(ag->line + ag->line_len, p, seg);
				ag->line_len += seg;
			}
			if (!nl)
				continue;
			if (!ag->line_drop && ag->line_len)
				send_event_json(ag, ag->line, ag->line_len);
			ag->line_drop = 0;
			ag->line_len = 0;
		}
	}
}

static void reap(struct agent *ag)
{
	struct signalfd_siginfo si;
	pid_t pid;
	int st;

	while (read(ag->sigfd, &si, sizeof si) == sizeof si)
		;
	while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
		if (exec_reaped(&ag->execs, pid, st) || pid != ag->harness || ag->exited)
			continue;
		ag->exited = 1;
		if (WIFSIGNALED(st)) {
			ag->sig = WTERMSIG(st);
			ag->status = 128 + ag->sig;
		} else {
			ag->status = WEXITSTATUS(st);
		}
	}
}

/* Sends what the harness wrote to its pipes so far (also past the output
 * rate: it is owed). */
static void out_flush(struct agent *ag)
{
	for (size_t i = 0; i < 2; i++) {
		for (int k = 0; k < 16 && ag->out[i].fd >= 0; k++) {
			struct pollfd p = {.fd = ag->out[i].fd, .events = POLLIN};
			if (poll(&p, 1, 0) <= 0)
				break;
			out_read(ag, &ag->out[i]);
		}
	}
}

/* Writes the root file system's journal out to its place (a freeze and a
 * thaw: ext4 checkpoints its journal to freeze), so that a reader of the
 * disk that replays no journal (sanbox fs, libext2fs) finds every file
 * sync() wrote, its inode too. */
static void fs_checkpoint(struct agent *ag)
{
	int fd;

	if (!ag->rooted || (fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return;
	if (ioctl(fd, FIFREEZE, 0) == 0) {
		if (ioctl(fd, FITHAW, 0))
			agent_log(&ag->port, "cannot thaw the root file system: %s",
				  strerror(errno));
	} else if (errno != EBUSY) { /* EBUSY: frozen already (by the harness) */
		agent_log(&ag->port, "cannot checkpoint the root file system: %s",
			  strerror(errno));
	}
	close(fd);
}

/* SYNC {id, freeze?}: with freeze (a memory snapshot follows) the harness
 * is frozen and what it wrote before is sent; the changes seen so far are
 * reported and every file is written out to the disk, then SYNCED {id,
 * frozen} (the host snapshots next). */
static void send_synced(struct agent *ag, const msgpack_object *body)
{
	const msgpack_object *id = sb_map_get(body, "id");
	struct agent_frame f;
	int frozen = 0;
	sb_mapw *m;

	if (!id || id->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
		agent_log(&ag->port, "SYNC without an id");
		return;
	}
	if (sb_map_bool(body, "freeze", 0)) {
		frozen = harness_freeze(ag);
		out_flush(ag);
	}
	if (ag->watch && watch_read(ag->watch)) {
		watch_close(ag->watch);
		ag->watch = NULL;
	}
	sync();
	fs_checkpoint(ag);
	agent_frame_begin(&f, SB_CHAN_SYNCED, 0);
	m = agent_frame_map(&f);
	sb_mapw_u64(m, "id", id->via.u64);
	sb_mapw_bool(m, "frozen", frozen);
	agent_frame_send(&ag->port, &f);
}

static void handle_frame(struct agent *ag, const struct sb_chan_frame *f)
{
	const msgpack_object *sig;

	switch (f->kind) {
	case SB_CHAN_SIGNAL:
		sig = sb_map_get(&f->body, "signal");
		if (!sig || sig->type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
		    sig->via.u64 < 1 || sig->via.u64 > 64) {
			agent_log(&ag->port, "SIGNAL without a valid signal number");
			break;
		}
		harness_thaw(ag); /* frozen, it could not act on it */
		if (ag->harness && !ag->exited && kill(-ag->harness, (int)sig->via.u64))
			agent_log(&ag->port, "kill: %s", strerror(errno));
		break;
	case SB_CHAN_DATA:
	case SB_CHAN_CLOSE:
		if (ag->tunnel)
			tunnel_frame(ag->tunnel, f->kind, f->stream, &f->body);
		break;
	case SB_CHAN_SYNC: send_synced(ag, &f->body); break;
	case SB_CHAN_RESTORED: restored(ag, &f->body, 1); break;
	case SB_CHAN_THAW: harness_thaw(ag); break;
	case SB_CHAN_ACK: agent_ack(&ag->port, &f->body); break;
	case SB_CHAN_EXEC:
		exec_start(&ag->port, &ag->execs, f->stream, &f->body, ag->spec.env);
		break;
	case SB_CHAN_PUT: put_handle(ag, f->stream, &f->body); break;
	default:
		agent_log(&ag->port, "ignored %s frame while running",
			  sb_chan_kind_name(f->kind));
	}
}

enum {
	P_PORT,
	P_OUT0,
	P_OUT1,
	P_FIFO,
	P_WATCH,
	P_SIG,
	P_EXEC,
	P_TUNNEL = P_EXEC + 2 * SB_CHAN_EXECS_MAX
};

/* Runs until the harness has exited and its pipes are drained. */
static void run_loop(struct agent *ag)
{
	struct pollfd *pfd = NULL;
	struct sb_chan_frame f;
	int64_t now, deadline = 0, wait;
	size_t n, cap = 0, ntun, i;
	int timeout, killed = 0, full;

	sb_bucket_init(&ag->output, OUTPUT_RATE, OUTPUT_RATE,
		       (double)agent_now_ms() / 1000);
	for (;;) {
		now = agent_now_ms();
		sb_bucket_refill(&ag->output, (double)now / 1000);
		/* the host is behind: what the harness makes waits (its
		 * writes block), the host's ACKs come through the port; the
		 * drain's deadline waits too */
		full = agent_port_full(&ag->port);
		if (ag->exited && (!deadline || full))
			deadline = now + DRAIN_MS;
		if (ag->exited && ag->out[0].fd < 0 && ag->out[1].fd < 0 && !fifo_pending(ag))
			break;
		if (deadline && now >= deadline) {
			if (killed)
				break;
			/* Something the harness left behind holds its pipes. */
			kill(-ag->harness, SIGKILL);
			killed = 1;
			deadline = now + DRAIN_MS;
		}
		n = P_TUNNEL + (ag->tunnel ? tunnel_poll_count(ag->tunnel) : 0);
		if (n > cap) {
			free(pfd);
			cap = n + 16;
			pfd = calloc(cap, sizeof *pfd);
			if (!pfd)
				break;
		}
		if (ag->port_hup && now >= ag->port_retry)
			ag->port_hup = 0;
		if (ag->frozen && now - ag->frozen_at >= AGENT_FREEZE_MAX_MS) {
			agent_log(&ag->port, "no THAW came: the harness goes on");
			harness_thaw(ag);
		}
		pfd[P_PORT] = (struct pollfd){.fd = ag->port_hup ? -1 : ag->port.fd,
					      .events = POLLIN};
		for (i = 0; i < 2; i++)
			pfd[P_OUT0 + i] = (struct pollfd){
			    .fd = ag->output.tokens >= 1 && !full ? ag->out[i].fd : -1,
			    .events = POLLIN};
		pfd[P_FIFO] = (struct pollfd){.fd = full ? -1 : ag->fifo_rd,
					      .events = POLLIN};
		pfd[P_WATCH] = (struct pollfd){
		    .fd = ag->watch && !full ? watch_fd(ag->watch) : -1, .events = POLLIN};
		pfd[P_SIG] = (struct pollfd){.fd = ag->sigfd, .events = POLLIN};
		exec_poll_fill(&ag->execs, pfd + P_EXEC);
		ntun = ag->tunnel ? tunnel_poll_fill(ag->tunnel, pfd + P_TUNNEL) : 0;

		wait = -1;
		if (ag->output.tokens < 1 && !full)
			wait = (int64_t)(sb_bucket_wait(&ag->output) * 1000) + 1;
		if (deadline && (wait < 0 || deadline - now < wait))
			wait = deadline - now;
		if (ag->port_hup && (wait < 0 || ag->port_retry - now < wait))
			wait = ag->port_retry - now;
		if (ag->frozen && (wait < 0 || ag->frozen_at + AGENT_FREEZE_MAX_MS - now < wait))
			wait = ag->frozen_at + AGENT_FREEZE_MAX_MS - now;
		if (exec_wait_ms(&ag->execs, now) >= 0 &&
		    (wait < 0 || exec_wait_ms(&ag->execs, now) < wait))
			wait = exec_wait_ms(&ag->execs, now);
		timeout = wait < 0 ? -1 : (int)wait;
		if (poll(pfd, P_TUNNEL + ntun, timeout) < 0) {
			if (errno != EINTR)
				agent_log(&ag->port, "poll: %s", strerror(errno));
			continue;
		}
		if (pfd[P_PORT].revents) {
			if (port_read(ag)) {
				ag->port_hup = 1;
				ag->port_retry = agent_now_ms() + 200;
				host_gone(ag);
				/* the streams' host ends went with the host */
				tunnel_close(ag->tunnel);
				ag->tunnel = NULL;
				if (ag->spec.tunnel_port &&
				    tunnel_open(ag->spec.tunnel_port, &ag->port,
						&ag->tunnel))
					agent_log(
					    &ag->port,
					    "cannot listen on the tunnel port again");
			}
			while (next_frame(ag, &f) == 0)
				handle_frame(ag, &f);
		} else if (ag->announce && pfd[P_PORT].fd >= 0) {
			ag->announce = 0; /* the host is back: say so */
			send_hello(ag, 1);
		}
		for (i = 0; i < 2; i++)
			if (pfd[P_OUT0 + i].revents && ag->out[i].fd >= 0)
				out_read(ag, &ag->out[i]);
		if (pfd[P_FIFO].revents)
			fifo_read(ag);
		if (pfd[P_WATCH].revents && watch_read(ag->watch)) {
			watch_close(ag->watch);
			ag->watch = NULL;
		}
		if (ag->tunnel && ntun)
			tunnel_poll_handle(ag->tunnel, pfd + P_TUNNEL, ntun);
		exec_poll_handle(&ag->port, &ag->execs, pfd + P_EXEC);
		if (pfd[P_SIG].revents)
			reap(ag);
		exec_tick(&ag->port, &ag->execs, agent_now_ms());
	}
	free(pfd);
}

/* ---- the end ---- */

/* Kills every process but us and reaps them (up to 1 s). */
static void kill_all(struct agent *ag)
{
	int64_t end = agent_now_ms() + 1000;

	if (ag->harness)
		kill(-ag->harness, SIGKILL);
	kill(-1, SIGKILL);
	while (waitpid(-1, NULL, WNOHANG) >= 0 && agent_now_ms() < end)
		usleep(5000);
}

/* Leaves the chroot and unmounts the new root: lazily when still busy,
 * after a read-only remount so the disk is consistent. */
static void leave_root(struct agent *ag)
{
	int i;

	if (ag->cg_procs >= 0) {
		close(ag->cg_procs);
		close(ag->cg_freeze);
		ag->cg_procs = ag->cg_freeze = -1;
		umount2(AGENT_CGROUP_FS, MNT_DETACH);
	}
	if (ag->oldroot >= 0) {
		if (fchdir(ag->oldroot) || chroot(".") || chdir("/"))
			agent_log(&ag->port, "cannot leave the chroot: %s",
				  strerror(errno));
		close(ag->oldroot);
		ag->oldroot = -1;
	}
	sync();
	for (i = ag->mounted - 1; i >= 0; i--) {
		if (umount2(run_mounts[i].dir, 0) == 0)
			continue;
		if (i == 0) {
			agent_log(&ag->port, "umount %s: %s; unmounting lazily",
				  run_mounts[i].dir, strerror(errno));
			if (mount(NULL, run_mounts[i].dir, NULL, MS_REMOUNT | MS_RDONLY,
				  NULL))
				agent_log(&ag->port, "remount read-only: %s",
					  strerror(errno));
		}
		umount2(run_mounts[i].dir, MNT_DETACH);
	}
	ag->mounted = 0;
	ag->rooted = 0;
	sync();
}

/* Waits until the host has acknowledged every numbered frame (what it did
 * not commit must not end with the machine), answering its frames and
 * saying HELLO to a host that comes back. */
static void wait_acked(struct agent *ag)
{
	struct sb_chan_frame f;

	while (ag->port.ring.n) {
		struct pollfd p = {.fd = ag->port.fd, .events = POLLIN};
		if (ag->announce) {
			ag->announce = 0;
			send_hello(ag, 1); /* blocks until a host is there */
		}
		if (poll(&p, 1, 1000) <= 0)
			continue;
		if (port_read(ag)) { /* host not connected */
			host_gone(ag);
			usleep(100 * 1000);
			continue;
		}
		while (next_frame(ag, &f) == 0)
			handle_frame(ag, &f);
	}
}

/* Ends the run: run.exited (when the harness ran), cleanup, DONE (with err
 * when the setup failed), power off. */
static void finish(struct agent *ag, const char *err)
{
	struct agent_frame f;
	sb_mapw *m;

	if (err)
		agent_log(&ag->port, "run setup failed: %s", err);
	if (ag->fifo_rd >= 0)
		fifo_read(ag);
	if (ag->watch)
		watch_read(ag->watch);
	if (ag->harness && ag->exited) {
		m = agent_event_begin(&f, "run.exited");
		sb_mapw_i64(m, "status", ag->status);
		sb_mapw_u64(m, "signal", (uint64_t)ag->sig);
		agent_frame_send(&ag->port, &f);
	}
	exec_kill_all(&ag->execs);
	tunnel_close(ag->tunnel);
	ag->tunnel = NULL;
	watch_close(ag->watch);
	ag->watch = NULL;
	if (ag->fifo_rd >= 0)
		close(ag->fifo_rd);
	if (ag->fifo_wr >= 0)
		close(ag->fifo_wr);
	kill_all(ag);
	leave_root(ag);
	wait_acked(ag);
	agent_frame_begin(&f, SB_CHAN_DONE, 0);
	m = agent_frame_map(&f);
	if (err)
		sb_mapw_str(m, "error", err);
	agent_frame_send(&ag->port, &f);
	agent_poweroff();
}

/* With `sanbox.debug=1` on the kernel command line, prints the time since
 * boot of each start-up step on the console. */
static void stage(const struct agent *ag, int debug, const char *what)
{
	struct timespec ts;

	if (!debug || ag->port.console < 0)
		return;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	dprintf(ag->port.console, "sanbox-agent: %s at %lld ms\n", what,
		(long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

int main(void)
{
	static struct agent ag;
	const char *err;
	sigset_t chld;
	int debug;

	ag.port.fd = ag.port.console = -1;
	ag.fifo_rd = ag.fifo_wr = ag.sigfd = ag.oldroot = -1;
	ag.cg_procs = ag.cg_freeze = -1;
	ag.out[0].fd = ag.out[1].fd = -1;
	umask(022);
	signal(SIGPIPE, SIG_IGN);
	if (agent_mount_early())
		agent_log(&ag.port, "early mounts: %s", strerror(errno));
	ag.port.console = open("/dev/console", O_WRONLY | O_NOCTTY | O_CLOEXEC);
	debug = agent_cmdline_has("sanbox.debug=1");
	stage(&ag, debug, "init");
	if (agent_cmdline_has("sanbox.probe=1")) {
		if (ag.port.console >= 0)
			dprintf(ag.port.console, "sanbox-probe-ok\n");
		agent_poweroff();
	}
	agent_load_modules(&ag.port, "/etc/sanbox/modules");
	stage(&ag, debug, "modules loaded");
	if (agent_lo_up())
		agent_log(&ag.port, "lo: %s", strerror(errno));
	if (sethostname("sanbox", 6))
		agent_log(&ag.port, "hostname: %s", strerror(errno));
	if (agent_port_open("sanbox.0", 5000, &ag.port.fd)) {
		agent_log(&ag.port, "no virtio port named sanbox.0: %s", strerror(errno));
		agent_poweroff();
	}
	if (sb_chan_reader_new(&ag.rd))
		agent_poweroff();
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	ag.sigfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
	stage(&ag, debug, "port open");
	send_hello(&ag, 0);
	err = run_setup(&ag);
	stage(&ag, debug, "harness started");
	if (!err)
		run_loop(&ag);
	finish(&ag, err);
	return 0;
}
