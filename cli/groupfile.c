/* groupfile.c - reading a group file (see groupfile.h).
 *
 * Three steps: the file's bytes become a tree of nodes (libyaml's events,
 * checked against the limits as they come, so that nothing deep or
 * repeated is ever built); the tree is checked against the schema, each
 * run's fields (its defaults first) filling a cli_run_spec with the
 * parsers `sanbox run` uses for its options; the positions of the fields
 * are recorded for later errors.
 */
#include "cli/groupfile.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "cli/parse.h"
#include "engine/error.h"
#include "engine/runs/plan.h" /* SB_PLAN_NAME_MAX, SB_PLAN_RUNNER_MAX: the daemon's limits */
#include "engine/text.h"
#include "netpolicy/netpolicy.h"
#include "vmm/accel.h"

#define PATH_MAX_  256 /* bytes of a field path in an error (cut past it) */
#define NAME_MAX_  (SB_PLAN_NAME_MAX - 1)
#define LABEL_MAX_ 255 /* bytes of a label's value */
#define CORE_TAG   "tag:yaml.org,2002:"

/* ---- the tree ---- */

enum { N_SCALAR, N_SEQ, N_MAP };
enum { T_STR, T_NULL, T_BOOL }; /* a scalar's type */

struct node {
	struct node **kid; /* a list's items; a map's keys and values in turn */
	size_t n, cap;
	char *text; /* a scalar's, NUL-terminated (no NUL inside) */
	size_t len;
	unsigned line, col;
	unsigned char kind, type;
};

struct cli_group_store {
	struct node *root;
	void **owned; /* strings and vectors the runs point into */
	size_t nowned, capowned;
	char *dir; /* the file's folder, for relative inputs */
};

static void node_free(struct node *n)
{
	for (size_t i = 0; n && i < n->n; i++)
		node_free(n->kid[i]);
	if (n) {
		free(n->kid);
		free(n->text);
		free(n);
	}
}

/* The key of pair i of map m. */
static const char *map_key(const struct node *m, size_t i)
{
	return m->kid[2 * i]->text;
}

/* The value of key in map m, or NULL. */
static const struct node *map_get(const struct node *m, const char *key)
{
	for (size_t i = 0; i < m->n / 2; i++)
		if (!strcmp(map_key(m, i), key))
			return m->kid[2 * i + 1];
	return NULL;
}

/* Keeps p for the group's lifetime; returns p, or NULL (p freed) when out
 * of memory. */
static void *store_keep(struct cli_group_store *s, void *p)
{
	void **v;

	if (p && s->nowned == s->capowned) {
		size_t cap = s->capowned ? 2 * s->capowned : 64;
		if (!(v = realloc(s->owned, cap * sizeof *v))) {
			free(p);
			return NULL;
		}
		s->owned = v;
		s->capowned = cap;
	}
	if (p)
		s->owned[s->nowned++] = p;
	return p;
}

/* ---- errors and paths ---- */

struct load {
	struct cli_group *g;
	const char *file;
	char *buf;	 /* the file's bytes */
	size_t len, fed; /* and how many of them libyaml has read */
	yaml_parser_t yp;
	struct node *stack[CLI_GROUP_DEPTH_MAX]; /* the lists and maps open */
	int depth, docs;
	const struct node *names[CLI_GROUP_RUNS_MAX]; /* the runs' name values */
};

/* Records the error line for (line, col) and path ("": none) and returns
 * code. */
static int vfail_at(const struct load *l, int code, unsigned line, unsigned col,
		    const char *path, const char *fmt, va_list ap)
{
	char msg[400];

	vsnprintf(msg, sizeof msg, fmt, ap);
	if (*path)
		return sb_seterr(code, "%s:%u:%u: %s: %s", l->file, line, col, path, msg);
	return sb_seterr(code, "%s:%u:%u: %s", l->file, line, col, msg);
}

static int __attribute__((format(printf, 6, 7)))
fail_at(const struct load *l, int code, unsigned line, unsigned col, const char *path,
	const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = vfail_at(l, code, line, col, path, fmt, ap);
	va_end(ap);
	return rc;
}

/* The error SB_ERR_INVAL at node n, whose path is path. */
static int __attribute__((format(printf, 4, 5)))
fail(const struct load *l, const struct node *n, const char *path, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = vfail_at(l, SB_ERR_INVAL, n->line, n->col, path, fmt, ap);
	va_end(ap);
	return rc;
}

/* Appends s to out, of which n bytes are used, cut to PATH_MAX_; returns
 * the bytes used. */
static size_t path_cat(char *out, size_t n, const char *s)
{
	size_t k = strnlen(s, PATH_MAX_ - 1 - n);

	memmove(out + n, s, k);
	out[n + k] = 0;
	return n + k;
}

/* Writes base.key (key alone when base is "") into out, cut to
 * PATH_MAX_. */
static void path_key(char *out, const char *base, const char *key)
{
	size_t n = path_cat(out, 0, base);

	path_cat(out, *base ? path_cat(out, n, ".") : n, key);
}

/* Writes base[i] into out, cut as path_key does. */
static void path_index(char *out, const char *base, size_t i)
{
	char ix[32];

	snprintf(ix, sizeof ix, "[%zu]", i);
	path_cat(out, path_cat(out, 0, base), ix);
}

/* The path of the place the next node goes in the open lists and maps. */
static void stack_path(const struct load *l, char *out)
{
	char p[PATH_MAX_];

	out[0] = 0;
	for (int d = 0; d < l->depth; d++) {
		const struct node *c = l->stack[d];
		/* the item open in it: the last, or for the top the next */
		size_t at = d + 1 < l->depth ? c->n - 1 : c->n;

		memcpy(p, out, sizeof p);
		if (c->kind == N_SEQ)
			path_index(out, p, at);
		else if (at % 2)
			path_key(out, p, c->kid[at - 1]->text);
	}
}

/* ---- reading the file ---- */

/* Reads the file into l->buf. Errors: SB_ERR_NOTFOUND, SB_ERR_INVAL (not
 * a regular file), SB_ERR_TOOBIG, SB_ERR_IO, SB_ERR_NOMEM. */
static int file_read(struct load *l)
{
	struct stat st;
	ssize_t n = 0;
	int fd = open(l->file, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC), rc = SB_OK;

	if (fd < 0)
		return sb_seterr(errno == ENOENT ? SB_ERR_NOTFOUND : SB_ERR_IO, "%s: %s",
				 l->file, strerror(errno));
	if (fstat(fd, &st) || !S_ISREG(st.st_mode))
		rc = sb_seterr(SB_ERR_INVAL, "%s: not a regular file", l->file);
	else if ((uint64_t)st.st_size > CLI_GROUP_FILE_MAX)
		rc = fail_at(l, SB_ERR_TOOBIG, 1, 1, "",
			     "the file is %llu bytes; a group file is at most %u (1 MiB)",
			     (unsigned long long)st.st_size, CLI_GROUP_FILE_MAX);
	else if (!(l->buf = malloc(CLI_GROUP_FILE_MAX + 1)))
		rc = SB_ERR_NOMEM;
	while (rc == SB_OK && l->len <= CLI_GROUP_FILE_MAX &&
	       (n = read(fd, l->buf + l->len, CLI_GROUP_FILE_MAX + 1 - l->len)) != 0) {
		if (n < 0 && errno != EINTR)
			rc = sb_seterr(SB_ERR_IO, "%s: %s", l->file, strerror(errno));
		l->len += n > 0 ? (size_t)n : 0;
	}
	if (rc == SB_OK && l->len > CLI_GROUP_FILE_MAX) /* it grew */
		rc = fail_at(
		    l, SB_ERR_TOOBIG, 1, 1, "",
		    "the file is over %u bytes (1 MiB), the limit of a group file",
		    CLI_GROUP_FILE_MAX);
	close(fd);
	return rc;
}

/* The line and column (1-based, counting characters as libyaml does) of
 * byte off of the file. */
static void offset_mark(const struct load *l, size_t off, unsigned *line, unsigned *col)
{
	*line = 1;
	*col = 1;
	for (size_t i = 0; i < off && i < l->len; i++) {
		unsigned char c = (unsigned char)l->buf[i];
		if (c == '\n' ||
		    (c == '\r' && (i + 1 == l->len || l->buf[i + 1] != '\n'))) {
			++*line;
			*col = 1;
		} else if ((c & 0xc0) != 0x80 && c != '\r') {
			++*col;
		}
	}
}

/* The error of libyaml's parser, as an error line. */
static int yaml_fail(struct load *l)
{
	const yaml_parser_t *p = &l->yp;
	char path[PATH_MAX_], ctx[128] = "";
	unsigned line = (unsigned)p->problem_mark.line + 1,
		 col = (unsigned)p->problem_mark.column + 1;

	if (p->error == YAML_MEMORY_ERROR)
		return SB_ERR_NOMEM;
	if (p->error == YAML_READER_ERROR) {
		/* its mark is not set: the offset is */
		offset_mark(l, p->problem_offset, &line, &col);
		snprintf(ctx, sizeof ctx, " (0x%02X)", (unsigned)p->problem_value);
	} else if (p->context) {
		snprintf(ctx, sizeof ctx, " (%s at line %u, column %u)", p->context,
			 (unsigned)p->context_mark.line + 1,
			 (unsigned)p->context_mark.column + 1);
	}
	stack_path(l, path);
	return fail_at(l, SB_ERR_INVAL, line, col, path, "%s%s",
		       p->problem ? p->problem : "not YAML", ctx);
}

/* ---- events into nodes ---- */

/* Checks the anchor and tag of event e, a node of kind; sets *type to a
 * scalar's type. */
static int node_props(struct load *l, const yaml_event_t *e, int kind,
		      unsigned char *type)
{
	enum { TAG_STR, TAG_INT, TAG_FLOAT, TAG_BOOL, TAG_NULL, TAG_SEQ, TAG_MAP, TAG_N };
	static const char *const tags[TAG_N] = {
	    [TAG_STR] = "str",	 [TAG_INT] = "int",   [TAG_FLOAT] = "float",
	    [TAG_BOOL] = "bool", [TAG_NULL] = "null", [TAG_SEQ] = "seq",
	    [TAG_MAP] = "map"};
	const yaml_char_t *anchor = kind == N_SCALAR ? e->data.scalar.anchor
				    : kind == N_SEQ  ? e->data.sequence_start.anchor
						     : e->data.mapping_start.anchor;
	const char *tag = (const char *)(kind == N_SCALAR ? e->data.scalar.tag
					 : kind == N_SEQ  ? e->data.sequence_start.tag
							  : e->data.mapping_start.tag);
	unsigned line = (unsigned)e->start_mark.line + 1,
		 col = (unsigned)e->start_mark.column + 1;
	char path[PATH_MAX_];
	size_t t = 0;

	stack_path(l, path);
	if (anchor)
		return fail_at(l, SB_ERR_INVAL, line, col, path,
			       "anchors (&%s) are not allowed in a group file", anchor);
	for (; tag && t < TAG_N; t++)
		if (!strncmp(tag, CORE_TAG, strlen(CORE_TAG)) &&
		    !strcmp(tag + strlen(CORE_TAG), tags[t]))
			break;
	/* a core tag, and !!seq and !!map on their own kinds only */
	if (tag && (t == TAG_N || (kind == N_SEQ) != (t == TAG_SEQ) ||
		    (kind == N_MAP) != (t == TAG_MAP)))
		return fail_at(
		    l, SB_ERR_INVAL, line, col, path,
		    "tag %s is not allowed here (a group file takes !!str, !!int, "
		    "!!float, !!bool and !!null on values)",
		    tag);
	*type = T_STR;
	if (kind == N_SCALAR && tag)
		*type = t == TAG_BOOL ? T_BOOL : t == TAG_NULL ? T_NULL : T_STR;
	return SB_OK;
}

/* The type of a plain scalar without a tag (YAML's core schema; a number
 * is kept as its text, as the options take it). */
static unsigned char plain_type(const char *s)
{
	static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
	static const char *const bools[] = {"true",  "True",  "TRUE",
					    "false", "False", "FALSE"};

	for (size_t i = 0; i < sizeof nulls / sizeof *nulls; i++)
		if (!strcmp(s, nulls[i]))
			return T_NULL;
	for (size_t i = 0; i < sizeof bools / sizeof *bools; i++)
		if (!strcmp(s, bools[i]))
			return T_BOOL;
	return T_STR;
}

/* A new node for event e (a scalar, or the start of a list or map). */
static int node_new(struct load *l, const yaml_event_t *e, int kind, struct node **out)
{
	struct node *n = calloc(1, sizeof *n);
	int rc;

	if (!n)
		return SB_ERR_NOMEM;
	n->kind = (unsigned char)kind;
	n->line = (unsigned)e->start_mark.line + 1;
	n->col = (unsigned)e->start_mark.column + 1;
	if ((rc = node_props(l, e, kind, &n->type))) {
		free(n);
		return rc;
	}
	if (kind == N_SCALAR) {
		n->len = e->data.scalar.length;
		if (!(n->text = malloc(n->len + 1))) {
			free(n);
			return SB_ERR_NOMEM;
		}
		memcpy(n->text, e->data.scalar.value, n->len);
		n->text[n->len] = 0;
		if (!e->data.scalar.tag && e->data.scalar.plain_implicit)
			n->type = plain_type(n->text);
	}
	*out = n;
	return SB_OK;
}

/* Checks n, about to be a key of map m: a string not given before. */
static int key_check(struct load *l, const struct node *m, const struct node *n)
{
	char path[PATH_MAX_], key[PATH_MAX_];

	stack_path(l, path);
	if (n->kind != N_SCALAR)
		return fail(l, n, path, "a key must be a string, not a %s",
			    n->kind == N_SEQ ? "list" : "map");
	path_key(key, path, n->text);
	if (m->n / 2 >= CLI_GROUP_KEYS_MAX)
		return fail(l, n, key, "a map holds at most %d keys", CLI_GROUP_KEYS_MAX);
	for (size_t i = 0; i < m->n / 2; i++)
		if (!strcmp(map_key(m, i), n->text))
			return fail(l, n, key,
				    "given twice (first at line %u, column %u)",
				    m->kid[2 * i]->line, m->kid[2 * i]->col);
	return SB_OK;
}

/* Puts n in the open list or map (or as the document), n freed on an
 * error. */
static int node_add(struct load *l, struct node *n)
{
	struct node *top = l->depth ? l->stack[l->depth - 1] : NULL, **v;
	char path[PATH_MAX_];
	int rc = SB_OK;

	stack_path(l, path);
	if (n->kind == N_SCALAR && memchr(n->text, 0, n->len))
		rc = fail(l, n, path, "a string holds a NUL byte");
	else if (top && top->kind == N_MAP && top->n % 2 == 0)
		rc = key_check(l, top, n);
	if (rc == SB_OK && top && top->n == top->cap) {
		size_t cap = top->cap ? 2 * top->cap : 8;
		if ((v = realloc(top->kid, cap * sizeof *v))) {
			top->kid = v;
			top->cap = cap;
		} else {
			rc = SB_ERR_NOMEM;
		}
	}
	if (rc) {
		node_free(n);
		return rc;
	}
	if (top)
		top->kid[top->n++] = n;
	else
		l->g->store->root = n;
	return SB_OK;
}

/* Takes a scalar or the start of a list or map. */
static int event_node(struct load *l, const yaml_event_t *e, int kind)
{
	struct node *n;
	char path[PATH_MAX_];
	int rc;

	if (kind != N_SCALAR && l->depth == CLI_GROUP_DEPTH_MAX) {
		stack_path(l, path);
		return fail_at(l, SB_ERR_INVAL, (unsigned)e->start_mark.line + 1,
			       (unsigned)e->start_mark.column + 1, path,
			       "lists and maps nest deeper than %d levels",
			       CLI_GROUP_DEPTH_MAX);
	}
	if ((rc = node_new(l, e, kind, &n)) || (rc = node_add(l, n)))
		return rc;
	if (kind != N_SCALAR)
		l->stack[l->depth++] = n;
	return SB_OK;
}

/* Takes one event; returns SB_END after the stream's end. */
static int event_take(struct load *l, const yaml_event_t *e)
{
	char path[PATH_MAX_];

	switch (e->type) {
	case YAML_DOCUMENT_START_EVENT:
		if (l->docs++)
			return fail_at(l, SB_ERR_INVAL, (unsigned)e->start_mark.line + 1,
				       (unsigned)e->start_mark.column + 1, "",
				       "a group file holds one YAML document");
		return SB_OK;
	case YAML_ALIAS_EVENT:
		stack_path(l, path);
		return fail_at(l, SB_ERR_INVAL, (unsigned)e->start_mark.line + 1,
			       (unsigned)e->start_mark.column + 1, path,
			       "aliases (*%s) are not allowed in a group file",
			       e->data.alias.anchor);
	case YAML_SCALAR_EVENT: return event_node(l, e, N_SCALAR);
	case YAML_SEQUENCE_START_EVENT: return event_node(l, e, N_SEQ);
	case YAML_MAPPING_START_EVENT: return event_node(l, e, N_MAP);
	case YAML_SEQUENCE_END_EVENT:
	case YAML_MAPPING_END_EVENT: l->depth--; return SB_OK;
	case YAML_STREAM_END_EVENT: return SB_END;
	default: return SB_OK;
	}
}

/* libyaml's input: the file's bytes a few at a time, so that its reader
 * meets a bad byte (a control character, broken UTF-8) when its parser
 * gets there, not at the start: the error then has the path it is in. */
static int feed(void *vl, unsigned char *buf, size_t cap, size_t *n)
{
	struct load *l = vl;

	*n = l->len - l->fed < cap ? l->len - l->fed : cap;
	*n = *n < 8 ? *n : 8;
	memcpy(buf, l->buf + l->fed, *n);
	l->fed += *n;
	return 1;
}

/* Parses l->buf into the tree. */
static int tree_build(struct load *l)
{
	yaml_event_t e;
	int rc = SB_OK;

	if (!yaml_parser_initialize(&l->yp))
		return SB_ERR_NOMEM;
	yaml_parser_set_input(&l->yp, feed, l);
	while (rc == SB_OK) {
		if (!yaml_parser_parse(&l->yp, &e)) {
			rc = yaml_fail(l);
			break;
		}
		rc = event_take(l, &e);
		yaml_event_delete(&e);
	}
	yaml_parser_delete(&l->yp);
	return rc == SB_END ? SB_OK : rc;
}

/* ---- the schema: values ---- */

/* A field's value as the file gives it. */
struct val {
	const struct field *f;
	const struct node *key, *node;
	char path[PATH_MAX_];
};

typedef int (*set_fn)(struct load *l, const struct val *v, struct cli_group_run *r);

struct field {
	const char *key;
	int slot; /* fields of one slot exclude each other (harness and prompt) */
	set_fn set;
};

/* What node n is, for an error ("a list"). */
static const char *node_what(const struct node *n)
{
	if (n->kind != N_SCALAR)
		return n->kind == N_SEQ ? "a list" : "a map";
	return n->type == T_NULL ? "empty" : n->type == T_BOOL ? "a boolean" : "a string";
}

/* Checks n (at path) is a string (a number counts: its text) and sets *s
 * to it; what says what it must be ("a size"). */
static int want_str(struct load *l, const struct node *n, const char *path,
		    const char *what, const char **s)
{
	if (n->kind != N_SCALAR || n->type != T_STR)
		return fail(l, n, path, "must be %s, not %s%s", what, node_what(n),
			    n->type == T_BOOL ? " (quote it to mean the word)" : "");
	*s = n->text;
	return SB_OK;
}

/* Checks n (at path) is a list of at most CLI_SPEC_LIST_MAX strings (what
 * they are: "grants") and adds them to out. An empty list is one: it takes the
 * place of the defaults' list. */
static int want_strs(struct load *l, const struct node *n, const char *path,
		     const char *what, struct cli_strs *out)
{
	char item[PATH_MAX_];
	const char *s = NULL;
	int rc;

	if (n->kind != N_SEQ)
		return fail(l, n, path, "must be a list of %s, not %s", what,
			    node_what(n));
	for (size_t i = 0; i < n->n; i++) {
		path_index(item, path, i);
		if ((rc = want_str(l, n->kid[i], item, "a string", &s)))
			return rc;
		if (cli_strs_add(out, s))
			return fail(l, n->kid[i], item, "a list holds at most %d entries",
				    CLI_SPEC_LIST_MAX);
	}
	return SB_OK;
}

/* Checks text s of node n (at path) is a name: printable, at most
 * NAME_MAX_ bytes. */
static int want_name(struct load *l, const struct node *n, const char *path,
		     const char *s)
{
	if (sb_text_check(s, strlen(s), "the name"))
		return fail(l, n, path, "%s", sb_errmsg(SB_ERR_INVAL));
	if (!*s || strlen(s) > NAME_MAX_)
		return fail(l, n, path, "a name has 1 to %d bytes, not %zu", NAME_MAX_,
			    strlen(s));
	return SB_OK;
}

/* The result rc of a parser of cli/parse.h or cli/runspec.h for node n at
 * path: its detail as an error line. */
static int parsed(struct load *l, const struct node *n, const char *path, int rc)
{
	return rc ? fail(l, n, path, "%s", sb_errmsg(rc)) : SB_OK;
}

/* ---- the schema: a run's fields ---- */

static int set_name(struct load *l, const struct val *v, struct cli_group_run *r)
{
	int rc = want_str(l, v->node, v->path, "a name", &r->spec.name);

	return rc ? rc : want_name(l, v->node, v->path, r->spec.name);
}

static int set_template(struct load *l, const struct val *v, struct cli_group_run *r)
{
	return want_str(l, v->node, v->path, "a template's name", &r->spec.tmpl);
}

/* harness: a command line (run by /bin/sh -c) or a list of words (the
 * command as `sanbox run -- WORDS` takes it). */
static int set_harness(struct load *l, const struct val *v, struct cli_group_run *r)
{
	struct cli_strs words = {{0}, 0};
	const char **argv;
	int rc;

	if (v->node->kind == N_SCALAR) {
		if ((rc = want_str(l, v->node, v->path, "a command or a list of words",
				   &words.v[2])))
			return rc;
		if (!*words.v[2])
			return fail(l, v->node, v->path, "must not be empty");
		words.v[0] = "/bin/sh";
		words.v[1] = "-c";
		words.n = 3;
	} else if ((rc = want_strs(l, v->node, v->path, "words", &words))) {
		return rc;
	} else if (!words.n) {
		return fail(l, v->node, v->path, "must not be an empty list");
	}
	if (!(argv = store_keep(l->g->store, malloc((size_t)words.n * sizeof *argv))))
		return SB_ERR_NOMEM;
	memcpy(argv, words.v, (size_t)words.n * sizeof *argv);
	r->spec.argv = argv;
	r->spec.argc = words.n;
	return SB_OK;
}

static int set_prompt(struct load *l, const struct val *v, struct cli_group_run *r)
{
	int rc = want_str(l, v->node, v->path, "a string", &r->spec.prompt);

	if (rc == SB_OK && !*r->spec.prompt)
		rc = fail(l, v->node, v->path, "must not be empty");
	return rc;
}

static int set_model(struct load *l, const struct val *v, struct cli_group_run *r)
{
	r->spec.models.n = 1;
	return want_str(l, v->node, v->path, "a model's name", &r->spec.models.v[0]);
}

static int set_models(struct load *l, const struct val *v, struct cli_group_run *r)
{
	int rc = want_strs(l, v->node, v->path, "model names", &r->spec.models);

	if (rc == SB_OK && !r->spec.models.n)
		rc = fail(l, v->node, v->path, "must not be an empty list");
	return rc;
}

static int set_budget(struct load *l, const struct val *v, struct cli_group_run *r)
{
	const char *s = NULL;
	int rc = want_str(l, v->node, v->path, "an amount of USD", &s);

	return rc ? rc : parsed(l, v->node, v->path, cli_parse_usd(s, &r->spec.budget));
}

static int set_on_budget(struct load *l, const struct val *v, struct cli_group_run *r)
{
	int rc = want_str(l, v->node, v->path, "stop or continue", &r->spec.on_budget);

	return rc ? rc
		  : parsed(l, v->node, v->path,
			   cli_spec_check_on_budget(r->spec.on_budget));
}

static int set_cpus(struct load *l, const struct val *v, struct cli_group_run *r)
{
	const char *s = NULL;
	int rc = want_str(l, v->node, v->path, "a number", &s);

	return rc ? rc
		  : parsed(l, v->node, v->path,
			   cli_parse_num(s, 1, CLI_SPEC_CPUS_MAX, &r->spec.cpus));
}

static int set_memory(struct load *l, const struct val *v, struct cli_group_run *r)
{
	const char *s = NULL;
	int rc = want_str(l, v->node, v->path, "a size", &s);

	return rc ? rc : parsed(l, v->node, v->path, cli_parse_size_mib(s, &r->spec.mem));
}

static int set_timeout(struct load *l, const struct val *v, struct cli_group_run *r)
{
	const char *s = NULL;
	int rc = want_str(l, v->node, v->path, "a duration", &s);

	return rc ? rc
		  : parsed(l, v->node, v->path, cli_parse_duration(s, &r->spec.timeout));
}

static int set_quota(struct load *l, const struct val *v, struct cli_group_run *r)
{
	const char *s = NULL;
	int rc = want_str(l, v->node, v->path, "a size", &s);

	return rc ? rc
		  : parsed(l, v->node, v->path,
			   cli_parse_size(s, 1, CLI_SPEC_QUOTA_MAX, &r->spec.quota));
}

static int set_accel(struct load *l, const struct val *v, struct cli_group_run *r)
{
	sb_accel a;
	int rc = want_str(l, v->node, v->path, "auto, kvm or tcg", &r->spec.accel);

	return rc ? rc : parsed(l, v->node, v->path, sb_accel_parse(r->spec.accel, &a));
}

static int set_snapshots(struct load *l, const struct val *v, struct cli_group_run *r)
{
	int rc = want_str(l, v->node, v->path, "turn, stop or off", &r->spec.snapshots);

	return rc ? rc
		  : parsed(l, v->node, v->path,
			   cli_spec_check_snapshots(r->spec.snapshots));
}

static int set_runner(struct load *l, const struct val *v, struct cli_group_run *r)
{
	const char *s = NULL;
	int rc = want_str(l, v->node, v->path, "a runner's name", &s);

	if (rc)
		return rc;
	if (sb_text_check(s, strlen(s), "the runner"))
		return fail(l, v->node, v->path, "%s", sb_errmsg(SB_ERR_INVAL));
	if (!*s || strlen(s) >= SB_PLAN_RUNNER_MAX)
		return fail(l, v->node, v->path, "a runner's name has 1 to %d bytes, not %zu",
			    SB_PLAN_RUNNER_MAX - 1, strlen(s));
	r->spec.runner = s;
	return SB_OK;
}

static int set_secrets(struct load *l, const struct val *v, struct cli_group_run *r)
{
	return want_strs(l, v->node, v->path, "secrets", &r->spec.secrets);
}

static int set_network(struct load *l, const struct val *v, struct cli_group_run *r)
{
	enum sb_net_mode m;
	int rc = want_str(l, v->node, v->path, "none or acl", &r->spec.net);

	return rc ? rc : parsed(l, v->node, v->path, sb_net_mode_parse(r->spec.net, &m));
}

static int set_allow(struct load *l, const struct val *v, struct cli_group_run *r)
{
	struct sb_net_grant g[CLI_SPEC_LIST_MAX];
	char item[PATH_MAX_];
	int rc = want_strs(l, v->node, v->path, "grants", &r->spec.allow);

	for (int i = 0; rc == SB_OK && i < r->spec.allow.n; i++) {
		const char *s = r->spec.allow.v[i];
		path_index(item, v->path, (size_t)i);
		if ((rc = sb_net_grant_parse(s, strlen(s), &g[i])))
			return fail(l, v->node->kid[i], item, "%s", sb_errmsg(rc));
		for (int k = 0; k < i; k++)
			if (sb_net_grant_equal(&g[k], &g[i]))
				return fail(l, v->node->kid[i], item,
					    "grants what %s[%d] grants already", v->path,
					    k);
	}
	return rc;
}

/* inputs: host paths, relative ones from the file's folder. */
static int set_inputs(struct load *l, const struct val *v, struct cli_group_run *r)
{
	struct cli_strs *in = &r->spec.inputs;
	const char *dir = l->g->store->dir;
	char item[PATH_MAX_], *p;
	int rc = want_strs(l, v->node, v->path, "paths", in);

	for (int i = 0; rc == SB_OK && i < in->n; i++) {
		path_index(item, v->path, (size_t)i);
		if (!*in->v[i])
			return fail(l, v->node->kid[i], item,
				    "must be a path, not empty");
		if (in->v[i][0] == '/' || !strcmp(dir, "."))
			continue;
		if (asprintf(&p, "%s/%s", dir, in->v[i]) < 0 ||
		    !(in->v[i] = store_keep(l->g->store, p)))
			return SB_ERR_NOMEM;
	}
	return rc;
}

/* Puts "K=V" (a new string kept by the store) into env, in place of an
 * entry of the same K. */
static int env_put(struct load *l, struct cli_strs *env, const char *k, const char *val)
{
	size_t klen = strlen(k);
	char *kv;
	int i;

	if (asprintf(&kv, "%s=%s", k, val) < 0 || !store_keep(l->g->store, kv))
		return SB_ERR_NOMEM;
	for (i = 0; i < env->n; i++)
		if (!strncmp(env->v[i], kv, klen + 1))
			break;
	if (i < env->n)
		env->v[i] = kv;
	else if (cli_strs_add(env, kv))
		return SB_ERR_TOOBIG;
	return SB_OK;
}

/* env: a map of names to values; the run's own entries over its
 * defaults'. */
static int set_env(struct load *l, const struct val *v, struct cli_group_run *r)
{
	char item[PATH_MAX_];
	const char *val = NULL;
	int rc;

	if (v->node->kind != N_MAP)
		return fail(l, v->node, v->path,
			    "must be a map of names to values, not %s",
			    node_what(v->node));
	for (size_t i = 0; i < v->node->n / 2; i++) {
		const struct node *k = v->node->kid[2 * i], *n = v->node->kid[2 * i + 1];
		path_key(item, v->path, k->text);
		if (!*k->text || strchr(k->text, '='))
			return fail(l, k, item,
				    "a variable's name must not be empty nor hold '='");
		if ((rc = want_str(l, n, item, "a string", &val)))
			return rc;
		if ((rc = env_put(l, &r->spec.env, k->text, val)) == SB_ERR_TOOBIG)
			return fail(l, k, item, "a run has at most %d variables",
				    CLI_SPEC_LIST_MAX);
		if (rc)
			return rc;
	}
	return SB_OK;
}

/* Checks one label, key k and value n, at item. */
static int label_check(struct load *l, const struct node *k, const struct node *n,
		       const char *item, const char **val)
{
	int rc = want_name(l, k, item, k->text);

	if (rc || (rc = want_str(l, n, item, "a string", val)))
		return rc;
	if (sb_text_check(*val, strlen(*val), "the label"))
		return fail(l, n, item, "%s", sb_errmsg(SB_ERR_INVAL));
	if (strlen(*val) > LABEL_MAX_)
		return fail(l, n, item, "a label has at most %d bytes", LABEL_MAX_);
	return SB_OK;
}

/* labels: a map of names to printable values; the run's own over its
 * defaults'. */
static int set_labels(struct load *l, const struct val *v, struct cli_group_run *r)
{
	char item[PATH_MAX_];
	const char *val = NULL;
	int rc, k;

	if (v->node->kind != N_MAP)
		return fail(l, v->node, v->path,
			    "must be a map of names to values, not %s",
			    node_what(v->node));
	for (size_t i = 0; i < v->node->n / 2; i++) {
		const struct node *key = v->node->kid[2 * i];
		path_key(item, v->path, key->text);
		if ((rc = label_check(l, key, v->node->kid[2 * i + 1], item, &val)))
			return rc;
		for (k = 0; k < r->nlabels && strcmp(r->labels[k].key, key->text); k++)
			;
		if (k == CLI_GROUP_LABELS_MAX)
			return fail(l, key, item, "a run has at most %d labels",
				    CLI_GROUP_LABELS_MAX);
		r->labels[k].key = key->text;
		r->labels[k].value = val;
		r->nlabels += k == r->nlabels;
	}
	return SB_OK;
}

/* ---- the schema: run maps ---- */

enum {
	S_NAME,
	S_TEMPLATE,
	S_CMD,
	S_MODEL,
	S_BUDGET,
	S_ON_BUDGET,
	S_CPUS,
	S_MEMORY,
	S_TIMEOUT,
	S_QUOTA,
	S_ACCEL,
	S_SNAPSHOTS,
	S_RUNNER,
	S_ENV,
	S_SECRETS,
	S_INPUTS,
	S_NETWORK,
	S_ALLOW,
	S_LABELS,
	S_N
};

static const struct field run_fields[] = {
    {"name", S_NAME, set_name},
    {"template", S_TEMPLATE, set_template},
    {"harness", S_CMD, set_harness},
    {"prompt", S_CMD, set_prompt},
    {"model", S_MODEL, set_model},
    {"models", S_MODEL, set_models},
    {"budget", S_BUDGET, set_budget},
    {"on_budget", S_ON_BUDGET, set_on_budget},
    {"cpus", S_CPUS, set_cpus},
    {"memory", S_MEMORY, set_memory},
    {"timeout", S_TIMEOUT, set_timeout},
    {"record_quota", S_QUOTA, set_quota},
    {"accel", S_ACCEL, set_accel},
    {"snapshots", S_SNAPSHOTS, set_snapshots},
    {"runner", S_RUNNER, set_runner},
    {"env", S_ENV, set_env},
    {"secrets", S_SECRETS, set_secrets},
    {"inputs", S_INPUTS, set_inputs},
    {"network", S_NETWORK, set_network},
    {"allow", S_ALLOW, set_allow},
    {"labels", S_LABELS, set_labels},
};
#define NFIELDS (sizeof run_fields / sizeof run_fields[0])

/* The error line for key k (at path), which names no field of names (n
 * of them): with the nearest as a hint. */
static int unknown_key(struct load *l, const struct node *k, const char *path,
		       const char *const *names, size_t n, const char *what)
{
	struct cli_suggest sg;
	char hint[96];

	cli_suggest_init(&sg, k->text);
	for (size_t i = 0; i < n; i++)
		cli_suggest_add(&sg, names[i], strlen(names[i]));
	return fail(l, k, path, "%s has no field '%s'%s", what, k->text,
		    cli_suggest_hint(&sg, hint, sizeof hint));
}

/* The same for a run map's fields. */
static int unknown_run_key(struct load *l, const struct node *k, const char *path)
{
	const char *names[NFIELDS];

	for (size_t i = 0; i < NFIELDS; i++)
		names[i] = run_fields[i].key;
	return unknown_key(l, k, path, names, NFIELDS, "a run");
}

/* Sorts the fields of run map m (at base) into vals by slot; in the
 * defaults (dflt set) a name is refused. */
static int run_collect(struct load *l, const struct node *m, const char *base, int dflt,
		       struct val *vals)
{
	for (size_t i = 0; i < m->n / 2; i++) {
		const struct node *k = m->kid[2 * i];
		const struct field *f = run_fields;
		struct val *v;
		char path[PATH_MAX_];

		path_key(path, base, k->text);
		while (f < run_fields + NFIELDS && strcmp(f->key, k->text))
			f++;
		if (f == run_fields + NFIELDS)
			return unknown_run_key(l, k, path);
		if (dflt && f->slot == S_NAME)
			return fail(l, k, path,
				    "defaults cannot give a name: each run names itself");
		v = &vals[f->slot];
		if (v->f)
			return fail(l, k, path, "give %s or %s, not both", v->f->key,
				    f->key);
		v->f = f;
		v->key = k;
		v->node = m->kid[2 * i + 1];
		memcpy(v->path, path, sizeof path);
	}
	return SB_OK;
}

/* ---- the position table ---- */

/* Adds the position of n at path; at: where it is written (NULL: path). */
static int pos_add(struct load *l, const struct node *n, const char *path, const char *at)
{
	struct cli_group *g = l->g;
	struct cli_group_pos *p;

	if ((g->npos & (g->npos - 1)) == 0 && g->npos >= 16) {
		if (!(p = realloc(g->pos, 2 * g->npos * sizeof *p)))
			return SB_ERR_NOMEM;
		g->pos = p;
	} else if (!g->pos && !(g->pos = malloc(16 * sizeof *g->pos))) {
		return SB_ERR_NOMEM;
	}
	p = &g->pos[g->npos];
	p->line = n->line;
	p->col = n->col;
	if (!(p->path = strdup(path)))
		return SB_ERR_NOMEM;
	p->at = at ? strdup(at) : p->path;
	if (!p->at) {
		free((char *)p->path);
		return SB_ERR_NOMEM;
	}
	g->npos++;
	return SB_OK;
}

/* Adds n and what it holds at path (written at at, or NULL: path). */
static int pos_tree(struct load *l, const struct node *n, const char *path,
		    const char *at)
{
	char p[PATH_MAX_], a[PATH_MAX_];
	int rc = pos_add(l, n, path, at);

	for (size_t i = 0; rc == SB_OK && n->kind != N_SCALAR && i < n->n; i++) {
		if (n->kind == N_MAP && i % 2 == 0)
			continue; /* a key: its value has the path */
		if (n->kind == N_MAP) {
			path_key(p, path, n->kid[i - 1]->text);
			path_key(a, at ? at : path, n->kid[i - 1]->text);
		} else {
			path_index(p, path, i);
			path_index(a, at ? at : path, i);
		}
		rc = pos_tree(l, n->kid[i], p, at ? a : NULL);
	}
	return rc;
}

/* Records that the default d became field d->f of the run at base (for a
 * map merged with the run's own map own, its entries that own lacks). */
static int pos_default(struct load *l, const struct val *d, const struct node *own,
		       const char *base)
{
	char path[PATH_MAX_], p[PATH_MAX_], a[PATH_MAX_];
	int rc = SB_OK;

	path_key(path, base, d->f->key);
	if (!own)
		return pos_tree(l, d->node, path, d->path);
	for (size_t i = 0; rc == SB_OK && i < d->node->n / 2; i++) {
		const char *k = map_key(d->node, i);
		if (own->kind == N_MAP && map_get(own, k))
			continue;
		path_key(p, path, k);
		path_key(a, d->path, k);
		rc = pos_tree(l, d->node->kid[2 * i + 1], p, a);
	}
	return rc;
}

/* ---- the schema: runs and the group ---- */

/* Fills r from its own fields own over its defaults dflt (env and labels
 * merged key by key, the run's own winning); base ("runs[2]"), when not
 * NULL, is where the defaults' positions are recorded. */
static int run_apply(struct load *l, const struct val *own, const struct val *dflt,
		     const char *base, struct cli_group_run *r)
{
	int rc = SB_OK;

	for (int s = 0; rc == SB_OK && s < S_N; s++) {
		int merge = s == S_ENV || s == S_LABELS;
		if (dflt && dflt[s].f && (!own[s].f || merge)) {
			rc = dflt[s].f->set(l, &dflt[s], r);
			if (rc == SB_OK && base)
				rc = pos_default(l, &dflt[s],
						 own[s].f ? own[s].node : NULL, base);
		}
		if (rc == SB_OK && own[s].f)
			rc = own[s].f->set(l, &own[s], r);
	}
	return rc;
}

/* Checks the inputs of r (the field v gave them) as `sanbox run` does. */
static int run_inputs(struct load *l, struct cli_group_run *r, const struct val *v)
{
	struct cli_input in[CLI_SPEC_LIST_MAX];
	char item[PATH_MAX_];
	int at, rc;

	if (!r->spec.inputs.n)
		return SB_OK;
	if ((rc = cli_inputs_open(&r->spec.inputs, in, &at))) {
		path_index(item, v->path, (size_t)at);
		return fail_at(l, rc, v->node->kid[at]->line, v->node->kid[at]->col, item,
			       "%s", sb_errmsg(rc));
	}
	cli_inputs_close(in, r->spec.inputs.n);
	return SB_OK;
}

/* Reads run i, map m, over the defaults dflt. */
static int run_load(struct load *l, size_t i, const struct node *m,
		    const struct val *dflt)
{
	struct cli_group_run *r = &l->g->runs[i];
	struct val own[S_N];
	char base[PATH_MAX_], path[PATH_MAX_];
	int rc;

	memset(own, 0, sizeof own);
	path_index(base, "runs", i);
	path_key(path, base, "name");
	if (m->kind != N_MAP)
		return fail(l, m, base, "must be a map of a run's fields, not %s",
			    node_what(m));
	if ((rc = run_collect(l, m, base, 0, own)) ||
	    (rc = run_apply(l, own, dflt, base, r)))
		return rc;
	if (!own[S_NAME].f)
		return fail(l, m, path, "missing: every run has a name");
	if (!r->spec.argc && !r->spec.prompt)
		return fail(
		    l, m, base,
		    "a run needs a harness or a prompt (its own or from defaults)");
	r->spec.tmpl = r->spec.tmpl ? r->spec.tmpl : "shell";
	r->spec.group = l->g->name;
	r->spec.group_budget = l->g->budget;
	l->names[i] = own[S_NAME].node;
	for (size_t k = 0; k < i; k++)
		if (!strcmp(l->g->runs[k].spec.name, r->spec.name))
			return fail(l, l->names[i], path,
				    "runs[%zu] is named '%s' too (line %u)", k,
				    r->spec.name, l->names[k]->line);
	return run_inputs(l, r, own[S_INPUTS].f ? &own[S_INPUTS] : &dflt[S_INPUTS]);
}

/* Reads the defaults, map d (checked alone as a run's fields would be),
 * into dflt. */
static int defaults_load(struct load *l, const struct node *d, struct val *dflt)
{
	struct cli_group_run scratch;
	int rc;

	if (d->kind != N_MAP)
		return fail(l, d, "defaults", "must be a map of a run's fields, not %s",
			    node_what(d));
	memset(&scratch, 0, sizeof scratch);
	if ((rc = run_collect(l, d, "defaults", 1, dflt)))
		return rc;
	return run_apply(l, dflt, NULL, NULL, &scratch);
}

/* The group's runner, node n of the document's "runner": every run's
 * default runner, as defaults.runner would be (not both). */
static int group_runner(struct load *l, const struct node *n, struct val *dflt)
{
	struct cli_group_run scratch;
	struct val *v = &dflt[S_RUNNER];

	if (v->f)
		return fail(l, v->key, v->path,
			    "give runner or defaults.runner, not both");
	v->f = run_fields;
	while (v->f->slot != S_RUNNER)
		v->f++;
	v->node = n;
	snprintf(v->path, sizeof v->path, "runner");
	memset(&scratch, 0, sizeof scratch);
	return v->f->set(l, v, &scratch);
}

/* Reads the runs, list rs of the document root, over the defaults d and
 * the group's runner rn (NULL: none). */
static int runs_load(struct load *l, const struct node *root, const struct node *d,
		     const struct node *rn, const struct node *rs)
{
	struct val dflt[S_N];
	int rc;

	memset(dflt, 0, sizeof dflt);
	if ((d && (rc = defaults_load(l, d, dflt))) ||
	    (rn && (rc = group_runner(l, rn, dflt))))
		return rc;
	if (!rs)
		return fail(l, root, "runs", "missing: a group file lists its runs");
	if (rs->kind != N_SEQ)
		return fail(l, rs, "runs", "must be a list of runs, not %s",
			    node_what(rs));
	if (rs->n == 0)
		return fail(l, rs, "runs", "must list 1 to %d runs, not none",
			    CLI_GROUP_RUNS_MAX);
	if (rs->n > CLI_GROUP_RUNS_MAX)
		return fail(l, rs->kid[CLI_GROUP_RUNS_MAX], "runs",
			    "a group has at most %d runs", CLI_GROUP_RUNS_MAX);
	if (!(l->g->runs = calloc(rs->n, sizeof *l->g->runs)))
		return SB_ERR_NOMEM;
	for (size_t i = 0; i < rs->n; i++) {
		if ((rc = run_load(l, i, rs->kid[i], dflt)))
			return rc;
		l->g->nruns = i + 1;
	}
	return SB_OK;
}

enum { G_NAME, G_GOAL, G_BUDGET, G_RUNNER, G_DEFAULTS, G_RUNS, G_N };
static const char *const group_fields[] = {"name",   "goal",     "budget",
					   "runner", "defaults", "runs"};

/* Sorts the document's fields into top by G_*. */
static int group_collect(struct load *l, const struct node *root, const struct node **top)
{
	char path[PATH_MAX_];
	size_t f;

	if (!root)
		return fail_at(
		    l, SB_ERR_INVAL, 1, 1, "",
		    "the file holds no YAML document: a group file has a name and runs");
	if (root->kind != N_MAP)
		return fail(l, root, "", "must be a map of the group's fields, not %s",
			    node_what(root));
	for (size_t i = 0; i < root->n / 2; i++) {
		const struct node *k = root->kid[2 * i];
		path_key(path, "", k->text);
		for (f = 0; f < G_N && strcmp(group_fields[f], k->text); f++)
			;
		if (f == G_N)
			return unknown_key(l, k, path, group_fields, G_N, "a group file");
		top[f] = root->kid[2 * i + 1];
	}
	return SB_OK;
}

/* Reads the group's own fields: name, goal, budget. */
static int group_head(struct load *l, const struct node *root, const struct node **top)
{
	struct cli_group *g = l->g;
	const char *s = NULL;
	int rc;

	if (!top[G_NAME])
		return fail(l, root, "name", "missing: a group file names its group");
	if ((rc = want_str(l, top[G_NAME], "name", "a name", &g->name)) ||
	    (rc = want_name(l, top[G_NAME], "name", g->name)))
		return rc;
	if (top[G_GOAL] && (rc = want_str(l, top[G_GOAL], "goal", "a string", &g->goal)))
		return rc;
	if (g->goal && strlen(g->goal) > CLI_GROUP_GOAL_MAX)
		return fail(l, top[G_GOAL], "goal",
			    "a goal has at most %d bytes, not %zu", CLI_GROUP_GOAL_MAX,
			    strlen(g->goal));
	if (!top[G_BUDGET])
		return SB_OK;
	if ((rc = want_str(l, top[G_BUDGET], "budget", "an amount of USD", &s)))
		return rc;
	return parsed(l, top[G_BUDGET], "budget", cli_parse_usd(s, &g->budget));
}

/* Checks the tree against the schema into l->g, and records the
 * positions of its fields. */
static int group_check(struct load *l)
{
	const struct node *top[G_N] = {0}, *root = l->g->store->root;
	int rc;

	if ((rc = group_collect(l, root, top)) || (rc = group_head(l, root, top)) ||
	    (rc = runs_load(l, root, top[G_DEFAULTS], top[G_RUNNER], top[G_RUNS])))
		return rc;
	return pos_tree(l, root, "", NULL);
}

/* ---- the API ---- */

/* A new group for the file at path, its strings kept. */
static struct cli_group *group_new(const char *path)
{
	struct cli_group *g = calloc(1, sizeof *g);
	char *tmp = strdup(path);

	if (g && tmp && (g->store = calloc(1, sizeof *g->store))) {
		g->file = store_keep(g->store, strdup(path));
		g->store->dir = store_keep(g->store, strdup(dirname(tmp)));
	}
	free(tmp);
	if (g && (!g->store || !g->file || !g->store->dir)) {
		cli_group_free(g);
		return NULL;
	}
	return g;
}

/* Parses and checks what l->buf holds, then hands the group over to *out.
 * Frees l->buf. */
static int group_finish(struct load *l, int rc, struct cli_group **out)
{
	if (rc == SB_OK && (rc = tree_build(l)) == SB_OK)
		rc = group_check(l);
	free(l->buf);
	if (rc) {
		cli_group_free(l->g);
		return rc;
	}
	*out = l->g;
	return SB_OK;
}

int cli_group_load(const char *path, struct cli_group **out)
{
	struct load l;

	memset(&l, 0, sizeof l);
	*out = NULL;
	if (!(l.g = group_new(path)))
		return SB_ERR_NOMEM;
	l.file = l.g->file;
	return group_finish(&l, file_read(&l), out);
}

int cli_group_parse(const char *name, const char *text, size_t len, struct cli_group **out)
{
	struct load l;
	int rc = SB_OK;

	memset(&l, 0, sizeof l);
	*out = NULL;
	if (!(l.g = group_new(name)))
		return SB_ERR_NOMEM;
	l.file = l.g->file;
	if (len > CLI_GROUP_FILE_MAX)
		rc = fail_at(&l, SB_ERR_TOOBIG, 1, 1, "",
			     "the file is %zu bytes; a group file is at most %u (1 MiB)", len,
			     CLI_GROUP_FILE_MAX);
	else if (!(l.buf = malloc(len + 1)))
		rc = SB_ERR_NOMEM;
	if (rc == SB_OK) {
		memcpy(l.buf, text, len);
		l.len = len;
	}
	return group_finish(&l, rc, out);
}

void cli_group_free(struct cli_group *g)
{
	if (!g)
		return;
	for (size_t i = 0; i < g->npos; i++) {
		if (g->pos[i].at != g->pos[i].path)
			free((char *)g->pos[i].at);
		free((char *)g->pos[i].path);
	}
	free(g->pos);
	free(g->runs);
	if (g->store) {
		node_free(g->store->root);
		for (size_t i = 0; i < g->store->nowned; i++)
			free(g->store->owned[i]);
		free(g->store->owned);
		free(g->store);
	}
	free(g);
}

const struct cli_group_pos *cli_group_find(const struct cli_group *g, const char *path)
{
	static const struct cli_group_pos top = {"", "", 1, 1};
	char p[PATH_MAX_];
	size_t n;

	snprintf(p, sizeof p, "%s", path);
	for (;;) {
		for (size_t i = 0; i < g->npos; i++)
			if (!strcmp(g->pos[i].path, p))
				return &g->pos[i];
		if (!*p)
			return &top;
		n = strlen(p);
		while (n > 0 && p[n - 1] != '.' && p[n - 1] != '[')
			n--;
		p[n ? n - 1 : 0] = 0;
	}
}

void cli_group_error(const struct cli_group *g, const char *path, const char *msg,
		     char *buf, size_t cap)
{
	const struct cli_group_pos *p = cli_group_find(g, path);

	if (*path)
		snprintf(buf, cap, "%s:%u:%u: %s: %s", g->file, p->line, p->col, path,
			 msg);
	else
		snprintf(buf, cap, "%s:%u:%u: %s", g->file, p->line, p->col, msg);
}

int cli_group_pack_spec(const struct cli_group *g, size_t i, msgpack_packer *pk)
{
	struct cli_input in[CLI_SPEC_LIST_MAX];
	const struct cli_group_run *r;
	char path[PATH_MAX_], line[512];
	int at, rc;

	if (i >= g->nruns)
		return sb_seterr(SB_ERR_INVAL, "group %s has no run %zu", g->name, i);
	r = &g->runs[i];
	if ((rc = cli_inputs_open(&r->spec.inputs, in, &at))) {
		snprintf(path, sizeof path, "runs[%zu].inputs[%d]", i, at);
		cli_group_error(g, path, sb_errmsg(rc), line, sizeof line);
		return sb_seterr(rc, "%s", line);
	}
	rc = cli_spec_pack(pk, &r->spec, in);
	cli_inputs_close(in, r->spec.inputs.n);
	return rc;
}

int cli_group_pack_create(const struct cli_group *g, const char *name, sb_mapw *m)
{
	msgpack_packer *runs;
	int rc = SB_OK;

	sb_mapw_str(m, "name", name);
	sb_mapw_str(m, "goal", g->goal ? g->goal : "");
	sb_mapw_u64(m, "budget_nusd", g->budget);
	runs = sb_mapw_key(m, "runs");
	msgpack_pack_array(runs, g->nruns);
	for (size_t i = 0; rc == SB_OK && i < g->nruns; i++) {
		g->runs[i].spec.group = name;
		rc = cli_group_pack_spec(g, i, runs);
	}
	return rc;
}

int cli_group_run_error(const struct cli_group *g, const char *msg, char *buf, size_t cap)
{
	char path[32];
	unsigned i;
	int n = 0;

	if (sscanf(msg, "runs[%u]: %n", &i, &n) != 1 || n <= 0 || i >= g->nruns)
		return 0;
	/* the daemon's refusal of a run's runner points at its runner field */
	snprintf(path, sizeof path, "runs[%u]%s", i,
		 strncmp(msg + n, "no runner '", 11) ? "" : ".runner");
	cli_group_error(g, path, msg + n, buf, cap);
	return 1;
}
