package controlplane

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// ContainerdVersion is the containerd release hack/k8s/containerd pins; it names the cache
// directory and must equal hack/containerd.sh's CONTAINERD_VERSION (a test checks).
const ContainerdVersion = "v2.4.2"

// containerdScript builds containerd, relative to the repository root.
const containerdScript = "hack/containerd.sh"

// Binary names of a real lab node's runtime: the kubelet is built with the other Kubernetes
// binaries (hack/k8s-binaries.sh), the containerd ones by hack/containerd.sh.
const (
	BinKubelet    = "kubelet"
	BinContainerd = "containerd"
	BinShim       = "containerd-shim-runc-v2"
	BinCtr        = "ctr"
)

// ContainerdBinDir returns where hack/containerd.sh puts containerd, its runc shim and ctr:
// $OCTOPUS_CACHE/containerd-<version>/bin (default cache ~/.cache/octopus).
func ContainerdBinDir() (string, error) {
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "containerd-"+ContainerdVersion, "bin"), nil
}

// EnsureNodeRuntime makes sure the binaries of a real lab node are built: the kubelet in the
// directory of the other Kubernetes binaries (DefaultBinDir, returned as kubeBin) and
// containerd, containerd-shim-runc-v2 and ctr (returned as containerdBin). It runs the build
// scripts found from repoRoot for what is missing, serialised with other builders like
// EnsureBinaries. The tests' control planes without nodes need none of this, so
// EnsureBinaries does not build it.
func EnsureNodeRuntime(ctx context.Context, repoRoot string, progress io.Writer) (kubeBin, containerdBin string, err error) {
	kubeBin, err = DefaultBinDir()
	if err != nil {
		return "", "", err
	}
	err = cachedBuild(ctx, cachedBuildOptions{
		RepoRoot: repoRoot, Script: buildScript, CacheDir: filepath.Dir(kubeBin), What: "the kubelet",
		Missing: func() error { return missingIn(kubeBin, BinKubelet) },
	}, progress)
	if err != nil {
		return "", "", err
	}
	containerdBin, err = ContainerdBinDir()
	if err != nil {
		return "", "", err
	}
	err = cachedBuild(ctx, cachedBuildOptions{
		RepoRoot: repoRoot, Script: containerdScript, CacheDir: filepath.Dir(containerdBin), What: "containerd",
		Missing: func() error { return missingIn(containerdBin, BinContainerd, BinShim, BinCtr) },
	}, progress)
	return kubeBin, containerdBin, err
}

// missingIn reports which of names are not executable files in dir, nil when none.
func missingIn(dir string, names ...string) error {
	var missing []string
	for _, n := range names {
		if !isExecutable(filepath.Join(dir, n)) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing in %s: %s", dir, strings.Join(missing, ", "))
	}
	return nil
}
