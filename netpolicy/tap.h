/* tap.h - a run's tap device on this host and its addresses, and the
 * host's forwarding switches.
 *
 * A tap is persistent (it outlives the daemon that made it, as its QEMU
 * does, which opens it by name) until sb_tap_del. Everything here needs
 * CAP_NET_ADMIN and blocks briefly (ioctls, /proc/sys writes): call it off
 * the daemon's loop.
 */
#ifndef SB_TAP_H
#define SB_TAP_H

#include <stddef.h>

/* Creates the persistent tap name (IFF_TAP, no packet information) with
 * its IPv4 address host4/prefix4 and, when host6 is not "", its IPv6
 * address host6/prefix6 (no duplicate address detection), and sets it up.
 * An earlier tap of that name is taken over. Errors: SB_ERR_UNAVAIL (no
 * /dev/net/tun, or not permitted: the detail says which), SB_ERR_INVAL, SB_ERR_IO. */
int sb_tap_add(const char *name, const char *host4, int prefix4, const char *host6,
	       int prefix6);

/* Gives the existing interface name the addresses sb_tap_add gives a tap
 * (a link made by someone else: a veth of a test or a benchmark) and sets
 * it up. Errors: SB_ERR_INVAL, SB_ERR_IO. */
int sb_link_up(const char *name, const char *host4, int prefix4, const char *host6,
	       int prefix6);

/* Deletes tap name (one that is not there is fine). Errors: SB_ERR_IO. */
int sb_tap_del(const char *name);

/* Calls fn with the name of each network interface whose name starts with
 * prefix. Errors: SB_ERR_IO. */
int sb_tap_each(const char *prefix, void (*fn)(void *ctx, const char *name), void *ctx);

/* Reads the /proc/sys file path (an integer) into *value. Errors:
 * SB_ERR_IO. */
int sb_sysctl_get(const char *path, int *value);

/* Writes value to the /proc/sys file path. Errors: SB_ERR_IO. */
int sb_sysctl_set(const char *path, int value);

#endif
