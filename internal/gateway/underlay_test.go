package gateway

import (
	"net/netip"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/pathprobe"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
)

// TestUnderlayInStatus: the direct tunnels' endpoints are measured, and each measurement lands
// on its own direct connection only (not on one carried through the hub's tunnel, nor on a
// refused Peer).
func TestUnderlayInStatus(t *testing.T) {
	b, c := netip.MustParseAddrPort("203.0.113.2:4500"), netip.MustParseAddrPort("203.0.113.3:4500")
	d := Desired{
		Tunnel: tunnel.Config{Peers: []tunnel.Peer{{Cluster: "b", Endpoint: b}, {Cluster: "c", Endpoint: c}, {Cluster: "no-endpoint"}}},
		Via:    map[string]string{"d": "c"},
	}
	targets := underlayTargets(d)
	if len(targets) != 2 || targets["b"] != b || targets["c"] != c {
		t.Fatalf("targets %v, want b and c at their endpoints", targets)
	}

	now := time.Date(2026, 11, 24, 23, 0, 0, 500, time.UTC)
	reachable := underlayProbe(pathprobe.Result{Reachable: true, PathMTU: 1400, Time: now})
	want := v1alpha1.UnderlayProbe{Time: reachable.Time, PortReachable: true, PathMTU: 1400}
	if !reachable.Time.Equal(&want.Time) || reachable.Time.Nanosecond() != 0 || !equality.Semantic.DeepEqual(reachable, want) {
		t.Fatalf("underlayProbe = %+v, want %+v (time truncated to the second, as status times are)", reachable, want)
	}
	dropped := underlayProbe(pathprobe.Result{Reason: "no answer", Time: now})

	st := v1alpha1.PeerStatus{Connections: []v1alpha1.PeerConnection{
		{ClusterID: "b"}, {ClusterID: "c"}, {ClusterID: "d", Via: "c"}, {ClusterID: "refused"},
	}}
	setUnderlay(&st, map[string]v1alpha1.UnderlayProbe{"b": reachable, "c": dropped, "d": reachable})
	got := map[string]*v1alpha1.UnderlayProbe{}
	for _, conn := range st.Connections {
		got[conn.ClusterID] = conn.Underlay
	}
	if got["b"] == nil || got["b"].PathMTU != 1400 || got["c"] == nil || got["c"].PortReachable || got["c"].Message != "no answer" {
		t.Errorf("direct connections: b %+v, c %+v", got["b"], got["c"])
	}
	if got["d"] != nil || got["refused"] != nil {
		t.Errorf("connections without an underlay path of their own got one: d %+v, refused %+v", got["d"], got["refused"])
	}
}
