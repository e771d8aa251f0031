# Sourced by scripts/k8s-cluster.sh and scripts/slurm-cluster.sh.

# started PID: its start time (clock ticks since boot, /proc/PID/stat's
# 22nd field), which a pid used again does not share; fails where none
# runs, a zombie included.
started() {
  local st
  { read -r st < "/proc/$1/stat"; } 2>/dev/null || return 1
  st=${st##*) }
  # shellcheck disable=SC2086
  set -- $st
  [ "$1" != Z ] && echo "${20}"
}

# running PID: alive and not a zombie. A daemon the scripts started is
# reparented to init, which may reap it late (this machine's: every 2 s,
# 2026-12-07), and `kill -0` passes a zombie; a zombie holds no port and no
# file.
running() { started "$1" > /dev/null; }

# watch_owner PIDFILE OWNER CMD...: a process in a session of its own (its
# pid and start time in PIDFILE) that runs CMD once process OWNER has
# ended (not running, or its pid another's). `up --owner` uses it, so that
# what a test started stops with the test, even where the test dies past
# its cleanup: a Go test's timeout panics past every t.Cleanup, and
# ctest's timeout kills the test outright.
watch_owner() {
  local pidfile=$1 owner=$2 since lib
  shift 2
  since=$(started "$owner") || { echo "no process $owner to watch" >&2; return 1; }
  lib=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/proc.sh
  (
    exec setsid bash -c '. "$1"; o=$2 s=$3; shift 3
      while [ "$(started "$o")" = "$s" ]; do sleep 1; done
      exec "$@"' watch "$lib" "$owner" "$since" "$@"
  ) </dev/null >/dev/null 2>&1 &
  echo "$! $(started $!)" > "$pidfile"
}

# unwatch PIDFILE: the watcher stopped, its group with it (setsid made it
# a leader; its sleep too), unless it is this process (its CMD) or its pid
# is now another's.
unwatch() {
  local pid since
  [ -f "$1" ] || return 0
  read -r pid since < "$1"
  if [ "$pid" != "$$" ] && [ "$(started "$pid")" = "$since" ]; then
    kill -- "-$pid" 2>/dev/null || true
  fi
  rm -f "$1"
}
