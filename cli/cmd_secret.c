/* cmd_secret.c - sanbox secret: set, ls, rm. Values go to the daemon, which
 * keeps them encrypted; they are never printed. */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"
#include "engine/gateway/secrets.h"

/* Reads the value from stdin (asking without echo on a terminal) into buf
 * (guarded memory of SB_SECRET_VALUE_MAX + 2 bytes); drops one trailing
 * newline. */
static int read_value(const char *name, char *buf, size_t *len)
{
	struct termios old, quiet;
	int tty = isatty(0), rc = SB_OK;
	size_t n = 0;

	if (tty) {
		fprintf(stderr, "value of %s (not shown): ", name);
		tcgetattr(0, &old);
		quiet = old;
		quiet.c_lflag &= ~(tcflag_t)ECHO;
		tcsetattr(0, TCSANOW, &quiet);
	}
	while (n < SB_SECRET_VALUE_MAX + 1) {
		ssize_t r = read(0, buf + n, SB_SECRET_VALUE_MAX + 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = sb_seterr(SB_ERR_IO, "reading the value: %s",
				       strerror(errno));
			break;
		}
		if (r == 0)
			break;
		n += (size_t)r;
		if (tty && memchr(buf + n - (size_t)r, '\n', (size_t)r))
			break; /* a terminal gives one line */
	}
	if (tty) {
		tcsetattr(0, TCSANOW, &old);
		fputc('\n', stderr);
	}
	if (n && buf[n - 1] == '\n')
		n--;
	if (rc == SB_OK && n > SB_SECRET_VALUE_MAX)
		rc = sb_seterr(SB_ERR_TOOBIG, "the value is above %u KiB",
			       SB_SECRET_VALUE_MAX >> 10);
	if (rc == SB_OK && n == 0)
		rc = sb_seterr(SB_ERR_INVAL,
			       "the value is empty (give it on standard input)");
	*len = n;
	return rc;
}

static int secret_set(char **args, int json)
{
	const char *name = args[0];
	struct cli_req r;
	struct sb_reply rep;
	sb_client *c;
	char *buf;
	size_t len = 0;
	int rc;

	if (!sb_secret_name_ok(name))
		return cli_fail_code(CLI_EXIT_USAGE,
				     "'%s' is not a secret name (letters, digits and _)", name);
	if (sodium_init() < 0 || !(buf = sodium_malloc(SB_SECRET_VALUE_MAX + 2)))
		return cli_fail(SB_ERR_NOMEM, "out of memory");
	if ((rc = read_value(name, buf, &len))) {
		sodium_free(buf);
		return cli_fail_request(rc);
	}
	if ((rc = cli_connect(1, &c))) {
		sodium_free(buf);
		return cli_fail(rc, "%s", sb_errmsg(rc));
	}
	cli_req_begin(&r, "secret.set");
	sb_mapw_str(&r.m, "name", name);
	sb_mapw_bin(&r.m, "value", buf, len);
	sodium_free(buf);
	rc = cli_call(c, &r, &rep);
	if (rc == SB_OK)
		cli_note("secret %s set (%zu bytes)", name, len);
	else
		rc = cli_fail_request(rc);
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}

static int secret_rm(char **args, int json)
{
	struct cli_req r;
	struct sb_reply rep;
	sb_client *c;
	int rc;

	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	cli_req_begin(&r, "secret.rm");
	sb_mapw_str(&r.m, "name", args[0]);
	rc = cli_call(c, &r, &rep);
	if (rc)
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}

static int secret_ls(char **args, int json)
{
	const msgpack_object *list;
	struct cli_req r;
	struct sb_reply rep;
	char name[SB_SECRET_NAME_MAX], cell[4 * 40 + 1], when[32];
	sb_client *c;
	int rc;

	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	cli_req_begin(&r, "secret.list");
	if ((rc = cli_call(c, &r, &rep))) {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
		goto out;
	}
	list = sb_map_get(&rep.map, "secrets");
	if (json) {
		cli_print_json(list ? sb_msgpack_to_json(list) : json_array());
	} else {
		printf("%-40s %s\n", "NAME", "SET");
		for (uint32_t i = 0; list && list->type == MSGPACK_OBJECT_ARRAY &&
				     i < list->via.array.size;
		     i++) {
			const msgpack_object *s = &list->via.array.ptr[i];
			time_t t = (time_t)sb_map_u64(s, "set_s", 0);
			name[0] = 0;
			sb_map_str(s, "name", name, sizeof name);
			strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&t));
			cli_cell(name, 40, cell, sizeof cell);
			printf("%s %s\n", cell, when);
		}
	}
out:
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}

int cmd_secret(int argc, char **argv)
{
	static const struct cli_sub subs[] = {
		{"set", 1, 0, 0, secret_set},
		{"ls", 0, 0, 1, secret_ls},
		{"rm", 1, 0, 0, secret_rm},
	};

	return cli_sub_run(argc, argv, "secret", subs, sizeof subs / sizeof subs[0]);
}
