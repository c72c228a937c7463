/* guest.h - a run's channel to its guest agent (vmm/chan.h frames).
 *
 * Everything the guest sends is untrusted. Frames are decoded here; the
 * agent's events (EVENT, source guest) and the harness's lines (EVENT_JSON,
 * source harness) are numbered by the agent: each number is taken once, in
 * order (a frame sent again is dropped), and recorded as the payload's
 * guest_seq. They are paced (reading the channel waits while the run's
 * rate bucket is empty), masked (engine/runs/mask.h), checked against the
 * schema and counted against the run's record quota before the run
 * records them; whatever is dropped is counted and said in a rate-limited
 * warning. A file change's content is checked against its
 * size and hash, masked, capped (per file and per run) and handed on as
 * a blob. The agent's harness.input.ready and run.exited
 * are recorded once each, taking no token, past the quota. Tunnelled streams go to the
 * model gateway (engine/gateway/tunnel.h). One wake-up reads at most GUEST_READ_BUDGET
 * bytes, so a flooding guest cannot starve the others. Everything runs on
 * the daemon's loop.
 */
#ifndef SB_GUEST_H
#define SB_GUEST_H

#include <stddef.h>
#include <stdint.h>

#include "netpolicy/net.h"

#include "engine/loop.h"
#include "engine/log/event.h"

typedef struct sb_guest sb_guest;

struct sb_guest_limits {
	double rate, burst;   /* guest events per second, and at once */
	uint64_t quota;	      /* bytes of events the guest may put in the record */
	uint64_t file_max;    /* largest file content recorded (<= SB_CHAN_FILE_MAX) */
	uint64_t files_quota; /* file content bytes recorded for the run, in all */
};

/* What the channel tells its run; ctx is the run's. */
struct sb_guest_ops {
	/* HELLO {version, resume}: resume 1 when the agent is past its
	 * set-up (it reconnected to a restarted daemon). */
	void (*hello)(void *ctx, const char *version, int resume);
	/* An event to record (checked, masked, within the quota): payload
	 * is one msgpack map, valid during the call. blob (blob_len bytes,
	 * or NULL) is to be stored with it, in the same commit: the content
	 * of an agent.file.changed, whose key its payload names. */
	void (*event)(void *ctx, const char *type, enum sb_source src,
		      const void *payload, size_t len, const void *blob, size_t blob_len);
	/* A line for run.warning. */
	void (*warn)(void *ctx, const char *line);
	/* DONE: the harness ended; error is its set-up failure or "". */
	void (*done)(void *ctx, const char *error);
	/* The channel closed (the VM is ending, or QEMU lost it). */
	void (*closed)(void *ctx);
	/* SYNCED {id, frozen}: the guest wrote its files out for SYNC id,
	 * and froze its harness when asked (it may lie, or never answer:
	 * the caller has its own deadline). */
	void (*synced)(void *ctx, uint64_t id, int frozen);
	/* EXEC_OUT, EXEC_EXIT or PUT_DONE (kind) for the command or put
	 * stream: body is the frame's (unchecked), valid during the call. */
	void (*answer)(void *ctx, int kind, uint64_t stream, const msgpack_object *body);
	/* A tunnelled stream wants the gateway: a connection tied to the
	 * run into *fd. Errors: those of sb_gateway_connect. */
	int (*connect)(void *ctx, int *fd);
};

/* Makes the channel of a run (not yet connected). ops and ctx must
 * outlive it. Errors: SB_ERR_NOMEM. */
int sb_guest_open(sb_loop *loop, const struct sb_guest_limits *lim,
		  const struct sb_guest_ops *ops, void *ctx, sb_guest **out);

/* Masks value (n bytes) as "[masked label]" in everything recorded from
 * now on. Errors: those of sb_mask_add. */
int sb_guest_mask(sb_guest *g, const void *value, size_t n, const char *label);

/* Appends in (n bytes) to out with the run's secret values masked, as
 * what the guest sends is before it is recorded. Returns how many were;
 * out->data NULL: out of memory. */
size_t sb_guest_mask_apply(const sb_guest *g, const void *in, size_t n, msgpack_sbuffer *out);

/* Tells g that the run's record holds the agent's type already (a run
 * taken up by a restarted daemon), so that another from the guest is
 * dropped as repeated: harness.input.ready and run.exited happen once. */
void sb_guest_recorded(sb_guest *g, const char *type);

/* Takes fd (connected, non-blocking) as the channel, replacing one it
 * had (frames queued for that one are dropped). resync: the stream may
 * begin in the middle of a frame (the agent was talking to a previous
 * daemon): the first frame is looked for, and the agent is asked to send
 * again what it kept past the last committed frame (ACK {resend}).
 * Errors: SB_ERR_NOMEM (fd closed; g has no channel). */
int sb_guest_attach(sb_guest *g, int fd, int resync);

/* Tells g that the run's record holds the guest's numbered frames up to
 * seq (the largest guest_seq of the run's current start; a run taken up
 * by a restarted daemon): frames up to it are dropped as held. Call it
 * before the first sb_guest_attach. */
void sb_guest_committed(sb_guest *g, uint64_t seq);

/* The guest's last numbered frame g has taken (its events handed to
 * ops->event, or dropped for good). */
uint64_t sb_guest_taken(const sb_guest *g);

/* Tells the guest (ACK {seq}) that its numbered frames up to seq (at most
 * what g has taken) are committed: call it once the events they gave
 * ops->event are durable in the log, never before. Nothing new to tell:
 * nothing sent. */
void sb_guest_ack(sb_guest *g, uint64_t seq);

/* 1 while a channel is connected. */
int sb_guest_connected(const sb_guest *g);

/* Queues len bytes of whole frames for the guest. */
void sb_guest_send(sb_guest *g, const void *frames, size_t len);

/* Sends SIGNAL {signal: sig} (the harness's process group). */
void sb_guest_signal(sb_guest *g, int sig);

/* Sends SYNC {id, freeze?}: the agent writes the guest's files out to its
 * disk and answers SYNCED {id, frozen?} (ops->synced). With freeze (before
 * a memory snapshot) it also freezes the harness's processes, until
 * sb_guest_thaw or, in a copy, RESTORED. */
void sb_guest_sync(sb_guest *g, uint64_t id, int freeze);

/* Sends THAW {}: the harness frozen by SYNC goes on. */
void sb_guest_thaw(sb_guest *g);

/* Sends RESTORED {time_ns, seed, machine_id, net}: the guest is a copy of
 * a memory snapshot; the agent sets its clock to the host's, reseeds its
 * kernel's randomness with the 32 fresh bytes, takes the new machine id
 * and, when net is not NULL, its NIC's new addresses, and says HELLO
 * (resume 1). */
void sb_guest_restored(sb_guest *g, const struct sb_net_iface *net);

/* Reads what the guest sent and not yet read, records output still held
 * back for masking, and the quota's summary when anything was dropped:
 * at the end of the run. */
void sb_guest_finish(sb_guest *g);

/* Closes the channel and its streams and frees g (NULL is fine). */
void sb_guest_close(sb_guest *g);

#endif
