#!/usr/bin/env bash
# Builds CoreDNS (hack/coredns, a pinned wrapper module) into a per-version cache directory:
# the cluster DNS the lab deploys in every member cluster. Only the Go module proxy is
# contacted. Re-running is cheap: a binary already in the cache is not rebuilt.
#
# Usage: hack/coredns.sh            # prints the binary's path on its last line
# Env:   OCTOPUS_CACHE (default ~/.cache/octopus)
set -euo pipefail

# Keep in step with hack/coredns/go.mod and controlplane.CoreDNSVersion.
COREDNS_VERSION="v1.15.0"
CACHE="${OCTOPUS_CACHE:-${HOME}/.cache/octopus}"
DIR="${CACHE}/coredns-${COREDNS_VERSION}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

mkdir -p "${DIR}"
# Two checkouts (or a test and make) building at once would race on coredns.tmp, as
# hack/k8s-binaries.sh explains; the second waits and then finds the binary built.
exec 9>"${DIR}/.lock"
flock -n 9 || { printf '==> waiting for another build into %s\n' "${DIR}" >&2; flock 9; }
if [[ ! -x "${DIR}/coredns" ]]; then
  printf '==> building CoreDNS %s (about 1 min on a cold cache)\n' "${COREDNS_VERSION}" >&2
  (cd "${HERE}/coredns" && go build -trimpath -o "${DIR}/coredns.tmp" . && mv "${DIR}/coredns.tmp" "${DIR}/coredns")
fi
printf '==> CoreDNS ready in %s\n' "${DIR}" >&2
echo "${DIR}/coredns"
