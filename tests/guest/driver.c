/* driver.c - host side of the guest channel, for tests/e2e/guest_boot.sh.
 *
 * driver -s SOCK [-a ARG]... [-e K=V]... [-i PATH[:SIZE]=TEXT]... [-t PORT]
 *        [-k SIG:MS] [-T SECONDS] [-G] -- QEMU-COMMAND...
 *   Listens on the unix socket SOCK, starts QEMU (which connects to it),
 *   answers HELLO with a SPEC (argv, env, inputs, tunnel_port) and the
 *   inputs' INPUT frames (-i PATH[:SIZE]=TEXT: SIZE, when given, is the size
 *   the SPEC declares, a lie when it is not TEXT's length), prints every
 *   frame it gets as one line on stdout, acknowledges each numbered one
 *   (ACK {seq}), answers tunnel streams with an
 *   HTTP/1.0 response "tunnel-ok <request line>", and (-k) sends SIGNAL SIG
 *   MS milliseconds after harness.input.ready. -G sends bad frames: garbage
 *   before the SPEC, a frame of length 0 after harness.input.ready.
 *   Exits 0 when DONE came and
 *   QEMU then exited by itself, 1 otherwise; -T bounds the whole run (60 s).
 * driver --xxh3 FILE
 *   Prints the XXH3_64 of FILE's content as 16 lowercase hex digits.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "engine/error.h"
#include "engine/mpack.h"
#include "vmm/chan.h"

#define MAX_ITEMS   64
#define MAX_STREAMS 64

struct stream {
	uint64_t id;
	char req[8192];
	size_t len;
	int answered;
};

static struct {
	const char *argv[MAX_ITEMS], *env[MAX_ITEMS], *inputs[MAX_ITEMS];
	int nargv, nenv, ninputs;
	unsigned tunnel_port;
	int kill_sig, kill_ms;
	int garbage;
	int fd;
	struct stream streams[MAX_STREAMS];
	int nstreams;
	uint64_t out_bytes[2], out_events;
	int64_t out_first, out_last;
} d;

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void send_sb(msgpack_sbuffer *sb)
{
	size_t off = 0;
	ssize_t n;

	while (off < sb->size) {
		n = write(d.fd, sb->data + off, sb->size - off);
		if (n <= 0) {
			fprintf(stderr, "driver: write: %s\n", strerror(errno));
			return;
		}
		off += (size_t)n;
	}
}

static void pack_str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str_with_body(pk, s, strlen(s));
}

static void send_raw(const void *data, size_t len)
{
	msgpack_sbuffer sb = {.size = len, .data = (char *)data};

	send_sb(&sb);
}

/* Frames a hostile or broken host could send: each must be skipped. */
static void send_garbage(void)
{
	static const char bad_payload[] =
	    "\0\0\0\5\x93\x0c\x00\xc0\xc1"; /* kind 12 + junk */
	static const char not_msgpack[] = "\0\0\0\3\xc1\xc1\xc1";
	static const char huge_array[] = "\0\0\0\5\xdd\xff\xff\xff\xff";
	static const char sig_nil[] = "\0\0\0\4\x93\x08\x00\xc0"; /* SIGNAL nil */
	static const char data_unknown[] = "\0\0\0\6\x93\x06\x63\xc4\x01x"; /* DATA 99 */
	static const char close_unknown[] = "\0\0\0\4\x93\x07\x4d\xc0";	    /* CLOSE 77 */

	send_raw(bad_payload, 9);
	send_raw(not_msgpack, 7);
	send_raw(huge_array, 9);
	send_raw(sig_nil, 8);
	send_raw(data_unknown, 10);
	send_raw(close_unknown, 8);
}

/* Splits input i ("PATH[:SIZE]=TEXT") into its path, declared size and text. */
static void input_parts(int i, size_t *plen, unsigned long long *size, const char **text)
{
	const char *eq = strchr(d.inputs[i], '='), *colon;

	*text = eq + 1;
	*size = strlen(eq + 1);
	*plen = (size_t)(eq - d.inputs[i]);
	colon = memchr(d.inputs[i], ':', *plen);
	if (colon) {
		*size = strtoull(colon + 1, NULL, 10);
		*plen = (size_t)(colon - d.inputs[i]);
	}
}

static void send_spec(void)
{
	unsigned long long size;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	const char *text;
	size_t start, plen;
	int i;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	sb_chan_begin(&sb, &pk, SB_CHAN_SPEC, 0, &start);
	msgpack_pack_map(&pk, 5);
	pack_str(&pk, "argv");
	msgpack_pack_array(&pk, d.nargv);
	for (i = 0; i < d.nargv; i++)
		pack_str(&pk, d.argv[i]);
	pack_str(&pk, "env");
	msgpack_pack_array(&pk, d.nenv);
	for (i = 0; i < d.nenv; i++)
		pack_str(&pk, d.env[i]);
	pack_str(&pk, "cwd");
	pack_str(&pk, "/workspace");
	pack_str(&pk, "inputs");
	msgpack_pack_array(&pk, d.ninputs);
	for (i = 0; i < d.ninputs; i++) {
		input_parts(i, &plen, &size, &text);
		msgpack_pack_map(&pk, 3);
		pack_str(&pk, "path");
		msgpack_pack_str_with_body(&pk, d.inputs[i], plen);
		pack_str(&pk, "size");
		msgpack_pack_uint64(&pk, size);
		pack_str(&pk, "mode");
		msgpack_pack_uint32(&pk, 0644);
	}
	pack_str(&pk, "tunnel_port");
	msgpack_pack_uint32(&pk, d.tunnel_port);
	if (sb_chan_end(&sb, start))
		fprintf(stderr, "driver: spec: %s\n", sb_errmsg(SB_ERR_PROTO));
	for (i = 0; i < d.ninputs; i++) {
		input_parts(i, &plen, &size, &text);
		if (sb_chan_pack_input(&sb, (uint32_t)i, text, strlen(text)))
			fprintf(stderr, "driver: input: %s\n", sb_errmsg(SB_ERR_NOMEM));
	}
	send_sb(&sb);
	msgpack_sbuffer_destroy(&sb);
}

static void send_simple(int kind, uint64_t stream, const void *data, size_t len)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	size_t start;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	sb_chan_begin(&sb, &pk, kind, kind == SB_CHAN_ACK ? 0 : stream, &start);
	if (kind == SB_CHAN_DATA) {
		msgpack_pack_bin_with_body(&pk, data, len);
	} else if (kind == SB_CHAN_SIGNAL) {
		msgpack_pack_map(&pk, 1);
		pack_str(&pk, "signal");
		msgpack_pack_uint32(&pk, (uint32_t)d.kill_sig);
	} else if (kind == SB_CHAN_ACK) {
		msgpack_pack_map(&pk, 1);
		pack_str(&pk, "seq");
		msgpack_pack_uint64(&pk, stream);
		stream = 0;
	} else {
		msgpack_pack_nil(&pk);
	}
	sb_chan_end(&sb, start);
	send_sb(&sb);
	msgpack_sbuffer_destroy(&sb);
}

/* Prints a msgpack object compactly on stdout. */
static void print_obj(const msgpack_object *o)
{
	static char buf[1 << 17];

	msgpack_object_print_buffer(buf, sizeof buf, *o);
	fputs(buf, stdout);
}

static void on_data(uint64_t id, const msgpack_object *body)
{
	static char resp[9000];
	struct stream *s = NULL;
	char line[200];
	int i, n;

	for (i = 0; i < d.nstreams; i++)
		if (d.streams[i].id == id)
			s = &d.streams[i];
	if (!s || body->type != MSGPACK_OBJECT_BIN || s->answered)
		return;
	if (body->via.bin.size > sizeof s->req - 1 - s->len)
		return;
	memcpy(s->req + s->len, body->via.bin.ptr, body->via.bin.size);
	s->len += body->via.bin.size;
	s->req[s->len] = 0;
	if (!strstr(s->req, "\r\n\r\n"))
		return;
	snprintf(line, sizeof line, "%.*s", (int)strcspn(s->req, "\r\n"), s->req);
	printf("REQUEST %llu %s\n", (unsigned long long)id, line);
	n = snprintf(
	    resp, sizeof resp,
	    "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n\r\n"
	    "tunnel-ok %s\n",
	    strlen(line) + 11, line);
	send_simple(SB_CHAN_DATA, id, resp, (size_t)n);
	send_simple(SB_CHAN_CLOSE, id, NULL, 0);
	s->answered = 1;
}

/* Adds an agent.output payload to the totals printed at the end. */
static void count_output(const msgpack_object *payload)
{
	const msgpack_object *st = sb_map_get(payload, "stream");
	const msgpack_object *data = sb_map_get(payload, "data");

	if (!st || !data || st->type != MSGPACK_OBJECT_STR ||
	    data->type != MSGPACK_OBJECT_STR)
		return;
	d.out_bytes[st->via.str.size == 6 && !memcmp(st->via.str.ptr, "stderr", 6)] +=
	    data->via.str.size;
	if (!d.out_events++)
		d.out_first = now_ms();
	d.out_last = now_ms();
}

/* Handles one frame; returns 1 on DONE. */
static int on_frame(const struct sb_chan_frame *f, int64_t t0, int64_t *kill_at)
{
	const msgpack_object *o, *type;

	if (sb_chan_numbered(f->kind)) /* taken: the agent may forget it */
		send_simple(SB_CHAN_ACK, f->stream, NULL, 0);
	switch (f->kind) {
	case SB_CHAN_HELLO:
		printf("HELLO ms=%lld ", (long long)(now_ms() - t0));
		print_obj(&f->body);
		putchar('\n');
		if (d.garbage)
			send_garbage();
		send_spec();
		break;
	case SB_CHAN_EVENT:
		type = sb_map_get(&f->body, "type");
		o = sb_map_get(&f->body, "payload");
		printf("EVENT %.*s ",
		       type && type->type == MSGPACK_OBJECT_STR ? (int)type->via.str.size
								: 1,
		       type && type->type == MSGPACK_OBJECT_STR ? type->via.str.ptr
								: "?");
		if (o)
			print_obj(o);
		putchar('\n');
		if (type && type->via.str.size == 12 &&
		    !memcmp(type->via.str.ptr, "agent.output", 12))
			count_output(o);
		if (type && type->via.str.size == 19 &&
		    !memcmp(type->via.str.ptr, "harness.input.ready", 19)) {
			if (d.kill_sig)
				*kill_at = now_ms() + d.kill_ms;
			if (d.garbage)
				send_raw("\0\0\0\0", 4); /* framing lost */
		}
		break;
	case SB_CHAN_EVENT_JSON:
		if (f->body.type == MSGPACK_OBJECT_BIN) {
			printf("EVENT_JSON %.*s\n", (int)f->body.via.bin.size,
			       f->body.via.bin.ptr);
		} else { /* a line the agent dropped: {too_long, head} */
			printf("DROPPED_LINE ");
			print_obj(&f->body);
			putchar('\n');
		}
		break;
	case SB_CHAN_OPEN:
		printf("OPEN %llu ", (unsigned long long)f->stream);
		print_obj(&f->body);
		putchar('\n');
		if (d.nstreams < MAX_STREAMS)
			d.streams[d.nstreams++] = (struct stream){.id = f->stream};
		break;
	case SB_CHAN_DATA:
		printf("DATA %llu %u\n", (unsigned long long)f->stream,
		       f->body.type == MSGPACK_OBJECT_BIN ? f->body.via.bin.size : 0);
		on_data(f->stream, &f->body);
		break;
	case SB_CHAN_CLOSE: printf("CLOSE %llu\n", (unsigned long long)f->stream); break;
	case SB_CHAN_LOG:
		o = sb_map_get(&f->body, "message");
		printf("LOG %.*s\n",
		       o && o->type == MSGPACK_OBJECT_STR ? (int)o->via.str.size : 0,
		       o && o->type == MSGPACK_OBJECT_STR ? o->via.str.ptr : "");
		break;
	case SB_CHAN_DONE:
		printf("DONE ms=%lld ", (long long)(now_ms() - t0));
		print_obj(&f->body);
		putchar('\n');
		fflush(stdout);
		return 1;
	default: printf("UNEXPECTED %s\n", sb_chan_kind_name(f->kind));
	}
	fflush(stdout);
	return 0;
}

static int xxh3_file(const char *path)
{
	static char buf[1 << 20];
	FILE *f = fopen(path, "rb");
	size_t n;

	if (!f)
		return 1;
	n = fread(buf, 1, sizeof buf, f);
	fclose(f);
	printf("%016llx\n", (unsigned long long)XXH3_64bits(buf, n));
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	const char *sock = NULL;
	int64_t t0, end, kill_at = 0, done_at = 0;
	int lfd, opt, timeout_s = 60, done = 0, status = -1, ret = 1;
	sb_chan_reader *rd;
	struct sb_chan_frame f;
	char buf[65536];
	pid_t qemu;
	ssize_t n;

	if (argc == 3 && !strcmp(argv[1], "--xxh3"))
		return xxh3_file(argv[2]);
	while ((opt = getopt(argc, argv, "s:a:e:i:t:k:T:G")) != -1) {
		switch (opt) {
		case 's': sock = optarg; break;
		case 'a':
			if (d.nargv < MAX_ITEMS)
				d.argv[d.nargv++] = optarg;
			break;
		case 'e':
			if (d.nenv < MAX_ITEMS)
				d.env[d.nenv++] = optarg;
			break;
		case 'i':
			if (!strchr(optarg, '=') || d.ninputs >= MAX_ITEMS)
				return 2;
			d.inputs[d.ninputs++] = optarg;
			break;
		case 't': d.tunnel_port = (unsigned)atoi(optarg); break;
		case 'k':
			if (sscanf(optarg, "%d:%d", &d.kill_sig, &d.kill_ms) != 2)
				return 2;
			break;
		case 'T': timeout_s = atoi(optarg); break;
		case 'G': d.garbage = 1; break;
		default: return 2;
		}
	}
	if (!sock || optind >= argc || strlen(sock) >= sizeof sa.sun_path) {
		fprintf(stderr, "usage: driver -s SOCK [-a ARG]... -- QEMU...\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	strcpy(sa.sun_path, sock);
	unlink(sock);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) || listen(lfd, 1)) {
		perror("driver: listen");
		return 2;
	}
	t0 = now_ms();
	end = t0 + (int64_t)timeout_s * 1000;
	qemu = fork();
	if (qemu == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* QEMU never outlives the driver */
		execvp(argv[optind], argv + optind);
		perror("driver: exec qemu");
		_exit(127);
	}
	printf("QEMU_START pid=%d\n", (int)qemu);
	fflush(stdout);
	struct pollfd p = {.fd = lfd, .events = POLLIN};
	if (poll(&p, 1, timeout_s * 1000) <= 0) {
		printf("FAIL no connection from QEMU\n");
		goto out;
	}
	d.fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (d.fd < 0 || sb_chan_reader_new(&rd))
		goto out;
	while (!done && now_ms() < end) {
		int wait = 200;

		if (kill_at && now_ms() >= kill_at) {
			printf("SIGNAL %d\n", d.kill_sig);
			send_simple(SB_CHAN_SIGNAL, 0, NULL, 0);
			kill_at = 0;
		}
		p = (struct pollfd){.fd = d.fd, .events = POLLIN};
		if (poll(&p, 1, wait) <= 0)
			continue;
		n = read(d.fd, buf, sizeof buf);
		if (n <= 0) {
			printf("EOF\n");
			break;
		}
		sb_chan_reader_feed(rd, buf, (size_t)n);
		for (;;) {
			int r = sb_chan_reader_next(rd, &f);

			if (r == SB_END)
				break;
			if (r) {
				printf("BADFRAME %s\n", sb_errmsg(r));
				if (r != SB_ERR_PROTO)
					goto out;
				continue;
			}
			if (on_frame(&f, t0, &kill_at))
				done = 1;
		}
	}
	printf("OUTPUT stdout=%llu stderr=%llu events=%llu span_ms=%lld\n",
	       (unsigned long long)d.out_bytes[0], (unsigned long long)d.out_bytes[1],
	       (unsigned long long)d.out_events, (long long)(d.out_last - d.out_first));
	done_at = now_ms();
	/* QEMU must end by itself once the guest powered off. */
	while (now_ms() < done_at + 15000 && now_ms() < end + 15000) {
		if (waitpid(qemu, &status, WNOHANG) == qemu) {
			printf("QEMU_EXIT code=%d after_done_ms=%lld total_ms=%lld\n",
			       WIFEXITED(status) ? WEXITSTATUS(status)
						 : 128 + WTERMSIG(status),
			       (long long)(now_ms() - done_at),
			       (long long)(now_ms() - t0));
			qemu = 0;
			ret = done ? 0 : 1;
			break;
		}
		usleep(20000);
	}
out:
	if (qemu > 0) {
		printf("QEMU_KILLED\n");
		kill(qemu, SIGKILL);
		waitpid(qemu, NULL, 0);
	}
	fflush(stdout);
	unlink(sock);
	return ret;
}
