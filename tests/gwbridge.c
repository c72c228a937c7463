/* gwbridge.c - the model gateway on a loopback TCP port, for clients that
 * cannot be handed a socket (an SDK in another language): the gateway
 * listens nowhere, so each accepted connection is joined to one that
 * sb_gateway_connect makes for the one run it registers.
 *
 *   gwbridge SCRIPT_DIR HOME BUDGET_NUSD
 *
 * Starts the model stub on SCRIPT_DIR, a log in HOME/log and a gateway,
 * registers run "sdk" (budget BUDGET_NUSD, stopped on it) with the
 * models stub/harness and stub/long, every API, at $1/$100/$0.50 per
 * million input/output/cached tokens, then prints `listening PORT KEY`
 * and serves until its standard input ends. It then prints the run's
 * budget, `spent N reserved N`, and one line per agent.usage.updated
 * event, `usage INPUT OUTPUT CACHED COST estimated?`, and exits 0.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/gateway/gateway.h"
#include "engine/gateway/stubs.h"
#include "engine/log/log.h"
#include "engine/mpack.h"

#define RUN "sdk"

struct pair {
	sb_gateway *gw;
	int client;
};

/* Copies what one end has to the other; 0 once it ends. */
static int pump(int from, int to)
{
	char buf[16384];
	ssize_t n = read(from, buf, sizeof buf), off = 0, w;

	if (n <= 0)
		return 0;
	while (off < n) {
		w = write(to, buf + off, (size_t)(n - off));
		if (w < 0) {
			struct pollfd p = {.fd = to, .events = POLLOUT};
			poll(&p, 1, 1000);
			continue;
		}
		off += w;
	}
	return 1;
}

static void *bridge(void *arg)
{
	struct pair *p = arg;
	int gwfd = -1;

	if (sb_gateway_connect(p->gw, RUN, &gwfd) == SB_OK) {
		struct pollfd f[2] = {{.fd = p->client, .events = POLLIN},
				      {.fd = gwfd, .events = POLLIN}};
		for (;;) {
			if (poll(f, 2, -1) < 0)
				break;
			if ((f[0].revents && !pump(p->client, gwfd)) ||
			    (f[1].revents && !pump(gwfd, p->client)))
				break;
		}
		close(gwfd);
	}
	close(p->client);
	free(p);
	return NULL;
}

static void *acceptor(void *arg)
{
	sb_gateway *gw = ((struct pair *)arg)->gw;
	int lfd = ((struct pair *)arg)->client, c;
	pthread_t t;

	while ((c = accept(lfd, NULL, NULL)) >= 0) {
		struct pair *p = malloc(sizeof *p);
		if (p) {
			p->gw = gw;
			p->client = c;
		}
		if (!p || pthread_create(&t, NULL, bridge, p)) {
			free(p);
			close(c);
			continue;
		}
		pthread_detach(t);
	}
	return NULL;
}

static struct sb_gateway_model model(const char *name, const char *url)
{
	struct sb_gateway_model m = {0};

	snprintf(m.model.name, sizeof m.model.name, "stub/%s", name);
	snprintf(m.model.upstream, sizeof m.model.upstream, "%s", name);
	snprintf(m.model.provider, sizeof m.model.provider, "stub");
	m.model.in_price = 1000000000ull;
	m.model.out_price = 100000000000ull;
	m.model.cached_price = 500000000ull;
	m.model.max_output = 4096;
	snprintf(m.base_url, sizeof m.base_url, "%s", url);
	m.apis = SB_API_OPENAI | SB_API_ANTHROPIC | SB_API_RESPONSES;
	return m;
}

/* Prints the run's usage events. */
static void print_usage(sb_log *lg)
{
	sb_log_iter *it;
	struct sb_event e;
	msgpack_zone z;
	msgpack_object p;

	if (sb_log_iter_open_run(lg, RUN, 1, &it))
		return;
	while (sb_log_iter_next(it, &e) == SB_OK) {
		if (strcmp(e.type, "agent.usage.updated") || !msgpack_zone_init(&z, 1024))
			continue;
		if (sb_payload_parse(e.payload, e.payload_len, &z, &p) == SB_OK)
			printf("usage %llu %llu %llu %llu%s\n",
			       (unsigned long long)sb_map_u64(&p, "input_tokens", 0),
			       (unsigned long long)sb_map_u64(&p, "output_tokens", 0),
			       (unsigned long long)sb_map_u64(&p, "cached_tokens", 0),
			       (unsigned long long)sb_map_u64(&p, "cost_nusd", 0),
			       sb_map_get(&p, "estimated") ? " estimated" : "");
		msgpack_zone_destroy(&z);
	}
	sb_log_iter_close(it);
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof sa;
	struct sb_gateway_opts o = {0};
	struct sb_gateway_model ms[2];
	struct sb_gateway_run r = {
	    .run = RUN, .stop_on_budget = 1, .models = ms, .nmodels = 2};
	char url[SB_URL_MAX], key[SB_VKEY_MAX], path[4096], c;
	struct sb_budget b = {0};
	struct pair lp;
	sb_gateway *gw = NULL;
	sb_log *lg = NULL;
	pid_t stub = 0;
	pthread_t t;
	int lfd;

	if (argc != 4) {
		fprintf(stderr, "usage: gwbridge SCRIPT_DIR HOME BUDGET_NUSD\n");
		return 2;
	}
	r.budget_nusd = strtoull(argv[3], NULL, 10);
	snprintf(path, sizeof path, "%s/log", argv[2]);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (sb_stub_start(argv[1], &stub, url) || sb_log_open(path, SB_LOG_NOSYNC, &lg) ||
	    ((o.log = lg), sb_gateway_open(&o, &gw))) {
		fprintf(stderr, "gwbridge: %s\n", sb_errmsg(SB_ERR_IO));
		return 1;
	}
	ms[0] = model("harness", url);
	ms[1] = model("long", url);
	if (sb_gateway_run_add(gw, &r, key) ||
	    (lfd = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
	    bind(lfd, (struct sockaddr *)&sa, sizeof sa) || listen(lfd, 64) ||
	    getsockname(lfd, (struct sockaddr *)&sa, &len)) {
		fprintf(stderr, "gwbridge: cannot listen\n");
		return 1;
	}
	lp = (struct pair){.gw = gw, .client = lfd};
	pthread_create(&t, NULL, acceptor, &lp);
	printf("listening %u %s\n", ntohs(sa.sin_port), key);
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
	sb_gateway_run_budget(gw, RUN, &b);
	printf("spent %llu reserved %llu\n", (unsigned long long)b.spent,
	       (unsigned long long)b.reserved);
	print_usage(lg);
	fflush(stdout);
	sb_stub_stop(stub);
	_exit(0); /* bridges may be blocked in poll: no orderly close */
}
