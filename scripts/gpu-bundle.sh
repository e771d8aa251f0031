#!/usr/bin/env bash
# Packs what a GPU session runs into .gpu/ (git-ignored), to carry to a lent GPU machine, which reaches
# no package registry: the stripped binaries with their shared libraries (../shared/tools/gpu-bundle),
# the openb files the `openb` scenarios read, and scripts/gpu-run.sh. Then, through the device tool:
#   run(command="bash .gpu/gpu-run.sh", carry=[".gpu"])
# docs/gpu-session.md has the whole procedure and what to commit afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
# make deps installs the toolkit when none is found (CUDA 13.0 from NVIDIA's wheels, scripts/install-deps.sh).
# Then sm_90 code, whatever build/ was configured with before: on a machine without a GPU make configures
# PTX alone (Makefile, CUDA_ARCHS), which the lent GPU's driver would spend minutes of its loan compiling.
make deps
cmake -S . -B build -G Ninja -DPLACER_CUDA_ARCHITECTURES=90 > /dev/null
make build
build/placer --version | grep -q "CUDA backend built for 90)" ||
  { echo "gpu-bundle.sh: build/ has no CUDA backend for sm_90 ($(build/placer --version | head -1); see the 'placer: CUDA backend' line of its cmake output)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The SASS the bundle carries, with its source lines (the build's -lineinfo), kept here: the kit's `stalls`
# step brings back ncu's samples by instruction, which bench/gpu_kit/sass_lines.py joins to this dump
# (docs/gpu-session.md). cuobjdump and nvdisasm come from NVIDIA's wheels when the toolkit has none; the
# bundle goes on without the dump where they cannot be had.
sass_tools() {
  local d=/opt/placer/cuda-sass-tools
  for t in cuobjdump nvdisasm; do command -v $t > /dev/null || [ -x "$d/nvidia/cu13/bin/$t" ] || {
    /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
      --target "$d" nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37 > /dev/null &&
      chmod +x "$d"/nvidia/cu13/bin/*
    break; }
  done
  PATH=$PATH:$d/nvidia/cu13/bin
}
if sass_tools && command -v cuobjdump > /dev/null && command -v nvdisasm > /dev/null; then
  mkdir -p build/sass "$tmp/elf"
  (cd "$tmp/elf" && cuobjdump -xelf sm_90 "$OLDPWD/build/placer" > /dev/null 2>&1) || true
  if compgen -G "$tmp/elf/*.cubin" > /dev/null; then
    if for e in "$tmp"/elf/*.cubin; do nvdisasm -c -g "$e"; done | sed 's/  */ /g' | xz -T0 -6 > build/sass/placer-sm_90.sass.xz; then
      echo "gpu-bundle.sh: the bundle's SASS in build/sass/placer-sm_90.sass.xz (commit $(git rev-parse --short HEAD))"
    else
      echo "gpu-bundle.sh: nvdisasm failed: no SASS dump" >&2
      rm -f build/sass/placer-sm_90.sass.xz
    fi
  else
    echo "gpu-bundle.sh: build/placer holds no sm_90 ELF: no SASS dump" >&2
  fi
else
  echo "gpu-bundle.sh: no cuobjdump or nvdisasm: no SASS dump (the stalls step's samples cannot be joined to lines)" >&2
fi
# The CUDA parity tests live in solver_test_omp and kernels_test_omp.
for b in build/placer build/bench/round_bench build/bench/calibrate build/tests/kernels_test_omp; do
  strip -o "$tmp/$(basename "$b")" "$b"
done
# solver_test_omp keeps its symbols (not its debug information): cuda-gdb's backtraces name functions.
strip --strip-debug -o "$tmp/solver_test_omp" build/tests/solver_test_omp
rm -rf .gpu
../shared/tools/gpu-bundle .gpu "$tmp"/*
# The binaries (each with its sm_90 code) and libraries came to 67 MB on 2026-12-04, past the 64 MiB a
# device call carries: they travel as one xz archive (16 MB), which gpu-run.sh unpacks on its first step.
(cd .gpu && tar cf - bin lib | xz -T0 -6 > binlib.tar.xz && rm -rf bin lib)
data=${PLACER_DATA_DIR:-../shared/data}
mkdir -p .gpu/data/alibaba-openb-v2023
cp "$data"/alibaba-openb-v2023/openb_node_list_gpu_node.csv "$data"/alibaba-openb-v2023/openb_pod_list_default.csv \
  .gpu/data/alibaba-openb-v2023/
cp scripts/gpu-run.sh .gpu/
git rev-parse --short HEAD > .gpu/commit
du -sh .gpu
