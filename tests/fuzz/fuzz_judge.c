/* fuzz_judge.c - libFuzzer target for the judge (netpolicy/judge.h), which
 * decides which of a guest's TCP segments reach a server while a TLS
 * connection's ClientHello is read.
 *
 * The input is a hostile guest and a lossy network: after a SYN (its
 * sequence number from the input's first 4 bytes), 6-byte operations,
 * each one of: a guest segment of the stream [off, off + len) (the stream:
 * a ClientHello naming a.test, then other bytes), with one byte changed
 * and with flags of the input's choosing; the server acknowledging what
 * it has in order, truthfully; the network losing the next segment let
 * through. Segments the judge holds go when it names the server, in
 * order; a name other than a.test ends the connection, as the enforcer
 * does. The server keeps the first copy of each byte, as TCP does.
 * The property: the server never has a byte of the judged ClientHello
 * other than the byte the judge read there, and has no byte at all
 * before the judge allowed the name.
 */
#include <stdint.h>
#include <string.h>

#include "netpolicy/judge.h"
#include "tests/fuzz/fuzz.h"
#include "tests/unit/tlshello.h"

#define STREAM 2048
#define HELD   16

static uint8_t stream[STREAM];
static size_t nhello;

struct server {
	uint8_t have[STREAM * 2], bytes[STREAM * 2];
};

static size_t prefix(const struct server *s)
{
	size_t n = 0;

	while (n < sizeof s->have && s->have[n])
		n++;
	return n;
}

static void deliver(struct server *s, uint32_t o, const uint8_t *d, size_t n)
{
	for (size_t i = 0; i < n && o + i < sizeof s->have; i++)
		if (!s->have[o + i]) {
			s->have[o + i] = 1;
			s->bytes[o + i] = d[i];
		}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct sb_judge j;
	static struct server srv;
	static uint8_t seg[STREAM], held[HELD][STREAM];
	uint32_t held_off[HELD], isn;
	size_t held_len[HELD], nheld = 0;
	struct sb_judge_seg s;
	int lose = 0, rc, allowed = 0;

	if (!nhello) {
		uint8_t e[1024], pad[600] = {0};
		size_t n = sni(e, "a.test");
		n += ext(e + n, 21, pad, sizeof pad);
		nhello = hello(stream, e, n);
		for (size_t i = nhello; i < STREAM; i++)
			stream[i] = (uint8_t)(i * 7);
	}
	if (size < 4)
		return 0;
	memcpy(&isn, data, 4);
	memset(&srv, 0, sizeof srv);
	sb_judge_init(&j, 0);
	s = (struct sb_judge_seg){1, isn, 0, SB_TCP_SYN, NULL, 0};
	CHECK(sb_judge_seg(&j, &s) == SB_JUDGE_ACCEPT);
	for (size_t p = 4; p + 6 <= size; p += 6) {
		const uint8_t *op = data + p;
		uint32_t off = (uint32_t)(op[1] << 8 | op[2]) % STREAM;
		size_t len = op[3] * 8u % 1500;

		if ((op[0] & 3) == 2) { /* the server's ACK */
			s = (struct sb_judge_seg){
			    0, 0, isn + 1 + (uint32_t)prefix(&srv), SB_TCP_ACK, NULL, 0};
			rc = sb_judge_seg(&j, &s);
		} else if ((op[0] & 3) == 3) {
			lose = 1;
			continue;
		} else {
			if (off + len > STREAM)
				len = STREAM - off;
			memcpy(seg, stream + off, len);
			if (len && op[5])
				seg[op[4] % len] ^= op[5];
			s = (struct sb_judge_seg){
			    1,	 isn + 1 + off,
			    0,	 (uint8_t)(SB_TCP_ACK | (op[0] & 4 ? op[0] & 0x27 : 0)),
			    seg, len};
			rc = sb_judge_seg(&j, &s);
		}
		switch (rc) {
		case SB_JUDGE_HOLD:
			CHECK(s.from_guest && nheld < HELD);
			memcpy(held[nheld], seg, len);
			held_off[nheld] = off;
			held_len[nheld++] = len;
			break;
		case SB_JUDGE_NAME:
			if (strcmp(j.name, "a.test"))
				return 0; /* refused: the connection ends */
			CHECK(sb_judge_allow(&j, &s) == SB_JUDGE_ACCEPT);
			allowed = 1;
			for (size_t h = 0; h < nheld; h++)
				deliver(&srv, held_off[h], held[h], held_len[h]);
			nheld = 0;
			/* fall through: this one goes too */
		case SB_JUDGE_ACCEPT:
		case SB_JUDGE_PASS:
			if (s.from_guest && s.len && lose)
				lose = 0; /* lost on the way */
			else if (s.from_guest && s.len)
				deliver(&srv, off, seg, len);
			break;
		case SB_JUDGE_DROP: break;
		default: CHECK(rc == SB_JUDGE_KILL); return 0;
		}
		/* the property */
		for (size_t i = 0; i < sizeof srv.have; i++) {
			if (!srv.have[i])
				continue;
			CHECK(allowed);
			CHECK(i >= j.judged || srv.bytes[i] == j.kept[i]);
		}
		if (nheld == HELD)
			return 0; /* the enforcer refuses one in more pieces */
	}
	return 0;
}
