#!/usr/bin/env bash
# A newer Slurm than Debian 12's 22.05 for the bridge's live tests: Debian
# 13 (trixie, Slurm 24.11) in a chroot made with debootstrap, and wrappers
# that run its Slurm tools there, so that scripts/slurm-cluster.sh, the
# bridge and the tests use it when the wrappers come first in PATH.
#
#   scripts/slurm-newer.sh up [--root /srv/placer-slurm-trixie] [--suite trixie]
#       makes the chroot (once: about 300 MB from deb.debian.org), mounts
#       /proc, /sys, /dev and /tmp into it, writes the wrappers, and prints
#       the PATH line to use
#   scripts/slurm-newer.sh down [--root DIR]     unmounts (the chroot stays)
#
#   eval "$(scripts/slurm-newer.sh up)"
#   ctest --test-dir build -R SlurmBridgeLive --output-on-failure   # the bridge against 24.11
#   scripts/slurm-newer.sh down
#
# The clusters' directories must be under /tmp (scripts/slurm-cluster.sh's
# default and the tests' do): the daemons run in the chroot and see the
# host's /tmp. Run as root.
set -euo pipefail

cmd=${1:-}
[ -n "$cmd" ] && shift || true
root=/srv/placer-slurm-trixie suite=trixie
while [ $# -gt 0 ]; do
  case "$1" in
    --root) root=$2; shift 2 ;;
    --suite) suite=$2; shift 2 ;;
    *) echo "slurm-newer.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
die() { echo "slurm-newer.sh: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap, mounts, chroot)"
bin=$root.bin

mounts() { echo proc sys dev tmp; }

up() {
  if [ ! -x "$root/usr/sbin/slurmctld" ]; then
    command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y debootstrap >&2
    debootstrap --variant=minbase --include=slurm-wlm,slurm-client,munge,procps "$suite" "$root" \
      http://deb.debian.org/debian >&2 || die "debootstrap $suite failed"
  fi
  cp /etc/hosts "$root/etc/hosts"  # NodeHostname=localhost must resolve in there
  for m in $(mounts); do
    mkdir -p "$root/$m"
    mountpoint -q "$root/$m" && continue
    case $m in
      proc) mount -t proc proc "$root/proc" ;;
      tmp) mount --bind /tmp "$root/tmp" ;;
      # (a slave, so that unmounting it never unmounts the host's submounts)
      *) mount --rbind "/$m" "$root/$m" && mount --make-rslave "$root/$m" ;;
    esac
  done
  mkdir -p "$bin"
  local t
  for t in munged slurmctld slurmd sinfo squeue sbatch scontrol scancel srun sacct; do
    local p
    p=$(chroot "$root" sh -c "command -v $t") || die "$t is not in the chroot"
    # Inside the chroot (a job's srun finds this PATH) the tool itself.
    cat >"$bin/$t" <<EOF
#!/bin/sh
# $t of Slurm in $root (scripts/slurm-newer.sh)
[ -d "$root" ] || exec $p "\$@"
exec chroot "$root" /bin/sh -c 'cd "\$0" 2>/dev/null || cd /; exec "\$@"' "\$PWD" $p "\$@"
EOF
    chmod +x "$bin/$t"
  done
  echo "# Slurm $(chroot "$root" dpkg-query -W -f '${Version}' slurm-wlm) in $root"
  echo "export PATH=$bin:\$PATH"
}

down() {
  local m
  for m in tmp dev sys proc; do
    mountpoint -q "$root/$m" && umount -R "$root/$m" || true
  done
}

case "$cmd" in
  up) up ;;
  down) down ;;
  *) echo "usage: scripts/slurm-newer.sh up|down [--root DIR] [--suite trixie]" >&2; exit 2 ;;
esac
