package image

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestMakeDemoBuildsOnlyTheDemo checks that `make demo` installs and builds what `octopus lab
// up --demo` runs and nothing else: on a fresh machine the browser, the OVN packages, the
// benchmark tools and flannel made most of its 23 minutes. It also keeps the demo's commands
// in step with the project's image (OctopusBinaries), which the lab builds from ./bin.
func TestMakeDemoBuildsOnlyTheDemo(t *testing.T) {
	root := filepath.Join("..", "..")
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^demo:(.*)\n((?:\t.*\n)+)`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("no demo target in the Makefile")
	}
	prereqs, recipe := string(m[1]), string(m[2])
	// The deps, k8s-binaries and build targets install and build for every test (the browser,
	// OVN, flannel, octopus-ovn).
	for _, bad := range []string{"deps", "k8s-binaries", "build"} {
		if slices.Contains(strings.Fields(prereqs), bad) {
			t.Errorf("make demo depends on %s, which installs or builds more than the demo runs", bad)
		}
	}
	for _, bad := range []string{"flannel", "./cmd/...", "$(MAKE)"} {
		if strings.Contains(recipe, bad) {
			t.Errorf("make demo runs %s, more than the demo needs:\n%s", bad, recipe)
		}
	}
	if !strings.Contains(recipe, "hack/install-deps.sh demo") {
		t.Errorf("make demo does not install the demo's packages only (hack/install-deps.sh demo):\n%s", recipe)
	}
	cmds := regexp.MustCompile(`(?m)^DEMO_CMDS := (.*)$`).FindSubmatch(makefile)
	if cmds == nil || !slices.Equal(strings.Fields(string(cmds[1])), OctopusBinaries) {
		t.Errorf("DEMO_CMDS = %q, want the project image's commands %v", cmds, OctopusBinaries)
	}

	// The demo's packages, as the script sees them.
	out, err := exec.Command("bash", "-c", `cd ../.. && source <(sed -n '/^DEMO_PACKAGES=(/,/)$/p' hack/install-deps.sh) && echo "${DEMO_PACKAGES[@]}"`).Output()
	if err != nil {
		t.Skipf("reading DEMO_PACKAGES with bash: %v", err)
	}
	pkgs := strings.Fields(string(out))
	for _, need := range []string{"nftables", "busybox", "socat", "runc", "containernetworking-plugins", "dnsutils", "netcat-openbsd", "util-linux"} {
		if !slices.Contains(pkgs, need) {
			t.Errorf("the demo's packages %v lack %s, which the lab needs", pkgs, need)
		}
	}
	for _, extra := range []string{"chromium", "chromium-driver", "dnsperf", "iperf3", "ovn-central", "ovn-host", "openvswitch-switch", "wireguard-go", "wireguard-tools"} {
		if slices.Contains(pkgs, extra) {
			t.Errorf("the demo's packages %v include %s, which the demo does not use", pkgs, extra)
		}
	}
}
