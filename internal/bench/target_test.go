package bench

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/octopus-mcs/octopus/internal/progress"
	"github.com/octopus-mcs/octopus/internal/workload"
)

func TestAddress(t *testing.T) {
	ip := netip.MustParseAddr
	direct := server{podIP: ip("10.1.0.5"), clusterIP: ip("10.96.0.10")}
	dual := server{podIP: ip("10.1.0.5"), clusterIP: ip("10.96.0.10"), podIP6: ip("2001:db8:1::5"), clusterIP6: ip("2001:db8:96::a")}
	secondary := server{podIP: ip("10.1.0.5"), secondaryIP: ip("172.30.1.5"), clusterIP: ip("10.96.0.10")}
	global := server{podIP: ip("10.1.0.5"), globalIP: ip("242.1.0.9"), clusterIP: ip("10.96.0.10")}
	setIP := workload.ImportIPs{Primary: ip("10.97.0.3")}
	setIPs := workload.ImportIPs{Primary: ip("10.97.0.3"), IPv6: ip("2001:db8:97::3")}
	const v4, v6 = workload.FamilyIPv4, workload.FamilyIPv6
	tests := []struct {
		name    string
		path    Path
		family  string
		cross   bool
		srv     server
		setIP   workload.ImportIPs
		want    string
		wantErr string
	}{
		{"pod in-cluster: pod IP", PathPod, "", false, direct, setIP, "10.1.0.5", ""},
		{"pod across clusters, direct: pod IP", PathPod, "", true, direct, setIP, "10.1.0.5", ""},
		{"pod across clusters, secondary: net1 address", PathPod, "", true, secondary, setIP, "172.30.1.5", ""},
		{"pod in-cluster on the secondary network still uses the pod IP", PathPod, "", false, secondary, setIP, "10.1.0.5", ""},
		{"pod across clusters, globalnet: the pod's global IP", PathPod, "", true, global, setIP, "242.1.0.9", ""},
		{"pod in-cluster in a globalnet cluster: pod IP", PathPod, "", false, global, setIP, "10.1.0.5", ""},
		{"service in-cluster: cluster IP", PathService, "", false, direct, setIP, "10.96.0.10", ""},
		{"service across clusters: ClusterSet IP", PathService, "", true, direct, setIP, "10.97.0.3", ""},
		{"service across clusters, not imported", PathService, "", true, direct, workload.ImportIPs{}, "", "ServiceImport"},
		{"service in-cluster without cluster IP", PathService, "", false, server{podIP: ip("10.1.0.5")}, setIP, "", "cluster IP"},
		{"pod without IP", PathPod, "", true, server{}, setIP, "", "server pod IP"},
		{"unknown path", Path("x"), "", true, direct, setIP, "", "unknown path"},
		// A dual-stack pair: IPv4 is the primary addresses, IPv6 the second ones, on every path.
		{"dual, IPv4, pod across clusters", PathPod, v4, true, dual, setIPs, "10.1.0.5", ""},
		{"dual, IPv4, service across clusters", PathService, v4, true, dual, setIPs, "10.97.0.3", ""},
		{"dual, IPv6, pod in-cluster", PathPod, v6, false, dual, setIPs, "2001:db8:1::5", ""},
		{"dual, IPv6, pod across clusters", PathPod, v6, true, dual, setIPs, "2001:db8:1::5", ""},
		{"dual, IPv6, service in-cluster", PathService, v6, false, dual, setIPs, "2001:db8:96::a", ""},
		{"dual, IPv6, service across clusters: the IPv6 ClusterSet IP", PathService, v6, true, dual, setIPs, "2001:db8:97::3", ""},
		{"dual, IPv6, the import has no IPv6 ClusterSet IP", PathService, v6, true, dual, setIP, "", "no IPv6 address for pod-to-service: no IPv6 ClusterSet IP"},
		{"IPv6 of a single-stack server: never its IPv4 address", PathPod, v6, true, direct, setIPs, "", "no IPv6 address for pod-to-pod: no IPv6 server pod IP"},
		{"IPv6 never takes a global IP", PathPod, v6, true, global, setIPs, "", "no IPv6 server pod IP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := address(tt.path, tt.family, tt.cross, false, tt.srv, tt.setIP)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("address = %v, %v; want an error with %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got.String() != tt.want {
				t.Fatalf("address = %v, %v; want %s", got, err, tt.want)
			}
		})
	}
}

// TestAddressFromSecondaryCluster: a client cluster on the secondary network reaches the
// other clusters' pods by their net1 addresses, and has no ClusterSet IP to measure a service by.
func TestAddressFromSecondaryCluster(t *testing.T) {
	srv := server{podIP: netip.MustParseAddr("10.1.0.5"), secondaryIP: netip.MustParseAddr("172.30.1.5")}
	if got, err := address(PathPod, "", true, true, srv, workload.ImportIPs{}); err != nil || got.String() != "172.30.1.5" {
		t.Errorf("pod across clusters = %v, %v; want the net1 address", got, err)
	}
	if got, err := address(PathService, "", true, true, srv, workload.ImportIPs{Primary: netip.MustParseAddr("10.97.0.3")}); !errors.Is(err, ErrNotApplicable) || !strings.Contains(err.Error(), "no ClusterSet IP") {
		t.Errorf("service across clusters = %v, %v; want ErrNotApplicable saying there is no ClusterSet IP", got, err)
	}
	// A path that exists but has no address is a failure, not "not applicable".
	if _, err := address(PathService, "", true, false, srv, workload.ImportIPs{}); err == nil || errors.Is(err, ErrNotApplicable) {
		t.Errorf("service across clusters without a ClusterSet IP from a direct cluster = %v; want a failure", err)
	}
}

func TestSecondaryAddr(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		want        string
		wantErr     bool
	}{
		{"not on the secondary network", nil, "invalid IP", false},
		{"other networks only", map[string]string{"k8s.v1.cni.cncf.io/network-status": `[{"name":"cbr0","ips":["10.1.0.5"],"default":true}]`}, "invalid IP", false},
		{"on it", map[string]string{"k8s.v1.cni.cncf.io/network-status": `[{"name":"cbr0","ips":["10.1.0.5"],"default":true},{"name":"octopus.io/secondary","interface":"net1","ips":["172.30.1.5"]}]`}, "172.30.1.5", false},
		{"malformed", map[string]string{"k8s.v1.cni.cncf.io/network-status": `{`}, "invalid IP", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := secondaryAddr(tt.annotations)
			if (err != nil) != tt.wantErr || got.String() != tt.want {
				t.Fatalf("secondaryAddr = %v, %v; want %s (error %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// TestMeasureNotApplicable: a path the client cluster's addressing does not have is recorded
// as not applicable, before anything is sent, and does not count as a failed measurement.
func TestMeasureNotApplicable(t *testing.T) {
	from := &member{Member: &workload.Member{ID: "east"}, secondary: true, clusterSetIPs: map[string]workload.ImportIPs{}}
	to := &member{Member: &workload.Member{ID: "west"}, secondary: true, server: server{secondaryIP: netip.MustParseAddr("172.30.1.5")}}
	r := &runner{opts: Options{Kind: KindThroughput, Repeat: 1}, p: &progress.Reporter{}}
	m := r.measure(t.Context(), PathService, "", from, to)
	if m.NotApplicable == "" || m.Error != "" {
		t.Fatalf("measure = %+v; want NotApplicable and no Error", m)
	}
	report := &Report{Rows: []Row{{Path: PathService, From: "east", To: "west", CrossCluster: m}}}
	if failed := report.Failed(); len(failed) != 0 {
		t.Errorf("Failed = %v, want none", failed)
	}
	if na := report.NotApplicable(); !slices.Equal(na, []string{"pod-to-service east->west"}) {
		t.Errorf("NotApplicable = %v", na)
	}
}

// TestPlan checks which rows a run measures, in which families and against which baselines:
// a dual-stack pair in IPv4 and then IPv6 on each path, each beside the baseline of its
// family; a pair with an IPv4-only side once, family-less, beside the dual-stack client's
// IPv4 baseline, with a note naming the side without IPv6.
func TestPlan(t *testing.T) {
	ip := netip.MustParseAddr
	mk := func(id string, v6 bool) *member {
		m := &member{Member: &workload.Member{ID: id}}
		if v6 {
			m.clientIP6, m.server.podIP6 = ip("2001:db8:1::7"), ip("2001:db8:1::5")
		}
		return m
	}
	tests := []struct {
		name    string
		members []*member
		want    []string
		notes   []string
	}{
		{
			"IPv4-only pair: once, no family, no note",
			[]*member{mk("east", false), mk("west", false)},
			[]string{
				"pod-to-pod east->west base ", "pod-to-pod west->east base ",
				"pod-to-service east->west base ", "pod-to-service west->east base ",
			},
			nil,
		},
		{
			"dual-stack pair: each family, IPv6 right after IPv4",
			[]*member{mk("east", true), mk("west", true)},
			[]string{
				"pod-to-pod/IPv4 east->west base IPv4", "pod-to-pod/IPv6 east->west base IPv6",
				"pod-to-pod/IPv4 west->east base IPv4", "pod-to-pod/IPv6 west->east base IPv6",
				"pod-to-service/IPv4 east->west base IPv4", "pod-to-service/IPv6 east->west base IPv6",
				"pod-to-service/IPv4 west->east base IPv4", "pod-to-service/IPv6 west->east base IPv6",
			},
			nil,
		},
		{
			"mixed pair: once, the dual-stack client's baseline in IPv4, a note each way",
			[]*member{mk("east", true), mk("west", false)},
			[]string{
				"pod-to-pod east->west base IPv4", "pod-to-pod west->east base ",
				"pod-to-service east->west base IPv4", "pod-to-service west->east base ",
			},
			[]string{
				"IPv6 not measured from east to west: west's bench server has no IPv6 address (an IPv4-only cluster, or addressing other than direct)",
				"IPv6 not measured from west to east: west's bench client has no IPv6 address (an IPv4-only cluster, or addressing other than direct)",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps, notes := plan(tt.members)
			var got []string
			for _, s := range steps {
				got = append(got, fmt.Sprintf("%s %s->%s base %s", label(s.path, s.family), s.from.ID, s.to.ID, s.baseFamily))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("plan rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if !slices.Equal(notes, tt.notes) {
				t.Errorf("plan notes %q, want %q", notes, tt.notes)
			}
		})
	}
}
