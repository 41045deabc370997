#!/usr/bin/env bash
# Regenerates deepcopy functions and CRD manifests from the types in api/, and each component's
# RBAC from the +kubebuilder:rbac markers of the packages it runs.
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

# One role per component, named octopus-<component>: a ClusterRole for what it needs cluster-wide
# and a Role per namespace for the rest, from the packages whose code makes those requests.
rbac() {
  local component="$1" paths="$2" dir="config/rbac/$1"
  [[ -n "${OUT}" ]] && dir="${OUT}/${dir}"
  "${CG}" rbac:roleName="octopus-${component}" paths="${paths}" output:rbac:dir="${dir}"
}
rbac controller "./internal/agent;./internal/servicediscovery;./internal/globalnet;./internal/hubaccess"
rbac gateway "./internal/gateway;./internal/hubaccess"
rbac route-agent "./internal/routeagent"
rbac dns "./cmd/octopus-dns"
rbac operator "./internal/operator"
# The secondary network's (cmd/octopus-ovn), which the member chart installs with secondaryNetwork.enabled.
rbac ovnmaster "./internal/secondarynet/ovnmaster"
rbac ovn-nri "./internal/secondarynet/nriplugin"
# OVN-IC: the member's icmaster (octopus-ovn ic) and, on the hub, the signer of the members'
# interconnection certificates (octopus-ovn ic-signer, render.Interconnect).
rbac icmaster "./internal/secondarynet/icmaster"
rbac ic-signer "./internal/secondarynet/icsigner"

# The charts' parts that come from the objects above and from internal/manifests/render (internal/manifests/chartgen).
chartdir="charts"
[[ -n "${OUT}" ]] && chartdir="${OUT}/${chartdir}"
go run ./hack/charts "${chartdir}"
