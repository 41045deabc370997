package controlplane

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestArgsReferTo(t *testing.T) {
	const dir = "/tmp/state"
	tests := []struct {
		name string
		args []string
		want bool
	}{
		{"flag with path inside", []string{"etcd", "--data-dir=/tmp/state/etcd"}, true},
		{"separate path argument", []string{"x", "--kubeconfig", "/tmp/state/clusters/a/admin.kubeconfig"}, true},
		{"the dir itself", []string{"x", "/tmp/state"}, true},
		{"sibling with same prefix", []string{"x", "--data-dir=/tmp/state2/etcd"}, false},
		{"parent dir", []string{"x", "--data-dir=/tmp"}, false},
		{"unrelated", []string{"sleep", "1000"}, false},
		{"empty (zombie)", []string{""}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := argsReferTo(tt.args, dir); got != tt.want {
				t.Errorf("argsReferTo(%q) = %v, want %v", tt.args, got, tt.want)
			}
			if got := argsReferTo(tt.args, dir+"/"); got != tt.want {
				t.Errorf("with trailing slash: argsReferTo(%q) = %v, want %v", tt.args, got, tt.want)
			}
		})
	}
}

func TestLogTail(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short.log")
	var b strings.Builder
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	if err := os.WriteFile(short, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	got := logTail(short, 3)
	if want := "    line 98\n    line 99\n    line 100"; got != want {
		t.Errorf("logTail = %q, want %q", got, want)
	}

	// A log longer than what logTail reads: the cut first line must not appear.
	long := filepath.Join(dir, "long.log")
	line := strings.Repeat("x", 1000) + "\n"
	if err := os.WriteFile(long, []byte(strings.Repeat(line, 100)+"the end\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(logTail(long, 1000), "\n")
	if last := lines[len(lines)-1]; last != "    the end" {
		t.Errorf("last line = %q", last)
	}
	for _, l := range lines[:len(lines)-1] {
		if l != "    "+strings.TrimSuffix(line, "\n") {
			t.Fatalf("partial line quoted: %d bytes", len(l))
		}
	}

	if got := logTail(filepath.Join(dir, "missing.log"), 3); !strings.Contains(got, "log unreadable") {
		t.Errorf("logTail of a missing file = %q", got)
	}
}

func TestValidateClusters(t *testing.T) {
	ok := func(name string) ClusterOptions {
		return ClusterOptions{Name: name, ServiceCIDR: netip.MustParsePrefix("10.200.0.0/16"), PodCIDR: netip.MustParsePrefix("10.100.0.0/16")}
	}
	with := func(f func(*ClusterOptions)) ClusterOptions { c := ok("a"); f(&c); return c }
	tests := []struct {
		name     string
		clusters []ClusterOptions
		wantErr  string
	}{
		{"valid", []ClusterOptions{ok("hub"), ok("member-1")}, ""},
		{"none", nil, "no clusters"},
		{"bad name", []ClusterOptions{ok("Hub_1")}, `cluster name "Hub_1"`},
		{"duplicate", []ClusterOptions{ok("a"), ok("a")}, "given twice"},
		{"no service CIDR", []ClusterOptions{with(func(c *ClusterOptions) { c.ServiceCIDR = netip.Prefix{} })}, "ServiceCIDR is required"},
		{"no pod CIDR", []ClusterOptions{with(func(c *ClusterOptions) { c.PodCIDR = netip.Prefix{} })}, "PodCIDR is required"},
		{"service CIDR too large", []ClusterOptions{with(func(c *ClusterOptions) { c.ServiceCIDR = netip.MustParsePrefix("10.0.0.0/8") })}, "too large"},
		{"IPv6 service CIDR too large", []ClusterOptions{with(func(c *ClusterOptions) {
			c.ServiceCIDR = netip.MustParsePrefix("fd00::/64")
			c.PodCIDR = netip.MustParsePrefix("fd01::/56")
		})}, "use /108"},
		{"pod CIDR smaller than a node range", []ClusterOptions{with(func(c *ClusterOptions) { c.PodCIDR = netip.MustParsePrefix("10.100.0.0/24") })}, "between /8 and /23"},
		{"pod CIDR too large", []ClusterOptions{with(func(c *ClusterOptions) { c.PodCIDR = netip.MustParsePrefix("10.0.0.0/7") })}, "between /8 and /23"},
		{"overlap", []ClusterOptions{with(func(c *ClusterOptions) { c.PodCIDR = netip.MustParsePrefix("10.200.0.0/16") })}, "overlaps"},
		{"dual-stack", []ClusterOptions{with(func(c *ClusterOptions) {
			c.SecondaryServiceCIDR = netip.MustParsePrefix("2001:db8:201::/112")
			c.SecondaryPodCIDR = netip.MustParsePrefix("2001:db8:101::/48")
		})}, ""},
		{"secondary pods without secondary services", []ClusterOptions{with(func(c *ClusterOptions) {
			c.SecondaryPodCIDR = netip.MustParsePrefix("2001:db8:101::/48")
		})}, "SecondaryPodCIDR 2001:db8:101::/48 needs a SecondaryServiceCIDR"},
		{"secondary pod CIDR of the other family", []ClusterOptions{with(func(c *ClusterOptions) {
			c.SecondaryServiceCIDR = netip.MustParsePrefix("2001:db8:201::/112")
			c.SecondaryPodCIDR = netip.MustParsePrefix("10.50.0.0/16")
		})}, "secondary ranges"},
		{"secondary pod CIDR too small for /64 nodes", []ClusterOptions{with(func(c *ClusterOptions) {
			c.SecondaryServiceCIDR = netip.MustParsePrefix("2001:db8:201::/112")
			c.SecondaryPodCIDR = netip.MustParsePrefix("2001:db8:101::/64")
		})}, "between /48 and /63"},
		{"IPv6 valid", []ClusterOptions{with(func(c *ClusterOptions) {
			c.ServiceCIDR = netip.MustParsePrefix("fd00:96::/112")
			c.PodCIDR = netip.MustParsePrefix("fd00:100::/56")
		})}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateClusters(tt.clusters)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestStartRejectsBadOptions(t *testing.T) {
	bin := t.TempDir()
	for _, b := range Binaries {
		if err := os.WriteFile(filepath.Join(bin, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cluster := ClusterOptions{Name: "a", ServiceCIDR: netip.MustParsePrefix("10.200.0.0/16"), PodCIDR: netip.MustParsePrefix("10.100.0.0/16")}
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"no bin dir", Options{Dir: t.TempDir()}, "BinDir is required"},
		{"no dir", Options{BinDir: bin}, "Dir is required"},
		{"binaries missing", Options{BinDir: t.TempDir(), Dir: t.TempDir()}, "etcd not found"},
		{"unspecified bind address", Options{BinDir: bin, Dir: t.TempDir(), BindAddress: netip.MustParseAddr("0.0.0.0")}, "unspecified"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Start(t.Context(), tt.opts, cluster)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Start error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestScriptDefaults guards the cache path: DefaultBinDir must name the directory the script
// builds into when no version is overridden.
func TestScriptDefaults(t *testing.T) {
	script, err := os.ReadFile(filepath.Join("..", "..", "..", buildScript))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^BUILD_REV="([^"]+)"$`).FindSubmatch(script); m == nil || string(m[1]) != BuildRevision {
		t.Errorf("BUILD_REV in %s is %q, but the Go constant BuildRevision says %s", buildScript, m, BuildRevision)
	}
	for name, want := range map[string]string{"KUBE_VERSION": KubernetesVersion, "ETCD_VERSION": EtcdVersion} {
		m := regexp.MustCompile(name + `="\$\{` + name + `:-([^}]+)\}"`).FindSubmatch(script)
		if m == nil {
			t.Errorf("%s default not found in %s", name, buildScript)
			continue
		}
		if string(m[1]) != want {
			t.Errorf("%s defaults to %s in %s but the Go constant says %s", name, m[1], buildScript, want)
		}
	}
}

func TestDefaultBinDir(t *testing.T) {
	t.Setenv("OCTOPUS_CACHE", "/cache")
	t.Setenv("KUBE_VERSION", "")
	t.Setenv("ETCD_VERSION", "")
	got, err := DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	if want := "/cache/k8s-" + KubernetesVersion + "-etcd-" + EtcdVersion + "-" + BuildRevision + "/bin"; got != want {
		t.Errorf("DefaultBinDir = %s, want %s", got, want)
	}
	t.Setenv("KUBE_VERSION", "v1.36.3")
	if got, _ := DefaultBinDir(); got != "/cache/k8s-v1.36.3-etcd-"+EtcdVersion+"-"+BuildRevision+"/bin" {
		t.Errorf("DefaultBinDir with KUBE_VERSION = %s", got)
	}
}

func TestEnsureBinariesUsesCache(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("OCTOPUS_CACHE", cache)
	t.Setenv("KUBE_VERSION", "")
	t.Setenv("ETCD_VERSION", "")
	dir, _ := DefaultBinDir()
	if err := missingBinaries(dir); err == nil || !strings.Contains(err.Error(), "kube-apiserver") {
		t.Fatalf("missingBinaries of an empty cache = %v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range Binaries {
		if err := os.WriteFile(filepath.Join(dir, b), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	coredns, _ := CoreDNSPath()
	if _, err := EnsureBinaries(t.Context(), t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "build script not found") {
		t.Fatalf("EnsureBinaries without CoreDNS and no script: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(coredns), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(coredns, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	// With everything cached the script is not needed: a repo root without it must work.
	got, err := EnsureBinaries(t.Context(), t.TempDir(), nil)
	if err != nil || got != dir {
		t.Fatalf("EnsureBinaries = %q, %v; want %q", got, err, dir)
	}
	if err := os.Chmod(filepath.Join(dir, binKubectl), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureBinaries(t.Context(), t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "build script not found") {
		t.Fatalf("EnsureBinaries with kubectl not executable and no script: %v", err)
	}
}
