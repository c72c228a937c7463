/* net.c - the guest's NIC under network acl: its addresses, routes and
 * resolver, as the SPEC (or a RESTORED frame) says (SPEC.md, "Host/guest
 * channel"). The host enforces the grants; this only makes the guest's
 * traffic go where the host expects it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/mpack.h"
#include "vmm/guest/agent.h"

/* linux/ipv6.h's struct, which clashes with netinet/in.h (struct
 * in6_rtmsg comes with net/route.h) */
struct in6_ifreq {
	struct in6_addr ifr6_addr;
	uint32_t ifr6_prefixlen;
	int ifr6_ifindex;
};

/* Copies the string at key of o into buf; 0, or -1 when it is not an
 * address of family af. */
static int addr_field(const msgpack_object *o, const char *key, int af, char *buf,
		      size_t cap)
{
	unsigned char a[16];
	int n = sb_map_str(o, key, buf, cap);

	return n > 0 && (size_t)n < cap && inet_pton(af, buf, a) == 1 ? 0 : -1;
}

const char *agent_net_parse(const msgpack_object *o, struct agent_net *n)
{
	uint64_t p4, p6;
	unsigned m[6];

	memset(n, 0, sizeof *n);
	if (!o)
		return NULL; /* network none: no NIC */
	if (o->type != MSGPACK_OBJECT_MAP)
		return "SPEC net must be a map";
	if (sb_map_str(o, "mac", n->mac, sizeof n->mac) != 17 ||
	    sscanf(n->mac, "%2x:%2x:%2x:%2x:%2x:%2x", &m[0], &m[1], &m[2], &m[3], &m[4],
		   &m[5]) != 6)
		return "SPEC net mac must be xx:xx:xx:xx:xx:xx";
	p4 = sb_map_u64(o, "prefix4", 99);
	if (addr_field(o, "addr4", AF_INET, n->addr4, sizeof n->addr4) ||
	    addr_field(o, "gw4", AF_INET, n->gw4, sizeof n->gw4) || p4 < 8 || p4 > 30)
		return "SPEC net needs addr4, gw4 and prefix4 (8..30)";
	n->prefix4 = (int)p4;
	if (sb_map_get(o, "addr6")) {
		p6 = sb_map_u64(o, "prefix6", 999);
		if (addr_field(o, "addr6", AF_INET6, n->addr6, sizeof n->addr6) ||
		    addr_field(o, "gw6", AF_INET6, n->gw6, sizeof n->gw6) || p6 < 8 ||
		    p6 > 128)
			return "SPEC net addr6 needs gw6 and prefix6 (8..128)";
		n->prefix6 = (int)p6;
	}
	n->on = 1;
	return NULL;
}

/* Finds the interface whose MAC is mac into name (by ioctl: a chrooted
 * agent has no /sys). */
static int iface_find(const char *mac, char name[IFNAMSIZ])
{
	struct if_nameindex *all = if_nameindex(), *i;
	unsigned m[6];
	int s, found = -1;

	if (!all ||
	    sscanf(mac, "%2x:%2x:%2x:%2x:%2x:%2x", &m[0], &m[1], &m[2], &m[3], &m[4],
		   &m[5]) != 6 ||
	    (s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0) {
		if (all)
			if_freenameindex(all);
		return -1;
	}
	for (i = all; found < 0 && i->if_index; i++) {
		struct ifreq ifr = {0};
		const unsigned char *hw = (const unsigned char *)ifr.ifr_hwaddr.sa_data;
		snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", i->if_name);
		if (ioctl(s, SIOCGIFHWADDR, &ifr))
			continue;
		if (hw[0] == m[0] && hw[1] == m[1] && hw[2] == m[2] && hw[3] == m[3] &&
		    hw[4] == m[4] && hw[5] == m[5]) {
			snprintf(name, IFNAMSIZ, "%s", i->if_name);
			found = 0;
		}
	}
	close(s);
	if_freenameindex(all);
	if (found)
		errno = ENODEV;
	return found;
}

static void sysctl_write(const char *ifname, const char *key, const char *v)
{
	char path[128];
	int fd;

	snprintf(path, sizeof path, "/proc/sys/net/ipv6/conf/%s/%s", ifname, key);
	if ((fd = open(path, O_WRONLY | O_CLOEXEC)) >= 0) {
		if (write(fd, v, strlen(v)) < 0) {
			/* IPv6 may be off: nothing to set */
		}
		close(fd);
	}
}

static int v4_up(int s, const char *ifname, const struct agent_net *n)
{
	struct ifreq ifr = {0};
	struct rtentry rt = {0};
	struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;

	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname);
	sin->sin_family = AF_INET;
	inet_pton(AF_INET, n->addr4, &sin->sin_addr);
	if (ioctl(s, SIOCSIFADDR, &ifr)) /* replaces an earlier address */
		return -1;
	sin->sin_addr.s_addr = htonl(~0u << (32 - n->prefix4));
	if (ioctl(s, SIOCSIFNETMASK, &ifr) || ioctl(s, SIOCGIFFLAGS, &ifr))
		return -1;
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(s, SIOCSIFFLAGS, &ifr))
		return -1;
	((struct sockaddr_in *)&rt.rt_dst)->sin_family = AF_INET;
	((struct sockaddr_in *)&rt.rt_genmask)->sin_family = AF_INET;
	sin = (struct sockaddr_in *)&rt.rt_gateway;
	sin->sin_family = AF_INET;
	inet_pton(AF_INET, n->gw4, &sin->sin_addr);
	rt.rt_flags = RTF_UP | RTF_GATEWAY;
	rt.rt_dev = (char *)ifname;
	return ioctl(s, SIOCADDRT, &rt) && errno != EEXIST ? -1 : 0;
}

/* Adds (add 1) or deletes (0) ifname's IPv6 address of n. */
static int v6_addr(int s, int ifindex, const struct agent_net *n, int add)
{
	struct in6_ifreq r = {0};

	inet_pton(AF_INET6, n->addr6, &r.ifr6_addr);
	r.ifr6_prefixlen = (uint32_t)n->prefix6;
	r.ifr6_ifindex = ifindex;
	return ioctl(s, add ? SIOCSIFADDR : SIOCDIFADDR, &r) && errno != EEXIST ? -1 : 0;
}

static int v6_up(const char *ifname, const struct agent_net *old,
		 const struct agent_net *n)
{
	struct in6_rtmsg rt = {0};
	int s, rc = -1, ifindex = (int)if_nametoindex(ifname);

	/* the host gave the address: no duplicate detection, no autoconfig */
	sysctl_write(ifname, "accept_dad", "0");
	sysctl_write(ifname, "accept_ra", "0");
	sysctl_write(ifname, "autoconf", "0");
	if ((s = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	if (old && old->addr6[0] && strcmp(old->addr6, n->addr6))
		v6_addr(s, ifindex, old, 0);
	if (v6_addr(s, ifindex, n, 1))
		goto out;
	inet_pton(AF_INET6, n->gw6, &rt.rtmsg_gateway);
	rt.rtmsg_flags = RTF_UP | RTF_GATEWAY;
	rt.rtmsg_metric = 1;
	rt.rtmsg_ifindex = ifindex;
	rc = ioctl(s, SIOCADDRT, &rt) && errno != EEXIST ? -1 : 0;
out:
	close(s);
	return rc;
}

/* Gives ifname the MAC mac (down for it, as drivers want). */
static int mac_set(int s, const char *ifname, const char *mac)
{
	struct ifreq ifr = {0};
	unsigned m[6];

	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname);
	if (sscanf(mac, "%2x:%2x:%2x:%2x:%2x:%2x", &m[0], &m[1], &m[2], &m[3], &m[4],
		   &m[5]) != 6 ||
	    ioctl(s, SIOCGIFFLAGS, &ifr))
		return -1;
	ifr.ifr_flags &= ~IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr))
		return -1;
	ifr.ifr_hwaddr.sa_family = 1; /* ARPHRD_ETHER */
	for (int i = 0; i < 6; i++)
		ifr.ifr_hwaddr.sa_data[i] = (char)m[i];
	return ioctl(s, SIOCSIFHWADDR, &ifr);
}

int agent_net_up(struct agent_port *p, const struct agent_net *old,
		 const struct agent_net *n)
{
	char ifname[IFNAMSIZ];
	int s, rc, renamed = 0;

	if (!n->on)
		return 0;
	/* a copy of a memory snapshot has its original's NIC, MAC and all */
	if (iface_find(n->mac, ifname)) {
		if (!old || !old->on || iface_find(old->mac, ifname)) {
			agent_log(p, "no network interface with MAC %s%s%s", n->mac,
				  old && old->on ? " nor " : "",
				  old && old->on ? old->mac : "");
			return -1;
		}
		renamed = 1;
	}
	if ((s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	if (renamed && mac_set(s, ifname, n->mac))
		agent_log(p, "%s: keeps MAC %s (cannot take %s: %s)", ifname, old->mac,
			  n->mac, strerror(errno));
	rc = v4_up(s, ifname, n);
	close(s);
	if (rc) {
		agent_log(p, "%s: IPv4 %s via %s: %s", ifname, n->addr4, n->gw4,
			  strerror(errno));
		return -1;
	}
	if (n->addr6[0] && v6_up(ifname, old, n)) {
		agent_log(p, "%s: IPv6 %s via %s: %s", ifname, n->addr6, n->gw6,
			  strerror(errno));
		return -1;
	}
	return 0;
}

int agent_net_resolv(const struct agent_net *n)
{
	char buf[160];
	int fd, len;

	if (!n->on)
		return 0;
	/* the host's stub, on the gateway's addresses: it answers granted
	 * names only */
	len = snprintf(buf, sizeof buf, "nameserver %s\n%s%s%s", n->gw4,
		       n->gw6[0] ? "nameserver " : "", n->gw6, n->gw6[0] ? "\n" : "");
	unlink("/etc/resolv.conf"); /* a symlink there is not followed */
	fd = open("/etc/resolv.conf",
		  O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	if (agent_write_all(fd, buf, (size_t)len)) {
		close(fd);
		return -1;
	}
	return close(fd);
}
