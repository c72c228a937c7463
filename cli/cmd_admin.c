/* cmd_admin.c - sanbox admin: reproject, token create, append. */
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/daemon/token.h"
#include "engine/error.h"
#include "engine/log/mdb.h"
#include "engine/home.h"
#include "engine/log/checkpoint.h"
#include "projections/tree.h"
#include "engine/payload.h"

/* Prints the unsigned field key of rep: {"key": N} with --json, else the
 * text with N in it. */
static void print_u64(const struct sb_reply *rep, const char *key, const char *fmt, int json)
{
	unsigned long long v = (unsigned long long)sb_map_u64(&rep->map, key, 0);

	if (json)
		cli_print_json(json_pack("{s:I}", key, (json_int_t)v));
	else
		printf(fmt, v);
}

static int admin_reproject(char **args, int json)
{
	struct cli_req r;
	struct sb_reply rep;
	sb_client *c;
	int rc;

	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	cli_req_begin(&r, "admin.reproject");
	if ((rc = cli_call(c, &r, &rep)) == SB_OK)
		print_u64(&rep, "checkpoint", "projections rebuilt up to offset %llu\n", json);
	else
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}

static int admin_token(char **args, int json)
{
	char token[SB_TOKEN_HEX];
	int rc;

	if (strcmp(args[0], "create"))
		return cli_usage("admin");
	if ((rc = cli_local_only("admin token create")))
		return rc;
	if ((rc = sb_home_init(cli_home)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	if ((rc = sb_token_create(cli_home, args[1], token)))
		return cli_fail_request(rc);
	if (json)
		cli_print_json(json_pack("{s:s}", "token", token));
	else
		printf("%s\n", token);
	return CLI_EXIT_OK;
}

static int admin_append(char **args, int json)
{
	json_error_t jerr;
	json_t *j = json_loads(args[2], 0, &jerr);
	struct cli_req r;
	struct sb_reply rep;
	sb_client *c;
	int rc;

	if (!j || !json_is_object(j)) {
		json_decref(j);
		return cli_fail_code(CLI_EXIT_USAGE, "admin append: the payload must be a JSON object%s%s",
				     j ? "" : ": ", j ? "" : jerr.text);
	}
	if ((rc = cli_connect(1, &c))) {
		json_decref(j);
		return cli_fail(rc, "%s", sb_errmsg(rc));
	}
	cli_req_begin(&r, "events.append");
	sb_mapw_str(&r.m, "run", args[0]);
	sb_mapw_str(&r.m, "type", args[1]);
	rc = sb_json_to_msgpack(j, sb_mapw_key(&r.m, "payload"));
	json_decref(j);
	if (rc) {
		msgpack_sbuffer_destroy(&r.buf);
		sb_client_close(c);
		return cli_fail(rc, "%s", sb_errmsg(rc));
	}
	if ((rc = cli_call(c, &r, &rep)) == SB_OK)
		print_u64(&rep, "offset", "%llu\n", json);
	else
		rc = cli_fail_request(rc);
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}

static int admin_key(char **args, int json)
{
	struct sb_note_key k;
	char vk[SB_VKEY_MAX];
	int rot = !strcmp(args[0], "rotate"), rc;

	if (!rot && strcmp(args[0], "show"))
		return cli_usage("admin");
	if ((rc = cli_local_only("admin key")))
		return rc;
	if ((rc = sb_home_init(cli_home)) ||
	    (rc = rot ? sb_key_rotate(cli_home, &k) : sb_key_load(cli_home, 1, &k)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	sb_key_verifier(&k, vk);
	sodium_memzero(k.sk, sizeof k.sk);
	if (json)
		cli_print_json(json_pack("{s:s, s:s}", "key", vk, "name", k.name));
	else
		printf("%s\n", vk);
	return CLI_EXIT_OK;
}

/* Prints a signed checkpoint of the tree as the log holds it now. */
static int admin_checkpoint(char **args, int json)
{
	char path[4096], note[SB_CKPT_MAX];
	struct sb_note_key k;
	struct sb_proj_txn t;
	struct sb_ckpt c;
	sb_log *log = NULL;
	MDB_txn *txn = NULL;
	sb_client *cl;
	int rc;

	if ((rc = cli_local_only("admin checkpoint")))
		return rc;
	if ((rc = cli_connect(1, &cl))) /* the daemon keeps the tree */
		return cli_fail(rc, "%s", sb_errmsg(rc));
	sb_client_close(cl);
	if (!(rc = sb_key_load(cli_home, 1, &k)) &&
	    !(rc = sb_home_path(cli_home, "log", path, sizeof path)) &&
	    !(rc = sb_log_open(path, SB_LOG_RDONLY, &log)) &&
	    !(rc = sb_log_mdb_err(mdb_txn_begin(sb_log_env(log), NULL, MDB_RDONLY, &txn), "read")) &&
	    !(rc = sb_tree_open(log, txn, &t)))
		rc = sb_tree_checkpoint(&t, &k, &c, note);
	if (txn)
		mdb_txn_abort(txn);
	sb_log_close(log);
	sodium_memzero(k.sk, sizeof k.sk);
	if (rc)
		return cli_fail(rc, "%s", sb_errmsg(rc));
	fputs(note, stdout);
	return CLI_EXIT_OK;
}

int cmd_admin(int argc, char **argv)
{
	static const struct cli_sub subs[] = {
		{"reproject", 0, 0, 1, admin_reproject},
		{"token", 1, 1, 1, admin_token},
		{"append", 3, 0, 1, admin_append},
		{"key", 1, 0, 1, admin_key},
		{"checkpoint", 0, 0, 0, admin_checkpoint},
	};

	return cli_sub_run(argc, argv, "admin", subs, sizeof subs / sizeof subs[0]);
}
