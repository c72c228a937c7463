/* nfq.c - NFQUEUE through libnetfilter_queue (see nfq.h). */
#include "netpolicy/nfq.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define RCVBUF (8 << 20) /* the socket's receive buffer */

struct sb_nfq {
	struct nfq_handle *h;
	struct nfq_q_handle *qh;
	int fd;
	void (*fn)(void *ctx, const struct sb_nfq_pkt *p); /* during sb_nfq_read */
	void *ctx;
	uint8_t buf[256 * 1024]; /* a GSO packet of 64 KiB and its headers fit */
};

static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *m, struct nfq_data *d,
		     void *arg)
{
	sb_nfq *q = arg;
	struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(d);
	unsigned char *data;
	int n = nfq_get_payload(d, &data);
	struct sb_nfq_pkt p;

	(void)qh;
	(void)m;
	if (!ph)
		return 0;
	p.id = ntohl(ph->packet_id);
	p.indev = nfq_get_indev(d);
	p.data = data;
	p.len = n > 0 ? (size_t)n : 0;
	q->fn(q->ctx, &p);
	return 0;
}

int sb_nfq_open(uint16_t first, uint16_t count, uint32_t maxlen, sb_nfq **out,
		uint16_t *num)
{
	sb_nfq *q = calloc(1, sizeof *q);
	int sz = RCVBUF, rc;

	if (!q)
		return SB_ERR_NOMEM;
	if (!(q->h = nfq_open())) {
		rc = sb_seterr(SB_ERR_UNAVAIL, "NFQUEUE: %s", strerror(errno));
		goto fail;
	}
	for (uint16_t i = 0; i < count && !q->qh; i++) {
		q->qh = nfq_create_queue(q->h, (uint16_t)(first + i), on_packet, q);
		if (q->qh)
			*num = (uint16_t)(first + i);
	}
	if (!q->qh) {
		/* the kernel says EPERM for a number another socket holds */
		rc = sb_seterr(SB_ERR_EXISTS, "NFQUEUE: queues %u to %u are all taken",
			       first, first + count - 1);
		goto fail;
	}
	if (nfq_set_mode(q->qh, NFQNL_COPY_PACKET, 0xffff) < 0 ||
	    nfq_set_queue_maxlen(q->qh, maxlen) < 0 ||
	    nfq_set_queue_flags(q->qh, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO) < 0) {
		rc = sb_seterr(SB_ERR_UNAVAIL, "NFQUEUE: cannot set the queue up: %s",
			       strerror(errno));
		goto fail;
	}
	q->fd = nfq_fd(q->h);
	setsockopt(q->fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof sz);
	fcntl(q->fd, F_SETFL, fcntl(q->fd, F_GETFL) | O_NONBLOCK);
	*out = q;
	return SB_OK;
fail:
	sb_nfq_close(q);
	return rc;
}

void sb_nfq_close(sb_nfq *q)
{
	if (!q)
		return;
	if (q->qh)
		nfq_destroy_queue(q->qh);
	if (q->h)
		nfq_close(q->h);
	free(q);
}

int sb_nfq_fd(const sb_nfq *q)
{
	return q->fd;
}

int sb_nfq_read(sb_nfq *q, void (*fn)(void *ctx, const struct sb_nfq_pkt *p), void *ctx)
{
	ssize_t n;

	q->fn = fn;
	q->ctx = ctx;
	while ((n = recv(q->fd, q->buf, sizeof q->buf, 0)) > 0)
		nfq_handle_packet(q->h, (char *)q->buf, (int)n);
	if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
		return sb_seterr(SB_ERR_IO, "NFQUEUE: %s", strerror(errno));
	return SB_OK;
}

int sb_nfq_verdict(sb_nfq *q, uint32_t id, enum sb_nfq_verdict v, uint32_t mark)
{
	int rc = v == SB_NFQ_REPEAT
		     ? nfq_set_verdict2(q->qh, id, NF_REPEAT, mark, 0, NULL)
		     : nfq_set_verdict(q->qh, id,
				       v == SB_NFQ_ACCEPT ? NF_ACCEPT : NF_DROP, 0, NULL);

	return rc < 0 ? sb_seterr(SB_ERR_IO, "NFQUEUE verdict: %s", strerror(errno))
		      : SB_OK;
}
