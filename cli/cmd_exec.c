/* cmd_exec.c - sanbox exec: run a command in a live run's guest, beside
 * its harness, through the guest agent (run.exec); its output comes when
 * it ends, and its exit status is sanbox's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"
#include "engine/text.h"
#include "vmm/chan.h"

#define EXEC_DEFAULT_TIMEOUT_S 600
#define EXEC_CALL_SLACK_MS     30000 /* the daemon's own margin and more */

/* Reads standard input whole (at most SB_CHAN_EXEC_STDIN_MAX bytes) into
 * a new buffer (*buf, the caller frees). Returns an exit code. */
static int stdin_read(char **buf, size_t *len)
{
	size_t cap = SB_CHAN_EXEC_STDIN_MAX + 1, n = 0;
	ssize_t got;
	char *b = malloc(cap);

	if (!b)
		return cli_fail(SB_ERR_NOMEM, "out of memory");
	while (n < cap && (got = read(0, b + n, cap - n)) != 0) {
		if (got < 0) {
			free(b);
			return cli_fail(SB_ERR_IO, "exec: reading stdin: %s", strerror(errno));
		}
		n += (size_t)got;
	}
	if (n > SB_CHAN_EXEC_STDIN_MAX) {
		free(b);
		return cli_fail_code(CLI_EXIT_USAGE, "exec: stdin is over 1 MiB (-i is bounded)");
	}
	*buf = b;
	*len = n;
	return CLI_EXIT_OK;
}

/* Writes stream data (n bytes) to fd: exact when fd is not a terminal,
 * else line by line, each escaped (the guest chose the bytes). */
static void out_write(int fd, const char *data, size_t n)
{
	const char *p = data, *end = data + n, *nl;
	char *esc;

	if (!isatty(fd)) {
		for (size_t off = 0; off < n;) {
			ssize_t w = write(fd, data + off, n - off);
			if (w <= 0)
				return;
			off += (size_t)w;
		}
		return;
	}
	for (; p < end; p = nl ? nl + 1 : end) {
		nl = memchr(p, '\n', (size_t)(end - p));
		esc = sb_text_escape_dup(p, (size_t)((nl ? nl : end) - p));
		if (esc)
			dprintf(fd, "%s\n", esc);
		free(esc);
	}
}

/* Prints the reply of a run.exec and returns the exit code its command
 * means: its status, 124 when it timed out, 1 when it could not start. */
static int exec_print(const msgpack_object *rep, const char *run, uint64_t timeout_s,
		      int json)
{
	static const char *const names[2] = {"stdout", "stderr"};
	int64_t status = sb_map_i64(rep, "status", -1);
	char err[256];

	if (json) {
		cli_print_reply(rep);
	} else {
		for (int i = 0; i < 2; i++) {
			const msgpack_object *o = sb_map_get(rep, names[i]);
			if (o && o->type == MSGPACK_OBJECT_BIN)
				out_write(i + 1, o->via.bin.ptr, o->via.bin.size);
		}
		if (sb_map_bool(rep, "truncated", 0))
			cli_note("exec: output past --output-max was left out (stdout %llu, "
				 "stderr %llu bytes in all)",
				 (unsigned long long)sb_map_u64(rep, "stdout_bytes", 0),
				 (unsigned long long)sb_map_u64(rep, "stderr_bytes", 0));
	}
	if (sb_map_str(rep, "error", err, sizeof err) > 0) {
		if (!json)
			cli_note("run %s: exec: %s", run, err);
		return CLI_EXIT_ERROR;
	}
	if (sb_map_bool(rep, "timed_out", 0)) {
		if (!json)
			cli_note("run %s: exec: the command timed out after %llus", run,
				 (unsigned long long)timeout_s);
		return CLI_EXIT_TIMEOUT;
	}
	return status >= 0 && status <= 255 ? (int)status : CLI_EXIT_ERROR;
}

/* The options of one exec. */
struct exec_opts {
	int in, json;
	uint64_t timeout_s, output_max;
};

static int exec_call(const char *run, char **cmd, int ncmd, const struct exec_opts *o)
{
	struct sb_reply rep = {0};
	struct cli_req r;
	char *in = NULL;
	size_t inlen = 0;
	sb_client *c;
	int rc;

	if (o->in && (rc = stdin_read(&in, &inlen)) != CLI_EXIT_OK)
		return rc;
	if ((rc = cli_connect(1, &c))) {
		free(in);
		return cli_fail(rc, "%s", sb_errmsg(rc));
	}
	cli_req_begin(&r, "run.exec");
	sb_mapw_str(&r.m, "run", run);
	msgpack_packer *pk = sb_mapw_key(&r.m, "argv");
	msgpack_pack_array(pk, (size_t)ncmd);
	for (int i = 0; i < ncmd; i++)
		sb_pack_str(pk, cmd[i]);
	if (o->in)
		sb_mapw_bin(&r.m, "stdin", in ? in : "", inlen);
	sb_mapw_u64(&r.m, "timeout_ms", o->timeout_s * 1000);
	sb_mapw_u64(&r.m, "output_max", o->output_max);
	rc = cli_call_ms(c, &r, (int)(o->timeout_s * 1000 + EXEC_CALL_SLACK_MS), &rep);
	free(in);
	rc = rc ? cli_fail_request(rc) : exec_print(&rep.map, run, o->timeout_s, o->json);
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}

int cmd_exec(int argc, char **argv)
{
	static const struct option opts[] = {
	    CLI_OPT_HELP,
	    {"interactive", no_argument, NULL, 'i'},
	    {"tty", no_argument, NULL, 't'},
	    {"timeout", required_argument, NULL, 'T'},
	    {"output-max", required_argument, NULL, 'O'},
	    {"json", no_argument, NULL, 'j'},
	    {NULL, 0, NULL, 0},
	};
	struct exec_opts o = {.timeout_s = EXEC_DEFAULT_TIMEOUT_S, .output_max = 1u << 20};
	const char *run;
	int ch, rc;

	if (argc < 2 || argv[1][0] == '-') { /* RUN first, then the options */
		while ((ch = getopt_long(argc, argv, "+:hit", opts, NULL)) != -1) {
			if (ch == 'h')
				return cli_help("exec");
			if (ch == '?' || ch == ':')
				return cli_badopt("exec", argv, ch);
			return cli_fail_code(CLI_EXIT_USAGE, "exec: RUN comes first, then "
							     "the options");
		}
		return cli_usage("exec");
	}
	run = argv[1];
	optind = 2;
	while ((ch = getopt_long(argc, argv, "+:hit", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("exec");
		case 'i': o.in = 1; break;
		case 't':
			return cli_fail_code(CLI_EXIT_USAGE,
					     "exec: -t is not supported: the command gets no "
					     "terminal, its output comes when it ends");
		case 'T':
			if ((rc = cli_parse_duration(optarg, &o.timeout_s)) || o.timeout_s < 1 ||
			    o.timeout_s > 24 * 3600)
				return cli_fail_code(CLI_EXIT_USAGE,
						     "exec: --timeout must be 1s to 24h, e.g. 90s, "
						     "10m");
			break;
		case 'O':
			if ((rc = cli_parse_u64("--output-max", optarg, 0, SB_CHAN_EXEC_OUTPUT_MAX,
						&o.output_max)))
				return rc;
			break;
		case 'j': o.json = 1; break;
		default: return cli_badopt("exec", argv, ch);
		}
	}
	if (optind >= argc)
		return cli_usage("exec");
	return exec_call(run, argv + optind, argc - optind, &o);
}
