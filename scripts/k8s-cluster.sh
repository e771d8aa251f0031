#!/usr/bin/env bash
# A local Kubernetes control plane on loopback, for the Placer scheduler's
# tests and benchmarks (docs/kubernetes.md): etcd and kube-apiserver, with
# authentication (a static token file) and RBAC (--authorization-mode=Node,RBAC),
# and Node objects made through the API (there is no kubelet: a scheduler
# needs no more than Node objects).
#
#   scripts/k8s-cluster.sh build                 build the binaries once (cached)
#   scripts/k8s-cluster.sh up [--dir DIR] [--port 16443] [--controllers resourceclaim-controller,...]
#                                  [--owner PID]   (`down --kill` runs by itself once process PID ends:
#                                                   the tests', which may die past their cleanup)
#   scripts/k8s-cluster.sh nodes N [--gpus 8] [--models a100,h100] [--racks 2] [--zones 2]
#                                  [--clique-nodes K]   (NVLink cliques of K consecutive nodes: label nvidia.com/gpu.clique)
#                                  [--taint-last K --taint key=value:NoSchedule] [--prefix node-]
#                                  [--dra]   (GPUs as DRA devices: no nvidia.com/gpu allocatable;
#                                             placer-k8s-bench --dra-publish or the tests publish the slices)
#                                  [--dir DIR]
#   scripts/k8s-cluster.sh down [--dir DIR] [--kill]   stops only what `up` started (pid files); twice is fine;
#                                  --kill: SIGKILL at once, for a control plane thrown away (the tests;
#                                  the graceful stop takes about a second)
#   scripts/k8s-cluster.sh status [--dir DIR]
#   scripts/k8s-cluster.sh restart-apiserver [--dir DIR] [--port P]   (etcd kept; the tests' apiserver restart)
#   scripts/k8s-cluster.sh paths                 prints where the binaries are (after build)
#
# `up --controllers` also runs kube-controller-manager with those of its
# controllers only (none by default: a scheduler needs no more than Node
# objects; the DRA tests need resourceclaim-controller, which makes the
# claims of ResourceClaimTemplates and frees claims no pod uses).
#
# The binaries (kube-apiserver, kube-scheduler, kube-controller-manager, etcd) are built ONCE from the
# pinned release $PLACER_K8S_VERSION (default below) by a small Go module
# that requires k8s.io/kubernetes and replaces each of its staging modules
# (v0.0.0 in its go.mod) with the matching published v0.x version; etcd is
# go.etcd.io/etcd/server/v3's etcdmain at the version Kubernetes pins. They
# are cached in ${PLACER_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/placer/k8s}/<version>/bin,
# outside the repository; after that `up` starts in seconds.
#
# `up` writes DIR/admin.kubeconfig (system:masters), DIR/scheduler.kubeconfig
# (user placer-scheduler, no groups: RBAC decides what it may do) and
# DIR/kube-scheduler.kubeconfig (system:kube-scheduler), and prints
# `export KUBECONFIG=DIR/admin.kubeconfig`.
set -euo pipefail

K8S_VERSION=${PLACER_K8S_VERSION:-1.37.2}
CACHE=${PLACER_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/placer/k8s}/v$K8S_VERSION
BIN=$CACHE/bin

cmd=${1:-}
[ -n "$cmd" ] && shift || true
count=
case "$cmd" in nodes) count=${1:-}; [ -n "$count" ] && shift || true ;; esac
dir=/tmp/placer-k8s port=16443 gpus=8 models=a100,h100 racks=2 zones=2 clique_nodes=0 taint_last=0 taint= prefix=node-
controllers=${PLACER_K8S_CONTROLLERS:-} dra=0 kill_now=0 owner=
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --gpus) gpus=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --racks) racks=$2; shift 2 ;;
    --zones) zones=$2; shift 2 ;;
    --clique-nodes) clique_nodes=$2; shift 2 ;;
    --taint-last) taint_last=$2; shift 2 ;;
    --taint) taint=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --controllers) controllers=$2; shift 2 ;;
    --dra) dra=1; shift ;;
    --kill) kill_now=1; shift ;;
    --owner) owner=$2; shift 2 ;;
    *) echo "k8s-cluster.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done

die() { echo "k8s-cluster.sh: $*" >&2; exit 1; }
log() { echo "k8s-cluster.sh: $*" >&2; }

find_go() {
  local g
  for g in "${GO:-}" "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go; do
    [ -n "$g" ] && [ -x "$g" ] && { echo "$g"; return 0; }
  done
  return 1
}

# ------------------------------------------------------------------ build
build() {
  if [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-scheduler" ] && [ -x "$BIN/kube-controller-manager" ] && [ -x "$BIN/etcd" ]; then
    log "binaries of v$K8S_VERSION cached in $BIN"
    return 0
  fi
  local go
  go=$(find_go) || die "cannot build Kubernetes v$K8S_VERSION: no Go toolchain (go on PATH or /usr/local/go/bin; it needs Go >= 1.26)"
  local gov
  gov=$("$go" env GOVERSION | sed 's/^go//')
  case "$gov" in 1.2[6-9]*|1.[3-9]*) ;; *) die "cannot build Kubernetes v$K8S_VERSION: Go $gov is too old (its go.mod needs 1.26)" ;; esac
  local src=$CACHE/src staging=v0.${K8S_VERSION#1.}
  mkdir -p "$src" "$BIN"
  local start=$SECONDS
  log "building kube-apiserver, kube-scheduler, kube-controller-manager and etcd v$K8S_VERSION in $src (once; about 20 minutes on 2 cores)"
  (
    cd "$src"
    local gomod dl
    dl=$("$go" mod download -json "k8s.io/kubernetes@v$K8S_VERSION" 2>&1) || true
    gomod=$(echo "$dl" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    [ -f "$gomod" ] || die "the module proxy did not give k8s.io/kubernetes@v$K8S_VERSION: $(echo "$dl" | sed -n 's/.*"Error": "\(.*\)".*/\1/p;/^go: /p')"
    {
      echo "module placer.local/k8sbuild"
      echo
      echo "go 1.26.0"
      echo
      echo "require k8s.io/kubernetes v$K8S_VERSION"
      echo
      echo "replace ("
      # Every staging module k8s.io/kubernetes points into ./staging, at its published version.
      awk -v v="$staging" '/=> \.\/staging\/src\//{print "\t" $1 " => " $1 " " v}' "$gomod"
      echo ")"
    } > go.mod
    mkdir -p etcd
    cat > etcd/main.go <<'EOF'
// etcd, the server of the version k8s.io/kubernetes pins.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
    cat > tools.go <<'EOF'
//go:build tools

package k8sbuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
EOF
    "$go" mod tidy
    local ld="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1"
    ld="$ld -X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"
    # Only the binaries missing (a cache of an earlier version of this
    # script lacks kube-controller-manager; the others may be running).
    local c cmds=()
    for c in kube-apiserver kube-scheduler kube-controller-manager; do
      [ -x "$BIN/$c" ] || cmds+=("k8s.io/kubernetes/cmd/$c")
    done
    [ ${#cmds[@]} -eq 0 ] || nice -n 10 "$go" build -trimpath -ldflags="$ld" -o "$BIN/" "${cmds[@]}"
    [ -x "$BIN/etcd" ] || nice -n 10 "$go" build -trimpath -ldflags="-s -w" -o "$BIN/etcd" ./etcd
  ) || die "building Kubernetes v$K8S_VERSION failed (above)"
  log "built in $((SECONDS - start)) s: $(ls "$BIN" | tr '\n' ' ')"
}

# ------------------------------------------------------------------ up / down
# shellcheck source=scripts/proc.sh
. "$(dirname "${BASH_SOURCE[0]}")/proc.sh"
pidalive() { [ -f "$1" ] && running "$(cat "$1")"; }

down() {
  [ -d "$dir/run" ] || { log "nothing started in $dir"; return 0; }
  unwatch "$dir/run/owner.watch"
  local f pid pids=()
  # The apiserver before etcd, so that it does not spin on a lost store.
  for f in "$dir/run/kube-scheduler.pid" "$dir/run/kube-controller-manager.pid" "$dir/run/kube-apiserver.pid" "$dir/run/etcd.pid"; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    if running "$pid"; then
      pids+=("$pid")
      if [ "$kill_now" = 0 ]; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 100); do running "$pid" || break; sleep 0.1; done
      fi
      if running "$pid"; then
        kill -KILL "$pid" 2>/dev/null || true
        for _ in $(seq 50); do running "$pid" || break; sleep 0.02; done
      fi
    fi
    rm -f "$f"
  done
  log "stopped ${#pids[@]} process(es) started in $dir"
}

kubeconfig() {  # file user token
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: placer-local
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority: $dir/pki/ca.crt
users:
- name: $2
  user:
    token: $3
contexts:
- name: placer-local
  context:
    cluster: placer-local
    user: $2
current-context: placer-local
EOF
}

up() {
  build
  if pidalive "$dir/run/kube-apiserver.pid"; then
    log "already up in $dir (kube-apiserver pid $(cat "$dir/run/kube-apiserver.pid"))"
    echo "export KUBECONFIG=$dir/admin.kubeconfig"
    return 0
  fi
  down >/dev/null 2>&1 || true
  mkdir -p "$dir/run" "$dir/pki" "$dir/log"
  if [ -n "$owner" ]; then
    watch_owner "$dir/run/owner.watch" "$owner" bash "$(readlink -f "$0")" down --kill --dir "$dir" ||
      die "--owner $owner: no such process"
  fi
  rm -rf "$dir/etcd-data"
  local etcd_port=$((port + 1)) peer_port=$((port + 2))
  # PKI: a CA, the apiserver's serving certificate for 127.0.0.1, the
  # service-account signing key; tokens for three users.
  (
    cd "$dir/pki"
    if [ ! -f ca.crt ]; then
      openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=placer-local-ca" 2>/dev/null
      openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
      printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n' > san.ext
      openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 3650 \
        -extfile san.ext 2>/dev/null
      openssl genrsa -out sa.key 2048 2>/dev/null
      openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    fi
    if [ ! -f tokens.csv ]; then
      local a s k
      a=$(openssl rand -hex 16) s=$(openssl rand -hex 16) k=$(openssl rand -hex 16)
      {
        echo "$a,admin,admin,system:masters"
        echo "$s,placer-scheduler,placer-scheduler"
        echo "$k,system:kube-scheduler,kube-scheduler"
      } > tokens.csv
      chmod 600 tokens.csv ca.key apiserver.key sa.key
    fi
  )
  kubeconfig "$dir/admin.kubeconfig" admin "$(sed -n 1p "$dir/pki/tokens.csv" | cut -d, -f1)"
  kubeconfig "$dir/scheduler.kubeconfig" placer-scheduler "$(sed -n 2p "$dir/pki/tokens.csv" | cut -d, -f1)"
  kubeconfig "$dir/kube-scheduler.kubeconfig" system:kube-scheduler "$(sed -n 3p "$dir/pki/tokens.csv" | cut -d, -f1)"

  "$BIN/etcd" --name placer-local --data-dir "$dir/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "placer-local=http://127.0.0.1:$peer_port" --unsafe-no-fsync \
    --log-level warn > "$dir/log/etcd.log" 2>&1 &
  echo $! > "$dir/run/etcd.pid"
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$etcd_port/health" >/dev/null 2>&1 && break
    pidalive "$dir/run/etcd.pid" || { tail -20 "$dir/log/etcd.log" >&2; die "etcd exited (log: $dir/log/etcd.log)"; }
    sleep 0.1
  done
  start_apiserver
  [ -z "$controllers" ] || start_controller_manager
  echo "export KUBECONFIG=$dir/admin.kubeconfig"
}

# kube-controller-manager with --controllers only, as admin (this control
# plane has no service-account tokens controller: one identity for all),
# no leader election, no serving port.
start_controller_manager() {
  "$BIN/kube-controller-manager" --kubeconfig "$dir/admin.kubeconfig" --controllers "$controllers" \
    --use-service-account-credentials=false --leader-elect=false --secure-port 0 \
    --kube-api-qps 200 --kube-api-burst 400 --v "${PLACER_K8S_KCM_V:-1}" > "$dir/log/kube-controller-manager.log" 2>&1 &
  echo $! > "$dir/run/kube-controller-manager.pid"
  sleep 0.5
  pidalive "$dir/run/kube-controller-manager.pid" || { tail -20 "$dir/log/kube-controller-manager.log" >&2; die "kube-controller-manager exited (log: $dir/log/kube-controller-manager.log)"; }
  log "kube-controller-manager running: $controllers"
}

# (Also `restart-apiserver`: the tests restart it alone, etcd kept.)
start_apiserver() {
  local etcd_port=$((port + 1))
  # The native Workload API (scheduling.k8s.io/v1beta1 Workload and
  # PodGroup, a pod's spec.schedulingGroup): beta in v1.37, off by default
  # (its feature gate and its group version), and a PodGroup's
  # schedulingConstraints (alpha gate TopologyAwareWorkloadScheduling).
  # PLACER_K8S_WORKLOAD_API=0 leaves them off.
  local workload_flags=""
  if [ "${PLACER_K8S_WORKLOAD_API:-1}" != 0 ]; then
    workload_flags="--feature-gates GenericWorkload=true,TopologyAwareWorkloadScheduling=true --runtime-config scheduling.k8s.io/v1beta1=true"
  fi
  # ServiceAccount admission is off: no controller-manager makes the
  # namespaces' default service accounts (pods here never run).
  "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$port" \
    --tls-cert-file "$dir/pki/apiserver.crt" --tls-private-key-file "$dir/pki/apiserver.key" \
    --client-ca-file "$dir/pki/ca.crt" --token-auth-file "$dir/pki/tokens.csv" \
    --authorization-mode Node,RBAC --anonymous-auth=false \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$dir/pki/sa.pub" \
    --service-account-signing-key-file "$dir/pki/sa.key" --service-cluster-ip-range 10.96.0.0/24 \
    --disable-admission-plugins ServiceAccount --endpoint-reconciler-type none --max-requests-inflight 2000 --max-mutating-requests-inflight 1000 \
    $workload_flags \
    --v 1 > "$dir/log/kube-apiserver.log" 2>&1 &
  echo $! > "$dir/run/kube-apiserver.pid"
  local t=$SECONDS
  until api GET /readyz >/dev/null 2>&1; do
    pidalive "$dir/run/kube-apiserver.pid" || { tail -20 "$dir/log/kube-apiserver.log" >&2; die "kube-apiserver exited (log: $dir/log/kube-apiserver.log)"; }
    [ $((SECONDS - t)) -lt 120 ] || die "kube-apiserver not ready after 120 s (log: $dir/log/kube-apiserver.log)"
    sleep 0.3
  done
  log "kube-apiserver v$K8S_VERSION ready on https://127.0.0.1:$port in $((SECONDS - t)) s (etcd on :$etcd_port)"
}

admin_token() { sed -n 1p "$dir/pki/tokens.csv" | cut -d, -f1; }

api() {  # METHOD PATH [BODY] [CONTENT-TYPE]
  local args=(-sS --fail-with-body --cacert "$dir/pki/ca.crt" -H "Authorization: Bearer $(admin_token)" -X "$1"
              "https://127.0.0.1:$port$2")
  [ $# -ge 3 ] && args+=(-H "Content-Type: ${4:-application/json}" --data-binary "$3")
  curl "${args[@]}"
}

gpu_product() {
  case "$1" in
    a100) echo NVIDIA-A100-SXM4-80GB ;;
    h100) echo NVIDIA-H100-80GB-HBM3 ;;
    h200) echo NVIDIA-H200 ;;
    l40s) echo NVIDIA-L40S ;;
    *) echo "$1" ;;
  esac
}

# Node i (1-based) of N: model models[(i-1)*M/N], rack (i-1)*R/N+1, zone
# (i-1)*Z/N+1 (consecutive blocks, as scripts/slurm-cluster.sh lays them),
# with --clique-nodes K NVLink clique (i-1)/K+1 (label nvidia.com/gpu.clique,
# as NVIDIA's GPU feature discovery sets it).
node_json() {  # i
  local i=$1 name m product rack zone clique="" taints=""
  IFS=, read -r -a ms <<< "$models"
  name=$prefix$i
  m=${ms[$(((i - 1) * ${#ms[@]} / count))]}
  product=$(gpu_product "$m")
  rack=$(((i - 1) * racks / count + 1))
  zone=$(((i - 1) * zones / count + 1))
  taints=",\"taints\":$(node_taints "$i")"
  [ "$clique_nodes" -gt 0 ] && clique=",\"nvidia.com/gpu.clique\":\"clique-$(((i - 1) / clique_nodes + 1))\""
  printf '{"apiVersion":"v1","kind":"Node","metadata":{"name":"%s","labels":{"kubernetes.io/hostname":"%s","kubernetes.io/os":"linux","nvidia.com/gpu.product":"%s","nvidia.com/gpu.count":"%d","topology.kubernetes.io/zone":"zone-%d","topology.kubernetes.io/region":"local","placer.io/rack":"rack-%d"%s}},"spec":{"unschedulable":false%s}}\n' \
    "$name" "$name" "$product" "$gpus" "$zone" "$rack" "$clique" "$taints"
}

node_status() {  # i
  local cpu mem res
  cpu=$((gpus > 0 ? 12 * gpus : 16)) mem=$((gpus > 0 ? 192 * gpus : 128))Gi
  # --dra: the GPUs are devices of ResourceSlices (a DRA driver's), not an extended resource
  res="\"cpu\":\"$cpu\",\"memory\":\"$mem\",\"nvidia.com/gpu\":\"$gpus\",\"pods\":\"110\",\"ephemeral-storage\":\"1000Gi\""
  [ "$dra" = 1 ] && res="\"cpu\":\"$cpu\",\"memory\":\"$mem\",\"pods\":\"110\",\"ephemeral-storage\":\"1000Gi\""
  echo "{\"status\":{\"capacity\":{$res},\"allocatable\":{$res},\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"KubeletReady\",\"message\":\"placer-local: no kubelet, status set through the API\",\"lastHeartbeatTime\":\"$(date -u +%FT%TZ)\",\"lastTransitionTime\":\"$(date -u +%FT%TZ)\"}]}}"
}

# Nodes FIRST..LAST: one curl for them all, their requests in order on one
# connection (a curl and a TLS handshake per request made 5,000 nodes take
# minutes). Per node: the create; its status through the subresource (the
# create drops it); and its own taints back: the NodeTaint admission plugin
# taints a new node not-ready until the node controller sees it Ready, and
# there is no controller-manager here.
make_nodes() {  # FIRST LAST
  local i d cfg tok
  d=$(mktemp -d "$dir/run/nodes.XXXXXX") cfg=$d/curl.cfg tok=$(admin_token)
  : > "$cfg"
  for ((i = $1; i <= $2; i++)); do
    node_json "$i" > "$d/$i.node"
    node_status "$i" > "$d/$i.status"
    printf '{"spec":{"taints":%s}}' "$(node_taints "$i")" > "$d/$i.taints"
    for r in "POST /api/v1/nodes application/json $i.node" \
             "PATCH /api/v1/nodes/$prefix$i/status application/merge-patch+json $i.status" \
             "PATCH /api/v1/nodes/$prefix$i application/merge-patch+json $i.taints"; do
      set -- "$1" "$2" $r
      [ -s "$cfg" ] && echo next >> "$cfg"
      printf 'url = "https://127.0.0.1:%s%s"\nrequest = "%s"\ncacert = "%s"\nheader = "Authorization: Bearer %s"\nheader = "Content-Type: %s"\ndata-binary = "@%s"\nfail-with-body\nsilent\nshow-error\noutput = "/dev/null"\n' \
        "$port" "$4" "$3" "$dir/pki/ca.crt" "$tok" "$5" "$d/$6" >> "$cfg"
    done
  done
  curl --fail-early -K "$cfg" || { rm -rf "$d"; return 1; }
  rm -rf "$d"
}

node_taints() {  # i: the JSON list of the node's own taints
  if [ "$taint_last" -gt 0 ] && [ "$1" -gt $((count - taint_last)) ]; then
    local kv=${taint%%:*} eff=${taint##*:}
    echo "[{\"key\":\"${kv%%=*}\",\"value\":\"$([ "$kv" != "${kv#*=}" ] && echo "${kv#*=}")\",\"effect\":\"$eff\"}]"
  else
    echo "[]"
  fi
}

nodes() {
  [[ "$count" =~ ^[0-9]+$ ]] && [ "$count" -gt 0 ] || die "nodes: give a positive node count (nodes N), got '${count}'"
  [[ "$gpus" =~ ^[0-9]+$ ]] || die "--gpus: not a count: '$gpus'"
  [[ "$racks" =~ ^[1-9][0-9]*$ && "$zones" =~ ^[1-9][0-9]*$ ]] || die "--racks and --zones must be positive"
  [[ "$clique_nodes" =~ ^[0-9]+$ ]] || die "--clique-nodes: not a count: '$clique_nodes'"
  if [ "$taint_last" -gt 0 ]; then
    [[ "$taint" =~ ^[A-Za-z0-9./_-]+(=[A-Za-z0-9._-]*)?:(NoSchedule|PreferNoSchedule|NoExecute)$ ]] ||
      die "--taint: want key[=value]:NoSchedule|PreferNoSchedule|NoExecute, got '$taint'"
  fi
  pidalive "$dir/run/kube-apiserver.pid" || die "not up in $dir (scripts/k8s-cluster.sh up --dir $dir)"
  export -f make_nodes node_json node_status node_taints api admin_token gpu_product
  export dir port prefix models racks zones clique_nodes gpus count taint taint_last dra
  local t=$SECONDS
  local chunk=$(((count + 15) / 16)); [ "$chunk" -le 250 ] || chunk=250
  for ((i = 1; i <= count; i += chunk)); do echo "$i $((i + chunk - 1 < count ? i + chunk - 1 : count))"; done |
    xargs -P 8 -L 1 bash -c 'make_nodes $0 $1' || die "creating nodes failed (above)"
  log "$count nodes (${prefix}1..${prefix}$count, $gpus GPUs each, models $models, $racks racks) in $((SECONDS - t)) s"
}

status() {
  local p
  for p in etcd kube-apiserver kube-controller-manager; do
    if pidalive "$dir/run/$p.pid"; then echo "$p: running (pid $(cat "$dir/run/$p.pid"))"; else echo "$p: not running"; fi
  done
}

case "$cmd" in
  build) build ;;
  up) up ;;
  down) down ;;
  nodes) nodes ;;
  status) status ;;
  restart-apiserver)
    f=$dir/run/kube-apiserver.pid
    if pidalive "$f"; then kill -TERM "$(cat "$f")"; for _ in $(seq 100); do pidalive "$f" || break; sleep 0.1; done; fi
    start_apiserver ;;
  paths) echo "$BIN" ;;
  *) echo "usage: scripts/k8s-cluster.sh build|up|down|nodes N|status|restart-apiserver|paths [options] (see the header)" >&2; exit 2 ;;
esac
