/* cmd_fs.c - sanbox fs ls|cat: read a run's disk offline. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "vmm/fsread.h"

/* Resolves RUN and opens its disk. */
static int open_disk(const char *want, sb_fsread **f)
{
	char run[SB_RUN_MAX], layer[PATH_MAX + 64];
	sb_client *c;
	int rc;

	if ((rc = cli_connect(1, &c)))
		return rc;
	rc = cli_resolve(c, want, run);
	sb_client_close(c);
	if (rc)
		return rc;
	snprintf(layer, sizeof layer, "%s/runs/%s/disk.qcow2", cli_home, run);
	return sb_fsread_open(layer, f);
}

/* Guest path: absolute as given, else under /workspace. */
void cli_guest_path(const char *p, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s%s", p[0] == '/' ? "" : "/workspace/", p);
}

/* Copies guest path out of run want into dest ("-" = stdout). */
int cli_copy_out(const char *want, const char *path, const char *dest)
{
	char gp[1100], tmp[] = "/tmp/sanbox-cat.XXXXXX";
	sb_fsread *f;
	int rc, fd;

	cli_guest_path(path, gp, sizeof gp);
	if ((rc = open_disk(want, &f)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if (strcmp(dest, "-")) {
		rc = sb_fsread_copy(f, gp, dest);
	} else if ((fd = mkstemp(tmp)) < 0) {
		rc = sb_seterr(SB_ERR_IO, "mkstemp failed");
	} else {
		close(fd);
		if ((rc = sb_fsread_copy(f, gp, tmp)) == SB_OK) {
			FILE *in = fopen(tmp, "rb");
			char buf[65536];
			size_t n;
			while (in && (n = fread(buf, 1, sizeof buf, in)) > 0)
				fwrite(buf, 1, n, stdout);
			if (in)
				fclose(in);
		}
		unlink(tmp);
	}
	sb_fsread_close(f);
	return rc ? cli_fail(rc, "%s", sb_errmsg(rc)) : 0;
}

int cmd_fs(int argc, char **argv)
{
	int json = argc > 1 && !strcmp(argv[argc - 1], "--json");
	char gp[1100], out[65536];
	sb_fsread *f;
	int rc;

	argc -= json;
	if (argc >= 3 && argc <= 4 && !strcmp(argv[1], "ls")) {
		cli_guest_path(argc == 4 ? argv[3] : "", gp, sizeof gp);
		if ((rc = open_disk(argv[2], &f)))
			return cli_fail(rc, "%s", sb_errmsg(rc));
		rc = sb_fsread_ls(f, gp, out, sizeof out);
		sb_fsread_close(f);
		if (rc)
			return cli_fail(rc, "%s", sb_errmsg(rc));
		if (!json) {
			fputs(out, stdout);
			return 0;
		}
		json_t *arr = json_array();
		for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
			char mode[16], name[512];
			unsigned long long size;
			if (sscanf(line, "%15s %llu %511[^\n]", mode, &size, name) == 3)
				json_array_append_new(arr, json_pack("{s:s,s:I,s:s,s:b}", "name", name, "size",
								     (json_int_t)size, "mode", mode, "dir",
								     mode[0] == '4' && strlen(mode) == 5));
		}
		cli_print_json(arr);
		return 0;
	}
	if (argc == 4 && !strcmp(argv[1], "cat"))
		return cli_copy_out(argv[2], argv[3], "-");
	return cli_usage("fs");
}
