/* text.h - guest-controlled bytes made safe to print (names and targets
 * read from a run's disk). Stands in for engine/text's sb_text_escape,
 * with the same rules, until that lands.
 *
 * Escaping (SPEC.md, "Reading a run's disk"): '\' as "\\", newline and tab
 * as "\n" and "\t", other control bytes (0x00-0x1f, 0x7f), each byte of a
 * C1 control (U+0080-U+009F) and each byte that is not part of valid UTF-8
 * as "\xNN" (two lowercase hex digits), the bidirectional overrides and
 * isolates U+202A-U+202E and U+2066-U+2069 as "\u{XXXX}"; everything else
 * (valid UTF-8) as it is.
 */
#ifndef SB_CLI_TEXT_H
#define SB_CLI_TEXT_H

#include <stddef.h>

/* Escapes the len bytes at s into out, NUL-terminated and cut to cap
 * bytes (cap 0 writes nothing). Returns the length of the whole escaped
 * text (without the NUL), as snprintf does: 4 * len at most. */
size_t cli_text_escape(const void *s, size_t len, char *out, size_t cap);

/* Returns the escaped text of the len bytes at s in a new string that the
 * caller frees, or NULL when out of memory. */
char *cli_text_escape_dup(const void *s, size_t len);

/* Returns 1 when the len bytes at s are valid UTF-8, else 0. */
int cli_text_utf8_valid(const void *s, size_t len);

/* Returns the len bytes at s with each byte that is not part of valid
 * UTF-8 replaced by U+FFFD, in a new NUL-terminated string that the caller
 * frees (its length in *out_len), or NULL when out of memory. */
char *cli_text_utf8_lossy(const void *s, size_t len, size_t *out_len);

#endif
