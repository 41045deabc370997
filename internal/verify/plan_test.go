package verify

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
)

const (
	direct    = v1alpha1.AddressingDirect
	globalnet = v1alpha1.AddressingGlobalnet
	secondary = v1alpha1.AddressingSecondary
)

func TestPairChecks(t *testing.T) {
	tests := []struct {
		name     string
		from, to v1alpha1.Addressing
		want     []Check
		mismatch string
	}{
		{"direct to direct", direct, direct, Checks, ""},
		{"unset is direct", "", direct, Checks, ""},
		{"direct to globalnet", direct, globalnet, Checks, ""},
		{"globalnet to direct", globalnet, direct, Checks, ""},
		{"globalnet to globalnet", globalnet, globalnet, Checks, ""},
		{"secondary to secondary", secondary, secondary, SecondaryChecks, ""},
		{"secondary to direct", secondary, direct, SecondaryChecks, "AddressingMismatch: east uses secondary addressing and west direct addressing, which cannot reach each other"},
		{"direct to secondary", direct, secondary, Checks, "AddressingMismatch: east uses direct addressing and west secondary addressing"},
		{"unset to secondary", "", secondary, Checks, "east uses direct addressing and west secondary"},
		{"globalnet to secondary", globalnet, secondary, Checks, "AddressingMismatch: east uses globalnet addressing and west secondary addressing"},
		{"secondary to globalnet", secondary, globalnet, SecondaryChecks, "AddressingMismatch: east uses secondary addressing and west globalnet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := pairChecks(ClusterAddressing{Cluster: "east", Addressing: tt.from}, ClusterAddressing{Cluster: "west", Addressing: tt.to})
			if strings.Join(checkNames(got), ",") != strings.Join(checkNames(tt.want), ",") {
				t.Errorf("checks = %v, want %v", got, tt.want)
			}
			if tt.mismatch == "" {
				if err != nil {
					t.Fatalf("pairChecks: %v, want no mismatch", err)
				}
				return
			}
			if !errors.Is(err, errAddressingMismatch) || !strings.Contains(err.Error(), tt.mismatch) {
				t.Fatalf("pairChecks: %v, want an AddressingMismatch containing %q", err, tt.mismatch)
			}
			if !strings.Contains(err.Error(), "join both with secondary addressing, or neither") {
				t.Errorf("the mismatch %q does not say what to do", err)
			}
		})
	}
	// A mismatch names the addressing that was only assumed.
	_, err := pairChecks(ClusterAddressing{Cluster: "east", Addressing: secondary, Source: SourceProbe}, ClusterAddressing{Cluster: "west", Addressing: direct, Source: SourceAssumed})
	if err == nil || !strings.HasSuffix(err.Error(), "or neither (west's addressing is assumed: the hub could not be read, and its probe server is not on the secondary network)") {
		t.Errorf("pairChecks with an assumed addressing: %v", err)
	}
	// Every pair has as many checks, so that a report's size does not depend on addressing.
	if len(Checks) != len(SecondaryChecks) {
		t.Errorf("%d checks on the primary network, %d on the secondary", len(Checks), len(SecondaryChecks))
	}
}

func checkNames(cs []Check) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = string(c)
	}
	return out
}

// entry is a network-status annotation value holding the secondary network's entry for ip,
// after an entry of another network (Multus's), which must not be taken for ours.
func entry(ips ...string) string {
	return `[{"name":"cbr0","interface":"eth0","ips":["10.0.0.9"],"default":true},` +
		`{"name":"octopus.io/secondary","interface":"net1","ips":["` + strings.Join(ips, `","`) + `"],"mac":"0a:58:0a:70:00:05"}]`
}

func TestPodTarget(t *testing.T) {
	pod := func(podIP string, annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: serverName, Annotations: annotations},
			Status:     corev1.PodStatus{PodIP: podIP},
		}
	}
	globalIP := netip.MustParseAddr("242.0.0.7")
	tests := []struct {
		name       string
		addressing v1alpha1.Addressing
		pod        *corev1.Pod
		globalIP   netip.Addr
		want       string
		wantErr    string
	}{
		{"direct: the pod IP", direct, pod("10.0.0.9", nil), netip.Addr{}, "10.0.0.9", ""},
		{"unset is direct", "", pod("10.0.0.9", nil), netip.Addr{}, "10.0.0.9", ""},
		{"direct ignores net1", direct, pod("10.0.0.9", map[string]string{podnet.NetworkStatusAnnotation: entry("10.112.0.5")}), netip.Addr{}, "10.0.0.9", ""},
		{"direct without pod IP", direct, pod("", nil), netip.Addr{}, "", `pod ns/probe-server has no pod IP ("")`},
		{"globalnet: the global IP", globalnet, pod("10.0.0.9", nil), globalIP, "242.0.0.7", ""},
		{"globalnet without global IP", globalnet, pod("10.0.0.9", nil), netip.Addr{}, "", "pod ns/probe-server has no global IP"},
		{"secondary: net1, not Multus's entry", secondary, pod("10.0.0.9", map[string]string{podnet.NetworkStatusAnnotation: entry("10.112.0.5")}), netip.Addr{}, "10.112.0.5", ""},
		{"secondary: the IPv4 address", secondary, pod("10.0.0.9", map[string]string{podnet.NetworkStatusAnnotation: entry("fd00::5", "10.112.0.5")}), netip.Addr{}, "10.112.0.5", ""},
		{
			"secondary: the ovnmaster's reason", secondary,
			pod("10.0.0.9", map[string]string{podnet.ErrorAnnotation: "the secondary block 10.112.0.0/16 is exhausted"}), netip.Addr{}, "",
			"pod ns/probe-server has no address on the secondary network: the secondary block 10.112.0.0/16 is exhausted",
		},
		{
			"secondary: no annotation at all", secondary, pod("10.0.0.9", nil), netip.Addr{}, "",
			"pod ns/probe-server has no address on the secondary network: no k8s.v1.cni.cncf.io/network-status entry octopus.io/secondary and no octopus.io/secondary-network-error (is the ovnmaster running?",
		},
		{
			"secondary: only Multus's entry", secondary,
			pod("10.0.0.9", map[string]string{podnet.NetworkStatusAnnotation: `[{"name":"cbr0","ips":["10.0.0.9"]}]`}), netip.Addr{}, "",
			"pod ns/probe-server has no address on the secondary network: no k8s.v1.cni.cncf.io/network-status entry",
		},
		{
			"secondary: garbled annotation", secondary,
			pod("10.0.0.9", map[string]string{podnet.NetworkStatusAnnotation: "{not a list"}), netip.Addr{}, "",
			"pod ns/probe-server has no address on the secondary network: ",
		},
		{
			"secondary: no IPv4 address", secondary,
			pod("10.0.0.9", map[string]string{podnet.NetworkStatusAnnotation: entry("fd00::5")}), netip.Addr{}, "",
			"pod ns/probe-server has no address on the secondary network: its k8s.v1.cni.cncf.io/network-status entry octopus.io/secondary holds no IPv4 address ([fd00::5])",
		},
		{
			// The pod IP would lead nowhere: the primary CIDRs of secondary clusters may overlap.
			"secondary never falls back to the pod IP", secondary, pod("10.0.0.9", nil), netip.Addr{}, "", "no address on the secondary network",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := podTarget(tt.addressing, tt.pod, tt.globalIP)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("podTarget = %v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got.String() != tt.want {
				t.Fatalf("podTarget = %v, %v; want %s", got, err, tt.want)
			}
		})
	}
}

func TestSecondaryFromAnnotations(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		want        bool
	}{
		{"none", nil, false},
		{"our entry", map[string]string{podnet.NetworkStatusAnnotation: entry("10.112.0.5")}, true},
		{"the ovnmaster's reason", map[string]string{podnet.ErrorAnnotation: "waiting for the OVN database"}, true},
		{"only Multus's entry", map[string]string{podnet.NetworkStatusAnnotation: `[{"name":"cbr0","ips":["10.0.0.9"]}]`}, false},
		{"garbled", map[string]string{podnet.NetworkStatusAnnotation: "{"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := secondaryFromAnnotations(tt.annotations); got != tt.want {
				t.Errorf("secondaryFromAnnotations = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSecondaryEndpoint(t *testing.T) {
	want := netip.MustParseAddr("10.112.1.5")
	imp := func(annotated bool, ips ...string) *mcsv1beta1.ServiceImport {
		si := &mcsv1beta1.ServiceImport{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "probe-west"},
			Spec:       mcsv1beta1.ServiceImportSpec{IPs: ips},
		}
		if annotated {
			si.Annotations = map[string]string{v1alpha1.AddressingAnnotation: string(v1alpha1.AddressingSecondary)}
		}
		return si
	}
	slice := func(source, port string, ready *bool, addrs ...string) discoveryv1.EndpointSlice {
		s := discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{mcsv1beta1.LabelSourceCluster: source}},
			Ports:      []discoveryv1.EndpointPort{{Name: ptr.To(port), Port: ptr.To[int32](8080)}},
		}
		for _, a := range addrs {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ready}})
		}
		return s
	}
	tests := []struct {
		name    string
		si      *mcsv1beta1.ServiceImport
		slices  []discoveryv1.EndpointSlice
		want    string
		wantErr string
	}{
		{"the net1 address on the target port", imp(true), []discoveryv1.EndpointSlice{slice("west", "http", ptr.To(true), "10.112.1.5")}, "10.112.1.5:8080", ""},
		{"ready unset counts as ready", imp(true), []discoveryv1.EndpointSlice{slice("west", "http", nil, "10.112.1.5")}, "10.112.1.5:8080", ""},
		{"not ready endpoints are skipped", imp(true), []discoveryv1.EndpointSlice{slice("west", "http", ptr.To(true), "10.112.1.5"), slice("west", "http", ptr.To(false), "10.112.1.9")}, "10.112.1.5:8080", ""},
		{"another cluster's slice is not the exporter's", imp(true), []discoveryv1.EndpointSlice{slice("east", "http", ptr.To(true), "10.112.0.5")}, "", "no ready endpoint of west yet (want 10.112.1.5"},
		{"not annotated", imp(false), []discoveryv1.EndpointSlice{slice("west", "http", ptr.To(true), "10.112.1.5")}, "", "ServiceImport ns/probe-west is not annotated octopus.io/addressing: secondary"},
		{"a ClusterSet IP", imp(true, "10.96.200.1"), []discoveryv1.EndpointSlice{slice("west", "http", ptr.To(true), "10.112.1.5")}, "", "has ClusterSet IPs [10.96.200.1], which pods on the secondary network cannot reach"},
		{"no endpoint yet", imp(true), nil, "", "ServiceImport ns/probe-west has no ready endpoint of west yet"},
		{"only unready endpoints", imp(true), []discoveryv1.EndpointSlice{slice("west", "http", ptr.To(false), "10.112.1.5")}, "", "no ready endpoint of west yet"},
		{"a primary address published", imp(true), []discoveryv1.EndpointSlice{slice("west", "http", ptr.To(true), "10.112.1.5", "10.0.0.9")}, "", "holds endpoint 10.0.0.9 of west, not its probe server's net1 address 10.112.1.5"},
		{"another port only", imp(true), []discoveryv1.EndpointSlice{slice("west", "tcp", ptr.To(true), "10.112.1.5")}, "", `have no port "http"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := secondaryEndpoint(tt.si, tt.slices, "west", want)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("secondaryEndpoint = %v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got.String() != tt.want {
				t.Fatalf("secondaryEndpoint = %v, %v; want %s", got, err, tt.want)
			}
		})
	}
}

func TestCheckResolved(t *testing.T) {
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	tests := []struct {
		name      string
		got       []netip.Addr
		want      string
		secondary bool
		wantErr   string
	}{
		{"the ClusterSet IP", addrs("10.96.200.1"), "10.96.200.1", false, ""},
		{"the ClusterSet IP among others", addrs("10.96.200.9", "10.96.200.1"), "10.96.200.1", false, ""},
		{"not the ClusterSet IP", addrs("10.96.200.9"), "10.96.200.1", false, "resolved to [10.96.200.9], want the ClusterSet IP 10.96.200.1"},
		{"nothing", nil, "10.96.200.1", false, "resolved to [], want the ClusterSet IP"},
		{"secondary: the net1 address", addrs("10.112.1.5"), "10.112.1.5", true, ""},
		{"secondary: nothing", nil, "10.112.1.5", true, "resolved to [], want only 10.112.1.5, the net1 address of the exporting cluster's probe server"},
		{"secondary: another address too", addrs("10.112.1.5", "10.0.0.9"), "10.112.1.5", true, "resolved to [10.112.1.5 10.0.0.9], want only 10.112.1.5"},
		{"secondary: a primary address", addrs("10.0.0.9"), "10.112.1.5", true, "want only 10.112.1.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkResolved("probe-west.ns.svc.clusterset.local", tt.got, netip.MustParseAddr(tt.want), tt.secondary)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("checkResolved: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("checkResolved: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestAddressingLine(t *testing.T) {
	got := addressingLine([]ClusterAddressing{
		{Cluster: "east", Addressing: secondary, Source: SourceHub},
		{Cluster: "west", Addressing: secondary, Source: SourceProbe},
		{Cluster: "north", Addressing: direct, Source: SourceAssumed},
		{Cluster: "south", Source: SourceHub},
	})
	want := "east secondary, west secondary (from its probe server's annotations: the hub could not be read), north direct (assumed: the hub could not be read), south direct"
	if got != want {
		t.Errorf("addressingLine =\n%q, want\n%q", got, want)
	}
}
