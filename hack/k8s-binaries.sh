#!/usr/bin/env bash
# Builds the real Kubernetes binaries the lab and the tests run (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kube-proxy, kubectl, and the kubelet of the lab's real
# nodes) from pinned Go modules into a
# per-version cache directory. Only the Go module proxy is contacted. Re-running is cheap: a
# binary that is already in the cache is not rebuilt.
#
# Usage: hack/k8s-binaries.sh            # prints the bin directory on its last line
# Env:   OCTOPUS_CACHE (default ~/.cache/octopus), KUBE_VERSION, ETCD_VERSION
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.37.1}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.5}"
# BUILD_REV names how the binaries are built; it is part of the cache directory so that a
# change of the build (r2: the version ldflags below) rebuilds instead of reusing binaries
# built the old way. Bump it, and controlplane.BuildRevision, with every such change.
BUILD_REV="r2"
CACHE="${OCTOPUS_CACHE:-${HOME}/.cache/octopus}"
BIN="${CACHE}/k8s-${KUBE_VERSION}-etcd-${ETCD_VERSION}-${BUILD_REV}/bin"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

KUBE_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl kubelet)

step() { printf '==> %s\n' "$*" >&2; }

mkdir -p "${BIN}"

# Two checkouts building at once (a CI clone next to a working tree) would write the same
# .tmp files; the second waits and then finds the binaries built.
exec 9>"${BIN}/.lock"
flock -n 9 || { step "waiting for another build into ${BIN}"; flock 9; }

missing=()
for c in "${KUBE_CMDS[@]}"; do [[ -x "${BIN}/${c}" ]] || missing+=("${c}"); done

if [[ ! -x "${BIN}/etcd" ]]; then
  step "building etcd ${ETCD_VERSION} (about 35 s on a cold cache)"
  (cd "${HERE}/k8s/etcd" && go build -trimpath -o "${BIN}/etcd.tmp" . && mv "${BIN}/etcd.tmp" "${BIN}/etcd")
fi

# version_ldflags prints the -X flags Kubernetes' own build (hack/lib/version.sh) sets, for the
# k8s.io/kubernetes module version the wrapper module pins: without them every binary reports
# v0.0.0-master+$Format:%H$, and kubectl's skew warnings, Helm's kubeVersion constraints and
# `octopus diagnose versions` see nonsense. The module zip carries no git metadata, so, as
# Kubernetes does for a build from an archive, the tree state is "archive" and the commit
# empty; the build date is the release's time on the module proxy, so rebuilds are identical.
version_ldflags() {
  local info version date major minor rest flags=""
  info="$(cd "${HERE}/k8s/kubernetes" && go list -m -json k8s.io/kubernetes)"
  version="$(sed -n 's/^[[:space:]]*"Version": "\(.*\)",*$/\1/p' <<<"${info}")"
  date="$(sed -n 's/^[[:space:]]*"Time": "\(.*\)",*$/\1/p' <<<"${info}")"
  [[ "${version}" =~ ^v([0-9]+)\.([0-9]+)\. ]] || { echo "k8s.io/kubernetes version ${version:-?} is not vMAJOR.MINOR.PATCH" >&2; return 1; }
  major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X ${pkg}.gitVersion=${version} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
    flags+=" -X ${pkg}.gitCommit= -X ${pkg}.gitTreeState=archive -X ${pkg}.buildDate=${date}"
  done
  echo "${flags# }"
}

if ((${#missing[@]})); then
  ldflags="$(version_ldflags)"
  step "building ${missing[*]} from k8s.io/kubernetes ${KUBE_VERSION} (about 13 min on a cold cache, seconds when cached)"
  i=0
  for c in "${missing[@]}"; do
    i=$((i + 1))
    step "[${i}/${#missing[@]}] ${c}"
    (cd "${HERE}/k8s/kubernetes" && go build -trimpath -ldflags "${ldflags}" -o "${BIN}/${c}.tmp" "k8s.io/kubernetes/cmd/${c}" && mv "${BIN}/${c}.tmp" "${BIN}/${c}")
  done
fi

step "control-plane binaries ready in ${BIN}"
echo "${BIN}"
