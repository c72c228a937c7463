/* text.c - terminal escaping, name checks and UTF-8 cuts (see text.h). */
#include "engine/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"

/* Decodes the UTF-8 character at s[0..n), n >= 1, into *cp. Returns its
 * length (1-4), 0 when s[0] does not begin a valid character (a stray
 * continuation byte, C0, C1, F5-FF, an overlong form, a surrogate, above
 * U+10FFFF, or a lead byte followed by a bad byte), or -1 when the bytes
 * are a valid beginning that s ends before finishing. */
static int utf8_decode(const unsigned char *s, size_t n, unsigned *cp)
{
	unsigned c = s[0], lo = 0x80, hi = 0xbf;
	int need;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c < 0xc2 || c > 0xf4)
		return 0;
	if (c < 0xe0) {
		need = 2;
		*cp = c & 0x1f;
	} else if (c < 0xf0) {
		need = 3;
		*cp = c & 0x0f;
		lo = c == 0xe0 ? 0xa0 : 0x80; /* below: overlong */
		hi = c == 0xed ? 0x9f : 0xbf; /* above: surrogates */
	} else {
		need = 4;
		*cp = c & 0x07;
		lo = c == 0xf0 ? 0x90 : 0x80; /* below: overlong */
		hi = c == 0xf4 ? 0x8f : 0xbf; /* above: past U+10FFFF */
	}
	for (int i = 1; i < need; i++) {
		if ((size_t)i >= n)
			return -1;
		if (s[i] < lo || s[i] > hi)
			return 0;
		*cp = *cp << 6 | (s[i] & 0x3fu);
		lo = 0x80;
		hi = 0xbf;
	}
	return need;
}

static int is_bidi(unsigned cp)
{
	return cp == 0x200e || cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) ||
	       (cp >= 0x2066 && cp <= 0x2069);
}

enum cls {
	CLS_PLAIN,     /* printed as it is */
	CLS_BACKSLASH, /* printable, but escaped so escapes stay unambiguous */
	CLS_CONTROL,   /* C0, DEL or C1 */
	CLS_BIDI,      /* a bidirectional control */
	CLS_INVALID,   /* a byte that is not part of valid UTF-8 */
};

/* Classifies the character at u[0..n), n >= 1: returns its class, its
 * length in *adv and, unless it is plain, its escape in esc. */
static enum cls classify(const unsigned char *u, size_t n, size_t *adv, char esc[16])
{
	unsigned cp;
	int len = utf8_decode(u, n, &cp);

	if (len <= 0) {
		*adv = 1;
		snprintf(esc, 16, "\\x%02x", u[0]);
		return CLS_INVALID;
	}
	*adv = (size_t)len;
	switch (cp) {
	case '\\': snprintf(esc, 16, "\\\\"); return CLS_BACKSLASH;
	case '\n': snprintf(esc, 16, "\\n"); return CLS_CONTROL;
	case '\r': snprintf(esc, 16, "\\r"); return CLS_CONTROL;
	case '\t': snprintf(esc, 16, "\\t"); return CLS_CONTROL;
	}
	if (cp < 0x20 || cp == 0x7f) {
		snprintf(esc, 16, "\\x%02x", cp);
		return CLS_CONTROL;
	}
	if (cp >= 0x80 && cp <= 0x9f) {
		snprintf(esc, 16, "\\u{%04x}", cp);
		return CLS_CONTROL;
	}
	if (is_bidi(cp)) {
		snprintf(esc, 16, "\\u{%04x}", cp);
		return CLS_BIDI;
	}
	return CLS_PLAIN;
}

size_t sb_text_escape(const char *s, size_t len, char *buf, size_t cap)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, o = 0, adv, n;
	char esc[16];
	const char *out;

	if (!cap)
		return 0;
	while (i < len) {
		if (classify(u + i, len - i, &adv, esc) == CLS_PLAIN) {
			out = s + i;
			n = adv;
		} else {
			out = esc;
			n = strlen(esc);
		}
		if (o + n >= cap)
			break;
		memcpy(buf + o, out, n);
		o += n;
		i += adv;
	}
	buf[o] = 0;
	return i;
}

int sb_text_check(const char *s, size_t len, const char *what)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, adv;
	unsigned cp;
	char esc[16];

	for (; i < len; i += adv) {
		enum cls c = classify(u + i, len - i, &adv, esc);

		if (c == CLS_PLAIN || c == CLS_BACKSLASH)
			continue;
		if (c == CLS_INVALID)
			return sb_seterr(
			    SB_ERR_INVAL,
			    "%s is not valid UTF-8 (byte 0x%02X at byte %zu)", what, u[i],
			    i);
		utf8_decode(u + i, len - i, &cp);
		return sb_seterr(
		    SB_ERR_INVAL, "%s has %s U+%04X at byte %zu", what,
		    c == CLS_BIDI ? "bidirectional control" : "control character", cp, i);
	}
	return SB_OK;
}

size_t sb_utf8_cut(const char *s, size_t len, size_t max)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i;
	unsigned cp;
	int n;

	if (max >= len)
		max = len;
	if (!max)
		return 0;
	/* the lead byte of the character the cut may be in: at most 3 back */
	for (i = max - 1; i > 0 && max - i < 4 && (u[i] & 0xc0) == 0x80; i--)
		;
	if (u[i] < 0xc0)
		return max; /* ASCII or a stray continuation byte ends here */
	n = utf8_decode(u + i, len - i, &cp);
	if (n < 0 || (n > 0 && i + (size_t)n > max))
		return i; /* unfinished, or it goes on past max */
	return max;
}

char *sb_text_escape_dup(const char *s, size_t len)
{
	/* an escape is at most 4 bytes per byte it stands for (\\xNN, \\u{NNNN} of 2-3)
	 */
	char *out = malloc(4 * len + 1);

	if (out)
		sb_text_escape(s, len, out, 4 * len + 1);
	return out;
}

int sb_utf8_valid(const char *s, size_t len)
{
	unsigned cp;

	for (size_t i = 0; i < len;) {
		int n = utf8_decode((const unsigned char *)s + i, len - i, &cp);
		if (n <= 0)
			return 0;
		i += (size_t)n;
	}
	return 1;
}

char *sb_utf8_lossy(const char *s, size_t len, size_t *out_len)
{
	char *out = malloc(3 * len + 1);
	size_t o = 0;
	unsigned cp;

	if (!out)
		return NULL;
	for (size_t i = 0; i < len;) {
		int n = utf8_decode((const unsigned char *)s + i, len - i, &cp);
		if (n > 0) {
			memcpy(out + o, s + i, (size_t)n);
			o += (size_t)n;
			i += (size_t)n;
		} else {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		}
	}
	out[o] = 0;
	*out_len = o;
	return out;
}
