# lib/proc.sh - process checks for the end-to-end tests (sourced).
# A daemon the CLI starts is nobody's child here: once it exits it stays a
# zombie until the machine's init reaps it, and `kill -0` still succeeds on
# a zombie. These helpers count a zombie as ended.

# proc_alive PID: the process exists and has not exited
proc_alive() {
	proc_state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
	[ -n "$proc_state" ] && [ "$proc_state" != Z ]
}

# proc_wait_gone PID [TENTHS]: until the process has exited (default 10 s)
proc_wait_gone() {
	proc_i=0
	while proc_alive "$1"; do
		proc_i=$((proc_i + 1))
		[ $proc_i -lt "${2:-100}" ] || return 1
		sleep 0.1
	done
}
