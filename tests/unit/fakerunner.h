/* fakerunner.h - a runner (engine/runs/runner.h) whose machines are
 * threads of this program that speak the guest channel (vmm/chan.h) over
 * a socket pair as the guest agent (vmm/guest/agent.c) does: the run
 * manager's whole lifecycle in a unit test, in seconds, without QEMU.
 *
 * A machine's guest says HELLO {version SB_CHAN_VERSION, kernel, resume
 * 0}, takes the SPEC and its INPUT frames, reports harness.input.ready
 * {files, bytes}, then plays the script given for its run's name (struct
 * fr_script). A copy of a memory snapshot (create_from with memory) is
 * past its set-up: it waits for RESTORED and says HELLO {resume 1}.
 * Throughout, as the agent, it numbers its EVENT and EVENT_JSON frames
 * (1, 2, ...) and keeps each until an ACK covers it, answers ACK {resend}
 * with RESEND {next} and its kept frames, SYNC with SYNCED {id, frozen:
 * freeze}, and says HELLO again (resume 1 once set up) on each new
 * connection. Its harness's end is run.exited {status, signal}, then,
 * once every numbered frame is acknowledged, DONE {}, and the machine
 * powers off (ended with status 0).
 *
 * Machines outlive their run's hold on them: free only detaches one (its
 * thread goes on, as QEMU does across a daemon's restart), and reattach
 * finds it again through a new socket pair (channel with again = 1); the
 * guest saw its old connection close and keeps what it sends meanwhile.
 *
 * Disk layers are numbers, per run from 0: create makes the run's next
 * layer; snapshot freezes the machine's layer (and, with memory, notes a
 * memory file of FR_MEMORY_BYTES) and, on a live machine, goes on in the
 * next one; create_from makes a new layer over a frozen one. What a
 * snapshot returns names no file of this host: its layer_name is
 * "fakerunner/RUN/layers/N", its memory_name that with ".mem". Its
 * release deletes a run's layers but those another run's read (directly,
 * or through a kept layer of the run); usage counts what is left,
 * FR_LAYER_BYTES a layer (a frozen one a snapshot's, else its run's
 * current disk) and each memory state's FR_MEMORY_BYTES. It removes no
 * single snapshot (no remove_layer) and serves no disk reads (no
 * disk_open).
 *
 * Threads: create, create_from, readers, release, usage and the
 * fakerunner_* functions are safe from any thread; every other op runs on
 * the loop, as runner.h says. What a machine reports (its channel, its
 * end, a snapshot's or merge's end) comes on the loop, posted, never
 * inside an op.
 */
#ifndef SB_FAKERUNNER_H
#define SB_FAKERUNNER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/loop.h"
#include "engine/runs/runner.h"

#define FR_MEMORY_BYTES (1u << 20) /* a memory snapshot's size */
#define FR_LAYER_BYTES	4096	   /* a disk layer's size */
#define FR_SIGNALS_MAX	8	   /* SIGNAL frames a machine keeps for the test */
#define FR_CPUS		1024	   /* the capacity op's answer, unless set */
#define FR_MEMORY_MIB	(1u << 20)

/* What a guest does, in order, once it is set up. */
enum fr_op {
	FR_END = 0,    /* the script is over: the harness runs on, deaf to
			* signals, until the machine is ended */
	FR_EVENT,      /* EVENT {type, payload}: payload is JSON text in which
			* single quotes stand for double quotes */
	FR_OUTPUT,     /* EVENT agent.output {stream: "stdout", data: text} */
	FR_FILE,       /* EVENT agent.file.changed {path: text, kind: "created",
			* size, xxh3, content: data} */
	FR_LINE,       /* EVENT_JSON: text, a line the harness wrote */
	FR_EXIT,       /* the harness exits with status n: run.exited {n, 0},
			* then the end (DONE once acknowledged, power off) */
	FR_SIGNALLED,  /* waits for a SIGNAL frame (or takes one come
			* already): the harness dies of it: run.exited
			* {128 + sig, sig}, then the end */
	FR_DIE,	       /* the machine dies: ended with wait status n and
			* reason text, no DONE */
	FR_SETUP_FAIL, /* DONE {error: text}, no run.exited, power off */
	FR_ACKED,      /* waits until every numbered frame is acknowledged */
	FR_HOST_GONE,  /* waits until the connection it has is lost: the host
			* closed its end (or a new one replaced it) */
	FR_DEAF,       /* ACKs are not heard (their seq is ignored; a resend
			* is still answered) until the next connection: the
			* ACKs a dying daemon sent were lost */
	FR_SLEEP,      /* n milliseconds */
	FR_ANSWER,     /* a frame of kind n (an answer to an operator's command:
			* EXEC_OUT, EXEC_EXIT, PUT_DONE) on stream `stream`,
			* whether or not the host asked: its body the JSON text
			* text (single quotes for double; NULL: the msgpack
			* string "garbage", not a map) */
};

struct fr_step {
	enum fr_op op;
	const char *type; /* FR_EVENT */
	const char *text; /* FR_EVENT: the payload; FR_OUTPUT: the data;
			   * FR_FILE: the path; FR_LINE: the line; FR_DIE,
			   * FR_SETUP_FAIL: the reason */
	const char *data; /* FR_FILE: the content */
	int n;		  /* FR_EXIT: status; FR_DIE: wait status; FR_SLEEP: ms;
			   * FR_ANSWER: the frame's kind */
	uint64_t stream;  /* FR_ANSWER: its stream */
};

/* How the machines of runs of one name behave. */
struct fr_script {
	int create_rc;		/* create and create_from fail with it (0: not) */
	const char *create_why; /* ... and this detail */
	int mute;		/* the guest never says HELLO: its boot hangs */
	int late; /* the guest says its first HELLO on its second connection:
		   * its boot outlasted the daemon that started it */
	const struct fr_step *steps; /* ended by FR_END; NULL: none */
};

struct fakerunner;

/* The ops; their runner argument is a struct fakerunner *. */
extern const struct sb_runner_ops fakerunner_ops;

/* Makes a runner whose reports go to loop (it must outlive the runner).
 * Errors: SB_ERR_NOMEM. */
int fakerunner_open(sb_loop *loop, struct fakerunner **out);

/* Ends every machine's thread and frees everything. Call it on the
 * loop's thread once the loop runs no more (reports posted to it name
 * the machines), before sb_loop_close. NULL is fine. */
void fakerunner_close(struct fakerunner *fr);

/* The script of the machines made from now on for runs named name (a
 * plan's name: a fork's own, a resume's the run's); NULL name: of any run
 * no script names. s must outlive the runner. Without one a guest is set
 * up and then runs as FR_END says. Errors: SB_ERR_FULL (too many names). */
int fakerunner_script(struct fakerunner *fr, const char *name, const struct fr_script *s);

/* What the runner's capacity op answers from now on (a run manager asks
 * it as it opens): cpus vCPUs and memory_mib MiB; FR_CPUS and
 * FR_MEMORY_MIB until this is called. */
void fakerunner_capacity(struct fakerunner *fr, uint64_t cpus, uint64_t memory_mib);

/* What a test sees of a machine. */
struct fr_machine_info {
	char run[SB_RUN_MAX];
	int from;		   /* made by create_from */
	char from_run[SB_RUN_MAX]; /* ... over this run's */
	unsigned base_layer;	   /* ... frozen layer */
	uint64_t memory_bytes;	   /* ... and memory (0: a disk snapshot) */
	unsigned layer;		   /* the layer it writes now */
	int started, ended, end_status;
	char end_why[256];
	int signals[FR_SIGNALS_MAX]; /* the SIGNAL frames' signals, in order */
	unsigned nsignals;
	unsigned hellos, specs, resends, syncs, restored;
	uint64_t input_files, input_bytes; /* what the SPEC's inputs brought */
	char argv[512];			   /* the SPEC's argv, space-separated (cut) */
	uint64_t seq;			   /* the last number its guest gave a frame */
	size_t kept;   /* numbered frames it keeps, not acknowledged */
	int connected; /* it has a host connection now */
};

/* Fills *out with the nth machine (0: the first) made for run. Errors:
 * SB_ERR_NOTFOUND. */
int fakerunner_machine(struct fakerunner *fr, const char *run, unsigned nth,
		       struct fr_machine_info *out);

/* Machines made (create and create_from that succeeded), and snapshots
 * taken (layers frozen), since open. */
unsigned fakerunner_made(struct fakerunner *fr);
unsigned fakerunner_frozen(struct fakerunner *fr);

/* The newest live machine of run dies from outside (its QEMU killed):
 * ended with wait status and why. Errors: SB_ERR_NOTFOUND (none lives). */
int fakerunner_kill(struct fakerunner *fr, const char *run, int status, const char *why);

/* Frozen layer layer of run is lost (its file deleted): create_from over
 * it fails with SB_ERR_NOTFOUND. Errors: SB_ERR_NOTFOUND. */
int fakerunner_lose(struct fakerunner *fr, const char *run, unsigned layer);

#endif
