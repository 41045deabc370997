package hostfirewall

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

var update = flag.Bool("update", false, "rewrite the golden rulesets in testdata")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test -run %s -update` to create it)", err, t.Name())
	}
	if got != string(want) {
		t.Fatalf("ruleset differs from %s:\n--- got\n%s--- want\n%s", path, got, want)
	}
}

func TestOpenGolden(t *testing.T) {
	tests := []struct {
		name   string
		before []uint16 // opened first: Open must replace, not add to, what the table held
		ports  []uint16
	}{
		{name: "one-port", ports: []uint16{4500}},
		{name: "ports-sorted-deduplicated", ports: []uint16{4790, 4500, 4790, 0}},
		{name: "replaces", before: []uint16{51820, 4790}, ports: []uint16{4500}},
		{name: "no-port", before: []uint16{4500}, ports: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			fake := knftables.NewFake(knftables.InetFamily, owner.HostFirewallNFTTable)
			f := NewWith(fake)
			if tt.before != nil {
				if err := f.Open(ctx, tt.before...); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Open(ctx, tt.ports...); err != nil {
				t.Fatal(err)
			}
			golden(t, tt.name+".nft", fake.Dump())
		})
	}
}

func TestCloseDeletesTable(t *testing.T) {
	ctx := context.Background()
	fake := knftables.NewFake(knftables.InetFamily, owner.HostFirewallNFTTable)
	f := NewWith(fake)
	if err := f.Close(ctx); err != nil {
		t.Fatalf("closing before any Open: %v", err)
	}
	if err := f.Open(ctx, 4500); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fake.Dump(); got != "" {
		t.Fatalf("table left after Close:\n%s", got)
	}
}
