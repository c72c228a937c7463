/* checkpoint.h - signed checkpoints of the log's Merkle tree and the
 * installation's signing key.
 *
 * A checkpoint is a C2SP tlog-checkpoint in a C2SP signed note:
 *   ORIGIN\n SIZE\n BASE64(ROOT)\n \n — NAME BASE64(KEYHASH || SIG)\n
 * signed with Ed25519 over the note text (its three lines, each ended by a
 * newline). The key hash is the first 4 bytes of SHA-256(NAME || 0x0A ||
 * 0x01 || public key). The key's name is the origin, "sanbox/" and 16 hex
 * digits chosen when the key is first made: the installation.
 *
 * The key lives in the state directory, audit.key (mode 0600), as one
 * line "PRIVATE+KEY+NAME+HASH+BASE64(0x01 || seed)" (the signed-note tools'
 * signer key form); a rotated key's verifier key is added to
 * audit.keys.old, one a line. SPEC.md (Audit) gives the details.
 */
#ifndef SB_CHECKPOINT_H
#define SB_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/log/merkle.h"

#define SB_NOTE_NAME_MAX 64
#define SB_VKEY_MAX 160     /* a verifier key's text, with its NUL */
#define SB_CKPT_MAX 512     /* a checkpoint note's text, with its NUL */

/* A key: public always, secret when loaded from the home. */
struct sb_note_key {
	char name[SB_NOTE_NAME_MAX];
	uint8_t pk[32];
	uint8_t sk[64]; /* zero for a verifier key */
	uint32_t hash;
};

/* A checkpoint's content. */
struct sb_ckpt {
	char origin[SB_NOTE_NAME_MAX];
	uint64_t size;
	uint8_t root[SB_MERKLE_HASH];
};

/* Loads the installation's key from home into *k, making one (and the
 * origin) when there is none and create is set. Errors: SB_ERR_NOTFOUND
 * (none, and not made), SB_ERR_CORRUPT (the file is malformed), SB_ERR_IO. */
int sb_key_load(const char *home, int create, struct sb_note_key *k);

/* Replaces the installation's key by a new one of the same name; the old
 * one's verifier key is appended to audit.keys.old. *k gets the new key.
 * Errors: those of sb_key_load, SB_ERR_IO. */
int sb_key_rotate(const char *home, struct sb_note_key *k);

/* Writes k's verifier key, "NAME+HASH+BASE64(0x01 || public key)", into
 * out. */
void sb_key_verifier(const struct sb_note_key *k, char out[SB_VKEY_MAX]);

/* Parses a verifier key (surrounding white space ignored) into *k (public
 * part only). Errors: SB_ERR_INVAL (malformed, or its hash does not
 * match its name and key). */
int sb_key_parse(const char *text, struct sb_note_key *k);

/* Writes the checkpoint c signed by k into out (NUL-terminated) and
 * returns its length. */
size_t sb_ckpt_sign(const struct sb_ckpt *c, const struct sb_note_key *k, char out[SB_CKPT_MAX]);

/* Parses the checkpoint note (len bytes) and checks its signature by key
 * k; *c gets its content. Errors: SB_ERR_CORRUPT (malformed: the detail
 * names the line), SB_ERR_DENIED (no signature by k, or one that does not
 * verify: the detail says which). */
int sb_ckpt_verify(const char *note, size_t len, const struct sb_note_key *k,
		   struct sb_ckpt *c);

/* Like sb_ckpt_verify without a signature check: the content of note.
 * Errors: SB_ERR_CORRUPT. */
int sb_ckpt_parse(const char *note, size_t len, struct sb_ckpt *c);

#endif
