#!/usr/bin/env bash
# The Placer scheduler side by side with the real kube-scheduler (default
# profile) of the same release, each on a fresh local control plane
# (scripts/k8s-cluster.sh) of N Node objects of 8 GPUs (a100 and h100, two
# racks), fed the same pods by placer-k8s-bench: openb's whole-GPU pods
# (data/openb-sample/pods.csv, --repeat times over) after --gangs gangs of
# four 8-GPU pods. One JSON line per run in --out, and a table.
#
#   scripts/k8s-side-by-side.sh [--nodes 64,1000] [--repeat 1] [--gangs 4] [--out FILE] [--build build]
#                               [--only kube-scheduler|placer] [--placer-args "--bind-workers 32 ..."] [--timeout 20m]
#                               [--kube-scheduler-qps Q] [--precreate] [--dra K] [--settle 10s]
#
# (--only runs one of the two, --placer-args passes flags to placer-k8s-scheduler:
# for measuring one change of the Placer scheduler without rerunning kube-scheduler.
# --kube-scheduler-qps Q: kube-scheduler's clientConnection qps Q, burst 2Q,
# through a KubeSchedulerConfiguration; its default is 50 and 100, and each
# of its bindings is a request, so at the default it binds about 50 pods/s.)
# --precreate: after each scheduler's usual run, a second run on a fresh
# cluster with every pod created before that scheduler is started
# (placer-k8s-bench --precreated), its pods/s from the scheduler's start to the
# last binding: the scheduler apart from pod creation; rows marked "precreated".
# --dra K: GPUs as DRA devices (nodes --dra, the resourceclaim controller
# running) and placer-k8s-bench's DRA mix K times over instead of openb's
# pods: claims by product, capability and MIG, gangs of 8-GPU claims, an
# unmeetable claim and a shared one; each allocation checked (the table's
# last columns). --settle: the bench stops once no pod was bound for this
# long (10 s; a scheduler whose cycle writes claims before it binds may
# pause longer between bindings).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sizes=64 repeat=1 gangs=4 out=/tmp/placer-k8s-side-by-side.jsonl build=$root/build port=18443
only="kube-scheduler placer" placer_args="" timeout=20m ks_qps="" modes=usual dra=0 settle=10s
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) sizes=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --gangs) gangs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --placer-args) placer_args=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --kube-scheduler-qps) ks_qps=$2; shift 2 ;;
    --precreate) modes="usual precreated"; shift ;;
    --dra) dra=$2; shift 2 ;;
    --settle) settle=$2; shift 2 ;;
    *) echo "k8s-side-by-side.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
go=$(command -v go || echo /usr/local/go/bin/go)
[ -x "$build/placer" ] && [ -x "$build/placer-k8s-scheduler" ] || { echo "k8s-side-by-side.sh: build placer and placer_k8s_scheduler in $build first" >&2; exit 1; }
bash "$root/scripts/k8s-cluster.sh" build
bin=$(bash "$root/scripts/k8s-cluster.sh" paths)
bench=$build/placer-k8s-bench
(cd "$root/adapters/kubernetes" && "$go" build -buildvcs=false -o "$bench" ./cmd/placer-k8s-bench)
dir=$(mktemp -d /tmp/placer-k8s-sbs.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  bash "$root/scripts/k8s-cluster.sh" down --dir "$dir/cluster" >/dev/null 2>&1 || true
}
trap 'cleanup; rm -rf "$dir"' EXIT   # (its etcd data: about 120 MB at 5,000 nodes)
: > "$out.tmp"
for n in ${sizes//,/ }; do
  for which in $only; do
  for mode in $modes; do
    cleanup; pids=()
    rm -rf "$dir/cluster"
    up_args=() nodes_args=()
    [ "$dra" = 0 ] || { up_args=(--controllers resourceclaim-controller); nodes_args=(--dra); }
    bash "$root/scripts/k8s-cluster.sh" up --dir "$dir/cluster" --port "$port" "${up_args[@]}" >/dev/null
    bash "$root/scripts/k8s-cluster.sh" nodes "$n" --dir "$dir/cluster" --port "$port" --gpus 8 \
      --models a100,h100,a100,h100 --racks 2 --zones 2 "${nodes_args[@]}"
    c=$dir/cluster
    [ $which = kube-scheduler ] && name=default-scheduler || name=placer
    bench_args=(--kubeconfig "$c/admin.kubeconfig" --scheduler-name "$name" --pods "$root/data/openb-sample/pods.csv"
      --repeat "$repeat" --gangs "$gangs" --settle "$settle" --timeout "$timeout" --json "$out.tmp")
    [ "$dra" = 0 ] || bench_args+=(--dra "$dra" --gangs 0 --repeat 0)
    if [ $mode = precreated ]; then
      # every pod created first, with no scheduler running; the scheduler is
      # started once the bench writes $c/created
      rm -f "$c/created"
      "$bench" "${bench_args[@]}" --precreated "$c/created" > /dev/null &
      benchpid=$!
      until [ -e "$c/created" ]; do
        kill -0 $benchpid 2>/dev/null || { echo "k8s-side-by-side.sh: the bench ended before creating every pod" >&2; exit 1; }
        sleep 0.05
      done
    fi
    if [ $which = kube-scheduler ]; then
      ks=(--kubeconfig "$c/kube-scheduler.kubeconfig" --leader-elect=false)
      if [ -n "$ks_qps" ]; then
        printf 'apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  kubeconfig: %s\n  qps: %s\n  burst: %s\nleaderElection:\n  leaderElect: false\n' \
          "$c/kube-scheduler.kubeconfig" "$ks_qps" "$((ks_qps * 2))" > "$c/kube-scheduler.yaml"
        ks=(--config "$c/kube-scheduler.yaml")
      fi
      "$bin/kube-scheduler" "${ks[@]}" --authentication-kubeconfig "$c/kube-scheduler.kubeconfig" \
        --authorization-kubeconfig "$c/kube-scheduler.kubeconfig" --secure-port 0 > "$c/log/kube-scheduler.log" 2>&1 &
      pids+=($!)
    else
      "$build/placer" serve --endpoint "tcp://127.0.0.1:$((port + 100))" --backend cpu > "$c/log/placer.log" 2>&1 &
      pids+=($!)
      # (the admin's credentials: the RBAC of its own user is the live tests' business)
      "$build/placer-k8s-scheduler" --kubeconfig "$c/admin.kubeconfig" --placer-endpoint "tcp://127.0.0.1:$((port + 100))" \
        --leader-elect=false --http 127.0.0.1:$((port + 101)) $placer_args > "$c/log/placer-k8s-scheduler.log" 2>&1 &
      pids+=($!)
    fi
    if [ $mode = precreated ]; then
      wait $benchpid
    else
      sleep 2
      "$bench" "${bench_args[@]}" > /dev/null
    fi
    # (Placer's scheduler's metrics at the end of its run, for where its time went)
    tag=""; [ $mode = usual ] || tag=.$mode
    if [ $which = placer ]; then
      curl -s "http://127.0.0.1:$((port + 101))/metrics" > "$out.$n$tag.placer-metrics.txt" || true
      cp "$c/log/placer-k8s-scheduler.log" "$out.$n$tag.placer-k8s-scheduler.log" || true
    fi
  done
  done
done
mv "$out.tmp" "$out"
echo "results: $out"
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
# FGD fragmented GPUs (Weng et al., ATC'23): the GPUs free that a pod drawn
# from the pods fed cannot use, expected, summed over nodes
# (placer-k8s-bench's nodeFragmentation; rows from before it have "-").
# precreated rows (--precreate): s and pods/s from the scheduler's start to
# the last binding, every pod created before it started; "1st bind s": from
# its first binding to the last.
print(f"| nodes | scheduler | measure | pods | bound | s | pods/s | 1st bind s | GPUs placed | GPU nodes partly used | GPUs free on them | GPUs free | FGD fragmented GPUs | gangs whole / split / stranded | violations |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    name = "kube-scheduler" if r["scheduler"] == "default-scheduler" else "Placer"
    free = r.get("gpus_free", "-")
    fgd = f"{r['fgd_fragmented_gpus']:.1f}" if "fgd_fragmented_gpus" in r else "-"
    if r.get("precreated"):
        m, secs, pps = "precreated, from scheduler start", r["seconds_scheduler_start_to_last_bind"], r["pods_per_second_from_scheduler_start"]
        fb = f"{r.get('seconds_first_bind_to_last_bind', 0):.2f}"
    else:
        m, secs, pps, fb = "first create to last bind", r["seconds_first_create_to_last_bind"], r["pods_per_second"], "-"
    print(f"| {r['nodes']} | {name} | {m} | {r['pods']} | {r['bound']} | {secs:.2f} | {pps:.0f} | {fb} | "
          f"{r['gpus_placed']} | {r['gpu_nodes_partly_used']} | {r['gpus_free_on_partly_used_nodes']} | {free} | {fgd} | "
          f"{r['gangs_whole_one_rack']} / {r['gangs_whole_split_across_racks']} / {r['gangs_stranded']} | {r['violations']} |")
dra = [r for r in rows if "dra" in r]
if dra:
    print()
    print("| nodes | scheduler | pods | bound | pods/s | whole GPUs placed | MIG devices placed | claims allocated | unmeetable left pending | invalid allocations |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in dra:
        name = "kube-scheduler" if r["scheduler"] == "default-scheduler" else "Placer"
        d = r["dra"]
        print(f"| {r['nodes']} | {name} | {r['pods']} | {r['bound']} | {r['pods_per_second']:.0f} | {r['gpus_placed']} | "
              f"{d['mig_devices_placed']} | {d['claims_allocated']} | {d['unmeetable_pending']} | {d['invalid_allocations']} |")
        for p in d.get("problems", []):
            print(f"  - {name}: {p}")
PY
