package image

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// OctopusRepo is the repository of the project's image: every binary of `make build` and the
// userland tools its components drive. The charts (charts/) run every component from it.
const OctopusRepo = "ghcr.io/octopus-mcs/octopus"

// PathEnv is the PATH of every image, Debian's default: tools in /usr/bin come before the
// busybox applets of the same name in /bin.
const PathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// OctopusBinaries are the commands of `make build` in the lab's Octopus image: DaemonBinaries
// and the CLI.
var OctopusBinaries = append([]string{"octopus"}, DaemonBinaries...)

// DaemonBinaries are the commands of the image `make image` writes: the daemons the charts run
// (octopus-agent, octopus-dns, octopus-operator) and the echo server of `octopus verify`. The
// operator links the Helm SDK to install the member chart; the CLI, which links
// the lab and the Helm SDK, would more than double the image.
var DaemonBinaries = []string{"octopus-agent", "octopus-dns", "octopus-echo", "octopus-operator"}

// OctopusOptions say which binaries go into the project's image and how it is tagged.
type OctopusOptions struct {
	// BinDir holds the binaries. Required.
	BinDir string
	// Binaries are the commands to put in /usr/local/bin. Optional: DaemonBinaries.
	Binaries []string
	// Tags name the image, e.g. OctopusRepo+":v0.1.0". At least one is required.
	Tags []string
}

// Octopus returns the spec of the project's image: o.Binaries in /usr/local/bin, the
// nft program knftables drives (the gateway's MSS clamp, internal/datapath/tunnel/kernel/nft.go,
// and globalnet's NAT, internal/datapath/nat, write nftables through it), and busybox for a shell in the pod; each with its
// shared libraries, from this machine's Debian packages (hack/install-deps.sh). The image has
// no entrypoint: the charts name the program of each container.
func Octopus(o OctopusOptions) (Spec, error) {
	if o.BinDir == "" || len(o.Tags) == 0 {
		return Spec{}, fmt.Errorf("the Octopus image needs its binaries' directory and a tag")
	}
	files, err := HostBusybox()
	if err != nil {
		return Spec{}, err
	}
	bins := o.Binaries
	if len(bins) == 0 {
		bins = DaemonBinaries
	}
	for _, b := range bins {
		f, err := Executable("/usr/local/bin/"+b, filepath.Join(o.BinDir, b))
		if err != nil {
			return Spec{}, fmt.Errorf("the Octopus image (build the binaries with make build): %w", err)
		}
		files = append(files, f...)
	}
	nft, err := HostExecutable("nft", "nftables")
	if err != nil {
		return Spec{}, err
	}
	files = append(files, nft...)
	return Spec{Refs: o.Tags, Files: files, Env: []string{PathEnv}}, nil
}

// HostBusybox is busybox with its applets, from the host's busybox package.
func HostBusybox() ([]File, error) {
	p, err := exec.LookPath("busybox")
	if err != nil {
		return nil, fmt.Errorf("images are made of host files: install Debian package busybox (hack/install-deps.sh): %w", err)
	}
	return Busybox(p)
}

// HostExecutable is the host program name (from Debian package pkg) at its own path, with its
// libraries.
func HostExecutable(name, pkg string) ([]File, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("images are made of host files: install Debian package %s (hack/install-deps.sh): %w", pkg, err)
	}
	// The image has the program where the host's PATH found it, under its own name even
	// when that is a link into /etc/alternatives.
	abs, err := filepath.Abs(p)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(abs); err != nil {
		return nil, err
	}
	return Executable(abs, abs)
}
