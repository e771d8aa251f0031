#!/usr/bin/env bash
# The failover soak (issue 39; recorded, not in CI): two `placer serve`
# replicas, `placer bench` with 64 clients against both (--endpoint A,B),
# node deltas and job churn, for DURATION seconds, and one replica killed
# (SIGKILL) and restarted every minute, alternately. Samples each
# replica's RSS every minute (before the restart) and prints bench's
# per-minute rounds, errors, resyncs, failovers, p50 and p99 (--every:
# another period than 60 s, for a short trial).
#
#   scripts/soak-failover.sh [--build build] [--duration 600] [--clients 64]
#                            [--scenario 10k] [--every 60] [--out DIR]
#
# Writes DIR/bench.txt (bench's output), DIR/rss.tsv (time, replica, pid,
# RSS KiB) and DIR/restarts.tsv (time, replica killed, pid). Exit 1 when a
# round was lost (bench reports errors) or bench failed.
set -euo pipefail

BUILD=build DURATION=600 CLIENTS=64 SCENARIO=10k EVERY=60 OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --scenario) SCENARIO=$2; shift 2 ;;
    --every) EVERY=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "soak-failover.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
PLACER=$BUILD/placer
[ -x "$PLACER" ] || { echo "soak-failover.sh: $PLACER not built (make build)" >&2; exit 2; }
OUT=${OUT:-$(mktemp -d /tmp/placer-soak.XXXXXX)}
mkdir -p "$OUT"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORTS=("$(free_port)" "$(free_port)")
NAMES=(a b)
PIDS=(0 0)
start() {  # start N: replica N on its port, waited for until it answers
  local k=$1 ep="tcp://127.0.0.1:${PORTS[$1]}"
  "$PLACER" serve --endpoint "$ep" --backend cpu --workers 1 --quiet --log-level warn >>"$OUT/replica-${NAMES[$k]}.log" 2>&1 &
  PIDS[$k]=$!
  for _ in $(seq 100); do
    "$PLACER" health --live --quiet --endpoint "$ep" --timeout-ms 300 >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "soak-failover.sh: replica ${NAMES[$k]} did not start" >&2; return 1
}
cleanup() { for p in "${PIDS[@]}"; do [ "$p" -gt 0 ] && kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
start 0
start 1
EPS="tcp://127.0.0.1:${PORTS[0]},tcp://127.0.0.1:${PORTS[1]}"
echo "soak: $CLIENTS clients, $DURATION s, scenario $SCENARIO, replicas $EPS; output in $OUT"
T0=$(date +%s)
"$PLACER" bench --scenario "$SCENARIO" --endpoint "$EPS" --configs cpu --clients "$CLIENTS" --duration "$DURATION" \
  --report-s "$EVERY" --delta 128 --job-churn 50 --warmup 1 --timeout-ms 5000 --retries 5 --json "$OUT/bench.json" \
  >"$OUT/bench.txt" 2>"$OUT/bench.err" &
BENCH=$!
printf 'second\treplica\tpid\trss_kib\n' >"$OUT/rss.tsv"
printf 'second\tkilled\tpid\n' >"$OUT/restarts.tsv"
minute=0
while kill -0 "$BENCH" 2>/dev/null; do
  sleep 1
  now=$(( $(date +%s) - T0 ))
  [ "$now" -lt $(( (minute + 1) * EVERY )) ] && continue
  minute=$((minute + 1))
  for k in 0 1; do
    printf '%s\t%s\t%s\t%s\n' "$now" "${NAMES[$k]}" "${PIDS[$k]}" "$(awk '/VmRSS/ {print $2}' /proc/${PIDS[$k]}/status 2>/dev/null || echo 0)" >>"$OUT/rss.tsv"
  done
  [ "$now" -ge "$DURATION" ] && continue
  k=$(( (minute - 1) % 2 ))
  printf '%s\t%s\t%s\n' "$now" "${NAMES[$k]}" "${PIDS[$k]}" >>"$OUT/restarts.tsv"
  kill -9 "${PIDS[$k]}"; wait "${PIDS[$k]}" 2>/dev/null || true
  start "$k"
done
rc=0
wait "$BENCH" || rc=$?
cat "$OUT/bench.txt"
echo "RSS (KiB) per minute:"; cat "$OUT/rss.tsv"
echo "restarts:"; cat "$OUT/restarts.tsv"
[ "$rc" -eq 0 ] || { echo "soak: bench failed ($rc): $(tail -5 "$OUT/bench.err")"; exit 1; }
grep -q " 0 errors" "$OUT/bench.txt" || { echo "soak: rounds were lost"; exit 1; }
