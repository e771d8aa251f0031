#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with .gpu/ carried (scripts/gpu-bundle.sh made
# it). Each step is one device call, well inside the 600 s a call may take, writing to $OUT (at most
# 8 files come back) and ending with a short summary:
#
#   bash .gpu/gpu-run.sh calibrate      # the calibration kit (issue 53 item 5; at most 5 minutes, ~1 on an
#                                       # H200): calibrate.json (launch, wait, cooperative launch, graph, copies,
#                                       # grid.sync, CTA steps, a warp's 64-bit least by atomics and by shuffles,
#                                       # clusters and DSM, a cell's score on a thread and a warp), timeline.json
#                                       # (every call of 20 rounds at 10k, openb, 100k, host and GPU times, the
#                                       # tier kernel against its phase sum) and round-bench-calibrate.json (the
#                                       # tier phases); `all` runs it first
#   bash .gpu/gpu-run.sh all [SECONDS]  # everything below in one call, most telling first, each part
#                                       # skipped once less than its share of SECONDS (480) is left:
#                                       # one machine start for a whole session's GPU figures
#   bash .gpu/gpu-run.sh check          # the device, the CUDA parity tests under compute-sanitizer
#                                       # (memcheck, racecheck), every test, a 10-round CUDA bench
#   bash .gpu/gpu-run.sh bench 10k      # round_bench and `placer bench` for one scenario (10k, 100k,
#   bash .gpu/gpu-run.sh bench 100k     # openb), CUDA first, bounded rounds
#   bash .gpu/gpu-run.sh bench openb    # (PLACER_BENCH_CONFIGS=cuda,cpu: `placer bench` without kube's minutes at 100k)
#   bash .gpu/gpu-run.sh quick          # after a change to the CUDA path: the CUDA parity tests and the
#                                       # CUDA round_bench with its per-tier-phase counters, with the team
#                                       # steps and without (PLACER_CUDA_TEAM_STEPS=0) (a minute or two)
#   bash .gpu/gpu-run.sh sweep VAR V...  # the CUDA parity tests, then the CUDA round_bench once per value
#                                       # of the environment variable VAR (round-bench-VAR-V.json, 5 at most);
#                                       # PLACER_SWEEP_CONFIGS=cpu: the CPU backend's instead, no parity tests
#   bash .gpu/gpu-run.sh sanitize       # racecheck on the kernel parity tests, racecheck and memcheck
#                                       # over two full CUDA rounds at 10k, 10k-k8s, 100k and openb (~100 s)
#   bash .gpu/gpu-run.sh session [SECONDS]  # a session's first call (500): the parity tests, sanitize,
#                                       # the constrained rounds (-k8s) against the plain ones on both
#                                       # backends, the offer threshold at 8 16 32, the CPU team at 1 4 16 threads,
#                                       # placer bench (cuda, cpu) and ncu; the JSON files in one tar
#   bash .gpu/gpu-run.sh grid [SECONDS]  # the tier grid's first GPU call (420): parity (one CTA if the grid
#                                       # fails it), both backends, one CTA and the grid's thresholds, placer
#                                       # bench and the auto trial at 10k, sanitizers and ncu as time allows
#   bash .gpu/gpu-run.sh blocks [SECONDS]  # the tier grid's size: the default against other sizes, alternating
#                                       # (PLACER_BLOCKS_SWEEP), both backends, placer bench, the auto trial
#   bash .gpu/gpu-run.sh offers [SECONDS]  # the group offers' first GPU call (540): parity (the whole CTA's
#                                       # offers if the groups fail it), synccheck and memcheck,
#                                       # the groups against the whole CTA's offers, alternating, both
#                                       # backends, placer bench at each scale, the auto trial
#   bash .gpu/gpu-run.sh lanes [SECONDS]  # a cell's score on lanes' first GPU call (480): parity (a worker a
#                                       # cell if the lanes fail it), synccheck and memcheck, the lanes against
#                                       # a worker a cell (PLACER_CUDA_REFRESH_LANES=0), alternating, both
#                                       # backends, placer bench at each scale, the auto trial
#   bash .gpu/gpu-run.sh shared [SECONDS]  # a chain's scratch in the CTA's shared memory (issue 53 item 2,
#                                       # opt-in PLACER_CUDA_TIER_SHARED=1; 480): parity with it (off from
#                                       # there if it fails), racecheck and memcheck, on against off,
#                                       # alternating, then both backends as they are by default
#   bash .gpu/gpu-run.sh lent [SECONDS]  # issue 53 item 7 on one call (480): the kit, parity (scratch in shared
#                                       # memory on, then off), both backends, placer bench and the auto trial,
#                                       # memcheck / racecheck / synccheck over rounds, then alternations
#   bash .gpu/gpu-run.sh next [SECONDS]  # the next GPU call (420): parity (the whole CTA's offers if it fails),
#                                       # the kit's microbenchmarks, synccheck on the kernel tests,
#                                       # cluster-scratch, losers sitting out against every loser listed
#                                       # (PLACER_CUDA_LOSERS_SIT_OUT=0), alternating, then both backends,
#                                       # placer bench at each scale, 8 sessions, the auto trial; the
#                                       # tier kernel's stalls by instruction (ncu) after the parity
#   bash .gpu/gpu-run.sh cluster-scratch [SECONDS]  # whether 10k-k8s's cluster failure is gone: parity with
#                                       # the clusters' scratch in global memory, zeroed shared, as is; memcheck
#                                       # where one fails; 10k-k8s and openb rounds where they pass (240)
#   bash .gpu/gpu-run.sh cluster-diag [SECONDS]  # why 10k-k8s's chains fail on a cluster (PLACER_CUDA_TIER_SHARED=1
#                                       # PLACER_CUDA_TIER_CLUSTER=1): the scenarios' parity on grids of 2 and 4
#                                       # CTAs, memcheck's first errors with source lines, racecheck,
#                                       # CUDA_LAUNCH_BLOCKING=1 (240)
#   bash .gpu/gpu-run.sh profile        # where the CUDA round's time goes: round_bench's per-stage and
#                                       # per-tier-phase counters, ncu's time per kernel (2 rounds at 10k
#                                       # and at 100k), the tier kernel's stalls by instruction at 10k
#                                       # (ncu's PC sampling), and nsys's API and copy summary where it exists
#
# Every step stops at once unless the CUDA backend is the one in use, on the GPU it names: a
# machine whose driver or GPU the probe refuses would otherwise record CPU figures as GPU ones.
# docs/gpu-session.md has the procedure and what to commit.
set -uo pipefail
G=$(cd "$(dirname "$0")" && pwd)
# gpu-bundle.sh packs the binaries and libraries as one archive (the 64 MiB a call carries).
[ -d "$G/bin" ] || { [ -f "$G/binlib.tar.xz" ] && tar xJf "$G/binlib.tar.xz" -C "$G"; } ||
  { echo "gpu-run: no $G/bin and no $G/binlib.tar.xz to unpack (scripts/gpu-bundle.sh makes them)"; exit 2; }
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PLACER_DATA_DIR=$G/data
run() { "$G/run" "$@"; }
# One full CUDA round of 10k-k8s, the scenario whose chains take the clusters (+ --rounds N).
k8s_round=("$G/run" "$G/bin/placer" bench --scenario 10k-k8s --configs cuda --data "$G/data")
commit=$(cat "$G/commit")
step=${1:-check}
start=$SECONDS
budget=100000  # a step with a budget sets its own (fits)
status=0

# The CUDA backend must be usable: `placer version` names the GPU or says why not.
run "$G/bin/placer" version > /tmp/placer-version.txt 2>&1
gpu=$(sed -n 's/^GPU: //p' /tmp/placer-version.txt)
{ date -u +%FT%TZ; echo "commit $commit"; cat /tmp/placer-version.txt; nvidia-smi; } > "$OUT/device.txt" 2>&1
case "$gpu" in
  ""|none*) echo "gpu-run: the CUDA backend is not usable here: ${gpu:-no answer}"; cat "$OUT/device.txt"; exit 2 ;;
esac
# `placer bench`'s cuda configuration must have run on CUDA on that GPU.
check_cuda() {  # bench json
  grep -q '"backend": *"cuda (GPU 0' "$1" || grep -q '"backend":"cuda (GPU 0' "$1" ||
    { echo "gpu-run: $1 does not show the CUDA backend on GPU 0"; exit 2; }
}
# Whether a part that needs about $1 seconds still fits in the call's $budget.
fits() { (( SECONDS - start + $1 <= budget )) || { echo "gpu-run: skipped, $1 s do not fit: $2" | tee -a "$OUT/tests.txt"; return 1; }; }

parity='BackendParity.Cuda*:BackendParity.Bench*:TierParity.*:TierChain.*:TierLocal.*'
hung=0
timed() {  # seconds command...: a command past its time marks the GPU run hung (a kernel that never ends)
  timeout "$@"; local rc=$?
  (( rc == 124 )) && { hung=1; echo "gpu-run: timed out after $1 s: ${*:2}"; }
  return $rc
}
parity_tests() {  # [quick] the CUDA parity first: it is what no other machine runs; a hung kernel ends it
  {
    echo "== parity tests${PLACER_CUDA_TIER_BLOCKS:+, PLACER_CUDA_TIER_BLOCKS=$PLACER_CUDA_TIER_BLOCKS}"
    for t in kernels_test_omp solver_test_omp; do
      (( hung )) || timed 60 "$G/run" "$G/bin/$t" --gtest_filter="$parity" || status=1
    done
    # The resident round checked on the GPU itself: the device's copies read
    # back and compared with the host's at every call (residency, docs/architecture.md).
    # (quick: not; it is the longest of them, 45 s on an H200.)
    [ "${1:-}" = quick ] || (( hung )) ||
      PLACER_VERIFY_RESIDENT=1 timed 90 "$G/run" "$G/bin/solver_test_omp" --gtest_filter='BackendParity.Cuda*' || status=1
  } >> "$OUT/tests.txt" 2>&1
}
auto_trial() {  # placer serve --backend auto's choice on its 10k trial round
  timeout 30 "$G/run" "$G/bin/placer" serve --backend auto --auto-trial 10k --endpoint tcp://127.0.0.1:5599 \
    > "$OUT/auto-trial.txt" 2>&1
  grep "backend auto" "$OUT/auto-trial.txt" | tee -a "$OUT/bench.txt"
}
pack_results() {  # a call returns at most 8 files: all but these few in one tar (2026-12-04's second call lost its
  # shared-diag.txt, sanitizer.txt and tests.txt, which the tar had left out)
  (cd "$OUT" && shopt -s nullglob && f=() && for x in *; do
    case "$x" in device.txt|bench.txt|calibrate.json|calibrate.txt|results.tar|*.svg) ;; *) f+=("$x") ;; esac
  done && (( ${#f[@]} )) && tar cf results.tar "${f[@]}" && rm -f "${f[@]}")
}
all_tests() {
  for t in solver_test_omp kernels_test_omp; do
    timeout 200 "$G/run" "$G/bin/$t" --gtest_filter="-$parity" >> "$OUT/tests.txt" 2>&1 || status=1
  done
}
sanitizer() {  # tools...: memory errors, then shared-memory races, on the parity tests
  for tool in "$@"; do
    for t in kernels_test_omp solver_test_omp; do
      timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 9 \
        "$G/run" "$G/bin/$t" --gtest_filter="$parity" >> "$OUT/sanitizer.txt" 2>&1 || status=1
    done
  done
}
parity_or() {  # what var=value...: the parity tests ($parity_quick: quick); where they fail, each var=value (the way
  # before) for the rest of the call
  local what=$1
  shift
  parity_tests ${parity_quick:-}
  if (( hung || status )); then
    echo "gpu-run: $what failed the parity tests (hung=$hung); $* from here" | tee -a "$OUT/tests.txt"
    export "$@"
    hung=0
    parity_tests quick
    (( hung )) && { pack_results; summary; exit 1; }
  fi
}
figures() {  # a step's end: both backends in one run, placer bench at each scale, the auto trial, the summary
  fits 40 "both backends" && round_bench main '10k|100k|openb' 'cuda|cpu'
  export PLACER_BENCH_CONFIGS=cuda,cpu
  for s in 10k 100k openb; do fits 30 "placer bench $s" && placer_bench "$s"; done
  fits 40 "8 sessions at once" && sessions_bench
  fits 30 "auto trial" && auto_trial
  pack_results
  summary
}
kernels_under_synccheck() {  # the kernel parity tests under synccheck (warp barriers and shuffles)
  fits 90 "synccheck on the kernels" || return 0
  timeout 90 compute-sanitizer --tool synccheck --error-exitcode 9 \
    "$G/run" "$G/bin/kernels_test_omp" --gtest_filter="$parity" >> "$OUT/sanitizer.txt" 2>&1 || status=1
}
kernels_under_racecheck() {  # the kernel parity tests under racecheck (the CTA's shared memory)
  fits 120 "racecheck on the kernel parity tests" || return 0
  timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 \
    "$G/run" "$G/bin/kernels_test_omp" --gtest_filter="$parity" >> "$OUT/sanitizer.txt" 2>&1 || status=1
}
new_way_sanitized() {  # a new way's first call: synccheck on the kernel tests and a 10k round, memcheck at 10k and openb
  kernels_under_synccheck
  rounds_under synccheck 40 10k
  rounds_under memcheck 40 10k openb
}
alternate() {  # VAR slug what: the CUDA round_bench with VAR at 1, 0, 1, 0 (none where VAR is 0: it failed parity)
  local var=$1 slug=$2 what=$3 before=${!1-} v
  [ "$before" = 0 ] && return 0
  for v in 1 0 1 0; do
    fits 15 "$what $v" || continue
    export "$var=$v"
    round_bench "$slug-$v-$SECONDS" '10k|100k|openb' cuda
  done
  if [ -n "$before" ]; then export "$var=$before"; else unset "$var"; fi
}
rounds_under() {  # tool seconds scenario...: two full CUDA rounds a scenario under compute-sanitizer's tool
  local tool=$1 secs=$2 s
  shift 2
  for s in "$@"; do
    fits "$secs" "$tool $s" || continue
    echo "== $tool over 2 rounds of placer bench $s" >> "$OUT/sanitizer.txt"
    rm -f /tmp/sanitize.json
    timeout "$secs" compute-sanitizer --tool "$tool" --error-exitcode 9 "$G/run" "$G/bin/placer" bench --scenario "$s" \
      --rounds 2 --configs cuda --data "$G/data" --json /tmp/sanitize.json >> "$OUT/sanitizer.txt" 2>&1 || status=1
    [ ! -f /tmp/sanitize.json ] || check_cuda /tmp/sanitize.json  # (none: the tool stopped it, status says)
  done
}
smoke() {
  timed 60 "$G/run" "$G/bin/placer" bench --scenario 10k --rounds 10 --configs cuda --data "$G/data" \
    --json /tmp/bench-10k-smoke.json >> "$OUT/tests.txt" 2>&1 || status=1
  check_cuda /tmp/bench-10k-smoke.json
}
round_bench() {  # name scenario-regex [config-regex] (at most $rb_seconds, 240 unless set)
  timeout "${rb_seconds:-240}" "$G/run" "$G/bin/round_bench" --benchmark_filter="round/(${3:-cuda|cpu|kube-least})/($2)/" \
    --benchmark_out="$OUT/round-bench-$1.json" --benchmark_out_format=json \
    --benchmark_context=commit="$commit" --benchmark_context=date="$(date -u +%F)" \
    --benchmark_context=gpu="${gpu//,/;}" >> "$OUT/bench.txt" 2>&1 || status=1
}
placer_bench() {  # scenario [--plot file]
  local s=$1 rounds=200; shift
  [ "$s" = 100k ] && rounds=50
  timeout 240 "$G/run" "$G/bin/placer" bench --scenario "$s" --rounds "$rounds" --configs "${PLACER_BENCH_CONFIGS:-cuda,cpu,kube}" \
    --data "$G/data" --json "$OUT/bench-$s.json" "$@" >> "$OUT/bench.txt" 2>&1 || status=1
  check_cuda "$OUT/bench-$s.json"
}
sessions_bench() {  # issue 53 item 8: 8 sessions at once on 8 workers, each backend (rounds a second)
  timeout 240 "$G/run" "$G/bin/placer" bench --scenario 10k --clients 8 --workers 8 --rounds 400 --configs cuda,cpu \
    --data "$G/data" --json "$OUT/bench-sessions-10k.json" >> "$OUT/bench.txt" 2>&1 || status=1
}
microbenchmarks() {  # the kit's microbenchmarks alone (about 3 s on the H200)
  timeout 120 "$G/run" "$G/bin/calibrate" --out "$OUT/calibrate.json" --commit "$commit" >> "$OUT/calibrate.txt" 2>&1 ||
    { status=1; echo "gpu-run: calibrate failed" | tee -a "$OUT/calibrate.txt"; }
}
calibrate() {  # issue 53 item 5, at most 300 s: the kit's microbenchmarks, the call timeline, the tier phases
  local t0=$SECONDS
  microbenchmarks
  timed 120 "$G/run" "$G/bin/round_bench" timeline --backend cuda --scenario 10k,openb,100k --rounds 20 --commit "$commit" \
    --out "$OUT/timeline.json" >> "$OUT/calibrate.txt" 2>&1 || status=1
  [ ! -f "$OUT/timeline.json" ] || check_cuda "$OUT/timeline.json"
  # The tier kernel's phases one by one (tier_<phase>_us) beside the timeline's kernel time, in what is left.
  local left=$((300 - (SECONDS - t0)))
  (( left <= ${calibrate_phases_cap:-300} )) || left=$calibrate_phases_cap
  (( hung || left < 30 )) || rb_seconds=$left round_bench calibrate '10k|100k|openb' cuda
  echo "gpu-run: calibrate took $((SECONDS - t0)) s" | tee -a "$OUT/calibrate.txt"
}
summary() {
  echo "== $gpu, commit $commit, $((SECONDS - start)) s"
  [ -f "$OUT/calibrate.txt" ] && grep -E "^calibrate:|^  [a-z_0-9]+ +[-0-9.]+ us|skipped:|^(10k|openb|100k) +round" "$OUT/calibrate.txt" | cut -c1-150
  [ -f "$OUT/sanitizer.txt" ] && grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) *\]" "$OUT/sanitizer.txt"
  [ -f "$OUT/tests.txt" ] && grep -E "^\[  (PASSED|FAILED|SKIPPED) *\]|tests? from .* ran|^gpu-run" "$OUT/tests.txt"
  [ -f "$OUT/bench.txt" ] && grep -E "^(round/|config|cpu |cuda |kube )" "$OUT/bench.txt" | cut -c1-120
}

stalls() {  # issue 53 item 6: where the 10k tier kernel's warps wait, instruction by instruction (ncu's PC
  # sampling over its third launch: stalls-10k-sass.csv.xz, the source page by SASS instruction, which
  # bench/gpu_kit/sass_lines.py joins to the bundle's SASS dump; stalls-10k-raw.csv.xz, the kernel's totals by
  # stall reason), about 60 s. Compressed, and each left out past 12 MiB: results.tar comes back whole only
  # under 16 MiB (the report itself, about as large, stays on the machine)
  local ncu
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  [ -n "$ncu" ] || { echo "gpu-run: no ncu here: no stall profile" | tee -a "$OUT/tests.txt"; return; }
  fits 90 "the tier kernel's stalls" || return
  rm -f /tmp/stalls-10k.ncu-rep
  timeout 150 "$G/run" "$ncu" --clock-control none -k regex:tier_grid_kernel --launch-skip 2 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section LaunchStats --import-source no -f -o /tmp/stalls-10k \
    "$G/bin/placer" bench --scenario 10k --rounds 3 --configs cuda --data "$G/data" > /tmp/stalls.txt 2>&1 ||
    { status=1; tail -5 /tmp/stalls.txt; }
  [ -f /tmp/stalls-10k.ncu-rep ] || { echo "gpu-run: ncu wrote no report" | tee -a "$OUT/tests.txt"; return; }
  "$ncu" -i /tmp/stalls-10k.ncu-rep --page source --print-source sass --csv > /tmp/stalls-10k-sass.csv 2>&1 || status=1
  "$ncu" -i /tmp/stalls-10k.ncu-rep --page raw --csv > /tmp/stalls-10k-raw.csv 2>&1 || status=1
  echo "== stalls: $(wc -l < /tmp/stalls-10k-sass.csv) lines of SASS samples, $(grep -c pcsamp /tmp/stalls-10k-raw.csv) lines of stall reasons"
  for f in sass raw; do
    xz -T0 -6 -c "/tmp/stalls-10k-$f.csv" > "$OUT/stalls-10k-$f.csv.xz"
    (( $(stat -c %s "$OUT/stalls-10k-$f.csv.xz") < 12 << 20 )) ||
      { echo "gpu-run: stalls-10k-$f.csv.xz is past 12 MiB: left out" | tee -a "$OUT/tests.txt"; rm -f "$OUT/stalls-10k-$f.csv.xz"; }
  done
}
cluster_diag() {  # seconds: why 10k-k8s's chains fail on a cluster (PLACER_CUDA_TIER_SHARED=1 PLACER_CUDA_TIER_CLUSTER=1)
  # 2026-12-04 (dc173b0 .. 704181c): the scenarios' parity failed with an illegal address on the clusters
  # (with every phase wide too, and with a fence at the cluster's scope before each barrier), passed with
  # one CTA's shared scratch alone; memcheck passed 10k, 100k and 100k-k8s rounds on the clusters and
  # did not end 10k-k8s's in 55 s; racecheck passed 10k's. Here: the scenarios' parity on grids of 2 and 4
  # CTAs without shared memory, then memcheck's first errors at 10k-k8s with
  # their source lines (-lineinfo) in up to 150 s, then racecheck over one 10k-k8s round, then two rounds
  # under CUDA_LAUNCH_BLOCKING=1; what they found, printed.
  local d="$OUT/shared-diag.txt" left=$1 t0=$SECONDS b
  # First, the same program on a grid of 2 and of 4 CTAs in global memory: the GPU model and the twin
  # act for every CTA from one (block() 0), so a race between CTAs shows on a GPU only, and a grid of 4
  # is what each of 8 workers gets (--workers 8); 33 passes.
  for b in 2 4; do
    echo "== the scenarios' parity on a grid of $b CTAs (PLACER_CUDA_TIER_BLOCKS=$b), global memory" >> "$d"
    PLACER_CUDA_TIER_BLOCKS=$b timeout 45 "$G/run" "$G/bin/solver_test_omp" \
      --gtest_filter=BackendParity.BenchmarkScenariosPlaceTheSame 2>&1 | grep -E "Failure|exception|PASSED|FAILED" |
      cut -c1-300 >> "$d"
  done
  left=$(( $1 - (SECONDS - t0) ))
  export PLACER_CUDA_TIER_SHARED=1 PLACER_CUDA_TIER_CLUSTER=1
  if (( left > 30 )); then
    echo "== memcheck, 10k-k8s, the clusters" >> "$d"
    timeout $(( left < 150 ? left : 150 )) compute-sanitizer --tool memcheck --show-backtrace device --print-limit 3 \
      "${k8s_round[@]}" --rounds 1 2>&1 |
      grep -vE "^(config|cuda |\(calls|server-side|wire path|  cuda|scenario)" >> "$d"
    echo "rc ${PIPESTATUS[0]}" >> "$d"
  fi
  left=$(( $1 - (SECONDS - t0) ))
  if (( left > 40 )); then
    echo "== racecheck, 10k-k8s, the clusters" >> "$d"
    timeout $(( left - 30 )) compute-sanitizer --tool racecheck --print-limit 3 "${k8s_round[@]}" --rounds 1 2>&1 |
      grep -E "RACECHECK|hazard|Race|at .*:[0-9]+|rror" | head -20 >> "$d"
    echo "rc ${PIPESTATUS[0]}" >> "$d"
  fi
  echo "== CUDA_LAUNCH_BLOCKING=1, 2 rounds of 10k-k8s, the clusters" >> "$d"
  CUDA_LAUNCH_BLOCKING=1 timeout 25 "${k8s_round[@]}" --rounds 2 2>&1 | grep -E "replicas placed|rror" >> "$d"
  echo "rc ${PIPESTATUS[0]}" >> "$d"
  unset PLACER_CUDA_TIER_SHARED PLACER_CUDA_TIER_CLUSTER
  grep -E "^==|^rc |Invalid|out of bounds|by thread|at .*:[0-9]+|SUMMARY|rror|replicas|PASSED|FAILED|exception" "$d" |
    cut -c1-300 | head -60
}

cluster_scratch() {  # whether the clusters' 10k-k8s failure is gone (PLACER_CUDA_CLUSTER_SCRATCH), about 200 s
  # 2026-12-04's fifth call (8dfe1b9): memcheck's invalid 8-byte __shared__ writes at offer_group.hpp
  # (block 0, several lanes on one address) on the clusters. Found on 2026-12-06 without a GPU, in the
  # kernel's SASS: nvcc's 64-bit atomic add, max and min on a generic address fall back, for shared
  # memory, to LDS / ATOMS.CAST.SPIN on the address's low 32 bits (the CTA's own window), which a
  # cluster's map_shared_rank addresses are not; the cluster's team now takes them by 64-bit CAS
  # (cuda_team::by_cas). Here the scenarios' parity on the clusters with their scratch left in global
  # memory (2: the cluster's barriers alone), in shared memory zeroed first (1), and as it is (0);
  # memcheck where one fails; then 10k-k8s and openb rounds on the clusters (where they pass)
  # against the default.
  local d="$OUT/cluster-scratch.txt" v
  passed() {  # scratch: its parity section of $d ends PASSED
    awk -v h="== PLACER_CUDA_CLUSTER_SCRATCH=$1:" 'index($0, h) == 1 { on = 1; next } /^== / { on = 0 }
      on && /PASSED/ { ok = 1 } END { exit !ok }' "$d"
  }
  export PLACER_CUDA_TIER_SHARED=1 PLACER_CUDA_TIER_CLUSTER=1
  for v in 2 1 0; do
    echo "== PLACER_CUDA_CLUSTER_SCRATCH=$v: the scenarios' parity" >> "$d"
    PLACER_CUDA_CLUSTER_SCRATCH=$v timeout 45 "$G/run" "$G/bin/solver_test_omp" \
      --gtest_filter=BackendParity.BenchmarkScenariosPlaceTheSame 2>&1 | grep -E "Failure|exception|rror|PASSED|FAILED" |
      cut -c1-300 | head -8 >> "$d"
  done
  for v in 0 2; do
    if ! passed "$v" && fits 90 "memcheck, scratch $v"; then
      echo "== memcheck, 10k-k8s, PLACER_CUDA_CLUSTER_SCRATCH=$v" >> "$d"
      PLACER_CUDA_CLUSTER_SCRATCH=$v timeout 90 compute-sanitizer --tool memcheck --show-backtrace device --print-limit 3 \
        "${k8s_round[@]}" --rounds 1 2>&1 |
        grep -E "Invalid|out of bounds|by thread|at .*:[0-9]+|SUMMARY|rror" | grep -v "Device Frame" | head -20 >> "$d"
    fi
  done
  for v in 2 1 0; do
    passed "$v" && fits 30 "rounds at scratch $v" &&
      PLACER_CUDA_CLUSTER_SCRATCH=$v rb_seconds=30 round_bench "cluster-scratch-$v" '10k-k8s|openb' cuda
  done
  unset PLACER_CUDA_TIER_SHARED PLACER_CUDA_TIER_CLUSTER
  fits 30 "rounds, the default" && rb_seconds=30 round_bench default '10k-k8s|openb' cuda
  cat "$d"
}

case "$step" in
  all)
    budget=${2:-480}
    calibrate  # the kit first (issue 53 item 5); a round that hangs in its timeline stops the rest, as in smoke
    parity_tests
    (( hung )) || smoke
    (( hung )) && { summary; exit 1; }
    fits 60 "round_bench" && round_bench all '10k|100k|openb'
    fits 30 "refresh lanes off" && PLACER_CUDA_REFRESH_LANES=0 round_bench refresh-lanes-0 '10k|openb' cuda
    fits 40 "placer bench 10k" && placer_bench 10k
    fits 60 "placer bench 100k" && placer_bench 100k
    fits 30 "placer bench openb" && placer_bench openb
    fits 40 "8 sessions at once" && sessions_bench
    fits 60 "every other test" && all_tests
    fits 100 "memcheck" && sanitizer memcheck
    fits 100 "racecheck" && sanitizer racecheck
    pack_results
    summary
    ;;
  calibrate)
    calibrate
    summary
    ;;
  check)
    sanitizer memcheck racecheck
    parity_tests
    all_tests
    smoke
    summary
    ;;
  bench)
    s=${2:?"gpu-run: bench needs a scenario: 10k, 100k or openb"}
    round_bench "$s" "$s"
    plot=(); [ "$s" = 10k ] && plot=(--plot "$OUT/bench-10k.svg")
    placer_bench "$s" "${plot[@]}"
    summary
    ;;
  quick)
    parity_tests
    (( hung )) || round_bench quick '10k|100k|openb' cuda
    # The same with the first GPU run's serial tier steps, to compare on this machine.
    (( hung )) || PLACER_CUDA_TEAM_STEPS=0 round_bench quick-serial '10k|100k|openb' cuda
    summary
    ;;
  sweep)
    var=${2:?"gpu-run: sweep needs a variable and its values"}
    shift 2
    configs=${PLACER_SWEEP_CONFIGS:-cuda}
    [[ $configs == *cuda* ]] && parity_tests
    for v in "$@"; do
      export "$var=$v"
      (( hung )) || round_bench "$var-$v" '10k|100k|openb' "$configs"
    done
    unset "$var"
    summary
    ;;
  sanitize)
    # The kernel parity tests under racecheck, then two full CUDA rounds a
    # scenario under racecheck and memcheck: every kernel of a round at
    # scale, and of a constrained one (the admit and preference tables).
    # (The solver's 300 random rounds do not end under racecheck in 200 s.)
    # About 80 s on an H100 without 10k-k8s.
    timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 \
      "$G/run" "$G/bin/kernels_test_omp" --gtest_filter="$parity" >> "$OUT/sanitizer.txt" 2>&1 || status=1
    for tool in racecheck memcheck; do rounds_under "$tool" 100 10k 10k-k8s 100k openb; done
    summary
    ;;
  session)
    # One machine start for a session's first figures, most telling first:
    # correctness (parity, then the sanitizers over full rounds), the offer
    # threshold, the CPU backend's team size on this machine's cores, the
    # end-to-end p50 / p99, then ncu. More than 8 files: the JSON go in one tar.
    budget=${2:-500}
    parity_tests
    (( hung )) && { summary; exit 1; }
    if fits 90 "sanitize"; then "$0" sanitize > /tmp/sanitize.log 2>&1 || status=1; fi
    # Issue 16's bound on the GPU: the constrained rounds against the same rounds without and against
    # the rounds with their classes and no constraints (-split), on both backends in one call (never
    # measured on a GPU before).
    # The grid (issue 36; docs/architecture.md, "The grid"): the default is every CTA the device
    # holds; one CTA as the rounds before 2026-11-28 ran, and tiers going wide from more cells.
    fits 20 "one CTA" && PLACER_CUDA_TIER_BLOCKS=1 round_bench blocks-1 '10k|100k|openb' cuda
    for v in 4096 65536; do
      fits 20 "grid from $v" && PLACER_CUDA_GRID_CELLS_FROM=$v round_bench "grid-from-$v" '10k|100k|openb' cuda
    done
    fits 20 "offers searched" && PLACER_CUDA_OFFER_PAIRS=0 round_bench offer-pairs-0 '10k|100k|openb' cuda
    fits 50 "constrained rounds" && round_bench constrained '10k|10k-k8s|10k-split|100k|100k-k8s|100k-split' 'cuda|cpu'
    for v in 8 16 32; do
      fits 20 "offer least $v" && PLACER_CUDA_TEAM_OFFER_LEAST=$v round_bench "offer-least-$v" '10k|100k|openb' cuda
    done
    for v in 1 4 16; do
      fits 25 "cpu tier threads $v" && PLACER_TIER_THREADS=$v round_bench "cpu-threads-$v" '10k|100k|openb' cpu
    done
    export PLACER_BENCH_CONFIGS=cuda,cpu
    for s in 10k 100k openb; do fits 25 "placer bench $s" && placer_bench "$s"; done
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    for s in 10k 100k; do
      fits 30 "ncu $s" && timeout 120 "$G/run" "${ncu:-ncu}" --clock-control none --metrics gpu__time_duration.sum \
        --print-summary per-kernel --log-file "$OUT/ncu-$s.txt" "$G/bin/placer" bench --scenario "$s" --rounds 2 \
        --configs cuda --data "$G/data" > /tmp/ncu-bench.txt 2>&1
    done
    pack_results
    summary
    ;;
  grid)
    # The tier kernel's grid (issue 36; docs/architecture.md, "The grid") on its first GPU: the
    # parity tests on the grid, or on one CTA where the grid fails them; both backends' rounds in
    # one run (issue 36's targets); one CTA and the grid's thresholds beside the default (the grid
    # barrier's cost); placer bench and the auto trial at 10k; then the sanitizers and ncu.
    budget=${2:-420}
    parity_or "the grid" PLACER_CUDA_TIER_BLOCKS=1
    fits 60 "both backends" && round_bench main '10k|100k|openb' 'cuda|cpu'
    fits 20 "one CTA" && PLACER_CUDA_TIER_BLOCKS=1 round_bench blocks-1 '10k|100k|openb' cuda
    for v in 4096 65536; do
      fits 20 "grid from $v" && PLACER_CUDA_GRID_CELLS_FROM=$v round_bench "grid-from-$v" '10k|100k|openb' cuda
    done
    fits 20 "offers searched" && PLACER_CUDA_OFFER_PAIRS=0 round_bench offer-pairs-0 '10k|100k|openb' cuda
    export PLACER_BENCH_CONFIGS=cuda,cpu
    fits 30 "placer bench 10k" && placer_bench 10k
    fits 30 "auto trial" && auto_trial
    for s in 100k openb; do fits 30 "placer bench $s" && placer_bench "$s"; done
    kernels_under_racecheck
    for tool in memcheck racecheck; do rounds_under "$tool" 60 10k openb 100k; done
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    fits 30 "ncu 10k" && timeout 60 "$G/run" "${ncu:-ncu}" --clock-control none --metrics gpu__time_duration.sum \
      --print-summary per-kernel --log-file "$OUT/ncu-10k.txt" "$G/bin/placer" bench --scenario 10k --rounds 2 \
      --configs cuda --data "$G/data" > /tmp/ncu-bench.txt 2>&1
    pack_results
    summary
    grep -E "tier grid|^gpu-run" "$OUT/bench.txt" | head -5
    ;;
  blocks)
    # The tier grid's size: the default against grids of other sizes, alternating, each beside
    # the others in one call; then both backends, placer bench at each scale and the auto trial.
    budget=${2:-300}
    parity_tests quick
    (( hung || status )) && { summary; exit 1; }
    for v in ${PLACER_BLOCKS_SWEEP:-132 33 24 44 132 33}; do
      fits 15 "$v CTAs" && PLACER_CUDA_TIER_BLOCKS=$v round_bench "blocks-$v-$SECONDS" '10k|100k|openb' cuda
    done
    figures
    ;;
  offers)
    # The group offers (tier/offer_group.hpp: a row's offers on a warp, __syncwarp, one CTA barrier
    # a bidding round) and the grid's fewer barriers (a refresh in one pass, round 0's bidders
    # listed with the floors) on their first GPU: parity, or the recorded rounds' way from there
    # where they fail it; synccheck (the warp barriers) and memcheck; then the groups against
    # the whole CTA's offers (PLACER_CUDA_OFFER_GROUPS=0), and the fewer barriers against the
    # recorded ones, alternating; both backends in one run; placer bench at each scale; the auto trial.
    budget=${2:-540}
    parity_or "the group offers and fewer grid barriers" PLACER_CUDA_OFFER_GROUPS=0 PLACER_CUDA_REFRESH_ONE_PASS=0 \
      PLACER_CUDA_LIST_WITH_FLOORS_UPTO=0
    # (racecheck sees shared memory only, and the groups' data is global: synccheck, not racecheck.)
    new_way_sanitized
    alternate PLACER_CUDA_OFFER_GROUPS offer-groups "offer groups"
    for v in 0 1 0; do  # 0: two refresh passes and a grid barrier before round 0's list, as recorded up to 2026-11-28
      [ "${PLACER_CUDA_REFRESH_ONE_PASS:-1}" = 0 ] && break
      fits 15 "fewer grid barriers $v" || continue
      if [ "$v" = 0 ]; then
        PLACER_CUDA_REFRESH_ONE_PASS=0 PLACER_CUDA_LIST_WITH_FLOORS_UPTO=0 round_bench "grid-barriers-0-$SECONDS" '10k|100k|openb' cuda
      else
        round_bench "grid-barriers-1-$SECONDS" '10k|100k|openb' cuda
      fi
    done
    figures
    ;;
  lanes)
    # A cell's score on lanes (issue 53 item 3) on its first GPU: a small refresh's cells on runs of a
    # warp's lanes (__shfl_xor_sync within a run) and the score stage's entries on lanes, a cell a
    # thread. Parity, or a worker a cell from there where it fails (the score stage has no way back:
    # its failure is the parity tests'); synccheck (the shuffles' masks) and memcheck; the lanes
    # against a worker a cell (PLACER_CUDA_REFRESH_LANES=0), alternating; both backends; placer bench.
    budget=${2:-480}
    parity_or "the refresh on lanes" PLACER_CUDA_REFRESH_LANES=0
    new_way_sanitized
    alternate PLACER_CUDA_REFRESH_LANES refresh-lanes "refresh lanes"
    figures
    ;;
  shared)
    # A chain's scratch (prices, floors, bid lists, heaps, buckets) laid out in the CTA's shared
    # memory where it fits (issue 53 item 2; PLACER_CUDA_TIER_SHARED=1, off by default: on an H200
    # on 2026-12-04 one CTA's was correct and slower than the grid, 8.8 against 6.2-6.5 ms at 10k):
    # the 10k chains' 170-214 KB fit an H100's or H200's 227 KB; the larger keep the grid (a cluster
    # of CTAs with PLACER_CUDA_TIER_CLUSTER=1 as well, which failed 10k-k8s: cluster-diag). Parity
    # with it on, or off from there where it fails; racecheck (shared memory is what it checks) and
    # memcheck at 10k and openb; on against off, alternating; then the default.
    budget=${2:-480}
    export PLACER_CUDA_TIER_SHARED=1
    parity_or "the chain's scratch in shared memory" PLACER_CUDA_TIER_SHARED=0
    fits 150 "racecheck on the parity tests" && sanitizer racecheck
    rounds_under memcheck 40 10k openb
    alternate PLACER_CUDA_TIER_SHARED tier-shared "scratch in shared memory"
    unset PLACER_CUDA_TIER_SHARED
    figures
    ;;
  lent)
    # Issue 53 item 7 in one call on a session's only GPU, most needed first: the kit (calibrate,
    # its tier phases cut to 60 s), parity with a chain's scratch in shared memory (off from there
    # where it fails) and with it off, both backends' rounds, placer bench and the auto trial at 10k,
    # memcheck / racecheck / synccheck over full rounds, then the alternations (scratch in shared
    # memory on against off, a worker a refresh cell), 8 sessions, placer bench at openb and 100k,
    # synccheck and racecheck on the kernel parity tests, as time allows.
    budget=${2:-480}
    calibrate_phases_cap=60 calibrate
    (( hung )) && { summary; exit 1; }
    export PLACER_CUDA_TIER_SHARED=1
    parity_or "the chain's scratch in shared memory" PLACER_CUDA_TIER_SHARED=0
    [ "$PLACER_CUDA_TIER_SHARED" = 1 ] && PLACER_CUDA_TIER_SHARED=0 parity_tests quick
    (( hung )) && { summary; exit 1; }
    fits 40 "both backends" && round_bench main '10k|100k|openb' 'cuda|cpu'
    export PLACER_BENCH_CONFIGS=cuda,cpu
    fits 30 "placer bench 10k" && placer_bench 10k --plot "$OUT/bench-10k.svg"
    fits 30 "auto trial" && auto_trial
    rounds_under memcheck 40 10k openb
    rounds_under racecheck 40 10k openb
    rounds_under synccheck 40 10k
    alternate PLACER_CUDA_TIER_SHARED tier-shared "scratch in shared memory"
    fits 20 "a worker a refresh cell" && PLACER_CUDA_REFRESH_LANES=0 round_bench refresh-lanes-0 '10k|openb' cuda
    fits 40 "8 sessions at once" && sessions_bench
    for s in openb 100k; do fits 35 "placer bench $s" && placer_bench "$s"; done
    kernels_under_synccheck
    kernels_under_racecheck
    pack_results
    summary
    ;;
  next)
    # The next GPU call (~420 s): parity on the default path (where it fails, the whole CTA's
    # offers from there: the group offers' folds by shuffles, 2026-12-06, never ran on a GPU), the
    # kit's microbenchmarks (a row's offers folded by shuffles against atomics on one word:
    # warp_min_*, warp_fold_min), synccheck on the kernel tests (the folds' shuffles), then
    # cluster_scratch (where 10k-k8s's chains fail on a cluster), the losers that would sit a round
    # out counted, not listed (after ee6721f), against every loser listed, alternating, then both
    # backends, placer bench at each scale, 8 sessions, the auto trial.
    budget=${2:-420}
    parity_quick=quick parity_or "the group offers' folds" PLACER_CUDA_OFFER_GROUPS=0
    stalls
    microbenchmarks
    kernels_under_synccheck
    cluster_scratch
    alternate PLACER_CUDA_LOSERS_SIT_OUT losers-sit-out "losers sitting out"
    figures
    ;;
  cluster-diag)
    budget=${2:-300}
    cluster_diag "$budget"
    pack_results
    ;;
  cluster-scratch)
    budget=${2:-240}
    cluster_scratch
    pack_results
    summary
    ;;
  profile)
    # Where the CUDA round's time goes, kernels and the gaps between them:
    # at 100k the second session's `assign` held 9 ms outside the tier
    # kernel's phases (31.1 against 22.0 ms), against 4.4 ms on the CPU
    # backend of the same machine.
    round_bench profile '10k|100k|openb'
    stalls
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    for s in 10k 100k; do
      timeout 120 "$G/run" "${ncu:-ncu}" --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
        --log-file "$OUT/ncu-$s.txt" "$G/bin/placer" bench --scenario "$s" --rounds 2 --configs cuda --data "$G/data" \
        > /tmp/ncu-bench.txt 2>&1 || { status=1; tail -20 /tmp/ncu-bench.txt; }
    done
    # nsys, where the machine has it: the CUDA API calls, copies and host gaps of 5 rounds at 100k.
    nsys=$(command -v nsys || ls /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/bin/nsys 2>/dev/null | head -1)
    if [ -n "$nsys" ]; then
      timeout 120 "$G/run" "$nsys" profile --stats=true --force-overwrite true -o /tmp/placer-100k \
        "$G/bin/placer" bench --scenario 100k --rounds 5 --configs cuda --data "$G/data" > "$OUT/nsys-100k.txt" 2>&1 || status=1
    else
      echo "gpu-run: no nsys on this machine" | tee -a "$OUT/bench.txt"
    fi
    summary
    for s in 10k 100k; do
      [ -f "$OUT/ncu-$s.txt" ] && { echo "== ncu $s"; grep -E "^  [a-zA-Z_]|gpu__time_duration" "$OUT/ncu-$s.txt" | cut -c1-150 | head -40; }
    done
    ;;
  *)
    echo "gpu-run: unknown step '$step' (calibrate, all, check, bench 10k|100k|openb, quick, sweep, sanitize, session, grid, blocks, offers, lanes, shared, next, cluster-diag, cluster-scratch, or profile)"
    exit 2
    ;;
esac
exit $status
