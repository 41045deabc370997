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
CACHE="${OCTOPUS_CACHE:-${HOME}/.cache/octopus}"
BIN="${CACHE}/k8s-${KUBE_VERSION}-etcd-${ETCD_VERSION}/bin"
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

if ((${#missing[@]})); then
  step "building ${missing[*]} from k8s.io/kubernetes ${KUBE_VERSION} (about 13 min on a cold cache, seconds when cached)"
  i=0
  for c in "${missing[@]}"; do
    i=$((i + 1))
    step "[${i}/${#missing[@]}] ${c}"
    (cd "${HERE}/k8s/kubernetes" && go build -trimpath -o "${BIN}/${c}.tmp" "k8s.io/kubernetes/cmd/${c}" && mv "${BIN}/${c}.tmp" "${BIN}/${c}")
  done
fi

step "control-plane binaries ready in ${BIN}"
echo "${BIN}"
