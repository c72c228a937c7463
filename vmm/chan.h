/* chan.h - frames of the host <-> guest channel (virtio-serial port sanbox.0).
 *
 * A frame is a 4-byte big-endian length L (1 <= L <= SB_CHAN_MAX) followed by
 * L bytes holding one msgpack array [kind, stream, body]. The codec is shared
 * by the static guest agent and the host daemon, so it depends only on
 * msgpack-c and engine/error.h. See SPEC.md for the bodies of each kind.
 *
 * Input files do not ride in the SPEC (a frame is at most 1 MiB): the SPEC
 * lists them as inputs: [{path, size, mode}] (path relative, no "", "." or
 * ".." component; at most SB_CHAN_INPUT_FILES files and SB_CHAN_INPUTS_MAX
 * bytes in all), and right after it the host sends their contents, file
 * after file in list order, as INPUT frames: stream = the file's index in
 * the list, body = bin of 1..SB_CHAN_DATA_MAX bytes (a file of size 0 has
 * none). The agent writes each chunk as it comes, refuses a chunk of
 * another file than the one being written or past its declared size, and
 * reports harness.input.ready {files, bytes} once every file is complete.
 *
 * Numbered frames: the agent numbers each EVENT and EVENT_JSON it sends in
 * the frame's stream (the guest seq: 1, 2, ... per agent, again from 1 in
 * a copy after RESTORED) and keeps it until an ACK {seq} at or past its
 * number says the host committed it. A host that takes the channel up
 * again sends ACK {seq, resend: true}; the agent answers RESEND {next}
 * (its first kept number, or its next one) and sends its kept frames
 * after seq again, in order. The host records each number once, in order
 * (see SPEC.md, "Host/guest channel").
 */
#ifndef SB_CHAN_H
#define SB_CHAN_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#define SB_CHAN_MAX	    ((1u << 20) + (64u << 10)) /* largest frame payload (L) */
#define SB_CHAN_FILE_MAX    (1u << 20)	 /* largest content in agent.file.changed */
#define SB_CHAN_DATA_MAX    (64u * 1024) /* largest DATA body */
#define SB_CHAN_OUTPUT_MAX  4096	 /* largest agent.output data */
#define SB_CHAN_INPUTS_MAX  (48u << 20)	 /* input bytes of a run, in all */
#define SB_CHAN_INPUT_FILES 1024	 /* input files of a run */
#define SB_CHAN_VERSION	    "0.9.0"	 /* the agent's, in HELLO; the host requires it */
#define SB_CHAN_EXEC_STDIN_MAX (1u << 20) /* stdin bytes an EXEC carries */
#define SB_CHAN_EXECS_MAX   8		 /* commands an agent runs at once */
#define SB_CHAN_EXEC_OUTPUT_MAX (16u << 20) /* the largest output_max of an EXEC */

enum sb_chan_kind {
	SB_CHAN_HELLO = 1,	/* guest->host {version, kernel} */
	SB_CHAN_SPEC = 2,	/* host->guest {argv, env, cwd, inputs, tunnel_port} */
	SB_CHAN_EVENT = 3,	/* guest->host, stream = guest seq, {type, payload} */
	SB_CHAN_EVENT_JSON = 4, /* guest->host, stream = guest seq, bin: one line
				 * from $SANBOX_EVENTS */
	SB_CHAN_OPEN = 5,	/* guest->host, stream = odd id, {port} */
	SB_CHAN_DATA = 6,	/* both ways, stream = id, bin <= SB_CHAN_DATA_MAX */
	SB_CHAN_CLOSE = 7,	/* both ways, stream = id, nil: sender is done */
	SB_CHAN_SIGNAL = 8,	/* host->guest {signal}: signal the harness group */
	SB_CHAN_DONE = 9,	/* guest->host {} or {error}: run over, disk
				 * synced; error: why the setup failed */
	SB_CHAN_LOG = 10,	/* guest->host {message}: agent diagnostics */
	SB_CHAN_INPUT = 11,	/* host->guest, stream = input index, bin of
				 * 1..SB_CHAN_DATA_MAX bytes: a chunk of an
				 * input file, after the SPEC (see above) */
	SB_CHAN_SYNC = 12,	/* host->guest {id, freeze?}: write the guest's
				 * files out (before a disk snapshot); freeze:
				 * also stop the harness's processes (before a
				 * memory snapshot) until THAW or RESTORED */
	SB_CHAN_SYNCED = 13,	/* guest->host {id, frozen?}: done, the disk
				 * holds them (and the harness is frozen) */
	SB_CHAN_RESTORED = 14,	/* host->guest {time_ns, seed}: the guest was
				 * restored from a memory snapshot: set the
				 * clock, reseed the kernel's randomness, thaw
				 * the harness and say HELLO again */
	SB_CHAN_THAW = 15,	/* host->guest {}: the memory snapshot is
				 * taken: the harness goes on */
	SB_CHAN_ACK = 16,	/* host->guest {seq, resend?}: the numbered
				 * frames up to seq are committed (see below);
				 * resend: send again those after it */
	SB_CHAN_RESEND = 17,	/* guest->host {next}: the agent's kept frames
				 * follow, from seq next on */
	SB_CHAN_EXEC = 18,	/* host->guest, stream = exec id, {argv, stdin?,
				 * timeout_ms, output_max}: run a command
				 * beside the harness */
	SB_CHAN_EXEC_OUT = 19,	/* guest->host, stream = exec id, {stream, data}:
				 * what it wrote (data <= SB_CHAN_DATA_MAX) */
	SB_CHAN_EXEC_EXIT = 20, /* guest->host, stream = exec id, {status,
				 * signal, timed_out, stdout_bytes,
				 * stderr_bytes, error?}: it ended */
	SB_CHAN_PUT = 21,	/* host->guest, stream = put id, {inputs}: write
				 * files under /workspace, their contents in
				 * INPUT frames after it (as a SPEC's) */
	SB_CHAN_PUT_DONE = 22,	/* guest->host, stream = put id, {files, bytes,
				 * skipped, skipped_paths, error?} */
	SB_CHAN_KIND_MAX = SB_CHAN_PUT_DONE,
};

/* Returns the name of a frame kind ("HELLO"), or "?" when unknown. */
const char *sb_chan_kind_name(int kind);

/* 1 for the kinds the agent numbers (EVENT, EVENT_JSON), else 0. */
int sb_chan_numbered(int kind);

/* A numbered frame the agent keeps until the host acknowledges it. */
struct sb_chan_kept {
	uint64_t seq;
	char *frame; /* the whole frame, its length first */
	size_t len;
};

/* The agent's numbered frames not acknowledged yet, oldest first. Zero it
 * to start; sb_chan_ring_free() frees what it holds. */
struct sb_chan_ring {
	struct sb_chan_kept *v; /* v[head .. head + n) are kept */
	size_t head, n, cap;
	size_t bytes; /* frame bytes kept */
	uint64_t seq; /* the last number given (0: none yet) */
};

/* Numbers a frame of kind (a numbered one) whose body is one encoded
 * msgpack object (len >= 1 bytes) with r's next number and keeps it;
 * *kept is the frame, valid until the next change of r. Errors:
 * SB_ERR_INVAL (a kind that is not numbered, an empty body), SB_ERR_TOOBIG,
 * SB_ERR_NOMEM; on error nothing is kept and no number is used. */
int sb_chan_ring_add(struct sb_chan_ring *r, int kind, const void *body, size_t len,
		     const struct sb_chan_kept **kept);

/* Drops the kept frames numbered up to seq (all of them for a seq past
 * the last number given). Returns how many it dropped. */
size_t sb_chan_ring_ack(struct sb_chan_ring *r, uint64_t seq);

/* The number of the oldest kept frame, or the next number when none is. */
uint64_t sb_chan_ring_next(const struct sb_chan_ring *r);

/* The i-th kept frame, oldest first; NULL past the last. Valid until the
 * next change of r. */
const struct sb_chan_kept *sb_chan_ring_at(const struct sb_chan_ring *r, size_t i);

/* Drops every kept frame and numbers from 1 again. */
void sb_chan_ring_reset(struct sb_chan_ring *r);

/* Frees what r holds and zeroes it. */
void sb_chan_ring_free(struct sb_chan_ring *r);

/* Appends one frame to out: kind, stream and body, where body holds exactly
 * one msgpack object already encoded (len >= 1 bytes; 0xc0 for nil).
 * Errors: SB_ERR_INVAL (kind out of range, empty body), SB_ERR_TOOBIG (the
 * frame would exceed SB_CHAN_MAX), SB_ERR_NOMEM. On error out is unchanged. */
int sb_chan_encode(int kind, uint64_t stream, const void *body, size_t len,
		   msgpack_sbuffer *out);

/* Appends to out the INPUT frames that carry len bytes of data as input
 * file index: len / SB_CHAN_DATA_MAX frames, rounded up (none when len is
 * 0), each SB_CHAN_DATA_MAX bytes but the last. Errors: SB_ERR_NOMEM; on
 * error out is unchanged. */
int sb_chan_pack_input(msgpack_sbuffer *out, uint32_t index, const void *data,
		       size_t len);

/* Starts a frame in out and packs [kind, stream, then the caller packs the
 * body with pk (which must write to out). Returns the frame's start offset
 * in *start, to be passed to sb_chan_end(). Errors: SB_ERR_INVAL, SB_ERR_NOMEM. */
int sb_chan_begin(msgpack_sbuffer *out, msgpack_packer *pk, int kind, uint64_t stream,
		  size_t *start);

/* Finishes the frame started at start: writes its length. Errors:
 * SB_ERR_PROTO (no body was packed), SB_ERR_TOOBIG (longer than SB_CHAN_MAX);
 * on error the partial frame is removed from out. */
int sb_chan_end(msgpack_sbuffer *out, size_t start);

/* One decoded frame. body points into the reader's buffer: valid until the
 * next call on the reader (feed, next or free). */
struct sb_chan_frame {
	int kind;
	uint64_t stream;
	msgpack_object body;
};

/* Incremental frame decoder: feed it bytes as they come, pull whole frames. */
typedef struct sb_chan_reader sb_chan_reader;

/* Creates a reader in *out; the caller frees it with sb_chan_reader_free().
 * Errors: SB_ERR_NOMEM. */
int sb_chan_reader_new(sb_chan_reader **out);

/* Frees r and its buffer (NULL is ignored). */
void sb_chan_reader_free(sb_chan_reader *r);

/* Appends len bytes to r's buffer (copied). Errors: SB_ERR_NOMEM; the sticky
 * error of a broken stream (see next). */
int sb_chan_reader_feed(sb_chan_reader *r, const void *buf, size_t len);

/* Takes the next whole frame into *f. Returns 0 with a frame, SB_END when
 * more bytes are needed, SB_ERR_PROTO for a frame with a bad content (not a
 * msgpack array [uint kind 1..SB_CHAN_KIND_MAX, uint stream, body], or bytes
 * after it): that frame is skipped and the reader stays usable. A length of 0
 * (SB_ERR_PROTO) or above SB_CHAN_MAX (SB_ERR_TOOBIG) means the stream lost
 * its framing: the error is sticky and every later call returns it. */
int sb_chan_reader_next(sb_chan_reader *r, struct sb_chan_frame *f);

/* Makes r look for the start of a frame, dropping bytes until one decodes
 * (its length, then [kind, stream, body] exactly): for a stream taken up
 * in the middle, as a channel is after the other end reconnected. Clears
 * a sticky framing error. */
void sb_chan_reader_resync(sb_chan_reader *r);

/* Bytes held in r that are not yet returned as frames; 0 once the stream
 * lost its framing (nothing more will come out of r). */
size_t sb_chan_reader_pending(const sb_chan_reader *r);

/* 0 while r's stream is sound, else its sticky framing error (SB_ERR_PROTO
 * for a length of 0, SB_ERR_TOOBIG for one above SB_CHAN_MAX): then the
 * caller should drop the connection or start a new reader. */
int sb_chan_reader_error(const sb_chan_reader *r);

#endif
