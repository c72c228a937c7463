/* bench_gateway.c - the model gateway against the model stub it forwards
 * to, in the same process and on the same machine.
 *
 * A stub (sanbox-model-stub, beside the bench directory) answers model
 * stub/echo with a fixed text and usage. The gateway records every call
 * durably in a log under /tmp (its bodies as blobs, agent.message and
 * agent.usage.updated), as the daemon does.
 *
 * Latency: 2000 sequential non-stream calls on one keep-alive connection,
 * straight to the stub and through the gateway; the p50 and p99 of each and
 * the difference (what the gateway adds). Throughput: 8 client threads, each
 * on its own keep-alive connection, for 3 s, straight and through the
 * gateway, and their ratio. The stub answers at once, so that ratio is of
 * CPU: client, gateway and stub share the machine's cores, and each call
 * through the gateway is parsed, forwarded and recorded (with a synced
 * commit) on top of the stub's work. The _20ms lines repeat it with 32
 * clients and a model that takes 20 ms to answer, as a fast real one does.
 *
 * Prints only lines "bench NAME VALUE UNIT"; errors go to stderr with exit
 * status 1.
 */
#include <curl/curl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/gateway.h"
#include "engine/log.h"
#include "tests/bench/benchutil.h"

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

/* A keep-alive client for url with the run's key. */
static CURL *client(const char *url, struct curl_slist **h)
{
	CURL *c = curl_easy_init();
	char auth[128];

	snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
	*h = curl_slist_append(NULL, auth);
	*h = curl_slist_append(*h, "Content-Type: application/json");
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, *h);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
	curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
	return c;
}

static void one_call(CURL *c)
{
	long status = 0;

	if (curl_easy_perform(c) != CURLE_OK)
		die("call", SB_ERR_IO);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	if (status != 200)
		die("call status not 200", SB_ERR_PROTO);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Sequential calls: writes the p50 and p99 in ms. */
static void latency(const char *url, double *p50, double *p99)
{
	static double ms[LAT_CALLS];
	struct curl_slist *h;
	CURL *c = client(url, &h);

	for (int i = 0; i < 50; i++) /* warm up: connections, page cache */
		one_call(c);
	for (int i = 0; i < LAT_CALLS; i++) {
		double t0 = bench_now();
		one_call(c);
		ms[i] = (bench_now() - t0) * 1e3;
	}
	qsort(ms, LAT_CALLS, sizeof ms[0], cmp_double);
	*p50 = ms[LAT_CALLS / 2];
	*p99 = ms[LAT_CALLS * 99 / 100];
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
}

struct tput {
	const char *url;
	double until;
	atomic_ulong *calls;
};

static void *tput_main(void *arg)
{
	struct tput *t = arg;
	struct curl_slist *h;
	CURL *c = client(t->url, &h);

	while (bench_now() < t->until) {
		one_call(c);
		atomic_fetch_add(t->calls, 1);
	}
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return NULL;
}

/* Calls per second from n clients. */
static double throughput(const char *url, int n)
{
	atomic_ulong calls = 0;
	struct tput t = {url, bench_now() + TPUT_SECONDS, &calls};
	pthread_t th[SLOW_THREADS];
	double t0 = bench_now();

	for (int i = 0; i < n; i++)
		if (pthread_create(&th[i], NULL, tput_main, &t))
			die("thread", SB_ERR_NOMEM);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	return (double)atomic_load(&calls) / (bench_now() - t0);
}

int main(void)
{
	char stub_url[SB_URL_MAX], url[SB_URL_MAX + 64], path[4096], gw_url[128];
	double d20, g20;
	struct sb_gateway_opts o = {0};
	struct sb_gateway_model m[2];
	struct sb_gateway_run r = {0};
	double d50, d99, g50, g99, drps, grps;
	sb_gateway *gw;
	sb_log *lg;
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
	snprintf(path, sizeof path, "%s/scripts", tmpdir);
	if ((rc = sb_stub_start(path, &stub_pid, stub_url)))
		die("start the model stub", rc);
	snprintf(path, sizeof path, "%s/log", tmpdir);
	mkdir(path, 0700);
	if ((rc = sb_log_open(path, 0, &lg)))
		die("open the log", rc);
	o.log = lg;
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
	r.run = "bench0gateway";
	r.budget_nusd = UINT64_MAX / 4;
	r.models = m;
	r.nmodels = 2;
	if ((rc = sb_gateway_run_add(gw, &r, key)))
		die("register the run", rc);

	snprintf(url, sizeof url, "%s/chat/completions", stub_url);
	snprintf(gw_url, sizeof gw_url, "http://127.0.0.1:%u/v1/chat/completions",
		 sb_gateway_port(gw));
	latency(url, &d50, &d99);
	drps = throughput(url, THREADS);
	latency(gw_url, &g50, &g99);
	grps = throughput(gw_url, THREADS);
	body = BODY_OF("stub/model20");
	d20 = throughput(url, SLOW_THREADS);
	g20 = throughput(gw_url, SLOW_THREADS);

	printf("bench gateway.direct_p50 %.3f ms\n", d50);
	printf("bench gateway.direct_p99 %.3f ms\n", d99);
	printf("bench gateway.via_p50 %.3f ms\n", g50);
	printf("bench gateway.via_p99 %.3f ms\n", g99);
	printf("bench gateway.added_p50 %.3f ms\n", g50 - d50);
	printf("bench gateway.added_p99 %.3f ms\n", g99 - d99);
	printf("bench gateway.direct_rps %.0f requests/s\n", drps);
	printf("bench gateway.via_rps %.0f requests/s\n", grps);
	printf("bench gateway.rps_vs_direct %.2f ratio\n", grps / drps);
	printf("bench gateway.direct_rps_20ms %.0f requests/s\n", d20);
	printf("bench gateway.via_rps_20ms %.0f requests/s\n", g20);
	printf("bench gateway.rps_vs_direct_20ms %.2f ratio\n", g20 / d20);
	sb_gateway_close(gw);
	sb_log_close(lg);
	cleanup();
	return 0;
}
