/* sniff.c - the name each request of a connection asks for (see sniff.h).
 *
 * The caller gives back every byte it still holds, so a request is always
 * read from buf[0]; the struct keeps only how far the unit at hand (the
 * ClientHello's records, a request head) has been read, so each byte is
 * looked at a bounded number of times.
 */
#include "netpolicy/sniff.h"

#include <arpa/inet.h>
#include <string.h>
#include <strings.h>

#include "netpolicy/netpolicy.h"

enum {
	M_START,      /* nothing read yet */
	M_TLS,	      /* the ClientHello's records */
	M_HEAD,	      /* an HTTP request line and headers */
	M_BODY,	      /* Content-Length bytes (left) */
	M_CHUNK_SIZE, /* a chunk-size line */
	M_CHUNK_DATA, /* a chunk's bytes (left) */
	M_CHUNK_END,  /* the CRLF after them */
	M_TRAILER,    /* trailer lines up to the empty line */
	M_OPAQUE,     /* unreadable from here on */
	M_BAD,	      /* refused */
};

#define METHOD_MAX 32 /* letters in a request method */

static int is_alpha(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int is_digit(uint8_t c)
{
	return c >= '0' && c <= '9';
}

static int lower(uint8_t c)
{
	return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

static int is_tchar(uint8_t c)
{
	return is_alpha(c) || is_digit(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int hex_value(uint8_t c)
{
	if (is_digit(c))
		return c - '0';
	c = (uint8_t)lower(c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Copies the host name p[0..len) into out (SB_NET_HOST_MAX bytes) in lower
 * case, without one trailing dot: 1 to 253 bytes of letters, digits, '-',
 * '_' and '.', and no empty label. */
static int name_copy(const uint8_t *p, size_t len, char *out)
{
	if (len && p[len - 1] == '.')
		len--;
	if (len < 1 || len > SB_NET_HOST_MAX - 1)
		return sb_seterr(SB_SNIFF_BAD, "a host name of %zu bytes", len);
	for (size_t i = 0; i < len; i++) {
		uint8_t c = p[i];
		if (c == '.' && (i == 0 || i == len - 1 || p[i - 1] == '.'))
			return sb_seterr(SB_SNIFF_BAD, "a host name with an empty label");
		if (!is_alpha(c) && !is_digit(c) && c != '-' && c != '_' && c != '.')
			return sb_seterr(SB_SNIFF_BAD, "byte 0x%02x in a host name", c);
		out[i] = (char)lower(c);
	}
	out[len] = 0;
	return 0;
}

/* Copies the host of a Host value or an authority, "name[:port]" or
 * "[v6][:port]", into out (the address in canonical form). */
static int host_copy(const uint8_t *p, size_t len, char *out)
{
	struct in6_addr a;
	size_t h = 0;

	if (len && p[0] == '[') {
		while (h < len && p[h] != ']')
			h++;
		if (h == len || h > INET6_ADDRSTRLEN)
			return sb_seterr(SB_SNIFF_BAD, "a bad [address] in a host");
		memcpy(out, p + 1, h - 1);
		out[h - 1] = 0;
		if (inet_pton(AF_INET6, out, &a) != 1 ||
		    !inet_ntop(AF_INET6, &a, out, SB_NET_HOST_MAX))
			return sb_seterr(SB_SNIFF_BAD, "a bad [address] in a host");
		h++;
	} else {
		while (h < len && p[h] != ':')
			h++;
		if (name_copy(p, h, out))
			return SB_SNIFF_BAD;
	}
	if (h == len)
		return 0;
	if (p[h] != ':' || len - h < 2 || len - h > 6)
		return sb_seterr(SB_SNIFF_BAD, "a bad port in a host");
	for (h++; h < len; h++)
		if (!is_digit(p[h]))
			return sb_seterr(SB_SNIFF_BAD, "a bad port in a host");
	return 0;
}

/* A reader of the ClientHello across the records holding it, all of them
 * whole and checked. */
struct hs {
	const uint8_t *b;
	size_t at, end; /* the next byte in b; the end of its record */
	size_t left;	/* bytes of the message not yet read */
};

static void hs_start(struct hs *h, const uint8_t *b, size_t len)
{
	h->b = b;
	h->at = 5;
	h->end = 5 + ((size_t)b[3] << 8 | b[4]);
	h->left = len;
}

/* Reads k bytes (up to 4) as a big-endian number; -1 past the message. */
static int hs_get(struct hs *h, size_t k, uint32_t *v)
{
	*v = 0;
	if (h->left < k)
		return -1;
	h->left -= k;
	while (k--) {
		if (h->at == h->end) {
			h->end =
			    h->at + 5 + ((size_t)h->b[h->at + 3] << 8 | h->b[h->at + 4]);
			h->at += 5;
		}
		*v = *v << 8 | h->b[h->at++];
	}
	return 0;
}

static int hs_skip(struct hs *h, size_t k)
{
	uint32_t v;

	if (h->left < k)
		return -1;
	while (k--)
		hs_get(h, 1, &v);
	return 0;
}

/* Reads a server_name extension of len bytes: exactly one host_name. */
static int sni_parse(struct hs *h, uint32_t len, char *host)
{
	uint8_t name[SB_NET_HOST_MAX];
	uint32_t list, type, nlen, c;

	if (hs_get(h, 2, &list) || list + 2 != len || hs_get(h, 1, &type) ||
	    hs_get(h, 2, &nlen) || nlen + 3 != list)
		return sb_seterr(SB_SNIFF_BAD,
				 "server_name does not hold exactly one name");
	if (type != 0)
		return sb_seterr(SB_SNIFF_BAD, "a server_name entry of type %u", type);
	if (nlen < 1 || nlen > sizeof name)
		return sb_seterr(SB_SNIFF_BAD, "a server name of %u bytes", nlen);
	for (uint32_t i = 0; i < nlen; i++) {
		hs_get(h, 1, &c);
		name[i] = (uint8_t)c;
	}
	return name_copy(name, nlen, host);
}

/* Reads the whole ClientHello of s->hello bytes; host gets its name. */
static int hello_parse(struct sb_sniff *s, const uint8_t *b, char *host)
{
	uint8_t seen[65536 / 8];
	uint32_t v, len, type;
	struct hs h;

	hs_start(&h, b, s->hello);
	hs_skip(&h, 4);
	if (hs_get(&h, 2, &v) || v < 0x0301 || v > 0x0304)
		return sb_seterr(SB_SNIFF_BAD, "a ClientHello of version 0x%04x", v);
	if (hs_skip(&h, 32) || hs_get(&h, 1, &len) || len > 32 || hs_skip(&h, len))
		return sb_seterr(SB_SNIFF_BAD, "a bad ClientHello session_id");
	if (hs_get(&h, 2, &len) || len < 2 || len % 2 || hs_skip(&h, len))
		return sb_seterr(SB_SNIFF_BAD, "bad ClientHello cipher_suites");
	if (hs_get(&h, 1, &len) || len < 1 || hs_skip(&h, len))
		return sb_seterr(SB_SNIFF_BAD, "bad ClientHello compression_methods");
	host[0] = 0;
	if (h.left == 0)
		return 0;
	if (hs_get(&h, 2, &len) || len != h.left)
		return sb_seterr(SB_SNIFF_BAD,
				 "ClientHello extensions of the wrong length");
	memset(seen, 0, sizeof seen);
	while (h.left) {
		if (hs_get(&h, 2, &type) || hs_get(&h, 2, &len) || len > h.left)
			return sb_seterr(SB_SNIFF_BAD,
					 "a truncated ClientHello extension");
		if (seen[type / 8] & (1u << type % 8))
			return sb_seterr(SB_SNIFF_BAD, "ClientHello extension %u twice",
					 type);
		seen[type / 8] |= (uint8_t)(1u << type % 8);
		if (type == 0 && sni_parse(&h, len, host))
			return SB_SNIFF_BAD;
		if (type == 0xfe0d)
			s->ech = 1;
		if (type != 0)
			hs_skip(&h, len);
	}
	return 0;
}

static int tls_feed(struct sb_sniff *s, const uint8_t *b, size_t n, size_t *pass,
		    char *host)
{
	struct hs h;
	uint32_t type, len;

	if (n > 5 && b[5] != 1)
		return sb_seterr(SB_SNIFF_BAD, "TLS handshake of type %u first", b[5]);
	while (s->off + 5 <= n && (!s->hello || s->got < s->hello)) {
		const uint8_t *r = b + s->off;
		size_t rlen = (size_t)r[3] << 8 | r[4];

		if (r[0] != 22)
			return sb_seterr(SB_SNIFF_BAD, "TLS record of type %u first",
					 r[0]);
		if (r[1] != 3 || r[2] < 1 || r[2] > 4)
			return sb_seterr(SB_SNIFF_BAD, "TLS record of version %u.%u",
					 r[1], r[2]);
		if (rlen < 1 || rlen > 16384)
			return sb_seterr(SB_SNIFF_BAD, "TLS record of %zu bytes", rlen);
		if (s->off + 5 + rlen > n)
			break;
		s->off += 5 + rlen;
		s->got += rlen;
		if (!s->hello && s->got >= 4) {
			hs_start(&h, b, 4);
			hs_get(&h, 1, &type);
			hs_get(&h, 3, &len);
			s->hello = 4 + (size_t)len;
			if (s->hello + 5 > SB_SNIFF_HOLD)
				return sb_seterr(SB_SNIFF_BAD,
						 "a ClientHello of %zu bytes", s->hello);
		}
	}
	if (!s->hello || s->got < s->hello)
		return SB_SNIFF_MORE;
	if (s->got > s->hello)
		return sb_seterr(SB_SNIFF_BAD,
				 "bytes after the ClientHello in its record");
	if (hello_parse(s, b, host))
		return SB_SNIFF_BAD;
	*pass = s->off;
	s->mode = M_OPAQUE;
	return SB_SNIFF_NAME;
}

/* Finds the end of the line at b[at]: 1 with *end at its CR and *next past
 * its LF; 0 when it does not end within n. Refuses control bytes but TAB,
 * a bare LF and a CR not before LF. */
static int line_get(const uint8_t *b, size_t n, size_t at, size_t *end, size_t *next)
{
	for (size_t i = at; i < n; i++) {
		uint8_t c = b[i];
		if (c == '\r') {
			if (i + 1 == n)
				return 0;
			if (b[i + 1] != '\n')
				return sb_seterr(SB_SNIFF_BAD, "a CR without LF");
			*end = i;
			*next = i + 2;
			return 1;
		}
		if (c == '\n')
			return sb_seterr(SB_SNIFF_BAD, "a bare LF");
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return sb_seterr(SB_SNIFF_BAD, "control byte 0x%02x in a line",
					 c);
	}
	return 0;
}

/* Checks a field line "name: value" in b[at..end) and finds its name and
 * its value without surrounding spaces and tabs. */
static int field_line(const uint8_t *b, size_t at, size_t end, size_t *name_end,
		      size_t *v, size_t *v_end)
{
	size_t c = at;

	if (b[at] == ' ' || b[at] == '\t')
		return sb_seterr(SB_SNIFF_BAD, "an obs-fold header line");
	while (c < end && is_tchar(b[c]))
		c++;
	if (c == at || c == end || b[c] != ':')
		return sb_seterr(SB_SNIFF_BAD, "a header line that is not name: value");
	*name_end = c;
	for (c++; c < end && (b[c] == ' ' || b[c] == '\t'); c++)
		;
	*v = c;
	while (end > c && (b[end - 1] == ' ' || b[end - 1] == '\t'))
		end--;
	*v_end = end;
	return 0;
}

static int is_field(const uint8_t *b, size_t at, size_t name_end, const char *name)
{
	return name_end - at == strlen(name) &&
	       !strncasecmp((const char *)b + at, name, name_end - at);
}

static int request_line(struct sb_sniff *s, const uint8_t *b, size_t end)
{
	size_t m = 0, t;

	while (m < end && is_alpha(b[m]))
		m++;
	if (m == 0 || m > METHOD_MAX || m == end || b[m] != ' ')
		return sb_seterr(SB_SNIFF_BAD, "neither TLS nor an HTTP request");
	if (m == 7 && !strncasecmp((const char *)b, "CONNECT", 7))
		return sb_seterr(SB_SNIFF_BAD, "a CONNECT request");
	for (t = m + 1; t < end && b[t] > 0x20 && b[t] < 0x7f; t++)
		;
	if (t == m + 1 || t == end || b[t] != ' ')
		return sb_seterr(SB_SNIFF_BAD, "a bad request target");
	s->target_at = m + 1;
	s->target_len = t - m - 1;
	if (end - t != 9 || memcmp(b + t + 1, "HTTP/1.", 7) ||
	    (b[t + 8] != '0' && b[t + 8] != '1'))
		return sb_seterr(SB_SNIFF_BAD, "a request that is not HTTP/1.0 or 1.1");
	s->http11 = b[t + 8] == '1';
	return 0;
}

static int header_line(struct sb_sniff *s, const uint8_t *b, size_t at, size_t end)
{
	size_t ne, v, ve;

	if (field_line(b, at, end, &ne, &v, &ve))
		return SB_SNIFF_BAD;
	if (is_field(b, at, ne, "host")) {
		if (s->hosts++)
			return sb_seterr(SB_SNIFF_BAD, "two Host headers");
		s->host_at = v;
		s->host_len = ve - v;
	} else if (is_field(b, at, ne, "content-length")) {
		if (s->lengths++)
			return sb_seterr(SB_SNIFF_BAD, "two Content-Length headers");
		if (ve == v || ve - v > 18)
			return sb_seterr(SB_SNIFF_BAD, "a bad Content-Length");
		for (; v < ve; v++) {
			if (!is_digit(b[v]))
				return sb_seterr(SB_SNIFF_BAD, "a bad Content-Length");
			s->left = s->left * 10 + (b[v] - '0');
		}
	} else if (is_field(b, at, ne, "transfer-encoding")) {
		if (s->chunked++)
			return sb_seterr(SB_SNIFF_BAD, "two Transfer-Encoding headers");
		if (ve - v != 7 || strncasecmp((const char *)b + v, "chunked", 7))
			return sb_seterr(SB_SNIFF_BAD,
					 "a Transfer-Encoding other than chunked");
	} else if (is_field(b, at, ne, "upgrade")) {
		s->upgrade = 1;
	}
	return 0;
}

/* Checks the whole head's Host and target and finds the name. */
static int head_done(struct sb_sniff *s, const uint8_t *b, char *host)
{
	const uint8_t *t = b + s->target_at;
	size_t tl = s->target_len, a = 0, e;
	char named[SB_NET_HOST_MAX];

	if (s->lengths && s->chunked)
		return sb_seterr(SB_SNIFF_BAD,
				 "both Content-Length and Transfer-Encoding");
	if (s->chunked && !s->http11)
		return sb_seterr(SB_SNIFF_BAD, "Transfer-Encoding in HTTP/1.0");
	if (s->http11 && !s->hosts)
		return sb_seterr(SB_SNIFF_BAD, "an HTTP/1.1 request without Host");
	host[0] = 0;
	if (s->hosts && host_copy(b + s->host_at, s->host_len, host))
		return SB_SNIFF_BAD;
	if (tl >= 7 && !strncasecmp((const char *)t, "http://", 7))
		a = 7;
	else if (tl >= 8 && !strncasecmp((const char *)t, "https://", 8))
		a = 8;
	else if (t[0] != '/' && !(tl == 1 && t[0] == '*'))
		return sb_seterr(SB_SNIFF_BAD, "a request target of an unknown form");
	if (!a)
		return 0;
	for (e = a; e < tl && t[e] != '/' && t[e] != '?' && t[e] != '#'; e++)
		;
	if (memchr(t + a, '@', e - a))
		return sb_seterr(SB_SNIFF_BAD, "a request target with userinfo");
	if (host_copy(t + a, e - a, named))
		return SB_SNIFF_BAD;
	if (!s->hosts)
		memcpy(host, named, sizeof named);
	else if (strcmp(host, named))
		return sb_seterr(SB_SNIFF_BAD,
				 "a request target naming another host than Host");
	return 0;
}

/* Readies s for the next request head. */
static void head_reset(struct sb_sniff *s)
{
	s->mode = M_HEAD;
	s->off = s->target_at = s->target_len = s->host_at = s->host_len = 0;
	s->http11 = s->hosts = s->lengths = s->chunked = s->upgrade = 0;
	s->left = 0;
}

/* After a request's body: the next request, or opaque after Upgrade. */
static void body_end(struct sb_sniff *s)
{
	if (s->upgrade)
		s->mode = M_OPAQUE;
	else
		head_reset(s);
}

static int head_feed(struct sb_sniff *s, const uint8_t *b, size_t n, size_t *pass,
		     char *host)
{
	size_t end, next, i;
	int rc;

	if (s->off == 0) { /* refuse what is not a method early */
		for (i = 0; i < n && i <= METHOD_MAX && is_alpha(b[i]); i++)
			;
		if (i > METHOD_MAX || (i < n && (i == 0 || b[i] != ' ')))
			return sb_seterr(SB_SNIFF_BAD, "neither TLS nor an HTTP request");
	}
	while ((rc = line_get(b, n, s->off, &end, &next)) == 1) {
		if (next > SB_SNIFF_HEAD_MAX)
			break;
		if (s->off == 0)
			rc = request_line(s, b, end);
		else if (end == s->off)
			break;
		else
			rc = header_line(s, b, s->off, end);
		if (rc)
			return SB_SNIFF_BAD;
		s->off = next;
	}
	if (rc < 0)
		return SB_SNIFF_BAD;
	if ((rc == 1 && next > SB_SNIFF_HEAD_MAX) || (rc == 0 && n >= SB_SNIFF_HEAD_MAX))
		return sb_seterr(SB_SNIFF_BAD, "a request head over %d bytes",
				 SB_SNIFF_HEAD_MAX);
	if (rc == 0)
		return SB_SNIFF_MORE;
	if (head_done(s, b, host))
		return SB_SNIFF_BAD;
	if (s->chunked)
		s->mode = M_CHUNK_SIZE;
	else if (s->left)
		s->mode = M_BODY;
	else
		body_end(s);
	*pass = next;
	return SB_SNIFF_NAME;
}

/* Reads a chunk-size line b[at..end): hex digits, then nothing or ";ext". */
static int chunk_size(const uint8_t *b, size_t at, size_t end, uint64_t *size)
{
	size_t i;

	*size = 0;
	for (i = at; i < end && hex_value(b[i]) >= 0; i++) {
		if (i - at == 15)
			return sb_seterr(SB_SNIFF_BAD, "a chunk size over 15 digits");
		*size = *size << 4 | (uint64_t)hex_value(b[i]);
	}
	if (i == at || (i < end && b[i] != ';'))
		return sb_seterr(SB_SNIFF_BAD, "a bad chunk-size line");
	return 0;
}

/* Passes body bytes and chunk framing up to the end of what is held or of
 * the body. */
static int body_feed(struct sb_sniff *s, const uint8_t *b, size_t n, size_t *pass)
{
	size_t p = 0, end, next, ne, v, ve;
	int rc = 1;

	while (p < n && rc == 1 && s->mode != M_HEAD && s->mode != M_OPAQUE) {
		switch (s->mode) {
		case M_BODY:
		case M_CHUNK_DATA: {
			size_t take = n - p < s->left ? n - p : (size_t)s->left;
			p += take;
			s->left -= take;
			if (s->left == 0 && s->mode == M_BODY)
				body_end(s);
			else if (s->left == 0)
				s->mode = M_CHUNK_END;
			break;
		}
		case M_CHUNK_END:
			if (b[p] != '\r' || (n - p >= 2 && b[p + 1] != '\n'))
				return sb_seterr(SB_SNIFF_BAD,
						 "chunk data without CRLF after it");
			if (n - p < 2)
				rc = 0;
			else {
				p += 2;
				s->mode = M_CHUNK_SIZE;
			}
			break;
		case M_CHUNK_SIZE:
			if ((rc = line_get(b, n, p, &end, &next)) < 0 ||
			    (rc == 1 && chunk_size(b, p, end, &s->left)))
				return SB_SNIFF_BAD;
			if (rc == 1) {
				p = next;
				s->mode = s->left ? M_CHUNK_DATA : M_TRAILER;
			}
			break;
		default: /* M_TRAILER */
			if ((rc = line_get(b, n, p, &end, &next)) < 0 ||
			    (rc == 1 && end > p && field_line(b, p, end, &ne, &v, &ve)))
				return SB_SNIFF_BAD;
			if (rc == 1 && end == p)
				body_end(s);
			if (rc == 1)
				p = next;
			break;
		}
	}
	*pass = p;
	return p ? SB_SNIFF_PASS : SB_SNIFF_MORE;
}

uint64_t sb_sniff_unread(const struct sb_sniff *s)
{
	return s->mode == M_BODY || s->mode == M_CHUNK_DATA ? s->left : 0;
}

void sb_sniff_skip(struct sb_sniff *s, uint64_t k)
{
	if (k > sb_sniff_unread(s))
		k = sb_sniff_unread(s);
	s->left -= k;
	if (s->left == 0 && s->mode == M_BODY)
		body_end(s);
	else if (s->left == 0 && s->mode == M_CHUNK_DATA)
		s->mode = M_CHUNK_END;
}

void sb_sniff_init(struct sb_sniff *s)
{
	memset(s, 0, sizeof *s);
	s->mode = M_START;
}

int sb_sniff_feed(struct sb_sniff *s, const uint8_t *buf, size_t n, size_t *pass,
		  char *name, size_t name_cap)
{
	char host[SB_NET_HOST_MAX];
	int rc;

	*pass = 0;
	if (s->mode == M_START && n)
		s->mode = buf[0] == 0x16 ? M_TLS : M_HEAD;
	switch (s->mode) {
	case M_START: rc = SB_SNIFF_MORE; break;
	case M_OPAQUE: return SB_SNIFF_OPAQUE;
	case M_BAD: return sb_seterr(SB_SNIFF_BAD, "the connection was refused before");
	case M_TLS: rc = tls_feed(s, buf, n, pass, host); break;
	case M_HEAD: rc = head_feed(s, buf, n, pass, host); break;
	default: rc = body_feed(s, buf, n, pass); break;
	}
	if (rc == SB_SNIFF_MORE && n >= SB_SNIFF_HOLD)
		rc = sb_seterr(SB_SNIFF_BAD, "no decision in %d held bytes",
			       SB_SNIFF_HOLD);
	if (rc == SB_SNIFF_NAME && strlen(host) >= name_cap)
		rc = sb_seterr(SB_SNIFF_BAD, "a host name longer than its buffer");
	if (rc == SB_SNIFF_NAME)
		memcpy(name, host, strlen(host) + 1);
	if (rc == SB_SNIFF_BAD) {
		*pass = 0;
		s->mode = M_BAD;
	}
	return rc;
}
