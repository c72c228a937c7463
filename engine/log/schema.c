/* schema.c - the event schema table and payload validation. */
#include "engine/log/schema.h"

#include <msgpack.h>
#include <string.h>

#include "engine/error.h"
#include "engine/log/blob.h"
#include "engine/payload.h"
#include "engine/text.h"

#define HOST	 SB_FROM_HOST
#define GUEST	 SB_FROM_GUEST
#define GATEWAY	 SB_FROM_GATEWAY
#define OPERATOR SB_FROM_OPERATOR
#define HARNESS	 SB_FROM_HARNESS
#define OPTIONAL SB_F_OPTIONAL

static const struct sb_event_schema schema[] = {
    {"run.created",
     HOST,
     {{"name", SB_F_STR}, {"template", SB_F_STR}, {"group", SB_F_STR}}},
    {"run.policy.resolved",
     HOST,
     {{"template_hash", SB_F_STR},
      {"cpus", SB_F_UINT},
      {"memory_mib", SB_F_UINT},
      {"timeout_s", SB_F_UINT},
      {"network", SB_F_STR},
      {"budget_nusd", SB_F_UINT}}},
    {"group.created",
     HOST,
     {{"name", SB_F_STR}, {"goal", SB_F_STR}, {"budget_nusd", SB_F_UINT}, {"planned", SB_F_UINT},
      {"runs", SB_F_ARRAY}}},
    {"run.queued", HOST, {{"cpus", SB_F_UINT}, {"memory_mib", SB_F_UINT}, {"ahead", SB_F_UINT}}},
    {"run.started", HOST, {{"accel", SB_F_STR}}},
    {"harness.input.ready", HOST | GUEST, {{"files", SB_F_UINT}, {"bytes", SB_F_UINT}}},
    {"agent.turn.started", HOST | HARNESS, {{"turn", SB_F_UINT}}},
    {"agent.turn.completed", HOST | HARNESS, {{"turn", SB_F_UINT}}},
    {"agent.message", HOST | HARNESS | GATEWAY, {{"role", SB_F_STR}}},
    {"agent.tool.started", HOST | HARNESS, {{"tool", SB_F_STR}, {"args", SB_F_STR}}},
    {"agent.tool.completed",
     HOST | HARNESS,
     {{"tool", SB_F_STR},
      {"args", SB_F_STR},
      {"exit", SB_F_INT},
      {"duration_ms", SB_F_UINT}}},
    {"agent.progress",
     HOST | HARNESS,
     {{"label", SB_F_LABEL}, {"count", SB_F_UINT}, {"total", SB_F_UINT | OPTIONAL}}},
    {"agent.file.changed",
     HOST | GUEST,
     {{"path", SB_F_STR}, {"kind", SB_F_STR}, {"size", SB_F_UINT}, {"xxh3", SB_F_STR}}},
    {"agent.usage.updated",
     GATEWAY,
     {{"model", SB_F_STR},
      {"input_tokens", SB_F_UINT},
      {"output_tokens", SB_F_UINT},
      {"cost_nusd", SB_F_UINT},
      {"total_nusd", SB_F_UINT}}},
    {"agent.output", HOST | GUEST, {{"stream", SB_F_STR}, {"data", SB_F_STR}}},
    {"snapshot.saved", HOST, {{"snapshot", SB_F_STR}, {"kind", SB_F_STR}}},
    {"snapshot.removed", HOST, {{"snapshot", SB_F_STR}}},
    {"run.stopped", HOST, {{"reason", SB_F_STR}}},
    {"run.exited", HOST | GUEST, {{"status", SB_F_INT}}},
    {"run.failed", HOST, {{"reason", SB_F_STR}}},
    {"run.resumed", HOST, {{"from_run", SB_F_STR}, {"from_offset", SB_F_UINT}}},
    {"run.forked", HOST, {{"from_run", SB_F_STR}, {"snapshot", SB_F_STR}}},
    {"run.warning", HOST | GATEWAY, {{"message", SB_F_STR}}},
    {"rerun.diverged", GATEWAY, {{"call", SB_F_UINT}, {"path", SB_F_STR}}},
    {"rerun.compared",
     HOST,
     {{"original", SB_F_STR},
      {"same", SB_F_BOOL},
      {"status", SB_F_INT},
      {"original_status", SB_F_INT},
      {"files", SB_F_ARRAY},
      {"files_differ", SB_F_UINT},
      {"tools", SB_F_UINT},
      {"original_tools", SB_F_UINT},
      {"tools_differ_at", SB_F_UINT}}},
    {"run.removed",
     HOST,
     {{"by", SB_F_STR}, {"bytes", SB_F_UINT}, {"kept", SB_F_UINT | OPTIONAL}}},
    {"budget.exceeded",
     HOST | GATEWAY,
     {{"budget_nusd", SB_F_UINT}, {"spent_nusd", SB_F_UINT}}},
    {"net.denied",
     HOST,
     {{"dst", SB_F_STR},
      {"port", SB_F_UINT},
      {"proto", SB_F_STR},
      {"reason", SB_F_STR},
      {"count", SB_F_UINT}}},
    {"net.resolved",
     HOST,
     {{"name", SB_F_STR}, {"type", SB_F_STR}, {"count", SB_F_UINT}}},
    {"net.grant.added", HOST, {{"grant", SB_F_STR}, {"by", SB_F_STR}}},
    {"net.grant.removed", HOST, {{"grant", SB_F_STR}, {"by", SB_F_STR}}},
    {"secret.granted", HOST, {{"name", SB_F_STR}, {"scope", SB_F_STR}}},
    {"operator.note", OPERATOR, {{"text", SB_F_STR}, {"by", SB_F_STR}}},
    {"operator.exec",
     HOST,
     {{"argv", SB_F_ARRAY},
      {"by", SB_F_STR},
      {"status", SB_F_INT},
      {"timed_out", SB_F_BOOL},
      {"stdout_bytes", SB_F_UINT},
      {"stderr_bytes", SB_F_UINT},
      {"stdout", SB_F_HASH | OPTIONAL},
      {"stderr", SB_F_HASH | OPTIONAL}}},
    {"operator.cp",
     HOST,
     {{"by", SB_F_STR}, {"files", SB_F_ARRAY}, {"written", SB_F_UINT}, {"bytes", SB_F_UINT}}},
};

const struct sb_event_schema *sb_schema_find(const char *type)
{
	for (size_t i = 0; i < sizeof schema / sizeof schema[0]; i++)
		if (!strcmp(schema[i].type, type))
			return &schema[i];
	return NULL;
}

const struct sb_event_schema *sb_schema_all(size_t *n)
{
	*n = sizeof schema / sizeof schema[0];
	return schema;
}

/* A blob key of the current format: 64 hex digits (legacy keys of 32 are
 * read, never written). */
static int is_hash(const msgpack_object *o)
{
	char hex[SB_HASH_HEX];
	uint8_t h[SB_HASH_LEN];

	if (o->type != MSGPACK_OBJECT_STR || o->via.str.size != 2 * SB_HASH_LEN)
		return 0;
	memcpy(hex, o->via.str.ptr, 2 * SB_HASH_LEN);
	hex[2 * SB_HASH_LEN] = 0;
	/* a legacy key here is 32 digits cut short by a NUL */
	return sb_hash_parse(hex, h) == SB_OK && !sb_hash_is_legacy(h);
}

static int type_ok(const msgpack_object *o, enum sb_ftype t)
{
	switch (t) {
	case SB_F_STR: return o->type == MSGPACK_OBJECT_STR;
	case SB_F_UINT: return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER;
	case SB_F_INT:
		return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
		       o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER;
	case SB_F_BOOL: return o->type == MSGPACK_OBJECT_BOOLEAN;
	case SB_F_MAP: return o->type == MSGPACK_OBJECT_MAP;
	case SB_F_ARRAY: return o->type == MSGPACK_OBJECT_ARRAY;
	case SB_F_HASH: return is_hash(o);
	case SB_F_LABEL:
		return o->type == MSGPACK_OBJECT_STR && o->via.str.size > 0 &&
		       o->via.str.size <= SB_LABEL_MAX &&
		       sb_text_check(o->via.str.ptr, o->via.str.size, "label") == SB_OK;
	}
	return 0;
}

static const char *const ftype_names[] = {"str", "uint",  "int",  "bool",
					  "map", "array", "hash", "label"};

/* Checks value v of field f of an event of type. Errors: SB_ERR_SCHEMA,
 * naming the type, the field and what it must be (for a label of a fit
 * length, its first character that is not printable). */
static int field_check(const char *type, const struct sb_field *f, const msgpack_object *v)
{
	enum sb_ftype k = sb_field_kind(f);
	char what[SB_TYPE_MAX + 32];

	if (type_ok(v, k))
		return SB_OK;
	if (k != SB_F_LABEL)
		return sb_seterr(SB_ERR_SCHEMA, "%s: field '%s' must be %s", type, f->name,
				 ftype_names[k]);
	snprintf(what, sizeof what, "%s: field '%s'", type, f->name);
	if (v->type == MSGPACK_OBJECT_STR && v->via.str.size > 0 &&
	    v->via.str.size <= SB_LABEL_MAX &&
	    sb_text_check(v->via.str.ptr, v->via.str.size, what))
		return sb_seterr(SB_ERR_SCHEMA, "%s (it must be label: printable text)",
				 sb_errmsg(SB_ERR_INVAL));
	return sb_seterr(SB_ERR_SCHEMA, "%s must be label (a str of 1 to %d bytes)", what,
			 SB_LABEL_MAX);
}

int sb_schema_check(const char *type, enum sb_source src, const void *payload, size_t len)
{
	const struct sb_event_schema *s = sb_schema_find(type);
	msgpack_zone zone;
	msgpack_object map;
	int rc = SB_ERR_SCHEMA;

	if (!s)
		return sb_seterr(rc, "unknown event type '%.60s'", type);
	if ((unsigned)src > SB_SRC_LAST || !(s->sources & (1u << src)))
		return sb_seterr(rc, "%s: source %s may not emit it", type,
				 sb_source_name(src));
	if (!payload || !len)
		return sb_seterr(rc, "%s: payload missing", type);
	if (len > SB_PAYLOAD_MAX)
		return sb_seterr(rc, "%s: payload of %zu bytes exceeds %u", type, len,
				 SB_PAYLOAD_MAX);
	if (!msgpack_zone_init(&zone, 1024))
		return SB_ERR_NOMEM;
	if (sb_payload_parse(payload, len, &zone, &map)) {
		sb_seterr(rc, "%s: payload is not one msgpack map", type);
		goto out;
	}
	for (uint32_t i = 0; i < map.via.map.size; i++) {
		if (map.via.map.ptr[i].key.type != MSGPACK_OBJECT_STR) {
			sb_seterr(rc, "%s: payload key %u is not a string", type, i);
			goto out;
		}
	}
	for (const struct sb_field *f = s->fields;
	     f < s->fields + SB_FIELDS_MAX && f->name; f++) {
		const msgpack_object *v = sb_map_get(&map, f->name);
		if (!v && (f->type & SB_F_OPTIONAL))
			continue;
		if (!v) {
			sb_seterr(rc, "%s: field '%s' missing", type, f->name);
			goto out;
		}
		if (field_check(type, f, v))
			goto out;
	}
	rc = SB_OK;
out:
	msgpack_zone_destroy(&zone);
	return rc;
}
