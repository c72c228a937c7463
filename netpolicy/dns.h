/* dns.h - the DNS messages of a run's DNS stub: its queries read, its
 * answers written (RFC 1035, EDNS of RFC 6891).
 *
 * The stub answers a guest's queries for granted names only and forwards
 * nothing. The reader accepts one plain query and nothing else: anything a
 * resolver would not send (a response, another opcode, several questions,
 * records other than one OPT, compression in the question, bytes after the
 * message) is refused. Names are given in presentation form with every
 * byte that is not a letter, digit, '-' or '_' escaped, so a hostile name
 * never reads as a granted one. Pure code: no sockets, no allocation; the
 * caller frames TCP (the 2-byte length) itself.
 */
#ifndef SB_DNS_H
#define SB_DNS_H

#include <stddef.h>
#include <stdint.h>

/* A name in presentation form and its NUL: 255 wire bytes fully escaped
 * fit. */
#define SB_DNS_NAME_MAX 1024

/* Record types. */
#define SB_DNS_A    1
#define SB_DNS_AAAA 28
#define SB_DNS_ANY  255

/* Response codes. */
#define SB_DNS_NOERROR	0
#define SB_DNS_FORMERR	1
#define SB_DNS_SERVFAIL 2
#define SB_DNS_NXDOMAIN 3
#define SB_DNS_NOTIMP	4
#define SB_DNS_REFUSED	5

struct sb_dns_query {
	uint16_t id;
	uint16_t flags;		    /* the query's header flags (RD is 0x0100) */
	char name[SB_DNS_NAME_MAX]; /* presentation form, lower case, escaped,
				     * no trailing dot; "" for the root */
	uint16_t qtype, qclass;
	int edns;	     /* 1: an OPT record was in the additional section */
	uint16_t udp_size;   /* its advertised size (at least 512), else 512 */
	size_t question_len; /* bytes of the question as received */
};

/* An address to answer with. */
struct sb_dns_rr {
	uint16_t type; /* SB_DNS_A (addr[0..4)) or SB_DNS_AAAA (addr[0..16)) */
	uint32_t ttl;
	uint8_t addr[16];
};

/* Parses the n bytes of msg, one DNS query, into *q. The name is in
 * presentation form: letters lowered; a dot inside a label as "\.", a
 * backslash as "\\", every other byte that is not a letter, digit, '-' or
 * '_' as "\DDD" (its value in 3 decimal digits). Accepted: a header with
 * QR 0, opcode QUERY, 1 question, no answer or authority record and at
 * most one additional record, an OPT record with the root name; a question
 * without compression, of labels of 1 to 63 bytes and at most 255 bytes in
 * all; nothing after the message. EDNS options and version are not read.
 * On error *q is unspecified; sb_dns_header_id says whether to answer.
 * Errors: SB_ERR_PROTO (the detail says which rule the message broke). */
int sb_dns_parse_query(const uint8_t *msg, size_t n, struct sb_dns_query *q);

/* Stores in *id the id of the n bytes of msg when they hold a whole header
 * with QR 0: a query refused by sb_dns_parse_query that is answered with
 * sb_dns_formerr. A response is never answered (two servers would answer
 * each other forever). Errors: SB_ERR_PROTO (shorter than a header, or a
 * response). */
int sb_dns_header_id(const uint8_t *msg, size_t n, uint16_t *id);

/* Writes the answer to q into out (cap bytes). msg is the query q was
 * parsed from (its question is echoed as received). The header: q's id,
 * QR 1, opcode QUERY, AA 1, q's RD, RA 0, rcode (0 to 15). Then the
 * question, each of the nrr records of rrs as an answer (its name a
 * pointer to the question's, class IN), and an OPT record (payload size
 * 1232, no options) when q had one. max is the largest message allowed
 * (512 or q's udp_size, at most 1232, over UDP; 65535 over TCP): when the
 * answers do not fit it, none is written and TC is set. Returns the length
 * written, or 0 when it does not fit cap or a record's type is neither
 * SB_DNS_A nor SB_DNS_AAAA. */
size_t sb_dns_answer(const struct sb_dns_query *q, const uint8_t *msg, int rcode,
		     const struct sb_dns_rr *rrs, size_t nrr, size_t max, uint8_t *out,
		     size_t cap);

/* Writes a FORMERR answer with the given id and no question (every count
 * 0) into out (cap bytes). Returns its length, 12, or 0 when cap is less. */
size_t sb_dns_formerr(uint16_t id, uint8_t *out, size_t cap);

/* Returns 1 when the grant grant covers name, else 0. name is a name from
 * sb_dns_parse_query; grant is a lower-case name ("api.example.com"),
 * matched whole, or a wildcard ("*.example.com"), matching every name with
 * at least one label in front of "example.com" ("a.example.com",
 * "b.a.example.com") but not "example.com" itself. A name with an escape
 * matches nothing. */
int sb_dns_name_match(const char *grant, const char *name);

#endif
