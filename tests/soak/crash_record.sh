#!/bin/sh
# Soak: tests/e2e/vm_crash_record.sh at length: 4 runs that print, write
# files and call the model, 50 kill -9s of the daemon at random moments
# (SOAK_RUNS, SOAK_KILLS). Not part of `make test`: `make soak` runs it.
CRASH_RUNS=${SOAK_RUNS:-4} CRASH_KILLS=${SOAK_KILLS:-50} \
	exec sh "$(dirname "$0")/../e2e/vm_crash_record.sh"
