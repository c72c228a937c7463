/* common.c - what the harness adapters share (see common.h). */
#include "engine/harness/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine/error.h"

int sb_harness_args_add(struct sb_harness_args *out, const char *s)
{
	if (out->n >= SB_ADAPTER_ARGS_MAX)
		return sb_seterr(SB_ERR_TOOBIG, "a harness's argv or env has over %d entries",
				 SB_ADAPTER_ARGS_MAX);
	out->v[out->n++] = s;
	out->v[out->n] = NULL;
	return SB_OK;
}

int sb_harness_args_addf(struct sb_harness_args *out, const char *fmt, ...)
{
	size_t room = sizeof out->buf - out->used;
	char *at = out->buf + out->used;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(at, room, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= room)
		return sb_seterr(SB_ERR_TOOBIG, "a harness's argv or env is over %zu bytes",
				 sizeof out->buf);
	out->used += (size_t)n + 1;
	return sb_harness_args_add(out, at);
}

/* Length of the valid UTF-8 character at s (n bytes left), 0 if none. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	size_t len = s[0] < 0x80 ? 1 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2
				 : s[0] >= 0xe0 && s[0] < 0xf0 ? 3
				 : s[0] >= 0xf0 && s[0] < 0xf5 ? 4 : 0;

	if (!len || len > n)
		return 0;
	for (size_t i = 1; i < len; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if ((len == 3 && s[0] == 0xe0 && s[1] < 0xa0) ||
	    (len == 3 && s[0] == 0xed && s[1] >= 0xa0) ||
	    (len == 4 && s[0] == 0xf0 && s[1] < 0x90) ||
	    (len == 4 && s[0] == 0xf4 && s[1] >= 0x90))
		return 0; /* overlong, a surrogate, past U+10FFFF */
	return len;
}

json_t *sb_harness_text(const char *s, size_t n, size_t max)
{
	char buf[4096 + 4];
	size_t i = 0, o = 0, len;

	if (max > sizeof buf - 4)
		max = sizeof buf - 4;
	while (i < n) {
		len = utf8_len((const unsigned char *)s + i, n - i);
		if (o + (len ? len : 1) > max) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		if (len && s[i]) /* whole characters; a NUL or a bad byte is '?' */
			memcpy(buf + o, s + i, len);
		else
			buf[o] = '?';
		o += len ? len : 1;
		i += len ? len : 1;
	}
	return json_stringn(buf, o);
}

/* Appends "k=v" of one field of a tool's input to buf (used of cap). */
static void summary_field(char *buf, size_t cap, size_t *used, const char *k, json_t *v)
{
	char val[160];
	const char *s = val;
	int n;

	if (json_is_string(v))
		s = json_string_value(v);
	else if (json_is_integer(v))
		snprintf(val, sizeof val, "%lld", (long long)json_integer_value(v));
	else if (json_is_boolean(v))
		snprintf(val, sizeof val, "%s", json_is_true(v) ? "true" : "false");
	else
		snprintf(val, sizeof val, "%s", json_is_object(v) ? "{...}" : "[...]");
	n = snprintf(buf + *used, cap - *used, "%s%s=%.80s", *used ? " " : "", k, s);
	if (n > 0)
		*used += (size_t)n < cap - *used ? (size_t)n : cap - *used - 1;
}

json_t *sb_harness_summary(json_t *input, size_t max)
{
	char buf[512] = "";
	size_t used = 0, cap = max + 1 < sizeof buf ? max + 1 : sizeof buf;
	const char *k;
	json_t *v;

	json_object_foreach(input, k, v)
	{
		if (used + 1 >= cap)
			break;
		summary_field(buf, cap, &used, k, v);
	}
	return sb_harness_text(buf, strlen(buf), max);
}

void sb_harness_turn_cut(int *open, int turn, sb_harness_emit_fn emit, void *ctx)
{
	if (!*open)
		return;
	*open = 0;
	emit(ctx, "agent.turn.completed", json_pack("{s:i, s:b}", "turn", turn, "cut", 1));
}
