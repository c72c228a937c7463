/* gwclient.h - libcurl on a model gateway connection, for the unit tests
 * and the benchmark: the gateway listens nowhere, so a client is handed
 * the socket sb_gateway_connect makes (CURLOPT_OPENSOCKETFUNCTION), told it
 * is connected (CURLOPT_SOCKOPTFUNCTION), and given a URL host,
 * "sanbox-gateway", that is never looked up nor connected to.
 * Header-only; include it in one file of a program (it defines connect()
 * and getpeername()).
 */
#ifndef SB_GWCLIENT_H
#define SB_GWCLIENT_H

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "engine/gateway/gateway.h"

/* How libcurl's connections of one handle are made. */
struct gw_via {
	/* Makes a connection and writes its socket into *fd; 0 or an
	 * SB_ERR_*. gw_via_gateway by default. */
	int (*open)(struct gw_via *v, int *fd);
	sb_gateway *gw;	 /* for gw_via_gateway: the gateway */
	const char *run; /* and the run the connections are for */
	void *ctx;	 /* for other openers */
	int rc;		 /* what the last open returned */
};

static inline int gw_via_gateway(struct gw_via *v, int *fd)
{
	return sb_gateway_connect(v->gw, v->run, fd);
}

static inline curl_socket_t gw_via_open(void *ctx, curlsocktype purpose,
					struct curl_sockaddr *addr)
{
	struct gw_via *v = ctx;
	int fd = -1;

	(void)purpose;
	(void)addr;
	v->rc = (v->open ? v->open : gw_via_gateway)(v, &fd);
	return v->rc ? CURL_SOCKET_BAD : fd;
}

static inline int gw_via_sockopt(void *ctx, curl_socket_t fd, curlsocktype purpose)
{
	(void)ctx;
	(void)fd;
	(void)purpose;
	return CURL_SOCKOPT_ALREADY_CONNECTED;
}

static struct curl_slist *gw_via_hosts;

static inline void gw_via_hosts_init(void)
{
	gw_via_hosts = curl_slist_append(NULL, "sanbox-gateway:80:127.0.0.1");
}

/* Makes c's connections through v (which must outlive c's transfers);
 * the caller sets a URL of host sanbox-gateway. */
static inline void gw_via_setup(CURL *c, struct gw_via *v)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, gw_via_hosts_init);
	curl_easy_setopt(c, CURLOPT_RESOLVE, gw_via_hosts);
	curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, gw_via_open);
	curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, v);
	curl_easy_setopt(c, CURLOPT_SOCKOPTFUNCTION, gw_via_sockopt);
}

/* Sends on c a request through v to url (of host sanbox-gateway) with
 * headers h, POST body (GET when body is NULL), the answer's bytes to
 * write(ctx); sets *status to its HTTP status. Returns curl's result (v->rc
 * says whether the gateway took the connection). */
static inline CURLcode gw_via_send(CURL *c, struct gw_via *v, const char *url,
				   struct curl_slist *h, const char *body,
				   curl_write_callback write, void *ctx, long *status)
{
	CURLcode rc;

	curl_easy_setopt(c, CURLOPT_URL, url);
	gw_via_setup(c, v);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	if (body)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, ctx);
	rc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
	return rc;
}

/* Two faults of libcurl 7.88 meet a socket that is connected already:
 * it calls connect() on it even though its sockopt callback said so
 * (curl/curl#10626, fixed in 8.0.0), and it reuses no connection whose
 * peer address prints as "", which a socket pair's unnamed peer does. The
 * connect() and getpeername() below, which the program's libcurl calls
 * instead of libc's, are the system calls except for an AF_UNIX socket
 * with a peer: connect() of it succeeds at once, and its unnamed peer is
 * called "sanbox-gateway". */
int connect(int fd, __CONST_SOCKADDR_ARG sa, socklen_t len)
{
	struct sockaddr_storage peer;
	socklen_t plen = sizeof peer;

	if (syscall(SYS_getpeername, fd, &peer, &plen) == 0 && peer.ss_family == AF_UNIX)
		return 0;
	return (int)syscall(SYS_connect, fd, sa.__sockaddr__, len);
}

int getpeername(int fd, __SOCKADDR_ARG sa, socklen_t *len)
{
	struct sockaddr_un *un = (struct sockaddr_un *)sa.__sockaddr__;
	socklen_t cap = *len;
	int rc = (int)syscall(SYS_getpeername, fd, sa.__sockaddr__, len);

	if (rc == 0 && un->sun_family == AF_UNIX && *len <= sizeof(sa_family_t) &&
	    cap >= sizeof *un) {
		snprintf(un->sun_path, sizeof un->sun_path, "sanbox-gateway");
		*len = sizeof *un;
	}
	return rc;
}

#endif
