/* models.c - providers, models, prices; the built-in model stub. */
#include "engine/gateway/models.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/home.h"
#include "engine/proc.h"

#define PRICE_MAX_USD	    1e6 /* per million tokens */
#define MAX_OUTPUT_DEFAULT  4096
#define BUDGET_DEFAULT_NUSD 1000000000ull /* $1.00 */

static const char builtin_json[] =
    "{\"default_model\": \"stub/scripted\", \"default_budget_usd\": 1.0,"
    " \"providers\": {\"stub\": {\"builtin\": \"stub\", \"api\": [\"openai\", "
    "\"anthropic\", \"responses\"]}},"
    " \"models\": {"
    "  \"stub/scripted\": {\"provider\": \"stub\", \"input\": 1, \"output\": 2, "
    "\"cached\": 0.5},"
    "  \"stub/echo\": {\"provider\": \"stub\", \"input\": 1, \"output\": 2, \"cached\": "
    "0.5},"
    "  \"stub/slow\": {\"provider\": \"stub\", \"input\": 1, \"output\": 2, \"cached\": "
    "0.5},"
    "  \"stub/error\": {\"provider\": \"stub\", \"input\": 1, \"output\": 2, \"cached\": "
    "0.5},"
    /* the reference harness's report_progress tool, for a demo */
    "  \"stub/progress\": {\"provider\": \"stub\", \"input\": 1, \"output\": 2, "
    "\"cached\": 0.5},"
    /* the scripted jobs of examples/acquisition.yaml */
    "  \"stub/financials\": {\"provider\": \"stub\", \"input\": 1, \"output\": 2, "
    "\"cached\": 0.5},"
    "  \"stub/contracts\": {\"provider\": \"stub\", \"input\": 1, \"output\": 2, "
    "\"cached\": 0.5},"
    "  \"stub/market\": {\"provider\": \"stub\", \"input\": 1, \"output\": 2, "
    "\"cached\": 0.5},"
    "  \"stub/security\": {\"provider\": \"stub\", \"input\": 1, \"output\": 2, "
    "\"cached\": 0.5},"
    /* any harness: a file written, a command run, with the tools it offers */
    "  \"stub/harness\": {\"provider\": \"stub\", \"input\": 1, \"output\": 2, "
    "\"cached\": 0.5}}}";

void sb_models_free(struct sb_models *ms)
{
	if (!ms)
		return;
	free(ms->providers);
	free(ms->models);
	free(ms);
}

const struct sb_model *sb_models_find(const struct sb_models *ms, const char *name)
{
	for (size_t i = 0; i < ms->nmodels; i++)
		if (!strcmp(ms->models[i].name, name))
			return &ms->models[i];
	return NULL;
}

const struct sb_provider *sb_models_provider(const struct sb_models *ms, const char *name)
{
	for (size_t i = 0; i < ms->nproviders; i++)
		if (!strcmp(ms->providers[i].name, name))
			return &ms->providers[i];
	return NULL;
}

/* Copies the string field key of obj into buf; absent leaves buf as is. */
static int get_str(json_t *obj, const char *key, char *buf, size_t cap, const char *src,
		   const char *where)
{
	json_t *v = json_object_get(obj, key);

	if (!v)
		return SB_OK;
	if (!json_is_string(v) || json_string_length(v) >= cap ||
	    json_string_length(v) == 0)
		return sb_seterr(SB_ERR_INVAL,
				 "%s: %s.%s must be a string of 1 to %zu bytes", src,
				 where, key, cap - 1);
	memcpy(buf, json_string_value(v), json_string_length(v) + 1);
	return SB_OK;
}

/* Reads a price in USD per million tokens as nano-USD per million tokens. */
static int get_price(json_t *obj, const char *key, uint64_t *out, int required,
		     const char *src, const char *where)
{
	json_t *v = json_object_get(obj, key);
	double usd;

	if (!v) {
		if (required)
			return sb_seterr(
			    SB_ERR_INVAL,
			    "%s: %s has no price '%s' (USD per million tokens)", src,
			    where, key);
		return SB_OK;
	}
	usd = json_number_value(v);
	if (!json_is_number(v) || !(usd >= 0 && usd <= PRICE_MAX_USD))
		return sb_seterr(
		    SB_ERR_INVAL,
		    "%s: %s.%s must be a number from 0 to 1000000 (USD per million "
		    "tokens)",
		    src, where, key);
	*out = (uint64_t)llround(usd * 1e9);
	return SB_OK;
}

/* Adds the API named by the string one to *apis; 0 when it names none. */
static int api_add(json_t *one, unsigned *apis)
{
	const char *s = json_string_value(one);

	if (s && !strcmp(s, "openai"))
		*apis |= SB_API_OPENAI;
	else if (s && !strcmp(s, "anthropic"))
		*apis |= SB_API_ANTHROPIC;
	else if (s && !strcmp(s, "responses"))
		*apis |= SB_API_RESPONSES;
	else
		return 0;
	return 1;
}

/* Reads "api": one name or a list of names. */
static int parse_apis(json_t *v, unsigned *apis, const char *src, const char *where)
{
	json_t *one;
	size_t i;
	int ok;

	if (!v)
		return SB_OK;
	*apis = 0;
	ok = json_is_string(v) ? api_add(v, apis)
			       : json_is_array(v) && json_array_size(v) > 0;
	json_array_foreach(json_is_array(v) ? v : NULL, i, one) ok =
	    ok && api_add(one, apis);
	if (!ok)
		return sb_seterr(
		    SB_ERR_INVAL,
		    "%s: %s.api must be \"openai\", \"anthropic\", \"responses\" or a "
		    "list of them",
		    src, where);
	return SB_OK;
}

static int parse_provider(const char *name, json_t *o, struct sb_provider *p,
			  const char *src)
{
	char where[96];
	json_t *b;
	int rc;

	snprintf(where, sizeof where, "providers.%.40s", name);
	if (!json_is_object(o))
		return sb_seterr(SB_ERR_INVAL, "%s: %s must be an object", src, where);
	if (strlen(name) >= sizeof p->name || !name[0] || strchr(name, '/'))
		return sb_seterr(
		    SB_ERR_INVAL,
		    "%s: provider name '%.40s' must be 1 to %zu bytes, no '/'", src, name,
		    sizeof p->name - 1);
	memset(p, 0, sizeof *p);
	snprintf(p->name, sizeof p->name, "%s", name);
	p->apis = SB_API_OPENAI;
	b = json_object_get(o, "builtin");
	if (b && !(json_is_string(b) && !strcmp(json_string_value(b), "stub")))
		return sb_seterr(SB_ERR_INVAL, "%s: %s.builtin can only be \"stub\"", src,
				 where);
	p->builtin = b != NULL;
	if (p->builtin)
		p->apis = SB_API_OPENAI | SB_API_ANTHROPIC | SB_API_RESPONSES;
	if ((rc = get_str(o, "base_url", p->base_url, sizeof p->base_url, src, where)) ||
	    (rc = get_str(o, "key_secret", p->key_secret, sizeof p->key_secret, src,
			  where)) ||
	    (rc = get_str(o, "script_dir", p->script_dir, sizeof p->script_dir, src,
			  where)) ||
	    (rc = parse_apis(json_object_get(o, "api"), &p->apis, src, where)))
		return rc;
	if (!p->builtin && strncmp(p->base_url, "http://", 7) &&
	    strncmp(p->base_url, "https://", 8))
		return sb_seterr(SB_ERR_INVAL,
				 "%s: %s.base_url must be an http:// or https:// URL",
				 src, where);
	if (p->builtin && p->base_url[0])
		return sb_seterr(SB_ERR_INVAL, "%s: %s is built in: it takes no base_url",
				 src, where);
	if (p->key_secret[0] && !sb_secret_name_ok(p->key_secret))
		return sb_seterr(SB_ERR_INVAL, "%s: %s.key_secret is not a secret name",
				 src, where);
	return SB_OK;
}

static int parse_model(const char *name, json_t *o, struct sb_model *m, const char *src)
{
	char where[128];
	const char *slash = strchr(name, '/');
	json_t *mo;
	int rc;

	snprintf(where, sizeof where, "models.%.80s", name);
	if (!json_is_object(o))
		return sb_seterr(SB_ERR_INVAL, "%s: %s must be an object", src, where);
	if (strlen(name) >= sizeof m->name || !name[0])
		return sb_seterr(SB_ERR_INVAL, "%s: model name '%.40s' is too long", src,
				 name);
	memset(m, 0, sizeof *m);
	snprintf(m->name, sizeof m->name, "%s", name);
	snprintf(m->upstream, sizeof m->upstream, "%s", slash ? slash + 1 : name);
	if (!json_is_string(json_object_get(o, "provider")))
		return sb_seterr(SB_ERR_INVAL, "%s: %s needs a provider", src, where);
	if ((rc = get_str(o, "provider", m->provider, sizeof m->provider, src, where)) ||
	    (rc = get_str(o, "upstream", m->upstream, sizeof m->upstream, src, where)) ||
	    (rc = get_price(o, "input", &m->in_price, 1, src, where)) ||
	    (rc = get_price(o, "output", &m->out_price, 1, src, where)))
		return rc;
	m->cached_price = m->in_price;
	if ((rc = get_price(o, "cached", &m->cached_price, 0, src, where)))
		return rc;
	m->max_output = MAX_OUTPUT_DEFAULT;
	mo = json_object_get(o, "max_output");
	if (mo && (!json_is_integer(mo) || json_integer_value(mo) < 1 ||
		   json_integer_value(mo) > 10000000))
		return sb_seterr(
		    SB_ERR_INVAL,
		    "%s: %s.max_output must be an integer from 1 to 10000000", src,
		    where);
	if (mo)
		m->max_output = (uint64_t)json_integer_value(mo);
	return SB_OK;
}

/* Puts item (size sz) into *arr, replacing the entry with the same name
 * (names come first in both structs). */
static int upsert(void **arr, size_t *n, const void *item, size_t sz)
{
	char *a = *arr;

	for (size_t i = 0; i < *n; i++) {
		if (!strcmp(a + i * sz, item)) {
			memcpy(a + i * sz, item, sz);
			return SB_OK;
		}
	}
	if (!(a = realloc(a, (*n + 1) * sz)))
		return SB_ERR_NOMEM;
	memcpy(a + *n * sz, item, sz);
	*arr = a;
	(*n)++;
	return SB_OK;
}

/* Applies the settings of root to ms (which is a copy the caller may drop). */
static int merge_into(struct sb_models *ms, json_t *root, const char *src)
{
	json_t *provs = json_object_get(root, "providers"),
	       *models = json_object_get(root, "models");
	json_t *dm = json_object_get(root, "default_model"),
	       *db = json_object_get(root, "default_budget_usd");
	const char *key;
	json_t *v;
	struct sb_provider p;
	struct sb_model m;
	int rc;

	if (!json_is_object(root))
		return sb_seterr(SB_ERR_INVAL, "%s: must hold one JSON object", src);
	if ((provs && !json_is_object(provs)) || (models && !json_is_object(models)))
		return sb_seterr(SB_ERR_INVAL, "%s: providers and models must be objects",
				 src);
	json_object_foreach(provs, key, v)
	{
		if ((rc = parse_provider(key, v, &p, src)) ||
		    (rc = upsert((void **)&ms->providers, &ms->nproviders, &p, sizeof p)))
			return rc;
	}
	json_object_foreach(models, key, v)
	{
		if ((rc = parse_model(key, v, &m, src)) ||
		    (rc = upsert((void **)&ms->models, &ms->nmodels, &m, sizeof m)))
			return rc;
	}
	for (size_t i = 0; i < ms->nmodels; i++)
		if (!sb_models_provider(ms, ms->models[i].provider))
			return sb_seterr(
			    SB_ERR_INVAL,
			    "%s: model %s names provider '%s', which is not defined", src,
			    ms->models[i].name, ms->models[i].provider);
	if (dm) {
		if (!json_is_string(dm) || !sb_models_find(ms, json_string_value(dm)))
			return sb_seterr(SB_ERR_INVAL,
					 "%s: default_model must name a defined model",
					 src);
		snprintf(ms->default_model, sizeof ms->default_model, "%s",
			 json_string_value(dm));
	}
	if (db) {
		double usd = json_number_value(db);
		if (!json_is_number(db) || !(usd > 0 && usd <= 1e9))
			return sb_seterr(
			    SB_ERR_INVAL,
			    "%s: default_budget_usd must be a positive number", src);
		ms->default_budget_nusd = (uint64_t)llround(usd * 1e9);
	}
	return SB_OK;
}

/* Merges the JSON in root (NULL: it did not parse, jerr says why) into ms.
 * Takes root. */
static int merge_json(struct sb_models *ms, json_t *root, const json_error_t *jerr,
		      const char *source)
{
	int rc;

	if (!root)
		return sb_seterr(SB_ERR_INVAL, "%s: line %d: %s", source, jerr->line,
				 jerr->text);
	rc = merge_into(ms, root, source);
	json_decref(root);
	return rc;
}

int sb_models_load(const char *home, struct sb_models **out)
{
	struct sb_models *ms = calloc(1, sizeof *ms);
	char path[4096];
	json_error_t jerr;
	struct stat st;
	int rc;

	if (!ms)
		return SB_ERR_NOMEM;
	ms->default_budget_nusd = BUDGET_DEFAULT_NUSD;
	if ((rc = merge_json(ms, json_loads(builtin_json, JSON_REJECT_DUPLICATES, &jerr),
			     &jerr, "built-in models")) ||
	    (rc = sb_home_path(home, "models.json", path, sizeof path)))
		goto fail;
	if (stat(path, &st)) {
		if (errno == ENOENT) {
			*out = ms;
			return SB_OK;
		}
		rc = sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
		goto fail;
	}
	if (st.st_size > (4l << 20)) {
		rc = sb_seterr(SB_ERR_INVAL, "%s: larger than 4 MiB", path);
		goto fail;
	}
	if ((rc = merge_json(ms, json_load_file(path, JSON_REJECT_DUPLICATES, &jerr),
			     &jerr, path)))
		goto fail;
	*out = ms;
	return SB_OK;
fail:
	sb_models_free(ms);
	return rc;
}

/* tokens * price / 1e6, rounded up, saturating. */
static uint64_t price_of(uint64_t tokens, uint64_t price)
{
	unsigned __int128 c = ((unsigned __int128)tokens * price + 999999) / 1000000;

	return c > UINT64_MAX ? UINT64_MAX : (uint64_t)c;
}

uint64_t sb_model_cost(const struct sb_model *m, uint64_t input, uint64_t cached,
		       uint64_t output)
{
	unsigned __int128 c;

	if (cached > input)
		cached = input;
	c = (unsigned __int128)price_of(input - cached, m->in_price) +
	    price_of(cached, m->cached_price) + price_of(output, m->out_price);
	return c > UINT64_MAX ? UINT64_MAX : (uint64_t)c;
}

/* --- the built-in model stub --- */

/* Finds sanbox-model-stub: $SANBOX_STUB_BIN, else beside the running
 * program or one directory up (the build tree's tests/ and bench/). */
int sb_stub_find(char *buf, size_t cap)
{
	const char *env = getenv("SANBOX_STUB_BIN");
	char exe[PATH_MAX];
	ssize_t n;
	char *slash;

	if (env && *env) {
		snprintf(buf, cap, "%s", env);
		return access(buf, X_OK)
			   ? sb_seterr(SB_ERR_UNAVAIL,
				       "SANBOX_STUB_BIN=%s is not executable", env)
			   : SB_OK;
	}
	n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0)
		return sb_seterr(SB_ERR_UNAVAIL, "cannot find the running program");
	exe[n] = 0;
	for (int up = 0; up < 2; up++) {
		if (!(slash = strrchr(exe, '/')))
			break;
		*slash = 0;
		if ((size_t)snprintf(buf, cap, "%s/sanbox-model-stub", exe) < cap &&
		    !access(buf, X_OK))
			return SB_OK;
	}
	return sb_seterr(
	    SB_ERR_UNAVAIL,
	    "the model stub sanbox-model-stub is not installed beside the daemon");
}

int sb_stub_start(const char *script_dir, pid_t *pid, char url[SB_URL_MAX])
{
	char bin[PATH_MAX], line[128], parent[24];
	char *argv[] = {bin,	"--listen", "127.0.0.1:0", "--parent",
			parent, NULL,	    NULL,	   NULL};
	struct sb_spawn sp = {.argv = argv, .in = -1, .out = -1, .err = -1};
	struct pollfd pfd;
	size_t got = 0;
	int fds[2], rc;

	*pid = 0;
	if ((rc = sb_stub_find(bin, sizeof bin)))
		return rc;
	snprintf(parent, sizeof parent, "%d", (int)getpid());
	if (script_dir && *script_dir) {
		argv[5] = "--script-dir";
		argv[6] = (char *)script_dir;
	}
	if (pipe2(fds, O_CLOEXEC))
		return sb_seterr(SB_ERR_IO, "pipe: %s", strerror(errno));
	sp.out = fds[1];
	sp.err = 2; /* its diagnostics go to the daemon's log */
	rc = sb_spawn(&sp, pid);
	close(fds[1]);
	if (rc) {
		close(fds[0]);
		return rc;
	}
	/* its first line: "listening 127.0.0.1:PORT" */
	pfd.fd = fds[0];
	pfd.events = POLLIN;
	while (got < sizeof line - 1 && !memchr(line, '\n', got)) {
		ssize_t n;
		if (poll(&pfd, 1, 5000) <= 0)
			break;
		n = read(fds[0], line + got, sizeof line - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fds[0]);
	line[got] = 0;
	line[strcspn(line, "\n")] = 0;
	if (strncmp(line, "listening 127.0.0.1:", 20)) {
		sb_stub_stop(*pid);
		*pid = 0;
		return sb_seterr(SB_ERR_UNAVAIL,
				 "the model stub did not start (see the daemon log)");
	}
	snprintf(url, SB_URL_MAX, "http://%s/v1", line + 10);
	return SB_OK;
}

void sb_stub_stop(pid_t pid)
{
	struct timespec ts = {0, 20000000};

	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	for (int i = 0; i < 100; i++) {
		pid_t r = waitpid(pid, NULL, WNOHANG);
		if (r == pid || (r < 0 && errno == ECHILD))
			return;
		nanosleep(&ts, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}
