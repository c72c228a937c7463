/* event.c - small helpers around struct sb_event. */
#include "engine/log/event.h"

#include <string.h>

#include "engine/error.h"
#include "engine/payload.h"

static const char *const source_names[] = {"host", "guest", "gateway", "operator",
						   "harness"};

const char *sb_source_name(enum sb_source src)
{
	return (unsigned)src <= SB_SRC_LAST ? source_names[src] : "?";
}

int sb_source_parse(const char *name, enum sb_source *out)
{
	for (unsigned i = 0; i <= SB_SRC_LAST; i++) {
		if (!strcmp(name, source_names[i])) {
			*out = (enum sb_source)i;
			return SB_OK;
		}
	}
	return sb_seterr(SB_ERR_INVAL, "unknown event source '%s'", name);
}

int sb_event_init(struct sb_event *ev, const char *type, const char *run,
		  enum sb_source src, const void *payload, size_t len)
{
	size_t tl = strlen(type), rl = strlen(run);

	memset(ev, 0, sizeof *ev);
	if (!tl || tl >= sizeof ev->type)
		return sb_seterr(SB_ERR_INVAL, "event type '%.60s' has a bad length", type);
	if (!rl || rl >= sizeof ev->run)
		return sb_seterr(SB_ERR_INVAL, "run id '%.60s' has a bad length", run);
	memcpy(ev->type, type, tl + 1);
	memcpy(ev->run, run, rl + 1);
	ev->source = src;
	ev->payload = payload;
	ev->payload_len = len;
	return SB_OK;
}

json_t *sb_event_json(const struct sb_event *ev, const msgpack_object *payload)
{
	json_t *p = sb_msgpack_to_json(payload);

	if (!p)
		return NULL;
	return json_pack("{s:I, s:I, s:I, s:s, s:s, s:s, s:o}", "offset", (json_int_t)ev->offset,
			 "seq", (json_int_t)ev->seq, "ts", (json_int_t)ev->ts_ns, "type", ev->type,
			 "run", ev->run, "source", sb_source_name(ev->source), "payload", p);
}
