package tunnel_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/octopus-mcs/octopus/internal/testenv"
	"github.com/octopus-mcs/octopus/internal/tunnel"
	"github.com/octopus-mcs/octopus/internal/tunnel/tunneltest"
)

// BenchmarkThroughput measures one TCP stream pod → pod between two gateway namespaces:
// plain routing over the veth underlay (the ceiling), then through each driver. Run it with
// the command in docs/benchmarks.md; MB/s is the figure of merit.
func BenchmarkThroughput(b *testing.B) {
	for _, mode := range []string{"veth", tunnel.BackendWireGuard, tunnel.BackendVXLAN} {
		b.Run(mode, func(b *testing.B) {
			testenv.LabNetwork(b)
			topo := tunneltest.New(b, 2)
			g1, g2 := topo.Gateways[0], topo.Gateways[1]
			if mode == "veth" {
				tunneltest.Run(b, "ip", "-n", g1.NS, "route", "add", g2.PodSubnet.String(), "via", g2.Underlay.String())
				tunneltest.Run(b, "ip", "-n", g2.NS, "route", "add", g1.PodSubnet.String(), "via", g1.Underlay.String())
			} else {
				setUpTunnel(b, mode, topo)
			}
			if err := tunneltest.Ping(g1.PodNS, g2.PodAddr, 15*time.Second); err != nil {
				b.Fatal(err)
			}
			stream(b, g1.PodNS, g2.PodNS, netip.AddrPortFrom(g2.PodAddr, 5201))
		})
	}
}

func setUpTunnel(b *testing.B, backend string, topo *tunneltest.Topology) {
	drivers := make([]tunnel.Driver, len(topo.Gateways))
	for i, g := range topo.Gateways {
		tunneltest.In(b, g.NS, func() {
			d, err := tunnel.New(backend, tunnel.Options{Device: g.Device, Log: logr.Discard()})
			if err != nil {
				b.Fatal(err)
			}
			drivers[i] = d
		})
		b.Cleanup(func() { tunneltest.In(b, g.NS, func() { _ = drivers[i].Close() }) })
	}
	for i, g := range topo.Gateways {
		cfg := tunnel.Config{ListenPort: port, LocalAddr: g.Underlay}
		for j, p := range topo.Gateways {
			if j != i {
				cfg.Peers = append(cfg.Peers, tunnel.Peer{Cluster: fmt.Sprint(j), PublicKey: drivers[j].PublicKey(),
					Endpoint: netip.AddrPortFrom(p.Underlay, port), Subnets: []netip.Prefix{p.PodSubnet}})
			}
		}
		tunneltest.In(b, g.NS, func() {
			if err := drivers[i].Apply(context.Background(), cfg); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// stream sends b.N MiB over one TCP connection and waits until the receiver has them all.
func stream(b *testing.B, clientNS, serverNS string, server netip.AddrPort) {
	const chunk = 1 << 20
	var ln net.Listener
	tunneltest.In(b, serverNS, func() {
		var err error
		if ln, err = net.Listen("tcp", server.String()); err != nil {
			b.Fatal(err)
		}
	})
	defer ln.Close()
	received := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			received <- -1
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		received <- n
	}()
	var c net.Conn
	tunneltest.In(b, clientNS, func() {
		var err error
		if c, err = net.Dial("tcp", server.String()); err != nil {
			b.Fatal(err)
		}
	})
	buf := make([]byte, chunk)
	b.SetBytes(chunk)
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		b.Fatal(err)
	}
	if n := <-received; n != int64(b.N)*chunk {
		b.Fatalf("the server received %d bytes, want %d", n, int64(b.N)*chunk)
	}
	b.StopTimer()
}
