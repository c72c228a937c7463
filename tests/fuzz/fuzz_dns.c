/* fuzz_dns.c - libFuzzer target for sb_dns_parse_query, which reads every
 * message a guest sends to its DNS stub.
 *
 * An input that parses must give a name in presentation form (lower case,
 * only letters, digits, '-', '_', '.' and escapes) and an answer (two
 * records, within the query's UDP size) whose header carries the query's
 * id, QR 1 and one question, whose question is the query's bytes, and
 * which is itself refused as a query; under a smaller limit, TC and no
 * answer. An input that does not parse gets a
 * FORMERR answer only when it has a query's header.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "netpolicy/dns.h"

#include "tests/fuzz/fuzz.h"

/* Checks that name is in presentation form. */
static void check_name(const char *name)
{
	for (const char *c = name; *c; c++) {
		if (*c == '\\') {
			CHECK(c[1] == '.' || c[1] == '\\' ||
			      (c[1] >= '0' && c[1] <= '2' && c[2] >= '0' && c[2] <= '9' &&
			       c[3] >= '0' && c[3] <= '9'));
			c += c[1] == '.' || c[1] == '\\' ? 1 : 3;
			continue;
		}
		CHECK((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' ||
		      *c == '_' || *c == '.');
		CHECK(*c != '.' || (c > name && c[1] && c[1] != '.'));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct sb_dns_rr rrs[2] = {
	    {.type = SB_DNS_A, .ttl = 60, .addr = {10, 0, 0, 1}},
	    {.type = SB_DNS_AAAA, .ttl = 60, .addr = {0xfd, [15] = 1}},
	};
	struct sb_dns_query q, again;
	uint8_t out[1232];
	uint16_t id;
	size_t len, max;

	if (sb_dns_parse_query(data, size, &q) != SB_OK) {
		if (sb_dns_header_id(data, size, &id) == SB_OK) {
			CHECK(size >= 12 && !(data[2] & 0x80));
			CHECK(sb_dns_formerr(id, out, sizeof out) == 12);
			CHECK(sb_dns_parse_query(out, 12, &again) == SB_ERR_PROTO);
		}
		return 0;
	}
	CHECK(size >= 12 + q.question_len);
	check_name(q.name);
	CHECK(sb_dns_name_match(q.name, q.name) == !strchr(q.name, '\\'));
	max = q.udp_size < 1232 ? q.udp_size : 1232;
	len = sb_dns_answer(&q, data, SB_DNS_NOERROR, rrs, 2, max, out, sizeof out);
	CHECK(len >= 12 + q.question_len && len <= max);
	CHECK(out[0] == data[0] && out[1] == data[1]);
	CHECK((out[2] & 0x80) && out[4] == 0 && out[5] == 1);
	CHECK(out[7] == ((out[2] & 0x02) ? 0 : 2));
	CHECK(out[11] == (q.edns ? 1 : 0));
	CHECK(!memcmp(out + 12, data + 12, q.question_len));
	CHECK(sb_dns_parse_query(out, len, &again) == SB_ERR_PROTO);
	CHECK(sb_dns_header_id(out, len, &id) == SB_ERR_PROTO);
	/* a limit around the answer's size: both records or TC and none */
	max = 12 + q.question_len + (q.edns ? 11 : 0) + size % 64;
	len = sb_dns_answer(&q, data, SB_DNS_NOERROR, rrs, 2, max, out, sizeof out);
	CHECK(out[7] == ((out[2] & 0x02) ? 0 : 2));
	CHECK(len == max - size % 64 + (out[7] ? 16 + 28 : 0) && len <= max);
	return 0;
}
