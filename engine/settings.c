/* settings.c - reading STATE_DIR/sanboxd.json (see settings.h). */
#include "engine/settings.h"

#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/error.h"
#include "engine/home.h"
#include "engine/units.h"

#define FILE_MAX (1u << 20)
#define MIB	 (1024.0 * 1024.0)

enum kind { U64, DBL, STR };

/* One setting: where it lives in the file and in the struct, its default
 * and its range, in the file's unit. The file gives sizes in MiB where the
 * name says so (scale); the struct holds bytes. */
static const struct setting {
	const char *section, *name;
	enum kind kind;
	size_t off;
	double dflt, min, max, scale;
	const char *str; /* a string's default */
	size_t cap;	 /* a string's room, its NUL included */
} table[] = {
#define U(sec, nm, field, dflt, lo, hi, sc)                                              \
	{                                                                                \
		sec, nm, U64, offsetof(struct sb_settings, field), dflt, lo, hi, sc,     \
		    NULL, 0                                                              \
	}
#define D(sec, nm, field, dflt, lo, hi)                                                  \
	{                                                                                \
		sec, nm, DBL, offsetof(struct sb_settings, field), dflt, lo, hi, 1,      \
		    NULL, 0                                                              \
	}
#define S(sec, nm, field, dflt)                                                          \
	{                                                                                \
		sec, nm, STR, offsetof(struct sb_settings, field), 0, 0, 0, 1, dflt,     \
		    sizeof(((struct sb_settings *)0)->field)                             \
	}
    U("local", "max_conns", local_max_conns, 1024, 8, 65536, 1),
    U("local", "max_request_mib", local_max_request, 64, 1, 1024, MIB),
    U("local", "max_inflight", local_max_inflight, 64, 1, 4096, 1),
    U("local", "max_buffered_mib", local_max_buffered, 512, 64, 65536, MIB),
    D("local", "handshake_timeout_s", local_handshake_s, 10, 0.1, 3600),
    D("local", "request_timeout_s", local_request_s, 30, 0.1, 3600),
    D("local", "idle_timeout_s", local_idle_s, 600, 1, 86400),
    U("remote", "max_conns", remote_max_conns, 256, 1, 65536, 1),
    U("remote", "max_conns_per_peer", remote_max_conns_per_peer, 16, 1, 65536, 1),
    D("remote", "accept_rate", remote_accept_rate, 10, 0.1, 100000),
    D("remote", "accept_burst", remote_accept_burst, 20, 1, 100000),
    D("remote", "handshake_timeout_s", remote_handshake_s, 10, 0.1, 3600),
    D("remote", "unauth_timeout_s", remote_unauth_s, 10, 0.1, 3600),
    D("remote", "idle_timeout_s", remote_idle_s, 300, 1, 86400),
    U("remote", "preauth_bytes", remote_preauth_bytes, 4096, 256, 1 << 20, 1),
    U("remote", "max_request_mib", remote_max_request, 64, 1, 1024, MIB),
    U("remote", "max_denied", remote_max_denied, 8, 1, 1000, 1),
    U("gateway", "max_conns", gateway_max_conns, 512, 16, 65536, 1),
    D("gateway", "header_timeout_s", gateway_header_s, 10, 0.1, 3600),
    D("gateway", "body_timeout_s", gateway_body_s, 60, 0.1, 3600),
    U("runs", "record_quota_mib", run_record_quota, 1024, 1, 1 << 20, MIB),
    U("runs", "file_content_max_kib", run_file_max, 1024, 0, 1024, 1024),
    U("runs", "file_content_quota_mib", run_files_quota, 256, 0, 1 << 20, MIB),
    D("runs", "guest_events_per_s", guest_events_rate, 200, 1, 1e6),
    D("runs", "guest_events_burst", guest_events_burst, 2000, 1, 1e7),
    D("runs", "snapshot_interval_s", snapshot_interval_s, 5, 0, 86400),
    D("runs", "snapshots_keep", snapshots_keep, 32, 0, 100000),
    D("runs", "boot_timeout_s", boot_timeout_s, 120, 1, 86400),
    D("runs", "warm_start", warm_start, 1, 0, 1),
    U("runs", "capacity_cpus", capacity_cpus, 0, 0, 1 << 20, 1),
    U("runs", "capacity_memory_mib", capacity_memory_mib, 0, 0, 1ull << 40, 1),
    S("net", "resolver", net_resolver, ""),
    S("net", "subnet4", net_subnet4, "10.87.0.0/16"),
    S("net", "subnet6", net_subnet6, "fd53:616e:626f::/48"),
    D("net", "ipv6", net_ipv6, 0, 0, 1),
    D("net", "private_answers", net_private_answers, 0, 0, 1),
    D("net", "ttl_min_s", net_ttl_min_s, 5, 0, 3600),
    D("net", "ttl_max_s", net_ttl_max_s, 3600, 1, 86400),
    D("net", "report_interval_s", net_report_s, 1, 0.1, 60),
#undef U
#undef D
#undef S
};

/* Sets setting t of s to v (in the file's unit). */
static void setting_put(struct sb_settings *s, const struct setting *t, double v)
{
	if (t->kind == STR)
		snprintf((char *)s + t->off, t->cap, "%s", t->str);
	else if (t->kind == U64)
		*(uint64_t *)((char *)s + t->off) = (uint64_t)(v * t->scale);
	else
		*(double *)((char *)s + t->off) = v;
}

void sb_settings_defaults(struct sb_settings *s)
{
	memset(s, 0, sizeof *s);
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
		setting_put(s, &table[i], table[i].dflt);
}

static const struct setting *find(const char *section, const char *name)
{
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
		if (!strcmp(table[i].section, section) &&
		    (!name || !strcmp(table[i].name, name)))
			return &table[i];
	return NULL;
}

/* The line of the file path on which "key" first stands (1 for none
 * found: the error is then the file's). */
static int line_of(const char *path, const char *key)
{
	char want[128], *buf = malloc(FILE_MAX + 1);
	FILE *f = buf ? fopen(path, "r") : NULL;
	size_t n = f ? fread(buf, 1, FILE_MAX, f) : 0;
	int line = 1;

	if (f)
		fclose(f);
	if (!buf)
		return 1;
	buf[n] = 0;
	snprintf(want, sizeof want, "\"%.100s\"", key);
	for (char *p = buf, *end = strstr(buf, want); end && p < end; p++)
		line += *p == '\n';
	free(buf);
	return line;
}

static int apply(const char *path, json_t *root, struct sb_settings *s)
{
	const char *sec, *name;
	json_t *obj, *v;

	if (!json_is_object(root))
		return sb_seterr(SB_ERR_INVAL, "%s: not a JSON object", path);
	json_object_foreach(root, sec, obj)
	{
		if (!find(sec, NULL))
			return sb_seterr(SB_ERR_INVAL, "%s:%d: unknown section '%.40s'",
					 path, line_of(path, sec), sec);
		if (!json_is_object(obj))
			return sb_seterr(SB_ERR_INVAL, "%s:%d: section '%s' is not an object",
					 path, line_of(path, sec), sec);
		json_object_foreach(obj, name, v)
		{
			const struct setting *t = find(sec, name);
			double x = json_number_value(v);
			if (!t)
				return sb_seterr(SB_ERR_INVAL, "%s:%d: unknown setting %s.%.40s",
						 path, line_of(path, name), sec, name);
			if (t->kind == STR) {
				if (!json_is_string(v) ||
				    json_string_length(v) >= t->cap ||
				    strlen(json_string_value(v)) != json_string_length(v))
					return sb_seterr(
					    SB_ERR_INVAL,
					    "%s:%d: %s.%s must be a string of at "
					    "most %zu bytes",
					    path, line_of(path, name), sec, name, t->cap - 1);
				snprintf((char *)s + t->off, t->cap, "%s",
					 json_string_value(v));
				continue;
			}
			if (!json_is_number(v) || !(x >= t->min && x <= t->max) ||
			    (t->kind == U64 && x != floor(x)))
				return sb_seterr(
				    SB_ERR_INVAL, "%s:%d: %s.%s must be %s from %g to %g",
				    path, line_of(path, name), sec, name,
				    t->kind == U64 ? "a whole number" : "a number",
				    t->min, t->max);
			if (t->kind == U64)
				*(uint64_t *)((char *)s + t->off) =
				    (uint64_t)(x * t->scale);
			else
				*(double *)((char *)s + t->off) = x;
		}
	}
	return SB_OK;
}

int sb_settings_load(const char *home, struct sb_settings *s)
{
	char path[4096];
	const char *env = getenv("SANBOX_BOOT_TIMEOUT");
	json_error_t je;
	struct stat st;
	json_t *root;
	int rc = SB_OK;

	sb_settings_defaults(s);
	if ((rc = sb_home_path(home, "sanboxd.json", path, sizeof path)))
		return rc;
	if (stat(path, &st) == 0) {
		if (st.st_size > FILE_MAX)
			return sb_seterr(SB_ERR_INVAL, "%s: larger than %u bytes", path,
					 FILE_MAX);
		if (!(root = json_load_file(path, JSON_REJECT_DUPLICATES, &je)))
			return sb_seterr(SB_ERR_INVAL, "%s:%d: %s", path, je.line, je.text);
		rc = apply(path, root, s);
		json_decref(root);
		if (rc)
			return rc;
	}
	if (env && *env) {
		double v;
		if (sb_duration_parse(env, &v) || v < 1 || v > 86400)
			return sb_seterr(
			    SB_ERR_INVAL,
			    "SANBOX_BOOT_TIMEOUT must be 1 to 86400 seconds (e.g. 120, "
			    "90s, 3m), not '%.40s'",
			    env);
		s->boot_timeout_s = v;
	}
	if ((env = getenv("SANBOX_WARM_START")) && *env) {
		if (strcmp(env, "0") && strcmp(env, "1"))
			return sb_seterr(SB_ERR_INVAL,
					 "SANBOX_WARM_START must be 0 or 1, not '%.40s'",
					 env);
		s->warm_start = *env == '1';
	}
	return SB_OK;
}
