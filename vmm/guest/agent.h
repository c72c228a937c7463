/* agent.h - the guest agent (the microVM's /init): shared declarations.
 *
 * The agent is one static, single-threaded program. agent.c runs the boot,
 * the run spec, the harness and the poll loop; send.c writes frames to the
 * host; sys.c does the system set-up (mounts, modules, the port); watch.c
 * reports workspace changes; tunnel.c carries TCP streams over the channel.
 * Functions return 0 or -1 (errno set) unless stated; they never exit.
 */
#ifndef SB_GUEST_AGENT_H
#define SB_GUEST_AGENT_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <msgpack.h>

#include "engine/mpack.h"
#include "vmm/chan.h"

#define AGENT_VERSION	SB_CHAN_VERSION /* vmm/chan.h: the host requires it */
#define AGENT_ROOT	"/newroot"	/* where /dev/vda is mounted */
#define AGENT_WORKSPACE "/workspace"	/* inside the new root */
#define AGENT_EVENTS	"/run/sanbox/events"
#define AGENT_CGROUP_FS "/sys/fs/cgroup"		/* cgroup v2, inside the new root */
#define AGENT_CGROUP	AGENT_CGROUP_FS "/sanbox-harness" /* the harness's */
#define AGENT_FREEZE_MAX_MS 30000 /* a freeze no THAW ends is ended then */
#define AGENT_CONVERSATION                                                               \
	"/var/lib/sanbox/conversation.json" /* the harness keeps its own there */

#define AGENT_KEEP_BYTES  (4u << 20) /* kept frames' bytes before the harness waits */
#define AGENT_KEEP_FRAMES 4096	     /* ... and their count */

/* The channel to the host. */
struct agent_port {
	int fd;	     /* /dev/vportNpM, -1 until found */
	int console; /* /dev/console for diagnostics, -1 if none */
	struct sb_chan_ring ring; /* numbered frames the host has not acknowledged */
};

/* A frame being built: begin, pack the body with .pk (or, for a map, its
 * pairs into the map agent_frame_map or agent_event_begin gives), then
 * send. It must not move in between. */
struct agent_frame {
	msgpack_sbuffer sb;
	msgpack_packer pk;
	sb_mapw map; /* the body's map, once begun */
	int mapped;
	size_t start; /* of a frame that is not numbered: its header's offset */
	int kind;
};

/* send.c */

/* Starts a frame of kind on stream; the caller packs exactly one body
 * object with f->pk (or calls agent_frame_map), then calls
 * agent_frame_send(), which frees f. */
void agent_frame_begin(struct agent_frame *f, int kind, uint64_t stream);

/* Begins f's body as a map and returns it: the caller packs its pairs into
 * it (engine/mpack.h); agent_frame_send() ends it. */
sb_mapw *agent_frame_map(struct agent_frame *f);

/* Sends f to the host (blocking) and frees its buffer; a body map that
 * could not be packed fails it. A numbered frame
 * (EVENT, EVENT_JSON) takes the next guest seq and is kept in p->ring
 * until the host acknowledges it, also when it could not be written now.
 * Returns 0 or -1. */
int agent_frame_send(struct agent_port *p, struct agent_frame *f);

/* ACK {seq, resend?} from the host: drops the kept frames up to seq; with
 * resend, sends RESEND {next} and every kept frame again, in order. */
void agent_ack(struct agent_port *p, const msgpack_object *body);

/* 1 when p keeps AGENT_KEEP_BYTES or AGENT_KEEP_FRAMES: the harness's
 * pipes, its events and the workspace wait until the host catches up. */
int agent_port_full(const struct agent_port *p);

/* Starts an EVENT frame {type, payload: map} and returns the payload map:
 * the caller packs its pairs into it, then calls agent_frame_send(). */
sb_mapw *agent_event_begin(struct agent_frame *f, const char *type);

/* Writes len bytes of buf to fd, going on after short writes and EINTR.
 * Returns 0, or -1 with errno set. */
int agent_write_all(int fd, const char *buf, size_t len);

/* Writes a diagnostic line to the console and, when the port is open, as a
 * LOG frame. Never fails. */
void agent_log(struct agent_port *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* net.c */

/* The NIC the host gave (network acl), from the SPEC's or RESTORED's net. */
struct agent_net {
	int on; /* 0: network none, no NIC */
	char mac[18];
	char addr4[16], gw4[16];
	int prefix4;
	char addr6[48], gw6[48]; /* "" without IPv6 */
	int prefix6;
};

/* Fills n from o (NULL: no NIC). Returns an error message or NULL. */
const char *agent_net_parse(const msgpack_object *o, struct agent_net *n);

/* Configures the interface whose MAC n names: its addresses and default
 * routes; old's IPv6 address (a copy's earlier one; NULL: none) goes.
 * Nothing to do without a NIC. Logs to p what failed. */
int agent_net_up(struct agent_port *p, const struct agent_net *old,
		 const struct agent_net *n);

/* Writes /etc/resolv.conf (of the current root) naming the host's stub. */
int agent_net_resolv(const struct agent_net *n);

/* sys.c */

/* Mounts proc, sysfs and devtmpfs on /proc, /sys and /dev. */
int agent_mount_early(void);

/* Returns 1 when the kernel command line holds word (e.g. "sanbox.probe=1"). */
int agent_cmdline_has(const char *word);

/* Loads the modules listed one path a line in list (missing list: nothing
 * to do). Logs each failure to p and goes on. Returns how many failed. */
int agent_load_modules(struct agent_port *p, const char *list);

/* Brings the loopback interface up. */
int agent_lo_up(void);

/* Finds the virtio port named name in /sys/class/virtio-ports (waiting up to
 * wait_ms for it and its /dev node) and opens it read-write into *fd. */
int agent_port_open(const char *name, int wait_ms, int *fd);

/* Waits up to wait_ms for path to exist. */
int agent_wait_path(const char *path, int wait_ms);

/* Powers the machine off; never returns. */
void agent_poweroff(void) __attribute__((noreturn));

/* Milliseconds of a monotonic clock. */
int64_t agent_now_ms(void);

/* Creates the directories of path's prefix up to its last '/' (mode 0755),
 * without following symbolic links in the last component. */
int agent_mkdirs(const char *path);

/* watch.c: recursive inotify watch of a directory tree. */
struct watch;

/* Watches the tree at root (existing files are known, not reported) into
 * *out; the caller closes it with watch_close(). */
int watch_open(const char *root, struct agent_port *p, struct watch **out);

/* The inotify descriptor to poll for input. */
int watch_fd(const struct watch *w);

/* Reads the pending inotify events and sends agent.file.changed events.
 * Returns 0, or -1 when the descriptor failed (the error is logged). */
int watch_read(struct watch *w);

/* Closes w and frees it (NULL is ignored). */
void watch_close(struct watch *w);

/* exec.c: commands the host runs beside the harness (EXEC frames). */
struct exec_proc {
	uint64_t id; /* the EXEC's stream; 0: a free slot */
	pid_t pid;   /* also its process group */
	int fd[2];   /* its stdout and stderr pipes, -1 at their end */
	uint64_t bytes[2], sent[2], max; /* written, sent (up to max each) */
	int64_t deadline, drain_until;	 /* agent_now_ms */
	int exited, status, sig, timed_out;
};

struct execs {
	struct exec_proc v[SB_CHAN_EXECS_MAX];
};

/* Starts the command EXEC id's body names, with env as its environment
 * (NULL-terminated), or sends EXEC_EXIT {error} saying why it cannot. */
void exec_start(struct agent_port *p, struct execs *xs, uint64_t id,
		const msgpack_object *body, char *const env[]);

/* Fills pfd with 2 * SB_CHAN_EXECS_MAX entries (the commands' pipes, fd -1
 * where none); returns how many. */
size_t exec_poll_fill(const struct execs *xs, struct pollfd *pfd);

/* Reads the pipes the pollfds exec_poll_fill filled say are ready. */
void exec_poll_handle(struct agent_port *p, struct execs *xs, const struct pollfd *pfd);

/* A child pid ended with wait status st: returns 1 when it was a command's. */
int exec_reaped(struct execs *xs, pid_t pid, int st);

/* Kills commands past their deadline, ends the drain of those that exited
 * and sends EXEC_EXIT for each that is done. */
void exec_tick(struct agent_port *p, struct execs *xs, int64_t now);

/* Milliseconds until exec_tick has something to do, or -1: never. */
int64_t exec_wait_ms(const struct execs *xs, int64_t now);

/* Kills every command and forgets them (the run ends; no EXEC_EXIT). */
void exec_kill_all(struct execs *xs);

/* tunnel.c: 127.0.0.1:port in the guest, carried as streams to the host. */
struct tunnel;

/* Listens on 127.0.0.1:port into *out; the caller closes it with
 * tunnel_close(). */
int tunnel_open(uint16_t port, struct agent_port *p, struct tunnel **out);

/* How many pollfds tunnel_poll_fill() may fill at most. */
size_t tunnel_poll_count(const struct tunnel *t);

/* Fills pfd with the listener and the connections to poll; returns how
 * many it filled. */
size_t tunnel_poll_fill(struct tunnel *t, struct pollfd *pfd);

/* Handles the results of the n pollfds filled last by tunnel_poll_fill(). */
void tunnel_poll_handle(struct tunnel *t, const struct pollfd *pfd, size_t n);

/* Handles a DATA or CLOSE frame from the host for stream. */
void tunnel_frame(struct tunnel *t, int kind, uint64_t stream,
		  const msgpack_object *body);

/* Closes every connection and the listener, and frees t (NULL ignored). */
void tunnel_close(struct tunnel *t);

#endif
