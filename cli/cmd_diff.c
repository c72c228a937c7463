/* cmd_diff.c - sanbox diff RUN [--from A] [--to B] [--json]: the files a
 * run changed between two offsets of its record, from its recorded
 * agent.file.changed events. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/text.h"

/* A path's changes in the range: what it was at the start (existed or
 * not, as far as the range shows) and its last change. */
struct path_change {
	char *path;
	int created_first; /* its first change in the range made it */
	uint64_t offset, size;
	char kind[16];
	char *content, *omitted;
};

struct diff {
	struct path_change *v;
	size_t n, cap;
	int oom;
};

static struct path_change *diff_find(struct diff *d, const char *path)
{
	for (size_t i = 0; i < d->n; i++) /* the range's paths: a few thousand at most */
		if (!strcmp(d->v[i].path, path))
			return &d->v[i];
	if (d->n == d->cap) {
		size_t cap = d->cap ? 2 * d->cap : 64;
		struct path_change *nv = realloc(d->v, cap * sizeof *nv);
		if (!nv)
			return NULL;
		d->v = nv;
		d->cap = cap;
	}
	memset(&d->v[d->n], 0, sizeof d->v[d->n]);
	if (!(d->v[d->n].path = strdup(path)))
		return NULL;
	return &d->v[d->n++];
}

static int diff_add(void *ctx, const struct cli_file_change *ch)
{
	struct diff *d = ctx;
	struct path_change *p = diff_find(d, ch->path);

	if (!p) {
		d->oom = 1;
		return 1;
	}
	if (!p->offset)
		p->created_first = !strcmp(ch->kind, "created");
	p->offset = ch->offset;
	p->size = ch->size;
	snprintf(p->kind, sizeof p->kind, "%s", ch->kind);
	free(p->content);
	free(p->omitted);
	p->content = ch->content ? strdup(ch->content) : NULL;
	p->omitted = ch->omitted ? strdup(ch->omitted) : NULL;
	return 0;
}

/* A (added), M (modified), D (deleted), or 0: made and deleted in the
 * range, no change. */
static char diff_status(const struct path_change *p)
{
	int deleted = !strcmp(p->kind, "deleted");

	if (p->created_first)
		return deleted ? 0 : 'A';
	return deleted ? 'D' : 'M';
}

static int path_cmp(const void *a, const void *b)
{
	return strcmp(((const struct path_change *)a)->path,
		      ((const struct path_change *)b)->path);
}

/* The changes of d as `diff --json` prints them. */
static json_t *diff_json(const struct diff *d)
{
	json_t *arr = json_array();

	for (size_t i = 0; arr && i < d->n; i++) {
		const struct path_change *p = &d->v[i];
		char st = diff_status(p);
		json_t *o;
		if (!st)
			continue;
		o = json_pack("{s:s, s:s#, s:I, s:I}", "path", p->path, "status", &st, (size_t)1,
			      "offset", (json_int_t)p->offset, "size", (json_int_t)p->size);
		if (o && st != 'D' && p->content)
			json_object_set_new(o, "content", json_string(p->content));
		if (o && p->omitted)
			json_object_set_new(o, "omitted", json_string(p->omitted));
		json_array_append_new(arr, o);
	}
	return arr;
}

static void diff_print(const struct diff *d)
{
	for (size_t i = 0; i < d->n; i++) {
		const struct path_change *p = &d->v[i];
		char st = diff_status(p), *esc;
		if (!st)
			continue;
		esc = sb_text_escape_dup(p->path, strlen(p->path));
		printf("%c %s%s%s%s\n", st, esc ? esc : "?",
		       p->omitted ? " (content not recorded: " : "", p->omitted ? p->omitted : "",
		       p->omitted ? ")" : "");
		free(esc);
	}
}

/* Reads run's changes in (from, to] into d, sorted by path. */
static int diff_collect(sb_client *c, const char *run, uint64_t from, uint64_t to,
			struct diff *d)
{
	int rc = cli_file_changes(c, run, from, to, diff_add, d);

	if (rc == SB_OK && d->oom)
		rc = SB_ERR_NOMEM;
	if (rc == SB_OK)
		qsort(d->v, d->n, sizeof *d->v, path_cmp);
	return rc;
}

static void diff_free(struct diff *d)
{
	for (size_t i = 0; i < d->n; i++) {
		free(d->v[i].path);
		free(d->v[i].content);
		free(d->v[i].omitted);
	}
	free(d->v);
}

int cli_diff_json(sb_client *c, const char *run, uint64_t from, uint64_t to, json_t **out)
{
	struct diff d = {0};
	int rc = diff_collect(c, run, from, to, &d);

	if (rc == SB_OK && !(*out = diff_json(&d)))
		rc = SB_ERR_NOMEM;
	diff_free(&d);
	return rc;
}

int cmd_diff(int argc, char **argv)
{
	static const struct option opts[] = {
	    CLI_OPT_HELP,
	    {"from", required_argument, NULL, 'f'},
	    {"to", required_argument, NULL, 't'},
	    {"json", no_argument, NULL, 'j'},
	    {NULL, 0, NULL, 0},
	};
	uint64_t from = 0, to = UINT64_MAX - 1;
	char run[SB_RUN_MAX];
	struct diff d = {0};
	sb_client *c;
	int ch, json = 0, rc;

	while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("diff");
		case 'f':
			if ((rc = cli_parse_u64("--from", optarg, 0, UINT64_MAX - 1,
						&from)))
				return rc;
			break;
		case 't':
			if ((rc = cli_parse_u64("--to", optarg, 0, UINT64_MAX - 1, &to)))
				return rc;
			break;
		case 'j': json = 1; break;
		default: return cli_badopt("diff", argv, ch);
		}
	}
	if (argc - optind != 1)
		return cli_usage("diff");
	if (from > to)
		return cli_fail_code(CLI_EXIT_USAGE, "--from %llu is after --to %llu",
				     (unsigned long long)from, (unsigned long long)to);
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if ((rc = cli_resolve(c, argv[optind], run)) ||
	    (rc = diff_collect(c, run, from, to, &d))) {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
	} else if (json) {
		cli_print_json(diff_json(&d));
	} else {
		diff_print(&d);
	}
	diff_free(&d);
	sb_client_close(c);
	return rc;
}
