#!/usr/bin/env bash
# Builds flanneld (hack/k8s/flannel) and the flannel CNI plugin (hack/k8s/flannel-cni), pinned
# wrapper modules, into a per-version cache directory: the second CNI of the lab's real nodes
# (`octopus lab up --cni flannel`). Only the Go module proxy is contacted. Re-running is cheap:
# a binary already in the cache is not rebuilt.
#
# Usage: hack/flannel.sh            # prints the bin directory on its last line
# Env:   OCTOPUS_CACHE (default ~/.cache/octopus)
set -euo pipefail

# Keep in step with hack/k8s/flannel/go.mod and cni.FlannelVersion.
FLANNEL_VERSION="v0.28.4"
CACHE="${OCTOPUS_CACHE:-${HOME}/.cache/octopus}"
BIN="${CACHE}/flannel-${FLANNEL_VERSION}/bin"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

step() { printf '==> %s\n' "$*" >&2; }

mkdir -p "${BIN}"
# Two checkouts building at once would race on the .tmp files, as hack/k8s-binaries.sh
# explains; the second waits and then finds the binaries built.
exec 9>"${BIN}/.lock"
flock -n 9 || { step "waiting for another build into ${BIN}"; flock 9; }

# build NAME MODULE_DIR PACKAGE CGO [LDFLAGS]
build() {
  [[ -x "${BIN}/$1" ]] && return
  step "building $1 (${3}) (minutes on a cold cache)"
  # flanneld needs cgo for its udp backend (never used by the lab, but in the same binary);
  # the plugin is static, as upstream releases it.
  (cd "${HERE}/k8s/$2" && CGO_ENABLED="$4" go build -trimpath -ldflags "${5:-}" -o "${BIN}/$1.tmp" "$3" && mv "${BIN}/$1.tmp" "${BIN}/$1")
}
build flanneld flannel github.com/flannel-io/flannel 1 "-X github.com/flannel-io/flannel/pkg/version.Version=${FLANNEL_VERSION}"
build flannel flannel-cni github.com/containernetworking/plugins/plugins/meta/flannel 0
step "flannel ready in ${BIN}"
echo "${BIN}"
