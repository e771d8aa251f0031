#!/usr/bin/env bash
# Installs the Debian packages Placer builds and tests with. Idempotent:
# does nothing when everything is present. As root it runs apt-get; as
# another user it prints the one line to run and fails.
set -euo pipefail

PKGS=(cmake ninja-build g++ make pkg-config ccache
      libzmq3-dev cppzmq-dev
      libflatbuffers-dev flatbuffers-compiler
      libgtest-dev libbenchmark-dev libomp-dev libglpk-dev clang libclang-rt-dev
      python3-zmq python3-flatbuffers prometheus-cpp-dev libcpp-httplib-dev libspdlog-dev libcli11-dev
      nlohmann-json3-dev slurm-wlm libslurm-dev munge)

# Thrust/CUB headers: from the CUDA toolkit when installed, else Debian's.
if [ ! -e /usr/local/cuda/include/cccl/thrust/version.h ] && [ ! -e /usr/local/cuda/include/thrust/version.h ]; then
  PKGS+=(libthrust-dev libcub-dev)
fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "placer: missing Debian packages: ${missing[*]}" >&2
  echo "run:  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "placer: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
