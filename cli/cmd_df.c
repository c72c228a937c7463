/* cmd_df.c - sanbox df: the space the state directory takes, by kind. */
#include <stdio.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"

/* Prints one row: what, its size, and a note. */
static void df_row(const char *what, unsigned long long bytes, const char *note)
{
	char size[32];

	cli_size(bytes, size, sizeof size);
	printf("%-18s %10s%s%s\n", what, size, *note ? "  " : "", note);
}

int cmd_df(int argc, char **argv)
{
	static const char *const keys[] = {"runs_bytes",      "snapshots_bytes", "memory_bytes",
					   "templates_bytes", "cache_bytes",	 "blobs_bytes",
					   "log_bytes"};
	const msgpack_object *m;
	struct cli_req r;
	struct sb_reply rep;
	unsigned long long total = 0;
	char note[64];
	sb_client *c;
	int json = 0, rc;

	if ((rc = cli_parse_opts(argc, argv, "df", &json)) != CLI_GO_ON)
		return rc;
	if (optind != argc)
		return cli_usage("df");
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	cli_req_begin(&r, "space");
	if ((rc = cli_call(c, &r, &rep))) {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
		goto out;
	}
	m = &rep.map;
	if (json) {
		cli_print_reply(m);
		goto out;
	}
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		total += sb_map_u64(m, keys[i], 0);
	printf("%-18s %10s\n", "WHAT", "SIZE");
	snprintf(note, sizeof note, "%llu runs", (unsigned long long)sb_map_u64(m, "runs", 0));
	df_row("runs", sb_map_u64(m, "runs_bytes", 0), note);
	snprintf(note, sizeof note, "%llu frozen disk layers",
		 (unsigned long long)sb_map_u64(m, "snapshots", 0));
	df_row("snapshots", sb_map_u64(m, "snapshots_bytes", 0), note);
	snprintf(note, sizeof note, "%llu memory images",
		 (unsigned long long)sb_map_u64(m, "memory_snapshots", 0));
	df_row("memory snapshots", sb_map_u64(m, "memory_bytes", 0), note);
	df_row("templates", sb_map_u64(m, "templates_bytes", 0), "");
	df_row("cache", sb_map_u64(m, "cache_bytes", 0), "warm images, kernels");
	df_row("blobs", sb_map_u64(m, "blobs_bytes", 0), "file contents, model bodies");
	df_row("log", sb_map_u64(m, "log_bytes", 0), "events, indexes, projections");
	df_row("total", total, "");
out:
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}
