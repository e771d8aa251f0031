#!/usr/bin/env bash
# Prints the path of a helm binary for the chart's checks (deploy/helm/placer;
# KubernetesLive.ChartMatchesManifests, KubernetesLive.ChartInstallAndUpgrade):
# helm on PATH when there is one, else helm.sh/helm/v3's cmd/helm at
# $PLACER_HELM_VERSION built ONCE from the Go module proxy into the cache
# (outside the repository, beside scripts/k8s-cluster.sh's binaries; a few
# minutes cold). PLACER_HELM=path picks a binary; PLACER_HELM_BUILD=1 builds
# even when helm is on PATH.
set -euo pipefail
version=${PLACER_HELM_VERSION:-v3.22.0}
if [ -n "${PLACER_HELM:-}" ]; then
  [ -x "$PLACER_HELM" ] || { echo "helm.sh: PLACER_HELM=$PLACER_HELM is not executable" >&2; exit 1; }
  echo "$PLACER_HELM"
  exit 0
fi
if [ -z "${PLACER_HELM_BUILD:-}" ] && command -v helm >/dev/null; then
  command -v helm
  exit 0
fi
bin=${PLACER_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/placer/k8s}/helm-$version
if [ ! -x "$bin/helm" ]; then
  go=$(command -v go || echo /usr/local/go/bin/go)
  [ -x "$go" ] || { echo "helm.sh: no helm on PATH and no Go toolchain to build it" >&2; exit 1; }
  echo "helm.sh: building helm $version from the Go module proxy into $bin (once)" >&2
  mkdir -p "$bin"
  # Its own build cache is the user's; the binary alone lands in the cache.
  GOBIN="$bin.tmp" GOFLAGS=-mod=mod "$go" install "helm.sh/helm/v3/cmd/helm@$version" >&2
  mv "$bin.tmp/helm" "$bin/helm" && rmdir "$bin.tmp"
fi
echo "$bin/helm"
