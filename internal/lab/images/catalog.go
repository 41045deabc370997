package images

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Names of the images the lab provides, as the manifests that use them spell them.
const (
	// PauseImage is containerd's default sandbox image (its CRI config's pinned "sandbox").
	PauseImage = "registry.k8s.io/pause:3.10.2"
	// BusyboxImage and BusyboxLatest are Docker Hub's busybox.
	BusyboxImage  = "docker.io/library/busybox:1.37"
	BusyboxLatest = "docker.io/library/busybox:latest"
	// SocatImage is Docker Hub's alpine/socat: ENTRYPOINT socat.
	SocatImage = "docker.io/alpine/socat:latest"
	// ToolboxImage is a nicolaka/netshoot-like toolbox with the tools every networking
	// tutorial runs (ToolboxTools).
	ToolboxImage = "docker.io/nicolaka/netshoot:latest"
	// ToolboxPinned is the same toolbox under the tag `octopus verify` pins for its client
	// pod (verify.DefaultClientImage in internal/verify/objects.go).
	ToolboxPinned = "docker.io/nicolaka/netshoot:v0.13"
	// CoreDNSImage is the cluster DNS image kubeadm deploys, tagged with the release
	// hack/coredns.sh builds (controlplane.CoreDNSVersion).
	CoreDNSImage = "registry.k8s.io/coredns/coredns:v1.15.0"
	// OctopusRepo is the repository of the project's own image: every binary of `make build`
	// and the userland tools its components drive.
	OctopusRepo = "ghcr.io/octopus-mcs/octopus"
	// EchoImage is the echo server (cmd/octopus-echo) the demo and tests deploy.
	EchoImage = "ghcr.io/octopus-mcs/echo:latest"
	// OctopusDNSImage is octopus-dns (cmd/octopus-dns), which join deploys.
	OctopusDNSImage = "ghcr.io/octopus-mcs/octopus-dns:latest"
)

// pathEnv is the PATH of every image, Debian's default: tools in /usr/bin come before the busybox
// applets of the same name in /bin.
const pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ToolboxTools are the programs of ToolboxImage besides busybox's applets, with the Debian
// package of each (hack/install-deps.sh installs them): the image is made of the host's files.
var ToolboxTools = map[string]string{
	"nc": "netcat-openbsd", "curl": "curl", "wget": "wget", "dig": "dnsutils", "nslookup": "dnsutils",
	"ping": "iputils-ping",
}

// OctopusBinaries are the commands of `make build` in the project's images
// (CatalogOptions.OctopusBinDir).
var OctopusBinaries = []string{"octopus", "octopus-agent", "octopus-dns", "octopus-echo"}

// CatalogOptions say where the lab's own programs are.
type CatalogOptions struct {
	// CoreDNSBinary is the CoreDNS build of hack/coredns.sh. Required.
	CoreDNSBinary string
	// OctopusBinDir holds the binaries of `make build` (octopus, octopus-agent, octopus-dns,
	// octopus-echo). Optional: without it the catalog has no Octopus images.
	OctopusBinDir string
	// Version tags the project's images besides latest. Optional.
	Version string
}

// Catalog returns the specs of every image the lab's nodes get: the pause image, busybox,
// alpine/socat, the toolbox, CoreDNS and, with OctopusBinDir, the project's image with the
// echo and octopus-dns images. All are made of host files, so the host needs busybox, socat,
// the toolbox tools and nft (hack/install-deps.sh).
func Catalog(o CatalogOptions) ([]Spec, error) {
	busybox, err := hostBusybox()
	if err != nil {
		return nil, err
	}
	withBusybox := func(extra ...[]File) []File {
		files := append([]File(nil), busybox...)
		for _, e := range extra {
			files = append(files, e...)
		}
		return files
	}
	socat, err := hostExecutable("socat", "socat")
	if err != nil {
		return nil, err
	}
	var tools []File
	for _, tool := range slices.Sorted(maps.Keys(ToolboxTools)) {
		f, err := hostExecutable(tool, ToolboxTools[tool])
		if err != nil {
			return nil, err
		}
		tools = append(tools, f...)
	}
	coredns, err := Executable("/coredns", o.CoreDNSBinary)
	if err != nil {
		return nil, fmt.Errorf("the CoreDNS image: %w", err)
	}
	env := []string{pathEnv}
	specs := []Spec{
		// The pause container only holds the pod's namespaces; containerd stops it with
		// SIGKILL, so a sleep does what upstream's pause program does.
		{Refs: []string{PauseImage}, Files: busybox, Entrypoint: []string{"/bin/sleep", "infinity"}, Env: env},
		{Refs: []string{BusyboxImage, BusyboxLatest}, Files: busybox, Cmd: []string{"sh"}, Env: env},
		{Refs: []string{SocatImage}, Files: withBusybox(socat), Entrypoint: []string{"socat"}, Env: env},
		// netshoot's CMD is zsh, which exits at once without a terminal: a toolbox pod without
		// a command sleeps instead and is entered with kubectl exec.
		{Refs: []string{ToolboxImage, ToolboxPinned}, Files: withBusybox(tools), Cmd: []string{"sleep", "infinity"}, Env: env},
		{Refs: []string{CoreDNSImage}, Files: coredns, Entrypoint: []string{"/coredns"}},
	}
	if o.OctopusBinDir == "" {
		return specs, nil
	}
	var octopus []File
	for _, b := range OctopusBinaries {
		f, err := Executable("/usr/local/bin/"+b, filepath.Join(o.OctopusBinDir, b))
		if err != nil {
			return nil, fmt.Errorf("the Octopus image (build the binaries with make build): %w", err)
		}
		octopus = append(octopus, f...)
	}
	// knftables drives the nft program.
	nft, err := hostExecutable("nft", "nftables")
	if err != nil {
		return nil, err
	}
	// Tagged latest and with the version, which is what join deploys (octopus-dns:<version>).
	refs := func(latest string) []string {
		r := []string{latest}
		if o.Version != "" {
			r = append(r, strings.TrimSuffix(latest, ":latest")+":"+o.Version)
		}
		return r
	}
	octopusFiles := withBusybox(octopus, nft)
	return append(specs,
		Spec{Refs: refs(OctopusRepo + ":latest"), Files: octopusFiles, Env: env},
		Spec{Refs: refs(EchoImage), Files: octopusFiles, Entrypoint: []string{"octopus-echo"}, Env: env},
		Spec{Refs: refs(OctopusDNSImage), Files: octopusFiles, Entrypoint: []string{"octopus-dns"}, Env: env},
	), nil
}

// hostBusybox is busybox with its applets, from the host's busybox package.
func hostBusybox() ([]File, error) {
	p, err := exec.LookPath("busybox")
	if err != nil {
		return nil, fmt.Errorf("the lab's images are made of host files: install Debian package busybox (hack/install-deps.sh): %w", err)
	}
	return Busybox(p)
}

// hostExecutable is the host program name (from Debian package pkg) at its own path, with its
// libraries.
func hostExecutable(name, pkg string) ([]File, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("the lab's images are made of host files: install Debian package %s (hack/install-deps.sh): %w", pkg, err)
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
