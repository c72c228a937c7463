/* cmd_completion.c - sanbox completion: shell completion for bash and zsh,
 * and the candidates it asks for (sanbox __complete). */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"
#include "engine/text.h"
#include "engine/template.h"

/* The bash function; zsh runs it through bashcompinit. It asks the CLI
 * for what it cannot know: options, runs, groups, templates, snapshots. */
static const char bash_script[] =
	"# sanbox completion for bash (and zsh: it loads bashcompinit)\n"
	"_sanbox() {\n"
	"\tlocal cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n"
	"\tlocal cmd=${COMP_WORDS[1]} what=runs\n"
	"\tif [ \"$COMP_CWORD\" -eq 1 ]; then\n"
	"\t\twhat=commands\n"
	"\telif [ \"${cur#-}\" != \"$cur\" ]; then\n"
	"\t\twhat=\"options $cmd\"\n"
	"\telse\n"
	"\t\tcase $prev in\n"
	"\t\t-t|--template) what=templates ;;\n"
	"\t\t--snapshot) what=\"snapshots ${COMP_WORDS[2]}\" ;;\n"
	"\t\t--group) what=groups ;;\n"
	"\t\tbuild) [ \"$cmd\" = template ] && what=templates ;;\n"
	"\t\tallow|deny|rm|ls|cat) ;;\n"
	"\t\t--from|--to|--at|--cpu|--memory|--timeout|--budget|--name|--input|\\\n"
	"\t\t--env|--allow|--tail|--since|-n|--prompt|--format|--filter|\\\n"
	"\t\t--output-max|--older-than|--speed|--runner) return ;;\n"
	"\t\tesac\n"
	"\t\t[ \"$cmd\" = snapshot ] && [ \"${COMP_WORDS[2]}\" = rm ] && [ \"$COMP_CWORD\" -eq 4 ] &&\n"
	"\t\t\twhat=\"snapshots ${COMP_WORDS[3]}\"\n"
	"\t\tif [ \"$cmd\" = group ]; then\n"
	"\t\t\tcase $COMP_CWORD:${COMP_WORDS[2]} in\n"
	"\t\t\t2:*) COMPREPLY=($(compgen -W 'run ls inspect stop resume fork' -- \"$cur\")); return ;;\n"
	"\t\t\t3:run) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n"
	"\t\t\t3:inspect | 3:stop | 3:resume | 3:fork) what=groups ;;\n"
	"\t\t\t*) return ;;\n"
	"\t\t\tesac\n"
	"\t\tfi\n"
	"\tfi\n"
	"\tlocal words; words=$(sanbox __complete $what 2>/dev/null)\n"
	"\tlocal IFS=$'\\n'\n"
	"\tCOMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
	"}\n"
	"if [ -n \"$ZSH_VERSION\" ]; then\n"
	"\tautoload -U +X bashcompinit && bashcompinit\n"
	"fi\n"
	"complete -F _sanbox sanbox\n";

/* Prints the long options of command cmd's usage text, once each. */
static int complete_options(const char *cmd)
{
	const struct cli_cmd *c = cli_find(cmd ? cmd : "");
	char seen[4096] = " ", opt[64];

	for (const char *p = c ? c->usage : ""; (p = strstr(p, "--"));) {
		size_t n = 2 + strspn(p + 2, "abcdefghijklmnopqrstuvwxyz-");
		snprintf(opt, sizeof opt, " %.*s ", (int)(n < 60 ? n : 60), p);
		if (n > 2 && !strstr(seen, opt) && strlen(seen) + strlen(opt) < sizeof seen) {
			strcat(seen, opt + 1);
			printf("%.*s\n", (int)n, p);
		}
		p += n;
	}
	printf("--help\n");
	return CLI_EXIT_OK;
}

/* Prints the templates of the store. */
static int complete_templates(void)
{
	char store[PATH_MAX];
	struct dirent *e;
	DIR *d;

	if (sb_template_store(cli_home, store, sizeof store) || !(d = opendir(store)))
		return CLI_EXIT_OK;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			printf("%s\n", e->d_name);
	closedir(d);
	return CLI_EXIT_OK;
}

/* Prints the name of each group of the groups.list reply list that is
 * printable (one a line). */
static void print_groups(const msgpack_object *list)
{
	char s[256];

	for (uint32_t i = 0; i < list->via.array.size; i++)
		if (sb_map_str(sb_map_get(&list->via.array.ptr[i], "group"), "name", s, sizeof s) >
			0 &&
		    !sb_text_check(s, strlen(s), "group"))
			printf("%s\n", s);
}

/* Prints the ids of the runs.list or snapshots.list (snaps) reply list,
 * and the runs' names that are printable, one a line. */
static void print_items(const msgpack_object *list, int snaps)
{
	char s[SB_RUN_MAX + 64];

	for (uint32_t i = 0; i < list->via.array.size; i++) {
		const msgpack_object *o = &list->via.array.ptr[i];
		if (sb_map_str(o, snaps ? "snapshot" : "run", s, sizeof s) > 0)
			printf("%s\n", s);
		if (!snaps && sb_map_str(o, "name", s, sizeof s) > 0 &&
		    !sb_text_check(s, strlen(s), "name"))
			printf("%s\n", s);
	}
}

/* Prints what the daemon knows: runs (ids and names), groups or a run's
 * snapshots. A daemon that does not run is not started for it. */
static int complete_daemon(const char *what, const char *run)
{
	const msgpack_object *list = NULL;
	struct cli_req r;
	struct sb_reply rep = {0};
	sb_client *c;
	int snaps = !strcmp(what, "snapshots"), groups = !strcmp(what, "groups");

	if ((snaps && !run) || cli_connect(0, &c))
		return CLI_EXIT_OK;
	cli_req_begin(&r, snaps ? "snapshots.list" : groups ? "groups.list" : "runs.list");
	if (snaps)
		sb_mapw_str(&r.m, "run", run);
	if (cli_call(c, &r, &rep) == SB_OK)
		list = sb_map_get(&rep.map, snaps ? "snapshots" : groups ? "groups" : "runs");
	if (list && list->type == MSGPACK_OBJECT_ARRAY && groups)
		print_groups(list);
	else if (list && list->type == MSGPACK_OBJECT_ARRAY)
		print_items(list, snaps);
	sb_reply_free(&rep);
	sb_client_close(c);
	return CLI_EXIT_OK;
}

int cmd_complete(int argc, char **argv)
{
	size_t n;
	const struct cli_cmd *cmds = cli_commands(&n);

	if (argc < 2)
		return CLI_EXIT_USAGE;
	if (!strcmp(argv[1], "commands")) {
		for (size_t i = 0; i < n; i++)
			printf("%s\n", cmds[i].name);
		return CLI_EXIT_OK;
	}
	if (!strcmp(argv[1], "options"))
		return complete_options(argc > 2 ? argv[2] : NULL);
	if (!strcmp(argv[1], "templates"))
		return complete_templates();
	if (!strcmp(argv[1], "runs") || !strcmp(argv[1], "snapshots") || !strcmp(argv[1], "groups"))
		return complete_daemon(argv[1], argc > 2 ? argv[2] : NULL);
	return CLI_EXIT_USAGE;
}

int cmd_completion(int argc, char **argv)
{
	int rc;

	if ((rc = cli_parse_opts(argc, argv, "completion", NULL)) != CLI_GO_ON)
		return rc;
	if (argc - optind != 1 || (strcmp(argv[optind], "bash") && strcmp(argv[optind], "zsh")))
		return cli_usage("completion");
	fputs(bash_script, stdout);
	return CLI_EXIT_OK;
}
