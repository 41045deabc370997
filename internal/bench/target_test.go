package bench

import (
	"errors"
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
	secondary := server{podIP: ip("10.1.0.5"), secondaryIP: ip("172.30.1.5"), clusterIP: ip("10.96.0.10")}
	global := server{podIP: ip("10.1.0.5"), globalIP: ip("242.1.0.9"), clusterIP: ip("10.96.0.10")}
	setIP := ip("10.97.0.3")
	tests := []struct {
		name    string
		path    Path
		cross   bool
		srv     server
		setIP   netip.Addr
		want    string
		wantErr string
	}{
		{"pod in-cluster: pod IP", PathPod, false, direct, setIP, "10.1.0.5", ""},
		{"pod across clusters, direct: pod IP", PathPod, true, direct, setIP, "10.1.0.5", ""},
		{"pod across clusters, secondary: net1 address", PathPod, true, secondary, setIP, "172.30.1.5", ""},
		{"pod in-cluster on the secondary network still uses the pod IP", PathPod, false, secondary, setIP, "10.1.0.5", ""},
		{"pod across clusters, globalnet: the pod's global IP", PathPod, true, global, setIP, "242.1.0.9", ""},
		{"pod in-cluster in a globalnet cluster: pod IP", PathPod, false, global, setIP, "10.1.0.5", ""},
		{"service in-cluster: cluster IP", PathService, false, direct, setIP, "10.96.0.10", ""},
		{"service across clusters: ClusterSet IP", PathService, true, direct, setIP, "10.97.0.3", ""},
		{"service across clusters, not imported", PathService, true, direct, netip.Addr{}, "", "ServiceImport"},
		{"service in-cluster without cluster IP", PathService, false, server{podIP: ip("10.1.0.5")}, setIP, "", "cluster IP"},
		{"pod without IP", PathPod, true, server{}, setIP, "", "pod's IP"},
		{"unknown path", Path("x"), true, direct, setIP, "", "unknown path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := address(tt.path, tt.cross, false, tt.srv, tt.setIP)
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
	if got, err := address(PathPod, true, true, srv, netip.Addr{}); err != nil || got.String() != "172.30.1.5" {
		t.Errorf("pod across clusters = %v, %v; want the net1 address", got, err)
	}
	if got, err := address(PathService, true, true, srv, netip.MustParseAddr("10.97.0.3")); !errors.Is(err, ErrNotApplicable) || !strings.Contains(err.Error(), "no ClusterSet IP") {
		t.Errorf("service across clusters = %v, %v; want ErrNotApplicable saying there is no ClusterSet IP", got, err)
	}
	// A path that exists but has no address is a failure, not "not applicable".
	if _, err := address(PathService, true, false, srv, netip.Addr{}); err == nil || errors.Is(err, ErrNotApplicable) {
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
	from := &member{Member: &workload.Member{ID: "east"}, secondary: true, clusterSetIPs: map[string]netip.Addr{}}
	to := &member{Member: &workload.Member{ID: "west"}, secondary: true, server: server{secondaryIP: netip.MustParseAddr("172.30.1.5")}}
	r := &runner{opts: Options{Kind: KindThroughput, Repeat: 1}, p: &progress.Reporter{}}
	m := r.measure(t.Context(), PathService, from, to)
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
