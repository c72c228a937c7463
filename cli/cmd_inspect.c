/* cmd_inspect.c - sanbox inspect: a run's resolved settings and state. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/error.h"
#include "engine/payload.h"
#include "projections/views.h"

static void print_map(const char *title, const msgpack_object *m)
{
	printf("%s:\n", title);
	if (!m || m->type != MSGPACK_OBJECT_MAP) {
		printf("  (none)\n");
		return;
	}
	for (uint32_t i = 0; i < m->via.map.size; i++) {
		json_t *v = sb_msgpack_to_json(&m->via.map.ptr[i].val);
		char *s = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
		printf("  %-16.*s %s\n", (int)m->via.map.ptr[i].key.via.str.size,
		       m->via.map.ptr[i].key.via.str.ptr, s ? s : "?");
		free(s);
		json_decref(v);
	}
}

int cmd_inspect(int argc, char **argv)
{
	static const struct option opts[] = {
		{"json", no_argument, NULL, 'j'},
		{NULL, 0, NULL, 0},
	};
	struct cli_req r;
	struct sb_reply rep;
	sb_client *c;
	int json = 0, ch, rc;

	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (ch != 'j')
			return cli_usage("inspect");
		json = 1;
	}
	if (argc - optind != 1)
		return cli_usage("inspect");
	if ((rc = cli_connect(1, &c)))
		return cli_fail(rc, "%s", sb_errmsg(rc));
	cli_req_begin(&r, "run.get", 1);
	sb_pack_kstr(&r.pk, "run", argv[optind]);
	if ((rc = cli_call(c, &r, &rep))) {
		rc = cli_fail(rc, "%s", sb_errmsg(rc));
	} else if (json) {
		json_t *j = sb_msgpack_to_json(&rep.map);
		json_object_del(j, "ok");
		cli_print_json(j);
	} else {
		print_map("run", sb_map_get(&rep.map, "run"));
		print_map("policy", sb_map_get(&rep.map, "policy"));
		print_map("cost", sb_map_get(&rep.map, "cost"));
	}
	sb_reply_free(&rep);
	sb_client_close(c);
	return rc;
}
