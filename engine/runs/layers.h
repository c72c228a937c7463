/* layers.h - the local runner's snapshot store: a run's disk layers, under
 * home/runs/RUN/.
 *
 *   layers/N.qcow2  the run's qcow2 layers, N = 0, 1, ... in the order they
 *                   were made. The highest is the top: the layer the
 *                   machine writes. A snapshot freezes the top (mode 0444)
 *                   and the machine goes on in a new one, so snapshot sN of
 *                   a run is its frozen layer N.
 *   disk.qcow2      a symbolic link to the top (layers/N.qcow2), for
 *                   readers of the run's disk.
 *
 * Each layer's backing file (an absolute path in its qcow2 header) is the
 * layer it was made on: a layer of the same run (the one below, or an
 * older snapshot's for a resume), a frozen layer of another run (a fork),
 * or the template's root file system. Layers are never written once
 * frozen; one is deleted only when no other run's chain reads it.
 *
 * These calls touch files only and may block (qemu-img): call them off
 * the loop, or where a short wait is fine (a qcow2 header read). None
 * keeps state: the files are the state.
 */
#ifndef SB_LAYERS_H
#define SB_LAYERS_H

#include <limits.h>
#include <stddef.h>

#include "engine/log/event.h"
#include "engine/runs/space.h"

#define SB_LAYER_PATH_MAX (PATH_MAX + 64)

/* Writes the path of run's layer n into buf (cap >= SB_LAYER_PATH_MAX).
 * Errors: SB_ERR_TOOBIG. */
int sb_layers_path(const char *home, const char *run, unsigned n, char *buf, size_t cap);

/* Sets *top to the number of run's top layer. Errors: SB_ERR_NOTFOUND (no
 * layer: the run never had a disk here, or its directory is gone),
 * SB_ERR_IO. */
int sb_layers_top(const char *home, const char *run, unsigned *top);

/* Makes run's next layer over base (format "raw" or "qcow2": a template's
 * root file system, or a frozen layer) and points disk.qcow2 at it: layer
 * 0 of a new run or a fork, or a new top over a snapshot for a resume.
 * *n gets its number. Errors: those of sb_disk_layer_create, SB_ERR_IO. */
int sb_layers_create(const char *home, const char *run, const char *base,
		     const char *base_fmt, unsigned *n);

#define SB_LAYERS_CHAIN_LIMIT 4096 /* files in a chain followed at most */
#define SB_LAYERS_FORK_CHAIN  16   /* qcow2 files a fork reads its parent through, at most */

/* Makes the layers of a new run (a fork) over base, a frozen layer of
 * another run: as sb_layers_create when base's chain (base, its backing
 * file, ..., the bottom: a root file system or a layer without a backing
 * file) holds at most chain_max qcow2 files; else run gets its own base
 * first, layer 0, which reads the bottom directly and holds the data of
 * the chain's layers above it (qemu-img rebase, safe mode: it reads what
 * base reads; its size is that of the data they hold), frozen, and the
 * run's layer 1 over it. So a fork reads at most chain_max + 1 layers and
 * none of its parent's when it is long; the parent's retention can merge
 * them. *n gets the top's number. Errors: those of sb_layers_check,
 * sb_layers_create and sb_disk_layer_rebase, SB_ERR_EXISTS (run has
 * layers), SB_ERR_CORRUPT (a chain of more than SB_LAYERS_CHAIN_LIMIT). */
int sb_layers_fork(const char *home, const char *run, const char *base, unsigned chain_max,
		   unsigned *n);

/* Writes into path the file of the layer a live machine's snapshot makes
 * (top + 1; QEMU creates it), and its number into *n. Errors: those of
 * sb_layers_top, SB_ERR_EXISTS (a file is in the way: an earlier snapshot
 * failed half-way; it is removed first, so this means it could not be). */
int sb_layers_next(const char *home, const char *run, unsigned *n, char *path,
		   size_t cap);

/* After QEMU made layer n over the old top: freezes the old top and points
 * disk.qcow2 at n. Errors: SB_ERR_IO. */
int sb_layers_advance(const char *home, const char *run, unsigned n);

/* Makes disk.qcow2 name active, the file a live machine writes (QEMU's
 * own answer), when it names another of run's layers: a daemon killed
 * between QEMU's new layer and the link's move left the link on the layer
 * below, and the next snapshot would take QEMU's file for a half-made one.
 * A newer active is advanced to (the old top frozen). Errors: SB_ERR_PROTO
 * (active is not one of run's layers), those of sb_layers_advance. */
int sb_layers_settle(const char *home, const char *run, const char *active);

/* Freezes layer n (mode 0444): the snapshot of a machine that ended. */
int sb_layers_freeze(const char *home, const char *run, unsigned n);

/* Checks the chain of files a reader of path reads (path, its backing
 * file, that one's, ...), before QEMU or qemu-nbd follows it: each must
 * be a layer of a run of home (home/runs/RUN/layers/N.qcow2, by real
 * path) without an external data file, down to the root file system of
 * a template of the store (STORE/NAME/rootfs.img, links resolved) or a
 * layer without a backing file. A header naming any other host file is
 * refused. Header reads only.
 * Errors: SB_ERR_CORRUPT (the detail names the file), SB_ERR_NOTFOUND,
 * SB_ERR_IO. */
int sb_layers_check(const char *home, const char *path);

/* Lists into users (room for max) the runs other than run one of whose
 * layers reads run's layer n, directly or through run's later layers;
 * *count gets how many there are (possibly more than max). Errors:
 * SB_ERR_IO. */
int sb_layers_users(const char *home, const char *run, unsigned n,
		    char (*users)[SB_RUN_MAX], size_t max, size_t *count);

/* Deletes run's frozen layer n, which no other run reads: each layer of
 * run made on it is rebased onto n's own backing file first (qemu-img
 * rebase: what it reads stays the same), and its memory file N.mem if
 * any. The run's machine must not be
 * running. Errors: SB_ERR_STATE (n is the top, or another run reads it:
 * the detail names one), SB_ERR_NOTFOUND, those of sb_disk_layer_rebase. */
int sb_layers_remove(const char *home, const char *run, unsigned n);

/* Deletes layer n, just made and never used (a fork or resume that could
 * not be recorded), and points disk.qcow2 at the newest layer left (or
 * removes it and the layers directory when none is). Errors: SB_ERR_IO. */
int sb_layers_drop(const char *home, const char *run, unsigned n);

/* Deletes what run's directory holds that no other run reads, for a run
 * that is removed (its machine ended): each layer no layer of another run
 * reads (directly, or through run's later layers; those read are kept,
 * and so is what they read below them), its memory file, and every file
 * that is not a layer (the disk link, logs, sockets); the directory goes
 * when no layer is kept. *out (engine/runs/space.h) gets what it freed.
 * With dry, deletes nothing and says what it would. A missing directory
 * frees nothing. Errors: SB_ERR_IO (the detail names the file; what was
 * freed before stays freed), SB_ERR_TOOBIG, SB_ERR_NOMEM. */
int sb_layers_release(const char *home, const char *run, int dry,
		      struct sb_layers_freed *out);

/* Sets *u (engine/runs/space.h) to the space the runs of home take, added
 * up over every run directory of home. Errors: SB_ERR_IO (runs/
 * cannot be read; a missing one holds nothing). */
int sb_layers_usage(const char *home, struct sb_layers_usage *u);

#endif
