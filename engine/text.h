/* text.h - untrusted text made safe for a terminal, checks for names, and
 * cutting UTF-8 on a character boundary.
 *
 * Guest output, file paths, tool arguments, notes, names and groups reach
 * the CLI's text views; any of them may hold escape sequences, control
 * characters, bidirectional overrides or invalid UTF-8. sb_text_escape turns
 * such text into printable UTF-8 that cannot move the cursor, change the
 * terminal or reorder what follows; sb_text_check refuses such text where
 * it must be a printable name. libc only (plus engine/error.c): the static
 * guest agent links it too. The escaping rule is in SPEC.md, "CLI".
 */
#ifndef SB_TEXT_H
#define SB_TEXT_H

#include <stddef.h>

/* Writes s[0..len) escaped for a terminal into buf (cap bytes, cap >= 1):
 * backslash as \\; newline, carriage return and tab as \n, \r, \t; other
 * C0 controls, DEL and each byte that is not part of valid UTF-8 (overlong
 * forms, surrogates, code points above U+10FFFF, truncated sequences) as
 * \xNN (two lowercase hex digits); the C1 controls U+0080-U+009F and the
 * bidirectional controls U+200E, U+200F, U+202A-U+202E and U+2066-U+2069
 * as \u{NNNN} (four lowercase hex digits); everything else as it is. buf
 * is always NUL-terminated and valid UTF-8; when it is too small the text
 * is cut before the first escape or character that does not fit, never
 * inside one. NUL bytes in s are escaped (\x00). Returns the number of
 * bytes of s written: less than len when the output was cut. */
size_t sb_text_escape(const char *s, size_t len, char *buf, size_t cap);

/* Checks that s[0..len) is printable text for a name or group: valid UTF-8
 * with no C0 or C1 control, no DEL and no bidirectional control. what
 * names the text in the error ("spec: 'name'"). Errors: SB_ERR_INVAL, with
 * a detail naming the first offending character as U+XXXX (a byte of
 * invalid UTF-8 as 0xXX) and its byte position ("spec: 'name' has control
 * character U+000A at byte 1"); the detail is printable itself. */
int sb_text_check(const char *s, size_t len, const char *what);

/* Returns s[0..len) escaped as sb_text_escape does, whole, in a new string
 * the caller frees, or NULL when out of memory. */
char *sb_text_escape_dup(const char *s, size_t len);

/* Returns 1 when s[0..len) is valid UTF-8, else 0. */
int sb_utf8_valid(const char *s, size_t len);

/* Returns s[0..len) with each byte that is not part of valid UTF-8
 * replaced by U+FFFD, in a new NUL-terminated string the caller frees (its
 * length in *out_len), or NULL when out of memory. */
char *sb_utf8_lossy(const char *s, size_t len, size_t *out_len);

/* Returns the length of the longest prefix of s[0..len) of at most max
 * bytes that does not end inside a UTF-8 character: a character that
 * would be split by the cut, or an unfinished one at the end of s, is
 * left out whole. Invalid bytes count as characters of one byte. */
size_t sb_utf8_cut(const char *s, size_t len, size_t max);

#endif
