# Sourced by scripts/k8s-cluster.sh and scripts/slurm-cluster.sh.
# running PID: alive and not a zombie. A daemon the scripts started is
# reparented to init, which may reap it late (this machine's: every 2 s,
# 2026-12-07), and `kill -0` passes a zombie; a zombie holds no port and no
# file.
running() {
  local st
  { read -r st < "/proc/$1/stat"; } 2>/dev/null || return 1
  st=${st##*) }
  [ "${st%% *}" != Z ]
}
