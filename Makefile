# Sanbox build. `make` builds build/sanboxd and build/sanbox; `make test` runs
# the suite; `make soak` the long failure tests; `make bench` the benchmarks
# (BENCH=group for one group); `make asan` builds and tests with
# AddressSanitizer and UBSan; `make deps` installs packages.

CC      ?= cc
BUILD   ?= build
SAN     ?=
CFLAGS  ?= -O2 -g
override CFLAGS += -std=gnu11 -Wall -Wextra -Werror -Wno-unused-parameter -Wshadow \
           -Wstrict-prototypes -Wmissing-prototypes -D_GNU_SOURCE -I. \
           -I/usr/include/x86_64-linux-gnu -pthread $(SAN)
override LDFLAGS += -pthread -Wl,--as-needed $(SAN)
LIBS    := -llmdb -lmsgpackc -lxxhash -lev -lnng -lmbedtls -lmbedx509 -lmbedcrypto \
           -ljansson -lsodium -lnettle -lcurl -lmicrohttpd -lnftables -lnetfilter_queue -lnftnl -lmnl -lcares -lext2fs -lcom_err -lnbd -lyaml -lm

# Library code: every .c under these folders except program entry points.
LIB_SRCS := $(filter-out engine/daemon/sanboxd.c, \
            $(wildcard engine/*.c engine/*/*.c projections/*.c vmm/*.c netpolicy/*.c audit/*.c))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
CLI_SRCS := $(wildcard cli/*.c) $(wildcard mcp/*.c)
CLI_OBJS := $(CLI_SRCS:%.c=$(BUILD)/obj/%.o)
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
BENCH_SRCS := $(wildcard tests/bench/bench_*.c)
BENCH_BINS := $(BENCH_SRCS:tests/bench/%.c=$(BUILD)/bench/%) \
              $(patsubst tests/bench/%.sh,$(BUILD)/bench/%,$(wildcard tests/bench/bench_*.sh))
TOOL_BINS := $(patsubst tools/%.c,$(BUILD)/sanbox-%,$(wildcard tools/*.c))
FUZZ_BINS := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))

PROGS := $(BUILD)/sanboxd $(BUILD)/sanbox $(TOOL_BINS) \
         $(if $(wildcard vmm/guest/*.c),$(BUILD)/sanbox-agent)

all: $(PROGS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libsanbox.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/sanboxd: $(BUILD)/obj/engine/daemon/sanboxd.o $(BUILD)/libsanbox.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# The CLI alone draws on a terminal (sanbox watch).
CLI_LIBS := $(shell pkg-config --libs ncursesw 2>/dev/null || echo -lncursesw)
$(BUILD)/sanbox: $(CLI_OBJS) $(BUILD)/libsanbox.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) $(CLI_LIBS)

$(BUILD)/sanbox-%: $(BUILD)/obj/tools/%.o $(BUILD)/libsanbox.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# The guest agent is fully static: it is the guest's /init.
GUEST_SRCS := $(wildcard vmm/guest/*.c) vmm/chan.c vmm/beneath.c engine/mpack.c engine/error.c engine/text.c
$(BUILD)/sanbox-agent: $(GUEST_SRCS) $(wildcard vmm/guest/*.h vmm/chan.h vmm/beneath.h)
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O2 -Wall -Wextra -Werror -Wno-unused-parameter -D_GNU_SOURCE \
	    -I. -static -o $@ $(GUEST_SRCS) -lmsgpackc -lxxhash

# The network tests' probe runs in guests and on hosts: static, libc only.
NETPROBE := $(BUILD)/tests/netprobe
$(NETPROBE): tests/guest/netprobe.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O2 -Wall -Wextra -Werror -Wno-unused-parameter -D_GNU_SOURCE \
	    -static -o $@ $<

# The hostile network tests' guest program: static, libc only.
NETHOSTILE := $(BUILD)/tests/nethostile
$(NETHOSTILE): tests/guest/nethostile.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O2 -Wall -Wextra -Werror -Wno-unused-parameter -D_GNU_SOURCE \
	    -static -o $@ $<

# The CLI tests' writer of made-up run records (tests/tools/mkrecord.c).
MKRECORD := $(BUILD)/tests/mkrecord
$(MKRECORD): $(BUILD)/obj/tests/tools/mkrecord.o $(BUILD)/libsanbox.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# The CLI's parts that neither print nor connect (option values, run specs,
# group files, watch's rows; the MCP server's framing and schema checks),
# which unit tests link too.
CLI_PURE := $(addprefix $(BUILD)/obj/cli/,parse.o runspec.o groupfile.o watchrows.o replay.o) \
            $(addprefix $(BUILD)/obj/mcp/,jsonrpc.o schema.o)
$(BUILD)/libsanbox-cli.a: $(CLI_PURE)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(BUILD)/libsanbox-cli.a $(BUILD)/libsanbox.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) -lcmocka

# The run manager's tests drive it through the fake runner (machines as threads).
$(BUILD)/tests/test_runs: $(BUILD)/obj/tests/unit/fakerunner.o

$(BUILD)/bench/%: $(BUILD)/obj/tests/bench/%.o $(BUILD)/libsanbox.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# The SHA-256 benchmark times OpenSSL's libcrypto beside the libraries linked.
$(BUILD)/bench/bench_sha256: LIBS += -lcrypto

# Benchmarks written as scripts are installed beside the compiled ones.
$(BUILD)/bench/%: tests/bench/%.sh
	@mkdir -p $(dir $@)
	cp $< $@ && chmod +x $@

# libFuzzer targets (clang only), each with the sources it tests:
# tests/fuzz/fuzz_NAME.c is built into $(BUILD)/fuzz/fuzz_NAME.
FUZZ_CC := clang -g -O1 -std=gnu11 -D_GNU_SOURCE -I. -fsanitize=fuzzer,address,undefined

# the record decoder
$(BUILD)/fuzz/fuzz_record: tests/fuzz/fuzz_record.c engine/log/record.c engine/error.c engine/payload.c engine/mpack.c engine/text.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -o $@ $^ -lmsgpackc -lxxhash -ljansson -lsodium -lm

# the token check on a remote request's first bytes
$(BUILD)/fuzz/fuzz_token: tests/fuzz/fuzz_token.c engine/daemon/token.c engine/home.c engine/mpack.c engine/error.c engine/sha256.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -o $@ $^ -lmsgpackc -lsodium -lnettle

# the DNS stub's query parser and answers
$(BUILD)/fuzz/fuzz_dns: tests/fuzz/fuzz_dns.c netpolicy/dns.c engine/error.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -o $@ $^

# the name check on a guest's TLS and HTTP requests before they are forwarded
$(BUILD)/fuzz/fuzz_sniff: tests/fuzz/fuzz_sniff.c netpolicy/sniff.c engine/error.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -o $@ $^

# the judge of a TLS connection's segments, a hostile guest on a lossy path
$(BUILD)/fuzz/fuzz_judge: tests/fuzz/fuzz_judge.c netpolicy/judge.c netpolicy/sniff.c engine/error.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -o $@ $^

# the judge of an HTTP connection's segments, a hostile guest on a lossy path
$(BUILD)/fuzz/fuzz_judge_http: tests/fuzz/fuzz_judge_http.c netpolicy/judge.c netpolicy/sniff.c engine/error.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -o $@ $^

# the SP wire decoder, a hostile peer's bytes cut in every way
$(BUILD)/fuzz/fuzz_sp: tests/fuzz/fuzz_sp.c engine/daemon/spwire.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -o $@ $^

# the gateway on a loopback port, for the SDK tests (tests/e2e/gateway_sdk.sh)
$(BUILD)/tests/gwbridge: $(BUILD)/obj/tests/gwbridge.o $(BUILD)/libsanbox.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# the guest channel's frame decoder, a hostile guest's bytes cut in every way
$(BUILD)/fuzz/fuzz_chan: tests/fuzz/fuzz_chan.c vmm/chan.c engine/mpack.c engine/error.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -o $@ $^ -lmsgpackc

# the gateway's meter of a provider's stream, cut in every way
$(BUILD)/fuzz/fuzz_sse: tests/fuzz/fuzz_sse.c engine/gateway/meter.c engine/gateway/models.c engine/gateway/secrets.c engine/home.c engine/proc.c engine/units.c engine/error.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -o $@ $^ -ljansson -lsodium -lmsgpackc -lm

# what the gateway forwards and reserves for a guest's request body
$(BUILD)/fuzz/fuzz_mreq: tests/fuzz/fuzz_mreq.c engine/gateway/meter.c engine/gateway/models.c engine/gateway/secrets.c engine/home.c engine/proc.c engine/units.c engine/error.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -o $@ $^ -ljansson -lsodium -lmsgpackc -lm

# the MCP server's line splitter, message parser and argument checks
$(BUILD)/fuzz/fuzz_mcp: tests/fuzz/fuzz_mcp.c mcp/jsonrpc.c mcp/schema.c engine/error.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -o $@ $^ -ljansson -lm

deps:
	@sh tools/deps.sh

# Builds the built-in templates into the store the tests share.
images: all
	SANBOX_TEMPLATES=$(abspath $(BUILD))/templates $(BUILD)/sanbox template build shell

test: deps-check all $(UNIT_BINS) $(FUZZ_BINS) $(NETPROBE) $(NETHOSTILE) $(BUILD)/tests/gwbridge $(MKRECORD)
	@BUILD=$(BUILD) sh tests/run.sh

deps-check:
	@if [ "$$(id -u)" = 0 ]; then sh tools/deps.sh >/dev/null; fi

# Long runs of failure tests (tests/soak/*.sh), not part of `make test`.
soak: all
	@for t in tests/soak/*.sh; do echo "== $$t"; BUILD=$(BUILD) sh $$t || exit 1; done

bench: all $(BENCH_BINS) $(MKRECORD)
	@BUILD=$(BUILD) BENCH="$(BENCH)" sh tests/bench/run.sh

asan:
	$(MAKE) BUILD=build/asan SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" \
	    CFLAGS="-O1 -g" test

clean:
	rm -rf $(BUILD)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

.PHONY: all deps images test deps-check bench soak asan clean format
.SECONDARY:

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
