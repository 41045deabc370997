package images

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/octopus-mcs/octopus/internal/image"
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
	// OctopusRepo is the repository of the project's own image (image.Octopus).
	OctopusRepo = image.OctopusRepo
	// OVNRepo is the repository of the secondary network's image (image.OVN): the member
	// chart's OVN pods with secondaryNetwork.enabled.
	OVNRepo = image.OVNRepo
	// EchoImage is the echo server (cmd/octopus-echo) the demo and tests deploy.
	EchoImage = "ghcr.io/octopus-mcs/echo:latest"
	// OctopusDNSImage is octopus-dns (cmd/octopus-dns), which join deploys.
	OctopusDNSImage = "ghcr.io/octopus-mcs/octopus-dns:latest"
)

// pathEnv is the PATH of every image.
const pathEnv = image.PathEnv

// ToolboxTools are the programs of ToolboxImage besides busybox's applets, with the Debian
// package of each (hack/install-deps.sh installs them): the image is made of the host's files.
var ToolboxTools = map[string]string{
	"nc": "netcat-openbsd", "curl": "curl", "wget": "wget", "dig": "dnsutils", "nslookup": "dnsutils",
	"ping": "iputils-ping",
}

// OctopusBinaries are the commands of `make build` in the project's images
// (CatalogOptions.OctopusBinDir).
var OctopusBinaries = image.OctopusBinaries

// CatalogOptions say where the lab's own programs are.
type CatalogOptions struct {
	// CoreDNSBinary is the CoreDNS build of hack/coredns.sh. Required.
	CoreDNSBinary string
	// OctopusBinDir holds the binaries of `make build` (octopus, octopus-agent, octopus-dns,
	// octopus-echo). Optional: without it the catalog has no Octopus images. Where it also
	// holds octopus-ovn, the catalog has the secondary network's image (image.OVN).
	OctopusBinDir string
	// Version tags the project's images besides latest. Optional.
	Version string
}

// Catalog returns the specs of every image the lab's nodes get: the pause image, busybox,
// alpine/socat, the toolbox, CoreDNS and, with OctopusBinDir, the project's image with the
// echo and octopus-dns images, and the OVN image where octopus-ovn is there too. All are made of host files, so the host needs busybox, socat,
// the toolbox tools and nft (hack/install-deps.sh).
func Catalog(o CatalogOptions) ([]Spec, error) {
	busybox, err := image.HostBusybox()
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
	socat, err := image.HostExecutable("socat", "socat")
	if err != nil {
		return nil, err
	}
	var tools []File
	for _, tool := range slices.Sorted(maps.Keys(ToolboxTools)) {
		f, err := image.HostExecutable(tool, ToolboxTools[tool])
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
	// Tagged latest and with the version, which is what join deploys (octopus-dns:<version>).
	refs := func(latest string) []string {
		r := []string{latest}
		if o.Version != "" {
			r = append(r, strings.TrimSuffix(latest, ":latest")+":"+o.Version)
		}
		return r
	}
	octopus, err := image.Octopus(image.OctopusOptions{BinDir: o.OctopusBinDir, Binaries: OctopusBinaries, Tags: refs(OctopusRepo + ":latest")})
	if err != nil {
		return nil, err
	}
	files := octopus.Files
	specs = append(specs, octopus,
		Spec{Refs: refs(EchoImage), Files: files, Entrypoint: []string{"octopus-echo"}, Env: env},
		Spec{Refs: refs(OctopusDNSImage), Files: files, Entrypoint: []string{"octopus-dns"}, Env: env},
	)
	if !HasOVNBinaries(o.OctopusBinDir) {
		return specs, nil
	}
	ovn, err := image.OVN(image.OVNOptions{BinDir: o.OctopusBinDir, Tags: refs(OVNRepo + ":latest")})
	if err != nil {
		return nil, err
	}
	return append(specs, ovn), nil
}

// HasOVNBinaries reports whether dir holds the binaries of the OVN image (image.OVNBinaries).
func HasOVNBinaries(dir string) bool {
	for _, b := range image.OVNBinaries {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return false
		}
	}
	return true
}
