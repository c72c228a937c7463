/* netpolicy.h - a run's network policy, resolved before it starts.
 *
 * From the run spec (SPEC.md, "Network policy"): "network", the mode, and
 * "allow", the grants.
 *   none  the default: the guest has no network device; its one way out is
 *         the model tunnel over its channel.
 *   acl   a per-run tap whose nftables chain drops everything but the
 *         grants (enforced by netpolicy/net.h).
 * A grant is "[tcp/|udp/]HOST:PORT[-PORT]". HOST is a DNS name (letters,
 * digits, '-', '.', optionally "*." in front; kept in lower case), an IPv4
 * address or CIDR block, or an IPv6 one in brackets ("[2001:db8::/32]").
 * The protocol defaults to tcp. A CIDR block must have no host bits set.
 * Nothing here writes events or touches the host's network.
 */
#ifndef SB_NETPOLICY_H
#define SB_NETPOLICY_H

#include <msgpack.h>

#include "engine/mpack.h"
#include <stddef.h>
#include <stdint.h>

#define SB_NET_GRANTS	64  /* grants a run may have */
#define SB_NET_HOST_MAX 254 /* a DNS name's 253 bytes and the NUL */

enum sb_net_mode { SB_NET_NONE, SB_NET_ACL };

struct sb_net_grant {
	char host[SB_NET_HOST_MAX]; /* the name, or the address in canonical form */
	uint8_t family;		    /* 0: a DNS name; 4 or 6: an address or block */
	uint8_t prefix;		    /* the block's length (32 or 128: one address) */
	uint8_t udp;		    /* 1: udp; 0: tcp */
	uint16_t port_lo, port_hi;
};

struct sb_netpolicy {
	enum sb_net_mode mode;
	struct sb_net_grant grants[SB_NET_GRANTS];
	size_t ngrants;
};

/* Parses a mode's name, "none" or "acl", into *out.
 * Errors: SB_ERR_INVAL ("network must be none or acl"). */
int sb_net_mode_parse(const char *s, enum sb_net_mode *out);

/* Parses the n bytes of grant text s into *g.
 * Errors: SB_ERR_INVAL (the detail quotes the grant and says what is wrong). */
int sb_net_grant_parse(const char *s, size_t n, struct sb_net_grant *g);

/* 1 when a and b grant the same (protocol, host or block, ports). */
int sb_net_grant_equal(const struct sb_net_grant *a, const struct sb_net_grant *b);

/* Formats g as the text sb_net_grant_parse reads ("udp/10.0.0.0/8:53") into
 * buf of cap bytes (truncated to fit, always terminated). */
void sb_net_grant_format(const struct sb_net_grant *g, char *buf, size_t cap);

/* Resolves the "network" and "allow" fields of spec into *p, over the
 * defaults dflt (a template's mode and grants; NULL: none): the spec's
 * mode, else dflt's; dflt's grants, then the spec's (one that dflt has is
 * taken once). Errors: SB_ERR_INVAL (an unknown mode, a bad grant, a grant
 * the spec gives twice, grants without mode acl, more than SB_NET_GRANTS). */
int sb_netpolicy_resolve(const msgpack_object *spec, const struct sb_netpolicy *dflt,
			 struct sb_netpolicy *p);

/* Packs "network" (the mode's name) and "allow" (the grants as text) into
 * the caller's map m. Errors are m's (sb_mapw_end). */
void sb_netpolicy_pack(const struct sb_netpolicy *p, sb_mapw *m);

#endif
