/* netpolicy.c - network modes and grants (see netpolicy.h). */
#include "netpolicy/netpolicy.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/error.h"
#include "engine/mpack.h"
#include "engine/spec.h"

static const char *const mode_names[] = {[SB_NET_NONE] = "none", [SB_NET_ACL] = "acl"};

/* Reads a port, 1 to 65535, from the whole of s. */
static int port_parse(const char *s, uint16_t *out)
{
	char *end;
	unsigned long v;

	if (!isdigit((unsigned char)s[0]))
		return -1;
	v = strtoul(s, &end, 10);
	if (*end || v < 1 || v > 65535)
		return -1;
	*out = (uint16_t)v;
	return 0;
}

/* Checks a DNS name (or "*." and one) and stores it in lower case. */
static int name_parse(const char *s, struct sb_net_grant *g)
{
	size_t n = strlen(s), label = 0, start = 0;
	int digits_only = 1;

	if (!strncmp(s, "*.", 2))
		start = 2;
	if (n - start < 1 || n > SB_NET_HOST_MAX - 1)
		return -1;
	for (size_t i = start; i <= n; i++) {
		char c = s[i];
		if (c == '.' || c == 0) {
			if (label == 0 || label > 63 || s[i - 1] == '-')
				return -1;
			label = 0;
			continue;
		}
		if (!isalnum((unsigned char)c) && c != '-')
			return -1;
		if (label == 0) {
			if (c == '-')
				return -1;
			digits_only = 1;
		}
		if (!isdigit((unsigned char)c))
			digits_only = 0;
		label++;
	}
	if (digits_only) /* "10.0.0" is neither an address nor a name */
		return -1;
	for (size_t i = 0; i <= n; i++)
		g->host[i] = (char)tolower((unsigned char)s[i]);
	g->family = 0;
	g->prefix = 0;
	return 0;
}

/* Reads an address with an optional "/len"; refuses host bits past len. */
static int addr_parse(char *s, int family, struct sb_net_grant *g)
{
	unsigned char a[16];
	unsigned max = family == 4 ? 32 : 128, len = max;
	char *slash = strchr(s, '/'), *end;

	if (slash) {
		*slash = 0;
		if (!isdigit((unsigned char)slash[1]))
			return -1;
		unsigned long v = strtoul(slash + 1, &end, 10);
		if (*end || v > max)
			return -1;
		len = (unsigned)v;
	}
	if (inet_pton(family == 4 ? AF_INET : AF_INET6, s, a) != 1)
		return -1;
	for (unsigned bit = len; bit < max; bit++)
		if (a[bit / 8] & (0x80 >> (bit % 8)))
			return -2;
	inet_ntop(family == 4 ? AF_INET : AF_INET6, a, g->host, sizeof g->host);
	g->family = (uint8_t)family;
	g->prefix = (uint8_t)len;
	return 0;
}

int sb_net_grant_parse(const char *s, size_t n, struct sb_net_grant *g)
{
	char buf[SB_NET_HOST_MAX + 32], *host, *ports, *dash;
	unsigned char v4[4];
	int v6 = 0, rc;

	memset(g, 0, sizeof *g);
	if (n == 0 || n >= sizeof buf || memchr(s, 0, n))
		return sb_seterr(SB_ERR_INVAL, "grant '%.*s': not HOST:PORT",
				 (int)(n < 80 ? n : 80), s);
	memcpy(buf, s, n);
	buf[n] = 0;
	host = buf;
	if (!strncmp(host, "udp/", 4) || !strncmp(host, "tcp/", 4)) {
		g->udp = host[0] == 'u';
		host += 4;
	}
	if (host[0] == '[') {
		char *close = strchr(host, ']');
		if (!close || close[1] != ':')
			return sb_seterr(SB_ERR_INVAL,
					 "grant '%.*s': an IPv6 grant is [ADDR]:PORT",
					 (int)n, s);
		*close = 0;
		ports = close + 2;
		host++;
		v6 = 1;
	} else {
		ports = strrchr(host, ':');
		if (!ports)
			return sb_seterr(SB_ERR_INVAL,
					 "grant '%.*s': no port (HOST:PORT)", (int)n, s);
		*ports++ = 0;
		if (strchr(host, ':'))
			return sb_seterr(SB_ERR_INVAL,
					 "grant '%.*s': put an IPv6 address in brackets",
					 (int)n, s);
	}
	dash = strchr(ports, '-');
	if (dash)
		*dash = 0;
	if (port_parse(ports, &g->port_lo) ||
	    port_parse(dash ? dash + 1 : ports, &g->port_hi) || g->port_hi < g->port_lo)
		return sb_seterr(SB_ERR_INVAL,
				 "grant '%.*s': ports are 1-65535, as PORT or LOW-HIGH",
				 (int)n, s);
	if (v6)
		rc = addr_parse(host, 6, g);
	else if (strchr(host, '/') || inet_pton(AF_INET, host, v4) == 1)
		rc = addr_parse(host, 4, g);
	else
		rc = name_parse(host, g);
	if (rc == -2)
		return sb_seterr(SB_ERR_INVAL,
				 "grant '%.*s': the block has host bits set", (int)n, s);
	if (rc)
		return sb_seterr(
		    SB_ERR_INVAL,
		    "grant '%.*s': '%s' is not a host name, address or block", (int)n, s,
		    host);
	return SB_OK;
}

void sb_net_grant_format(const struct sb_net_grant *g, char *buf, size_t cap)
{
	unsigned max = g->family == 6 ? 128 : 32;
	char block[SB_NET_HOST_MAX + 8], ports[16];

	if (g->family && g->prefix < max)
		snprintf(block, sizeof block, "%s/%u", g->host, g->prefix);
	else
		snprintf(block, sizeof block, "%s", g->host);
	if (g->port_lo == g->port_hi)
		snprintf(ports, sizeof ports, "%u", g->port_lo);
	else
		snprintf(ports, sizeof ports, "%u-%u", g->port_lo, g->port_hi);
	snprintf(buf, cap, "%s%s%s%s:%s", g->udp ? "udp/" : "", g->family == 6 ? "[" : "",
		 block, g->family == 6 ? "]" : "", ports);
}

int sb_net_grant_equal(const struct sb_net_grant *a, const struct sb_net_grant *b)
{
	return a->family == b->family && a->prefix == b->prefix && a->udp == b->udp &&
	       a->port_lo == b->port_lo && a->port_hi == b->port_hi &&
	       !strcmp(a->host, b->host);
}

int sb_net_mode_parse(const char *s, enum sb_net_mode *out)
{
	for (size_t i = 0; i < sizeof mode_names / sizeof mode_names[0]; i++) {
		if (!strcmp(s, mode_names[i])) {
			*out = (enum sb_net_mode)i;
			return SB_OK;
		}
	}
	return sb_seterr(SB_ERR_INVAL, "network must be none or acl");
}

int sb_netpolicy_resolve(const msgpack_object *spec, const struct sb_netpolicy *dflt,
			 struct sb_netpolicy *p)
{
	const msgpack_object *allow;
	char mode[8] = "none", g[SB_NET_HOST_MAX + 32];
	size_t first;
	int rc;

	memset(p, 0, sizeof *p);
	if (dflt)
		*p = *dflt;
	first = p->ngrants; /* the spec's own grants start here */
	if (dflt && dflt->mode == SB_NET_ACL)
		snprintf(mode, sizeof mode, "acl");
	if ((rc = sb_spec_str(spec, "network", mode, sizeof mode)) ||
	    (rc = sb_spec_strs(spec, "allow", SB_NET_GRANTS, &allow)))
		return rc;
	if ((rc = sb_net_mode_parse(mode, &p->mode)))
		return rc;
	for (uint32_t i = 0; allow && i < allow->via.array.size; i++) {
		const msgpack_object *a = &allow->via.array.ptr[i];
		struct sb_net_grant n;
		size_t k;
		if ((rc = sb_net_grant_parse(a->via.str.ptr, a->via.str.size, &n)))
			return rc;
		for (k = 0; k < p->ngrants && !sb_net_grant_equal(&p->grants[k], &n); k++)
			;
		sb_net_grant_format(&n, g, sizeof g);
		if (k >= first && k < p->ngrants)
			return sb_seterr(SB_ERR_INVAL, "grant %s is given twice",
					 g);
		if (k < p->ngrants)
			continue; /* the template's already */
		if (p->ngrants == SB_NET_GRANTS)
			return sb_seterr(SB_ERR_INVAL, "more than %d grants",
					 SB_NET_GRANTS);
		p->grants[p->ngrants++] = n;
	}
	if (p->ngrants && p->mode != SB_NET_ACL)
		return sb_seterr(SB_ERR_INVAL, "allow grants need network acl");
	return SB_OK;
}

void sb_netpolicy_pack(const struct sb_netpolicy *p, sb_mapw *m)
{
	char grant[SB_NET_HOST_MAX + 32];
	msgpack_packer *pk;

	sb_mapw_str(m, "network", mode_names[p->mode]);
	pk = sb_mapw_key(m, "allow");
	msgpack_pack_array(pk, p->ngrants);
	for (size_t i = 0; i < p->ngrants; i++) {
		sb_net_grant_format(&p->grants[i], grant, sizeof grant);
		sb_pack_str(pk, grant);
	}
}
