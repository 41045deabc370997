package gatewayuplink

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn"
	"github.com/octopus-mcs/octopus/internal/datapath/podport"
	"github.com/octopus-mcs/octopus/internal/datapath/vpcnat"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

func gatewayPort(vpc string) ovn.VpcGatewayPort {
	return ovn.VpcGatewayPort{Vpc: vpc, Attachment: ovn.Attachment{
		Port: ovn.VpcGatewayPortName("east", vpc), MAC: net.HardwareAddr{0x0a, 0x58, 100, 127, 255, 254},
		IP: netip.MustParsePrefix("100.127.255.254/30"), Gateway: netip.MustParseAddr("100.127.255.253"),
	}, Subnets: []netip.Prefix{netip.MustParsePrefix("10.0.1.0/24")}}
}

// addressed is gatewayPort(vpc) with the external address ip.
func addressed(vpc, ip string) ovn.VpcGatewayPort {
	p := gatewayPort(vpc)
	p.ExternalIP = netip.MustParseAddr(ip)
	return p
}

func TestVpcGatewayPlan(t *testing.T) {
	o := VpcOptions{Node: podport.Node{Bridge: "br-int", OVSDB: "unix:/db"}, NetnsDir: "/run/x", MTU: 1400}
	for _, tc := range []struct {
		name             string
		desired          []ovn.VpcGatewayPort
		present          []string
		attach, removeIt []string
	}{
		{"nothing", nil, nil, nil, nil},
		{"a new gateway", []ovn.VpcGatewayPort{gatewayPort("red")}, nil, []string{"red"}, nil},
		{"kept and checked", []ovn.VpcGatewayPort{gatewayPort("red")}, []string{"red"}, []string{"red"}, nil},
		{"with its external address", []ovn.VpcGatewayPort{addressed("red", "242.1.0.9")}, nil, []string{"red"}, nil},
		{"moved away or gone", []ovn.VpcGatewayPort{gatewayPort("red")}, []string{"blue", "red"}, []string{"red"}, []string{"blue"}},
		{"none requested here", nil, []string{"blue", "red"}, nil, []string{"blue", "red"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attach, remove := vpcGatewayPlan(o, tc.desired, tc.present)
			var names []string
			for _, g := range attach {
				names = append(names, g.Vpc)
				d := gatewayPort(g.Vpc)
				if i := slices.IndexFunc(tc.desired, func(p ovn.VpcGatewayPort) bool { return p.Vpc == g.Vpc }); i >= 0 {
					d = tc.desired[i]
				}
				if g.ExternalIP != d.ExternalIP {
					t.Errorf("attach %s with external address %v, want %v", g.Vpc, g.ExternalIP, d.ExternalIP)
				}
				if g.Node != o.Node || g.NetnsDir != o.NetnsDir || g.MTU != 1400 || g.Port != d.Port || g.IP != d.IP ||
					g.Via != d.Gateway || g.MAC.String() != d.MAC.String() || !slices.Equal(g.Subnets, d.Subnets) {
					t.Errorf("attach %+v, want the port %+v on the node", g, d)
				}
			}
			if !slices.Equal(names, tc.attach) || !slices.Equal(remove, tc.removeIt) {
				t.Errorf("plan attaches %v and removes %v, want %v and %v", names, remove, tc.attach, tc.removeIt)
			}
		})
	}
}

// fakeSource answers with its gateways, or its error.
type fakeSource struct {
	gateways []ovn.VpcGatewayPort
	err      error
}

func (f *fakeSource) VpcGatewaysOn(_ context.Context, clusterID, chassis string) ([]ovn.VpcGatewayPort, error) {
	if clusterID != "east" || chassis != "node-a" {
		return nil, errors.New("asked for the wrong cluster or chassis")
	}
	return f.gateways, f.err
}

// TestVpcLoopChecks runs checks over fakes: an unreadable source changes nothing and makes the
// loop unready saying why; the node's fence failing attaches nothing but still removes a
// gateway no longer requested; a gateway requested here is attached (one line), found right
// (no line), repaired (one line); one no longer requested is removed; a failed attach is
// retried and makes the loop unready.
func TestVpcLoopChecks(t *testing.T) {
	var logs logLines
	src := &fakeSource{err: errors.New("not connected to the OVN NB database")}
	l, err := NewVpcLoop(VpcOptions{ClusterID: "east", Chassis: "node-a", Node: podport.Node{Bridge: "br-int"}, Source: src, Log: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	onNode := map[string]bool{"blue": true}
	var detached []string
	var reconcileErr error
	var changes []string
	l.present = func(context.Context, podport.Node, string) ([]string, error) {
		var out []string
		for vpc := range onNode {
			out = append(out, vpc)
		}
		slices.Sort(out)
		return out, nil
	}
	l.detach = func(_ context.Context, _ podport.Node, _, vpc string) error {
		detached = append(detached, vpc)
		delete(onNode, vpc)
		return nil
	}
	var guardErr error
	l.guard = func(context.Context) error { return guardErr } // not the host's nftables
	snats := map[string]string{}
	var snatErr error
	l.snat = func(_ context.Context, path string, s vpcnat.SNAT) error {
		if snatErr != nil {
			return snatErr
		}
		snats[path] = fmt.Sprintf("%v to %v out of all but %s", s.Subnets, s.EgressIP, s.VpcInterface)
		return nil
	}
	l.reconcile = func(_ context.Context, g podport.VpcGateway) ([]string, error) {
		if reconcileErr != nil {
			return nil, reconcileErr
		}
		onNode[g.Vpc] = true
		return changes, nil
	}
	probe := func() (int, string) {
		rec := httptest.NewRecorder()
		l.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := probe(); code != http.StatusServiceUnavailable || !strings.Contains(body, "not checked yet") {
		t.Errorf("/readyz before a check = %d %q", code, body)
	}
	ctx := context.Background()

	// The database out of reach: blue's gateway stays.
	if err := l.once(ctx); err == nil || len(detached) > 0 {
		t.Fatalf("once with an unreadable source = %v, detached %v; want an error and nothing removed", err, detached)
	}
	if code, body := probe(); code != http.StatusServiceUnavailable || !strings.Contains(body, "not connected") {
		t.Errorf("/readyz after an unreadable source = %d %q", code, body)
	}

	// The node's fence not written: red not attached, but blue, no longer requested here,
	// removed all the same (its address must not stay on two nodes); unready.
	src.gateways, src.err, guardErr = []ovn.VpcGatewayPort{gatewayPort("red")}, nil, errors.New("nft: command not found")
	before := len(logs.all())
	if err := l.once(ctx); err == nil || onNode["red"] || !slices.Equal(detached, []string{"blue"}) {
		t.Fatalf("once with the fence failing = %v, red on the node %v, removed %v; want an error, red not attached, blue removed", err, onNode["red"], detached)
	}
	if lines := logs.all()[before:]; !slices.EqualFunc(lines, []string{"Failed to guard the node", "Removed the VPC gateway"}, strings.Contains) {
		t.Errorf("logged %q with the fence failing, want the failure and blue's removal", lines)
	}
	if code, body := probe(); code != http.StatusServiceUnavailable || !strings.Contains(body, "nft: command not found") {
		t.Errorf("/readyz with the fence failing = %d %q", code, body)
	}
	guardErr, detached = nil, nil

	for _, step := range []struct {
		name     string
		gateways []ovn.VpcGatewayPort
		changes  []string
		fail     error
		lines    []string // what each line the check logs says
		detached []string
		snatFail error
		snat     string // red's namespace's SNAT after the step ("" to skip the check)
	}{
		{"red requested here", []ovn.VpcGatewayPort{gatewayPort("red")}, []string{"created the namespace"}, nil, []string{"Attached the VPC gateway"}, nil, nil, ""},
		{"red found right", []ovn.VpcGatewayPort{gatewayPort("red")}, nil, nil, nil, nil, nil, "[] to invalid IP out of all but vpc"},
		{"red given an external address", []ovn.VpcGatewayPort{addressed("red", "242.1.0.9")}, nil, nil, nil, nil, nil, "[10.0.1.0/24] to 242.1.0.9 out of all but vpc"},
		{"red's SNAT failing", []ovn.VpcGatewayPort{addressed("red", "242.1.0.9")}, nil, errors.New("nft: boom"), []string{"Failed to write the VPC gateway's SNAT"}, nil, errors.New("nft: boom"), ""},
		{"red repaired", []ovn.VpcGatewayPort{gatewayPort("red")}, []string{"added 100.127.255.254/30 to vpc"}, nil, []string{"Repaired the VPC gateway"}, nil, nil, ""},
		{"red failing", []ovn.VpcGatewayPort{gatewayPort("red")}, nil, errors.New("boom"), []string{"Failed to attach the VPC gateway"}, nil, nil, ""},
		{"red moved away", nil, nil, nil, []string{"Removed the VPC gateway"}, []string{"red"}, nil, ""},
	} {
		src.gateways, src.err, changes, detached, snatErr = step.gateways, nil, step.changes, nil, step.snatFail
		reconcileErr = step.fail
		if step.snatFail != nil {
			reconcileErr = nil // the attach works, its SNAT fails
		}
		before := len(logs.all())
		err := l.once(ctx)
		if (err != nil) != (step.fail != nil) {
			t.Errorf("%s: once = %v", step.name, err)
		}
		lines := logs.all()[before:]
		if !slices.EqualFunc(lines, step.lines, strings.Contains) {
			t.Errorf("%s: logged %q, want lines saying %q", step.name, lines, step.lines)
		}
		if got := snats["/run/netns/octvpc-red"]; step.snat != "" && got != step.snat {
			t.Errorf("%s: red's SNAT %q, want %q", step.name, got, step.snat)
		}
		if !slices.Equal(detached, step.detached) {
			t.Errorf("%s: removed %v, want %v", step.name, detached, step.detached)
		}
		code, body := probe()
		if (code == http.StatusOK) != (step.fail == nil) {
			t.Errorf("%s: /readyz = %d %q", step.name, code, body)
		}
	}
}

func TestNewVpcLoopRefusesIncompleteOptions(t *testing.T) {
	valid := VpcOptions{ClusterID: "east", Chassis: "node-a", Node: podport.Node{Bridge: "br-int"}, Source: &fakeSource{}}
	for _, tc := range []struct {
		name   string
		change func(*VpcOptions)
		want   string
	}{
		{"no cluster", func(o *VpcOptions) { o.ClusterID = "" }, "cluster ID"},
		{"no chassis", func(o *VpcOptions) { o.Chassis = "" }, "no chassis name"},
		{"no bridge", func(o *VpcOptions) { o.Node.Bridge = "" }, "no integration bridge"},
		{"no source", func(o *VpcOptions) { o.Source = nil }, "no source"},
		{"negative interval", func(o *VpcOptions) { o.Interval = -1 }, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := valid
			tc.change(&o)
			if _, err := NewVpcLoop(o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewVpcLoop = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// wakingSource is a fakeSource that counts its calls and has a wake channel.
type wakingSource struct {
	fakeSource
	wake  chan struct{}
	calls atomic.Int32
}

func (w *wakingSource) VpcGatewaysOn(ctx context.Context, clusterID, chassis string) ([]ovn.VpcGatewayPort, error) {
	w.calls.Add(1)
	return w.fakeSource.VpcGatewaysOn(ctx, clusterID, chassis)
}

func (w *wakingSource) Wake() <-chan struct{} { return w.wake }

// TestVpcLoopChecksAtOnceWhenWoken runs the loop with an interval of an hour: a source that
// wakes it gets a check at once, each time (a takeover does not wait for the interval).
func TestVpcLoopChecksAtOnceWhenWoken(t *testing.T) {
	src := &wakingSource{wake: make(chan struct{}, 1)}
	l, err := NewVpcLoop(VpcOptions{ClusterID: "east", Chassis: "node-a", Node: podport.Node{Bridge: "br-int"}, Source: src, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	l.present = func(context.Context, podport.Node, string) ([]string, error) { return nil, nil }
	l.guard = func(context.Context) error { return nil } // not the host's nftables
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	for want := int32(1); want <= 3; want++ {
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("check %d", want), func() error {
			if n := src.calls.Load(); n != want {
				return fmt.Errorf("%d checks", n)
			}
			return nil
		})
		src.wake <- struct{}{}
	}
}

// TestDBSourceBoundsItsConnect: against an endpoint that accepts and never answers, a check
// fails within the connect's bound instead of hanging, and Wake and Close answer while the
// connect is under way (neither waits on the database).
func TestDBSourceBoundsItsConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn // open and silent until the listener closes
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, conn)
		}
	}()
	s := &DBSource{Endpoint: "tcp:" + ln.Addr().String(), ConnectTimeout: 6 * time.Second}
	done := make(chan error, 1)
	go func() {
		_, err := s.VpcGatewaysOn(context.Background(), "east", "node1")
		done <- err
	}()
	answered := make(chan struct{})
	go func() {
		s.Wake()
		close(answered)
	}()
	select {
	case <-answered:
	case <-time.After(3 * time.Second): // half the connect's bound: generous for a lock, short of the connect
		t.Error("Wake waited on the connect")
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "within 6s") {
			t.Errorf("VpcGatewaysOn against a silent database: %v; want the bound's error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("VpcGatewaysOn against a silent database did not return")
	}

	// Closed during a connect: the connect's client is not kept, and the source stays closed.
	go func() {
		_, err := s.VpcGatewaysOn(context.Background(), "east", "node1")
		done <- err
	}()
	closed := make(chan struct{})
	go func() {
		s.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(3 * time.Second):
		t.Error("Close waited on the connect")
	}
	if err := <-done; !errors.Is(err, errSourceClosed) {
		t.Errorf("a connect closed under way: %v, want %v", err, errSourceClosed)
	}
	if _, err := s.VpcGatewaysOn(context.Background(), "east", "node1"); !errors.Is(err, errSourceClosed) {
		t.Errorf("VpcGatewaysOn after Close: %v, want %v", err, errSourceClosed)
	}
}
