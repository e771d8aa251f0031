#!/usr/bin/env bash
# A local Slurm cluster on this one host, for the Slurm bridge's tests and
# benchmarks (docs/slurm.md): one slurmctld and one slurmd per node (Debian
# builds Slurm with multiple-slurmd support), GPUs as placeholder device
# files, every daemon's files under one directory.
#
#   scripts/slurm-cluster.sh up [--nodes 16] [--gpus 8] [--models a100,h100] [--racks 2]
#                               [--infer 0] [--dir /tmp/placer-slurm] [--port 16817] [--install]
#                               [--owner PID]   (`down` runs by itself once process PID ends: the
#                                                tests', which may die past their cleanup)
#   scripts/slurm-cluster.sh down [--dir DIR]
#   scripts/slurm-cluster.sh status [--dir DIR]
#
# Nodes n1..nN; node i has GPU model models[(i-1) * M / N] (the models in
# equal consecutive blocks) and sits in rack (i-1) * R / N + 1: its
# features are the model and "rackK". The last --infer nodes form the
# partition "infer", the others "train" (the default). `up` prints the one
# line clients need (export SLURM_CONF=...). `down` stops only the daemons
# whose pid files are in DIR. Run as root (slurmd runs jobs as their user).
set -euo pipefail

cmd=${1:-}
[ -n "$cmd" ] && shift || true
nodes=16 gpus=8 models=a100,h100 racks=2 infer=0 dir=/tmp/placer-slurm port=16817 install=0 owner=
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --gpus) gpus=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --racks) racks=$2; shift 2 ;;
    --infer) infer=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --install) install=1; shift ;;
    --owner) owner=$2; shift 2 ;;
    *) echo "slurm-cluster.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done

die() { echo "slurm-cluster.sh: $*" >&2; exit 1; }
# shellcheck source=scripts/proc.sh
. "$(dirname "${BASH_SOURCE[0]}")/proc.sh"

# Stops the daemons whose pid files are in $dir/run: SIGTERM to all, up to
# 10 s for them to go together, then SIGKILL to what is left.
down() {
  [ -d "$dir/run" ] || return 0
  unwatch "$dir/run/owner.watch"
  local pids=() f pid
  # Jobs first, while slurmctld and the slurmds can still end their steps:
  # a job step (slurmstepd and its task) outlives the daemons otherwise
  # (the side-by-side's hour-long sleeps piled up in the thousands).
  if [ -f "$dir/slurm.conf" ] && [ -f "$dir/run/slurmctld.pid" ] &&
     running "$(cat "$dir/run/slurmctld.pid" 2>/dev/null)"; then
    local jobs
    jobs=$(SLURM_CONF=$dir/slurm.conf timeout 10 squeue -h -o %A 2>/dev/null || true)
    if [ -n "$jobs" ]; then
      # shellcheck disable=SC2086
      SLURM_CONF=$dir/slurm.conf timeout 20 scancel $jobs 2>/dev/null || true
      for _ in $(seq 50); do
        [ -z "$(SLURM_CONF=$dir/slurm.conf timeout 5 squeue -h -o %A 2>/dev/null)" ] && break
        sleep 0.2
      done
    fi
  fi
  for f in "$dir"/run/*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null || true)
    [ -n "$pid" ] && running "$pid" && pids+=("$pid")
  done
  [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 100); do
    local alive=0
    for pid in "${pids[@]}"; do running "$pid" && alive=1; done
    [ "$alive" -eq 0 ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  rm -f "$dir"/run/*.pid
  return 0
}

status() {
  [ -f "$dir/slurm.conf" ] || die "no cluster in $dir"
  SLURM_CONF=$dir/slurm.conf sinfo -N -o '%N %t %G %f %P'
}

up() {
  [ "$(id -u)" -eq 0 ] || die "run as root (slurmd starts jobs as their users)"
  if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    [ "$install" -eq 1 ] || die "Slurm is not installed (slurm-wlm, munge): add --install, or run scripts/install-deps.sh"
    "$(dirname "$0")/install-deps.sh"
  fi
  [ "$nodes" -ge 1 ] && [ "$gpus" -ge 1 ] && [ "$racks" -ge 1 ] && [ "$infer" -lt "$nodes" ] ||
    die "--nodes and --gpus and --racks at least 1, --infer below --nodes"
  down
  rm -rf "$dir"
  mkdir -p "$dir"/{run,log,state,spool,dev,munge}
  if [ -n "$owner" ]; then
    watch_owner "$dir/run/owner.watch" "$owner" bash "$(readlink -f "$0")" down --dir "$dir" ||
      die "--owner $owner: no such process"
  fi
  chmod 700 "$dir/munge"

  # munge: a key of its own, on a socket of its own.
  dd if=/dev/urandom bs=1 count=1024 of="$dir/munge/munge.key" 2>/dev/null
  chmod 400 "$dir/munge/munge.key"
  munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
         --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed" \
         --force </dev/null >>"$dir/log/munged.log" 2>&1 || die "munged did not start: $(tail -3 "$dir/log/munged.log")"

  IFS=, read -r -a model_list <<<"$models"
  local m=${#model_list[@]}
  local conf=$dir/slurm.conf gres=$dir/gres.conf
  cat >"$conf" <<EOF
# Written by scripts/slurm-cluster.sh: a local test cluster, not for production.
ClusterName=placer
SlurmctldHost=localhost
SlurmctldPort=$port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=4096
SchedulerType=sched/backfill
GresTypes=gpu
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
EOF
  : >"$gres"
  echo "CgroupPlugin=autodetect" >"$dir/cgroup.conf"
  local train=() inf=()
  for i in $(seq 1 "$nodes"); do
    local model=${model_list[$(( (i - 1) * m / nodes ))]}
    local rack=$(( (i - 1) * racks / nodes + 1 ))
    mkdir -p "$dir/dev/n$i"
    # Placeholder devices (/dev/null's numbers); plain files where mknod is not allowed
    # (jobs then get their GPUs counted, without CUDA_VISIBLE_DEVICES).
    for g in $(seq 0 $((gpus - 1))); do mknod "$dir/dev/n$i/gpu$g" c 1 3 2>/dev/null || : >"$dir/dev/n$i/gpu$g"; done
    echo "NodeName=n$i NodeHostname=localhost Port=$((port + i)) CPUs=64 RealMemory=512000 Gres=gpu:$model:$gpus Feature=$model,rack$rack State=UNKNOWN" >>"$conf"
    echo "NodeName=n$i Name=gpu Type=$model File=$dir/dev/n$i/gpu[0-$((gpus - 1))]" >>"$gres"
    if [ "$i" -gt $((nodes - infer)) ]; then inf+=("n$i"); else train+=("n$i"); fi
  done
  echo "PartitionName=train Nodes=$(IFS=,; echo "${train[*]}") Default=YES MaxTime=INFINITE State=UP" >>"$conf"
  [ ${#inf[@]} -eq 0 ] || echo "PartitionName=infer Nodes=$(IFS=,; echo "${inf[*]}") MaxTime=INFINITE State=UP" >>"$conf"
  echo "AutoDetect=off" | cat - "$gres" >"$gres.tmp" && mv "$gres.tmp" "$gres"

  export SLURM_CONF=$conf
  # The daemons get no inherited descriptors: a caller reading our output
  # would otherwise wait for them to exit.
  slurmctld -f "$conf" -i </dev/null >>"$dir/log/slurmctld.log" 2>&1 || die "slurmctld did not start: $(tail -5 "$dir/log/slurmctld.log")"
  for i in $(seq 1 "$nodes"); do
    mkdir -p "$dir/spool/n$i"
    slurmd -f "$conf" -N "n$i" </dev/null >>"$dir/log/slurmd-n$i.log" 2>&1 || die "slurmd n$i did not start: $(tail -5 "$dir/log/slurmd-n$i.log")"
  done
  # Ready when every node is idle (a loaded machine, a test suite beside it,
  # can take a node tens of seconds to register). A daemon that died (its
  # port taken, say) ends the wait at once, with its words.
  local limit=${PLACER_SLURM_UP_SECONDS:-90}
  local until=$((SECONDS + limit))
  while [ "$SECONDS" -lt "$until" ]; do
    local idle fatal
    idle=$(timeout 10 sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
    [ "$idle" -eq "$nodes" ] && { echo "export SLURM_CONF=$conf"; return 0; }
    fatal=$(grep -H -E 'fatal|Address already in use' "$dir"/log/slurm*.log 2>/dev/null | head -5 || true)
    [ -z "$fatal" ] || die "a daemon ended (logs: $dir/log):
$fatal"
    sleep 0.2
  done
  timeout 10 sinfo -N -o '%N %t %E' >&2 || true
  grep -h -E 'error|fatal' "$dir"/log/slurm*.log 2>/dev/null | grep -v -E 'MailProg|pmix|PMIx|MPI|state file|backup state' | tail -10 >&2 || true
  die "the nodes did not come up idle within $limit s (logs: $dir/log)"
}

case "$cmd" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: scripts/slurm-cluster.sh up|down|status [options] (see the header)" >&2; exit 2 ;;
esac
