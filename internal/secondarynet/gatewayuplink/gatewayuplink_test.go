package gatewayuplink

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn"
	"github.com/octopus-mcs/octopus/internal/datapath/ovn/ovntest"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/datapath/podport"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// logLines is a logr sink keeping every line, to check what the loop logs.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{})
}

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

// count is the number of lines containing s.
func (l *logLines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

func testOptions() Options {
	return Options{Config: Config{ClusterID: "east", CIDR: netip.MustParsePrefix("10.112.0.0/16"),
		Node: podport.Node{Bridge: "br-int"}, MTU: 1400}}
}

func TestGatewayDerivesThePortTheOvnmasterWrites(t *testing.T) {
	g, err := testOptions().Gateway()
	if err != nil {
		t.Fatal(err)
	}
	if g.Port != "east_gateway" || g.IP.String() != "10.112.0.1/16" || g.MAC.String() != "0a:58:0a:70:00:01" || g.MTU != 1400 {
		t.Errorf("Gateway() = %+v, want east_gateway at 10.112.0.1/16, 0a:58:0a:70:00:01, MTU 1400", g)
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no cluster ID", func(c *Config) { c.ClusterID = "" }, "cluster ID"},
		{"cluster ID with _", func(c *Config) { c.ClusterID = "a_b" }, "cluster ID"},
		{"no block", func(c *Config) { c.CIDR = netip.Prefix{} }, "secondary CIDR"},
		{"host bits", func(c *Config) { c.CIDR = netip.MustParsePrefix("10.112.0.1/16") }, "did you mean 10.112.0.0/16"},
		{"IPv6", func(c *Config) { c.CIDR = netip.MustParsePrefix("fd00::/64") }, "only IPv4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions()
			tc.change(&o.Config)
			if _, err := New(o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestLoopRetriesAndLogsOnlyChanges runs the loop over a fake reconcile: it fails twice (the
// second time after doing part of it), then attaches, finds everything right, repairs something, then finds everything right. Readiness follows, and the log
// has a line per failure and per repair and none for the checks that changed nothing.
func TestLoopRetriesAndLogsOnlyChanges(t *testing.T) {
	var logs logLines
	o := testOptions()
	o.Interval, o.Log = 20*time.Millisecond, logs.logger()
	l, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	l.guard = func(context.Context) error { return nil } // not the host's nftables
	var mu sync.Mutex
	calls := 0
	l.reconcile = func(context.Context, podport.Gateway) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		switch calls {
		case 1:
			return nil, errors.New("ovs-vsctl: database connection failed")
		case 2: // part done: logged with the failure, not as the attach
			return []string{"created the veth octgw/octgw-ovs"}, errors.New("ovs-vsctl: database connection failed")
		case 3:
			return []string{"created the veth octgw/octgw-ovs"}, nil
		case 5:
			return []string{"added 10.112.0.1/16 to octgw"}, nil
		}
		return nil, nil
	}
	probe := func() (int, string) {
		rec := httptest.NewRecorder()
		l.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := probe(); code != http.StatusServiceUnavailable || !strings.Contains(body, "not attached yet") {
		t.Errorf("/readyz before any attempt = %d %q, want 503 not attached yet", code, body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()
	// Every attempt, retries included, comes at most 20 ms (the interval) after the last.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := calls
		mu.Unlock()
		if n >= 8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d attempts in 10 s", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil when its context ends", err)
	}
	if code, _ := probe(); code != http.StatusOK {
		t.Errorf("/readyz after successes = %d, want 200", code)
	}
	if n := logs.count("Failed to attach"); n != 2 {
		t.Errorf("%d failure lines, want 2:\n%s", n, strings.Join(logs.lines, "\n"))
	}
	if logs.count("Attached") != 1 || logs.count("Repaired") != 1 {
		t.Errorf("want one line for the attach and one for the repair:\n%s", strings.Join(logs.lines, "\n"))
	}
	if n := len(logs.lines); n != 5 { // and the start line
		t.Errorf("%d log lines, want 5 (start, 2 failures, attach, repair):\n%s", n, strings.Join(logs.lines, "\n"))
	}

	// A failure after a success makes it unready, saying why.
	l.reconcile = func(context.Context, podport.Gateway) ([]string, error) { return nil, errors.New("boom") }
	if err := l.once(context.Background()); err == nil {
		t.Fatal("once = nil with a failing reconcile")
	}
	if code, body := probe(); code != http.StatusServiceUnavailable || !strings.Contains(body, "boom") {
		t.Errorf("/readyz after a failure = %d %q, want 503 with the reason", code, body)
	}
}

// TestLoopKeepsTheGatewayPortOnRealOVN runs the loop against a real chassis: the first check
// makes octgw, bound by OVN to the gateway port the ovnmaster's Apply writes for this chassis;
// checks that find it right change nothing (same link) and log nothing; a removed address and
// a deleted OVS port are repaired at the next tick; and stopping the loop leaves the interface
// and the binding in place.
func TestLoopKeepsTheGatewayPortOnRealOVN(t *testing.T) {
	central := ovntest.StartCentral(t)
	ch := ovntest.StartChassis(t, central)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The NB side, as the ovnmaster writes it with this chassis holding the gateway Lease.
	nb, err := ovn.Connect(ctx, ovn.Options{Endpoint: central.NB.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	cidr := netip.MustParsePrefix("10.112.0.0/16")
	res, err := nb.Apply(ctx, ovn.Network{ClusterID: "east", CIDR: cidr, GatewayChassis: ch.Name()})
	if err != nil || res.GatewayFailed != nil {
		t.Fatalf("Apply: %v, %v", err, res.GatewayFailed)
	}

	var logs logLines
	l, err := New(Options{Config: Config{ClusterID: "east", CIDR: cidr, Node: ch.Node(), MTU: 1400},
		Interval: 100 * time.Millisecond, Log: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	if g := l.gateway; g.Port != res.Gateway.Port || g.IP != res.Gateway.IP || g.MAC.String() != res.Gateway.MAC.String() {
		t.Fatalf("the loop attaches %s %s %s, the NB port is %s %s %s", g.Port, g.IP, g.MAC, res.Gateway.Port, res.Gateway.IP, res.Gateway.MAC)
	}
	loopCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- l.Run(loopCtx) }()

	testenv.Eventually(t, 15*time.Second, "ready", func() error { return l.Ready() })
	testenv.Eventually(t, 15*time.Second, "the port bound to the chassis", func() error {
		if got := central.BoundChassis(t, "east_gateway"); got != ch.Name() {
			return fmt.Errorf("bound to %q", got)
		}
		return nil
	})
	if err := guarded(ch.Netns); err != nil {
		t.Fatal(err)
	}
	index := linkIndex(t, ch)
	time.Sleep(500 * time.Millisecond) // five checks
	if now := linkIndex(t, ch); now != index {
		t.Errorf("checks that found the interface right replaced it: link index %s, then %s", index, now)
	}
	if logs.count("Attached") != 1 || logs.count("Repaired") != 0 || logs.count("Failed") != 0 {
		// One line: the CI summary keeps only the first line of a failure.
		t.Errorf("checks that found the interface right logged more than one attach: %q", logs.all())
	}

	for _, tc := range []struct {
		name    string
		disturb []string
		check   func() error
	}{
		{"the address removed", []string{"ip", "-n", ch.Netns, "addr", "flush", "dev", podport.GatewayLink}, func() error {
			out, err := exec.Command("ip", "-n", ch.Netns, "-4", "-o", "addr", "show", "dev", podport.GatewayLink).CombinedOutput()
			if err != nil {
				return fmt.Errorf("addresses of %s: %w: %s", podport.GatewayLink, err, out)
			}
			if !strings.Contains(string(out), "10.112.0.1/16") {
				return fmt.Errorf("addresses of %s: %s", podport.GatewayLink, out)
			}
			return nil
		}},
		{"the OVS port deleted", []string{"ovs-vsctl", "--db=" + ch.Node().OVSDB, "del-port", "br-int", podport.GatewayBridgePort}, func() error {
			if got := central.BoundChassis(t, "east_gateway"); got != ch.Name() {
				return fmt.Errorf("bound to %q", got)
			}
			out, err := exec.Command("ovs-vsctl", "--db="+ch.Node().OVSDB, "list-ports", "br-int").CombinedOutput()
			if err != nil {
				return fmt.Errorf("ports of br-int: %w: %s", err, out)
			}
			if !strings.Contains(string(out), podport.GatewayBridgePort) {
				return fmt.Errorf("ports of br-int: %s", out)
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := logs.count("Repaired")
			if out, err := exec.Command(tc.disturb[0], tc.disturb[1:]...).CombinedOutput(); err != nil {
				t.Fatalf("%v: %v: %s", tc.disturb, err, out)
			}
			testenv.Eventually(t, 15*time.Second, "repaired", tc.check)
			testenv.Eventually(t, 15*time.Second, "the repair logged", func() error {
				if logs.count("Repaired") == before {
					return errors.New("no line")
				}
				return nil
			})
		})
	}

	// The guard is written before every check, the same table each time (so without a line).
	t.Run("the guard table deleted", func(t *testing.T) {
		if out, err := exec.Command("ip", "netns", "exec", ch.Netns, "nft", "delete", "table", "inet", owner.GatewayGuardNFTTable).CombinedOutput(); err != nil {
			t.Fatalf("deleting the guard table: %v: %s", err, out)
		}
		testenv.Eventually(t, 15*time.Second, "the guard table back", func() error { return guarded(ch.Netns) })
	})

	// Stopping leaves the interface: a rolling update must not cut the active gateway.
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	if out, err := exec.Command("ip", "-n", ch.Netns, "link", "show", podport.GatewayLink).CombinedOutput(); err != nil {
		t.Errorf("%s gone after the loop stopped: %v %s", podport.GatewayLink, err, out)
	}
	if got := central.BoundChassis(t, "east_gateway"); got != ch.Name() {
		t.Errorf("after the loop stopped the port is bound to %q, want %q", got, ch.Name())
	}
}

func linkIndex(t *testing.T, ch *ovntest.Chassis) string {
	t.Helper()
	out, err := exec.Command("ip", "-n", ch.Netns, "-o", "link", "show", podport.GatewayLink).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v %s", podport.GatewayLink, err, out)
	}
	return strings.SplitN(string(out), ":", 2)[0]
}

// guarded checks that the node's namespace has the podfence table, fencing octgw and the VPC
// gateways' outside veths.
func guarded(netnsName string) error {
	out, err := exec.Command("ip", "netns", "exec", netnsName, "nft", "list", "table", "inet", owner.GatewayGuardNFTTable).CombinedOutput()
	if err != nil {
		return fmt.Errorf("the guard table: %w: %s", err, out)
	}
	for _, link := range []string{podport.GatewayLink, podport.VpcGatewayOutsideNodeLinkPattern} {
		if !strings.Contains(string(out), `iifname "`+link+`" goto fence`) {
			return fmt.Errorf("the guard table does not fence %s:\n%s", link, out)
		}
	}
	if !strings.Contains(string(out), `iifname "`+podport.VpcGatewayOutsideNodeLinkPattern+`" ct status dnat counter packets`) {
		return fmt.Errorf("the guard table does not keep the VPCs off the services the node DNATs:\n%s", out)
	}
	if !strings.Contains(string(out), "counter packets") {
		return fmt.Errorf("the guard table drops nothing:\n%s", out)
	}
	return nil
}
