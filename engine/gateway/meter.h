/* meter.h - the model gateway's pure parts: reading and capping requests,
 * reading usage from answers (whole or streamed), and the budget ledger.
 * No I/O here, so each piece is tested on its own (tests/unit/test_meter.c).
 *
 * Three dialects: SB_API_OPENAI (chat completions: usage.prompt_tokens,
 * completion_tokens, prompt_tokens_details.cached_tokens),
 * SB_API_ANTHROPIC (messages: usage.input_tokens, output_tokens,
 * cache_read_input_tokens, cache_creation_input_tokens) and
 * SB_API_RESPONSES (OpenAI responses: usage.input_tokens, output_tokens,
 * input_tokens_details.cached_tokens). Usage is kept as input tokens in
 * all (cached ones among them), cached input tokens, and output tokens.
 * SB_API_COUNT names the requests of Anthropic's count_tokens, which
 * sb_mreq_parse and sb_mreq_finish read and write (model and input only)
 * and nothing meters.
 */
#ifndef SB_METER_H
#define SB_METER_H

#include <jansson.h>
#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/gateway/models.h"

#define SB_API_COUNT 8u /* Anthropic POST /messages/count_tokens: no output */

struct sb_usage {
	uint64_t input, cached, output;
	int known; /* the answer reported its usage */
};

#define SB_CHOICES_MAX	    128		 /* most completions (OpenAI n) in one call */
#define SB_MAX_TOKENS_LIMIT 100000000ull /* largest max_tokens accepted */
#define SB_IMAGE_TOKENS	    6000	 /* input reserved for an image, past its bytes */

/* A model request read from its JSON body: the fields the gateway
 * forwards, checked. */
struct sb_mreq {
	json_t *json; /* the fields to forward, in the body's order (owned) */
	char model[SB_MODEL_NAME_MAX];
	int stream;
	uint64_t max_tokens; /* asked for, each choice; 0 = none given */
	unsigned choices;    /* completions asked for (OpenAI n), 1 to SB_CHOICES_MAX */
	const char *bound;   /* the field max_tokens came in (static), or NULL */
	uint64_t images;     /* images among the content parts (inline data) */
	uint64_t in_bytes;   /* input to reserve, in tokens (sb_mreq_bind) */
};

/* The error "type" of dialect api (SB_API_OPENAI or SB_API_ANTHROPIC) for
 * an HTTP status, as the providers name them in their error bodies. */
const char *sb_api_error_type(unsigned api, unsigned status);

/* Parses a request body of dialect api into rq (free with sb_mreq_free):
 * keeps only the fields of the API's allow-list (SPEC.md, "The gateway"),
 * dropping the others, and checks those the gateway reads. Errors:
 * SB_ERR_INVAL with a detail fit for the HTTP 400 answer (not JSON, a key
 * given twice in any object, a refused field, tool type or content part
 * (a URL or stored file the provider would read, a PDF, audio), both
 * max_tokens and max_completion_tokens, a bad model, messages, stream,
 * bound or n), SB_ERR_NOMEM. */
int sb_mreq_parse(unsigned api, const char *body, size_t len, struct sb_mreq *rq);

/* Binds rq to model m: rewrites it as sb_mreq_finish will, for the
 * largest max_tokens it may be granted (its own, else m's max_output), and
 * sets rq->in_bytes, the input to reserve: one token a byte of the larger
 * of the body received (body_len bytes) and the body forwarded (which
 * may be larger: the upstream name, the bound and stream_options the
 * gateway adds, numbers written again at full precision, 0.1 as
 * 0.10000000000000001), plus SB_IMAGE_TOKENS for each image. Errors:
 * SB_ERR_NOMEM. */
int sb_mreq_bind(unsigned api, struct sb_mreq *rq, const struct sb_model *m,
		 size_t body_len);

/* Rewrites rq for the provider: the upstream model name, every bound of
 * the output capped to max_tokens (the bound field the client used, else
 * max_tokens; Anthropic's thinking.budget_tokens below it), and for OpenAI
 * streams stream_options {"include_usage": true}, so the answer reports
 * its usage; then serialises it into *out (the caller frees). Errors:
 * SB_ERR_NOMEM. */
int sb_mreq_finish(unsigned api, struct sb_mreq *rq, const char *upstream,
		   uint64_t max_tokens, char **out, size_t *len);

/* Checks the betas an Anthropic call asks for (its anthropic-beta header,
 * or NULL): one that changes the price of its tokens (context-1m) is
 * refused. Errors: SB_ERR_INVAL, naming it. */
int sb_betas_check(const char *betas);

/* Frees what rq holds. */
void sb_mreq_free(struct sb_mreq *rq);

/* Reads the usage of a whole (non-stream) answer body into u (u->known
 * stays 0 when the body reports none). */
void sb_usage_from_body(unsigned api, const char *body, size_t len, struct sb_usage *u);

/* Follows a streamed answer (server-sent events) as its bytes pass: usage
 * reported by the stream, and the bytes of generated text and tool
 * arguments, from which output tokens are estimated while it runs. The
 * stream is read as SSE: lines end at CR, LF or CRLF (wherever the bytes
 * are cut), a byte order mark first is dropped, an event's data lines are
 * joined with LF and it is read at the blank line that ends it (one the
 * stream's end cuts is not). Usage is each kind of token (uncached input,
 * cached input, output) at the most any report of the stream gave: a later
 * report never lowers a count (tests/fuzz/fuzz_sse.c checks it so). */
struct sb_sse_meter {
	unsigned api;
	msgpack_sbuffer line; /* the incomplete last line */
	msgpack_sbuffer data; /* the event's data lines so far, each with its LF */
	int cr;		      /* the last line ended with CR: an LF now ends it too */
	int begun;	      /* a line came (a byte order mark is only first) */
	struct sb_usage usage;
	uint64_t out_bytes; /* generated text and tool-argument bytes so far */
	int finished;	    /* the stream said it is complete */
};

/* Starts a meter for dialect api. */
void sb_sse_meter_init(struct sb_sse_meter *m, unsigned api);

/* Feeds len bytes of the stream. Errors: SB_ERR_NOMEM, SB_ERR_TOOBIG (a
 * line, or an event's data, above 1 MiB). */
int sb_sse_meter_feed(struct sb_sse_meter *m, const char *data, size_t len);

/* Output tokens so far: the reported count, else bytes / 4 rounded up. */
uint64_t sb_sse_meter_output(const struct sb_sse_meter *m);

/* Frees the meter's buffers. */
void sb_sse_meter_free(struct sb_sse_meter *m);

/* One run's (or group's) budget. All amounts are nano-USD. The caller serialises access
 * (the gateway holds its lock). */
struct sb_budget {
	uint64_t limit, spent, reserved;
};

#define SB_MIN_OUTPUT 16 /* fewest output tokens a call is granted */

enum sb_grant {
	SB_GRANT_OK = 0,      /* reserved; forward the call */
	SB_GRANT_BUSY = 1,    /* calls in flight hold the rest: retry later (429) */
	SB_GRANT_SPENT = 2,   /* the budget cannot pay for this call (402) */
	SB_GRANT_CHOICES = 3, /* it could pay for one choice, not for all (400) */
};

/* Reserves the worst case of one call to model m before it is forwarded:
 * input counted as one token per byte of the request body (in_bytes: no
 * tokenizer makes more tokens than bytes; the caller adds
 * SB_IMAGE_TOKENS for each image) at the dearer of the input and
 * cached prices, and output at want_out tokens
 * (0: the model's max_output) for each of its choices (1 to
 * SB_CHOICES_MAX), lowered to what the budget left can pay. On
 * SB_GRANT_OK, *out_tokens is the max_tokens to send (each choice) and
 * *reservation what was reserved (to give back to sb_budget_settle). A
 * call is refused when the budget cannot pay its input and SB_MIN_OUTPUT
 * output tokens (or want_out, when smaller) for each choice. */
enum sb_grant sb_budget_reserve(struct sb_budget *b, const struct sb_model *m,
				uint64_t in_bytes, uint64_t want_out, unsigned choices,
				uint64_t *out_tokens, uint64_t *reservation);

/* As sb_budget_reserve, against two budgets at once (a run's, a and its
 * group's, b; b NULL: a alone): the call is granted what both can pay,
 * and its reservation is held in both (each settled with
 * sb_budget_settle). *by_b (may be NULL) is set, when the call is not
 * granted all it asked for or at all, to 1 when b is what limits it. */
enum sb_grant sb_budget_reserve_pair(struct sb_budget *a, struct sb_budget *b,
				     const struct sb_model *m, uint64_t in_bytes,
				     uint64_t want_out, unsigned choices,
				     uint64_t *out_tokens, uint64_t *reservation,
				     int *by_b);

/* Reserves what the call rq (bound to model m by sb_mreq_bind) may cost,
 * against a run's budget a and its group's b (NULL: none), as
 * sb_budget_reserve_pair: its input at rq->in_bytes tokens, its output at
 * its max_tokens (else m's max_output) for each of its choices. On
 * SB_GRANT_OK *granted is the max_tokens to give sb_mreq_finish. The
 * gateway takes a call's body through sb_mreq_parse, sb_mreq_bind,
 * sb_mreq_reserve and sb_mreq_finish, in this order, and forwards what the
 * last writes: together they decide what reaches the provider and what
 * is reserved for it (tests/fuzz/fuzz_mreq.c checks them against the
 * allow-lists). */
enum sb_grant sb_mreq_reserve(struct sb_budget *a, struct sb_budget *b,
			      const struct sb_model *m, const struct sb_mreq *rq,
			      uint64_t *granted, uint64_t *reservation, int *by_b);

/* Ends a call: gives its reservation back and adds its cost. */
void sb_budget_settle(struct sb_budget *b, uint64_t reservation, uint64_t cost);

#endif
