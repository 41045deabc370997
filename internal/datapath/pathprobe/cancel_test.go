package pathprobe_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/pathprobe"
)

// TestProbeCancelled: a cancelled measurement returns at once, not after the probe in flight
// times out (the gateway waits for it before it hands over its role). The port is a silent
// socket on loopback, so nothing ever answers.
func TestProbeCancelled(t *testing.T) {
	silent, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err = pathprobe.Probe(ctx, silent.LocalAddr().(*net.UDPAddr).AddrPort(), pathprobe.Options{Timeout: 10 * time.Second})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Probe returned %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Probe returned %s after it was cancelled at 100ms", took)
	}
}
