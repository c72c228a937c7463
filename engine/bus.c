/* bus.c - nng sockets of the daemon and its clients. */
#include "engine/bus.h"

#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <nng/protocol/pubsub0/sub.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>
#include <nng/transport/ipc/ipc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"

struct sb_bus {
	nng_socket rep, pub;
	nng_listener remote;
	int has_remote;
	int request_fd;
};

struct sb_client {
	nng_socket req;
};

/* A subscription is a context on the process's one sub socket for its
 * daemon. nng 1.5.2 can hang for good in nng_close() when a message
 * arrives on an ipc pipe as the pipe closes: ipc_pipe_recv_cb() resubmits
 * its read on the closed pipe, the read is refused without a callback, the
 * protocol's receive never finishes, and the process's single reaper thread
 * waits for it forever (every later close then hangs too). A subscriber is
 * always receiving, so closing sub sockets while the daemon publishes hit it
 * within a few hundred closes. Closing a context closes no pipe; the shared
 * sockets stay open until the process ends. */
struct sub_socket {
	char dir[512];
	nng_socket sock;
	struct sub_socket *next;
};
static pthread_mutex_t sub_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sub_socket *sub_sockets;

struct sb_sub {
	nng_ctx ctx;
	nng_aio *aio;
};

static int nng_err(int rv, const char *what)
{
	switch (rv) {
	case 0: return SB_OK;
	case NNG_ENOMEM: return SB_ERR_NOMEM;
	case NNG_ETIMEDOUT: return sb_seterr(SB_ERR_TIMEOUT, "%s: timed out", what);
	case NNG_ECONNREFUSED:
	case NNG_ENOENT: return sb_seterr(SB_ERR_UNAVAIL, "%s: %s", what, nng_strerror(rv));
	case NNG_EADDRINUSE: return sb_seterr(SB_ERR_EXISTS, "%s: %s", what, nng_strerror(rv));
	case NNG_EMSGSIZE: return sb_seterr(SB_ERR_TOOBIG, "%s: %s", what, nng_strerror(rv));
	case NNG_EAGAIN: return SB_END;
	}
	return sb_seterr(SB_ERR_IO, "%s: %s", what, nng_strerror(rv));
}

static void ipc_url(char *url, size_t cap, const char *dir, const char *name)
{
	snprintf(url, cap, "ipc://%s/%s", dir, name);
}

static int listen_ipc(nng_socket s, const char *dir, const char *name)
{
	nng_listener l;
	char url[512];
	int rv;

	ipc_url(url, sizeof url, dir, name);
	if ((rv = nng_listener_create(&l, s, url)))
		return nng_err(rv, url);
	nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, 0600);
	if ((rv = nng_listener_start(l, 0)))
		return nng_err(rv, url);
	return SB_OK;
}

int sb_bus_listen(const char *dir, sb_bus **out)
{
	sb_bus *b = calloc(1, sizeof *b);
	int rv, rc;

	if (!b)
		return SB_ERR_NOMEM;
	if ((rv = nng_rep0_open(&b->rep))) {
		free(b);
		return nng_err(rv, "api socket");
	}
	if ((rv = nng_pub0_open(&b->pub))) {
		nng_close(b->rep);
		free(b);
		return nng_err(rv, "event socket");
	}
	nng_socket_set_size(b->rep, NNG_OPT_RECVMAXSZ, SB_REQ_MAX);
	nng_socket_set_int(b->pub, NNG_OPT_SENDBUF, 8192);
	if ((rc = listen_ipc(b->rep, dir, "api.sock")) || (rc = listen_ipc(b->pub, dir, "events.sock")) ||
	    (rc = nng_err(nng_socket_get_int(b->rep, NNG_OPT_RECVFD, &b->request_fd), "api fd"))) {
		sb_bus_close(b);
		return rc;
	}
	*out = b;
	return SB_OK;
}

/* Reads a whole (small) PEM file into a new NUL-terminated string. */
static char *read_pem(const char *path)
{
	FILE *f = fopen(path, "re");
	char *buf = NULL;
	long n;

	if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && n < (1 << 20) &&
	    fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) &&
	    fread(buf, 1, (size_t)n, f) == (size_t)n) {
		buf[n] = 0;
	} else {
		free(buf);
		buf = NULL;
	}
	if (f)
		fclose(f);
	return buf;
}

int sb_bus_listen_remote(sb_bus *b, const char *url, const char *cert_pem, const char *key_pem)
{
	nng_tls_config *cfg = NULL;
	char *cert, *key;
	int rv;

	if (strncmp(url, "tls+tcp://", 10))
		return sb_seterr(SB_ERR_INVAL, "remote listener must be tls+tcp://HOST:PORT, not %s", url);
	if (!cert_pem || !key_pem)
		return sb_seterr(SB_ERR_INVAL, "a remote listener needs a certificate and a key");
	cert = read_pem(cert_pem);
	key = read_pem(key_pem);
	if (!cert || !key) {
		free(cert);
		free(key);
		return sb_seterr(SB_ERR_INVAL, "cannot read %s", cert ? key_pem : cert_pem);
	}
	rv = nng_listener_create(&b->remote, b->rep, url);
	if (rv) {
		free(cert);
		free(key);
		return nng_err(rv, url);
	}
	if ((rv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_SERVER)) ||
	    (rv = nng_tls_config_own_cert(cfg, cert, key, NULL)) ||
	    (rv = nng_listener_set_ptr(b->remote, NNG_OPT_TLS_CONFIG, cfg)) ||
	    (rv = nng_listener_start(b->remote, 0))) {
		if (cfg)
			nng_tls_config_free(cfg);
		nng_listener_close(b->remote);
		free(cert);
		free(key);
		return nng_err(rv, url);
	}
	free(cert);
	free(key);
	nng_tls_config_free(cfg); /* the listener holds its own reference */
	b->has_remote = 1;
	return SB_OK;
}

int sb_bus_request_fd(sb_bus *b)
{
	return b->request_fd;
}

int sb_bus_request_next(sb_bus *b, void **req, size_t *len, int *remote)
{
	nng_msg *m;
	int rv = nng_recvmsg(b->rep, &m, NNG_FLAG_NONBLOCK);

	if (rv)
		return nng_err(rv, "api receive");
	*remote = 0;
	if (b->has_remote) {
		nng_pipe p = nng_msg_get_pipe(m);
		*remote = nng_listener_id(nng_pipe_listener(p)) == nng_listener_id(b->remote);
	}
	*len = nng_msg_len(m);
	*req = malloc(*len ? *len : 1);
	if (!*req) {
		nng_msg_free(m);
		return SB_ERR_NOMEM;
	}
	memcpy(*req, nng_msg_body(m), *len);
	nng_msg_free(m);
	return SB_OK;
}

int sb_bus_reply(sb_bus *b, const void *rep, size_t len)
{
	return nng_err(nng_send(b->rep, (void *)rep, len, 0), "api reply");
}

int sb_bus_publish(sb_bus *b, const char *topic, const void *msg, size_t len)
{
	size_t tl = strlen(topic);
	nng_msg *m;
	int rv;

	if ((rv = nng_msg_alloc(&m, 0)))
		return nng_err(rv, "publish");
	if ((rv = nng_msg_append(m, topic, tl)) || (rv = nng_msg_append(m, "\n", 1)) ||
	    (rv = nng_msg_append(m, msg, len)) || (rv = nng_sendmsg(b->pub, m, NNG_FLAG_NONBLOCK))) {
		nng_msg_free(m);
		return nng_err(rv, "publish");
	}
	return SB_OK;
}

void sb_bus_close(sb_bus *b)
{
	if (!b)
		return;
	nng_close(b->rep);
	nng_close(b->pub);
	free(b);
}

void sb_bus_free(void *p)
{
	free(p);
}

static int dial(nng_socket s, const char *dir, const char *ca_pem, const char *name)
{
	nng_dialer d;
	nng_tls_config *cfg = NULL;
	char url[512];
	int rv;

	if (!strncmp(dir, "tls+tcp://", 10)) {
		/* Remote clients get the control API only: the event feed has
		 * no way to check a token, so they poll events.read. */
		if (strcmp(name, "api.sock"))
			return sb_seterr(SB_ERR_INVAL, "the live event feed is local only");
		if (!ca_pem)
			return sb_seterr(SB_ERR_INVAL, "a remote daemon needs a CA certificate");
		snprintf(url, sizeof url, "%s", dir);
	} else {
		ipc_url(url, sizeof url, dir, name);
	}
	if ((rv = nng_dialer_create(&d, s, url)))
		return nng_err(rv, url);
	if (!strncmp(url, "tls+tcp://", 10)) {
		char host[256];
		size_t hl = strcspn(url + 10, ":/");
		snprintf(host, sizeof host, "%.*s", (int)hl, url + 10);
		if ((rv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_CLIENT)) ||
		    (rv = nng_tls_config_ca_file(cfg, ca_pem)) ||
		    (rv = nng_tls_config_server_name(cfg, host)) ||
		    (rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED)) ||
		    (rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg))) {
			if (cfg)
				nng_tls_config_free(cfg);
			return nng_err(rv, url);
		}
		nng_tls_config_free(cfg);
	}
	return nng_err(nng_dialer_start(d, 0), url);
}

int sb_client_open(const char *dir, const char *ca_pem, sb_client **out)
{
	sb_client *c = calloc(1, sizeof *c);
	int rv, rc;

	if (!c)
		return SB_ERR_NOMEM;
	if ((rv = nng_req0_open(&c->req))) {
		free(c);
		return nng_err(rv, "api socket");
	}
	nng_socket_set_size(c->req, NNG_OPT_RECVMAXSZ, 0); /* replies may be large */
	nng_socket_set_ms(c->req, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	if ((rc = dial(c->req, dir, ca_pem, "api.sock"))) {
		sb_client_close(c);
		return rc;
	}
	*out = c;
	return SB_OK;
}

struct sb_call {
	nng_ctx ctx;
	nng_aio *aio;
};

/* Ends call: waits until its operation is over (the reply came, or it
 * failed or timed out), then frees it. Returns the reply (NULL if none; the
 * caller frees it) and the error in *rv. The wait matters: nng 1.5.2 can
 * also hang closing a req socket while a reply arrives (see struct
 * sub_socket), so a dropped call must not leave its reply on the way. */
static nng_msg *call_end(sb_call *call, int *rv)
{
	nng_msg *m = NULL;

	*rv = NNG_ENOMEM;
	if (call->aio) {
		nng_aio_wait(call->aio);
		if (!(*rv = nng_aio_result(call->aio)))
			m = nng_aio_get_msg(call->aio);
		nng_aio_free(call->aio);
	}
	nng_ctx_close(call->ctx);
	free(call);
	return m;
}

void sb_client_cancel(sb_call *call)
{
	nng_msg *m;
	int rv;

	if (call && (m = call_end(call, &rv)))
		nng_msg_free(m);
}

int sb_client_send(sb_client *c, const void *req, size_t len, int timeout_ms, sb_call **out)
{
	sb_call *call = calloc(1, sizeof *call);
	nng_msg *m = NULL;
	int rv;

	if (!call)
		return SB_ERR_NOMEM;
	if ((rv = nng_ctx_open(&call->ctx, c->req))) {
		free(call);
		return nng_err(rv, "request");
	}
	if ((rv = nng_aio_alloc(&call->aio, NULL, NULL)) || (rv = nng_msg_alloc(&m, 0)) ||
	    (rv = nng_msg_append(m, req, len)))
		goto fail;
	nng_ctx_set_ms(call->ctx, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	nng_aio_set_timeout(call->aio, timeout_ms);
	nng_aio_set_msg(call->aio, m);
	nng_ctx_send(call->ctx, call->aio);
	nng_aio_wait(call->aio);
	if ((rv = nng_aio_result(call->aio)))
		goto fail; /* the message is still ours */
	m = NULL;
	nng_ctx_recv(call->ctx, call->aio);
	*out = call;
	return SB_OK;
fail:
	if (m)
		nng_msg_free(m);
	sb_client_cancel(call);
	return nng_err(rv, "request");
}

int sb_client_wait(sb_call *call, void **rep, size_t *replen)
{
	int rv;
	nng_msg *m = call_end(call, &rv);

	if (!m)
		return nng_err(rv ? rv : NNG_EPROTO, "reply");
	*replen = nng_msg_len(m);
	*rep = malloc(*replen ? *replen : 1);
	if (!*rep) {
		nng_msg_free(m);
		return SB_ERR_NOMEM;
	}
	memcpy(*rep, nng_msg_body(m), *replen);
	nng_msg_free(m);
	return SB_OK;
}

int sb_client_call(sb_client *c, const void *req, size_t len, int timeout_ms, void **rep,
		   size_t *replen)
{
	sb_call *call;
	int rc = sb_client_send(c, req, len, timeout_ms, &call);

	return rc ? rc : sb_client_wait(call, rep, replen);
}

void sb_client_close(sb_client *c)
{
	if (!c)
		return;
	nng_close(c->req);
	free(c);
}

/* Finds or makes the process's sub socket for the daemon at dir (see
 * struct sub_socket). Errors: as sb_client_open. */
static int sub_socket(const char *dir, const char *ca_pem, nng_socket *out)
{
	struct sub_socket *ss;
	int rv, rc = SB_OK;

	pthread_mutex_lock(&sub_mu);
	for (ss = sub_sockets; ss && strcmp(ss->dir, dir); ss = ss->next)
		;
	if (!ss) {
		if (!(ss = calloc(1, sizeof *ss))) {
			rc = SB_ERR_NOMEM;
			goto out;
		}
		snprintf(ss->dir, sizeof ss->dir, "%s", dir);
		if ((rv = nng_sub0_open(&ss->sock))) {
			free(ss);
			rc = nng_err(rv, "event socket");
			goto out;
		}
		nng_socket_set_size(ss->sock, NNG_OPT_RECVMAXSZ, 0);
		if ((rc = dial(ss->sock, dir, ca_pem, "events.sock"))) {
			nng_close(ss->sock); /* not connected: no pipe to hang on */
			free(ss);
			goto out;
		}
		ss->next = sub_sockets;
		sub_sockets = ss;
	}
	*out = ss->sock;
out:
	pthread_mutex_unlock(&sub_mu);
	return rc;
}

int sb_sub_open(const char *dir, const char *ca_pem, const char *topic, sb_sub **out)
{
	sb_sub *s = calloc(1, sizeof *s);
	nng_socket sock;
	char t[64];
	int rv, rc;

	if (!s)
		return SB_ERR_NOMEM;
	if ((rc = sub_socket(dir, ca_pem, &sock))) {
		free(s);
		return rc;
	}
	if ((rv = nng_ctx_open(&s->ctx, sock))) {
		free(s);
		return nng_err(rv, "event context");
	}
	snprintf(t, sizeof t, "%s%s", topic, topic[0] ? "\n" : "");
	if ((rv = nng_aio_alloc(&s->aio, NULL, NULL)) ||
	    (rv = nng_ctx_set_int(s->ctx, NNG_OPT_RECVBUF, 8192)) ||
	    (rv = nng_ctx_set(s->ctx, NNG_OPT_SUB_SUBSCRIBE, t, strlen(t)))) {
		sb_sub_close(s);
		return nng_err(rv, "subscribe");
	}
	*out = s;
	return SB_OK;
}

int sb_sub_next(sb_sub *s, int timeout_ms, void **msg, size_t *len)
{
	nng_msg *m;
	const char *body, *nl;
	size_t n;
	int rv;

	nng_aio_set_timeout(s->aio, timeout_ms < 0 ? NNG_DURATION_INFINITE : timeout_ms);
	nng_ctx_recv(s->ctx, s->aio);
	nng_aio_wait(s->aio);
	if ((rv = nng_aio_result(s->aio)))
		return nng_err(rv, "event receive");
	m = nng_aio_get_msg(s->aio);
	body = nng_msg_body(m);
	n = nng_msg_len(m);
	nl = memchr(body, '\n', n);
	if (!nl) {
		nng_msg_free(m);
		return sb_seterr(SB_ERR_PROTO, "event message without topic");
	}
	n -= (size_t)(nl + 1 - body);
	*msg = malloc(n ? n : 1);
	if (!*msg) {
		nng_msg_free(m);
		return SB_ERR_NOMEM;
	}
	memcpy(*msg, nl + 1, n);
	*len = n;
	nng_msg_free(m);
	return SB_OK;
}

void sb_sub_close(sb_sub *s)
{
	if (!s)
		return;
	if (s->aio)
		nng_aio_free(s->aio);
	nng_ctx_close(s->ctx);
	free(s);
}
