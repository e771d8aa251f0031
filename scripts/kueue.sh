#!/usr/bin/env bash
# Kueue for the Placer scheduler's live tests (docs/kubernetes.md, "Under
# Kueue"): its CustomResourceDefinitions, from the Go module of the pinned
# release $PLACER_KUEUE_VERSION (default below), downloaded once through the
# Go module proxy into the module cache (`go mod download`).
#
#   scripts/kueue.sh crds     prints the folder of Kueue's CRDs (config/components/crd/bases)
set -euo pipefail

KUEUE_VERSION=${PLACER_KUEUE_VERSION:-v0.17.0}

die() { echo "kueue.sh: $*" >&2; exit 1; }

module_dir() {
  local go dir
  go=$(command -v go || echo /usr/local/go/bin/go)
  # Outside any module: the download alone, nothing added to a go.mod.
  dir=$(cd / && "$go" mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -n "$dir" ] && [ -d "$dir" ] || die "go mod download sigs.k8s.io/kueue@$KUEUE_VERSION gave no folder"
  echo "$dir"
}

case "${1:-}" in
  crds) echo "$(module_dir)/config/components/crd/bases" ;;
  *) echo "usage: scripts/kueue.sh crds" >&2; exit 2 ;;
esac
