/* template.h - built templates in the template store.
 *
 * The store is $SANBOX_TEMPLATES, else STATE_DIR/templates; each template
 * is a directory NAME/ made by tools/mkimage.sh holding vmlinux,
 * initrd.img, rootfs.img (all read-only) and template.json with their
 * hashes, the template hash and the default limits.
 */
#ifndef SB_TEMPLATE_H
#define SB_TEMPLATE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define SB_TEMPLATE_SECRETS 8
#define SB_TEMPLATE_GRANTS  16
#define SB_TEMPLATE_ENV	    32

struct sb_template {
	char name[64];
	char hash[72]; /* sha256 over the three file hashes */
	char kernel_version[64];
	char harness[256]; /* default harness command */
	char model[96];	   /* default model of its runs ("" = the settings') */
	char secrets[SB_TEMPLATE_SECRETS][72]; /* granted to every run: NAME[:SCOPE] */
	size_t nsecrets;
	char network[8];			/* its runs' default network, or "" */
	char allow[SB_TEMPLATE_GRANTS][300];	/* grants of every run (as written) */
	size_t nallow;
	char adapter[32];		    /* the harness adapter's name (reference) */
	char env[SB_TEMPLATE_ENV][512];	    /* K=V for the harness, before the run's */
	size_t nenv;
	uint64_t cpus, memory_mib, timeout_s;
	char kernel[PATH_MAX], initrd[PATH_MAX], rootfs[PATH_MAX];
};

/* Writes the template store's path into buf. Errors: SB_ERR_TOOBIG. */
int sb_template_store(const char *home, char *buf, size_t cap);

/* Loads template name from the store of home. Errors: SB_ERR_NOTFOUND
 * (not built: the detail says how to build it), SB_ERR_CORRUPT (bad
 * template.json or a file missing), SB_ERR_INVAL (bad name). */
int sb_template_load(const char *home, const char *name, struct sb_template *t);

#endif
