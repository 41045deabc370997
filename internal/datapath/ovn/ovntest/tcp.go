package ovntest

import (
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/tunneltest"
)

// ExchangeTCP sends a payload larger than a segment from network namespace from to an echo
// server on ip:7000 in namespace to, retrying for up to 20 s (the port may not forward yet),
// and fails the test unless it comes back whole: checksums and segmentation must survive the
// userspace datapath, not only a ping.
func ExchangeTCP(t testing.TB, from, to string, ip netip.Addr) {
	t.Helper()
	addr := netip.AddrPortFrom(ip, 7000).String()
	var ln net.Listener
	tunneltest.In(t, to, func() {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			t.Fatal(err)
		}
	})
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.Copy(c, c)
			_ = c.Close()
		}
	}()
	payload := strings.Repeat("octopus-", 8192)
	var got []byte
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := tunneltest.InErr(from, func() error {
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			go func() { _, _ = io.WriteString(c, payload); _ = c.(*net.TCPConn).CloseWrite() }()
			got, err = io.ReadAll(c)
			return err
		})
		if err == nil && string(got) == payload {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s cannot exchange %d bytes with %s in %s over TCP: %v (got %d bytes)", from, len(payload), addr, to, err, len(got))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
