package controlplane

import (
	"context"
	"io"
	"path/filepath"
)

// FlannelVersion is the flannel release hack/k8s/flannel pins; it names the cache directory
// and must equal hack/flannel.sh's FLANNEL_VERSION (a test checks).
const FlannelVersion = "v0.28.4"

// flannelScript builds flanneld and the flannel CNI plugin, relative to the repository root.
const flannelScript = "hack/flannel.sh"

// Binary names of the flannel CNI setup (`lab up --cni flannel`).
const (
	BinFlanneld = "flanneld"
	// BinFlannelCNI is the CNI plugin, named as the "type" of its CNI configuration.
	BinFlannelCNI = "flannel"
)

// FlannelBinDir returns where hack/flannel.sh puts flanneld and the flannel CNI plugin:
// $OCTOPUS_CACHE/flannel-<version>/bin (default cache ~/.cache/octopus).
func FlannelBinDir() (string, error) {
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "flannel-"+FlannelVersion, "bin"), nil
}

// EnsureFlannel makes sure flanneld and the flannel CNI plugin are built, running the build
// script found from repoRoot when they are missing, serialised with other builders like
// EnsureNodeRuntime, and returns their directory. Only labs with the flannel CNI need them.
func EnsureFlannel(ctx context.Context, repoRoot string, progress io.Writer) (string, error) {
	dir, err := FlannelBinDir()
	if err != nil {
		return "", err
	}
	err = cachedBuild(ctx, cachedBuildOptions{
		RepoRoot: repoRoot, Script: flannelScript, CacheDir: filepath.Dir(dir), What: "flannel",
		Missing: func() error { return missingIn(dir, BinFlanneld, BinFlannelCNI) },
	}, progress)
	return dir, err
}
