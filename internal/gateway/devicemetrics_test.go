package gateway

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/kernel"
)

func TestDeviceCollector(t *testing.T) {
	for _, tc := range []struct {
		name    string
		read    func(string) (kernel.LinkCounters, bool, error)
		want    string
		wantErr bool
	}{{
		name: "active gateway: its device's counters",
		read: func(string) (kernel.LinkCounters, bool, error) {
			return kernel.LinkCounters{RxPackets: 7, TxPackets: 9, RxDropped: 1, TxErrors: 2}, true, nil
		},
		want: `
# HELP octopus_gateway_tunnel_dropped_packets_total Packets the kernel dropped on the tunnel device (direction: rx, tx).
# TYPE octopus_gateway_tunnel_dropped_packets_total counter
octopus_gateway_tunnel_dropped_packets_total{device="octopus0",direction="rx"} 1
octopus_gateway_tunnel_dropped_packets_total{device="octopus0",direction="tx"} 0
# HELP octopus_gateway_tunnel_errors_total Packets with errors on the tunnel device (direction: rx, tx).
# TYPE octopus_gateway_tunnel_errors_total counter
octopus_gateway_tunnel_errors_total{device="octopus0",direction="rx"} 0
octopus_gateway_tunnel_errors_total{device="octopus0",direction="tx"} 2
# HELP octopus_gateway_tunnel_packets_total Packets through the tunnel device, all remote clusters together (direction: rx, tx).
# TYPE octopus_gateway_tunnel_packets_total counter
octopus_gateway_tunnel_packets_total{device="octopus0",direction="rx"} 7
octopus_gateway_tunnel_packets_total{device="octopus0",direction="tx"} 9
`,
	}, {
		name: "standby: no device, no series",
		read: func(string) (kernel.LinkCounters, bool, error) { return kernel.LinkCounters{}, false, nil },
	}, {
		name: "netlink fails: the scrape says so",
		read: func(string) (kernel.LinkCounters, bool, error) {
			return kernel.LinkCounters{}, false, errors.New("netlink down")
		},
		wantErr: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newDeviceCollector(DefaultDevice)
			c.read = tc.read
			err := testutil.CollectAndCompare(c, strings.NewReader(tc.want))
			if (err != nil) != tc.wantErr {
				t.Fatalf("CollectAndCompare: %v, want error %v", err, tc.wantErr)
			}
		})
	}
}
