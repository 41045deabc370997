package controlplane

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// CoreDNSVersion is the CoreDNS release hack/coredns pins; it names the cache directory and
// must equal hack/coredns.sh's COREDNS_VERSION (a test checks).
const CoreDNSVersion = "v1.15.0"

// coreDNSScript builds CoreDNS, relative to the repository root.
const coreDNSScript = "hack/coredns.sh"

// CoreDNSPath returns where hack/coredns.sh puts the CoreDNS binary:
// $OCTOPUS_CACHE/coredns-<version>/coredns (default cache ~/.cache/octopus).
func CoreDNSPath() (string, error) {
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "coredns-"+CoreDNSVersion, "coredns"), nil
}

// EnsureCoreDNS returns the CoreDNS binary, running hack/coredns.sh (found from repoRoot) when
// it is missing, serialised with other builders by the binary cache's lock file.
func EnsureCoreDNS(ctx context.Context, repoRoot string, progress io.Writer) (string, error) {
	path, err := CoreDNSPath()
	if err != nil {
		return "", err
	}
	err = cachedBuild(ctx, cachedBuildOptions{
		RepoRoot: repoRoot, Script: coreDNSScript, CacheDir: filepath.Dir(path), What: "CoreDNS",
		Missing: func() error {
			if !isExecutable(path) {
				return fmt.Errorf("no executable %s", path)
			}
			return nil
		},
	}, progress)
	return path, err
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode().Perm()&0o111 != 0
}
