/* runspec.c - a run's run.create spec (see runspec.h). */
#include "cli/runspec.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/mpack.h"

int cli_strs_add(struct cli_strs *l, const char *s)
{
	if (l->n == CLI_SPEC_LIST_MAX)
		return sb_seterr(SB_ERR_TOOBIG, "at most %d entries", CLI_SPEC_LIST_MAX);
	l->v[l->n++] = s;
	return SB_OK;
}

int cli_spec_check_on_budget(const char *s)
{
	if (strcmp(s, "stop") && strcmp(s, "continue"))
		return sb_seterr(SB_ERR_INVAL, "'%.64s' is not stop or continue", s);
	return SB_OK;
}

int cli_spec_check_snapshots(const char *s)
{
	if (strcmp(s, "turn") && strcmp(s, "stop") && strcmp(s, "off"))
		return sb_seterr(SB_ERR_INVAL, "'%.64s' is not turn, stop or off", s);
	return SB_OK;
}

int cli_spec_check_env(const char *kv)
{
	if (!strchr(kv, '=') || kv[0] == '=')
		return sb_seterr(SB_ERR_INVAL, "'%.64s' is not K=V", kv);
	return SB_OK;
}

static const char *file_kind(mode_t m)
{
	return S_ISDIR(m)    ? "a directory"
	       : S_ISFIFO(m) ? "a FIFO"
	       : S_ISSOCK(m) ? "a socket"
	       : S_ISCHR(m)  ? "a character device"
	       : S_ISBLK(m)  ? "a block device"
			     : "not a regular file";
}

int cli_input_open(const char *path, struct cli_input *in)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);

	if (fd < 0) {
		int err = errno;
		if (err != ENOENT && stat(path, &st) == 0 &&
		    !S_ISREG(st.st_mode)) /* a socket */
			return sb_seterr(SB_ERR_INVAL,
					 "input %s is %s, not a regular file", path,
					 file_kind(st.st_mode));
		return sb_seterr(err == ENOENT ? SB_ERR_NOTFOUND : SB_ERR_IO,
				 "input %s: %s", path, strerror(err));
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return sb_seterr(SB_ERR_INVAL, "input %s is %s, not a regular file", path,
				 file_kind(st.st_mode));
	}
	in->path = path;
	in->fd = fd;
	in->size = (size_t)st.st_size;
	in->mode = st.st_mode & 0777;
	return SB_OK;
}

int cli_inputs_open(const struct cli_strs *paths, struct cli_input *in, int *at)
{
	size_t total = 0;
	int i, rc = SB_OK;

	for (i = 0; i < paths->n; i++) {
		if ((rc = cli_input_open(paths->v[i], &in[i])))
			break;
		total += in[i].size;
		if (total > CLI_SPEC_INPUTS_MAX) {
			rc = sb_seterr(SB_ERR_TOOBIG, "inputs exceed %u MiB",
				       CLI_SPEC_INPUTS_MAX >> 20);
			close(in[i].fd);
			break;
		}
	}
	if (rc) {
		cli_inputs_close(in, i);
		*at = i;
	}
	return rc;
}

void cli_inputs_close(struct cli_input *in, int n)
{
	while (n-- > 0)
		close(in[n].fd);
}

/* Reads in whole (its size as opened) into data. Errors: SB_ERR_IO. */
static int input_read(const struct cli_input *in, char *data)
{
	size_t got = 0;
	ssize_t n;

	while (got < in->size) {
		n = read(in->fd, data + got, in->size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return sb_seterr(SB_ERR_IO, "input %s: %s", in->path,
					 n < 0 ? strerror(errno)
					       : "it shrank while it was read");
		got += (size_t)n;
	}
	return SB_OK;
}

/* Packs the inputs as [{path, data, mode}]; paths are the base names.
 * Errors: SB_ERR_IO, SB_ERR_NOMEM. */
static int pack_inputs(msgpack_packer *pk, const struct cli_input *in, int n)
{
	sb_pack_str(pk, "inputs");
	msgpack_pack_array(pk, (size_t)n);
	for (int i = 0; i < n; i++) {
		const char *base = strrchr(in[i].path, '/');
		char *data = malloc(in[i].size + 1);
		int rc;

		if (!data)
			return sb_seterr(SB_ERR_NOMEM, "input %s: out of memory",
					 in[i].path);
		if ((rc = input_read(&in[i], data))) {
			free(data);
			return rc;
		}
		msgpack_pack_map(pk, 3);
		sb_pack_kstr(pk, "path", base ? base + 1 : in[i].path);
		sb_pack_str(pk, "data");
		msgpack_pack_bin_with_body(pk, data, in[i].size);
		sb_pack_ku64(pk, "mode", in[i].mode);
		free(data);
	}
	return SB_OK;
}

static void pack_strs(msgpack_packer *pk, const char *key, const char *const *v, int n)
{
	sb_pack_str(pk, key);
	msgpack_pack_array(pk, (size_t)n);
	for (int i = 0; i < n; i++)
		sb_pack_str(pk, v[i]);
}

/* Packs the fields of s that are there only when given. */
static void pack_given(msgpack_packer *pk, const struct cli_run_spec *s)
{
	if (s->name)
		sb_pack_kstr(pk, "name", s->name);
	if (s->group)
		sb_pack_kstr(pk, "group", s->group);
	if (s->models.n) {
		/* the first is the run's model; the others it may use too */
		sb_pack_kstr(pk, "model", s->models.v[0]);
		pack_strs(pk, "models", s->models.v + 1, s->models.n - 1);
	}
	if (s->on_budget)
		sb_pack_kstr(pk, "on_budget", s->on_budget);
	if (s->accel)
		sb_pack_kstr(pk, "accel", s->accel);
	if (s->snapshots)
		sb_pack_kstr(pk, "snapshots", s->snapshots);
	if (s->net)
		sb_pack_kstr(pk, "network", s->net);
	if (s->allow.n)
		pack_strs(pk, "allow", s->allow.v, s->allow.n);
}

int cli_spec_pack(msgpack_packer *pk, const struct cli_run_spec *s,
		  const struct cli_input *in)
{
	size_t n = 10 + !!s->name + !!s->group + !!s->models.n * 2 + !!s->accel +
		   !!s->on_budget + !!s->net + !!s->allow.n + !!s->quota +
		   !!s->snapshots + !!s->group_budget;

	msgpack_pack_map(pk, n);
	sb_pack_kstr(pk, "template", s->tmpl);
	pack_given(pk, s);
	pack_strs(pk, "argv", s->argv, s->argc);
	sb_pack_kstr(pk, "prompt", s->argc || !s->prompt ? "" : s->prompt);
	pack_strs(pk, "env", s->env.v, s->env.n);
	pack_strs(pk, "secrets", s->secrets.v, s->secrets.n);
	sb_pack_ku64(pk, "cpus", s->cpus);
	sb_pack_ku64(pk, "memory_mib", s->mem);
	sb_pack_ku64(pk, "timeout_s", s->timeout);
	sb_pack_ku64(pk, "budget_nusd", s->budget);
	if (s->quota)
		sb_pack_ku64(pk, "record_quota", s->quota);
	if (s->group_budget)
		sb_pack_ku64(pk, "group_budget_nusd", s->group_budget);
	return pack_inputs(pk, in, s->inputs.n);
}
