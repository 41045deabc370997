package operator

import (
	"strings"
	"testing"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// TestGatewaysVerdict: GatewaysConnected is True only while the active gateway is connected to
// every other joined cluster; connected to 0 of them it is False; alone on the hub it is True
// with reason NoOtherClusters.
func TestGatewaysVerdict(t *testing.T) {
	peer := func(conns ...v1alpha1.PeerConnection) *v1alpha1.Peer {
		p := &v1alpha1.Peer{Spec: v1alpha1.PeerSpec{Hostname: "gw-1", Backend: "wireguard"}}
		p.Status.Connections = conns
		return p
	}
	up := func(id string) v1alpha1.PeerConnection {
		return v1alpha1.PeerConnection{ClusterID: id, State: v1alpha1.ConnectionConnected}
	}
	connecting := v1alpha1.PeerConnection{ClusterID: "west", State: v1alpha1.ConnectionConnecting, Message: "no handshake yet"}
	for _, tc := range []struct {
		name    string
		peer    *v1alpha1.Peer
		others  []string
		ok      bool
		reason  string
		message string
	}{
		// Alone on the hub: nothing to connect to is not a fault (docs/operator-and-charts.md).
		{"no other cluster joined: ready, and says it is alone", peer(), nil, true, "NoOtherClusters", "no other cluster has joined the hub yet"},
		{"another cluster joined, connected to 0 clusters", peer(), []string{"west"}, false, "ConnectionsDown", "connected to 0 of 1"},
		{"another cluster joined, its Peer not seen yet", peer(), []string{"west"}, false, "ConnectionsDown", "not to west (no tunnel yet)"},
		{"the tunnel still connecting", peer(connecting), []string{"west"}, false, "ConnectionsDown", "west (Connecting: no handshake yet)"},
		{"one of two connected", peer(up("west")), []string{"west", "north"}, false, "ConnectionsDown", "connected to 1 of 2 other cluster(s), not to north"},
		{"every other cluster connected", peer(up("north"), up("west")), []string{"west", "north"}, true, "Connected", "connected to every other cluster (2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, reason, msg := gatewaysVerdict(tc.peer, tc.others)
			if ok != tc.ok || reason != tc.reason || !strings.Contains(msg, tc.message) {
				t.Errorf("gatewaysVerdict = %v, %s, %q; want %v, %s, containing %q", ok, reason, msg, tc.ok, tc.reason, tc.message)
			}
		})
	}
}
