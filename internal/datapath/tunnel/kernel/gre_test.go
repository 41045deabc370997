package kernel

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// TestGREModulePresent checks the unprivileged fallback: ip_gre in /sys/module or in
// /proc/modules means GRE; neither, or no /proc/modules at all (a kernel without modules, as on
// the lab's machines), means none.
func TestGREModulePresent(t *testing.T) {
	tests := []struct {
		name        string
		sysModules  []string
		procModules string // "" for no file
		want        bool
	}{
		{name: "built in or loaded, in /sys/module", sysModules: []string{"ip_gre", "vxlan"}, want: true},
		{name: "loaded, in /proc/modules", sysModules: []string{"vxlan"}, procModules: "vxlan 1 0 - Live 0x0\nip_gre 32768 0 - Live 0x0\n", want: true},
		{name: "only a module of a similar name", sysModules: []string{"ip_gre_extra"}, procModules: "ip_gre_extra 1 0 - Live 0x0\ngre 1 0 - Live 0x0\n", want: false},
		{name: "a kernel without modules", sysModules: []string{"vxlan"}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			sys := filepath.Join(dir, "sys")
			for _, m := range tt.sysModules {
				if err := os.MkdirAll(filepath.Join(sys, m), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			proc := filepath.Join(dir, "modules")
			if tt.procModules != "" {
				if err := os.WriteFile(proc, []byte(tt.procModules), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := greModulePresent(sys, proc)
			if err != nil || got != tt.want {
				t.Fatalf("greModulePresent = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// TestGREAvailableOnThisKernel runs the real probe (root only): its answer is the one the ip
// tool gets adding a gretap link in a namespace of its own, and it leaves the calling thread in
// its namespace and no link behind. On the lab's machines (no GRE) it says false.
func TestGREAvailableOnThisKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	before, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	linksBefore := linkNames(t)

	got, err := GREAvailable()
	if err != nil {
		t.Fatal(err)
	}

	after, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if !before.Equal(after) {
		t.Errorf("the probe left the thread in another network namespace")
	}
	if linksAfter := linkNames(t); !slices.Equal(linksBefore, linksAfter) {
		t.Errorf("links before the probe %v, after %v", linksBefore, linksAfter)
	}
	unshare, errU := exec.LookPath("unshare")
	ip, errI := exec.LookPath("ip")
	if errU != nil || errI != nil {
		t.Logf("GREAvailable() = %v; no unshare or ip tool to compare with", got)
		return
	}
	out, err := exec.CommandContext(t.Context(), unshare, "-n", ip, "link", "add", "t0", "type", "gretap", "local", "192.0.2.1", "remote", "192.0.2.2").CombinedOutput()
	if want := err == nil; got != want {
		t.Errorf("GREAvailable() = %v; the ip tool says %v (%s)", got, want, strings.TrimSpace(string(out)))
	}
}

func linkNames(t *testing.T) []string {
	t.Helper()
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range links {
		names = append(names, l.Attrs().Name)
	}
	slices.Sort(names)
	return names
}
