package lab_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// testMCSToTheLetter checks, on a lab of two clusters (TestDiagnose's, through
// checkCrossCluster), what MCS users and Kubernetes tools expect to the letter (issue 29), with
// the clients a user runs: dig and nc/curl from a toolbox pod, kubectl.
func testMCSToTheLetter(ctx context.Context, t *testing.T, l *lab.Lab) {
	t.Run("versions", func(t *testing.T) { checkVersions(ctx, t, l) })
	t.Run("port-set conflict", func(t *testing.T) { checkPortSetConflict(ctx, t, l) })
	t.Run("headless dashed names", func(t *testing.T) { checkHeadlessDashedNames(ctx, t, l) })
	t.Run("strict port ownership", func(t *testing.T) { checkStrictPortOwnership(ctx, t, l) })
}

// fidelityCluster is member i (0-based) of the lab as its user sees it, with a toolbox pod
// mcs-toolbox (made once; other checks on the same lab share it).
func fidelityCluster(ctx context.Context, t *testing.T, l *lab.Lab, i int) *mcsCluster {
	t.Helper()
	name := l.Network.Clusters[i].Name
	kubeconfig := l.Env.Cluster(name).Kubeconfig
	c := &mcsCluster{name: name, cs: clientset(t, kubeconfig), ctrl: kubeClient(t, kubeconfig),
		kubectl: labCluster{kubeconfig: kubeconfig, kubectl: filepath.Join(testenv.BinDir(t), "kubectl")}}
	toolbox := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "mcs-toolbox"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "toolbox", Image: "nicolaka/netshoot"}}},
	}
	if _, err := c.cs.CoreV1().Pods("default").Create(ctx, toolbox, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating the toolbox pod in %s: %v", name, err)
	}
	c.toolboxIP = waitPodReady(ctx, t, c.cs, "mcs-toolbox").Status.PodIP
	return c
}

// checkVersions: the lab's binaries report the Kubernetes release they are built from, as
// kubectl version and the nodes' kubeletVersion show it (tools gate on both).
func checkVersions(ctx context.Context, t *testing.T, l *lab.Lab) {
	c := fidelityCluster(ctx, t, l, 0)
	res := c.kubectl.run(ctx, t, nil, "", "version", "-o", "json")
	var v struct {
		Client struct{ GitVersion string } `json:"clientVersion"`
		Server struct{ GitVersion string } `json:"serverVersion"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &v); err != nil || res.code != 0 {
		t.Fatalf("kubectl version -o json: exit %d, %v: %s %s", res.code, err, res.stdout, res.stderr)
	}
	if v.Client.GitVersion != controlplane.KubernetesVersion || v.Server.GitVersion != controlplane.KubernetesVersion {
		t.Errorf("kubectl version: client %s, server %s; want %s", v.Client.GitVersion, v.Server.GitVersion, controlplane.KubernetesVersion)
	}
	nodes, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Status.NodeInfo.KubeletVersion != controlplane.KubernetesVersion {
			t.Errorf("node %s: kubeletVersion %q, want %s", n.Name, n.Status.NodeInfo.KubeletVersion, controlplane.KubernetesVersion)
		}
	}
	t.Logf("kubectl %s, kube-apiserver %s, %d kubelets %s", v.Client.GitVersion, v.Server.GitVersion, len(nodes.Items), controlplane.KubernetesVersion)
}

// fidelityService creates Service name in c with ports (named, each targeting the echo
// server's 8080) and, unless headless, a ClusterIP; plus one echo pod of app name.
func fidelityService(ctx context.Context, t *testing.T, c *mcsCluster, name string, headless bool, ports ...corev1.ServicePort) {
	t.Helper()
	pod := mcsEchoPod(name, c.name)
	pod.Labels = map[string]string{"app": name}
	if _, err := c.cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating pod %s in %s: %v", pod.Name, c.name, err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name}, Ports: ports}}
	if headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	if _, err := c.cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Service %s in %s: %v", name, c.name, err)
	}
	if err := c.ctrl.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}); err != nil {
		t.Fatalf("exporting %s from %s: %v", name, c.name, err)
	}
}

func port(name string, number int32, proto corev1.Protocol) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: number, Protocol: proto, TargetPort: intstr.FromInt32(8080)}
}

// waitExportConflict waits up to bound for the Conflict condition of c's export of name to
// have reason (True, or False for NoConflicts) and returns it.
func waitExportConflict(ctx context.Context, t *testing.T, c *mcsCluster, name, reason string, bound time.Duration) metav1.Condition {
	t.Helper()
	var last metav1.Condition
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, bound, true, func(ctx context.Context) (bool, error) {
		ex := &mcsv1beta1.ServiceExport{}
		if err := c.ctrl.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, ex); err != nil {
			return false, nil //nolint:nilerr // polled again; the last condition is reported
		}
		if cond := meta.FindStatusCondition(ex.Status.Conditions, string(mcsv1beta1.ServiceExportConditionConflict)); cond != nil {
			last = *cond
			return cond.Reason == reason && (cond.Status == metav1.ConditionTrue) == (reason != "NoConflicts"), nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("ServiceExport %s in %s: Conflict %s not within %s; last %s %s: %s", name, c.name, reason, bound, last.Status, last.Reason, last.Message)
	}
	return last
}

// checkPortSetConflict: exports of one service whose port sets differ expose the union, and
// the difference is a Conflict on every export, naming clusters and ports, within 10 s; it
// clears within 10 s once the sets agree (KEP-1645).
func checkPortSetConflict(ctx context.Context, t *testing.T, l *lab.Lab) {
	c1, c2 := fidelityCluster(ctx, t, l, 0), fidelityCluster(ctx, t, l, 1)
	const name = "portsets"
	fidelityService(ctx, t, c1, name, false, port("tcp", 42, corev1.ProtocolTCP), port("udp", 42, corev1.ProtocolUDP))
	waitExportConflict(ctx, t, c1, name, "NoConflicts", time.Minute)
	fidelityService(ctx, t, c2, name, false, port("tcp", 42, corev1.ProtocolTCP), port("stcp", 142, corev1.ProtocolSCTP))
	for _, c := range []*mcsCluster{c1, c2} {
		cond := waitExportConflict(ctx, t, c, name, string(mcsv1beta1.ServiceExportReasonPortConflict), 10*time.Second)
		for _, want := range []string{"cluster " + c1.name + ": ports stcp:142/SCTP of cluster " + c2.name, "cluster " + c2.name + ": ports udp:42/UDP of cluster " + c1.name} {
			if !strings.Contains(cond.Message, want) {
				t.Errorf("%s's Conflict message %q does not contain %q", c.name, cond.Message, want)
			}
		}
	}
	// The import exposes the union of the three ports.
	waitFor(t, 30*time.Second, "the union of the ports in "+c2.name+"'s import", func() error {
		si := &mcsv1beta1.ServiceImport{}
		if err := c2.ctrl.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, si); err != nil {
			return err
		}
		var got []string
		for _, p := range si.Spec.Ports {
			got = append(got, fmt.Sprintf("%s:%d/%s", p.Name, p.Port, p.Protocol))
		}
		slices.Sort(got)
		if want := []string{"stcp:142/SCTP", "tcp:42/TCP", "udp:42/UDP"}; !slices.Equal(got, want) {
			return fmt.Errorf("ports %v, want %v", got, want)
		}
		return nil
	})
	svc, err := c2.cs.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.Ports = []corev1.ServicePort{port("tcp", 42, corev1.ProtocolTCP), port("udp", 42, corev1.ProtocolUDP)}
	if _, err := c2.cs.CoreV1().Services("default").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*mcsCluster{c1, c2} {
		waitExportConflict(ctx, t, c, name, "NoConflicts", 10*time.Second)
	}
	t.Logf("port-set conflict raised on both exports and cleared once the sets agreed")
}

// dashed is the name the DNS specifications give an endpoint without a hostname.
func dashed(ip string) string {
	a := netip.MustParseAddr(ip)
	if a.Is4() {
		return strings.ReplaceAll(a.String(), ".", "-")
	}
	return strings.ReplaceAll(a.StringExpanded(), ":", "-")
}

// dig runs dig +short in c's toolbox until check accepts its output.
func (c *mcsCluster) dig(ctx context.Context, t *testing.T, check func(out string) bool, args ...string) string {
	t.Helper()
	var last kubectlResult
	argv := append([]string{"exec", "mcs-toolbox", "--", "dig", "+short", "+time=2", "+tries=1"}, args...)
	err := wait.PollUntilContextTimeout(ctx, time.Second, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		last = c.kubectl.run(ctx, t, nil, "", argv...)
		return last.code == 0 && check(strings.TrimSpace(last.stdout)), nil
	})
	if err != nil {
		t.Fatalf("dig %s in %s: exit %d, %q, %q", strings.Join(args, " "), c.name, last.code, last.stdout, last.stderr)
	}
	return strings.TrimSpace(last.stdout)
}

// checkHeadlessDashedNames: a headless service's endpoint without a hostname is named by its
// dashed address in A, SRV and PTR answers, asked with dig through the cluster's own DNS
// (which forwards clusterset.local and, since issue 29, the other clusters' reverse zones to
// octopus-dns).
func checkHeadlessDashedNames(ctx context.Context, t *testing.T, l *lab.Lab) {
	c1, c2 := fidelityCluster(ctx, t, l, 0), fidelityCluster(ctx, t, l, 1)
	const name = "hello"
	fidelityService(ctx, t, c1, name, true, port("http", 8080, corev1.ProtocolTCP))
	pod := waitPodReady(ctx, t, c1.cs, mcsEchoPod(name, c1.name).Name)
	host := dashed(pod.Status.PodIP) + "." + c1.name + "." + name + ".default.svc.clusterset.local"
	a := c2.dig(ctx, t, func(out string) bool { return out == pod.Status.PodIP }, host, "A")
	srv := c2.dig(ctx, t, func(out string) bool { return strings.HasSuffix(out, " "+host+".") },
		name+".default.svc.clusterset.local", "SRV")
	ptr := c2.dig(ctx, t, func(out string) bool { return out == host+"." }, "-x", pod.Status.PodIP)
	t.Logf("from %s: A %s = %s; SRV %s; PTR %s = %s", c2.name, host, a, srv, pod.Status.PodIP, ptr)
}

// checkStrictPortOwnership: cluster 1 exports tcp on 42, cluster 2 later on 4242 (targetPort
// the same); the oldest wins, so the import's tcp is 42, and connections to the ClusterSet IP
// on 42 must land only on cluster 1's pods (20 connections, answering pod asserted).
func checkStrictPortOwnership(ctx context.Context, t *testing.T, l *lab.Lab) {
	c1, c2 := fidelityCluster(ctx, t, l, 0), fidelityCluster(ctx, t, l, 1)
	const name = "owned"
	fidelityService(ctx, t, c1, name, false, port("tcp", 42, corev1.ProtocolTCP))
	waitExportConflict(ctx, t, c1, name, "NoConflicts", time.Minute)
	fidelityService(ctx, t, c2, name, false, port("tcp", 4242, corev1.ProtocolTCP))
	waitExportConflict(ctx, t, c2, name, string(mcsv1beta1.ServiceExportReasonPortConflict), 30*time.Second)
	winner := waitPodReady(ctx, t, c1.cs, mcsEchoPod(name, c1.name).Name)
	waitPodReady(ctx, t, c2.cs, mcsEchoPod(name, c2.name).Name)
	// Both clusters are in the import (cluster 2 only lost a port), so without strict ownership
	// kube-proxy would balance port 42 over both clusters' pods.
	for _, c := range []*mcsCluster{c1, c2} {
		waitFor(t, 60*time.Second, "both clusters in "+c.name+"'s import of "+name, func() error {
			si := &mcsv1beta1.ServiceImport{}
			if err := c.ctrl.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, si); err != nil {
				return err
			}
			if len(si.Status.Clusters) != 2 || len(si.Spec.Ports) != 1 || si.Spec.Ports[0].Port != 42 {
				return fmt.Errorf("clusters %v, ports %v", si.Status.Clusters, si.Spec.Ports)
			}
			return nil
		})
		host := name + ".default.svc.clusterset.local"
		for i := range 20 {
			reply := c.request(ctx, t, "curl", host, 42)
			if !strings.Contains(reply, "cluster="+c1.name+" ") || !strings.Contains(reply, " pod="+winner.Name+" ") {
				t.Fatalf("connection %d from %s to %s:42 answered by %q, want only %s's pod %s", i+1, c.name, host, reply, c1.name, winner.Name)
			}
		}
		t.Logf("20 connections from %s to %s:42 all answered by %s's pod %s", c.name, host, c1.name, winner.Name)
	}
}
