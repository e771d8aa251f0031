#!/usr/bin/env bash
# The three fuzzers of make fuzz, all at once, SECONDS each (libFuzzer's
# -max_total_time is wall time): the request fuzzer, the transport fuzzer and
# the transport fuzzer through CURVE boxes, built in BUILD (make fuzz). Each
# writes BUILD/<name>.log; a finding lands in BUILD/findings and fails the run.
#   tests/fuzz/run-all.sh BUILD SECONDS
# At once rather than one after another: on 2 cores one after another left a
# core idle for the whole 3 x SECONDS (make test, 2026-12-07: 94 s).
set -uo pipefail
build=${1:?"run-all.sh: BUILD SECONDS"}
seconds=${2:?"run-all.sh: BUILD SECONDS"}
cd "$(dirname "$0")/../.."

# name, binary, -max_len, corpus, seeds, findings' prefix (- for none)
fuzzers=(
  "fuzz request_fuzz 65536 corpus tests/fuzz/regressions -"
  "zmtp-fuzz zmtp_fuzz 16384 zmtp-corpus tests/fuzz/zmtp_seeds zmtp-"
  "zmtp-curve-fuzz zmtp_curve_fuzz 16384 zmtp-curve-corpus tests/fuzz/zmtp_curve_seeds zmtp-curve-"
)
mkdir -p "$build/findings"
declare -A pid
for f in "${fuzzers[@]}"; do
  read -r name bin len corpus seeds prefix <<<"$f"
  mkdir -p "$build/$corpus"
  "$build/tests/fuzz/$bin" -max_total_time="$seconds" -max_len="$len" -print_final_stats=1 \
    -artifact_prefix="$build/findings/${prefix#-}" "$build/$corpus" "$seeds" > "$build/$name.log" 2>&1 &
  pid[$name]=$!
done
echo "fuzzers: request, transport and transport through CURVE, $seconds s each, at once; logs in $build/*fuzz.log"
failed=0
for f in "${fuzzers[@]}"; do
  read -r name _ <<<"$f"
  if wait "${pid[$name]}"; then
    echo "$name:" $(grep -E '^stat::(number_of_executed_units|peak_rss_mb)|^Done' "$build/$name.log")
  else
    tail -40 "$build/$name.log"
    echo "make fuzz: a finding by $name, saved in $build/findings"
    failed=1
  fi
done
exit $failed
