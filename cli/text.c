/* text.c - escaping guest-controlled bytes for the terminal, and UTF-8
 * checks for JSON. */
#include "cli/text.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Returns the length (1-4) of the valid UTF-8 sequence at s (n bytes
 * left) and its code point in *cp, or 0 when s[0] does not start one
 * (overlong forms, surrogates and values above U+10FFFF are invalid). */
static size_t text_utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
	static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
	size_t len;
	uint32_t c;

	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		len = 2;
		c = s[0] & 0x1f;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		len = 3;
		c = s[0] & 0x0f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		len = 4;
		c = s[0] & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (s[i] & 0x3f);
	}
	if (c < min[len] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return len;
}

struct text_out {
	char *p;
	size_t cap, n;
};

static void text_put(struct text_out *o, const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++, o->n++)
		if (o->n + 1 < o->cap)
			o->p[o->n] = s[i];
}

static void text_hex(struct text_out *o, unsigned char b)
{
	char buf[5];

	snprintf(buf, sizeof buf, "\\x%02x", b);
	text_put(o, buf, 4);
}

static int text_bidi(uint32_t cp)
{
	return (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

size_t cli_text_escape(const void *s, size_t len, char *out, size_t cap)
{
	const unsigned char *b = s;
	struct text_out o = {out, cap, 0};
	uint32_t cp;
	size_t i = 0, n;

	while (i < len) {
		if (b[i] == '\\') {
			text_put(&o, "\\\\", 2);
			i++;
		} else if (b[i] == '\n') {
			text_put(&o, "\\n", 2);
			i++;
		} else if (b[i] == '\t') {
			text_put(&o, "\\t", 2);
			i++;
		} else if (b[i] < 0x20 || b[i] == 0x7f ||
			   !(n = text_utf8_next(b + i, len - i, &cp))) {
			text_hex(&o, b[i++]);
		} else if (cp >= 0x80 && cp <= 0x9f) {
			for (size_t k = 0; k < n; k++)
				text_hex(&o, b[i++]);
		} else if (text_bidi(cp)) {
			char buf[16];
			int m = snprintf(buf, sizeof buf, "\\u{%04X}", (unsigned)cp);
			text_put(&o, buf, (size_t)m);
			i += n;
		} else {
			text_put(&o, (const char *)b + i, n);
			i += n;
		}
	}
	if (cap)
		out[o.n < cap ? o.n : cap - 1] = 0;
	return o.n;
}

char *cli_text_escape_dup(const void *s, size_t len)
{
	size_t n = cli_text_escape(s, len, NULL, 0);
	char *out = malloc(n + 1);

	if (out)
		cli_text_escape(s, len, out, n + 1);
	return out;
}

int cli_text_utf8_valid(const void *s, size_t len)
{
	const unsigned char *b = s;
	uint32_t cp;
	size_t n;

	for (size_t i = 0; i < len; i += n)
		if (!(n = text_utf8_next(b + i, len - i, &cp)))
			return 0;
	return 1;
}

char *cli_text_utf8_lossy(const void *s, size_t len, size_t *out_len)
{
	const unsigned char *b = s;
	char *out = malloc(3 * len + 1);
	size_t o = 0, n;
	uint32_t cp;

	if (!out)
		return NULL;
	for (size_t i = 0; i < len; i += n) {
		if ((n = text_utf8_next(b + i, len - i, &cp))) {
			memcpy(out + o, b + i, n);
			o += n;
		} else {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			n = 1;
		}
	}
	out[o] = 0;
	*out_len = o;
	return out;
}
