package nodeagent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// EchoImage is Octopus's echo server (cmd/octopus-echo); the lab runs it from the
// octopus-echo binary found next to the octopus binary.
const EchoImage = "ghcr.io/octopus-mcs/echo"

// OctopusDNSImage is octopus-dns (cmd/octopus-dns), which join deploys
// (dnsconfig.Image); the lab runs it from Images.OctopusDNSBinary.
const OctopusDNSImage = "ghcr.io/octopus-mcs/octopus-dns"

// CoreDNSImage is the cluster DNS image kubeadm deploys; the lab runs it from the CoreDNS
// binary hack/coredns.sh builds (Images.CoreDNSBinary).
const CoreDNSImage = "registry.k8s.io/coredns/coredns"

// image is what the lab knows of a container image: the argv it would run (ENTRYPOINT and
// CMD, as in the image's config) and how to find binaries on the host.
type image struct {
	entrypoint []string
	cmd        []string
	// multiCall names a host binary that runs every program of the image as an applet
	// (busybox): argv[0]'s base name becomes its first argument.
	multiCall string
	// binaries maps program names of the image to host binaries, e.g. "/pause" → sleep.
	binaries map[string][]string
}

// wellKnownImages maps image repositories (see repository) to their entrypoints. Containers
// run as host processes, so an image stands for "these programs of the host".
var wellKnownImages = map[string]image{
	EchoImage:       {entrypoint: []string{"octopus-echo"}},
	OctopusDNSImage: {entrypoint: []string{"octopus-dns"}},
	// CoreDNS's image has ENTRYPOINT ["/coredns"].
	CoreDNSImage: {entrypoint: []string{"/coredns"}},
	// busybox's CMD is sh; every program runs as a busybox applet, so `sh -c` and `sleep`
	// behave as in the image and not as the host's bash and coreutils.
	"busybox": {cmd: []string{"sh"}, multiCall: "busybox"},
	// alpine/socat's ENTRYPOINT is socat; the pod's args are socat's.
	"alpine/socat": {entrypoint: []string{"socat"}},
	// nicolaka/netshoot's CMD is zsh, which exits at once without a terminal, so a toolbox
	// pod without a command sleeps instead and is entered with kubectl exec. Its tools
	// (toolboxTools and bash) are the host's.
	"nicolaka/netshoot": {cmd: []string{"sleep", "infinity"}},
	// The pause container only holds the pod's namespaces.
	"registry.k8s.io/pause": {entrypoint: []string{"/pause"}, binaries: map[string][]string{"/pause": {"sleep", "infinity"}}},
}

// toolboxTools are the programs every MCS or networking tutorial runs in a toolbox pod
// (nicolaka/netshoot ships them all); the lab's toolbox pods must have each of them.
var toolboxTools = []string{"nc", "nslookup", "dig", "curl", "wget", "ping"}

// debianPackages names the Debian package that provides a binary, for the error message of a
// missing one (hack/install-deps.sh installs them).
var debianPackages = map[string]string{
	"busybox": "busybox", "socat": "socat", "bash": "bash", "sleep": "coreutils",
	"curl": "curl", "wget": "wget", "dig": "dnsutils", "nslookup": "dnsutils", "iperf3": "iperf3",
	"nc": "netcat-openbsd", "ping": "iputils-ping",
}

// errBinaryNotFound marks a container whose program is not on this machine.
var errBinaryNotFound = errors.New("binary not found")

// repository reduces an image reference to the repository the table is keyed by: no tag or
// digest, and Docker Hub's implicit registry and library/ prefix removed.
func repository(ref string) string {
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		ref = ref[:i]
	}
	for _, p := range []string{"docker.io/", "index.docker.io/", "registry-1.docker.io/"} {
		ref = strings.TrimPrefix(ref, p)
	}
	return strings.TrimPrefix(ref, "library/")
}

// Images resolves containers to host commands.
type Images struct {
	// EchoBinary is the octopus-echo executable. Optional: without it echo containers fail
	// with errBinaryNotFound.
	EchoBinary string
	// CoreDNSBinary is the coredns executable (controlplane.CoreDNSPath). Optional: without
	// it CoreDNS containers fail with errBinaryNotFound.
	CoreDNSBinary string
	// OctopusDNSBinary is the octopus-dns executable (cmd/octopus-dns). Optional: without it
	// containers of OctopusDNSImage fail with errBinaryNotFound.
	OctopusDNSBinary string
	// lookPath finds a program on the host; exec.LookPath unless a test replaces it.
	lookPath func(string) (string, error)
}

// Argv returns the host command line for container c: the image's entrypoint and cmd,
// replaced by the container's command and args as a container runtime does (command replaces
// the entrypoint and drops the cmd; args replace the cmd), with argv[0] resolved to a host
// binary. It fails with errBinaryNotFound, in a message that names what to install, when the
// program is not on this machine, and when an unknown image has no command.
func (im Images) Argv(c corev1.Container) ([]string, error) {
	img, known := wellKnownImages[repository(c.Image)]
	argv := append(append([]string{}, img.entrypoint...), img.cmd...)
	switch {
	case len(c.Command) > 0:
		argv = append(append([]string{}, c.Command...), c.Args...)
	case len(c.Args) > 0:
		argv = append(append([]string{}, img.entrypoint...), c.Args...)
	}
	if len(argv) == 0 {
		if !known {
			return nil, fmt.Errorf("%w: image %q is not one the lab knows (%s) and the container has no command: give one, naming a program of this machine",
				errBinaryNotFound, c.Image, strings.Join(knownImages(), ", "))
		}
		return nil, fmt.Errorf("%w: image %q has neither entrypoint nor command", errBinaryNotFound, c.Image)
	}
	if repl, ok := img.binaries[argv[0]]; ok {
		argv = append(append([]string{}, repl...), argv[1:]...)
	}
	if img.multiCall != "" {
		argv = append([]string{img.multiCall, filepath.Base(argv[0])}, argv[1:]...)
	}
	path, err := im.resolve(argv[0])
	if err != nil {
		hint := "install it on this machine"
		if b, ok := im.built()[filepath.Base(argv[0])]; ok {
			hint = b.hint
		}
		if pkg, ok := debianPackages[filepath.Base(argv[0])]; ok {
			hint = fmt.Sprintf("install Debian package %s (hack/install-deps.sh)", pkg)
		}
		return nil, fmt.Errorf("%w: image %q runs %q, which is not on this machine (lab containers are host processes): %s",
			errBinaryNotFound, c.Image, argv[0], hint)
	}
	argv[0] = path
	return argv, nil
}

// builtProgram is a program the lab builds rather than installs: where it is and how to get it.
type builtProgram struct{ path, hint string }

// built lists the programs of Octopus's own images and CoreDNS's, by name.
func (im Images) built() map[string]builtProgram {
	return map[string]builtProgram{
		"coredns":      {im.CoreDNSBinary, "build it with hack/coredns.sh (make k8s-binaries)"},
		"octopus-echo": {im.EchoBinary, "build it with make build"},
		"octopus-dns":  {im.OctopusDNSBinary, "build it with make build"},
	}
}

// resolve finds a program: a built one at its configured path, an absolute path if it
// exists, else its base name in PATH.
func (im Images) resolve(name string) (string, error) {
	if b, ok := im.built()[filepath.Base(name)]; ok {
		if b.path == "" {
			return "", errBinaryNotFound
		}
		if _, err := os.Stat(b.path); err != nil {
			return "", err
		}
		return b.path, nil
	}
	if filepath.IsAbs(name) {
		if fi, err := os.Stat(name); err == nil && !fi.IsDir() {
			return name, nil
		}
	}
	look := im.lookPath
	if look == nil {
		look = exec.LookPath
	}
	return look(filepath.Base(name))
}

func knownImages() []string {
	names := make([]string, 0, len(wellKnownImages))
	for n := range wellKnownImages {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
