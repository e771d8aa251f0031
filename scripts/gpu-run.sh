#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with .gpu/ carried (scripts/gpu-bundle.sh made
# it). One step per device call, each well inside the 600 s a call may take, each writing to $OUT
# (at most 8 files come back) and ending with a short summary:
#
#   bash .gpu/gpu-run.sh check          # the device, the CUDA parity tests under compute-sanitizer
#                                       # (memcheck, racecheck), every test, a 10-round CUDA bench
#   bash .gpu/gpu-run.sh bench 10k      # round_bench and `placer bench` for one scenario (10k, 100k,
#   bash .gpu/gpu-run.sh bench 100k     # openb), CUDA first, bounded rounds
#   bash .gpu/gpu-run.sh bench openb
#
# Every step stops at once unless the CUDA backend is the one in use, on the GPU it names: a
# machine whose driver or GPU the probe refuses would otherwise record CPU figures as GPU ones.
# docs/gpu-session.md has the procedure and what to commit.
set -uo pipefail
G=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PLACER_DATA_DIR=$G/data
run() { "$G/run" "$@"; }
commit=$(cat "$G/commit")
step=${1:-check}

# The CUDA backend must be usable: `placer version` names the GPU or says why not.
run "$G/bin/placer" version > "$OUT/version.txt" 2>&1
gpu=$(sed -n 's/^GPU: //p' "$OUT/version.txt")
case "$gpu" in
  ""|none*) echo "gpu-run: the CUDA backend is not usable here: ${gpu:-no answer}"; cat "$OUT/version.txt"; exit 2 ;;
esac
# `placer bench`'s cuda configuration must have run on CUDA on that GPU.
check_cuda() {  # bench json
  grep -q '"backend": *"cuda (GPU 0' "$1" || grep -q '"backend":"cuda (GPU 0' "$1" ||
    { echo "gpu-run: $1 does not show the CUDA backend on GPU 0"; exit 2; }
}

case "$step" in
  check)
    { date -u +%FT%TZ; echo "commit $commit"; echo "GPU: $gpu"; nvidia-smi; } > "$OUT/device.txt" 2>&1
    status=0
    # The parity tests under compute-sanitizer: memory errors, then shared-memory races.
    parity='BackendParity.Cuda*:TierParity.*'
    for tool in memcheck racecheck; do
      for t in kernels_test_omp solver_test_omp; do
        timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 9 \
          "$G/run" "$G/bin/$t" --gtest_filter="$parity" >> "$OUT/sanitizer.txt" 2>&1 || status=1
      done
    done
    {
      run "$G/bin/solver_test_omp" || status=1
      run "$G/bin/kernels_test_omp" || status=1
      # The resident round checked on the GPU itself: the device's copies read
      # back and compared with the host's at every call (residency, docs/architecture.md).
      PLACER_VERIFY_RESIDENT=1 run "$G/bin/solver_test_omp" --gtest_filter='BackendParity.Cuda*' || status=1
    } > "$OUT/tests.txt" 2>&1
    run "$G/bin/placer" bench --scenario 10k --rounds 10 --configs cuda --data "$G/data" \
      --json "$OUT/bench-10k-smoke.json" > "$OUT/bench-smoke.txt" 2>&1 || status=1
    check_cuda "$OUT/bench-10k-smoke.json"
    echo "== $gpu, commit $commit"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) *\]" "$OUT/sanitizer.txt"
    grep -E "^\[  (PASSED|FAILED|SKIPPED) *\]|tests? from .* ran" "$OUT/tests.txt"
    grep -E "^(config|cuda )" "$OUT/bench-smoke.txt" | head -4
    exit $status
    ;;
  bench)
    s=${2:?"gpu-run: bench needs a scenario: 10k, 100k or openb"}
    rounds=200; [ "$s" = 100k ] && rounds=50
    status=0
    run "$G/bin/round_bench" --benchmark_filter="round/(cuda|cpu|kube-least)/$s/" \
      --benchmark_out="$OUT/round-bench-$s.json" --benchmark_out_format=json \
      --benchmark_context=commit="$commit" --benchmark_context=date="$(date -u +%F)" \
      --benchmark_context=gpu="$gpu" > "$OUT/round-bench-$s.txt" 2>&1 || status=1
    plot=(); [ "$s" = 10k ] && plot=(--plot "$OUT/bench-10k.svg")
    timeout 420 "$G/run" "$G/bin/placer" bench --scenario "$s" --rounds "$rounds" --configs cuda,cpu,kube \
      --data "$G/data" --json "$OUT/bench-$s.json" "${plot[@]}" >> "$OUT/round-bench-$s.txt" 2>&1 || status=1
    check_cuda "$OUT/bench-$s.json"
    echo "== $gpu, commit $commit, scenario $s"
    grep -E "^(round/|config|cpu |cuda |kube )" "$OUT/round-bench-$s.txt" | tail -16
    exit $status
    ;;
  *)
    echo "gpu-run: unknown step '$step' (check, or bench 10k|100k|openb)"
    exit 2
    ;;
esac
