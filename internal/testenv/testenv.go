// Package testenv gives tests real Kubernetes control planes (see internal/lab/controlplane)
// with one call, and helpers every such test needs.
package testenv

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
)

// modulePath identifies the repository root's go.mod.
const modulePath = "github.com/octopus-mcs/octopus"

// Timeouts for one test's setup. A cold build of the binaries takes about 8 minutes on the
// project's 2-core machines; run `hack/k8s-binaries.sh` once beforehand or raise `go test
// -timeout` on a fresh machine.
const (
	buildTimeout = 20 * time.Minute
	startTimeout = 3 * time.Minute
)

// MaxClusters is how many clusters ControlPlanes supports: the CIDR scheme below uses the
// second octet 100+i for pods and 200+i for services.
const MaxClusters = 55

// CIDRs returns the service and pod CIDRs ControlPlanes gives the i-th cluster (0-based):
// services 10.(200+i).0.0/16, pods 10.(100+i).0.0/16. Distinct per cluster so that
// multi-cluster tests notice when addresses of one cluster leak into another.
func CIDRs(i int) (service, pod netip.Prefix) {
	if i < 0 || i >= MaxClusters {
		panic(fmt.Sprintf("testenv.CIDRs: cluster index %d out of range [0,%d)", i, MaxClusters))
	}
	service = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(200 + i), 0, 0}), 16)
	pod = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(100 + i), 0, 0}), 16)
	return service, pod
}

// ServiceCIDR6 returns the IPv6 service CIDR DualStackControlPlanes gives the i-th cluster:
// 2001:db8:(200+i)::/112 (the documentation prefix, as every IPv6 address of the lab's), the
// same scheme as CIDRs.
func ServiceCIDR6(i int) netip.Prefix {
	if i < 0 || i >= MaxClusters {
		panic(fmt.Sprintf("testenv.ServiceCIDR6: cluster index %d out of range [0,%d)", i, MaxClusters))
	}
	return netip.MustParsePrefix(fmt.Sprintf("2001:db8:%d::/112", 200+i))
}

// DualStackControlPlanes is ControlPlanes with dual-stack API servers: cluster i allocates
// ClusterIPs from CIDRs(i) and ServiceCIDR6(i), IPv4 primary.
func DualStackControlPlanes(t testing.TB, names ...string) *controlplane.Environment {
	t.Helper()
	return startControlPlanes(t, true, names)
}

// ControlPlanes starts one etcd and a control plane per name (without kube-scheduler) in a
// temporary directory, registers Stop with t.Cleanup and returns the environment. Cluster i
// gets the CIDRs of CIDRs(i). The test fails with a clear message if the binaries cannot be
// built or a control plane does not start; process logs are under <env.Dir>/logs.
func ControlPlanes(t testing.TB, names ...string) *controlplane.Environment {
	t.Helper()
	return startControlPlanes(t, false, names)
}

func startControlPlanes(t testing.TB, dualStack bool, names []string) *controlplane.Environment {
	t.Helper()
	if len(names) == 0 {
		t.Fatal("testenv.ControlPlanes: no cluster names given")
	}
	if len(names) > MaxClusters {
		t.Fatalf("testenv.ControlPlanes: %d clusters, at most %d supported", len(names), MaxClusters)
	}
	clusters := make([]controlplane.ClusterOptions, len(names))
	for i, name := range names {
		svc, pod := CIDRs(i)
		clusters[i] = controlplane.ClusterOptions{Name: name, ServiceCIDR: svc, PodCIDR: pod}
		if dualStack {
			clusters[i].SecondaryServiceCIDR = ServiceCIDR6(i)
		}
	}
	opts := Options(t)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	env, err := controlplane.Start(ctx, opts, clusters...)
	if err != nil {
		t.Fatalf("starting control planes %v: %v", names, err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping control planes: %v", err)
		}
	})
	return env
}

// Options returns controlplane.Options for a test: binaries from BinDir, a fresh temporary
// state directory, logs and progress through t.Log. For tests that call controlplane.Start
// themselves.
func Options(t testing.TB) controlplane.Options {
	t.Helper()
	return controlplane.Options{
		BinDir:   BinDir(t),
		Dir:      t.TempDir(), // removed after the Stop cleanup registered later has run
		Log:      testr.NewWithInterface(t, testr.Options{LogTimestamp: true}),
		Progress: &testWriter{t: t},
	}
}

var binDir struct {
	once sync.Once
	dir  string
	err  error
}

// BinDir returns the directory of the control-plane binaries, building them on first use in
// this test binary (progress on stderr). It fails the test if they cannot be built.
func BinDir(t testing.TB) string {
	t.Helper()
	root := RepoRoot(t)
	binDir.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		binDir.dir, binDir.err = controlplane.EnsureBinaries(ctx, root, os.Stderr)
	})
	if binDir.err != nil {
		t.Fatalf("control-plane binaries (etcd, kube-apiserver, ...) are missing and building them failed: %v\n"+
			"build them by running hack/k8s-binaries.sh in %s", binDir.err, root)
	}
	return binDir.dir
}

// RepoRoot returns the module root: the nearest directory at or above the working directory
// whose go.mod declares github.com/octopus-mcs/octopus.
func RepoRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatalf("finding repository root: %v", err)
	}
	root, err := findModuleRoot(wd, modulePath)
	if err != nil {
		t.Fatalf("finding repository root: %v", err)
	}
	return root
}

// findModuleRoot walks up from dir to the directory whose go.mod declares module.
func findModuleRoot(dir, module string) (string, error) {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if data, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && moduleName(data) == module {
			return d, nil
		}
		if parent := filepath.Dir(d); parent == d {
			return "", fmt.Errorf("no go.mod of module %s at or above %s", module, dir)
		}
	}
}

// moduleName returns the path of the module directive in a go.mod file.
func moduleName(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`)
		}
	}
	return ""
}

// testWriter sends each written line to t.Log.
type testWriter struct {
	t testing.TB
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
