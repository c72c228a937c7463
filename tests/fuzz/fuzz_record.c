/* fuzz_record.c - libFuzzer target for the record decoder and the payload
 * parser and JSON conversion behind it.
 *
 * Each input is decoded twice: as given (exercising the length and checksum
 * checks), and with its last 8 bytes replaced by the right checksum, so the
 * fuzzer reaches the header and payload parsing that random bytes could
 * never reach through a 64-bit checksum. A decoded record must be sane, must
 * encode and decode back to the same event, and its payload, when it is a
 * map, must convert to JSON and back without loss.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "engine/error.h"
#include "engine/payload.h"
#include "engine/log/record.h"

#include "tests/fuzz/fuzz.h"

/* Touches every byte the object refers to, so ASan sees any overread. */
static uint64_t walk(const msgpack_object *o)
{
	uint64_t sum = o->type;

	switch (o->type) {
	case MSGPACK_OBJECT_STR:
		for (uint32_t i = 0; i < o->via.str.size; i++)
			sum += (uint8_t)o->via.str.ptr[i];
		break;
	case MSGPACK_OBJECT_BIN:
		for (uint32_t i = 0; i < o->via.bin.size; i++)
			sum += (uint8_t)o->via.bin.ptr[i];
		break;
	case MSGPACK_OBJECT_EXT:
		for (uint32_t i = 0; i < o->via.ext.size; i++)
			sum += (uint8_t)o->via.ext.ptr[i];
		break;
	case MSGPACK_OBJECT_ARRAY:
		for (uint32_t i = 0; i < o->via.array.size; i++)
			sum += walk(&o->via.array.ptr[i]);
		break;
	case MSGPACK_OBJECT_MAP:
		for (uint32_t i = 0; i < o->via.map.size; i++)
			sum += walk(&o->via.map.ptr[i].key) + walk(&o->via.map.ptr[i].val);
		break;
	default:
		sum += o->via.u64;
		break;
	}
	return sum;
}

/* The payload map converts to JSON, and that JSON packs and parses back to
 * an equal document. */
static void check_payload(const struct sb_event *ev)
{
	msgpack_zone zone;
	msgpack_object map, map2;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	json_t *j, *j2;
	volatile uint64_t sink;

	CHECK(msgpack_zone_init(&zone, 1024));
	if (sb_payload_parse(ev->payload, ev->payload_len, &zone, &map)) {
		msgpack_zone_destroy(&zone);
		return;
	}
	CHECK(map.type == MSGPACK_OBJECT_MAP);
	sink = walk(&map);
	(void)sink;
	j = sb_msgpack_to_json(&map);
	CHECK(j);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	CHECK(sb_json_to_msgpack(j, &pk) == SB_OK);
	CHECK(sb_payload_parse(sb.data, sb.size, &zone, &map2) == SB_OK);
	j2 = sb_msgpack_to_json(&map2);
	CHECK(j2 && json_equal(j, j2));
	json_decref(j2);
	json_decref(j);
	msgpack_sbuffer_destroy(&sb);
	msgpack_zone_destroy(&zone);
}

static void check(const uint8_t *buf, size_t len)
{
	struct sb_event ev, back;
	msgpack_sbuffer sb;

	if (sb_record_decode(buf, len, &ev) != SB_OK)
		return;
	CHECK(ev.payload > buf && ev.payload + ev.payload_len == buf + len - 8);
	CHECK(ev.payload_len > 0);
	CHECK(strlen(ev.type) > 0 && strlen(ev.type) < SB_TYPE_MAX);
	CHECK(strlen(ev.run) > 0 && strlen(ev.run) < SB_RUN_MAX);
	CHECK((unsigned)ev.source <= SB_SRC_LAST);

	msgpack_sbuffer_init(&sb);
	CHECK(sb_record_encode(&ev, &sb) == SB_OK);
	CHECK(sb_record_decode(sb.data, sb.size, &back) == SB_OK);
	CHECK(back.offset == ev.offset && back.seq == ev.seq && back.ts_ns == ev.ts_ns);
	CHECK(back.source == ev.source && !strcmp(back.type, ev.type) && !strcmp(back.run, ev.run));
	CHECK(back.payload_len == ev.payload_len && !memcmp(back.payload, ev.payload, ev.payload_len));
	msgpack_sbuffer_destroy(&sb);
	check_payload(&ev);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *copy;
	uint64_t h;

	check(data, size);
	if (size < 9)
		return 0;
	copy = malloc(size);
	CHECK(copy);
	memcpy(copy, data, size);
	h = XXH3_64bits(copy, size - 8);
	for (int i = 7; i >= 0; i--, h >>= 8)
		copy[size - 8 + i] = (uint8_t)h;
	check(copy, size);
	free(copy);
	return 0;
}
