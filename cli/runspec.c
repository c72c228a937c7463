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
	in->dest = NULL;
	in->data = NULL;
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
		if (!in[n].data)
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

/* Packs the inputs into spec as [{path, data, mode}]; paths are their
 * dest, else their base names. Errors: SB_ERR_IO, SB_ERR_NOMEM. */
static int pack_inputs(sb_mapw *spec, const struct cli_input *in, int n)
{
	msgpack_packer *pk = sb_mapw_key(spec, "inputs");
	sb_mapw m;

	msgpack_pack_array(pk, (size_t)n);
	for (int i = 0; i < n; i++) {
		const char *base = strrchr(in[i].path, '/');
		char *data = NULL;
		int rc;

		if (!in[i].data && !(data = malloc(in[i].size + 1)))
			return sb_seterr(SB_ERR_NOMEM, "input %s: out of memory",
					 in[i].path);
		if (data && (rc = input_read(&in[i], data))) {
			free(data);
			return rc;
		}
		sb_mapw_begin(&m, pk);
		sb_mapw_str(&m, "path",
			    in[i].dest ? in[i].dest : base ? base + 1 : in[i].path);
		sb_mapw_bin(&m, "data", data ? data : in[i].data, in[i].size);
		sb_mapw_u64(&m, "mode", in[i].mode);
		sb_mapw_end(&m);
		free(data);
	}
	return SB_OK;
}

static void pack_strs(sb_mapw *m, const char *key, const char *const *v, int n)
{
	msgpack_packer *pk = sb_mapw_key(m, key);

	msgpack_pack_array(pk, (size_t)n);
	for (int i = 0; i < n; i++)
		sb_pack_str(pk, v[i]);
}

/* Packs the fields of s that are there only when given. */
static void pack_given(sb_mapw *m, const struct cli_run_spec *s)
{
	if (s->name)
		sb_mapw_str(m, "name", s->name);
	if (s->group)
		sb_mapw_str(m, "group", s->group);
	if (s->models.n) {
		/* the first is the run's model; the others it may use too */
		sb_mapw_str(m, "model", s->models.v[0]);
		pack_strs(m, "models", s->models.v + 1, s->models.n - 1);
	}
	if (s->on_budget)
		sb_mapw_str(m, "on_budget", s->on_budget);
	if (s->accel)
		sb_mapw_str(m, "accel", s->accel);
	if (s->snapshots)
		sb_mapw_str(m, "snapshots", s->snapshots);
	if (s->runner)
		sb_mapw_str(m, "runner", s->runner);
	if (s->net)
		sb_mapw_str(m, "network", s->net);
	if (s->allow.n)
		pack_strs(m, "allow", s->allow.v, s->allow.n);
}

int cli_spec_pack(msgpack_packer *pk, const struct cli_run_spec *s,
		  const struct cli_input *in)
{
	sb_mapw m;
	int rc;

	sb_mapw_begin(&m, pk);
	sb_mapw_str(&m, "template", s->tmpl);
	pack_given(&m, s);
	pack_strs(&m, "argv", s->argv, s->argc);
	sb_mapw_str(&m, "prompt", s->argc || !s->prompt ? "" : s->prompt);
	pack_strs(&m, "env", s->env.v, s->env.n);
	pack_strs(&m, "secrets", s->secrets.v, s->secrets.n);
	sb_mapw_u64(&m, "cpus", s->cpus);
	sb_mapw_u64(&m, "memory_mib", s->mem);
	sb_mapw_u64(&m, "timeout_s", s->timeout);
	sb_mapw_u64(&m, "budget_nusd", s->budget);
	if (s->quota)
		sb_mapw_u64(&m, "record_quota", s->quota);
	if (s->group_budget)
		sb_mapw_u64(&m, "group_budget_nusd", s->group_budget);
	if ((rc = pack_inputs(&m, in, s->inputs.n)))
		return rc;
	return sb_mapw_end(&m);
}
