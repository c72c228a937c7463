/* sys.c - guest system set-up: mounts, kernel modules, loopback, the port. */
#include "vmm/guest/agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int64_t agent_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int mount_one(const char *src, const char *dir, const char *type,
		     unsigned long flags)
{
	mkdir(dir, 0755);
	if (mount(src, dir, type, flags, NULL) && errno != EBUSY)
		return -1;
	return 0;
}

int agent_mount_early(void)
{
	int ret = 0;

	ret |= mount_one("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC);
	ret |= mount_one("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC);
	ret |= mount_one("devtmpfs", "/dev", "devtmpfs", MS_NOSUID);
	return ret ? -1 : 0;
}

int agent_cmdline_has(const char *word)
{
	char buf[4096], *tok, *save;
	ssize_t n;
	int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	for (tok = strtok_r(buf, " \t\n", &save); tok;
	     tok = strtok_r(NULL, " \t\n", &save))
		if (strcmp(tok, word) == 0)
			return 1;
	return 0;
}

int agent_load_modules(struct agent_port *p, const char *list)
{
	char line[512];
	FILE *f = fopen(list, "re");
	int fd, failed = 0;
	size_t n;

	if (!f)
		return 0;
	while (fgets(line, sizeof line, f)) {
		n = strcspn(line, "\r\n");
		line[n] = 0;
		if (!n || line[0] == '#')
			continue;
		fd = open(line, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || (syscall(SYS_finit_module, fd, "", 0) && errno != EEXIST)) {
			agent_log(p, "module %s: %s", line, strerror(errno));
			failed++;
		}
		if (fd >= 0)
			close(fd);
	}
	fclose(f);
	return failed;
}

int agent_lo_up(void)
{
	struct ifreq ifr = {0};
	int ret = -1, fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	strcpy(ifr.ifr_name, "lo");
	if (ioctl(fd, SIOCGIFFLAGS, &ifr))
		goto out;
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr))
		goto out;
	ret = 0;
out:
	close(fd);
	return ret;
}

int agent_wait_path(const char *path, int wait_ms)
{
	int64_t end = agent_now_ms() + wait_ms;
	struct timespec ts = {0, 5 * 1000000};

	while (access(path, F_OK)) {
		if (agent_now_ms() >= end)
			return -1;
		nanosleep(&ts, NULL);
	}
	return 0;
}

/* Looks for the port called name; copies its device name (vport1p1). */
static int port_find(const char *name, char *dev, size_t devlen)
{
	char path[300], buf[128];
	struct dirent *de;
	ssize_t n;
	int fd, found = -1;
	DIR *d = opendir("/sys/class/virtio-ports");

	if (!d)
		return -1;
	while (found && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/sys/class/virtio-ports/%s/name",
			 de->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof buf - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = 0;
		buf[strcspn(buf, "\n")] = 0;
		if (strcmp(buf, name) == 0 && strlen(de->d_name) < devlen) {
			strcpy(dev, de->d_name);
			found = 0;
		}
	}
	closedir(d);
	return found;
}

int agent_port_open(const char *name, int wait_ms, int *fd)
{
	int64_t end = agent_now_ms() + wait_ms;
	struct timespec ts = {0, 5 * 1000000};
	char dev[64], path[80];

	while (port_find(name, dev, sizeof dev)) {
		if (agent_now_ms() >= end) {
			errno = ENOENT;
			return -1;
		}
		nanosleep(&ts, NULL);
	}
	snprintf(path, sizeof path, "/dev/%s", dev);
	if (agent_wait_path(path, (int)(end - agent_now_ms()) + 500))
		return -1;
	*fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
	return *fd < 0 ? -1 : 0;
}

int agent_mkdirs(const char *path)
{
	char buf[4096], *s;

	if (strlen(path) >= sizeof buf) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(buf, path);
	for (s = buf + 1; (s = strchr(s, '/')); s++) {
		*s = 0;
		if (mkdir(buf, 0755) && errno != EEXIST)
			return -1;
		*s = '/';
	}
	return 0;
}

void agent_poweroff(void)
{
	struct timespec ts = {1, 0};

	sync();
	reboot(RB_POWER_OFF);
	/* Only reached when power-off failed: QEMU runs with -no-reboot, so a
	 * reboot request ends it too. */
	reboot(RB_AUTOBOOT);
	for (;;)
		nanosleep(&ts, NULL);
}
