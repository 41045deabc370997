package dnsconfig

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var target = []netip.AddrPort{netip.MustParseAddrPort("10.96.0.20:53")}

func readCorefile(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".Corefile"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPatchRoundTrip patches Corefiles of different shapes and checks that the zone is
// forwarded, that the result still parses, that patching twice changes nothing and that
// Unpatch restores the original byte for byte.
func TestPatchRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reload bool
	}{
		{name: "kubeadm", reload: true},
		{name: "stubdomains", reload: false},
		{name: "custom", reload: true},
		{name: "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			original := ""
			if tc.name != "empty" {
				original = readCorefile(t, tc.name)
			}
			info, err := Inspect(original)
			if err != nil {
				t.Fatalf("Inspect: %v", err)
			}
			if info.Managed || info.Reload != tc.reload {
				t.Errorf("Inspect = %+v, want Managed=false Reload=%v", info, tc.reload)
			}
			patched, err := Patch(original, target)
			if err != nil {
				t.Fatalf("Patch: %v", err)
			}
			if !strings.HasPrefix(patched, original) {
				t.Errorf("Patch changed the user's lines:\n%s", patched)
			}
			if !strings.Contains(patched, "clusterset.local:53 {\n    errors\n    forward . 10.96.0.20:53\n}\n") {
				t.Errorf("no forwarding block in:\n%s", patched)
			}
			blocks, err := serverBlocks(patched)
			if err != nil {
				t.Fatalf("the patched Corefile does not parse: %v\n%s", err, patched)
			}
			if last := blocks[len(blocks)-1]; zoneOf(last.keys[0]) != Zone || !last.directives["forward"] {
				t.Errorf("last block = %+v, want the clusterset.local forwarder", last)
			}
			if info, err := Inspect(patched); err != nil || !info.Managed {
				t.Errorf("Inspect(patched) = %+v, %v; want Managed", info, err)
			}
			again, err := Patch(patched, target)
			if err != nil || again != patched {
				t.Errorf("patching twice changed the Corefile (err %v):\n%s", err, again)
			}
			restored, removed := Unpatch(patched)
			if !removed || restored != original {
				t.Errorf("Unpatch = %q (removed %v), want the original %q", restored, removed, original)
			}
			if same, removed := Unpatch(original); removed || same != original {
				t.Errorf("Unpatch of an unpatched Corefile changed it")
			}
		})
	}
}

// TestPatchMovesTarget: a new octopus-dns address replaces the old one in place of a
// second block.
func TestPatchMovesTarget(t *testing.T) {
	original := readCorefile(t, "kubeadm")
	first, err := Patch(original, target)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Patch(first, []netip.AddrPort{netip.MustParseAddrPort("10.96.0.30:53")})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(second, "clusterset.local:53") != 1 || !strings.Contains(second, "forward . 10.96.0.30:53") {
		t.Errorf("second Patch:\n%s", second)
	}
	if restored, _ := Unpatch(second); restored != original {
		t.Errorf("Unpatch after two patches = %q", restored)
	}
}

// TestRefused lists Corefiles Octopus must not touch, each with the part of the message that
// tells the user what is wrong.
func TestRefused(t *testing.T) {
	patched, err := Patch(readCorefile(t, "kubeadm"), target)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, corefile, want string
	}{
		{"unclosed block", readCorefile(t, "invalid"), "missing its closing }"},
		{"stray brace", ".:53 {\n    errors\n}\n}\n", "line 4: unexpected }"},
		{"brace without zone", "{\n    errors\n}\n", "{ without a zone"},
		{"braceless block", ".:53\nerrors\nforward . 198.51.100.53\n", "not followed by a { ... } block"},
		{"user's own zone", ".:53 {\n    errors\n}\nclusterset.local {\n    forward . 198.51.100.1\n}\n", "line 4 already has a server block for clusterset.local"},
		{"user's own zone with scheme and dot", "dns://ClusterSet.Local.:53 {\n    errors\n}\n", "already has a server block"},
		{"our block edited", strings.Replace(patched, endMarker+"\n", "", 1), "has Octopus's begin marker but not"},
		{"import without file", "import\n", "import without a file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Patch(tc.corefile, target)
			if !errors.Is(err, ErrUnparsable) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Patch error = %v, want ErrUnparsable containing %q", err, tc.want)
			}
		})
	}
}

func TestZoneOf(t *testing.T) {
	for key, want := range map[string]string{
		".":                          ".",
		".:53":                       ".",
		"dns://.:53":                 ".",
		"clusterset.local":           Zone,
		"clusterset.local.:53":       Zone,
		"tls://clusterset.local:853": Zone,
		"example.org":                "example.org",
		"[::1]:53":                   "[::1]",
	} {
		if got := zoneOf(key); got != want {
			t.Errorf("zoneOf(%q) = %q, want %q", key, got, want)
		}
	}
}

// FuzzPatchRoundTrip: whatever the user's Corefile holds, Patch never panics and, when it
// accepts the Corefile, Unpatch gives back exactly the original.
func FuzzPatchRoundTrip(f *testing.F) {
	for _, name := range []string{"kubeadm", "stubdomains", "custom", "invalid"} {
		f.Add(readCorefile(f, name))
	}
	f.Add("")
	f.Add("x {\n" + beginMarker + "\n}\n")
	f.Fuzz(func(t *testing.T, corefile string) {
		patched, err := Patch(corefile, target)
		if err != nil {
			if !errors.Is(err, ErrUnparsable) {
				t.Fatalf("Patch error %v does not wrap ErrUnparsable", err)
			}
			return
		}
		base, _ := Unpatch(corefile)
		if restored, removed := Unpatch(patched); !removed || restored != base {
			t.Fatalf("round trip of %q: got %q (removed %v)", corefile, restored, removed)
		}
	})
}
