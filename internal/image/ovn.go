package image

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// OVNRepo is the repository of the secondary network's image: octopus-ovn and the Open
// vSwitch and OVN programs its pods run (charts/octopus-member, secondaryNetwork). It is an
// image of its own, not a part of OctopusRepo's, so that clusters without the secondary
// network do not pull OVS and OVN with every agent pod: the programs and their libraries are
// about 45 MB, octopus-ovn (libovsdb, the NRI stub, controller-runtime) as large again, where
// the agent's image is about 100 MB.
const OVNRepo = "ghcr.io/octopus-mcs/octopus-ovn"

// OVNBinaries are the commands of `make build` in the OVN image.
var OVNBinaries = []string{"octopus-ovn"}

// OVNPrograms are the host programs of the OVN image, each with the Debian package it comes
// from (hack/install-deps.sh): the databases (ovsdb-server, ovsdb-tool to create and upgrade
// their files), the node's switch (ovs-vswitchd; ovs-vsctl, which the NRI plugin drives and
// the pods' scripts configure the node with), OVN's daemons (ovn-northd, ovn-controller), the
// tools probes and people debugging a cluster use (ovs-appctl, ovn-appctl, ovsdb-client,
// ovn-nbctl, ovn-sbctl), ip, which moves a node's underlay address onto its OVS bridge, and
// nft, which gateway-port's guard (internal/datapath/podfence) writes its table with; for
// OVN-IC, ovn-ic-nbctl, which makes the transit switches in the hub's interconnection
// databases (internal/manifests/render ICDBScript), ovn-ic-sbctl for people debugging them, and
// ovn-ic itself, which the member's octopus-ovn-ic pods run (icconfig.OVNICCommand).
var OVNPrograms = map[string]string{
	"ovsdb-server": "openvswitch-common", "ovsdb-tool": "openvswitch-common", "ovsdb-client": "openvswitch-common",
	"ovs-appctl": "openvswitch-common", "ovs-vswitchd": "openvswitch-switch", "ovs-vsctl": "openvswitch-switch",
	"ovn-northd": "ovn-central", "ovn-controller": "ovn-host", "ovn-nbctl": "ovn-common", "ovn-sbctl": "ovn-common",
	"ovn-appctl": "ovn-common", "ip": "iproute2", "nft": "nftables",
	"ovn-ic-nbctl": "ovn-common", "ovn-ic-sbctl": "ovn-common", "ovn-ic": "ovn-ic",
}

// OVNSchemas are the database schemas the OVN image's servers create their files from, by
// the Debian package that installs them.
var OVNSchemas = map[string]string{
	"/usr/share/openvswitch/vswitch.ovsschema": "openvswitch-common",
	"/usr/share/ovn/ovn-nb.ovsschema":          "ovn-common",
	"/usr/share/ovn/ovn-sb.ovsschema":          "ovn-common",
	"/usr/share/ovn/ovn-ic-nb.ovsschema":       "ovn-ic-db",
	"/usr/share/ovn/ovn-ic-sb.ovsschema":       "ovn-ic-db",
}

// OVNOptions say where octopus-ovn is and how the image is tagged.
type OVNOptions struct {
	// BinDir holds octopus-ovn. Required.
	BinDir string
	// Tags name the image, e.g. OVNRepo+":v0.1.0". At least one is required.
	Tags []string
}

// OVN returns the spec of the secondary network's image: octopus-ovn in /usr/local/bin,
// OVNPrograms at their paths with their libraries, OVNSchemas, and busybox for the pods'
// start scripts; all from this machine's Debian packages, like Octopus. It has no
// entrypoint: the chart names each container's program.
func OVN(o OVNOptions) (Spec, error) {
	if o.BinDir == "" || len(o.Tags) == 0 {
		return Spec{}, fmt.Errorf("the OVN image needs its binaries' directory and a tag")
	}
	files, err := HostBusybox()
	if err != nil {
		return Spec{}, err
	}
	for _, b := range OVNBinaries {
		f, err := Executable("/usr/local/bin/"+b, filepath.Join(o.BinDir, b))
		if err != nil {
			return Spec{}, fmt.Errorf("the OVN image (build the binaries with make build): %w", err)
		}
		files = append(files, f...)
	}
	for _, name := range slices.Sorted(maps.Keys(OVNPrograms)) {
		f, err := HostExecutable(name, OVNPrograms[name])
		if err != nil {
			return Spec{}, err
		}
		files = append(files, f...)
	}
	for _, p := range slices.Sorted(maps.Keys(OVNSchemas)) {
		if _, err := os.Stat(p); err != nil {
			return Spec{}, fmt.Errorf("images are made of host files: install Debian package %s (hack/install-deps.sh): %w", OVNSchemas[p], err)
		}
		files = append(files, File{Path: p, Source: p})
	}
	return Spec{Refs: o.Tags, Files: files, Env: []string{PathEnv}}, nil
}
