/* bench_layers.c - how long a fork's disk chain gets, with the snapshot
 * store's own code (engine/runs/layers.c) and no VM.
 *
 * A run of 200 agent turns on a 4 GiB disk: each turn writes 64 KiB into
 * the top (qemu-io), then is snapshotted as the local runner does it (the
 * next layer made over the top, as QEMU's blockdev-snapshot-sync makes it,
 * and sb_layers_advance); retention keeps 2 turn snapshots as the daemon's
 * (the oldest past them that no other run reads goes: sb_layers_remove, the
 * offline form of the live merge); every 10 turns a fork is made from the
 * newest snapshot, as sb_runs_from does (sb_layers_fork with the daemon's
 * bound, SB_LAYERS_FORK_CHAIN). Reported: the qcow2 files the fork made at
 * turn 200 reads (its own included, the raw root not), the parent's, and
 * the same with no bound (each fork a layer over the snapshot, as before
 * the bound), and the median time of a fork that made its own base.
 * Prints only lines "bench NAME VALUE UNIT"; errors go to stderr, exit 1.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/error.h"
#include "engine/runs/layers.h"
#include "tests/bench/benchutil.h"
#include "vmm/disk.h"

#define TURNS	   200
#define KEEP	   2
#define FORK_EVERY 10

static char home[PATH_MAX], root[PATH_MAX];

static int die(const char *what, int rc)
{
	fprintf(stderr, "bench_layers: %s: %s\n", what, sb_errmsg(rc));
	exit(1);
}

static void run_cmd(const char *cmd)
{
	if (system(cmd) != 0) {
		fprintf(stderr, "bench_layers: %s failed\n", cmd);
		exit(1);
	}
}

/* The qcow2 files a reader of path reads (path included). */
static unsigned chain_files(const char *path)
{
	char cur[PATH_MAX], next[PATH_MAX];
	unsigned n = 0;

	snprintf(cur, sizeof cur, "%s", path);
	while (sb_disk_backing(cur, next, sizeof next) == SB_OK) {
		n++;
		if (!next[0])
			break;
		memcpy(cur, next, sizeof cur);
	}
	return n;
}

/* One run of TURNS turns with forks every FORK_EVERY; bound: the chain
 * bound of a fork (UINT_MAX: none). Sets the chain lengths at the end and
 * the median time of a flattening fork (0 when none was). */
static void turns(unsigned bound, unsigned *fork_chain, unsigned *parent_chain,
		  double *flat_ms)
{
	char path[SB_LAYER_PATH_MAX], cmd[2 * SB_LAYER_PATH_MAX], fork[16];
	unsigned snaps[TURNS + 1], nsnaps = 0, n, top, forks = 0, nflat = 0;
	double flats[TURNS];
	int rc;

	if ((rc = sb_layers_create(home, "parent", root, "raw", &top)))
		die("layer 0", rc);
	for (unsigned t = 1; t <= TURNS; t++) {
		sb_layers_path(home, "parent", top, path, sizeof path);
		snprintf(cmd, sizeof cmd,
			 "qemu-io -c 'write -P %u %u 64k' '%s' >/dev/null", t % 256,
			 (t % 512) * 65536, path);
		run_cmd(cmd);
		if ((rc = sb_layers_next(home, "parent", &n, path, sizeof path)))
			die("next", rc);
		{
			char old[SB_LAYER_PATH_MAX];
			sb_layers_path(home, "parent", top, old, sizeof old);
			if ((rc = sb_disk_layer_create(old, "qcow2", path)) ||
			    (rc = sb_layers_advance(home, "parent", n)))
				die("snapshot", rc);
		}
		snaps[nsnaps++] = top; /* the frozen layer: snapshot s<top> */
		top = n;
		/* retention: the oldest past KEEP that no other run reads */
		for (unsigned i = 0; nsnaps > KEEP && i < nsnaps - KEEP; i++) {
			char users[1][SB_RUN_MAX];
			size_t count;
			if ((rc = sb_layers_users(home, "parent", snaps[i], users, 1,
						  &count)))
				die("users", rc);
			if (count)
				continue;
			if ((rc = sb_layers_remove(home, "parent", snaps[i])))
				die("remove", rc);
			memmove(&snaps[i], &snaps[i + 1],
				(nsnaps - i - 1) * sizeof snaps[0]);
			nsnaps--;
			break;
		}
		if (t % FORK_EVERY == 0) {
			double t0 = bench_now();
			snprintf(fork, sizeof fork, "fork%u", forks++);
			sb_layers_path(home, "parent", snaps[nsnaps - 1], path,
				       sizeof path);
			if ((rc = sb_layers_fork(home, fork, path, bound, &n)))
				die("fork", rc);
			if (n == 1)
				flats[nflat++] = (bench_now() - t0) * 1000;
			if (t == TURNS) {
				sb_layers_path(home, fork, n, path, sizeof path);
				*fork_chain = chain_files(path);
			}
		}
	}
	sb_layers_path(home, "parent", top, path, sizeof path);
	*parent_chain = chain_files(path);
	*flat_ms = nflat ? bench_median(flats, nflat) : 0;
}

int main(void)
{
	char tmp[] = "/tmp/bench_layers.XXXXXX", cmd[4 * PATH_MAX], store[PATH_MAX];
	unsigned fb, pb, fu, pu;
	double flat_ms, none;

	if (!mkdtemp(tmp))
		return perror("mkdtemp"), 1;
	snprintf(home, sizeof home, "%s/home", tmp);
	snprintf(root, sizeof root, "%s/store/shell/rootfs.img", tmp);
	snprintf(cmd, sizeof cmd, "mkdir -p %s/store/shell %s/runs && truncate -s 4G %s",
		 tmp, home, root);
	run_cmd(cmd);
	snprintf(store, sizeof store, "%s/store", tmp);
	setenv("SANBOX_TEMPLATES", store, 1);
	turns(SB_LAYERS_FORK_CHAIN, &fb, &pb, &flat_ms);
	snprintf(cmd, sizeof cmd, "rm -rf %s/runs && mkdir -p %s/runs", home, home);
	run_cmd(cmd);
	turns(UINT_MAX, &fu, &pu, &none);
	printf("bench snapshot.fork_chain_after_200_turns %u layers\n", fb);
	printf("bench snapshot.parent_chain_after_200_turns %u layers\n", pb);
	printf("bench snapshot.fork_chain_after_200_turns_unbounded %u layers\n", fu);
	printf("bench snapshot.parent_chain_after_200_turns_unbounded %u layers\n", pu);
	printf("bench snapshot.fork_own_base_ms %.0f ms\n", flat_ms);
	bench_rmrf(tmp);
	return 0;
}
