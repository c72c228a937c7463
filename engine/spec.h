/* spec.h - reading the fields of a run spec (the "spec" map of run.create;
 * SPEC.md, "Control API"), with errors that name the field.
 */
#ifndef SB_SPEC_H
#define SB_SPEC_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

/* Copies string field key of spec into buf; an absent field leaves buf as
 * it is. Errors: SB_ERR_INVAL (not a string, a NUL inside, or cap bytes or
 * more). */
int sb_spec_str(const msgpack_object *spec, const char *key, char *buf, size_t cap);

/* Copies string field key of spec, a name or group, into buf, as
 * sb_spec_str does, and checks that it is printable (sb_text_check: valid
 * UTF-8, no control or bidirectional character); on an error buf is left
 * as it is. Errors: SB_ERR_INVAL,
 * with a detail naming the field and the first offending character. */
int sb_spec_name(const msgpack_object *spec, const char *key, char *buf, size_t cap);

/* Points *out at field key of spec, a list of at most max strings (NULL
 * when absent or nil). Borrowed from spec. Errors: SB_ERR_INVAL. */
int sb_spec_strs(const msgpack_object *spec, const char *key, size_t max,
		 const msgpack_object **out);

/* Reads the unsigned field key of spec (0 when absent) into *out.
 * Errors: SB_ERR_INVAL (not an integer from 0 to max). */
int sb_spec_u64(const msgpack_object *spec, const char *key, uint64_t max, uint64_t *out);

#endif
