/* home.c - the state directory. */
#include "engine/home.h"

#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "engine/error.h"

int sb_home_resolve(const char *explicit_dir, char *buf, size_t cap)
{
	const char *env = getenv("SANBOX_HOME"), *home = getenv("HOME");
	int n;

	if (explicit_dir && *explicit_dir)
		n = snprintf(buf, cap, "%s", explicit_dir);
	else if (env && *env)
		n = snprintf(buf, cap, "%s", env);
	else if (home && *home)
		n = snprintf(buf, cap, "%s/.local/share/sanbox", home);
	else
		return sb_seterr(SB_ERR_INVAL, "set SANBOX_HOME or HOME");
	if (n < 0 || (size_t)n >= cap || n > 90)
		return sb_seterr(SB_ERR_INVAL, "state directory path is too long (max 90 bytes)");
	if (buf[0] != '/') {
		/* absolute, so that a daemon and a disk layer's backing file
		 * name mean the same place from anywhere */
		char cwd[PATH_MAX], rel[100];
		snprintf(rel, sizeof rel, "%s", buf);
		if (!getcwd(cwd, sizeof cwd))
			return sb_seterr(SB_ERR_INVAL, "SANBOX_HOME %s is relative and the current directory is unknown", rel);
		n = snprintf(buf, cap, "%s/%s", cwd, rel);
		if (n < 0 || (size_t)n >= cap || n > 90)
			return sb_seterr(SB_ERR_INVAL,
					 "state directory path is too long (max 90 bytes)");
	}
	return SB_OK;
}

int sb_mkdirs(const char *dir, unsigned mode)
{
	char tmp[4096];
	size_t n = strlen(dir);

	if (n >= sizeof tmp)
		return sb_seterr(SB_ERR_TOOBIG, "path too long");
	memcpy(tmp, dir, n + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(tmp, mode) && errno != EEXIST)
			return sb_seterr(SB_ERR_IO, "mkdir %s: %s", tmp, strerror(errno));
		*p = '/';
	}
	if (mkdir(tmp, mode) && errno != EEXIST)
		return sb_seterr(errno == EACCES ? SB_ERR_DENIED : SB_ERR_IO, "mkdir %s: %s", tmp,
				 strerror(errno));
	return SB_OK;
}

int sb_home_path(const char *home, const char *rel, char *buf, size_t cap)
{
	int n = snprintf(buf, cap, "%s/%s", home, rel);

	if (n < 0 || (size_t)n >= cap)
		return sb_seterr(SB_ERR_TOOBIG, "path %s/%s too long", home, rel);
	return SB_OK;
}

int sb_home_init(const char *home)
{
	static const char *const subdirs[] = {"log", "runs", "templates", "secrets"};
	char path[4096];
	int rc;

	if ((rc = sb_mkdirs(home, 0700)))
		return rc;
	chmod(home, 0700);
	for (size_t i = 0; i < sizeof subdirs / sizeof subdirs[0]; i++) {
		if ((rc = sb_home_path(home, subdirs[i], path, sizeof path)) ||
		    (rc = sb_mkdirs(path, 0700)))
			return rc;
	}
	return SB_OK;
}

static unsigned long long du_sum; /* nftw has no context: one walk at a time */
static pthread_mutex_t du_mu = PTHREAD_MUTEX_INITIALIZER;

static int du_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	if (type == FTW_F && S_ISREG(st->st_mode))
		du_sum += (unsigned long long)st->st_blocks * 512;
	return 0;
}

unsigned long long sb_du(const char *path)
{
	unsigned long long n;

	pthread_mutex_lock(&du_mu);
	du_sum = 0;
	nftw(path, du_one, 16, FTW_PHYS);
	n = du_sum;
	pthread_mutex_unlock(&du_mu);
	return n;
}
