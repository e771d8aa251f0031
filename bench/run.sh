#!/usr/bin/env bash
# Runs the round benchmarks on every backend this machine has and records
# the results: bench/results/<date>-<host>.json (Google Benchmark JSON with
# commit, date and device in its context) and a markdown summary beside it.
#   bench/run.sh                 # all benchmarks
#   FILTER='cpu/10k' bench/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
[ -x "$BUILD/bench/round_bench" ] || make build
commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!bench/results' || echo "-dirty")
day=$(date -u +%Y-%m-%d)
host=${PLACER_BENCH_HOST:-$(hostname -s)}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
out=bench/results/${day}-${host}
"$BUILD/bench/round_bench" --benchmark_out="$out.json" --benchmark_out_format=json \
  --benchmark_context=commit="$commit" --benchmark_context=date="$day" \
  --benchmark_context=gpu="${gpu:-none}" ${FILTER:+--benchmark_filter="$FILTER"}
python3 bench/summarize.py "$out.json" > "$out.md"
echo "wrote $out.json and $out.md"
