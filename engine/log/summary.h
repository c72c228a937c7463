/* summary.h - one-line summaries of events for text views.
 *
 * Beside the schema (schema.h) is one table that says, for every event
 * type, how it reads on one line: "agent.file.changed" becomes
 * "modified src/main.c (1,204 bytes)". The CLI's run, attach and events
 * print it; a watch view or an MCP server can show the same. Every string
 * taken from a payload is escaped with sb_text_escape (engine/text.h), so
 * a summary never holds a control byte, a bidirectional control or invalid
 * UTF-8, whoever wrote the event. A type without an entry (a newer daemon's)
 * gets a generic "key=value ..." line.
 */
#ifndef SB_SUMMARY_H
#define SB_SUMMARY_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/log/event.h"

/* Writes the one-line summary of ev, whose payload map is payload, into
 * buf (cap >= 1; always NUL-terminated, cut on an escape or character
 * boundary when too long). A payload that is not a map summarises as
 * "(no payload)". */
void sb_event_summary(const struct sb_event *ev, const msgpack_object *payload, char *buf,
		      size_t cap);

/* Returns 1 when type has its own entry in the table, 0 when its events
 * get the generic summary. */
int sb_summary_has(const char *type);

/* Writes any msgpack value on one line into buf (cap >= 1): strings
 * escaped (not quoted), numbers, true, false, null, "<N bytes>" for
 * binary, lists as [a, b] and maps as {k=v, k=v}. */
void sb_summary_value(const msgpack_object *v, char *buf, size_t cap);

/* Writes a run's progress on one line into buf (cap >= 1), not escaped:
 * "18/40 reports checked" (count/total label), or "18 reports checked"
 * when total is 0 (none given). label is len bytes, copied as they are
 * (a NUL too). Returns the bytes written, cut to cap - 1. */
size_t sb_progress_text(uint64_t count, uint64_t total, const char *label, size_t len,
			char *buf, size_t cap);

/* Formats nano-USD exactly, with at least four decimals: "$1.2345",
 * "$0.0000", "$0.000012345" (trailing zeros past the fourth dropped). */
void sb_usd_format(uint64_t nusd, char *buf, size_t cap);

#endif
