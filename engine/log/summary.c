/* summary.c - the table of one-line event summaries (see summary.h). */
#include "engine/log/summary.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine/mpack.h"
#include "engine/text.h"

/* A summary being written: once something did not fit, nothing more is
 * added, so a cut line never reads as a whole one. */
struct sum {
	char *buf;
	size_t cap, len;
	int full;
};

/* Appends trusted text (literals, numbers), cut on a character boundary. */
static void put_raw(struct sum *s, const char *t, size_t n)
{
	size_t room = s->cap - 1 - s->len, k;

	if (s->full)
		return;
	k = sb_utf8_cut(t, n, room);
	memcpy(s->buf + s->len, t, k);
	s->len += k;
	s->buf[s->len] = 0;
	s->full = k < n;
}

static void put(struct sum *s, const char *lit)
{
	put_raw(s, lit, strlen(lit));
}

/* Appends formatted trusted text: only numbers and literals go through. */
__attribute__((format(printf, 2, 3))) static void putf(struct sum *s, const char *fmt,
						       ...)
{
	char tmp[128];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	if (n > 0)
		put_raw(s, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* Appends untrusted text, escaped. */
static void put_text(struct sum *s, const char *t, size_t n)
{
	if (s->full)
		return;
	if (sb_text_escape(t, n, s->buf + s->len, s->cap - s->len) < n)
		s->full = 1;
	s->len += strlen(s->buf + s->len);
}

static void put_value(struct sum *s, const msgpack_object *v, int depth);

/* Appends the pairs of map m as "k<eq>v" joined by sep. */
static void put_pairs(struct sum *s, const msgpack_object *m, const char *eq,
		      const char *sep, int depth)
{
	for (uint32_t i = 0; i < m->via.map.size; i++) {
		if (i)
			put(s, sep);
		put_value(s, &m->via.map.ptr[i].key, depth + 1);
		put(s, eq);
		put_value(s, &m->via.map.ptr[i].val, depth + 1);
	}
}

static void put_value(struct sum *s, const msgpack_object *v, int depth)
{
	if (depth > 16) {
		put(s, "…");
		return;
	}
	switch (v->type) {
	case MSGPACK_OBJECT_STR: put_text(s, v->via.str.ptr, v->via.str.size); break;
	case MSGPACK_OBJECT_BIN: putf(s, "<%u bytes>", v->via.bin.size); break;
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		putf(s, "%llu", (unsigned long long)v->via.u64);
		break;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		putf(s, "%lld", (long long)v->via.i64);
		break;
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64: putf(s, "%g", v->via.f64); break;
	case MSGPACK_OBJECT_BOOLEAN: put(s, v->via.boolean ? "true" : "false"); break;
	case MSGPACK_OBJECT_NIL: put(s, "null"); break;
	case MSGPACK_OBJECT_ARRAY:
		put(s, "[");
		for (uint32_t i = 0; i < v->via.array.size; i++) {
			if (i)
				put(s, ", ");
			put_value(s, &v->via.array.ptr[i], depth + 1);
		}
		put(s, "]");
		break;
	case MSGPACK_OBJECT_MAP:
		put(s, "{");
		put_pairs(s, v, "=", ", ", depth);
		put(s, "}");
		break;
	default: put(s, "<ext>"); break;
	}
}

/* Appends field key of p: a string escaped, another value as
 * put_value writes it, nothing when absent. */
static void field(struct sum *s, const msgpack_object *p, const char *key)
{
	const msgpack_object *v = sb_map_get(p, key);

	if (v)
		put_value(s, v, 0);
}

static uint64_t u64(const msgpack_object *p, const char *key)
{
	return sb_map_u64(p, key, 0);
}

/* Appends v with thousands separators: 1,204. */
static void put_count(struct sum *s, uint64_t v)
{
	char tmp[32], out[48];
	int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v), o = 0;

	for (int i = 0; i < n; i++) {
		if (i && (n - i) % 3 == 0)
			out[o++] = ',';
		out[o++] = tmp[i];
	}
	put_raw(s, out, (size_t)o);
}

static void put_usd(struct sum *s, uint64_t nusd)
{
	char tmp[32];

	sb_usd_format(nusd, tmp, sizeof tmp);
	put(s, tmp);
}

/* ---- one function per type (or pair of types) ---- */

typedef void (*sum_fn)(struct sum *s, const struct sb_event *ev, const msgpack_object *p);

static void sum_run_created(struct sum *s, const struct sb_event *ev,
			    const msgpack_object *p)
{
	const msgpack_object *g = sb_map_get(p, "group");

	field(s, p, "name");
	put(s, " (template ");
	field(s, p, "template");
	if (g && !(g->type == MSGPACK_OBJECT_STR && g->via.str.size == 0)) {
		put(s, ", group ");
		put_value(s, g, 0);
	}
	put(s, ")");
}

static void sum_policy(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	putf(s, "%llu cpu, %llu MiB, timeout %llus, network ",
	     (unsigned long long)u64(p, "cpus"), (unsigned long long)u64(p, "memory_mib"),
	     (unsigned long long)u64(p, "timeout_s"));
	field(s, p, "network");
	if (sb_map_get(p, "model")) {
		put(s, ", model ");
		field(s, p, "model");
	}
	put(s, ", budget ");
	if (u64(p, "budget_nusd"))
		put_usd(s, u64(p, "budget_nusd"));
	else
		put(s, "none");
}

static void sum_run_started(struct sum *s, const struct sb_event *ev,
			    const msgpack_object *p)
{
	put(s, "accel ");
	field(s, p, "accel");
}

/* "acquisition: 4 runs, budget $2.0000: evaluate an acquisition" */
static void sum_group_created(struct sum *s, const struct sb_event *ev,
			      const msgpack_object *p)
{
	uint64_t budget = u64(p, "budget_nusd");
	const msgpack_object *goal = sb_map_get(p, "goal");

	field(s, p, "name");
	putf(s, ": %llu runs", (unsigned long long)u64(p, "planned"));
	if (budget) {
		put(s, ", budget ");
		put_usd(s, budget);
	}
	if (goal && goal->type == MSGPACK_OBJECT_STR && goal->via.str.size) {
		put(s, ": ");
		field(s, p, "goal");
	}
}

/* "waits for 2 vCPUs, 256 MiB (3 runs ahead)" */
static void sum_queued(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	uint64_t ahead = u64(p, "ahead");

	putf(s, "waits for %llu vCPUs, %llu MiB", (unsigned long long)u64(p, "cpus"),
	     (unsigned long long)u64(p, "memory_mib"));
	if (ahead)
		putf(s, " (%llu run%s ahead)", (unsigned long long)ahead, ahead == 1 ? "" : "s");
}

static void sum_input_ready(struct sum *s, const struct sb_event *ev,
			    const msgpack_object *p)
{
	const msgpack_object *sk = sb_map_get(p, "skipped_paths");

	putf(s, "%llu input files, ", (unsigned long long)u64(p, "files"));
	put_count(s, u64(p, "bytes"));
	put(s, " bytes");
	if (u64(p, "skipped")) {
		putf(s, " (%llu skipped", (unsigned long long)u64(p, "skipped"));
		for (uint32_t i = 0; sk && sk->type == MSGPACK_OBJECT_ARRAY &&
				     i < sk->via.array.size;
		     i++) {
			put(s, i ? ", " : ": ");
			put_value(s, &sk->via.array.ptr[i], 1);
		}
		put(s, ")");
	}
}

static void sum_turn(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	putf(s, "turn %llu", (unsigned long long)u64(p, "turn"));
}

static void sum_message(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	const msgpack_object *stream = sb_map_get(p, "stream");

	if (ev->source == SB_SRC_GATEWAY) { /* one model call, metered */
		field(s, p, "model");
		put(s, stream && stream->type == MSGPACK_OBJECT_BOOLEAN &&
			       stream->via.boolean
			   ? " stream"
			   : " call");
		putf(s, ": HTTP %llu, ", (unsigned long long)u64(p, "status"));
		put_count(s, u64(p, "input_tokens"));
		put(s, " input · ");
		put_count(s, u64(p, "output_tokens"));
		putf(s, " output, %llums", (unsigned long long)u64(p, "duration_ms"));
		if (sb_map_get(p, "cut"))
			put(s, " (cut: past the budget)");
		return;
	}
	field(s, p, "role");
	if (sb_map_get(p, "text")) {
		put(s, ": ");
		field(s, p, "text");
	}
}

static void sum_tool(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	field(s, p, "tool");
	put(s, " ");
	field(s, p, "args");
	if (!strcmp(ev->type, "agent.tool.completed"))
		putf(s, " (exit %lld, %llums)", (long long)sb_map_i64(p, "exit", 0),
		     (unsigned long long)u64(p, "duration_ms"));
}

/* "18/40 reports checked" */
static void sum_progress(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	const msgpack_object *label = sb_map_get(p, "label");
	char line[1024]; /* a summary's length */
	size_t n;

	if (!label || label->type != MSGPACK_OBJECT_STR) {
		put_pairs(s, p, "=", " ", 0); /* not what the schema lets through */
		return;
	}
	n = sb_progress_text(u64(p, "count"), u64(p, "total"), label->via.str.ptr,
			     label->via.str.size, line, sizeof line);
	put_text(s, line, n);
}

static void sum_file(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	field(s, p, "kind");
	put(s, " ");
	field(s, p, "path");
	put(s, " (");
	put_count(s, u64(p, "size"));
	put(s, " bytes)");
}

static void sum_usage(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	put_count(s, u64(p, "input_tokens"));
	put(s, " input · ");
	put_count(s, u64(p, "output_tokens"));
	put(s, " output · ");
	put_usd(s, u64(p, "cost_nusd"));
	put(s, " (");
	field(s, p, "model");
	put(s, ")");
}

static void sum_output(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	const msgpack_object *data = sb_map_get(p, "data");

	field(s, p, "stream");
	put(s, ": ");
	if (data && data->type == MSGPACK_OBJECT_STR) {
		size_t n = data->via.str.size;

		while (n && (data->via.str.ptr[n - 1] == '\n' ||
			     data->via.str.ptr[n - 1] == '\r'))
			n--; /* the end of a line is not shown */
		put_text(s, data->via.str.ptr, n);
	} else if (data) {
		put_value(s, data, 0);
	}
}

static void sum_snapshot(struct sum *s, const struct sb_event *ev,
			 const msgpack_object *p)
{
	field(s, p, "snapshot");
	put(s, " (");
	field(s, p, "kind");
	put(s, ", ");
	field(s, p, "trigger");
	put(s, ")");
}

static void sum_snapshot_rm(struct sum *s, const struct sb_event *ev,
			    const msgpack_object *p)
{
	field(s, p, "snapshot");
	put(s, " removed by ");
	field(s, p, "by");
}

static void sum_reason(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	field(s, p, "reason");
}

static void sum_exited(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	putf(s, "status %lld", (long long)sb_map_i64(p, "status", 0));
}

/* Whether a fork or resume comes from its run's start (snapshot ""). */
static int from_start(const msgpack_object *p)
{
	const msgpack_object *v = sb_map_get(p, "snapshot");

	return v && v->type == MSGPACK_OBJECT_STR && !v->via.str.size;
}

/* The roll-forward of a fork or resume (run.forked, run.resumed): "at
 * offset 40: 3 files rolled forward, 1 removed, 2 omitted: /workspace/a,
 * /workspace/b" and "(not exact)" when it is not. */
static void put_roll(struct sum *s, const msgpack_object *p)
{
	const msgpack_object *ex = sb_map_get(p, "exact"), *om = sb_map_get(p, "omitted");
	uint64_t rolled = u64(p, "rolled"), removed = u64(p, "removed");
	uint64_t omitted = u64(p, "omitted_count");

	if (om && om->type == MSGPACK_OBJECT_ARRAY && omitted < om->via.array.size)
		omitted = om->via.array.size;
	if (u64(p, "at") > u64(p, "from_offset"))
		putf(s, " to offset %llu", (unsigned long long)u64(p, "at"));
	if (rolled || removed || omitted) {
		putf(s, ": %llu file%s rolled forward, %llu removed", (unsigned long long)rolled,
		     rolled == 1 ? "" : "s", (unsigned long long)removed);
		if (omitted) {
			putf(s, ", %llu omitted", (unsigned long long)omitted);
			for (uint32_t i = 0; om && om->type == MSGPACK_OBJECT_ARRAY &&
					     i < om->via.array.size;
			     i++) {
				put(s, i ? ", " : ": ");
				put_value(s, &om->via.array.ptr[i], 1);
			}
			if (om && om->type == MSGPACK_OBJECT_ARRAY && omitted > om->via.array.size)
				put(s, ", …");
		}
	}
	if (ex && ex->type == MSGPACK_OBJECT_BOOLEAN && !ex->via.boolean)
		put(s, " (not exact)");
}

static void sum_resumed(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	put(s, "from ");
	field(s, p, "from_run");
	if (from_start(p)) {
		put(s, " at its start");
	} else {
		if (sb_map_get(p, "snapshot")) {
			put(s, " snapshot ");
			field(s, p, "snapshot");
		}
		putf(s, " at offset %llu", (unsigned long long)u64(p, "from_offset"));
	}
	put_roll(s, p);
}

static void sum_forked(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	put(s, "from ");
	field(s, p, "from_run");
	if (from_start(p)) {
		put(s, " at its start");
	} else {
		put(s, " at snapshot ");
		field(s, p, "snapshot");
		putf(s, " (offset %llu)", (unsigned long long)u64(p, "from_offset"));
	}
	put_roll(s, p);
}

static void sum_removed(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	put(s, "by ");
	field(s, p, "by");
	putf(s, ", %llu bytes freed", (unsigned long long)u64(p, "bytes"));
	if (u64(p, "kept"))
		putf(s, ", %llu layers kept for the runs that read them",
		     (unsigned long long)u64(p, "kept"));
}

/* operator.exec: who ran what, how it ended, what it printed. */
static void sum_exec(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	const msgpack_object *argv = sb_map_get(p, "argv"), *to = sb_map_get(p, "timed_out");

	field(s, p, "by");
	put(s, " ran ");
	if (argv)
		put_value(s, argv, 0);
	putf(s, ": exit %lld", (long long)sb_map_i64(p, "status", 0));
	if (to && to->type == MSGPACK_OBJECT_BOOLEAN && to->via.boolean)
		put(s, " (timed out)");
	put(s, ", ");
	put_count(s, u64(p, "stdout_bytes"));
	put(s, " bytes out, ");
	put_count(s, u64(p, "stderr_bytes"));
	put(s, " bytes err");
}

/* operator.cp: who copied how many files into the run. */
static void sum_cp(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	field(s, p, "by");
	put(s, " copied in ");
	put_count(s, u64(p, "written"));
	put(s, " files, ");
	put_count(s, u64(p, "bytes"));
	put(s, " bytes");
}

/* rerun.diverged: the call whose request left the record, and where. */
static void sum_diverged(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	putf(s, "call %llu differs from the record at ", (unsigned long long)u64(p, "call"));
	field(s, p, "path");
}

/* rerun.compared: the same outcome as the original, or where it differs. */
static void sum_compared(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	int64_t st = sb_map_i64(p, "status", -1), ost = sb_map_i64(p, "original_status", -1);
	uint64_t nf = u64(p, "files_differ"), at = u64(p, "tools_differ_at");

	put(s, sb_map_bool(p, "same", 0) ? "the same outcome as " : "differs from ");
	field(s, p, "original");
	if (st != ost)
		putf(s, ": exit %lld (original %lld)", (long long)st, (long long)ost);
	if (nf)
		putf(s, "%s%llu file%s", st != ost ? ", " : ": ", (unsigned long long)nf,
		     nf == 1 ? "" : "s");
	if (at)
		putf(s, "%stool call %llu", st != ost || nf ? ", " : ": ",
		     (unsigned long long)at);
}

static void sum_warning(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	field(s, p, "message");
}

static void sum_budget(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	if (sb_map_get(p, "group")) {
		put(s, "group ");
		field(s, p, "group");
		put(s, " ");
	}
	put(s, "spent ");
	put_usd(s, u64(p, "spent_nusd"));
	put(s, " of ");
	put_usd(s, u64(p, "budget_nusd"));
}

/* "tcp 198.51.100.11:8080 name b.test: name not granted (3 times)" */
static void sum_denied(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	char dst[64] = "";
	int v6;

	sb_map_str(p, "dst", dst, sizeof dst);
	v6 = strchr(dst, ':') != NULL;
	field(s, p, "proto");
	put(s, v6 && u64(p, "port") ? " [" : " ");
	field(s, p, "dst");
	if (u64(p, "port"))
		putf(s, "%s:%llu", v6 ? "]" : "", (unsigned long long)u64(p, "port"));
	if (sb_map_get(p, "name")) {
		put(s, " name ");
		field(s, p, "name");
	}
	put(s, ": ");
	field(s, p, "reason");
	putf(s, " (%llu times)", (unsigned long long)u64(p, "count"));
}

/* "a.test A 198.51.100.10 (2 lookups)" */
static void sum_resolved(struct sum *s, const struct sb_event *ev,
			 const msgpack_object *p)
{
	const msgpack_object *a = sb_map_get(p, "addrs");

	field(s, p, "name");
	put(s, " ");
	field(s, p, "type");
	for (uint32_t i = 0;
	     a && a->type == MSGPACK_OBJECT_ARRAY && i < a->via.array.size; i++) {
		put(s, i ? "," : " ");
		put_value(s, &a->via.array.ptr[i], 0);
	}
	putf(s, " (%llu lookups)", (unsigned long long)u64(p, "count"));
}

static void sum_grant(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	field(s, p, "grant");
	put(s, " (by ");
	field(s, p, "by");
	put(s, ")");
}

static void sum_secret(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	field(s, p, "name");
	put(s, " (scope ");
	field(s, p, "scope");
	put(s, ")");
}

static void sum_note(struct sum *s, const struct sb_event *ev, const msgpack_object *p)
{
	field(s, p, "by");
	put(s, ": ");
	field(s, p, "text");
}

static const struct summary {
	const char *type;
	sum_fn fn;
} table[] = {
    {"run.created", sum_run_created},	{"run.policy.resolved", sum_policy},
    {"run.started", sum_run_started},	{"run.queued", sum_queued},
    {"group.created", sum_group_created},	{"harness.input.ready", sum_input_ready},
    {"agent.turn.started", sum_turn},	{"agent.turn.completed", sum_turn},
    {"agent.message", sum_message},	{"agent.tool.started", sum_tool},
    {"agent.tool.completed", sum_tool}, {"agent.progress", sum_progress},
    {"agent.file.changed", sum_file},
    {"agent.usage.updated", sum_usage}, {"agent.output", sum_output},
    {"snapshot.saved", sum_snapshot},	{"snapshot.removed", sum_snapshot_rm},
    {"run.stopped", sum_reason},	{"run.exited", sum_exited},
    {"run.failed", sum_reason},		{"run.resumed", sum_resumed},
    {"run.forked", sum_forked},		{"run.warning", sum_warning},
    {"budget.exceeded", sum_budget},	{"net.denied", sum_denied},
    {"net.resolved", sum_resolved},	{"net.grant.added", sum_grant},
    {"net.grant.removed", sum_grant},	{"secret.granted", sum_secret},
    {"operator.note", sum_note},	{"run.removed", sum_removed},
    {"operator.exec", sum_exec},	{"operator.cp", sum_cp},
    {"rerun.diverged", sum_diverged},
    {"rerun.compared", sum_compared},
};

static const struct summary *find(const char *type)
{
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
		if (!strcmp(table[i].type, type))
			return &table[i];
	return NULL;
}

int sb_summary_has(const char *type)
{
	return find(type) != NULL;
}

void sb_event_summary(const struct sb_event *ev, const msgpack_object *payload, char *buf,
		      size_t cap)
{
	struct sum s = {buf, cap, 0, 0};
	const struct summary *e;

	if (!cap)
		return;
	buf[0] = 0;
	if (!payload || payload->type != MSGPACK_OBJECT_MAP)
		put(&s, "(no payload)");
	else if ((e = find(ev->type)))
		e->fn(&s, ev, payload);
	else
		put_pairs(&s, payload, "=", " ", 0); /* a type this table does not know */
}

void sb_summary_value(const msgpack_object *v, char *buf, size_t cap)
{
	struct sum s = {buf, cap, 0, 0};

	if (!cap)
		return;
	buf[0] = 0;
	put_value(&s, v, 0);
}

size_t sb_progress_text(uint64_t count, uint64_t total, const char *label, size_t len,
			char *buf, size_t cap)
{
	int n = total ? snprintf(buf, cap, "%llu/%llu ", (unsigned long long)count,
				 (unsigned long long)total)
		      : snprintf(buf, cap, "%llu ", (unsigned long long)count);
	size_t at = n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;

	len = sb_utf8_cut(label, len, cap - 1 - at);
	memcpy(buf + at, label, len);
	buf[at + len] = 0;
	return at + len;
}

void sb_usd_format(uint64_t nusd, char *buf, size_t cap)
{
	char frac[16];
	size_t n;

	snprintf(frac, sizeof frac, "%09llu", (unsigned long long)(nusd % 1000000000u));
	for (n = 9; n > 4 && frac[n - 1] == '0'; n--)
		;
	snprintf(buf, cap, "$%llu.%.*s", (unsigned long long)(nusd / 1000000000u), (int)n,
		 frac);
}
