#!/usr/bin/env bash
# The image, proven in a real container runtime (podman with runc): builds
# a Debian 12 base with debootstrap (base images cannot be pulled here),
# the CPU variant of docker/Dockerfile on it, and runs it as the README
# says, checking what an operator would:
#   - it runs as the non-root user 10001;
#   - without keys: serves in the clear on the published (host) endpoint,
#     answers a round, `placer health` and the HEALTHCHECK say ready, and
#     PLACER_HTTP serves /metrics, /livez and /readyz;
#   - with keys mounted at /keys: CURVE, a client without the key gets no
#     answer, one with a listed key gets its round, the HEALTHCHECK (with
#     its own key) passes;
#   - the Kubernetes scheduler's own image (docker/scheduler.Dockerfile)
#     builds, and the command of deploy/kubernetes/scheduler-deployment.yaml
#     runs in it (--help).
# Needs root, podman, runc and debootstrap (apt-get install podman runc
# debootstrap), a Debian mirror, the Go module proxy and Go >= 1.26 on the
# host (copied into the build as GO_IMAGE). Usage: docker/image-test.sh [BUILD_DIR]
# (BUILD_DIR's placer is the client the checks use from the host).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
placer=$build/placer
[ -x "$placer" ] || { echo "image-test: no $placer (make build first)" >&2; exit 1; }
for tool in podman debootstrap runc; do
  command -v "$tool" >/dev/null || { echo "image-test: needs $tool (apt-get install podman runc debootstrap)" >&2; exit 1; }
done
export CONTAINERS_CONF=$PWD/docker/containers.conf
base=localhost/placer-base:bookworm
image=localhost/placer:local
work=$(mktemp -d)
names=()
cleanup() {
  for n in "${names[@]}"; do podman rm -f "$n" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT
pass() { echo "  ok   $*"; }
fail() { echo "  FAIL $*"; exit 1; }

# 1. The base: Debian 12, minimal (the Dockerfile installs what it needs).
if ! podman image exists "$base"; then
  echo "image-test: debootstrap --variant=minbase bookworm"
  debootstrap --variant=minbase bookworm "$work/rootfs" http://deb.debian.org/debian \
    >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log"; exit 1; }
  tar -C "$work/rootfs" -c . | podman import - "$base" >/dev/null
  rm -rf "$work/rootfs"
fi

# The Go toolchain for the scheduler's build stage: the host's, as an image
# holding only /usr/local/go (golang images cannot be pulled either).
go=$(command -v go || echo /usr/local/go/bin/go)
[ -x "$go" ] || { echo "image-test: needs Go >= 1.26 on the host (the scheduler's build)" >&2; exit 1; }
goroot=$("$go" env GOROOT)
goimage=localhost/placer-go:$("$go" env GOVERSION)
if ! podman image exists "$goimage"; then
  tar -C "$(dirname "$goroot")" -c --transform "s,^$(basename "$goroot"),usr/local/go," "$(basename "$goroot")" |
    podman import - "$goimage" >/dev/null
fi

# 2. The image: docker/Dockerfile itself, CPU variant (both stages on that
# base; the host network reaches the Debian mirror and the Go module proxy).
# Builds the binaries in the container: a few minutes the first time, then
# podman's layer cache.
t0=$(date +%s)
# The host's CA bundle reaches the Go module downloads (this host's egress
# intercepts TLS with its own CA), mounted for the build only.
ca=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
podman build --network host --format docker -f docker/Dockerfile --build-arg BUILD_IMAGE="$base" \
  --build-arg RUNTIME_IMAGE="$base" --build-arg GO_IMAGE="$goimage" \
  --build-arg GOPROXY="$("$go" env GOPROXY)" -v "$ca:/run/host-ca.crt:ro" --build-arg SSL_CERT_FILE=/run/host-ca.crt \
  -t "$image" . >"$work/build.log" 2>&1 || { tail -30 "$work/build.log"; exit 1; }
echo "image-test: $image built in $(( $(date +%s) - t0 )) s ($(podman image inspect "$image" --format '{{.Size}}' |
  awk '{printf "%.0f MiB", $1/1048576}'))"

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_serving() {  # name
  for _ in $(seq 100); do
    podman logs "$1" 2>&1 | grep -q "serving on" && return 0
    sleep 0.1
  done
  podman logs "$1" 2>&1 | tail -5
  return 1
}

# 3. Without keys (the host network stands in for -p 127.0.0.1:PORT:5555).
zmq=$(port); http=$(port)
names+=(placer-image-open)
podman run -d --name placer-image-open --network host --health-interval disable -e PLACER_ENDPOINT="tcp://127.0.0.1:$zmq" \
  -e PLACER_HTTP="127.0.0.1:$http" "$image" >/dev/null 2>>"$work/podman.log"  # (no systemd: no timed healthchecks)
wait_serving placer-image-open || fail "the container did not start serving"
[ "$(podman exec placer-image-open id -u)" = 10001 ] && pass "runs as uid 10001" || fail "runs as root"
"$placer" client --endpoint "tcp://127.0.0.1:$zmq" --cluster data/examples/cluster.json \
  --jobs data/examples/jobs.json --summary >"$work/round.txt" && pass "answers a round from the host" ||
  fail "no round answered"
"$placer" health --ready --quiet --endpoint "tcp://127.0.0.1:$zmq" && pass "placer health --ready: ready" ||
  fail "not ready"
podman healthcheck run placer-image-open >/dev/null && pass "HEALTHCHECK: healthy" || fail "HEALTHCHECK failed"
curl -sf "http://127.0.0.1:$http/readyz" >/dev/null && pass "/readyz 200" || fail "/readyz"
curl -sf "http://127.0.0.1:$http/metrics" >"$work/metrics.txt" || true
grep -q '^placer_rounds_total{code="Ok"} 1' "$work/metrics.txt" &&
  pass "/metrics counts the round" || { grep placer_rounds "$work/metrics.txt"; fail "/metrics"; }
# (into a file: grep -q on a pipe stops reading at the first line, and
# podman logs' SIGPIPE then fails the pipeline under pipefail)
podman logs placer-image-open >"$work/open.log" 2>&1 || true
grep -q "no CURVE keys in /keys" "$work/open.log" && pass "says it serves without keys" ||
  fail "no warning without keys"

# 4. With keys: CURVE.
keys=$work/keys
"$placer" keygen --out "$keys" --name server >/dev/null
"$placer" keygen --out "$keys" --name health >/dev/null
"$placer" keygen --out "$work/client" --name scheduler >/dev/null
mkdir -p "$keys/clients" && cp "$keys/health.key" "$work/client/scheduler.key" "$keys/clients/"
chmod -R a+rX "$keys" && chmod a+r "$keys"/*_secret  # the container's user reads them (a test's keys)
zmq=$(port)
names+=(placer-image-curve)
podman run -d --name placer-image-curve --network host --health-interval disable -v "$keys:/keys:ro" -e PLACER_ENDPOINT="tcp://127.0.0.1:$zmq" \
  "$image" >/dev/null 2>>"$work/podman.log"
wait_serving placer-image-curve || fail "the CURVE container did not start serving"
"$placer" client --endpoint "tcp://127.0.0.1:$zmq" --server-key "$keys/server.key" \
  --client-cert "$work/client/scheduler.key_secret" --cluster data/examples/cluster.json \
  --jobs data/examples/jobs.json --summary >/dev/null && pass "a listed client key gets its round" ||
  fail "listed key refused"
if "$placer" health --endpoint "tcp://127.0.0.1:$zmq" --timeout-ms 1000 >/dev/null 2>&1; then
  fail "a client without keys got an answer"
else
  pass "a client without keys gets no answer"
fi
podman healthcheck run placer-image-curve >/dev/null && pass "HEALTHCHECK with its own key: healthy" ||
  fail "HEALTHCHECK failed under CURVE"

# 5. The Kubernetes scheduler's own image (docker/scheduler.Dockerfile, the
# image deploy/helm/placer and deploy/kubernetes run it from): built on the
# same base; the Deployment's command runs in it as its user, its libraries
# resolve.
simage=localhost/placer-k8s-scheduler:local
t0=$(date +%s)
podman build --network host --format docker -f docker/scheduler.Dockerfile --build-arg BUILD_IMAGE="$base" \
  --build-arg RUNTIME_IMAGE="$base" --build-arg GO_IMAGE="$goimage" \
  --build-arg GOPROXY="$("$go" env GOPROXY)" -v "$ca:/run/host-ca.crt:ro" --build-arg SSL_CERT_FILE=/run/host-ca.crt \
  -t "$simage" . >"$work/scheduler-build.log" 2>&1 || { tail -30 "$work/scheduler-build.log"; exit 1; }
echo "image-test: $simage built in $(( $(date +%s) - t0 )) s ($(podman image inspect "$simage" --format '{{.Size}}' |
  awk '{printf "%.0f MiB", $1/1048576}'))"
sched=$(sed -n 's/^ *command: \[\(.*placer-k8s-scheduler\)\]$/\1/p' deploy/kubernetes/scheduler-deployment.yaml)
[ -n "$sched" ] || fail "no placer-k8s-scheduler command in deploy/kubernetes/scheduler-deployment.yaml"
if podman run --rm --network none --user 10001 --entrypoint "$sched" "$simage" --help >"$work/scheduler-help.txt" 2>&1 &&
   grep -q -- '-placer-endpoint' "$work/scheduler-help.txt" && grep -q -- '-leader-elect' "$work/scheduler-help.txt"; then
  pass "$sched --help runs in the scheduler's image as uid 10001"
else
  cat "$work/scheduler-help.txt"; fail "$sched --help"
fi
echo "image-test: all checks passed"
