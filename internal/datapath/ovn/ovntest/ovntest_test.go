package ovntest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestNBKeepsDataAcrossRestart(t *testing.T) {
	ctx := context.Background()
	nb := StartNB(t)
	if _, err := nb.Ctl(ctx, "ls-add", "sw0"); err != nil {
		t.Fatal(err)
	}
	nb.Stop()
	if _, err := nb.Ctl(ctx, "--timeout=1", "ls-list"); err == nil {
		t.Fatal("ovn-nbctl reached a stopped server")
	}
	nb.Start()
	out, err := nb.Ctl(ctx, "ls-list")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "(sw0)") {
		t.Fatalf("switch sw0 lost across a restart; ls-list: %q", out)
	}
}

func TestCentralBindsPortsInSouthbound(t *testing.T) {
	ctx := context.Background()
	c := StartCentral(t)
	if _, err := c.NB.Ctl(ctx, "ls-add", "sw0", "--", "lsp-add", "sw0", "p0"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := c.SB.Ctl(ctx, "--bare", "--columns=logical_port", "list", "Port_Binding")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "p0") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ovn-northd made no Port_Binding for p0; SB has %q", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestChassisNamedAfterItsNode: a chassis started with a name registers under it in the
// southbound database, as a lab node's chassis must for the gateway's port to be requested on
// it by its node name.
func TestChassisNamedAfterItsNode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a chassis needs root for its network namespace")
	}
	c := StartCentral(t)
	// A namespace of the test's own, standing for a lab node's (the only chassis here: two
	// would both register the Geneve endpoint 127.0.0.1 until Link, and OVN refuses that).
	ns := fmt.Sprintf("ovntest-named-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ch := StartChassisNamed(t, c, ns, "node-7")
	if ch.Name() != "node-7" {
		t.Fatalf("Name() = %q", ch.Name())
	}
	ch.eventually("chassis node-7 in the southbound database", func() error {
		out, err := c.SB.Ctl(context.Background(), "--bare", "--columns=name", "list", "Chassis")
		if err == nil && !strings.Contains(out, "node-7") {
			err = fmt.Errorf("chassis %q", strings.Fields(out))
		}
		return err
	})
}
