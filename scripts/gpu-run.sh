#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with .gpu/ carried (scripts/gpu-bundle.sh made
# it): the solver and kernel tests (the CUDA parity tests among them; tests that pick the backend
# automatically get the GPU there), the round benchmarks on every backend and the end-to-end
# `placer bench` scenarios. Everything goes to $OUT (at most 8 files come back); the last lines are a short summary.
set -uo pipefail
G=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PLACER_DATA_DIR=$G/data
run() { "$G/run" "$@"; }
commit=$(cat "$G/commit")
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
{ date -u +%FT%TZ; echo "commit $commit"; nvidia-smi; } > "$OUT/device.txt" 2>&1
status=0
{
  run "$G/bin/solver_test_omp" || status=1
  run "$G/bin/kernels_test_omp" || status=1
} > "$OUT/tests.txt" 2>&1
run "$G/bin/round_bench" --benchmark_out="$OUT/round-bench.json" --benchmark_out_format=json \
  --benchmark_context=commit="$commit" --benchmark_context=date="$(date -u +%F)" \
  --benchmark_context=gpu="$gpu" > "$OUT/round-bench.txt" 2>&1 || status=1
for s in 10k 100k openb; do
  rounds=200; [ "$s" = 100k ] && rounds=50
  plot=(); [ "$s" = 10k ] && plot=(--plot "$OUT/bench-10k.svg")
  run "$G/bin/placer" bench --scenario "$s" --rounds "$rounds" --data "$G/data" --json "$OUT/bench-$s.json" \
    "${plot[@]}" >> "$OUT/round-bench.txt" 2>&1 || status=1
done
echo "== $gpu, commit $commit"
grep -E "^\[  (PASSED|FAILED|SKIPPED) *\]|tests? from .* ran" "$OUT/tests.txt"
grep -E "^(round/|config|cpu |cuda |kube )" "$OUT/round-bench.txt" | tail -24
exit $status
