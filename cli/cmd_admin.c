/* cmd_admin.c - sanbox admin: reproject, token create, append. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/home.h"
#include "engine/payload.h"
#include "engine/daemon/token.h"

static int reproject(void)
{
	struct cli_req r;
	struct sb_reply rep;
	sb_client *c;
	int rc;

	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	cli_req_begin(&r, "admin.reproject", 0);
	if ((rc = cli_call(c, &r, &rep)) == SB_OK)
		printf("projections rebuilt up to offset %llu\n",
		       (unsigned long long)sb_map_u64(&rep.map, "checkpoint", 0));
	else
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}

static int append(const char *run, const char *type, const char *json)
{
	json_error_t jerr;
	json_t *j = json_loads(json, 0, &jerr);
	struct cli_req r;
	struct sb_reply rep;
	sb_client *c;
	int rc;

	if (!j || !json_is_object(j)) {
		json_decref(j);
		return cli_fail(SB_ERR_INVAL, "payload must be a JSON object: %s", j ? "" : jerr.text);
	}
	if ((rc = cli_connect(1, &c))) {
		json_decref(j);
		return cli_fail(rc, "%s", sb_errmsg(rc));
	}
	cli_req_begin(&r, "events.append", 3);
	sb_pack_kstr(&r.pk, "run", run);
	sb_pack_kstr(&r.pk, "type", type);
	sb_pack_str(&r.pk, "payload");
	sb_json_to_msgpack(j, &r.pk);
	json_decref(j);
	if ((rc = cli_call(c, &r, &rep)) == SB_OK)
		printf("%llu\n", (unsigned long long)sb_map_u64(&rep.map, "offset", 0));
	else
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}

int cmd_admin(int argc, char **argv)
{
	char token[SB_TOKEN_HEX];
	int rc;

	if (argc == 2 && !strcmp(argv[1], "reproject"))
		return reproject();
	if (argc == 3 && !strcmp(argv[1], "token") && !strcmp(argv[2], "create")) {
		if ((rc = sb_home_init(cli_home)) || (rc = sb_token_create(cli_home, NULL, token)))
			return cli_fail(rc, "%s", sb_errmsg(rc));
		printf("%s\n", token);
		return 0;
	}
	if (argc == 5 && !strcmp(argv[1], "append"))
		return append(argv[2], argv[3], argv[4]);
	return cli_usage("admin");
}
