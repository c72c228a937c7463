/* judge.c - a TLS connection judged segment by segment (see judge.h). */
#include "netpolicy/judge.h"

#include <stdio.h>
#include <string.h>

/* Offsets in the guest's stream at or past this are before its start. */
#define BEFORE (1u << 31)

void sb_judge_init(struct sb_judge *j)
{
	j->state = SB_JUDGE_NEW;
	j->name[0] = 0;
	j->isn = 0;
	j->nkept = j->judged = 0;
	sb_sniff_init(&j->sn);
}

void sb_judge_allow(struct sb_judge *j)
{
	j->state = SB_JUDGE_ALLOWED;
}

static int kill(struct sb_judge *j, const char *why)
{
	j->state = SB_JUDGE_KILLED;
	return sb_seterr(SB_ERR_DENIED, "%s", why);
}

#define REWRITE "a segment carries bytes other than those checked"

/* 1 when segment s, at stream offset o, carries bytes of [o, lim) other
 * than the ones kept there. */
static int rewrites(const struct sb_judge *j, const struct sb_judge_seg *s, uint32_t o,
		    size_t lim)
{
	size_t end = (size_t)o + s->len;

	return o < lim && memcmp(j->kept + o, s->data, (end < lim ? end : lim) - o);
}

/* Reads a guest segment's payload while the ClientHello is read. */
static int reading(struct sb_judge *j, const struct sb_judge_seg *s, uint32_t o)
{
	size_t end = (size_t)o + s->len, room, pass = 0;
	int rc;

	if (o > j->nkept)
		return SB_JUDGE_DROP; /* a gap: the guest sends again */
	if (rewrites(j, s, o, j->nkept))
		return kill(j, REWRITE);
	if (end <= j->nkept)
		return SB_JUDGE_DROP; /* the copy that waits goes on */
	room = sizeof j->kept - j->nkept;
	if (end - j->nkept < room)
		room = end - j->nkept;
	memcpy(j->kept + j->nkept, s->data + (j->nkept - o), room);
	j->nkept += room;
	if (j->kept[0] != 0x16)
		return kill(j, "not TLS: the port is one of TLS");
	rc = sb_sniff_feed(&j->sn, j->kept, j->nkept, &pass, j->name, sizeof j->name);
	switch (rc) {
	case SB_SNIFF_MORE:
		return s->flags & SB_TCP_FIN ? kill(j, "closed before naming its server")
					     : SB_JUDGE_HOLD;
	case SB_SNIFF_NAME:
		j->judged = pass;
		j->state = SB_JUDGE_KILLED; /* until sb_judge_allow */
		return SB_JUDGE_NAME;
	case SB_SNIFF_BAD: {
		char why[256]; /* sb_errmsg's buffer is the one kill writes */

		snprintf(why, sizeof why, "%s", sb_errmsg(SB_SNIFF_BAD));
		return kill(j, why);
	}
	default: return kill(j, "not TLS: the port is one of TLS");
	}
}

static int from_guest(struct sb_judge *j, const struct sb_judge_seg *s)
{
	uint32_t o;

	if (j->state == SB_JUDGE_NEW) {
		if ((s->flags & (SB_TCP_SYN | SB_TCP_ACK | SB_TCP_RST)) != SB_TCP_SYN)
			return kill(j, "a segment before the connection's SYN");
		if (s->len)
			return kill(j, "data on a SYN");
		j->isn = s->seq;
		j->state = SB_JUDGE_READING;
		return SB_JUDGE_ACCEPT;
	}
	if (s->flags & SB_TCP_RST)
		return s->len ? kill(j, "data on an RST") : SB_JUDGE_ACCEPT;
	if (s->flags & SB_TCP_SYN)
		return s->seq == j->isn && !s->len ? SB_JUDGE_ACCEPT
						   : kill(j, "a second SYN");
	if (s->flags & SB_TCP_URG)
		return kill(j, "urgent data");
	if (!s->len)
		return j->state == SB_JUDGE_READING && (s->flags & SB_TCP_FIN)
			   ? kill(j, "closed before naming its server")
			   : SB_JUDGE_ACCEPT;
	if ((o = s->seq - j->isn - 1) >= BEFORE)
		return kill(j, "data before the stream's start");
	if (j->state == SB_JUDGE_READING)
		return reading(j, s, o);
	/* allowed: the ClientHello's bytes again must be the same */
	return rewrites(j, s, o, j->judged) ? kill(j, REWRITE) : SB_JUDGE_ACCEPT;
}

static int from_server(struct sb_judge *j, const struct sb_judge_seg *s)
{
	uint32_t a = s->ack - j->isn - 1;

	if (j->state == SB_JUDGE_NEW)
		return kill(j, "a segment before the connection's SYN");
	if (j->state == SB_JUDGE_ALLOWED &&
	    (s->flags & (SB_TCP_ACK | SB_TCP_RST)) == SB_TCP_ACK && a < BEFORE &&
	    a >= j->judged) {
		j->state = SB_JUDGE_PASSED;
		return SB_JUDGE_PASS;
	}
	return SB_JUDGE_ACCEPT;
}

int sb_judge_seg(struct sb_judge *j, const struct sb_judge_seg *s)
{
	if (j->state == SB_JUDGE_KILLED)
		return sb_seterr(SB_ERR_DENIED, "the connection was refused");
	if (j->state == SB_JUDGE_PASSED)
		return SB_JUDGE_ACCEPT;
	return s->from_guest ? from_guest(j, s) : from_server(j, s);
}
