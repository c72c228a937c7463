/* fuzz_judge_http.c - libFuzzer target for the judge (netpolicy/judge.h)
 * of an HTTP connection, which lets a guest's segments reach a server
 * only once every request in them names a granted host.
 *
 * The input is a hostile guest and a lossy network: after a SYN (its
 * sequence number from the input's first 4 bytes), 6-byte operations,
 * each one of: a guest segment of the stream [off, off + len) (the stream:
 * requests naming a.test, with Content-Length and chunked bodies), with
 * one byte changed and flags of the input's choosing; the network losing
 * the next segment let through. Segments the judge holds go when the
 * request they wait for is granted, in order; a request naming any host
 * but a.test ends the connection, as the enforcer does. The server keeps
 * a byte once all bytes before it came (it has read it); until then a
 * later copy replaces an earlier one, as a TCP receiver's out-of-order
 * queue may.
 * The property: the server's own parse of what it read (sniff.h, as an
 * HTTP server reads requests) finds no request naming a host but a.test.
 */
#include <stdint.h>
#include <string.h>

#include "netpolicy/judge.h"
#include "tests/fuzz/fuzz.h"

#define STREAM 4096
#define HELD   16

static const char requests[] =
    "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"
    "POST /p HTTP/1.1\r\nHost: a.test\r\nContent-Length: 40\r\n\r\n"
    "GET / HTTP/1.1\r\nHost: b.test\r\n\r\nxxxxxxxx"
    "POST /c HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n"
    "1a\r\nGET / HTTP/1.1\r\nHost: b.t\r\n0\r\n\r\n"
    "GET / HTTP/1.1\r\nHost: b.test\r\n\r\n";
static uint8_t stream[STREAM];

struct server {
	uint8_t have[STREAM], bytes[STREAM];
	size_t read; /* bytes it has in order */
};

static void deliver(struct server *s, uint32_t o, const uint8_t *d, size_t n)
{
	for (size_t i = 0; i < n && o + i < STREAM; i++)
		if (o + i >= s->read) {
			s->have[o + i] = 1;
			s->bytes[o + i] = d[i];
		}
	while (s->read < STREAM && s->have[s->read])
		s->read++;
}

/* The server's parse of what it read: 1 when a request names a host but
 * a.test. */
static int server_fronted(const struct server *s)
{
	static struct sb_sniff sn;
	char name[SB_NET_HOST_MAX];
	size_t pos = 0, pass, n;
	uint64_t u;

	sb_sniff_init(&sn);
	while (pos < s->read) {
		if ((u = sb_sniff_unread(&sn))) {
			n = s->read - pos < u ? s->read - pos : (size_t)u;
			sb_sniff_skip(&sn, n);
			pos += n;
			continue;
		}
		n = s->read - pos < SB_SNIFF_HOLD ? s->read - pos : SB_SNIFF_HOLD;
		switch (sb_sniff_feed(&sn, s->bytes + pos, n, &pass, name, sizeof name)) {
		case SB_SNIFF_NAME:
			if (strcmp(name, "a.test"))
				return 1;
			/* fall through */
		case SB_SNIFF_PASS: pos += pass; break;
		default: return 0; /* more to come, or what it refuses */
		}
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct sb_judge j;
	static struct server srv;
	static uint8_t seg[STREAM], held[HELD][STREAM];
	uint32_t held_off[HELD], isn;
	size_t held_len[HELD], nheld = 0;
	struct sb_judge_seg s;
	int lose = 0, rc;

	if (!stream[0])
		for (size_t i = 0; i < STREAM; i++)
			stream[i] = (uint8_t)requests[i % (sizeof requests - 1)];
	if (size < 4)
		return 0;
	memcpy(&isn, data, 4);
	memset(&srv, 0, sizeof srv);
	sb_judge_init(&j, 1);
	s = (struct sb_judge_seg){1, isn, 0, SB_TCP_SYN, NULL, 0};
	CHECK(sb_judge_seg(&j, &s) == SB_JUDGE_ACCEPT);
	for (size_t p = 4; p + 6 <= size; p += 6) {
		const uint8_t *op = data + p;
		uint32_t off = (uint32_t)(op[1] << 8 | op[2]) % STREAM;
		size_t len = op[3] * 8u % 1500;

		if ((op[0] & 3) == 3) {
			lose = 1;
			continue;
		}
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
		while (rc == SB_JUDGE_NAME) {
			if (strcmp(j.name, "a.test"))
				return 0; /* refused: the connection ends */
			for (size_t h = 0; h < nheld; h++)
				deliver(&srv, held_off[h], held[h], held_len[h]);
			nheld = 0;
			rc = sb_judge_allow(&j, &s);
		}
		switch (rc) {
		case SB_JUDGE_HOLD:
			CHECK(nheld < HELD);
			memcpy(held[nheld], seg, len);
			held_off[nheld] = off;
			held_len[nheld++] = len;
			break;
		case SB_JUDGE_ACCEPT:
		case SB_JUDGE_AWAIT:
			if (s.len && lose)
				lose = 0; /* lost on the way */
			else if (s.len)
				deliver(&srv, off, seg, len);
			break;
		case SB_JUDGE_DROP: break;
		default: CHECK(rc == SB_JUDGE_KILL); return 0;
		}
		CHECK(!server_fronted(&srv)); /* the property */
		if (rc == SB_JUDGE_AWAIT || nheld == HELD)
			return 0; /* the answer is not modelled; the enforcer
				   * refuses one in more pieces */
	}
	return 0;
}
