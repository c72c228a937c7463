/* proc.h - child processes: one way to start them, wait for them, signal
 * them, and run a command to completion.
 *
 * Every program the host starts (QEMU, qemu-img, the model stub, the
 * daemon the CLI starts, the template build) goes through sb_spawn: the
 * child gets the descriptors it is given as 0, 1 and 2 and no others,
 * default signal dispositions and an empty mask, and sb_spawn returns once
 * the exec has succeeded or failed (a failed exec is an error here, never
 * a child that exits 127 later). Without die_with_parent and detach it
 * uses posix_spawn(3), which does not copy the caller's page tables: the
 * daemon's loop starts QEMU that way without standing still.
 */
#ifndef SB_PROC_H
#define SB_PROC_H

#include <stddef.h>
#include <sys/types.h>

struct sb_spawn {
	char *const *argv;   /* argv[0]: a path, or a name searched in PATH */
	int in, out, err;    /* the child's 0, 1 and 2; -1: /dev/null */
	int new_session;     /* 1: its own session and process group (pgid = pid) */
	int detach;	     /* 1: not the caller's child (started by a child
			      * that exits at once); *pid is then 0 */
	int die_with_parent; /* 1: SIGKILL once the thread that started it
			      * ends (the whole process, say) */
	int nice;	     /* added to the caller's nice value for the
			      * child, once it runs (0: the caller's); best
			      * effort */
};

/* Starts s->argv. *pid is the caller's child to reap (sb_proc_wait), or 0
 * with s->detach. Errors: SB_ERR_UNAVAIL (the program is missing, or its
 * exec failed: the detail names it), SB_ERR_IO (fork, pipe; errno kept). */
int sb_spawn(const struct sb_spawn *s, pid_t *pid);

/* Finds the executable name (a path, or a name searched in PATH) and
 * writes its path into buf. Errors: SB_ERR_UNAVAIL, SB_ERR_INVAL. */
int sb_exe_find(const char *name, char *buf, size_t cap);

/* Waits up to timeout_ms (-1 = forever) for process pid to exit and reaps
 * it if it is the caller's child. *status (may be NULL) gets the waitpid()
 * status, or -1 when pid is not the caller's child. Errors: SB_ERR_TIMEOUT
 * (still running), SB_ERR_INVAL (pid <= 1), SB_ERR_IO. */
int sb_proc_wait(pid_t pid, int timeout_ms, int *status);

/* Sends sig to the process group of pid (a process started with
 * new_session), or to pid alone when it has no group of its own. A
 * process that is gone is not an error. Errors: SB_ERR_INVAL (pid <= 1),
 * SB_ERR_IO. */
int sb_proc_kill(pid_t pid, int sig);

/* Runs argv with stdin from /dev/null and collects its stdout and stderr
 * (NUL-terminated, cut to outlen - 1) into out (may be NULL when outlen is
 * 0); kills it after timeout_ms, or when the calling thread ends first (a
 * process killed meanwhile leaves no child behind). *status gets the
 * waitpid() status.
 * Errors: SB_ERR_UNAVAIL (program missing, or its exec failed),
 * SB_ERR_TIMEOUT, SB_ERR_IO. */
int sb_proc_run(char *const argv[], int timeout_ms, char *out, size_t outlen,
		int *status);

/* Writes all len bytes of buf to fd, going on after short writes and
 * EINTR. Errors: SB_ERR_IO (with errno's text). */
int sb_write_full(int fd, const void *buf, size_t len);

/* 1 when process pid lives and its command line (its arguments joined by
 * spaces) contains needle: a pid read from a file is that process, not
 * another that took its number. */
int sb_proc_cmdline_has(pid_t pid, const char *needle);

#endif
