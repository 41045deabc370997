package lab_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/lab/cni"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// Environment variables that turn the test binary into a process running `lab up`, so that
// the test can SIGKILL it like a user killing `octopus lab up`.
const (
	envChildDir   = "OCTOPUS_LAB_TEST_CHILD_DIR"
	envChildBin   = "OCTOPUS_LAB_TEST_CHILD_BINDIR"
	envChildAgent = "OCTOPUS_LAB_TEST_CHILD_AGENT"
	// envCNI overrides the CNI of the labs of startLab.
	envCNI = "OCTOPUS_LAB_TEST_CNI"
	// envChildContainerd names the containerd bin directory of the child's nodes.
	envChildContainerd = "OCTOPUS_LAB_TEST_CHILD_CONTAINERD"
	// envChildClusters is the number of the child lab's clusters (2 unless set).
	envChildClusters = "OCTOPUS_LAB_TEST_CHILD_CLUSTERS"
	// envChildFlannel names flannel's bin directory: the child's CNI is flannel when set.
	envChildFlannel = "OCTOPUS_LAB_TEST_CHILD_FLANNEL"
	// envChildProcesses=true runs the child's components as processes (ComponentProcesses)
	// even when the agent's directory holds the project's images' binaries.
	envChildProcesses = "OCTOPUS_LAB_TEST_CHILD_PROCESSES"
)

// childReport is what the child prints on one line once the lab is up.
type childReport struct {
	Network     labnet.Plan
	Kubeconfigs map[string]string
	// Nobody holds, per cluster, a client certificate of its CA for a user without rights:
	// the CA's key lives only in the child's memory.
	Nobody map[string]clientCert
}

// clientCert is a PEM client certificate and its key.
type clientCert struct{ Cert, Key []byte }

func TestMain(m *testing.M) {
	// The controller-runtime clients of the tests and the demo log through this; the tests
	// report through t instead.
	ctrllog.SetLogger(logr.Discard())
	if dir := os.Getenv(envChildDir); dir != "" {
		os.Exit(runChild(dir))
	}
	code := m.Run()
	cleanupBuiltCommands()
	os.Exit(code)
}

// runChild runs a lab with hub + 2 clusters x 2 nodes (envChildClusters clusters when set,
// flannel as the CNI when envChildFlannel is), reports it on stdout and waits to be killed.
func runChild(dir string) int {
	opts := lab.Options{
		Clusters: 2, NodesPerCluster: 2, Dir: dir,
		BinDir: os.Getenv(envChildBin), AgentBinary: os.Getenv(envChildAgent),
		ContainerdBinDir: os.Getenv(envChildContainerd),
	}
	if n, err := strconv.Atoi(os.Getenv(envChildClusters)); err == nil {
		opts.Clusters = n
	}
	if dir := os.Getenv(envChildFlannel); dir != "" {
		opts.CNI, opts.FlannelBinDir = cni.Flannel, dir
	}
	opts.ComponentProcesses = os.Getenv(envChildProcesses) == "true"
	l, err := lab.Up(context.Background(), opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lab up:", err)
		return 1
	}
	r := childReport{Network: l.Network, Kubeconfigs: map[string]string{}, Nobody: map[string]clientCert{}}
	for _, cp := range l.Env.Clusters {
		r.Kubeconfigs[cp.Name] = cp.Kubeconfig
		cert, key, err := cp.IssueClient("octopus-lab-test-nobody", nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		r.Nobody[cp.Name] = clientCert{Cert: cert, Key: key}
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	select {} // until SIGKILL
}

// startLabChild runs the test binary as a child that brings up a lab in dir (runChild, with
// env added to the environment) and returns its report once the lab is up, and a function
// that SIGKILLs it like a user killing `octopus lab up`. Cleanup kills it if the test has not
// and runs lab.Down.
func startLabChild(t *testing.T, dir string, env ...string) (childReport, func()) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	stderrPath := filepath.Join(t.TempDir(), "child.log")
	stderr, err := os.Create(stderrPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stderr.Close() })
	child := exec.Command(self, "-test.run=^$")
	child.Env = append(append(os.Environ(), envChildDir+"="+dir), env...)
	child.Stderr = stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	kill := func() {
		if killed {
			return
		}
		killed = true
		if err := child.Process.Signal(syscall.SIGKILL); err != nil {
			t.Errorf("killing lab up: %v", err)
		}
		_ = child.Wait()
	}
	t.Cleanup(func() {
		kill()
		if err := lab.Down(dir); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	lines := make(chan []byte, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		if sc.Scan() {
			lines <- bytes.Clone(sc.Bytes())
		}
		close(lines)
	}()
	var report childReport
	select {
	case line, ok := <-lines:
		if !ok {
			_ = child.Wait()
			killed = true
			t.Fatalf("lab up exited without coming up; its log:\n%s", readFile(stderrPath))
		}
		if err := json.Unmarshal(line, &report); err != nil {
			t.Fatalf("child report %q: %v", line, err)
		}
	case <-time.After(8 * time.Minute):
		t.Fatalf("lab up did not come up in 8 minutes; its log:\n%s", readFile(stderrPath))
	}
	t.Logf("lab up took %.1fs", time.Since(begin).Seconds())
	return report, kill
}

// checkNodes waits until every node of the cluster is Ready, has a pod CIDR from node-ipam and
// its LAN address as InternalIP, and the gateway label on the gateway only.
func checkNodes(ctx context.Context, t *testing.T, cs kubernetes.Interface, c labnet.ClusterNet) {
	t.Helper()
	var last string
	err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, want := range c.Nodes {
			n, err := cs.CoreV1().Nodes().Get(ctx, want.Name, metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false, nil //nolint:nilerr // keep polling; the last error is reported on timeout
			}
			if problem := nodeProblem(n, want); problem != "" {
				last = problem
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("cluster %s: nodes not ready: %v (last: %s)", c.Name, err, last)
	}
}

func nodeProblem(n *corev1.Node, want labnet.NodeNet) string {
	ready := false
	for _, c := range n.Status.Conditions {
		ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
	}
	internal := ""
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			internal = a.Address
		}
	}
	switch {
	case !ready:
		return n.Name + " is not Ready"
	case n.Spec.PodCIDR == "":
		return n.Name + " has no pod CIDR"
	case internal != want.LANAddr.Addr().String():
		return fmt.Sprintf("%s: InternalIP %q, want %s", n.Name, internal, want.LANAddr.Addr())
	case (n.Labels[labnet.GatewayLabel] == "true") != want.Gateway:
		return fmt.Sprintf("%s: gateway label %q, want gateway=%v", n.Name, n.Labels[labnet.GatewayLabel], want.Gateway)
	}
	if _, err := netip.ParsePrefix(n.Spec.PodCIDR); err != nil {
		return fmt.Sprintf("%s: pod CIDR %q: %v", n.Name, n.Spec.PodCIDR, err)
	}
	return ""
}

// createService creates a ClusterIP Service without endpoints and returns its ClusterIP.
func createService(ctx context.Context, t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "lab-test"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "lab-test"},
			Ports:    []corev1.ServicePort{{Port: 8080, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc.Spec.ClusterIP
}

// waitNFT waits until kube-proxy's nftables table in the node's namespace mentions ip.
func waitNFT(ctx context.Context, t *testing.T, n labnet.NodeNet, ip string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		out, err := exec.CommandContext(ctx, "ip", "netns", "exec", n.Netns, "nft", "list", "table", "ip", "kube-proxy").CombinedOutput()
		last = string(out)
		return err == nil && strings.Contains(last, ip), nil
	})
	if err != nil {
		t.Fatalf("node %s: kube-proxy's nftables table never mentioned ClusterIP %s: %v; last `nft list table ip kube-proxy`:\n%s", n.Name, ip, err, last)
	}
}

func clientset(t testing.TB, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// processesReferringTo lists live processes with an argument inside dir.
func processesReferringTo(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(dir)) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
				continue // a zombie holds nothing
			}
		}
		pids = append(pids, pid)
	}
	return pids
}

func mustRoutes(t *testing.T) []netlink.Route {
	t.Helper()
	r, err := labnet.RootRoutes()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// startLab brings a lab up in a fresh directory with opts (Dir is set here, and
// ContainerdBinDir unless given), fails the test if that fails, and stops and removes it when
// the test ends. It returns the lab and its directory (logs/, pids/).
//
// OCTOPUS_LAB_TEST_CNI=flannel in the environment gives the labs flannel instead of the
// bridge CNI: how the whole suite is run with each CNI the lab supports.
func startLab(ctx context.Context, t testing.TB, opts lab.Options) (*lab.Lab, string) {
	t.Helper()
	l, dir, _ := startStoppableLab(ctx, t, opts)
	return l, dir
}

// startStoppableLab is startLab that also returns a function stopping and removing the lab
// before the test ends (runOnSharedLab's rebuild after a failed check); calling it again, or
// the test's end after it, does nothing more.
func startStoppableLab(ctx context.Context, t testing.TB, opts lab.Options) (*lab.Lab, string, func()) {
	t.Helper()
	opts.Dir = filepath.Join(t.TempDir(), "lab")
	opts = withTestNodes(ctx, t, opts)
	begin := time.Now()
	l, err := lab.Up(ctx, opts)
	if err != nil {
		// Up stopped what it started; the nodes' processes' logs are still in the directory.
		logLabState(t, opts.Dir)
		logNodeCrashes(t, opts.Dir)
		t.Fatalf("lab up: %v", err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		if t.Failed() {
			logLabState(t, opts.Dir)
		}
		_ = l.Stop()
		if err := lab.Down(opts.Dir); err != nil {
			t.Errorf("lab down: %v", err)
		}
	}
	t.Cleanup(stop)
	t.Logf("lab up took %.1fs", time.Since(begin).Seconds())
	return l, opts.Dir, stop
}

// failureLogLimit bounds each file logLabState logs: the end of a process log, where a failure
// shows.
const failureLogLimit = 4 << 10

// logLabState logs, for a failed test, what `octopus gather` would take of the lab's nodes
// (each namespace's routes and the end of each Octopus process's log) before the lab and its
// directory are gone, so that a failure in CI can be read after the fact.
func logLabState(t testing.TB, dir string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	add := func(name string, data []byte) {
		if !strings.HasPrefix(name, "processes/") && !strings.HasSuffix(name, "/routes.txt") {
			return
		}
		if strings.HasSuffix(name, "/routes.txt") {
			data = withoutKernelRoutes(data)
		}
		if len(data) > failureLogLimit {
			data = data[len(data)-failureLogLimit:]
		}
		t.Logf("lab state, %s:\n%s", name, data)
	}
	skip := func(name string, err error) { t.Logf("lab state, %s: %v", name, err) }
	if err := (lab.NodeState{Dir: dir}).CollectNodes(ctx, add, skip); err != nil {
		t.Logf("lab state: %v", err)
	}
}

// logNodeCrashes logs, from the lab's logs of containerd and the kubelets, the first panic of
// each with what follows it: a node runtime that crashed takes a node's pods with it.
func logNodeCrashes(t testing.TB, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*-node*-*.log"))
	for _, f := range logs {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if i := bytes.Index(data, []byte("panic:")); i >= 0 {
			t.Logf("%s crashed:\n%s", filepath.Base(f), data[i:min(len(data), i+failureLogLimit)])
		}
	}
}

// withoutKernelRoutes drops from an `ip route show table all` listing the routes every
// namespace has (local, broadcast, multicast and link-local ones), which would bury the
// routes a failure is about.
func withoutKernelRoutes(routes []byte) []byte {
	var out []byte
	for _, l := range bytes.SplitAfter(routes, []byte("\n")) {
		f := bytes.Fields(l)
		if len(f) > 0 && (bytes.Equal(f[0], []byte("local")) || bytes.Equal(f[0], []byte("broadcast")) ||
			bytes.Equal(f[0], []byte("multicast")) || bytes.HasPrefix(f[0], []byte("fe80:"))) {
			continue
		}
		out = append(out, l...)
	}
	return out
}

// withTestNodes returns opts with the directory of containerd (testContainerd) unless opts
// name one, and the CNI of OCTOPUS_LAB_TEST_CNI unless opts choose one.
func withTestNodes(ctx context.Context, t testing.TB, opts lab.Options) lab.Options {
	t.Helper()
	if opts.ContainerdBinDir == "" {
		opts.ContainerdBinDir = testContainerd(ctx, t)
	}
	if name := os.Getenv(envCNI); name != "" && opts.CNI == "" {
		opts.CNI = name
		if name == cni.Flannel {
			var err error
			if opts.FlannelBinDir, err = controlplane.EnsureFlannel(ctx, testenv.RepoRoot(t), os.Stderr); err != nil {
				t.Fatalf("%s=%s: building flannel: %v", envCNI, name, err)
			}
		}
	}
	return opts
}

// testContainerd returns the directory of containerd, its shim and ctr for the tests' labs,
// building them and the kubelet if missing.
func testContainerd(ctx context.Context, t testing.TB) string {
	t.Helper()
	_, dir, err := controlplane.EnsureNodeRuntime(ctx, testenv.RepoRoot(t), os.Stderr)
	if err != nil {
		t.Fatalf("building the kubelet and containerd: %v", err)
	}
	return dir
}

// podNetns names the network namespace of a running pod of the lab labID (lab.PodNetns), for
// commands run inside it, whatever the node runtime.
func podNetns(t testing.TB, labID string, pod *corev1.Pod) string {
	t.Helper()
	name, err := lab.PodNetns(labID, pod)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// abandonedLabNetwork creates the network of a lab with nothing running in it, as a run killed
// with all its processes leaves it, and returns its ID.
func abandonedLabNetwork(t *testing.T) string {
	t.Helper()
	id := labnet.LabID(t.TempDir())
	plan, err := labnet.NewPlan(id, []labnet.ClusterSpec{{
		Name: lab.ClusterName(1), Index: 1, ServiceCIDR: netip.MustParsePrefix("10.96.0.0/16"), Nodes: 2,
	}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = labnet.Teardown(id) })
	if err := labnet.Apply(plan); err != nil {
		t.Fatal(err)
	}
	return id
}
