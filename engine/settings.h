/* settings.h - the daemon's limits: STATE_DIR/sanboxd.json, optional.
 *
 * A JSON object of sections, each an object of numbers (a few strings);
 * every setting is optional and has a default (SPEC.md, "Settings"). An
 * unknown section or setting, a value of the wrong type or out of its
 * range refuses to start the daemon with a detail naming it, so a typo
 * never leaves a limit at a value the operator did not mean.
 */
#ifndef SB_SETTINGS_H
#define SB_SETTINGS_H

#include <stdint.h>

struct sb_settings {
	/* the local sockets (api.sock, events.sock) */
	uint64_t local_max_conns;
	uint64_t local_max_request; /* bytes */
	uint64_t local_max_inflight;
	uint64_t local_max_buffered; /* bytes */
	double local_handshake_s;
	double local_request_s; /* a request's first byte to its last */
	double local_idle_s;	/* api.sock: no request, no reply in flight */
	/* the remote listener (sanboxd --listen) */
	uint64_t remote_max_conns;
	uint64_t remote_max_conns_per_peer;
	double remote_accept_rate, remote_accept_burst;
	double remote_handshake_s, remote_unauth_s, remote_idle_s;
	uint64_t remote_preauth_bytes;
	uint64_t remote_max_request; /* bytes */
	uint64_t remote_max_denied;
	/* the model gateway */
	uint64_t gateway_max_conns;
	double gateway_header_s, gateway_body_s;
	/* runs */
	uint64_t run_record_quota; /* bytes a run's guest may put in the record */
	uint64_t run_file_max;	   /* largest file content recorded, bytes */
	uint64_t run_files_quota;  /* file content bytes recorded for a run */
	double guest_events_rate, guest_events_burst;
	double snapshot_interval_s; /* between automatic snapshots of a run */
	double snapshots_keep;	    /* automatic snapshots kept per run (0: all) */
	double boot_timeout_s;
	double warm_start; /* 1: runs restore their template's warm image */
	uint64_t capacity_cpus;	      /* vCPUs the local runner's runs may hold at
				       * once (0: the host's CPUs times 4) */
	uint64_t capacity_memory_mib; /* MiB the local runner's runs may hold at
				       * once (0: the host's memory less 1 GiB or
				       * a tenth) */
	/* network mode acl */
	char net_resolver[64]; /* "IP[:PORT]", or "": /etc/resolv.conf */
	char net_subnet4[20], net_subnet6[48];
	double net_ipv6; /* 1: runs get IPv6 too */
	double net_private_answers; /* 1: granted names may resolve to private addresses */
	double net_ttl_min_s, net_ttl_max_s;
	double net_report_s;
};

/* Fills s with the defaults. */
void sb_settings_defaults(struct sb_settings *s);

/* Fills s with the defaults, then with home/sanboxd.json when it exists,
 * then with $SANBOX_BOOT_TIMEOUT when set (seconds, or a duration such as
 * 90s or 3m). Errors: SB_ERR_INVAL (a bad file or value: the detail names
 * the file and the setting), SB_ERR_IO. */
int sb_settings_load(const char *home, struct sb_settings *s);

#endif
