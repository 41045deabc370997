// Package podnet is the secondary network's contract with pods, written in their annotations:
// which pods take part, the address a pod may ask for, and what it got, reported in the
// network-status annotation of the Kubernetes network plumbing conventions (the format
// Multus and the tools around it read). The ovnmaster writes it; the NRI plugin and
// `octopus show` read it. Pure functions over annotation maps: no Kubernetes client.
package podnet

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Annotation and label keys. They move to api/v1alpha1's shared names once that file is on
// main; they are here so that the ovnmaster and the NRI plugin read the same ones.
const (
	// NetworkStatusAnnotation is the network plumbing working group's annotation: a JSON list
	// of the pod's network attachments. The ovnmaster owns exactly one entry in it, named
	// NetworkName, and keeps every other entry as it finds it (Multus writes its own).
	NetworkStatusAnnotation = "k8s.v1.cni.cncf.io/network-status"
	// NetworkName is the name of the secondary network's entry. Not of the form
	// "<namespace>/<name>" of a NetworkAttachmentDefinition, so it can never be taken for one.
	NetworkName = "octopus.io/secondary"
	// InterfaceName is the pod's interface on the secondary network.
	InterfaceName = "net1"

	// ErrorAnnotation holds why the pod has no address on the secondary network (an address
	// request that cannot be met, an exhausted block, the OVN database unreachable). It is
	// removed once the pod has an address. The NRI plugin refuses to start a pod that has it,
	// and reports it, rather than start the pod without net1.
	ErrorAnnotation = "octopus.io/secondary-network-error"

	// OptOutAnnotation set to "false" keeps a pod off the secondary network. Pods are on it
	// by default, because cross-cluster traffic in secondary addressing uses only net1.
	OptOutAnnotation = "octopus.io/secondary-network"
	// RequestedIPAnnotation asks for a specific address from the cluster's secondary block.
	// It is honoured when the pod's port is created; a pod keeps its address for its lifetime.
	RequestedIPAnnotation = "octopus.io/secondary-ip"

	// VpcAnnotation, written by the ovnmaster next to the network-status entry of a pod whose
	// net1 is on a VPC (issue 33), says which: a JSON VpcAttachment. The NRI plugin needs it to
	// name the pod's port (a VPC port's name holds the VPC's), to give net1 the subnet's
	// prefix length and to route the VPC's other subnets through its router; without it the
	// pod is on the cluster's network. It also keeps the pod in that VPC for its lifetime
	// (Placement): net1 is configured once, at sandbox start.
	VpcAnnotation = "octopus.io/vpc-network"
	// VpcSubnetAnnotation names the subnet of its VPC a pod asks for; the VPC's first subnet
	// without it. Like RequestedIPAnnotation, honoured when the pod's port is created.
	VpcSubnetAnnotation = "octopus.io/vpc-subnet"
)

// VpcAttachment is the VpcAnnotation's value: where on its VPC a pod's net1 is.
type VpcAttachment struct {
	// Vpc is the Vpc's name.
	Vpc string `json:"vpc"`
	// Subnet is the subnet's name and CIDR the pod's address is from; the CIDR's first host
	// is the VPC router's address on it, the pod's next hop to Routes.
	Subnet string       `json:"subnet"`
	CIDR   netip.Prefix `json:"cidr"`
	// Routes are the VPC's other subnets, reached through the router.
	Routes []netip.Prefix `json:"routes,omitempty"`
}

// FindVpc returns the pod's VpcAttachment, if it has one.
func FindVpc(annotations map[string]string) (VpcAttachment, bool, error) {
	v, ok := annotations[VpcAnnotation]
	if !ok {
		return VpcAttachment{}, false, nil
	}
	var a VpcAttachment
	if err := json.Unmarshal([]byte(v), &a); err != nil {
		return VpcAttachment{}, false, fmt.Errorf("annotation %s is not a VPC attachment: %w", VpcAnnotation, err)
	}
	if a.Vpc == "" || !a.CIDR.IsValid() {
		return VpcAttachment{}, false, fmt.Errorf("annotation %s=%s names no VPC or no subnet CIDR", VpcAnnotation, v)
	}
	return a, true, nil
}

// Encode is the VpcAnnotation's value for a.
func (a VpcAttachment) Encode() string {
	b, err := json.Marshal(a)
	if err != nil {
		panic(err) // strings and prefixes always marshal
	}
	return string(b)
}

// Placement is the VPC a pod's net1 belongs on ("" for the cluster's network), given bound,
// the VPC each namespace is bound to now. A pod that has its address stays where it got it,
// whatever its namespace's binding says since: its net1 was configured at sandbox start and
// would not follow. A pod without one goes where its namespace is bound.
func Placement(annotations map[string]string, namespace string, bound map[string]string) string {
	if _, has, _ := Find(annotations); has {
		if a, ok, err := FindVpc(annotations); ok && err == nil {
			return a.Vpc
		}
		if _, ok := annotations[VpcAnnotation]; !ok {
			return ""
		}
	}
	return bound[namespace]
}

// Status is one entry of the network-status annotation, with the fields the conventions
// define that the secondary network fills.
type Status struct {
	Name      string   `json:"name"`
	Interface string   `json:"interface,omitempty"`
	IPs       []string `json:"ips,omitempty"`
	MAC       string   `json:"mac,omitempty"`
	Default   bool     `json:"default,omitempty"`
}

// Entry is the secondary network's entry for a pod with address ip and MAC mac.
func Entry(ip netip.Addr, mac string) Status {
	return Status{Name: NetworkName, Interface: InterfaceName, IPs: []string{ip.String()}, MAC: mac}
}

// Find returns the secondary network's entry in the pod's annotations, if there is one. An
// annotation with more than one such entry is an error: the ovnmaster writes exactly one (Set),
// so a second was written by someone else, whom readers must not believe (whoever may edit the
// pod may write the annotation, and which of two entries a reader took would otherwise decide
// the address it uses).
func Find(annotations map[string]string) (Status, bool, error) {
	list, err := parse(annotations[NetworkStatusAnnotation])
	if err != nil {
		return Status{}, false, err
	}
	i := list.index()
	if i < 0 {
		return Status{}, false, nil
	}
	if n := list.count(); n > 1 {
		return Status{}, false, fmt.Errorf("annotation %s has %d entries named %s; the ovnmaster writes one, and rewrites the annotation with it", NetworkStatusAnnotation, n, NetworkName)
	}
	var s Status
	if err := json.Unmarshal(list[i], &s); err != nil {
		return Status{}, false, fmt.Errorf("entry %s of annotation %s: %w", NetworkName, NetworkStatusAnnotation, err)
	}
	return s, true, nil
}

// Set returns the network-status annotation's value with the secondary network's entry
// replaced by entry (or removed, if entry is nil), every other entry kept byte for byte in
// its place. Further entries of the secondary network's name, which only someone else can have
// written, are dropped: the result has at most one. "" means the annotation should be removed:
// nothing is left in it. A value that is not a JSON list is an error rather than overwritten:
// it is someone else's data.
func Set(current string, entry *Status) (string, error) {
	list, err := parse(current)
	if err != nil {
		return "", err
	}
	i := list.index()
	if i >= 0 {
		// Only the first of ours keeps its place.
		rest := slices.DeleteFunc(slices.Clone(list[i+1:]), isOurs)
		list = append(list[:i+1:i+1], rest...)
	}
	var raw json.RawMessage
	if entry != nil {
		if raw, err = json.Marshal(entry); err != nil {
			return "", err
		}
	}
	switch {
	case entry == nil && i < 0:
		return current, nil
	case entry == nil:
		list = slices.Delete(list, i, i+1)
	case i < 0:
		list = append(list, raw)
	default:
		list[i] = raw
	}
	if len(list) == 0 {
		return "", nil
	}
	// Joined by hand: json.Marshal would compact others' entries and escape their '&', '<'
	// and '>', so they would not be kept byte for byte. Each element is valid JSON already
	// (parse's or ours).
	var b strings.Builder
	b.WriteByte('[')
	for k, raw := range list {
		if k > 0 {
			b.WriteByte(',')
		}
		b.Write(raw)
	}
	b.WriteByte(']')
	return b.String(), nil
}

// entries is the annotation's list, each entry kept as it was written: the ovnmaster
// rewrites its own and must not drop fields of others' (dns, device-info, mtu, ...).
type entries []json.RawMessage

func parse(value string) (entries, error) {
	if value == "" {
		return nil, nil
	}
	var list entries
	if err := json.Unmarshal([]byte(value), &list); err != nil {
		return nil, fmt.Errorf("annotation %s is not a JSON list of network statuses: %w", NetworkStatusAnnotation, err)
	}
	return list, nil
}

// index is the position of the (first) secondary network's entry, or -1.
func (l entries) index() int { return slices.IndexFunc(l, isOurs) }

// count is the number of the secondary network's entries.
func (l entries) count() int {
	n := 0
	for _, raw := range l {
		if isOurs(raw) {
			n++
		}
	}
	return n
}

// isOurs reports whether raw is an entry of the secondary network's name.
func isOurs(raw json.RawMessage) bool {
	var named struct {
		Name string `json:"name"`
	}
	return json.Unmarshal(raw, &named) == nil && named.Name == NetworkName
}

// systemNamespaces never join the secondary network: the cluster's own machinery, and
// Octopus's (its gateway reaches the network through a port of its own).
var systemNamespaces = map[string]bool{
	"kube-system": true, "kube-public": true, "kube-node-lease": true, "octopus-system": true,
}

// SystemNamespace reports whether the pods of namespace ns are kept off the secondary
// network whatever their annotations say. The ovnmaster gives them no port and the NRI plugin
// does not touch them, so a failure of the secondary network cannot stop the cluster's own pods.
func SystemNamespace(ns string) bool { return systemNamespaces[ns] }

// OptedOut reports whether the pod's annotations keep it off the secondary network.
func OptedOut(annotations map[string]string) bool { return annotations[OptOutAnnotation] == "false" }

// RequestedIP parses the pod's address request; the zero Addr if it asks for none.
func RequestedIP(annotations map[string]string) (netip.Addr, error) {
	v, ok := annotations[RequestedIPAnnotation]
	if !ok {
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(v)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("annotation %s=%q is not an IP address: %w", RequestedIPAnnotation, v, err)
	}
	return a, nil
}
