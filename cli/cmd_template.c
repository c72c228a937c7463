/* cmd_template.c - sanbox template build|ls: build and list templates. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/home.h"
#include "engine/proc.h"
#include "engine/template.h"

/* The directory this program lives in (the build directory). */
static int self_dir(char *buf, size_t cap)
{
	ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
	char *slash;

	if (n <= 0)
		return sb_seterr(SB_ERR_IO, "cannot find this program's path");
	buf[n] = 0;
	if ((slash = strrchr(buf, '/')))
		*slash = 0;
	return SB_OK;
}

/* Finds the source tree (templates/ and tools/): $SANBOX_SRC, else the
 * nearest parent of the build directory that has tools/mkimage.sh. */
static int source_root(const char *bin, char *buf, size_t cap)
{
	char probe[PATH_MAX + 32];

	if (getenv("SANBOX_SRC")) {
		snprintf(buf, cap, "%s", getenv("SANBOX_SRC"));
		return SB_OK;
	}
	snprintf(buf, cap, "%s", bin);
	for (int up = 0; up < 4; up++) {
		snprintf(probe, sizeof probe, "%s/tools/mkimage.sh", buf);
		if (!access(probe, R_OK))
			return SB_OK;
		strncat(buf, "/..", cap - strlen(buf) - 1);
	}
	return sb_seterr(SB_ERR_NOTFOUND,
			 "cannot find the Sanbox sources: set SANBOX_SRC");
}

/* Builds template name from SOURCE_ROOT/templates/NAME into the store, via
 * a temporary directory renamed into place, so a failed build leaves the
 * previous template intact. */
static int build(char **args, int json)
{
	const char *name = args[0];
	char bin[PATH_MAX], root[PATH_MAX], store[PATH_MAX], src[PATH_MAX + 32];
	char tmp[PATH_MAX + 32], dst[PATH_MAX + 32], old[PATH_MAX + 32],
	    script[PATH_MAX + 32];
	char *build_argv[] = {
	    "sh", "-c",	  "rm -rf \"$2\" && exec sh \"$1\" \"$3\" \"$2\"",
	    "sh", script, tmp,
	    src,  NULL};
	char *rm_argv[] = {"rm", "-rf", old, NULL};
	/* the build's output goes to the CLI's stderr */
	struct sb_spawn build = {.argv = build_argv, .in = -1, .out = 2, .err = 2},
			rm = {.argv = rm_argv, .in = -1, .out = -1, .err = -1};
	struct sb_template t;
	pid_t pid;
	int status, rc;

	if (cli_local_only("template build"))
		return CLI_EXIT_USAGE;
	if ((rc = self_dir(bin, sizeof bin)) ||
	    (rc = sb_template_store(cli_home, store, sizeof store)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if ((rc = source_root(bin, root, sizeof root)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	snprintf(src, sizeof src, "%s/templates/%s", root, name);
	snprintf(script, sizeof script, "%s/tools/mkimage.sh", root);
	if (access(src, R_OK) || strchr(name, '/') || name[0] == '.')
		return cli_fail(SB_ERR_NOTFOUND, "no template source %s", src);
	if ((rc = sb_mkdirs(store, 0700)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	snprintf(tmp, sizeof tmp, "%s/.%s.new", store, name);
	snprintf(dst, sizeof dst, "%s/%s", store, name);
	snprintf(old, sizeof old, "%s/.%s.old", store, name);
	setenv("BUILD", bin, 1); /* for mkimage.sh */
	if ((rc = sb_spawn(&build, &pid)) || (rc = sb_proc_wait(pid, -1, &status)))
		return cli_fail(rc, "template %s: %s", name, sb_errmsg(rc));
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		return cli_fail(SB_ERR_IO,
				"template %s: build failed (see the messages above)",
				name);
	/* swap in the new build */
	if (rename(dst, old) && errno != ENOENT)
		return cli_fail(SB_ERR_IO, "rename %s: %s", dst, strerror(errno));
	if (rename(tmp, dst))
		return cli_fail(SB_ERR_IO, "rename %s: %s", tmp, strerror(errno));
	if (sb_spawn(&rm, &pid) == SB_OK)
		sb_proc_wait(pid, -1, NULL);
	if ((rc = sb_template_load(cli_home, name, &t)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if (json) {
		cli_print_json(json_pack("{s:s, s:s}", "name", name, "hash", t.hash));
	} else {
		char cell[1024];
		cli_cell(name, 0, cell, sizeof cell);
		printf("template %s built: %s\n", cell, t.hash);
	}
	return CLI_EXIT_OK;
}

/* Prints template t as a row of the ls table, its cells escaped. */
static void print_row(const struct sb_template *t)
{
	char name[4 * 16 + 1], hash[4 * 16 + 1];

	cli_cell(t->name, 16, name, sizeof name);
	cli_cell(t->hash, 16, hash, sizeof hash);
	printf("%s %-10llu %-8llu %-8llu %s\n", name, (unsigned long long)t->cpus,
	       (unsigned long long)t->memory_mib, (unsigned long long)t->timeout_s, hash);
}

static int list(char **args, int json)
{
	char store[PATH_MAX];
	struct dirent **ents = NULL;
	json_t *arr;
	int n, rc;

	if (cli_local_only("template ls"))
		return CLI_EXIT_USAGE;
	arr = json_array();
	if ((rc = sb_template_store(cli_home, store, sizeof store)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if (!json)
		printf("%-16s %-10s %-8s %-8s %s\n", "TEMPLATE", "CPUS", "MEMORY",
		       "TIMEOUT", "HASH");
	n = scandir(store, &ents, NULL, alphasort); /* a missing store lists nothing */
	for (int i = 0; i < n; i++) {
		struct sb_template t;
		if (ents[i]->d_name[0] != '.' &&
		    sb_template_load(cli_home, ents[i]->d_name, &t) == SB_OK) {
			if (json)
				json_array_append_new(
				    arr,
				    json_pack("{s:s,s:s,s:I,s:I,s:I,s:s}", "name", t.name,
					      "hash", t.hash, "cpus", (json_int_t)t.cpus,
					      "memory_mib", (json_int_t)t.memory_mib,
					      "timeout_s", (json_int_t)t.timeout_s,
					      "harness", t.harness));
			else
				print_row(&t);
		}
		free(ents[i]);
	}
	free(ents);
	if (json)
		cli_print_json(arr);
	else
		json_decref(arr);
	return 0;
}

int cmd_template(int argc, char **argv)
{
	static const struct cli_sub subs[] = {
	    {"build", 1, 0, 1, build},
	    {"ls", 0, 0, 1, list},
	};

	return cli_sub_run(argc, argv, "template", subs, sizeof subs / sizeof subs[0]);
}
