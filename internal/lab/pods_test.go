package lab_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/octopus-mcs/octopus/internal/lab/images"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/lab/realnode"
)

// checkPods runs pods on a lab's cluster of two real nodes (TestRealNodes's, whose CNI is
// flannel): echo servers on both nodes
// behind a Service, a busybox shell loop as the client, an alpine/socat listener with a TCP
// readiness probe, busybox pods with exec readiness probes (one passing once kubectl exec has
// created the file it tests for, one whose probes fail for good, by exit code and by timeout),
// liveness and startup probes that restart containers (testLivenessAndStartup) and a container
// whose binary is missing. From the client pod's namespace
// it checks TCP pod → pod on the same node, on the other node, through the ClusterIP
// (kube-proxy) and to kubernetes.default; kubectl exec and logs through the kubelet API
// (testExecAndLogs, exec_test.go); then a Deployment scaled 1 → 3 → 0 gets pods, namespaces
// and veths and loses them again. (That the lab's end leaves no pod namespace or process is
// TestRealNodes's checkLabGone.)
//
// Flannel's own checks (checkFlannel) run on the echo pods: every other lab test runs the
// lab's bridge CNI, and one bring-up serves both.
func checkPods(ctx context.Context, t *testing.T, binDir, dir string, network labnet.Plan, kubeconfig string, nobody clientCert) {
	c := network.Clusters[0]
	cs := clientset(t, kubeconfig)
	node1, node2 := c.Nodes[0], c.Nodes[1]
	pods := cs.CoreV1().Pods("default")

	// Workloads.
	for _, n := range c.Nodes {
		create(ctx, t, cs, echoPod("echo-"+n.Name, n.Name, c.Name))
	}
	create(ctx, t, cs, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "client"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: node1.Name},
			Containers: []corev1.Container{{Name: "sh", Image: "busybox:1.37",
				Command: []string{"sh", "-c", "i=0; while true; do i=$((i+1)); echo tick $i; sleep 1; done"}}},
		},
	})
	create(ctx, t, cs, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "socat"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: node2.Name},
			Containers: []corev1.Container{{Name: "socat", Image: "alpine/socat",
				Args:  []string{"TCP-LISTEN:7000,fork,reuseaddr", "EXEC:cat"},
				Ports: []corev1.ContainerPort{{Name: "echo", ContainerPort: 7000}},
				ReadinessProbe: &corev1.Probe{PeriodSeconds: 1,
					ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("echo")}}},
			}},
		},
	})
	// Exec readiness probes run in the container's context: exec-ready's probe tests for a
	// file in the pod's own emptyDir, which the test creates later with kubectl exec;
	// exec-unready's probes fail for good, one by its exit code, one by its timeout.
	create(ctx, t, cs, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "exec-ready"},
		Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{{Name: "probe", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Containers: []corev1.Container{{Name: "app", Image: "busybox:1.37", Command: []string{"sleep", "3600"},
				VolumeMounts:   []corev1.VolumeMount{{Name: "probe", MountPath: "/var/lib/octopus-lab-test/probe"}},
				ReadinessProbe: execProbe(1, "test", "-f", "/var/lib/octopus-lab-test/probe/ready"),
			}},
		},
	})
	create(ctx, t, cs, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "exec-unready"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "fails", Image: "busybox:1.37", Command: []string{"sleep", "3600"},
				ReadinessProbe: execProbe(1, "sh", "-c", "exit 1")},
			{Name: "hangs", Image: "busybox:1.37", Command: []string{"sleep", "3600"},
				ReadinessProbe: execProbe(1, "sleep", "30")},
		}},
	})
	create(ctx, t, cs, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "missing"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "alpine/socat",
			Command: []string{"octopus-no-such-binary"}}}},
	})
	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "echo"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	ready := map[string]*corev1.Pod{}
	for _, name := range []string{"echo-" + node1.Name, "echo-" + node2.Name, "client", "socat"} {
		ready[name] = waitPodReady(ctx, t, cs, name)
	}
	if got := ready["client"].Spec.NodeName; got != node1.Name {
		t.Fatalf("client runs on %s, want %s", got, node1.Name)
	}
	t.Run("flannel", func(t *testing.T) {
		var echo []xpod
		for _, n := range c.Nodes {
			p := ready["echo-"+n.Name]
			echo = append(echo, xpod{cluster: c.Name, name: p.Name, node: n.Name,
				ip: netip.MustParseAddr(p.Status.PodIP), netns: podNetns(t, network.ID, p)})
		}
		checkFlannel(ctx, t, dir, c, cs, echo)
	})
	missing := waitPod(ctx, t, cs, "missing", func(p *corev1.Pod) bool { return missingBinaryReported(p, "octopus-no-such-binary") })
	if podReady(missing) {
		t.Errorf("pod with a missing binary is Ready")
	}

	// Both exec-probed pods run, unready, for a few probe periods; then the file appears
	// and exec-ready becomes ready, while exec-unready stays unready.
	for _, name := range []string{"exec-ready", "exec-unready"} {
		p := waitPod(ctx, t, cs, name, allContainersRunning)
		time.Sleep(time.Until(latestStart(p).Add(3 * time.Second)))
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if conds := readiness(p); conds != "Ready=False ContainersReady=False" {
			t.Errorf("pod %s, whose exec readiness probes fail, is %s", name, conds)
		}
	}
	kubectl := labCluster{net: c, nobody: nobody, kubeconfig: kubeconfig, kubectl: filepath.Join(binDir, "kubectl")}
	if res := kubectl.run(ctx, t, nil, "", "exec", "exec-ready", "--", "touch", "/var/lib/octopus-lab-test/probe/ready"); res.code != 0 {
		t.Fatalf("kubectl exec touch .../probe/ready: exit %d, stderr %q", res.code, res.stderr)
	}
	execReady := waitPodReady(ctx, t, cs, "exec-ready")
	if conds := readiness(execReady); conds != "Ready=True ContainersReady=True" {
		t.Errorf("pod exec-ready, whose exec readiness probe passes, is %s", conds)
	}
	unready, err := pods.Get(ctx, "exec-unready", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if conds := readiness(unready); conds != "Ready=False ContainersReady=False" || !allContainersRunning(unready) {
		t.Errorf("pod exec-unready is %s, all containers running %t; want it unready and running", conds, allContainersRunning(unready))
	}
	for _, st := range unready.Status.ContainerStatuses {
		if st.Ready || st.RestartCount != 0 {
			t.Errorf("pod exec-unready: container %s ready %t, restarts %d; want unready and never restarted", st.Name, st.Ready, st.RestartCount)
		}
	}

	testLivenessAndStartup(ctx, t, cs, kubectl)

	clientNetns := podNetns(t, network.ID, ready["client"])
	for _, tc := range []struct{ what, pod string }{
		{"pod -> pod on the same node", "echo-" + node1.Name},
		{"pod -> pod on another node", "echo-" + node2.Name},
	} {
		p := ready[tc.pod]
		got := httpGet(t, clientNetns, netip.AddrPortFrom(netip.MustParseAddr(p.Status.PodIP), 8080))
		want := fmt.Sprintf("cluster=%s node=%s pod=%s", c.Name, p.Spec.NodeName, p.Name)
		if !strings.HasPrefix(got, want) {
			t.Errorf("%s: answer %q, want it to start with %q", tc.what, got, want)
		} else {
			t.Logf("%s: %s", tc.what, got)
		}
	}
	// Through the ClusterIP: kube-proxy in node1's namespace DNATs to either echo pod; poll
	// until it has synced the endpoints and both have answered.
	svcAddr := netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80)
	answered := map[string]bool{}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		if got, err := tryHTTPGet(clientNetns, svcAddr); err == nil {
			for _, n := range c.Nodes {
				answered[n.Name] = answered[n.Name] || strings.Contains(got, "pod=echo-"+n.Name+" ")
			}
		}
		return len(answered) == 2 && answered[node1.Name] && answered[node2.Name], nil
	})
	if err != nil {
		t.Errorf("pod -> ClusterIP %s: answers from %v, want both echo pods: %v", svcAddr, answered, err)
	}
	// Pods reach the API servers through kubernetes.default: the node masquerades them
	// (labnet's nodeNFTTable), so the root namespace answers the node's LAN address on the
	// uplink instead of a pod address along its default route, off the machine.
	kube, err := cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	apiAddr := netip.AddrPortFrom(netip.MustParseAddr(kube.Spec.ClusterIP), 443)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		conn, err := labnet.DialTCP(clientNetns, apiAddr, 2*time.Second)
		if err != nil {
			return false, nil //nolint:nilerr // kube-proxy may not have synced yet
		}
		return true, conn.Close()
	})
	if err != nil {
		t.Errorf("pod -> kubernetes.default (%s): %v", apiAddr, err)
	}
	// The socat pod echoes what the client sends.
	socatAddr := netip.AddrPortFrom(netip.MustParseAddr(ready["socat"].Status.PodIP), 7000)
	if got := tcpEcho(t, clientNetns, socatAddr, "hello socat\n"); got != "hello socat\n" {
		t.Errorf("socat pod echoed %q", got)
	}
	// The busybox loop really loops: its log grows.
	if logs := podLogs(ctx, t, cs, "client", false); !strings.Contains(logs, "tick 2") {
		t.Errorf("busybox loop log %q does not show it looping", logs)
	}

	t.Run("kubectl exec and logs", func(t *testing.T) {
		kubectl.dir, kubectl.cs = dir, cs
		testExecAndLogs(ctx, t, kubectl, map[string]*corev1.Pod{node1.Name: ready["echo-"+node1.Name], node2.Name: ready["echo-"+node2.Name]}, svc)
	})

	// A Deployment scaled 1 -> 3 -> 0.
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, echoDeployment("scale", 1, c.Name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, replicas := range []int32{1, 3, 0} {
		if replicas != 1 {
			deploy, err := cs.AppsV1().Deployments("default").Get(ctx, "scale", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			deploy.Spec.Replicas = ptr.To(replicas)
			if _, err := cs.AppsV1().Deployments("default").Update(ctx, deploy, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		var last string
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "app=scale"})
			if err != nil {
				return false, err
			}
			// Every other scheduled pod has a namespace and a veth too: the test's own (echo x2,
			// client, socat, "missing", whose sandbox is up though its container cannot
			// start) and the system's (CoreDNS, octopus-dns).
			others, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "app!=scale"})
			if err != nil {
				return false, err
			}
			staticPods := 0
			for _, p := range others.Items {
				if p.Spec.NodeName != "" && !p.Spec.HostNetwork && p.DeletionTimestamp == nil {
					staticPods++
				}
			}
			readyPods := 0
			for i := range list.Items {
				if podReady(&list.Items[i]) {
					readyPods++
				}
			}
			namespaces := podNamespaces(t, network.ID, c)
			veths := podVeths(t, c)
			last = fmt.Sprintf("%d pods (%d ready), %d pod namespaces, %d pod veths, %d other pods", len(list.Items), readyPods, namespaces, veths, staticPods)
			want := int(replicas)
			return len(list.Items) == want && readyPods == want &&
				namespaces == staticPods+want && veths == staticPods+want, nil
		})
		if err != nil {
			t.Fatalf("scaled to %d: %v (last: %s)", replicas, err, last)
		}
		t.Logf("scaled to %d: %s", replicas, last)
	}

}

func echoPod(name, node, cluster string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "echo"}},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: node},
			Containers:   []corev1.Container{echoContainer(cluster)},
		},
	}
}

// echoContainer is the echo server of cluster. Its cluster name comes from the pod spec: the
// lab's NRI plugin also sets it (realnode.EnvCluster), but a plugin that containerd dropped
// under load left pods answering "cluster=" (TestOverlappingCIDRs failed on it in a loaded run).
func echoContainer(cluster string) corev1.Container {
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	return corev1.Container{
		Name: "echo", Image: images.EchoImage,
		Env: []corev1.EnvVar{
			{Name: "CLUSTER_NAME", Value: cluster},
			{Name: "POD_NAME", ValueFrom: field("metadata.name")},
			{Name: "POD_NAMESPACE", ValueFrom: field("metadata.namespace")},
			{Name: "NODE_NAME", ValueFrom: field("spec.nodeName")},
			{Name: "POD_IP", ValueFrom: field("status.podIP")},
		},
		Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
		ReadinessProbe: &corev1.Probe{PeriodSeconds: 1,
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}}},
	}
}

func echoDeployment(name string, replicas int32, cluster string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{echoContainer(cluster)}},
			},
		},
	}
}

// execProbe is a readiness probe that runs argv in the container every period seconds.
func execProbe(period int32, argv ...string) *corev1.Probe {
	return &corev1.Probe{PeriodSeconds: period, ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: argv}}}
}

// allContainersRunning reports whether the pod runs and every container of it is running.
func allContainersRunning(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return false
	}
	for _, st := range p.Status.ContainerStatuses {
		if st.State.Running == nil {
			return false
		}
	}
	return true
}

// latestStart is when the pod's last container to start started.
func latestStart(p *corev1.Pod) time.Time {
	var last time.Time
	for _, st := range p.Status.ContainerStatuses {
		if st.State.Running != nil && st.State.Running.StartedAt.After(last) {
			last = st.State.Running.StartedAt.Time
		}
	}
	return last
}

// readiness renders the pod's Ready and ContainersReady conditions.
func readiness(p *corev1.Pod) string {
	status := map[corev1.PodConditionType]corev1.ConditionStatus{}
	for _, c := range p.Status.Conditions {
		status[c.Type] = c.Status
	}
	return fmt.Sprintf("Ready=%s ContainersReady=%s", status[corev1.PodReady], status[corev1.ContainersReady])
}

func create(ctx context.Context, t testing.TB, cs kubernetes.Interface, p *corev1.Pod) {
	t.Helper()
	if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", p.Name, err)
	}
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func waitPodReady(ctx context.Context, t testing.TB, cs kubernetes.Interface, name string) *corev1.Pod {
	t.Helper()
	return waitPod(ctx, t, cs, name, podReady)
}

// waitPod polls the pod until ok; on timeout it fails with the pod's status.
func waitPod(ctx context.Context, t testing.TB, cs kubernetes.Interface, name string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling; the last status is reported on timeout
		}
		last = p
		return ok(p), nil
	})
	if err != nil {
		status := "never read"
		if last != nil {
			status = fmt.Sprintf("%+v", last.Status)
		}
		t.Fatalf("pod %s: %v; status: %s", name, err, status)
	}
	return last
}

// tryHTTPGet sends GET / from inside a namespace and returns the first line of the body.
func tryHTTPGet(netns string, addr netip.AddrPort) (string, error) {
	conn, err := labnet.DialTCP(netns, addr, 3*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", addr); err != nil {
		return "", err
	}
	b, err := io.ReadAll(conn)
	if err != nil {
		return "", err
	}
	_, body, ok := strings.Cut(string(b), "\r\n\r\n")
	if !ok || !strings.HasPrefix(string(b), "HTTP/1.0 200") && !strings.HasPrefix(string(b), "HTTP/1.1 200") {
		return "", fmt.Errorf("unexpected answer %q", b)
	}
	return strings.TrimSpace(body), nil
}

func httpGet(t *testing.T, netns string, addr netip.AddrPort) string {
	t.Helper()
	got, err := tryHTTPGet(netns, addr)
	if err != nil {
		t.Fatalf("GET http://%s from %s: %v", addr, netns, err)
	}
	return got
}

func tcpEcho(t *testing.T, netns string, addr netip.AddrPort, msg string) string {
	t.Helper()
	conn, err := labnet.DialTCP(netns, addr, 3*time.Second)
	if err != nil {
		t.Fatalf("connecting to %s from %s: %v", addr, netns, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, msg); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the echo from %s: %v", addr, err)
	}
	return line
}

// missingBinaryReported reports whether the pod's only container, whose program is missing
// from its image, does not run and its status names the program as the container runtime
// reports it: a start error ("exec: <program>: executable file not found in $PATH") in the
// last termination.
func missingBinaryReported(p *corev1.Pod, program string) bool {
	if len(p.Status.ContainerStatuses) != 1 {
		return false
	}
	st := p.Status.ContainerStatuses[0]
	if st.State.Running != nil || st.Ready {
		return false
	}
	for _, term := range []*corev1.ContainerStateTerminated{st.State.Terminated, st.LastTerminationState.Terminated} {
		if term != nil && term.Reason == "StartError" && strings.Contains(term.Message, program) {
			return true
		}
	}
	return false
}

// podVeths counts the pod veths in the cluster's node namespaces: those the node's CNI
// attached to its bridge.
func podVeths(t *testing.T, c labnet.ClusterNet) int {
	t.Helper()
	n := 0
	for _, node := range c.Nodes {
		out, err := exec.Command("ip", "-n", node.Netns, "-o", "link", "show").CombinedOutput()
		if err != nil {
			t.Fatalf("ip -n %s link: %v: %s", node.Netns, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, " master "+realnode.BridgeName+" ") {
				n++
			}
		}
	}
	return n
}

// podNamespaces counts the network namespaces of the lab's pods on the cluster's nodes: those
// lab.PodNetns named (labnet.PodNetnsPrefix) and those found by the pods' processes (the lab's
// cgroups) in namespaces other than their nodes'. A namespace both named and in use counts
// once.
func podNamespaces(t *testing.T, labID string, c labnet.ClusterNet) int {
	t.Helper()
	inode := func(path string) uint64 {
		var st unix.Stat_t
		if unix.Stat(path, &st) != nil {
			return 0
		}
		return st.Ino
	}
	nodes := map[uint64]bool{}
	for _, n := range c.Nodes {
		nodes[inode(n.NetnsPath())] = true
	}
	seen := map[uint64]bool{}
	named, err := labnet.ListNamespaces(labnet.PodNetnsPrefix(labID))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range named {
		seen[inode(labnet.NetnsPath(name))] = true
	}
	pids, err := realnode.CgroupProcesses(labID)
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if ino := inode("/proc/" + strconv.Itoa(pid) + "/ns/net"); ino != 0 && !nodes[ino] {
			seen[ino] = true
		}
	}
	delete(seen, 0)
	return len(seen)
}
