#!/usr/bin/env bash
# Regenerates deepcopy functions and CRD manifests from the types in api/.
# Usage: hack/generate.sh CONTROLLER_GEN [OUT_DIR]
# With OUT_DIR the outputs go there instead of into the tree (the staleness test uses that).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
CG="$1"
OUT="${2:-}"
for pkg in api/v1alpha1 api/about/v1alpha1; do
  objdir="${pkg}"
  [[ -n "${OUT}" ]] && objdir="${OUT}/${pkg}" && mkdir -p "${objdir}"
  "${CG}" object:headerFile=hack/boilerplate.go.txt paths="./${pkg}" output:object:dir="${objdir}"
done
crddir="config/crd/bases"
[[ -n "${OUT}" ]] && crddir="${OUT}/${crddir}"
"${CG}" crd paths="./api/..." output:crd:dir="${crddir}"
