package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/kernel"
)

// deviceCollector exports the tunnel device's packet counters, read from the kernel at each
// scrape: the per-peer series carry bytes only (what the drivers can attribute to a peer), so
// packets, drops and errors are per device. A standby gateway has no device and exports none.
type deviceCollector struct {
	device                 string
	read                   func(device string) (kernel.LinkCounters, bool, error)
	packets, drops, errors *prometheus.Desc
}

func newDeviceCollector(device string) *deviceCollector {
	labels := []string{"device", "direction"}
	return &deviceCollector{
		device: device,
		read:   kernel.ReadLinkCounters,
		packets: prometheus.NewDesc("octopus_gateway_tunnel_packets_total",
			"Packets through the tunnel device, all remote clusters together (direction: rx, tx).", labels, nil),
		drops: prometheus.NewDesc("octopus_gateway_tunnel_dropped_packets_total",
			"Packets the kernel dropped on the tunnel device (direction: rx, tx).", labels, nil),
		errors: prometheus.NewDesc("octopus_gateway_tunnel_errors_total",
			"Packets with errors on the tunnel device (direction: rx, tx).", labels, nil),
	}
}

func (c *deviceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.packets
	ch <- c.drops
	ch <- c.errors
}

func (c *deviceCollector) Collect(ch chan<- prometheus.Metric) {
	counters, ok, err := c.read(c.device)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.packets, err)
		return
	}
	if !ok {
		return
	}
	for _, m := range []struct {
		desc   *prometheus.Desc
		rx, tx uint64
	}{
		{c.packets, counters.RxPackets, counters.TxPackets},
		{c.drops, counters.RxDropped, counters.TxDropped},
		{c.errors, counters.RxErrors, counters.TxErrors},
	} {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.rx), c.device, "rx")
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.tx), c.device, "tx")
	}
}
