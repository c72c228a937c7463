/* cmd_doctor.c - sanbox doctor: check the host, one line per check. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/settings.h"
#include "engine/error.h"
#include "engine/gateway/models.h"
#include "engine/home.h"
#include "engine/proc.h"
#include "engine/template.h"
#include "netpolicy/nfq.h"
#include "netpolicy/nft.h"
#include "netpolicy/tap.h"
#include "vmm/accel.h"
#include "vmm/qemu.h"

struct report {
	int json, failed;
	json_t *arr;
};

/* Reports one check; detail quotes what tools and files said, so the text
 * view escapes it (and JSON, which cannot hold invalid UTF-8, falls back
 * to the escaped text). */
static void check(struct report *r, const char *name, int ok, const char *detail)
{
	char text[4 * 4300];
	json_t *d;

	if (!ok)
		r->failed++;
	cli_cell(detail, 0, text, sizeof text);
	if (r->json) {
		d = json_string(detail);
		json_array_append_new(r->arr,
				      json_pack("{s:s,s:b,s:o}", "check", name, "ok", ok,
						"detail", d ? d : json_string(text)));
	} else {
		printf("%-5s %-10s %s\n", ok ? "ok" : "FAIL", name, text);
	}
}

/* Runs argv and puts the first line of its output into out; 0 if it ran. */
static int first_line(char *const argv[], char *out, size_t cap)
{
	int status;

	if (sb_proc_run(argv, 10000, out, cap, &status) || !WIFEXITED(status) ||
	    WEXITSTATUS(status))
		return -1;
	out[strcspn(out, "\n")] = 0;
	return 0;
}

static int has_cap_net_admin(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	unsigned long long eff = 0;

	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "CapEff: %llx", &eff) == 1)
			break;
	if (f)
		fclose(f);
	return (eff >> 12) & 1;
}

/* What network mode acl needs besides the capability, read only (the
 * daemon changes the host's forwarding itself, when a run needs it). */
static void net_checks(struct report *r)
{
	char msg[400];
	sb_nft *n = NULL;
	sb_nfq *q = NULL;
	uint16_t num = 0;
	int fwd = -1, rc;

	check(r, "tun", access("/dev/net/tun", R_OK | W_OK) == 0,
	      access("/dev/net/tun", R_OK | W_OK) == 0
		  ? "/dev/net/tun usable"
		  : "/dev/net/tun missing or not usable: network acl needs it (modprobe "
		    "tun)");
	if ((rc = sb_nft_open(&n)) == SB_OK)
		rc = sb_nft_run(n, "list tables", NULL);
	snprintf(msg, sizeof msg, "%s",
		 rc == SB_OK ? "libnftables works" : sb_errmsg(rc));
	sb_nft_close(n);
	check(r, "nftlib", rc == SB_OK, msg);
	/* the judge of TLS connections to granted names (nfq.h) */
	if ((rc = sb_nfq_open(SB_NFQ_ENFORCER_FIRST, SB_NFQ_ENFORCER_COUNT, 1, &q,
			      &num)) == SB_OK)
		snprintf(msg, sizeof msg, "NFQUEUE works (queue %u free)", num);
	else
		snprintf(msg, sizeof msg,
			 "%s: network acl needs NFQUEUE (nfnetlink_queue, xt_NFQUEUE, "
			 "nft_compat)",
			 sb_errmsg(rc));
	sb_nfq_close(q);
	check(r, "nfqueue", rc == SB_OK, msg);
	sb_sysctl_get("/proc/sys/net/ipv4/ip_forward", &fwd);
	check(r, "forwarding", 1,
	      fwd == 1
		  ? "IPv4 forwarding on"
		  : "IPv4 forwarding off: the daemon turns it on for network acl and "
		    "drops forwarded packets that are no run's");
}

int cmd_doctor(int argc, char **argv)
{
	struct report r = {0, 0, NULL};
	char out[512], msg[4300], cache[PATH_MAX + 16], why[256] = "";
	char *qv[] = {(char *)sb_vm_qemu(), "--version", NULL};
	char *qi[] = {"qemu-img", "--version", NULL};
	char *nv[] = {"nft", "--version", NULL};
	char *dv[] = {"qemu-nbd", "--version", NULL};
	char *mv[] = {"mkfs.ext4", "-V", NULL};
	struct sb_settings settings;
	struct sb_template t;
	struct sb_models *ms;
	struct statvfs vfs;
	struct stat st;
	sb_accel accel;
	int fd, rc;

	if ((rc = cli_parse_opts(argc, argv, "doctor", &r.json)) != CLI_GO_ON)
		return rc;
	if (optind != argc)
		return cli_usage("doctor");
	if ((rc = cli_local_only("doctor")))
		return rc;
	r.arr = json_array();
	rc = first_line(qv, out, sizeof out);
	snprintf(msg, sizeof msg, "%s does not run%s", qv[0],
		 getenv("SANBOX_QEMU") && *getenv("SANBOX_QEMU")
		     ? " (SANBOX_QEMU names it): fix SANBOX_QEMU"
		     : ": run 'make deps'");
	check(&r, "qemu", rc == 0, rc == 0 ? out : msg);
	rc = sb_settings_load(cli_home, &settings);
	check(&r, "settings", rc == SB_OK,
	      rc == SB_OK ? "sanboxd.json and the environment's settings are valid"
			  : sb_errmsg(rc));
	rc = first_line(qi, out, sizeof out);
	check(&r, "qemu-img", rc == 0,
	      rc == 0 ? out : "qemu-img not found: run 'make deps'");
	rc = first_line(dv, out, sizeof out);
	check(&r, "qemu-nbd", rc == 0,
	      rc == 0 ? out
		      : "qemu-nbd not found (sanbox fs and cp need it): run 'make deps'");
	rc = first_line(mv, out, sizeof out);
	check(&r, "mkfs.ext4", rc == 0,
	      rc == 0 ? "e2fsprogs present"
		      : "mkfs.ext4 not found (template build needs it): run 'make deps'");
	rc = sb_template_load(cli_home, "shell", &t);
	if (rc == 0)
		snprintf(msg, sizeof msg, "template shell %.16s, kernel %s", t.hash,
			 t.kernel_version);
	check(&r, "template", rc == 0, rc == 0 ? msg : sb_errmsg(rc));
	fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (fd >= 0)
		close(fd);
	if (rc == 0) {
		snprintf(cache, sizeof cache, "%s/cache", cli_home);
		sb_mkdirs(cache, 0700);
		if (sb_accel_resolve(SB_ACCEL_AUTO, t.kernel, t.initrd, cache, &accel,
				     why, sizeof why) == 0)
			snprintf(msg, sizeof msg, "%s%s%s",
				 accel == SB_ACCEL_KVM ? "KVM works" : "TCG",
				 why[0] ? ": " : "", why);
		else
			snprintf(msg, sizeof msg, "cannot start a probe VM: %s",
				 sb_errmsg(SB_ERR_IO));
		check(&r, "accel", 1, msg);
	} else {
		check(&r, "accel", 1,
		      fd >= 0 ? "/dev/kvm opens (not probed: no template)"
			      : "/dev/kvm unusable: runs use TCG (slower)");
	}
	rc = first_line(nv, out, sizeof out);
	check(&r, "nftables", rc == 0, rc == 0 ? out : "nft not found: run 'make deps'");
	check(&r, "net-admin", has_cap_net_admin(),
	      has_cap_net_admin()
		  ? "CAP_NET_ADMIN held"
		  : "no CAP_NET_ADMIN: network mode acl needs root or the capability");
	net_checks(&r);
	if ((rc = sb_models_load(cli_home, &ms)) == SB_OK) {
		snprintf(msg, sizeof msg, "%zu model%s of %zu provider%s; default %s",
			 ms->nmodels, ms->nmodels == 1 ? "" : "s", ms->nproviders,
			 ms->nproviders == 1 ? "" : "s", ms->default_model);
		sb_models_free(ms);
	}
	check(&r, "models", rc == 0, rc == 0 ? msg : sb_errmsg(rc));
	rc = sb_stub_find(msg, sizeof msg);
	check(&r, "model-stub", rc == 0, rc == 0 ? msg : sb_errmsg(rc));
	if (stat(cli_home, &st) == 0) {
		snprintf(msg, sizeof msg, "%s mode %03o", cli_home, st.st_mode & 0777);
		check(&r, "state-dir", (st.st_mode & 077) == 0 && st.st_uid == getuid(),
		      (st.st_mode & 077) == 0
			  ? msg
			  : "state directory is readable by others: chmod 700 it");
		if (statvfs(cli_home, &vfs) == 0) {
			unsigned long long free_mib =
			    (unsigned long long)vfs.f_bavail * vfs.f_frsize >> 20;
			snprintf(msg, sizeof msg, "%llu MiB free", free_mib);
			check(&r, "disk", free_mib >= 2048,
			      free_mib >= 2048
				  ? msg
				  : "less than 2 GiB free in the state directory");
		}
	} else {
		check(&r, "state-dir", 1,
		      "not created yet (the first command creates it)");
	}
	if (r.json)
		cli_print_json(r.arr);
	else
		json_decref(r.arr);
	return r.failed ? 1 : 0;
}
