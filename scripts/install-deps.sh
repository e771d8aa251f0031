#!/usr/bin/env bash
# Installs the Debian packages Placer builds and tests with. Idempotent:
# does nothing when everything is present. As root it runs apt-get; as
# another user it prints the one line to run and fails.
set -euo pipefail

PKGS=(cmake ninja-build g++ make pkg-config ccache
      libzmq3-dev cppzmq-dev libsodium-dev
      libflatbuffers-dev flatbuffers-compiler
      libgtest-dev libbenchmark-dev libomp-dev libglpk-dev clang libclang-rt-dev
      python3-zmq python3-flatbuffers prometheus-cpp-dev libcpp-httplib-dev libspdlog-dev libcli11-dev
      nlohmann-json3-dev slurm-wlm libslurm-dev munge
      curl openssl)  # scripts/k8s-cluster.sh (its certificates, tokens and Node objects)

# The CUDA toolkit: an installed one ($CUDA_HOME, /usr/local/cuda) is used as
# it is; otherwise NVIDIA's PyPI wheels of CUDA 13.0 (nvcc, runtime, CCCL),
# pinned to the GPU machines' 13.0 driver, go into $PLACER_CUDA_PREFIX
# (/opt/placer/cuda-13.0), where cmake/placer_dependencies.cmake finds them.
# pip comes from Debian (python3-pip), so the wheels need no other Python.
CUDA_PREFIX=${PLACER_CUDA_PREFIX:-/opt/placer/cuda-13.0}
CUDA_WHEELS=(nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88
             nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85)
installed_toolkit() {
  for d in "${CUDA_HOME:-}" /usr/local/cuda; do
    [ -n "$d" ] && [ -x "$d/bin/nvcc" ] && { echo "$d"; return 0; }
  done
  return 1
}
wheel_toolkit_ok() { [ -x "$CUDA_PREFIX/nvidia/cu13/bin/nvcc" ] && [ -e "$CUDA_PREFIX/.placer-wheels" ] &&
                     [ "$(cat "$CUDA_PREFIX/.placer-wheels")" = "${CUDA_WHEELS[*]}" ]; }
need_wheels=0
if installed_toolkit >/dev/null || wheel_toolkit_ok; then
  :
elif [ "${PLACER_NO_CUDA_WHEELS:-0}" = 1 ]; then
  PKGS+=(libthrust-dev libcub-dev)  # CPU backend only, on Debian's older Thrust
else
  need_wheels=1
  PKGS+=(python3-pip)
fi

install_wheels() {
  local t=$CUDA_PREFIX/nvidia/cu13 tmp
  if [ ! -w "$(dirname "$CUDA_PREFIX")" ] && ! mkdir -p "$CUDA_PREFIX" 2>/dev/null; then
    echo "placer: no CUDA toolkit found; to build the CUDA backend run:" >&2
    echo "  sudo PLACER_CUDA_PREFIX=$CUDA_PREFIX $0" >&2
    echo "  (or set PLACER_CUDA_PREFIX to a folder you own; PLACER_NO_CUDA_WHEELS=1 builds the CPU backend only)" >&2
    return 1
  fi
  echo "placer: installing the CUDA 13.0 toolkit from NVIDIA's wheels into $CUDA_PREFIX (about 100 MB)" >&2
  tmp=$(mktemp -d "$(dirname "$CUDA_PREFIX")/.cuda-wheels.XXXXXX")
  /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --target "$tmp" "${CUDA_WHEELS[@]}"
  t=$tmp/nvidia/cu13
  # nvcc 13.0's nvcc.profile looks under targets/x86_64-linux; FindCUDAToolkit wants libcudart.so.
  mkdir -p "$t/targets/x86_64-linux"
  ln -sfn ../../include "$t/targets/x86_64-linux/include"
  ln -sfn ../../lib "$t/targets/x86_64-linux/lib"
  ln -sfn libcudart.so.13 "$t/lib/libcudart.so"
  echo "${CUDA_WHEELS[*]}" > "$tmp/.placer-wheels"
  rm -rf "$CUDA_PREFIX"
  mv "$tmp" "$CUDA_PREFIX"
  "$CUDA_PREFIX/nvidia/cu13/bin/nvcc" --version | tail -2 >&2
}

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  [ $need_wheels = 0 ] || install_wheels
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
[ $need_wheels = 0 ] || install_wheels
