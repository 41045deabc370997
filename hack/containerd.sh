#!/usr/bin/env bash
# Builds containerd, its runc shim (containerd-shim-runc-v2) and ctr from hack/k8s/containerd, a
# pinned wrapper module, into a per-version cache directory: the container runtime of the lab's
# real nodes (NRI is built in). Only the Go module proxy is contacted. Re-running is cheap: a
# binary already in the cache is not rebuilt. runc itself is Debian's (hack/install-deps.sh).
#
# Usage: hack/containerd.sh            # prints the bin directory on its last line
# Env:   OCTOPUS_CACHE (default ~/.cache/octopus)
set -euo pipefail

# Keep in step with hack/k8s/containerd/go.mod and controlplane.ContainerdVersion.
CONTAINERD_VERSION="v2.4.2"
CACHE="${OCTOPUS_CACHE:-${HOME}/.cache/octopus}"
BIN="${CACHE}/containerd-${CONTAINERD_VERSION}/bin"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PKG="github.com/containerd/containerd/v2/cmd"
CMDS=(containerd containerd-shim-runc-v2 ctr)

step() { printf '==> %s\n' "$*" >&2; }

mkdir -p "${BIN}"
# Two checkouts building at once would race on the .tmp files, as hack/k8s-binaries.sh
# explains; the second waits and then finds the binaries built.
exec 9>"${BIN}/.lock"
flock -n 9 || { step "waiting for another build into ${BIN}"; flock 9; }

missing=()
for c in "${CMDS[@]}"; do [[ -x "${BIN}/${c}" ]] || missing+=("${c}"); done
if ((${#missing[@]})); then
  step "building ${missing[*]} from containerd ${CONTAINERD_VERSION} (about 4 min on a cold cache)"
  i=0
  for c in "${missing[@]}"; do
    i=$((i + 1))
    step "[${i}/${#missing[@]}] ${c}"
    # no_btrfs: the btrfs snapshotter needs cgo and the btrfs headers; nodes use overlayfs.
    # The shim is static (CGO_ENABLED=0) as upstream releases it: containerd runs it by path.
    (cd "${HERE}/k8s/containerd" && CGO_ENABLED=0 go build -trimpath -tags no_btrfs -o "${BIN}/${c}.tmp" "${PKG}/${c}" && mv "${BIN}/${c}.tmp" "${BIN}/${c}")
  done
fi
step "containerd ready in ${BIN}"
echo "${BIN}"
