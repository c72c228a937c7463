/* fuzz_sniff.c - libFuzzer target for sb_sniff_feed, which reads a guest
 * connection's bytes before any of them is forwarded.
 *
 * The input is the client's stream. It is given to the parser as the proxy
 * gives it: the bytes held (SB_SNIFF_HOLD at most, kept at the end of a heap
 * block so that a read past n is caught), those the answer passes dropped,
 * more added after SB_SNIFF_MORE. Twice: in pieces whose sizes come from a
 * generator seeded by the input, and in pieces as large as the hold allows;
 * a third time as the first, but with a body's bytes given to nobody, as
 * the proxy splices them (sb_sniff_unread, sb_sniff_skip) when none are
 * held.
 * Every answer keeps the contract (*pass within the held bytes, > 0 for
 * NAME and PASS and 0 otherwise; a NAME in lower case, terminated, nothing
 * written past name_cap; never MORE with the hold full), and all feedings
 * see the same requests: the same names at the same places, the same end.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "netpolicy/netpolicy.h"
#include "netpolicy/sniff.h"

#include "tests/fuzz/fuzz.h"

#define NAMES 64 /* requests compared per input */

/* What one feeding saw. */
struct seen {
	size_t at[NAMES], len[NAMES]; /* each NAME's place in the stream */
	char name[NAMES][SB_NET_HOST_MAX];
	size_t names;
	int last; /* the answer that ended it */
};

static void name_check(const char *name, size_t cap)
{
	size_t len = strnlen(name, cap);

	CHECK(len < cap);
	for (size_t i = 0; i < len; i++)
		CHECK((name[i] >= 'a' && name[i] <= 'z') ||
		      (name[i] >= '0' && name[i] <= '9') || strchr("-._:", name[i]));
	CHECK(len == 0 || name[len - 1] != '.');
}

/* Feeds data in pieces of step bytes, or of sizes drawn from rng when step
 * is 0; with skip, a body's bytes are skipped unread when none are held. */
static void feed(const uint8_t *data, size_t size, size_t step, uint64_t rng, int skip,
		 struct seen *out)
{
	uint8_t *hold = malloc(SB_SNIFF_HOLD);
	char name[SB_NET_HOST_MAX + 16];
	size_t held = 0, read = 0, sent = 0, pass, k;
	uint64_t unread;
	struct sb_sniff s;
	int rc;

	CHECK(hold);
	memset(out, 0, sizeof *out);
	sb_sniff_init(&s);
	for (;;) {
		memset(name, 0xa5, sizeof name);
		rc = sb_sniff_feed(&s, hold + SB_SNIFF_HOLD - held, held, &pass, name,
				   SB_NET_HOST_MAX);
		for (size_t i = SB_NET_HOST_MAX; i < sizeof name; i++)
			CHECK((uint8_t)name[i] == 0xa5);
		if (rc == SB_SNIFF_NAME || rc == SB_SNIFF_PASS) {
			CHECK(pass > 0 && pass <= held);
			if (rc == SB_SNIFF_NAME) {
				name_check(name, SB_NET_HOST_MAX);
				if (out->names < NAMES) {
					out->at[out->names] = sent;
					out->len[out->names] = pass;
					strcpy(out->name[out->names], name);
				}
				out->names++;
			}
			held -= pass;
			sent += pass;
			continue;
		}
		CHECK(pass == 0);
		CHECK(rc == SB_SNIFF_MORE || rc == SB_SNIFF_OPAQUE || rc == SB_SNIFF_BAD);
		CHECK(rc != SB_SNIFF_MORE || held < SB_SNIFF_HOLD);
		if (rc != SB_SNIFF_MORE || read == size)
			break;
		if (step) {
			k = step;
		} else {
			rng ^= rng >> 12;
			rng ^= rng << 25;
			rng ^= rng >> 27;
			k = rng % 4 ? 1 + (rng >> 32) % 16 : 1 + (rng >> 32) % 2048;
		}
		if (k > size - read)
			k = size - read;
		if (skip && !held && (unread = sb_sniff_unread(&s)) > 0) {
			if (k > unread)
				k = (size_t)unread;
			sb_sniff_skip(&s, k);
			CHECK(sb_sniff_unread(&s) == unread - k);
			read += k;
			sent += k;
			continue;
		}
		if (k > SB_SNIFF_HOLD - held)
			k = SB_SNIFF_HOLD - held;
		memmove(hold + SB_SNIFF_HOLD - held - k, hold + SB_SNIFF_HOLD - held,
			held);
		memcpy(hold + SB_SNIFF_HOLD - k, data + read, k);
		held += k;
		read += k;
	}
	out->last = rc;
	free(hold);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct seen a, b, c;
	uint64_t rng = 0x9e3779b97f4a7c15ull;

	for (size_t i = 0; i < size; i++)
		rng = (rng ^ data[i]) * 0x100000001b3ull;
	feed(data, size, 0, rng | 1, 0, &a);
	feed(data, size, SB_SNIFF_HOLD, 0, 0, &b);
	feed(data, size, 0, rng | 1, 1, &c);
	CHECK(a.last == b.last && a.last == c.last);
	CHECK(a.names == b.names && a.names == c.names);
	for (size_t i = 0; i < a.names && i < NAMES; i++)
		CHECK(a.at[i] == b.at[i] && a.len[i] == b.len[i] &&
		      !strcmp(a.name[i], b.name[i]) && a.at[i] == c.at[i] &&
		      a.len[i] == c.len[i] && !strcmp(a.name[i], c.name[i]));
	return 0;
}
