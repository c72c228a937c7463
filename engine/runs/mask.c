/* mask.c - masking secret values (see mask.h). */
#include "engine/runs/mask.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"

struct value {
	unsigned char *v; /* sodium_malloc */
	size_t n;
	char shown[80]; /* "[masked NAME]" */
};

struct sb_mask {
	struct value vals[SB_MASK_VALUES];
	size_t count, maxlen;
};

int sb_mask_new(sb_mask **out)
{
	if (!(*out = calloc(1, sizeof **out)))
		return SB_ERR_NOMEM;
	return SB_OK;
}

int sb_mask_add(sb_mask *m, const void *value, size_t n, const char *label)
{
	struct value *v;

	if (n < SB_MASK_MIN)
		return SB_OK;
	if (n > SB_MASK_HOLD_MAX)
		return sb_seterr(SB_ERR_TOOBIG,
				 "a value of %zu bytes is too long to mask", n);
	if (m->count == SB_MASK_VALUES)
		return sb_seterr(SB_ERR_FULL, "at most %d values are masked",
				 SB_MASK_VALUES);
	v = &m->vals[m->count];
	if (!(v->v = sodium_malloc(n)))
		return SB_ERR_NOMEM;
	memcpy(v->v, value, n);
	v->n = n;
	snprintf(v->shown, sizeof v->shown, "[masked %s]", label);
	m->count++;
	if (n > m->maxlen)
		m->maxlen = n;
	return SB_OK;
}

int sb_mask_empty(const sb_mask *m)
{
	return !m || m->count == 0;
}

/* The longest value starting at p (n bytes left), or NULL. */
static const struct value *match_at(const sb_mask *m, const unsigned char *p, size_t n)
{
	const struct value *best = NULL;

	for (size_t i = 0; i < m->count; i++) {
		const struct value *v = &m->vals[i];
		if (v->n <= n && v->v[0] == p[0] && !memcmp(v->v, p, v->n) &&
		    (!best || v->n > best->n))
			best = v;
	}
	return best;
}

/* 1 when p (n bytes, shorter than some value) begins a value. */
static int begins_value(const sb_mask *m, const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < m->count; i++)
		if (m->vals[i].n > n && !memcmp(m->vals[i].v, p, n))
			return 1;
	return 0;
}

/* Appends n bytes of p to out; nothing when n is 0 (p may then be NULL). */
static void sbuf_put(msgpack_sbuffer *out, const void *p, size_t n)
{
	if (n)
		msgpack_sbuffer_write(out, p, n);
}

/* Masks buf[0..upto) into out (a match may extend past upto, up to n);
 * returns the count and sets *used to the bytes consumed. */
static size_t mask_span(const sb_mask *m, const unsigned char *buf, size_t n, size_t upto,
			msgpack_sbuffer *out, size_t *used)
{
	size_t i = 0, from = 0, count = 0;

	while (i < upto) {
		const struct value *v = match_at(m, buf + i, n - i);
		if (!v) {
			i++;
			continue;
		}
		sbuf_put(out, (const char *)buf + from, i - from);
		sbuf_put(out, v->shown, strlen(v->shown));
		i += v->n;
		from = i;
		count++;
	}
	if (i > from)
		sbuf_put(out, (const char *)buf + from, i - from);
	*used = i;
	return count;
}

size_t sb_mask_apply(const sb_mask *m, const void *in, size_t n, msgpack_sbuffer *out)
{
	size_t used;

	if (sb_mask_empty(m)) {
		sbuf_put(out, in, n);
		return 0;
	}
	return mask_span(m, in, n, n, out, &used);
}

size_t sb_mask_stream(const sb_mask *m, struct sb_mask_stream *st, const void *in,
		      size_t n, int end, msgpack_sbuffer *out)
{
	unsigned char *buf;
	size_t total = st->nhold + n, keep = 0, used, count;

	if (sb_mask_empty(m)) {
		sbuf_put(out, (const char *)st->hold, st->nhold);
		sbuf_put(out, in, n);
		st->nhold = 0;
		return 0;
	}
	if (!(buf = malloc(total ? total : 1))) {
		out->data = NULL;
		return 0;
	}
	memcpy(buf, st->hold, st->nhold);
	memcpy(buf + st->nhold, in, n);
	if (!end) {
		/* the earliest tail that may begin a value is held back */
		size_t lo = total >= m->maxlen ? total - m->maxlen + 1 : 0;
		for (size_t i = lo; i < total; i++) {
			if (begins_value(m, buf + i, total - i)) {
				keep = total - i;
				break;
			}
		}
		/* and the emitted part does not end inside a UTF-8 sequence
		 * (with nothing held it ends where the chunk does) */
		while (keep > 0 && keep < total && keep < SB_MASK_HOLD_MAX &&
		       (buf[total - keep] & 0xc0) == 0x80)
			keep++;
		if (keep > SB_MASK_HOLD_MAX)
			keep = SB_MASK_HOLD_MAX;
	}
	count = mask_span(m, buf, total, total - keep, out, &used);
	/* a value that began before the held tail may have run into it */
	st->nhold = total - used;
	memcpy(st->hold, buf + used, st->nhold);
	sodium_memzero(buf, total);
	free(buf);
	return count;
}

size_t sb_mask_object(const sb_mask *m, const msgpack_object *o, msgpack_packer *pk)
{
	msgpack_sbuffer tmp;
	size_t count = 0;

	switch (o->type) {
	case MSGPACK_OBJECT_STR:
		msgpack_sbuffer_init(&tmp);
		count = sb_mask_apply(m, o->via.str.ptr, o->via.str.size, &tmp);
		msgpack_pack_str_with_body(pk, tmp.data ? tmp.data : "",
					   tmp.data ? tmp.size : 0);
		if (tmp.data)
			sodium_memzero(tmp.data, tmp.size);
		msgpack_sbuffer_destroy(&tmp);
		return count;
	case MSGPACK_OBJECT_ARRAY:
		msgpack_pack_array(pk, o->via.array.size);
		for (uint32_t i = 0; i < o->via.array.size; i++)
			count += sb_mask_object(m, &o->via.array.ptr[i], pk);
		return count;
	case MSGPACK_OBJECT_MAP:
		msgpack_pack_map(pk, o->via.map.size);
		for (uint32_t i = 0; i < o->via.map.size; i++) {
			count += sb_mask_object(m, &o->via.map.ptr[i].key, pk);
			count += sb_mask_object(m, &o->via.map.ptr[i].val, pk);
		}
		return count;
	case MSGPACK_OBJECT_BIN:
	case MSGPACK_OBJECT_EXT:
		msgpack_sbuffer_init(&tmp);
		if (o->type == MSGPACK_OBJECT_BIN) {
			count = sb_mask_apply(m, o->via.bin.ptr, o->via.bin.size, &tmp);
			msgpack_pack_bin_with_body(pk, tmp.data ? tmp.data : "",
						   tmp.data ? tmp.size : 0);
		} else {
			count = sb_mask_apply(m, o->via.ext.ptr, o->via.ext.size, &tmp);
			msgpack_pack_ext_with_body(pk, tmp.data ? tmp.data : "",
						   tmp.data ? tmp.size : 0,
						   o->via.ext.type);
		}
		if (tmp.data)
			sodium_memzero(tmp.data, tmp.size);
		msgpack_sbuffer_destroy(&tmp);
		return count;
	default: msgpack_pack_object(pk, *o); return 0;
	}
}

void sb_mask_free(sb_mask *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->count; i++)
		sodium_free(m->vals[i].v);
	free(m);
}
