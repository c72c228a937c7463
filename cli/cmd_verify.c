/* cmd_verify.c - sanbox verify: check a bundle offline. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/audit.h"
#include "cli/cli.h"
#include "engine/error.h"

struct verify_ctx {
	const struct sb_note_key *key;
	const char *prior;
	size_t prior_len;
	struct sb_bundle_info info;
};

static int verify_dir(void *ctx, const char *dir)
{
	struct verify_ctx *v = ctx;

	return sb_bundle_verify(dir, v->key, v->prior, v->prior_len, &v->info);
}

static void verify_report(const char *bundle, const struct verify_ctx *v, int json)
{
	char root[2 * SB_MERKLE_HASH + 1];

	for (int i = 0; i < SB_MERKLE_HASH; i++)
		snprintf(root + 2 * i, 3, "%02x", v->info.root[i]);
	if (json) {
		cli_print_json(json_pack("{s:b, s:I, s:I, s:I, s:I, s:I, s:s, s:b, s:I}", "ok", 1,
					 "runs", (json_int_t)v->info.runs, "events",
					 (json_int_t)v->info.events, "redacted",
					 (json_int_t)v->info.redacted, "blobs", (json_int_t)v->info.blobs,
					 "tree_size", (json_int_t)v->info.tree_size, "root", root,
					 "trusted_key", v->key != NULL, "prior_tree_size",
					 (json_int_t)v->info.prior_size));
		return;
	}
	printf("%s: verified: %llu events of %llu run%s, %llu redacted, %llu blobs; tree %llu, root %s\n",
	       bundle, (unsigned long long)v->info.events, (unsigned long long)v->info.runs,
	       v->info.runs == 1 ? "" : "s", (unsigned long long)v->info.redacted,
	       (unsigned long long)v->info.blobs, (unsigned long long)v->info.tree_size, root);
	if (v->prior)
		printf("extends the prior checkpoint (tree %llu)\n", (unsigned long long)v->info.prior_size);
	if (!v->key)
		printf("signed by the bundle's own key: give --key to check who signed it\n");
}

int cmd_verify(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_OPT_HELP,
		{"key", required_argument, NULL, 'k'},
		{"prior", required_argument, NULL, 'p'},
		{"json", no_argument, NULL, 'j'},
		{NULL, 0, NULL, 0},
	};
	struct verify_ctx v = {0};
	struct sb_note_key key;
	const char *keytext = NULL, *prior = NULL;
	char *note = NULL;
	int ch, json = 0, rc;

	while ((ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h': return cli_help("verify");
		case 'k': keytext = optarg; break;
		case 'p': prior = optarg; break;
		case 'j': json = 1; break;
		default: return cli_badopt("verify", argv, ch);
		}
	}
	if (argc - optind != 1)
		return cli_usage("verify");
	if (keytext && sb_key_parse(keytext, &key))
		return cli_fail_code(CLI_EXIT_USAGE, "--key: not a verifier key (NAME+HASH+BASE64)");
	v.key = keytext ? &key : NULL;
	if (prior && (rc = cli_audit_checkpoint(prior, &note, &v.prior_len)))
		return cli_fail(rc, "--prior: %s", sb_errmsg(rc));
	v.prior = note;
	rc = cli_audit_dir(argv[optind], verify_dir, &v);
	free(note);
	if (rc)
		return cli_fail(rc, "verify: %s", sb_errmsg(rc));
	verify_report(argv[optind], &v, json);
	return CLI_EXIT_OK;
}
