/* mask.h - masking secret values in what a guest sends to the record.
 *
 * A run's env-scope secrets and its virtual key are known to the daemon;
 * whatever the guest reports (output, events, harness lines) has each
 * occurrence of a value replaced by "[masked NAME]" before it is recorded,
 * the way CI systems mask secrets in logs. Output comes in chunks, so a
 * stream holds back the end of a chunk that could be the start of a value
 * until the next chunk (or the stream's end) tells. Values shorter than
 * SB_MASK_MIN bytes are not masked (they would mask ordinary text); a value
 * the guest encodes (base64, reversed, split over two events) is not found.
 */
#ifndef SB_MASK_H
#define SB_MASK_H

#include <msgpack.h>
#include <stddef.h>

#define SB_MASK_MIN	 4
#define SB_MASK_VALUES	 40
#define SB_MASK_HOLD_MAX 4096 /* the longest value masked across chunks */

typedef struct sb_mask sb_mask;

/* A stream's held-back bytes (zero it before the first chunk). */
struct sb_mask_stream {
	unsigned char hold[SB_MASK_HOLD_MAX];
	size_t nhold;
};

/* Makes an empty masker. Errors: SB_ERR_NOMEM. */
int sb_mask_new(sb_mask **out);

/* Adds value (n bytes, copied into guarded memory) shown as "[masked
 * label]". Values under SB_MASK_MIN bytes are ignored. Errors:
 * SB_ERR_FULL (SB_MASK_VALUES already), SB_ERR_TOOBIG (over
 * SB_MASK_HOLD_MAX bytes), SB_ERR_NOMEM. */
int sb_mask_add(sb_mask *m, const void *value, size_t n, const char *label);

/* 1 when m has no value to mask. */
int sb_mask_empty(const sb_mask *m);

/* Appends in (n bytes) to out with every value masked; returns how many
 * were. Errors are reported as out->data NULL (out of memory). */
size_t sb_mask_apply(const sb_mask *m, const void *in, size_t n, msgpack_sbuffer *out);

/* Appends the next chunk of a stream to out, masked, holding back (in st)
 * a tail that may begin a value; end: the stream ends, nothing is held.
 * The bytes appended never end inside a UTF-8 sequence that the chunk
 * completes. Returns how many values were masked. */
size_t sb_mask_stream(const sb_mask *m, struct sb_mask_stream *st, const void *in,
		      size_t n, int end, msgpack_sbuffer *out);

/* Masks every string (map keys too) and every bin and ext body in a
 * msgpack object and packs it with pk. Returns how many values were
 * masked. */
size_t sb_mask_object(const sb_mask *m, const msgpack_object *o, msgpack_packer *pk);

/* Wipes and frees m (NULL is fine). */
void sb_mask_free(sb_mask *m);

#endif
