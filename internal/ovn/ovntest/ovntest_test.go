package ovntest

import (
	"context"
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
