/* bench_gateway.c - the model gateway against the model stub it forwards
 * to, in the same process and on the same machine.
 *
 * A stub (sanbox-model-stub, beside the bench directory) answers model
 * stub/echo with a fixed text and usage. The gateway records every call
 * durably in a log under /tmp (its bodies as blobs, agent.message and
 * agent.usage.updated), as the daemon does.
 *
 * The gateway listens nowhere: its clients use the connections
 * sb_gateway_connect makes (an AF_UNIX socket pair per connection, as the
 * daemon's tunnels do; tests/gwclient.h). The stub is reached over TCP on
 * loopback, as the gateway reaches a provider.
 *
 * Latency: 2000 sequential non-stream calls on one keep-alive connection,
 * straight to the stub and through the gateway; the p50 and p99 of each and
 * the difference (what the gateway adds). Throughput: 8 client threads, each
 * on its own keep-alive connection, for 3 s, straight and through the
 * gateway, and their ratio. The stub answers at once, so that ratio is of
 * CPU: client, gateway and stub share the machine's cores, and each call
 * through the gateway is parsed, forwarded and recorded (with a synced
 * commit) on top of the stub's work. A plain proxy, the same libmicrohttpd
 * and libcurl set-up that only passes the bytes on, is measured the same
 * way, reached the same way (socket pairs handed to MHD_add_connection):
 * it is the most any proxy of this design gets on this machine, and
 * gateway.rps_vs_plain_proxy what metering and recording cost against it.
 * A second gateway whose log does not sync its commits (never so in the
 * daemon) shows how much of that is waiting for the disk.
 * The _20ms lines repeat it with 32 clients and a model that takes 20 ms to
 * answer, as a fast real one does.
 *
 * Prints only lines "bench NAME VALUE UNIT"; errors go to stderr with exit
 * status 1.
 */
#include <curl/curl.h>
#include <ftw.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/gateway/gateway.h"
#include "engine/gateway/models.h"
#include "engine/log/log.h"
#include "tests/bench/benchutil.h"
#include "tests/gwclient.h"

#define LAT_CALLS    2000
#define THREADS	     8
#define SLOW_THREADS 32
#define TPUT_SECONDS 3.0

static char tmpdir[] = "/tmp/sb-bench-gw-XXXXXX";
static pid_t stub_pid;
static char key[SB_VKEY_MAX];
#define BODY_OF(model)                                                                   \
	"{\"model\":\"" model                                                            \
	"\",\"messages\":[{\"role\":\"system\",\"content\":\"You are an "                \
	"agent working in a sandbox.\"},{\"role\":\"user\",\"content\":\"List the "      \
	"files and "                                                                     \
	"summarise them.\"}]}"
static const char *body = BODY_OF("stub/echo");

static void cleanup(void)
{
	sb_stub_stop(stub_pid);
	bench_rmrf(tmpdir);
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "bench_gateway: %s: %s\n", what, rc ? sb_errmsg(rc) : "failed");
	cleanup();
	exit(1);
}

/* Writes the stub script NAME.json into the work directory's scripts/. */
static void write_script(const char *name, const char *json)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof path, "%s/scripts/%s.json", tmpdir, name);
	if (!(f = fopen(path, "w")) || fputs(json, f) < 0 || fclose(f))
		die("write a stub script", SB_ERR_IO);
}

static size_t sink(char *p, size_t size, size_t n, void *ctx)
{
	return size * n;
}

/* Where calls go: url, and when via->open is set, the connections it
 * makes (the URL's host is then never connected to). */
struct target {
	const char *url;
	struct gw_via via;
};

/* A keep-alive client of t with the run's key; its connections are made
 * through *v, a copy of t's that the caller keeps while c lives. */
static CURL *client(const struct target *t, struct gw_via *v, struct curl_slist **h)
{
	CURL *c = curl_easy_init();
	char auth[128];

	snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
	*h = curl_slist_append(NULL, auth);
	*h = curl_slist_append(*h, "Content-Type: application/json");
	curl_easy_setopt(c, CURLOPT_URL, t->url);
	if (t->via.open) {
		*v = t->via;
		gw_via_setup(c, v);
	}
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, *h);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
	curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
	return c;
}

static void one_call(CURL *c)
{
	long status = 0;
	CURLcode cc = curl_easy_perform(c);

	if (cc != CURLE_OK) {
		fprintf(stderr, "bench_gateway: call: %s\n", curl_easy_strerror(cc));
		die("call", SB_ERR_IO);
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	if (status != 200) {
		fprintf(stderr, "bench_gateway: call status %ld\n", status);
		die("call status not 200", SB_ERR_PROTO);
	}
}

/* --- the plain proxy: POST bodies passed to the stub, answers passed back --- */

static char plain_upstream[SB_URL_MAX + 64];

struct plain_call {
	msgpack_sbuffer in;
};

struct plain_conn {
	CURL *curl;
};

static size_t plain_keep(char *p, size_t size, size_t n, void *ctx)
{
	msgpack_sbuffer_write(ctx, p, size * n);
	return size * n;
}

static enum MHD_Result plain_access(void *cls, struct MHD_Connection *c, const char *url,
				    const char *method, const char *version,
				    const char *data, size_t *size, void **con_cls)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct plain_conn *pc = ci ? ci->socket_context : NULL;
	struct plain_call *k = *con_cls;
	struct curl_slist *h = NULL;
	struct MHD_Response *resp;
	msgpack_sbuffer out;
	const char *auth;
	enum MHD_Result ret;
	char hdr[256];

	if (!k) {
		if (!(k = calloc(1, sizeof *k)))
			return MHD_NO;
		msgpack_sbuffer_init(&k->in);
		*con_cls = k;
		return MHD_YES;
	}
	if (*size) {
		msgpack_sbuffer_write(&k->in, data, *size);
		*size = 0;
		return MHD_YES;
	}
	if (!pc || (!pc->curl && !(pc->curl = curl_easy_init())))
		return MHD_NO;
	msgpack_sbuffer_init(&out);
	auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	snprintf(hdr, sizeof hdr, "Authorization: %s", auth ? auth : "");
	h = curl_slist_append(curl_slist_append(NULL, hdr),
			      "Content-Type: application/json");
	curl_easy_reset(pc->curl);
	curl_easy_setopt(pc->curl, CURLOPT_URL, plain_upstream);
	curl_easy_setopt(pc->curl, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(pc->curl, CURLOPT_POSTFIELDS, k->in.data ? k->in.data : "");
	curl_easy_setopt(pc->curl, CURLOPT_POSTFIELDSIZE, (long)k->in.size);
	curl_easy_setopt(pc->curl, CURLOPT_WRITEFUNCTION, plain_keep);
	curl_easy_setopt(pc->curl, CURLOPT_WRITEDATA, &out);
	curl_easy_setopt(pc->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(pc->curl, CURLOPT_TCP_NODELAY, 1L);
	if (curl_easy_perform(pc->curl) != CURLE_OK)
		die("plain proxy: forward", SB_ERR_IO);
	curl_slist_free_all(h);
	resp = MHD_create_response_from_buffer(out.size, out.data, MHD_RESPMEM_MUST_COPY);
	MHD_add_response_header(resp, "Content-Type", "application/json");
	ret = MHD_queue_response(c, 200, resp);
	MHD_destroy_response(resp);
	msgpack_sbuffer_destroy(&out);
	return ret;
}

static void plain_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			    enum MHD_RequestTerminationCode toe)
{
	struct plain_call *k = *con_cls;

	if (k) {
		msgpack_sbuffer_destroy(&k->in);
		free(k);
		*con_cls = NULL;
	}
}

static void plain_connection(void *cls, struct MHD_Connection *c, void **socket_context,
			     enum MHD_ConnectionNotificationCode code)
{
	struct plain_conn *pc = *socket_context;

	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		*socket_context = calloc(1, sizeof(struct plain_conn));
	} else if (pc) {
		if (pc->curl)
			curl_easy_cleanup(pc->curl);
		free(pc);
		*socket_context = NULL;
	}
}

/* Starts the plain proxy in front of upstream, without a listening
 * socket, as the gateway runs. */
static struct MHD_Daemon *plain_start(const char *upstream)
{
	struct MHD_Daemon *d;

	snprintf(plain_upstream, sizeof plain_upstream, "%s", upstream);
	d = MHD_start_daemon(
	    MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
		MHD_USE_POLL | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC,
	    0, NULL, NULL, plain_access, NULL, MHD_OPTION_NOTIFY_COMPLETED,
	    plain_completed, NULL, MHD_OPTION_NOTIFY_CONNECTION, plain_connection, NULL,
	    MHD_OPTION_END);
	if (!d)
		die("start the plain proxy", SB_ERR_IO);
	return d;
}

/* A connection to the plain proxy (v->ctx): a socket pair, one end handed
 * to it, as sb_gateway_connect does. */
static int plain_connect(struct gw_via *v, int *fd)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv))
		return SB_ERR_IO;
	if (MHD_add_connection(v->ctx, sv[0], (const struct sockaddr *)&sa, sizeof sa) !=
	    MHD_YES) {
		close(sv[1]);
		return SB_ERR_IO;
	}
	*fd = sv[1];
	return SB_OK;
}

/* Sequential calls: writes the p50 and p99 in ms. */
static void latency(const struct target *t, double *p50, double *p99)
{
	static double ms[LAT_CALLS];
	struct curl_slist *h;
	struct gw_via v;
	CURL *c = client(t, &v, &h);

	for (int i = 0; i < 50; i++) /* warm up: connections, page cache */
		one_call(c);
	for (int i = 0; i < LAT_CALLS; i++) {
		double t0 = bench_now();
		one_call(c);
		ms[i] = (bench_now() - t0) * 1e3;
	}
	qsort(ms, LAT_CALLS, sizeof ms[0], bench_cmp_double);
	*p50 = ms[LAT_CALLS / 2];
	*p99 = ms[LAT_CALLS * 99 / 100];
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
}

struct tput {
	const struct target *target;
	double until;
	atomic_ulong *calls;
};

static void *tput_main(void *arg)
{
	struct tput *t = arg;
	struct curl_slist *h;
	struct gw_via v;
	CURL *c = client(t->target, &v, &h);

	while (bench_now() < t->until) {
		one_call(c);
		atomic_fetch_add(t->calls, 1);
	}
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return NULL;
}

/* Calls per second from n clients. */
static double throughput(const struct target *target, int n)
{
	atomic_ulong calls = 0;
	struct tput t = {target, bench_now() + TPUT_SECONDS, &calls};
	pthread_t th[SLOW_THREADS];
	double t0 = bench_now();

	for (int i = 0; i < n; i++)
		if (pthread_create(&th[i], NULL, tput_main, &t))
			die("thread", SB_ERR_NOMEM);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	return (double)atomic_load(&calls) / (bench_now() - t0);
}

#define BENCH_RUN "bench0gateway"
#define VIA_URL	  "http://sanbox-gateway/v1/chat/completions"

/* A gateway with its own log (synced unless flags say otherwise) in front
 * of the stub, with the bench's run registered; writes its key and how to
 * reach it. */
static sb_gateway *gateway_start(const char *stub_url, const char *name, unsigned flags,
				 sb_log **lg, char run_key[SB_VKEY_MAX], struct target *t)
{
	struct sb_gateway_opts o = {0};
	struct sb_gateway_model m[2];
	struct sb_gateway_run r = {0};
	char path[4096];
	sb_gateway *gw;
	int rc;

	snprintf(path, sizeof path, "%s/%s", tmpdir, name);
	mkdir(path, 0700);
	if ((rc = sb_log_open(path, flags, lg)))
		die("open the log", rc);
	o.log = *lg;
	if ((rc = sb_gateway_open(&o, &gw)))
		die("open the gateway", rc);
	memset(m, 0, sizeof m);
	for (int i = 0; i < 2; i++) {
		snprintf(m[i].model.name, sizeof m[i].model.name,
			 i ? "stub/model20" : "stub/echo");
		snprintf(m[i].model.upstream, sizeof m[i].model.upstream,
			 i ? "model20" : "echo");
		snprintf(m[i].model.provider, sizeof m[i].model.provider, "stub");
		m[i].model.in_price = 1000000000ull;
		m[i].model.out_price = 2000000000ull;
		m[i].model.max_output = 4096;
		snprintf(m[i].base_url, sizeof m[i].base_url, "%s", stub_url);
		m[i].apis = SB_API_OPENAI;
	}
	r.run = BENCH_RUN;
	r.budget_nusd = UINT64_MAX / 4;
	r.models = m;
	r.nmodels = 2;
	if ((rc = sb_gateway_run_add(gw, &r, run_key)))
		die("register the run", rc);
	t->url = VIA_URL;
	t->via = (struct gw_via){.open = gw_via_gateway, .gw = gw, .run = BENCH_RUN};
	return gw;
}

int main(void)
{
	char stub_url[SB_URL_MAX], url[SB_URL_MAX + 64], path[4096],
	    nosync_key[SB_VKEY_MAX], sync_key[SB_VKEY_MAX];
	double d50, d99, g50, g99, drps, grps, prps, nrps, d20, g20;
	struct target direct = {.url = url}, via, via_nosync, proxy = {.url = VIA_URL};
	struct MHD_Daemon *plain;
	sb_gateway *gw, *gw_nosync;
	sb_log *lg, *lg_nosync;
	int rc;

	if (!mkdtemp(tmpdir))
		die("mkdtemp", SB_ERR_IO);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	snprintf(path, sizeof path, "%s/scripts", tmpdir);
	mkdir(path, 0700);
	write_script("echo",
		     "{\"turns\": [{\"text\": \"echo: a fixed answer.\", \"usage\": "
		     "{\"input_tokens\": 100, \"output_tokens\": 20}}]}");
	write_script("model20",
		     "{\"turns\": [{\"text\": \"a considered answer.\", \"delay_ms\": "
		     "20, \"usage\": {\"input_tokens\": 100, \"output_tokens\": 20}}]}");
	if ((rc = sb_stub_start(path, &stub_pid, stub_url)))
		die("start the model stub", rc);
	gw = gateway_start(stub_url, "log", 0, &lg, sync_key, &via);
	gw_nosync = gateway_start(stub_url, "log-nosync", SB_LOG_NOSYNC, &lg_nosync,
				  nosync_key, &via_nosync);
	snprintf(url, sizeof url, "%s/chat/completions", stub_url);
	plain = plain_start(url);
	proxy.via = (struct gw_via){.open = plain_connect, .ctx = plain};

	memcpy(key, sync_key, sizeof key);
	latency(&direct, &d50, &d99);
	drps = throughput(&direct, THREADS);
	prps = throughput(&proxy, THREADS);
	latency(&via, &g50, &g99);
	grps = throughput(&via, THREADS);
	memcpy(key, nosync_key, sizeof key);
	nrps = throughput(&via_nosync, THREADS);
	memcpy(key, sync_key, sizeof key);
	body = BODY_OF("stub/model20");
	d20 = throughput(&direct, SLOW_THREADS);
	g20 = throughput(&via, SLOW_THREADS);

	printf("bench gateway.direct_p50 %.3f ms\n", d50);
	printf("bench gateway.direct_p99 %.3f ms\n", d99);
	printf("bench gateway.via_p50 %.3f ms\n", g50);
	printf("bench gateway.via_p99 %.3f ms\n", g99);
	printf("bench gateway.added_p50 %.3f ms\n", g50 - d50);
	printf("bench gateway.added_p99 %.3f ms\n", g99 - d99);
	printf("bench gateway.direct_rps %.0f requests/s\n", drps);
	printf("bench gateway.via_rps %.0f requests/s\n", grps);
	printf("bench gateway.rps_vs_direct %.2f ratio\n", grps / drps);
	printf("bench gateway.plain_proxy_rps %.0f requests/s\n", prps);
	printf("bench gateway.plain_proxy_vs_direct %.2f ratio\n", prps / drps);
	printf("bench gateway.rps_vs_plain_proxy %.2f ratio\n", grps / prps);
	printf("bench gateway.via_unsynced_rps %.0f requests/s\n", nrps);
	printf("bench gateway.unsynced_vs_plain_proxy %.2f ratio\n", nrps / prps);
	printf("bench gateway.direct_rps_20ms %.0f requests/s\n", d20);
	printf("bench gateway.via_rps_20ms %.0f requests/s\n", g20);
	printf("bench gateway.rps_vs_direct_20ms %.2f ratio\n", g20 / d20);
	MHD_stop_daemon(plain);
	sb_gateway_close(gw_nosync);
	sb_gateway_close(gw);
	sb_log_close(lg_nosync);
	sb_log_close(lg);
	cleanup();
	return 0;
}
