package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/datapath/ovn"
	"github.com/octopus-mcs/octopus/internal/datapath/ovn/ovntest"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/datapath/podport"
	"github.com/octopus-mcs/octopus/internal/secondarynet/gatewayuplink"
)

// TestGatewayPortFlags: each wrong flag is refused with an error naming it and saying what
// to pass instead; valid flags make the loop's options.
func TestGatewayPortFlags(t *testing.T) {
	valid := gatewayPortOptions{clusterID: "east", secondaryCIDR: "10.112.0.0/16", bridge: "br-int", mtu: 1400, interval: 10 * time.Second}
	opts, err := valid.options()
	if err != nil {
		t.Fatalf("valid flags refused: %v", err)
	}
	if opts.ClusterID != "east" || opts.CIDR.String() != "10.112.0.0/16" || opts.Node.Bridge != "br-int" || opts.MTU != 1400 || opts.Interval != 10*time.Second {
		t.Errorf("options = %+v", opts)
	}
	if opts.Vpcs != nil {
		t.Errorf("VPC gateways kept without --sb or --nb: %+v", opts.Vpcs)
	}
	withSB := valid
	withSB.sb, withSB.nodeName, withSB.vpcNetnsDir = "unix:/run/ovn/ovnsb_db.sock", "gw-1", "/run/netns"
	withSB.clusterCIDRs = []string{"10.244.0.0/16", "10.96.0.0/12"}
	if opts, err := withSB.options(); err != nil || opts.Vpcs == nil || opts.Vpcs.Chassis != "gw-1" {
		t.Errorf("with --sb: %+v, %v", opts.Vpcs, err)
	} else if src, ok := opts.Vpcs.Source.(*gatewayuplink.DBSource); !ok || !src.Southbound || src.Endpoint != withSB.sb {
		t.Errorf("with --sb the source is %+v, want the SB's", opts.Vpcs.Source)
	} else if want := "[10.112.0.0/16 10.244.0.0/16 10.96.0.0/12]"; fmt.Sprint(opts.Protected) != want || fmt.Sprint(opts.Vpcs.Protected) != want {
		// The secondary block with the cluster's CIDRs, the same in both loops (one table).
		t.Errorf("protected CIDRs %v and %v, want %s in both", opts.Protected, opts.Vpcs.Protected, want)
	}
	withVpcs := valid
	withVpcs.nb, withVpcs.nodeName, withVpcs.vpcNetnsDir, withVpcs.clusterCIDRs = "unix:/run/ovn/ovnnb_db.sock", "gw-1", "/run/netns", []string{"10.244.0.0/16"}
	if opts, err := withVpcs.options(); err != nil || opts.Vpcs == nil || opts.Vpcs.Chassis != "gw-1" || opts.Vpcs.ClusterID != "east" ||
		opts.Vpcs.NetnsDir != "/run/netns" || opts.Vpcs.Node.Bridge != "br-int" || opts.Vpcs.Source == nil {
		t.Errorf("with --nb: %+v, %v", opts.Vpcs, err)
	} else if src, ok := opts.Vpcs.Source.(*gatewayuplink.DBSource); !ok || src.Southbound {
		t.Errorf("with --nb the source is %+v, want the NB's", opts.Vpcs.Source)
	}
	for _, tc := range []struct {
		name   string
		change func(*gatewayPortOptions)
		want   []string // all in the error
	}{
		{"no cluster ID", func(o *gatewayPortOptions) { o.clusterID = "" }, []string{"--cluster-id", "kubectl get clusters"}},
		{"cluster ID not a label", func(o *gatewayPortOptions) { o.clusterID = "East_1" }, []string{`--cluster-id "East_1"`, "RFC 1123"}},
		{"no CIDR", func(o *gatewayPortOptions) { o.secondaryCIDR = "" }, []string{"--secondary-cidr", "kubectl get clusters -o wide"}},
		{"CIDR garbled", func(o *gatewayPortOptions) { o.secondaryCIDR = "10.112/16" }, []string{`--secondary-cidr "10.112/16"`}},
		{"CIDR with host bits", func(o *gatewayPortOptions) { o.secondaryCIDR = "10.112.0.1/16" }, []string{"--secondary-cidr", "did you mean 10.112.0.0/16"}},
		{"CIDR too small", func(o *gatewayPortOptions) { o.secondaryCIDR = "10.112.0.0/31" }, []string{"--secondary-cidr", "too small"}},
		{"IPv6 CIDR", func(o *gatewayPortOptions) { o.secondaryCIDR = "fd00::/64" }, []string{"--secondary-cidr", "only IPv4"}},
		{"no bridge", func(o *gatewayPortOptions) { o.bridge = "" }, []string{"--bridge", "br-int"}},
		{"MTU too small", func(o *gatewayPortOptions) { o.mtu = 0 }, []string{"--mtu 0", "1400"}},
		{"MTU too large", func(o *gatewayPortOptions) { o.mtu = 70000 }, []string{"--mtu 70000"}},
		{"interval zero", func(o *gatewayPortOptions) { o.interval = 0 }, []string{"--interval 0s", "positive"}},
		{"interval negative", func(o *gatewayPortOptions) { o.interval = -time.Second }, []string{"--interval -1s"}},
		{"two wrong", func(o *gatewayPortOptions) { o.bridge, o.mtu = "", 0 }, []string{"--bridge", "--mtu"}},
		{"VPC gateways without the node's name", func(o *gatewayPortOptions) { o.nb, o.vpcNetnsDir = "unix:/nb.sock", "/run/netns" }, []string{"--nb without --node-name", "NODE_NAME"}},
		{"VPC gateways without the cluster's CIDRs", func(o *gatewayPortOptions) { o.sb, o.nodeName = "unix:/sb.sock", "gw-1" },
			[]string{"--sb without --cluster-cidr", "no VPC reaches the cluster's pods"}},
		{"cluster CIDR garbled", func(o *gatewayPortOptions) { o.clusterCIDRs = []string{"10.244/16"} }, []string{`--cluster-cidr "10.244/16"`}},
		{"cluster CIDR with host bits", func(o *gatewayPortOptions) { o.clusterCIDRs = []string{"10.244.1.0/16"} }, []string{`--cluster-cidr "10.244.1.0/16"`, "did you mean 10.244.0.0/16"}},
		{"VPC gateways from the SB without the node's name", func(o *gatewayPortOptions) { o.sb, o.vpcNetnsDir = "unix:/sb.sock", "/run/netns" }, []string{"--sb without --node-name"}},
		{"VPC gateways from both databases", func(o *gatewayPortOptions) { o.sb, o.nb, o.nodeName = "unix:/sb.sock", "unix:/nb.sock", "gw-1" }, []string{"--sb and --nb", "pass one"}},
		{"VPC gateways from the SB over ssl without certificates", func(o *gatewayPortOptions) {
			o.sb, o.nodeName, o.vpcNetnsDir, o.sbTLS = "ssl:sb:6642", "gw-1", "/run/netns", tlsFlags{db: "sb"}
		}, []string{"--sb-private-key"}},
		{"VPC gateways in a relative directory", func(o *gatewayPortOptions) { o.nb, o.nodeName, o.vpcNetnsDir = "unix:/nb.sock", "gw-1", "netns" }, []string{`--vpc-netns-dir "netns"`}},
		{"VPC gateways over ssl without certificates", func(o *gatewayPortOptions) {
			o.nb, o.nodeName, o.vpcNetnsDir, o.nbTLS = "ssl:nb:6641", "gw-1", "/run/netns", tlsFlags{db: "nb"}
		}, []string{"--nb-private-key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := valid
			tc.change(&o)
			_, err := o.options()
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestGatewayPortNeedsOnlyNetAdmin runs the built octopus-ovn gateway-port on a real chassis
// with NET_ADMIN as its only capability, as the member chart runs it (root without
// DAC_OVERRIDE or SYS_ADMIN): it attaches the gateway's interface. A setns into its own
// namespace (CAP_SYS_ADMIN) would make it fail.
func TestGatewayPortNeedsOnlyNetAdmin(t *testing.T) {
	central := ovntest.StartCentral(t)
	ch := ovntest.StartChassis(t, central)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Fatal("setpriv is missing: install util-linux (apt-get install util-linux)")
	}
	bin := filepath.Join(t.TempDir(), "octopus-ovn")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	logFile, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	log := func() string { b, _ := os.ReadFile(logFile.Name()); return string(b) }
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ch.Netns,
		"setpriv", "--bounding-set", "-all,+net_admin", "--inh-caps", "-all", "--",
		bin, "gateway-port", "--cluster-id=east", "--secondary-cidr=10.112.0.0/16",
		"--ovsdb="+ch.Node().OVSDB, "--interval=200ms", "--health-probe-bind-address=0")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		if err := <-exited; err != nil {
			t.Logf("gateway-port stopped: %v", err) // killed by the test
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		addrs, _ := exec.Command("ip", "-n", ch.Netns, "-4", "-o", "addr", "show", "dev", podport.GatewayLink).CombinedOutput()
		ports, _ := exec.Command("ovs-vsctl", "--db="+ch.Node().OVSDB, "list-ports", "br-int").CombinedOutput()
		if strings.Contains(string(addrs), "10.112.0.1/16") && strings.Contains(string(ports), podport.GatewayBridgePort) {
			break
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("gateway-port exited: %v\n%s", err, log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s with its address and OVS port after 20 s:\n%s", podport.GatewayLink, log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if strings.Contains(log(), "Failed") {
		t.Errorf("gateway-port logged a failure:\n%s", log())
	}
	// The guard, written before the interface, with NET_ADMIN alone too.
	if out, err := exec.Command("ip", "netns", "exec", ch.Netns, "nft", "list", "table", "inet", owner.GatewayGuardNFTTable).CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "drop") {
		t.Errorf("no guard table in the node's namespace: %v\n%s", err, out)
	}
}

// TestGatewayPortKeepsVpcGateways runs the built octopus-ovn gateway-port with --sb on a real
// chassis, as root and as the member chart runs it: from the SB bindings ovn-northd makes of the
// rows ApplyVpc writes with the VPC's gateway on this chassis it makes the VPC's gateway
// namespace beside octgw, with a route back to the VPC's subnet, and removes it once the
// gateway is gone.
func TestGatewayPortKeepsVpcGateways(t *testing.T) {
	central := ovntest.StartCentral(t)
	ch := ovntest.StartChassis(t, central)
	bin := filepath.Join(t.TempDir(), "octopus-ovn")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	nb, err := ovn.Connect(ctx, ovn.Options{Endpoint: central.NB.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	red := ovn.Vpc{ClusterID: "east", Name: "red", Subnets: []ovn.Subnet{{Name: "a", CIDR: netip.MustParsePrefix("10.0.1.0/24")}},
		Gateway: &ovn.VpcGateway{Chassis: ch.Name()}}
	if _, err := nb.ApplyVpc(ctx, red); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logFile, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	log := func() string { b, _ := os.ReadFile(logFile.Name()); return string(b) }
	// nsenter, not `ip netns exec`, which gives the process a mount namespace of its own
	// (slave to the host's): the namespace's bind mount would stay in there, as it would in a
	// pod without bidirectional mount propagation of the namespace directory.
	cmd := exec.CommandContext(ctx, "nsenter", "--net="+ch.Node().Netns, "--",
		bin, "gateway-port", "--cluster-id=east", "--secondary-cidr=10.112.0.0/16",
		"--ovsdb="+ch.Node().OVSDB, "--interval=200ms", "--health-probe-bind-address=0",
		"--sb="+central.SB.Endpoint, "--node-name="+ch.Name(), "--vpc-netns-dir="+dir, "--cluster-cidr=10.244.0.0/16")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Registered after the TempDir's, so it runs first: the namespace's mount goes before.
	t.Cleanup(func() {
		cancel()
		if err := <-exited; err != nil {
			t.Logf("gateway-port stopped: %v", err) // killed by the test
		}
		_ = podport.DetachVpcGateway(context.Background(), ch.Node(), dir, "red")
	})
	netnsPath := podport.VpcGateway{NetnsDir: dir, Vpc: "red"}.NetnsPath()
	waitFor := func(what string, done func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !done(); time.Sleep(100 * time.Millisecond) {
			select {
			case err := <-exited:
				exited <- err
				t.Fatalf("gateway-port exited: %v\n%s", err, log())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after 20 s:\n%s", what, log())
			}
		}
	}
	waitFor("red's gateway namespace with its address and its route back, and octgw", func() bool {
		addrs, _ := exec.Command("nsenter", "--net="+netnsPath, "ip", "-4", "-o", "addr", "show", "dev", podport.VpcGatewayInterface).CombinedOutput()
		routes, _ := exec.Command("nsenter", "--net="+netnsPath, "ip", "-4", "route", "show", "10.0.1.0/24").CombinedOutput()
		octgw, _ := exec.Command("ip", "-n", ch.Netns, "-4", "-o", "addr", "show", "dev", podport.GatewayLink).CombinedOutput()
		return strings.Contains(string(addrs), "100.127.255.254/30") && strings.Contains(string(routes), "via 100.127.255.253") &&
			strings.Contains(string(octgw), "10.112.0.1/16")
	})
	red.Gateway = nil
	if _, err := nb.ApplyVpc(ctx, red); err != nil {
		t.Fatal(err)
	}
	waitFor("red's gateway namespace removed", func() bool {
		_, err := os.Stat(netnsPath)
		return errors.Is(err, os.ErrNotExist)
	})
	// A failed check is retried by design (on this shared machine ovs-vsctl can time out
	// against a starved ovsdb-server); the waits above prove the outcomes, so a failure on
	// the way is shown, not judged.
	if strings.Contains(log(), "Failed") {
		t.Logf("gateway-port logged a failure and went on:\n%s", log())
	}
}
