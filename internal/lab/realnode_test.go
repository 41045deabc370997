package lab_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/lab/images"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/lab/realnode"
	"github.com/octopus-mcs/octopus/internal/procfs"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestRealNodes brings up, in a child process as a user runs `octopus lab up`, a lab whose
// cluster has two real nodes (kubelet, containerd, runc, flannel as the CNI) and checks on it: every
// Node Ready with a pod CIDR and an InternalIP; kube-proxy putting a new ClusterIP Service into
// its nftables table in every node namespace; no route outside the lab's ranges in the root
// namespace; and what a real kubelet gives: a privileged hostNetwork DaemonSet on every node,
// a memory-limited pod OOM-killed and restarted, kubectl exec, logs and port-forward, pod →
// pod across nodes, an image pulled (busybox:latest) from the lab's registry, and an NRI
// plugin that sees a sandbox created and changes a container; checkPods's workloads, probes,
// exec and logs, and flannel's own checks run on it first. Then it SIGKILLs `lab up` and
// checks that `lab down`, run twice, leaves no process (a pod's forked children included),
// mount, cgroup, namespace or file behind.
func TestRealNodes(t *testing.T) {
	testenv.LabNetwork(t)
	binDir := testenv.BinDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute)
	defer cancel()
	_, containerdDir, err := controlplane.EnsureNodeRuntime(ctx, testenv.RepoRoot(t), os.Stderr)
	if err != nil {
		t.Fatalf("building the kubelet and containerd: %v", err)
	}
	flannel, err := controlplane.EnsureFlannel(ctx, testenv.RepoRoot(t), os.Stderr)
	if err != nil {
		t.Fatalf("building flannel: %v", err)
	}
	// With every binary of the project's images beside the agent, the nodes get the echo
	// image checkPods's servers run; the components stay processes.
	agent := buildCommands(t, "octopus-agent", "octopus-echo")["octopus-agent"]
	dir := filepath.Join(t.TempDir(), "lab")
	routesBefore := mustRoutes(t)
	before := hostSnapshot(t)

	report, kill := startLabChild(t, dir, envChildBin+"="+binDir, envChildAgent+"="+agent, envChildClusters+"=1",
		envChildContainerd+"="+containerdDir, envChildFlannel+"="+flannel, envChildProcesses+"=true")
	c := report.Network.Clusters[0]
	kubeconfig := report.Kubeconfigs[c.Name]
	cs := clientset(t, kubeconfig)
	checkNodes(ctx, t, cs, c)
	svcIP := createService(ctx, t, cs)
	for _, n := range c.Nodes {
		waitNFT(ctx, t, n, svcIP)
	}
	for _, r := range labnet.NewRoutesOutsideLab(routesBefore, mustRoutes(t)) {
		t.Errorf("the root namespace gained a route outside the lab's ranges: %s", r)
	}
	kubectl := filepath.Join(binDir, "kubectl")
	node1, node2 := c.Nodes[0].Name, c.Nodes[1].Name

	t.Run("pods", func(t *testing.T) { checkPods(ctx, t, binDir, dir, report.Network, kubeconfig, report.Nobody[c.Name]) })

	t.Run("privileged hostNetwork DaemonSet on every node", func(t *testing.T) {
		ds := &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "host"},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "host"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "host"}},
					Spec: corev1.PodSpec{
						HostNetwork: true,
						Containers: []corev1.Container{{
							Name: "sh", Image: images.BusyboxImage,
							// The node's own interfaces: eth0 on the cluster LAN.
							Command:         []string{"sh", "-c", "ip -o addr show eth0; sleep 3600"},
							SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
						}},
					},
				},
			},
		}
		if _, err := cs.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			got, err := cs.AppsV1().DaemonSets("default").Get(ctx, "host", metav1.GetOptions{})
			return err == nil && got.Status.NumberReady == int32(len(c.Nodes)), nil
		})
		if err != nil {
			t.Fatalf("DaemonSet not ready on all %d nodes: %v", len(c.Nodes), err)
		}
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=host"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			var want string
			for _, n := range c.Nodes {
				if n.Name == p.Spec.NodeName {
					want = n.LANAddr.Addr().String()
				}
			}
			if p.Status.PodIP != want {
				t.Errorf("hostNetwork pod %s on %s has IP %s, want the node's %s", p.Name, p.Spec.NodeName, p.Status.PodIP, want)
			}
			if logs := podLogs(ctx, t, cs, p.Name, false); !strings.Contains(logs, want+"/") {
				t.Errorf("pod %s does not see its node's address %s on eth0:\n%s", p.Name, want, logs)
			}
		}
	})

	t.Run("exec, logs and port-forward; pod to pod across nodes", func(t *testing.T) {
		create(ctx, t, cs, busyboxPod("server", node1,
			"echo serving; mkdir /www; echo hello-from-node1 > /www/index.html; httpd -f -p 8080 -h /www"))
		// "busybox" is busybox:latest, which the kubelet pulls always: from the lab's registry.
		client := busyboxPod("puller", node2, "sleep 3600")
		client.Spec.Containers[0].Image = "busybox"
		create(ctx, t, cs, client)
		server := waitPodReady(ctx, t, cs, "server")
		if got := waitPodReady(ctx, t, cs, "puller"); got.Spec.Containers[0].ImagePullPolicy != corev1.PullAlways {
			t.Errorf("the client's image pull policy is %s; the test means to pull the image", got.Spec.Containers[0].ImagePullPolicy)
		}
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "exec", "puller", "--",
			"wget", "-qO-", "http://"+server.Status.PodIP+":8080/index.html").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "hello-from-node1" {
			t.Errorf("kubectl exec of wget from node2 to the pod on node1 (%s): %v: %s", server.Status.PodIP, err, out)
		}
		if logs := podLogs(ctx, t, cs, "server", false); !strings.Contains(logs, "serving") {
			t.Errorf("logs of server = %q, want serving", logs)
		}
		if got := portForwardGet(ctx, t, kubectl, kubeconfig, "server", 8080, "/index.html"); strings.TrimSpace(got) != "hello-from-node1" {
			t.Errorf("GET through kubectl port-forward = %q, want hello-from-node1", got)
		}
	})

	t.Run("memory limit: OOM-killed and restarted", func(t *testing.T) {
		// tail looks for the last lines of a file that never ends a line, buffering all of it.
		p := busyboxPod("hog", node2, "echo started; tail /dev/zero")
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("24Mi")}
		create(ctx, t, cs, p)
		got := waitPod(ctx, t, cs, "hog", func(p *corev1.Pod) bool {
			st := p.Status.ContainerStatuses
			return len(st) == 1 && st[0].RestartCount >= 1 && st[0].LastTerminationState.Terminated != nil
		})
		if reason := got.Status.ContainerStatuses[0].LastTerminationState.Terminated.Reason; reason != "OOMKilled" {
			t.Errorf("the container ended with %q, want OOMKilled", reason)
		}
	})

	t.Run("NRI plugin sees the sandbox and adjusts the container", func(t *testing.T) {
		plugin := newNRIPlugin(t, realnode.NRISocketPath(dir, node1))
		create(ctx, t, cs, busyboxPod("nri", node1, "echo OCTOPUS_NRI=$OCTOPUS_NRI; sleep 3600"))
		pod := waitPodReady(ctx, t, cs, "nri")
		if !plugin.sawSandbox("default/nri") {
			t.Errorf("the NRI plugin saw no sandbox of default/nri; it saw %v", plugin.sandboxList())
		}
		if logs := podLogs(ctx, t, cs, pod.Name, false); !strings.Contains(logs, "OCTOPUS_NRI="+nriValue) {
			t.Errorf("the container did not get the plugin's environment variable; its output: %q", logs)
		}
	})

	t.Run("the member chart's pods on the nodes its selectors choose", func(t *testing.T) {
		checkMemberChart(ctx, t, cs, kubeconfig, []string{node1, node2}, node1)
	})

	// A pod whose shell forks: its sleep children are not children of `lab up`, so Pdeathsig
	// does not take them along; Down must find them in the lab's cgroups.
	create(ctx, t, cs, busyboxPod("loop", node2, "while true; do sleep 1; done"))
	loop := waitPodReady(ctx, t, cs, "loop")
	loopNetns := podNetns(t, report.Network.ID, loop)
	pidsOut, err := exec.Command("ip", "netns", "pids", loopNetns).Output()
	if err != nil || len(strings.Fields(string(pidsOut))) == 0 {
		t.Fatalf("no processes in the pod's namespace %s: %v %q", loopNetns, err, pidsOut)
	}
	podPids := strings.Fields(string(pidsOut))

	checkRealNodesRunning(t, dir, report.Network.ID)

	// kill -9 of `lab up`, then `lab down`, twice: the second finds nothing to do.
	kill()
	if err := lab.Down(dir); err != nil {
		t.Fatalf("lab down: %v", err)
	}
	if err := lab.Down(dir); err != nil {
		t.Fatalf("second lab down: %v", err)
	}
	checkLabGone(t, dir, report.Network.ID, before)
	for _, p := range podPids {
		// A zombie holds nothing; the orphans' new parent reaps them in its own time.
		if pid, err := strconv.Atoi(p); err == nil && procfs.Alive(pid) {
			t.Errorf("processes: after lab down, process %d of pod %s is alive", pid, loop.Name)
		}
	}
}

// checkRealNodesRunning checks that what checkLabGone must find gone is there while a lab
// of real nodes runs: the nodes' mounts and the processes in the lab's cgroups (containerd,
// its shims, the pods).
func checkRealNodesRunning(t *testing.T, dir, labID string) {
	t.Helper()
	if len(mountsOf(dir)) == 0 {
		t.Errorf("no mount namespace mounts from %s while the lab runs", dir)
	}
	if pids, err := realnode.CgroupProcesses(labID); err != nil || len(pids) == 0 {
		t.Errorf("no processes in the lab's cgroups while the lab runs: %v", err)
	}
	if cgroups, err := realnode.Cgroups(labID); err != nil || len(cgroups) == 0 {
		t.Errorf("no cgroups of the lab while it runs: %v", err)
	}
}

// checkLabGone checks, after `lab down` of the lab labID in dir, that it left no process,
// mount, cgroup, namespace or file behind, whatever its node runtime: before is the host as
// it was before `lab up`.
func checkLabGone(t *testing.T, dir, labID string, before snapshot) {
	t.Helper()
	after := hostSnapshot(t)
	if pids := processesReferringTo(dir); len(pids) > 0 {
		t.Errorf("processes: after lab down, %v still refer to %s", pids, dir)
	}
	if pids, err := realnode.CgroupProcesses(labID); err != nil || len(pids) > 0 {
		t.Errorf("processes: after lab down, %v (%v) are in the lab's cgroups", pids, err)
	}
	if cgroups, err := realnode.Cgroups(labID); err != nil || len(cgroups) > 0 {
		t.Errorf("cgroups: after lab down: %v (%v)", cgroups, err)
	}
	if mounts := mountsOf(dir); len(mounts) > 0 {
		t.Errorf("mounts: after lab down, mount namespaces still mount from %s: %v", dir, mounts)
	}
	namespaces, links, err := labnet.Leftovers(labID)
	if err != nil || len(namespaces) > 0 || len(links) > 0 {
		t.Errorf("namespaces: after lab down: %v, links %v (%v)", namespaces, links, err)
	}
	for _, ns := range after.netns {
		// Only a lab's: the fast tier's packages run beside the lab tier (hack/run-tests.sh)
		// and make and drop namespaces of their own meanwhile (ovntest's chassis failed CI17).
		if labnet.IsLabNetns(ns) && !slices.Contains(before.netns, ns) {
			t.Errorf("namespaces: after lab down there is /run/netns/%s, which was not there before lab up", ns)
		}
	}
	for _, f := range after.files {
		if !slices.Contains(before.files, f) {
			t.Errorf("files: after lab down there is %s, which was not there before lab up", f)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("files: the lab dir still exists after lab down: %v", err)
	}
}

// snapshot is what of the host a lab must leave as it found it.
type snapshot struct {
	// netns are the named network namespaces.
	netns []string
	// files are the host paths a real node's kubelet, containerd and CNI plugins would use if
	// they escaped their node's mount namespace.
	files []string
}

func hostSnapshot(t *testing.T) snapshot {
	t.Helper()
	var s snapshot
	entries, err := os.ReadDir("/run/netns")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range entries {
		s.netns = append(s.netns, e.Name())
	}
	for _, p := range []string{"/var/lib/kubelet", "/var/lib/cni", "/var/lib/containerd", "/run/containerd", "/var/log/containers", "/var/log/pods", "/etc/cni", "/opt/cni"} {
		if _, err := os.Lstat(p); err == nil {
			s.files = append(s.files, p)
		}
	}
	return s
}

// mountsOf lists the mounts, in any process's mount namespace, whose source or mount point is
// inside dir: a node's mount namespace (its binds, container root filesystems, pod network
// namespaces) has them as long as any of its processes lives.
func mountsOf(dir string) []string {
	var found []string
	seen := map[string]bool{}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		ns, err := os.Readlink(p + "/ns/mnt")
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		b, err := os.ReadFile(p + "/mountinfo")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, dir) {
				found = append(found, fmt.Sprintf("%s (%s): %s", ns, p, line))
			}
		}
	}
	return found
}

func busyboxPod(name, node, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers: []corev1.Container{{
				Name: "main", Image: images.BusyboxImage, Command: []string{"sh", "-c", script},
			}},
		},
	}
}

func podLogs(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, previous bool) string {
	t.Helper()
	b, err := cs.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{Previous: previous}).DoRaw(ctx)
	if err != nil {
		t.Errorf("logs of %s: %v", name, err)
	}
	return string(b)
}

// portForwardGet runs `kubectl port-forward` to the pod's port on a free local port and GETs
// path through it.
func portForwardGet(ctx context.Context, t *testing.T, kubectl, kubeconfig, pod string, port int, path string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "port-forward", "--address", "127.0.0.1", "pod/"+pod, fmt.Sprintf(":%d", port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	// "Forwarding from 127.0.0.1:39791 -> 8080"
	re := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+)`)
	sc := bufio.NewScanner(out)
	var local string
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			local = m[1]
			break
		}
		t.Logf("kubectl port-forward: %s", sc.Text())
	}
	if local == "" {
		t.Fatal("kubectl port-forward printed no local port")
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+local+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET through port-forward: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// nriValue is what the test's NRI plugin sets OCTOPUS_NRI to in the containers it adjusts.
const nriValue = "adjusted-by-nri"

// nriPlugin is a minimal NRI plugin: it records the pod sandboxes it sees created and adds an
// environment variable to every container of a pod in the default namespace, the kind of hook
// the secondary network's plugin needs (it adds an interface at sandbox creation).
type nriPlugin struct {
	mu        sync.Mutex
	sandboxes []string
}

func (p *nriPlugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sandboxes = append(p.sandboxes, pod.GetNamespace()+"/"+pod.GetName())
	return nil
}

func (p *nriPlugin) CreateContainer(_ context.Context, pod *api.PodSandbox, _ *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if pod.GetNamespace() != "default" {
		return nil, nil, nil
	}
	adjust := &api.ContainerAdjustment{}
	adjust.AddEnv("OCTOPUS_NRI", nriValue)
	return adjust, nil, nil
}

func (p *nriPlugin) sandboxList() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.sandboxes)
}

func (p *nriPlugin) sawSandbox(key string) bool { return slices.Contains(p.sandboxList(), key) }

// newNRIPlugin registers a plugin with the NRI socket and keeps it running until the test
// ends.
func newNRIPlugin(t *testing.T, socket string) *nriPlugin {
	t.Helper()
	p := &nriPlugin{}
	s, err := stub.New(p, stub.WithPluginName("octopus-lab-test"), stub.WithPluginIdx("50"), stub.WithSocketPath(socket))
	if err != nil {
		t.Fatalf("creating the NRI plugin: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Start(ctx); err != nil {
		cancel()
		t.Fatalf("registering the NRI plugin at %s: %v", socket, err)
	}
	t.Cleanup(func() {
		cancel()
		s.Stop()
	})
	return p
}
