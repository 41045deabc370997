// Command image writes the project's OCI image (internal/image.Octopus) as a docker-archive
// tarball, without a container engine: `make image`. The binaries are built here with
// -trimpath and without VCS stamping, so that two checkouts of the same commit on machines
// with the same Debian packages give the same image digest. The image is tagged with
// internal/version's Version, which the binaries inside carry too.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/octopus-mcs/octopus/internal/image"
	"github.com/octopus-mcs/octopus/internal/version"
)

func main() {
	out := flag.String("o", "", "the tarball to write (default bin/octopus-image-<version>.tar)")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	if out == "" {
		out = filepath.Join("bin", "octopus-image-"+version.Version+".tar")
	}
	binDir, err := os.MkdirTemp("", "octopus-image-bin")
	if err != nil {
		return err
	}
	defer os.RemoveAll(binDir)
	for _, b := range image.DaemonBinaries {
		if err := build(filepath.Join(binDir, b), "./cmd/"+b); err != nil {
			return err
		}
	}
	tag := image.OctopusRepo + ":" + version.Version
	spec, err := image.Octopus(image.OctopusOptions{BinDir: binDir, Tags: []string{tag}})
	if err != nil {
		return err
	}
	img, err := image.Build(spec)
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := image.Write(out, spec); err != nil {
		return err
	}
	fmt.Printf("%s %s@%s\n", out, tag, digest)
	return nil
}

// build compiles pkg into out, reproducibly and with the version this command was built with.
func build(out, pkg string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-X github.com/octopus-mcs/octopus/internal/version.Version="+version.Version, "-o", out, pkg)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building %s: %w", pkg, err)
	}
	return nil
}
