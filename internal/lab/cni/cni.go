// Package cni holds the lab's CNI setups for real nodes (internal/lab/realnode): the names
// `octopus lab up --cni` takes, the CNI network configuration each writes on a node and, for
// flannel, the configuration and arguments of flanneld. It only renders; realnode writes the
// files and runs the processes.
package cni

import (
	"encoding/json"
	"fmt"
	"net/netip"
)

// The lab's CNI setups (lab.Options.CNI).
const (
	// Bridge is the reference bridge and host-local plugins (Debian's
	// containernetworking-plugins), with the lab routing each node's pod CIDR to the node
	// over the cluster LAN, as a host-gateway CNI does. The default.
	Bridge = "bridge"
	// Flannel is flanneld with its kube subnet manager and VXLAN backend on every node, and
	// its CNI plugin, which delegates to the bridge and host-local plugins. The lab writes no
	// routes between nodes: flanneld does.
	Flannel = "flannel"
)

// Names are the CNI setups, the default first.
var Names = []string{Bridge, Flannel}

// Validate checks a CNI setup name and returns it with the default (Bridge) applied.
func Validate(name string) (string, error) {
	switch name {
	case "":
		return Bridge, nil
	case Bridge, Flannel:
		return name, nil
	}
	return "", fmt.Errorf("CNI %q: want %s (bridge and host-local plugins, routes written by the lab) or %s (flanneld with VXLAN)",
		name, Bridge, Flannel)
}

// NetworkName names the lab's CNI network on every node, whatever the setup.
const NetworkName = "octopus-lab"

// BridgeName is the bridge of a node's pod veths with either setup (flannel's plugin
// delegates to the bridge plugin with its default name, this one).
const BridgeName = "cni0"

// ConfigFile is the name of the node's CNI network configuration in its CNI config
// directory.
const ConfigFile = "10-" + NetworkName + ".conflist"

// BridgeConfig is the node's CNI network with Bridge: the bridge plugin with a gateway on the
// bridge and host-local addresses from the node's pod CIDRs, kept in ipamDataDir: an IPv4 one,
// and an IPv6 one on a dual-stack node, which gives every pod an address and a default route
// of each family. Pods on other nodes are reached through the lab's routes in the node's
// namespace; masquerading is the lab's own table there too, so the bridge does none.
func BridgeConfig(podCIDRs []netip.Prefix, ipamDataDir string) ([]byte, error) {
	if len(podCIDRs) == 0 || len(podCIDRs) > 2 || !podCIDRs[0].IsValid() || !podCIDRs[0].Addr().Is4() ||
		len(podCIDRs) == 2 && (!podCIDRs[1].IsValid() || !podCIDRs[1].Addr().Is6() || podCIDRs[1].Addr().Is4In6()) {
		return nil, fmt.Errorf("CNI configuration: want an IPv4 pod CIDR and optionally an IPv6 one, got %v", podCIDRs)
	}
	ranges := [][]map[string]string{}
	routes := []map[string]string{}
	for i, p := range podCIDRs {
		ranges = append(ranges, []map[string]string{{"subnet": p.Masked().String()}})
		routes = append(routes, map[string]string{"dst": []string{"0.0.0.0/0", "::/0"}[i]})
	}
	return render(map[string]any{
		"cniVersion": "1.0.0",
		"name":       NetworkName,
		"plugins": []any{map[string]any{
			"type":        "bridge",
			"bridge":      BridgeName,
			"isGateway":   true,
			"ipMasq":      false,
			"hairpinMode": true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  ranges,
				"routes":  routes,
				"dataDir": ipamDataDir,
			},
		}},
	})
}

// FlannelConfig is the node's CNI network with Flannel, as kube-flannel's ConfigMap has it:
// the flannel plugin reads the node's subnet and MTU from flanneld's subnetFile and delegates
// to the bridge plugin (host-local addresses, state in dataDir). The bridge masquerades
// nothing: the lab's own table in the node's namespace does, as with Bridge, so that pods
// reach other clusters' pods with their own addresses.
func FlannelConfig(subnetFile, dataDir string) ([]byte, error) {
	if subnetFile == "" || dataDir == "" {
		return nil, fmt.Errorf("flannel CNI configuration: want a subnet file and a data dir, got %q and %q", subnetFile, dataDir)
	}
	return render(map[string]any{
		// The plugin (hack/k8s/flannel-cni) speaks CNI up to 0.4.0.
		"cniVersion": "0.3.1",
		"name":       NetworkName,
		"plugins": []any{map[string]any{
			"type":       "flannel",
			"subnetFile": subnetFile,
			"dataDir":    dataDir,
			"delegate": map[string]any{
				"hairpinMode":      true,
				"isDefaultGateway": true,
				"ipMasq":           false,
			},
		}},
	})
}

func render(cfg map[string]any) ([]byte, error) {
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding the CNI configuration: %w", err)
	}
	return append(b, '\n'), nil
}
