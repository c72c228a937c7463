/* mkrecord.c - writes a made-up run record into a state directory's log,
 * for CLI tests that need events only a microVM or the gateway records
 * (model calls with their bodies, file changes with their contents)
 * without booting one. The daemon must not run; it folds the events into
 * its projections when it next reads them.
 *
 * usage: mkrecord LOGDIR RUN < LINES
 * Each line of standard input is one event as a JSON object: {"type",
 * "source" (host, guest, gateway, operator, harness), "t" (ms after the
 * first event), "payload": {...}, "blobs": {"FIELD": "TEXT", ...}}; each
 * blob's text is stored in the blob table and its key put in the payload
 * as FIELD. All events are appended in one commit. Exits 0, or 1 with a
 * line on stderr.
 */
#include <jansson.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/error.h"
#include "engine/log/blob.h"
#include "engine/log/log.h"
#include "engine/payload.h"

#define EVENTS_MAX 256

static struct sb_event evs[EVENTS_MAX];
static msgpack_sbuffer bufs[EVENTS_MAX];
static struct sb_blob blobs[EVENTS_MAX * 4];
static size_t nblobs;

/* Stores each blob of line j as a blob and its key in the payload. */
static int line_blobs(json_t *j, json_t *payload)
{
	const char *field;
	json_t *text;
	uint8_t hash[SB_HASH_LEN];
	char hex[SB_HASH_HEX];

	json_object_foreach(json_object_get(j, "blobs"), field, text)
	{
		if (!json_is_string(text) || nblobs == sizeof blobs / sizeof *blobs)
			return -1;
		blobs[nblobs].data = strdup(json_string_value(text));
		blobs[nblobs].len = json_string_length(text);
		sb_blob_hash(blobs[nblobs].data, blobs[nblobs].len, hash);
		nblobs++;
		sb_hash_hex(hash, hex);
		json_object_set_new(payload, field, json_string(hex));
	}
	return 0;
}

static int line_event(json_t *j, const char *run, uint64_t t0, size_t i)
{
	json_t *payload = json_object_get(j, "payload");
	msgpack_packer pk;
	enum sb_source src;

	if (!json_is_object(payload) || line_blobs(j, payload) ||
	    sb_source_parse(json_string_value(json_object_get(j, "source")) ?: "", &src))
		return -1;
	msgpack_sbuffer_init(&bufs[i]);
	msgpack_packer_init(&pk, &bufs[i], msgpack_sbuffer_write);
	if (sb_json_to_msgpack(payload, &pk) ||
	    sb_event_init(&evs[i], json_string_value(json_object_get(j, "type")) ?: "",
			  run, src, bufs[i].data, bufs[i].size))
		return -1;
	evs[i].ts_ns =
	    t0 + (uint64_t)json_integer_value(json_object_get(j, "t")) * 1000000u;
	return 0;
}

int main(int argc, char **argv)
{
	char line[65536];
	struct timespec now;
	sb_log *log;
	size_t n = 0;
	int rc;

	if (argc != 3) {
		fprintf(stderr, "usage: mkrecord LOGDIR RUN < LINES\n");
		return 1;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	while (n < EVENTS_MAX && fgets(line, sizeof line, stdin)) {
		json_t *j = json_loads(line, 0, NULL);
		if (!j || line_event(j, argv[2], (uint64_t)now.tv_sec * 1000000000u, n)) {
			fprintf(stderr, "mkrecord: line %zu: %s\n", n + 1,
				sb_errmsg(SB_ERR_INVAL));
			return 1;
		}
		json_decref(j);
		n++;
	}
	if ((rc = sb_log_open(argv[1], 0, &log)) ||
	    (rc = sb_log_append_blobs(log, blobs, nblobs, evs, n))) {
		fprintf(stderr, "mkrecord: %s\n", sb_errmsg(rc));
		return 1;
	}
	sb_log_close(log);
	return 0;
}
