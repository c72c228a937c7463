/* sink.c - where the server's messages go besides its answers: holding a
 * sink, the notify sink a server's notifications go to (replaced while
 * they are sent), and a call's progress. The server (mcp/server.c), the
 * subscriptions (mcp/resources.c) and the tools (mcp/tools*.c) use it;
 * it uses none of them. */
#include "mcp/jsonrpc.h"
#include "mcp/mcp.h"

void sb_mcp_sink_hold(struct sb_mcp_sink *k)
{
	if (k && k->hold)
		k->hold(k);
}

void sb_mcp_sink_release(struct sb_mcp_sink *k)
{
	if (k && k->release)
		k->release(k);
}

void sb_mcp_notify_init(struct sb_mcp_notify *n, struct sb_mcp_sink *sink)
{
	pthread_mutex_init(&n->mu, NULL);
	n->sink = sink;
	sb_mcp_sink_hold(sink);
}

void sb_mcp_notify_free(struct sb_mcp_notify *n)
{
	sb_mcp_sink_release(n->sink);
	pthread_mutex_destroy(&n->mu);
}

void sb_mcp_notify_set(struct sb_mcp_notify *n, struct sb_mcp_sink *sink)
{
	struct sb_mcp_sink *old;

	sb_mcp_sink_hold(sink);
	pthread_mutex_lock(&n->mu);
	old = n->sink;
	n->sink = sink;
	pthread_mutex_unlock(&n->mu);
	sb_mcp_sink_release(old);
}

void sb_mcp_notify_send(struct sb_mcp_notify *n, json_t *msg)
{
	struct sb_mcp_sink *k;

	pthread_mutex_lock(&n->mu);
	if ((k = n->sink))
		sb_mcp_sink_hold(k);
	pthread_mutex_unlock(&n->mu);
	if (!k)
		return json_decref(msg);
	k->send(k, msg);
	sb_mcp_sink_release(k);
}

void sb_mcp_progress(struct sb_mcp_call *call, double progress, double total, const char *msg)
{
	json_t *p;

	if (!call->token || (call->sent && progress <= call->progress))
		return;
	call->progress = progress;
	call->sent = 1;
	p = json_pack("{s:O, s:f}", "progressToken", call->token, "progress", progress);
	if (p && total > 0)
		json_object_set_new(p, "total", json_real(total));
	if (p && msg)
		json_object_set_new(p, "message", json_string(msg));
	call->sink->send(call->sink, sb_mcp_notification_new("notifications/progress", p));
}
