/* template.c - reading built templates. */
#include "engine/template.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/home.h"

int sb_template_store(const char *home, char *buf, size_t cap)
{
	const char *env = getenv("SANBOX_TEMPLATES");
	int n = env && *env ? snprintf(buf, cap, "%s", env)
			    : snprintf(buf, cap, "%s/templates", home);

	return n < 0 || (size_t)n >= cap
		   ? sb_seterr(SB_ERR_TOOBIG, "template store path too long")
		   : SB_OK;
}

static int valid_name(const char *name)
{
	size_t n = strlen(name);

	if (!n || n >= 64 || name[0] == '.')
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!(name[i] >= 'a' && name[i] <= 'z') &&
		    !(name[i] >= '0' && name[i] <= '9') && name[i] != '-' &&
		    name[i] != '_' && name[i] != '.')
			return 0;
	return 1;
}

static int copy_json_str(json_t *o, const char *key, char *buf, size_t cap)
{
	const char *s = json_string_value(json_object_get(o, key));

	if (!s || strlen(s) >= cap)
		return -1;
	memcpy(buf, s, strlen(s) + 1);
	return 0;
}

/* Copies the strings of array key of j (absent: none) into rows of width
 * bytes, at most max; *n gets how many. -1 when one is not a string or
 * does not fit, or there are more. */
static int copy_json_strs(json_t *j, const char *key, char *rows, size_t width, size_t max,
			  size_t *n)
{
	json_t *one;
	size_t i;

	*n = 0;
	json_array_foreach(json_object_get(j, key), i, one)
	{
		const char *v = json_string_value(one);
		if (!v || strlen(v) >= width || *n == max)
			return -1;
		memcpy(rows + width * (*n)++, v, strlen(v) + 1);
	}
	return 0;
}

int sb_template_load(const char *home, const char *name, struct sb_template *t)
{
	char store[PATH_MAX], path[PATH_MAX + 64];
	json_error_t jerr;
	json_t *j;
	int n;

	memset(t, 0, sizeof *t);
	if (!valid_name(name))
		return sb_seterr(SB_ERR_INVAL, "'%.64s' is not a template name", name);
	if (sb_template_store(home, store, sizeof store))
		return SB_ERR_TOOBIG;
	snprintf(path, sizeof path, "%s/%s/template.json", store, name);
	if (access(path, R_OK))
		return sb_seterr(
		    SB_ERR_NOTFOUND,
		    "template %s is not built (run 'sanbox template build %s')", name,
		    name);
	j = json_load_file(path, 0, &jerr);
	if (!j)
		return sb_seterr(SB_ERR_CORRUPT, "%s: %s", path, jerr.text);
	snprintf(t->name, sizeof t->name, "%s", name);
	if (copy_json_str(j, "hash", t->hash, sizeof t->hash) ||
	    copy_json_str(j, "harness", t->harness, sizeof t->harness)) {
		json_decref(j);
		return sb_seterr(SB_ERR_CORRUPT, "%s: hash or harness missing", path);
	}
	copy_json_str(j, "kernel_version", t->kernel_version, sizeof t->kernel_version);
	copy_json_str(j, "model", t->model, sizeof t->model);
	copy_json_str(j, "network", t->network, sizeof t->network);
	if (copy_json_strs(j, "secrets", t->secrets[0], sizeof t->secrets[0],
			   SB_TEMPLATE_SECRETS, &t->nsecrets) ||
	    copy_json_strs(j, "allow", t->allow[0], sizeof t->allow[0], SB_TEMPLATE_GRANTS,
			   &t->nallow) ||
	    copy_json_strs(j, "env", t->env[0], sizeof t->env[0], SB_TEMPLATE_ENV, &t->nenv)) {
		json_decref(j);
		return sb_seterr(SB_ERR_CORRUPT,
				 "%s: bad secrets, allow or env (at most %d, %d and %d strings)",
				 path, SB_TEMPLATE_SECRETS, SB_TEMPLATE_GRANTS, SB_TEMPLATE_ENV);
	}
	if (copy_json_str(j, "adapter", t->adapter, sizeof t->adapter) || !t->adapter[0])
		strcpy(t->adapter, "reference"); /* a template from before adapters */
	t->cpus = (uint64_t)json_integer_value(json_object_get(j, "cpus"));
	t->memory_mib = (uint64_t)json_integer_value(json_object_get(j, "memory_mib"));
	t->timeout_s = (uint64_t)json_integer_value(json_object_get(j, "timeout_s"));
	json_decref(j);
	if (!t->cpus)
		t->cpus = 1;
	if (!t->memory_mib)
		t->memory_mib = 256;
	if (!t->timeout_s)
		t->timeout_s = 600;
	n = snprintf(t->kernel, sizeof t->kernel, "%s/%s/vmlinux", store, name);
	n |= snprintf(t->initrd, sizeof t->initrd, "%s/%s/initrd.img", store, name);
	n |= snprintf(t->rootfs, sizeof t->rootfs, "%s/%s/rootfs.img", store, name);
	if (n < 0 || access(t->kernel, R_OK) || access(t->initrd, R_OK) ||
	    access(t->rootfs, R_OK))
		return sb_seterr(SB_ERR_CORRUPT, "template %s is incomplete: rebuild it",
				 name);
	return SB_OK;
}
