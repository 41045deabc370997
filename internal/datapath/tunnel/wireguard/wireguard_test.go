package wireguard

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/octopus-mcs/octopus/internal/datapath/tunnel"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/tunneltest"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestPeersAndGoroutines checks what the end-to-end test in package tunnel cannot see from
// outside: the peer itself leaves wireguard-go when removed, and Close stops every goroutine.
func TestPeersAndGoroutines(t *testing.T) {
	testenv.LabNetwork(t)
	topo := tunneltest.New(t, 1)
	g := topo.Gateways[0]
	goroutines := runtime.NumGoroutine()

	var d *Driver
	tunneltest.In(t, g.NS, func() {
		var err error
		if d, err = New(tunnel.Options{Device: g.Device, Log: testr.New(t)}); err != nil {
			t.Fatal(err)
		}
	})
	if raw, err := base64.StdEncoding.DecodeString(d.PublicKey()); err != nil || len(raw) != 32 {
		t.Fatalf("PublicKey() = %q: not a WireGuard key", d.PublicKey())
	}
	other, _ := key(7)
	peer := tunnel.Peer{Cluster: "b", PublicKey: other, Endpoint: netip.MustParseAddrPort("203.0.113.2:51820"),
		Subnets: []netip.Prefix{netip.MustParsePrefix("10.2.0.0/24")}}
	peers := func() int {
		get, err := d.dev.IpcGet()
		if err != nil {
			t.Fatal(err)
		}
		st, err := parseIpcGet(get)
		if err != nil {
			t.Fatal(err)
		}
		return len(st.peers)
	}
	apply := func(cfg tunnel.Config) {
		tunneltest.In(t, g.NS, func() {
			if err := d.Apply(context.Background(), cfg); err != nil {
				t.Fatal(err)
			}
		})
	}
	apply(tunnel.Config{ListenPort: 51820, LocalAddr: g.Underlay, Peers: []tunnel.Peer{peer}})
	if n := peers(); n != 1 {
		t.Fatalf("%d peers in wireguard-go after Apply, want 1", n)
	}
	// The UDP socket must be in the gateway namespace, not where the test process started.
	if out := tunneltest.Run(t, "ip", "netns", "exec", g.NS, "ss", "-Huan", "sport", "= :51820"); out == "" {
		t.Fatal("no UDP socket on port 51820 in the gateway namespace")
	}
	// ...and none of ours in the namespace the test started in (the host's).
	if out := tunneltest.Run(t, "ss", "-Huanp", "sport", "= :51820"); strings.Contains(out, fmt.Sprintf("pid=%d,", os.Getpid())) {
		t.Fatalf("wireguard-go opened a socket outside the gateway namespace: %s", out)
	}
	apply(tunnel.Config{ListenPort: 51820, LocalAddr: g.Underlay})
	if n := peers(); n != 0 {
		t.Fatalf("%d peers in wireguard-go after removing the peer, want 0", n)
	}
	tunneltest.In(t, g.NS, func() {
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	})
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after Close, %d before New:\n%s", n, goroutines, buf[:runtime.Stack(buf, true)])
	}
	if err := d.Apply(context.Background(), tunnel.Config{ListenPort: 1}); err == nil {
		t.Fatal("Apply after Close succeeded")
	}
}
