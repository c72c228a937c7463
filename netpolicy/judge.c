/* judge.c - a connection judged segment by segment (see judge.h). */
#include "netpolicy/judge.h"

#include <stdio.h>
#include <string.h>

/* Offsets in the guest's stream at or past this are before its start. */
#define BEFORE (1u << 31)

void sb_judge_init(struct sb_judge *j, int http)
{
	j->state = SB_JUDGE_NEW;
	j->name[0] = 0;
	j->requests = 0;
	j->http = http;
	j->isn = 0;
	j->nkept = j->judged = 0;
	j->front = j->floor = 0;
	j->fence = UINT64_MAX;
	j->at = j->answer_got = j->nanswer = 0;
	j->answer_seq = 0;
	j->nranges = j->nprot = 0;
	sb_sniff_init(&j->sn);
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

/* HTTP: keeps the framing bytes b[0..n) at stream offset off, checked
 * from now on, dropping the oldest kept ones when there is no room. */
static void protect(struct sb_judge *j, uint64_t off, const uint8_t *b, size_t n)
{
	struct sb_judge_range *last = j->nranges ? &j->ranges[j->nranges - 1] : NULL;

	if (!n)
		return;
	while (j->nranges &&
	       (j->nranges == SB_JUDGE_PROTECTED || j->nprot + n > sizeof j->prot)) {
		size_t gone = j->ranges[0].len;
		j->floor = j->ranges[0].off + gone;
		memmove(j->prot, j->prot + gone, j->nprot - gone);
		j->nprot -= gone;
		memmove(j->ranges, j->ranges + 1, --j->nranges * sizeof *j->ranges);
		for (size_t i = 0; i < j->nranges; i++)
			j->ranges[i].at -= gone;
		last = j->nranges ? &j->ranges[j->nranges - 1] : NULL;
	}
	memcpy(j->prot + j->nprot, b, n);
	if (last && last->off + last->len == off) {
		last->len += n; /* one range with the one before it */
	} else {
		j->ranges[j->nranges++] = (struct sb_judge_range){off, n, j->nprot};
	}
	j->nprot += n;
}

/* HTTP: 1 when d[0..n), at stream offset off (all of it read before),
 * differs from the checked bytes there, or reaches below floor. */
static int http_rewrites(const struct sb_judge *j, uint64_t off, const uint8_t *d,
			 size_t n)
{
	uint64_t end = off + n, kept = j->front - j->nkept;

	if (off < j->floor)
		return 1;
	for (size_t i = 0; i < j->nranges; i++) {
		const struct sb_judge_range *r = &j->ranges[i];
		uint64_t a = off > r->off ? off : r->off;
		uint64_t b = end < r->off + r->len ? end : r->off + r->len;
		if (a < b && memcmp(j->prot + r->at + (a - r->off), d + (a - off), b - a))
			return 1;
	}
	if (end > kept) {
		uint64_t a = off > kept ? off : kept;
		return memcmp(j->kept + (a - kept), d + (a - off), end - a) != 0;
	}
	return 0;
}

/* HTTP: drops k bytes from the front of kept. */
static void unkeep(struct sb_judge *j, size_t k)
{
	memmove(j->kept, j->kept + k, j->nkept - k);
	j->nkept -= k;
}

/* HTTP: reads segment s from its byte j->at on. */
static int http_read(struct sb_judge *j, const struct sb_judge_seg *s)
{
	size_t pass, k;
	uint64_t u;
	int rc;

	for (;;) {
		if ((u = sb_sniff_unread(&j->sn)) && j->nkept) { /* body, held */
			k = u < j->nkept ? (size_t)u : j->nkept;
			sb_sniff_skip(&j->sn, k);
			unkeep(j, k);
			continue;
		}
		if (u && j->at < s->len) { /* body, in the segment: not read */
			k = s->len - j->at < u ? s->len - j->at : (size_t)u;
			sb_sniff_skip(&j->sn, k);
			j->front += k;
			j->at += k;
			continue;
		}
		k = sizeof j->kept - j->nkept;
		if (s->len - j->at < k)
			k = s->len - j->at;
		memcpy(j->kept + j->nkept, s->data + j->at, k);
		j->nkept += k;
		j->front += k;
		j->at += k;
		if (!j->requests && !j->nranges && j->nkept && j->kept[0] == 0x16)
			return kill(j, "TLS: the port is one of HTTP");
		rc = sb_sniff_feed(&j->sn, j->kept, j->nkept, &pass, j->name,
				   sizeof j->name);
		switch (rc) {
		case SB_SNIFF_MORE:
			if (j->nkept && (s->flags & SB_TCP_FIN))
				return kill(j, "closed in the middle of a request");
			return j->nkept ? SB_JUDGE_HOLD : SB_JUDGE_ACCEPT;
		case SB_SNIFF_PASS:
			protect(j, j->front - j->nkept, j->kept, pass);
			unkeep(j, pass);
			break;
		case SB_SNIFF_NAME:
			protect(j, j->front - j->nkept, j->kept, pass);
			unkeep(j, pass);
			j->state = SB_JUDGE_KILLED; /* until sb_judge_allow */
			return SB_JUDGE_NAME;
		case SB_SNIFF_OPAQUE: /* the request before asked for an Upgrade */
			if (j->requests > 1)
				return kill(j, "an Upgrade after other requests on its "
					       "connection");
			if (j->nkept || j->at < s->len)
				return kill(j,
					    "bytes after an Upgrade before its answer");
			j->state = SB_JUDGE_ANSWER;
			j->answer_seq = s->ack;
			return SB_JUDGE_AWAIT;
		default: {
			char why[256]; /* sb_errmsg's buffer is the one kill writes */

			snprintf(why, sizeof why, "%s", sb_errmsg(SB_SNIFF_BAD));
			return kill(j, why);
		}
		}
	}
}

/* HTTP: a guest segment with data, or FIN. */
static int http_guest(struct sb_judge *j, const struct sb_judge_seg *s)
{
	uint32_t seq_front = j->isn + 1 + (uint32_t)j->front;
	int32_t d = (int32_t)(s->seq - seq_front);
	uint64_t off, end;

	if (!s->len) {
		if ((s->flags & SB_TCP_FIN) && j->nkept)
			return kill(j, "closed in the middle of a request");
		return SB_JUDGE_ACCEPT;
	}
	if (d > 0 && !j->nkept && j->state == SB_JUDGE_READING &&
	    (uint64_t)d <= sb_sniff_unread(&j->sn)) {
		sb_sniff_skip(&j->sn, (uint64_t)d); /* body: any bytes will do */
		j->front += (uint64_t)d;
		d = 0;
	}
	if (d > 0)
		return SB_JUDGE_DROP; /* a gap: the guest sends again */
	if ((uint64_t) - (int64_t)d > j->front)
		return kill(j, "data before the stream's start");
	off = j->front - (uint64_t) - (int64_t)d;
	end = off + s->len;
	if (http_rewrites(j, off, s->data, end < j->front ? s->len : j->front - off))
		return kill(j, off < j->floor ? "a segment carries again bytes too old "
						"to check"
					      : REWRITE);
	if (end <= j->front) /* old bytes: the held copy goes on, or these */
		return end > j->front - j->nkept ? SB_JUDGE_DROP : SB_JUDGE_ACCEPT;
	if (j->state == SB_JUDGE_ANSWER || end > j->fence)
		return SB_JUDGE_DROP; /* sent again once the answer came, or
				       * once the fence is gone */
	if (j->state == SB_JUDGE_DECLINED)
		return kill(j, "a request after a declined Upgrade");
	j->at = j->front - off;
	return http_read(j, s);
}

/* HTTP: reads the server's answer to an Upgrade in segment s. */
static int answer_read(struct sb_judge *j, const struct sb_judge_seg *s)
{
	int32_t d = (int32_t)(s->seq - (j->answer_seq + (uint32_t)j->answer_got));
	size_t k, skip = (size_t) - (int64_t)d;

	if (d > 0)
		return SB_JUDGE_DROP; /* a gap: the server sends again */
	if (skip >= s->len)
		return SB_JUDGE_ACCEPT;
	k = s->len - skip;
	if (k > sizeof j->answer - j->nanswer)
		k = sizeof j->answer - j->nanswer;
	memcpy(j->answer + j->nanswer, s->data + skip, k);
	j->nanswer += k;
	j->answer_got += k;
	while (j->nanswer >= 13) {
		const uint8_t *b = j->answer, *end;
		size_t gone;
		if (memcmp(b, "HTTP/1.", 7) || b[8] != ' ' || b[9] < '1' || b[9] > '5' ||
		    b[10] < '0' || b[10] > '9' || b[11] < '0' || b[11] > '9' ||
		    (b[12] != ' ' && b[12] != '\r')) {
			j->state = SB_JUDGE_DECLINED;
			return SB_JUDGE_ACCEPT;
		}
		if (!memcmp(b + 9, "101", 3)) {
			j->state = SB_JUDGE_PASSED;
			return SB_JUDGE_PASS;
		}
		if (b[9] != '1') {
			j->state = SB_JUDGE_DECLINED;
			return SB_JUDGE_ACCEPT;
		}
		if (!(end = memmem(b, j->nanswer, "\r\n\r\n", 4)))
			break; /* an interim answer goes on */
		gone = (size_t)(end + 4 - b);
		memmove(j->answer, j->answer + gone, j->nanswer - gone);
		j->nanswer -= gone;
	}
	if (j->nanswer == sizeof j->answer)
		j->state = SB_JUDGE_DECLINED; /* no status line in all that */
	return SB_JUDGE_ACCEPT;
}

/* HTTP: a server segment while an Upgrade awaits its answer: its status
 * line, after any interim (1xx) answers. A server that ends before it
 * declined. */
static int http_answer(struct sb_judge *j, const struct sb_judge_seg *s)
{
	int rc = SB_JUDGE_ACCEPT;

	if (j->state != SB_JUDGE_ANSWER)
		return SB_JUDGE_ACCEPT;
	if (s->len && !(s->flags & SB_TCP_RST))
		rc = answer_read(j, s);
	if (j->state == SB_JUDGE_ANSWER && (s->flags & (SB_TCP_FIN | SB_TCP_RST)) &&
	    rc != SB_JUDGE_DROP)
		j->state = SB_JUDGE_DECLINED;
	return rc;
}

/* TLS: a guest segment with data. */
static int tls_guest(struct sb_judge *j, const struct sb_judge_seg *s)
{
	uint32_t o;

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

static int from_guest(struct sb_judge *j, const struct sb_judge_seg *s)
{
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
	return j->http ? http_guest(j, s) : tls_guest(j, s);
}

static int from_server(struct sb_judge *j, const struct sb_judge_seg *s)
{
	uint32_t a = s->ack - j->isn - 1;

	if (j->state == SB_JUDGE_NEW)
		return kill(j, "a segment before the connection's SYN");
	if (j->http)
		return http_answer(j, s);
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

int sb_judge_allow(struct sb_judge *j, const struct sb_judge_seg *s)
{
	if (!j->http) {
		j->state = SB_JUDGE_ALLOWED;
		return SB_JUDGE_ACCEPT;
	}
	j->state = SB_JUDGE_READING;
	j->requests++;
	return http_read(j, s);
}

int sb_judge_body(const struct sb_judge *j, uint32_t *seq, uint64_t *len)
{
	if (!j->http || j->state != SB_JUDGE_READING || j->nkept ||
	    !(*len = sb_sniff_unread(&j->sn)))
		return 0;
	*seq = j->isn + 1 + (uint32_t)j->front;
	return 1;
}

void sb_judge_fence(struct sb_judge *j, int on)
{
	j->fence = on ? j->front + (1ull << 31) : UINT64_MAX;
}
