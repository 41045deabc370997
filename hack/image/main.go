// Command image writes the project's OCI images as docker-archive tarballs, without a container
// engine: `make image`. The project's image (internal/image.Octopus) holds the daemons every
// cluster runs; the secondary network's (internal/image.OVN) holds octopus-ovn with Open
// vSwitch and OVN, which only clusters on the secondary network pull. The binaries are built here with
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
	"slices"

	"github.com/octopus-mcs/octopus/internal/image"
	"github.com/octopus-mcs/octopus/internal/version"
)

func main() {
	out := flag.String("o", "", "the tarball of the project's image (default bin/octopus-image-<version>.tar)")
	ovnOut := flag.String("ovn-o", "", "the tarball of the secondary network's image (default bin/octopus-ovn-image-<version>.tar)")
	flag.Parse()
	if err := run(*out, *ovnOut); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(out, ovnOut string) error {
	if out == "" {
		out = filepath.Join("bin", "octopus-image-"+version.Version+".tar")
	}
	if ovnOut == "" {
		ovnOut = filepath.Join("bin", "octopus-ovn-image-"+version.Version+".tar")
	}
	binDir, err := os.MkdirTemp("", "octopus-image-bin")
	if err != nil {
		return err
	}
	defer os.RemoveAll(binDir)
	for _, b := range slices.Concat(image.DaemonBinaries, image.OVNBinaries) {
		if err := build(filepath.Join(binDir, b), "./cmd/"+b); err != nil {
			return err
		}
	}
	spec, err := image.Octopus(image.OctopusOptions{BinDir: binDir, Tags: []string{image.OctopusRepo + ":" + version.Version}})
	if err != nil {
		return err
	}
	if err := write(out, spec); err != nil {
		return err
	}
	ovn, err := image.OVN(image.OVNOptions{BinDir: binDir, Tags: []string{image.OVNRepo + ":" + version.Version}})
	if err != nil {
		return err
	}
	return write(ovnOut, ovn)
}

// write writes the image of spec to the tarball out and prints its name and digest.
func write(out string, spec image.Spec) error {
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
	fmt.Printf("%s %s@%s\n", out, spec.Refs[0], digest)
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
