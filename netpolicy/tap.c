/* tap.c - taps, their addresses, forwarding switches (see tap.h). */
#include "netpolicy/tap.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/error.h"

/* linux/ipv6.h's struct in6_ifreq, which clashes with netinet/in.h */
struct in6_ifreq {
	struct in6_addr ifr6_addr;
	uint32_t ifr6_prefixlen;
	int ifr6_ifindex;
};

int sb_sysctl_get(const char *path, int *value)
{
	FILE *f = fopen(path, "re");
	int ok;

	if (!f)
		return sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
	ok = fscanf(f, "%d", value) == 1;
	fclose(f);
	return ok ? SB_OK : sb_seterr(SB_ERR_IO, "%s: not a number", path);
}

int sb_sysctl_set(const char *path, int value)
{
	char buf[16];
	int fd = open(path, O_WRONLY | O_CLOEXEC),
	    n = snprintf(buf, sizeof buf, "%d\n", value);
	int rc = SB_OK;

	if (fd < 0)
		return sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
	if (write(fd, buf, (size_t)n) != n)
		rc = sb_seterr(SB_ERR_IO, "%s: %s", path, strerror(errno));
	close(fd);
	return rc;
}

/* Sets net.ipv4.conf.NAME.KEY (best effort: an old kernel may lack it). */
static void conf_set(const char *name, const char *key, int value)
{
	char path[128];

	snprintf(path, sizeof path, "/proc/sys/net/ipv4/conf/%s/%s", name, key);
	sb_sysctl_set(path, value);
}

/* Opens /dev/net/tun as tap name; persist 1 keeps it after close, 0
 * lets it go. */
static int tun_persist(const char *name, int persist)
{
	struct ifreq ifr = {0};
	int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC), rc = SB_OK;

	if (fd < 0)
		return sb_seterr(errno == ENOENT ? SB_ERR_UNAVAIL : SB_ERR_IO,
				 "/dev/net/tun: %s", strerror(errno));
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
	if (ioctl(fd, TUNSETIFF, &ifr) || ioctl(fd, TUNSETPERSIST, persist))
		rc = sb_seterr(errno == EPERM ? SB_ERR_UNAVAIL : SB_ERR_IO,
			       "tap %s: %s%s", name, strerror(errno),
			       errno == EPERM ? " (needs CAP_NET_ADMIN)" : "");
	close(fd);
	return rc;
}

static int addr4_set(int s, const char *name, const char *addr, int prefix)
{
	struct ifreq ifr = {0};
	struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;

	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
	sin->sin_family = AF_INET;
	if (inet_pton(AF_INET, addr, &sin->sin_addr) != 1)
		return sb_seterr(SB_ERR_INVAL, "not an IPv4 address: %s", addr);
	if (ioctl(s, SIOCSIFADDR, &ifr))
		return sb_seterr(SB_ERR_IO, "%s: address %s: %s", name, addr,
				 strerror(errno));
	sin->sin_addr.s_addr = prefix ? htonl(~0u << (32 - prefix)) : 0;
	if (ioctl(s, SIOCSIFNETMASK, &ifr))
		return sb_seterr(SB_ERR_IO, "%s: netmask: %s", name, strerror(errno));
	return SB_OK;
}

static int addr6_set(const char *name, const char *addr, int prefix)
{
	struct in6_ifreq r = {0};
	char path[128];
	int s, rc = SB_OK;

	if (inet_pton(AF_INET6, addr, &r.ifr6_addr) != 1)
		return sb_seterr(SB_ERR_INVAL, "not an IPv6 address: %s", addr);
	/* the address is the run's alone: no duplicate detection, no
	 * autoconfiguration from what the guest sends */
	snprintf(path, sizeof path, "/proc/sys/net/ipv6/conf/%s/accept_dad", name);
	sb_sysctl_set(path, 0);
	snprintf(path, sizeof path, "/proc/sys/net/ipv6/conf/%s/accept_ra", name);
	sb_sysctl_set(path, 0);
	snprintf(path, sizeof path, "/proc/sys/net/ipv6/conf/%s/autoconf", name);
	sb_sysctl_set(path, 0);
	if (!(r.ifr6_ifindex = (int)if_nametoindex(name)))
		return sb_seterr(SB_ERR_IO, "%s: %s", name, strerror(errno));
	r.ifr6_prefixlen = (unsigned)prefix;
	if ((s = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
		return sb_seterr(SB_ERR_IO, "socket: %s", strerror(errno));
	if (ioctl(s, SIOCSIFADDR, &r) && errno != EEXIST)
		rc = sb_seterr(SB_ERR_IO, "%s: address %s: %s", name, addr,
			       strerror(errno));
	close(s);
	return rc;
}

int sb_link_up(const char *name, const char *host4, int prefix4, const char *host6,
	       int prefix6)
{
	struct ifreq ifr = {0};
	int s, rc, up = 0;

	if (strlen(name) >= IFNAMSIZ)
		return sb_seterr(SB_ERR_INVAL, "interface name too long: %s", name);
	if ((s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
		return sb_seterr(SB_ERR_IO, "socket: %s", strerror(errno));
	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
	if ((rc = addr4_set(s, name, host4, prefix4)))
		goto out;
	if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
		ifr.ifr_flags |= IFF_UP;
		up = ioctl(s, SIOCSIFFLAGS, &ifr) == 0;
	}
	if (!up) {
		rc = sb_seterr(SB_ERR_IO, "%s: up: %s", name, strerror(errno));
		goto out;
	}
	/* the host answers the guest's ARP for the tap's address only */
	conf_set(name, "arp_ignore", 1);
	conf_set(name, "arp_announce", 2);
	if (host6[0])
		rc = addr6_set(name, host6, prefix6);
out:
	close(s);
	return rc;
}

int sb_tap_add(const char *name, const char *host4, int prefix4, const char *host6,
	       int prefix6)
{
	int rc;

	if (strlen(name) >= IFNAMSIZ)
		return sb_seterr(SB_ERR_INVAL, "tap name too long: %s", name);
	if ((rc = tun_persist(name, 1)))
		return rc;
	if ((rc = sb_link_up(name, host4, prefix4, host6, prefix6)))
		tun_persist(name, 0);
	return rc;
}

int sb_tap_del(const char *name)
{
	if (!if_nametoindex(name))
		return SB_OK;
	return tun_persist(name, 0);
}

int sb_tap_each(const char *prefix, void (*fn)(void *ctx, const char *name), void *ctx)
{
	struct if_nameindex *all = if_nameindex(), *i;
	size_t n = strlen(prefix);

	if (!all)
		return sb_seterr(SB_ERR_IO, "interfaces: %s", strerror(errno));
	for (i = all; i->if_index; i++)
		if (!strncmp(i->if_name, prefix, n))
			fn(ctx, i->if_name);
	if_freenameindex(all);
	return SB_OK;
}
