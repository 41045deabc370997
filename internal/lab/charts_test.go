package lab_test

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/charts"
	"github.com/octopus-mcs/octopus/internal/image"
	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/manifests/release"
	"github.com/octopus-mcs/octopus/internal/testenv"
	"github.com/octopus-mcs/octopus/internal/version"
)

// checkMemberChart installs the member chart (charts/octopus-member) on a cluster of real nodes
// with gateway the only node labelled as a gateway, and checks where the kubelets got its pods:
// the route agent on every node, the gateway on gateway only, both controller replicas, each
// asking for the project's image of this version; then uninstalls it and checks the pods are
// gone. That the pods run needs the project's image in the lab's catalog, which it has only
// when the agent binary's directory holds every binary (internal/lab/realnodes.go), as in
// `lab up` from bin/ but not in TestRealNodes, whose agent is built alone.
func checkMemberChart(ctx context.Context, t *testing.T, cs kubernetes.Interface, kubeconfig string, nodes []string, gateway string) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	label := []byte(`{"metadata":{"labels":{"node-restriction.kubernetes.io/octopus-gateway":"true"}}}`)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, gateway, types.MergePatchType, label, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := release.Install(ctx, cfg, release.Options{Chart: charts.Member, Namespace: v1alpha1.SystemNamespace, AppVersion: version.Version}); err != nil {
		t.Fatal(err)
	}
	image := "ghcr.io/octopus-mcs/octopus:" + version.Version
	scheduled := func(app string) map[string]int {
		pods, err := cs.CoreV1().Pods(v1alpha1.SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + app})
		if err != nil {
			t.Fatal(err)
		}
		byNode := map[string]int{}
		for _, p := range pods.Items {
			if p.Spec.NodeName == "" {
				continue
			}
			byNode[p.Spec.NodeName]++
			if got := p.Spec.Containers[0].Image; got != image {
				t.Errorf("pod %s runs %s, want %s", p.Name, got, image)
			}
		}
		return byNode
	}
	var agents, gateways, controllers map[string]int
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		agents, gateways, controllers = scheduled("octopus-route-agent"), scheduled("octopus-gateway"), scheduled("octopus-controller")
		n := 0
		for _, c := range controllers {
			n += c
		}
		return len(agents) == len(nodes) && len(gateways) == 1 && gateways[gateway] == 1 && n == 2, nil
	})
	if err != nil {
		t.Fatalf("the member chart's pods by node: route agents %v, gateways %v, controllers %v; want a route agent on each of %v, one gateway on %s, 2 controllers",
			agents, gateways, controllers, nodes, gateway)
	}
	t.Logf("the member chart's pods were on their nodes %.1fs after install", time.Since(start).Seconds())
	if err := release.Uninstall(ctx, cfg, charts.Member, v1alpha1.SystemNamespace, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		// octopus-dns, which the lab's join deployed, stays.
		pods, err := cs.CoreV1().Pods(v1alpha1.SystemNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name in (octopus-controller,octopus-gateway,octopus-route-agent)",
		})
		return err == nil && len(pods.Items) == 0, nil
	})
	if err != nil {
		t.Errorf("the member chart's pods are still there after uninstall: %v", err)
	}
}

// The checks of the components the member chart installed, run by TestGatewayFailover on its
// lab of real nodes (a hub and two clusters, two gateway nodes and a worker each):
//   - pods: in each cluster `kubectl get pods -n octopus-system` shows the controller and
//     octopus-dns replicas, a gateway on each labelled node only and a route agent on every
//     node, all Running and Ready (the route agents' readiness says their routes are applied);
//   - verify: `octopus verify` passes pod → pod, pod → ClusterSet IP and DNS both ways through them;
//   - gateway container killed: SIGKILL of the active gateway pod's process (the kubelet
//     restarts the container, which stands by) fails over like a process does; the
//     interruption is measured;
//   - relabel: taking the label off the active gateway's node removes its pod and the gateway
//     moves to the other labelled node; labelling it again brings a pod back;
//   - upgrade (upgradeMemberChart): an upgrade of cluster1's release to a new image tag (`helm
//     upgrade --reuse-values --set image.tag=...`) rolls every component pod onto it, and an
//     established TCP connection from a cluster1 pod to a cluster2 pod lives through it (its
//     longest stall measured);
//   - leave: `octopus leave` of cluster2 uninstalls the chart (octopus-dns included) and leaves
//     nothing in the cluster or on the hub, and every route and tunnel that referred to it
//     goes on both sides (checkLeaveRemovedTunnels).

func chartPods(ctx context.Context, t *testing.T, f *failoverLab) {
	if !f.l.Charts() {
		t.Fatal("the lab's nodes have no Octopus image: the member chart could not run")
	}
	kubectl := filepath.Join(testenv.BinDir(t), "kubectl")
	for _, c := range f.l.Network.Clusters {
		kubeconfig := f.l.Env.Cluster(c.Name).Kubeconfig
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "get", "pods", "-n", v1alpha1.SystemNamespace, "-o", "wide").CombinedOutput()
		t.Logf("%s: kubectl get pods -n %s -o wide: %v\n%s", c.Name, v1alpha1.SystemNamespace, err, out)
		cs := clientset(t, kubeconfig)
		checkChartPods(ctx, t, cs, c)
		// octopus-dns is the chart's: join left it out, uninstall removes it.
		dns, err := cs.AppsV1().Deployments(v1alpha1.SystemNamespace).Get(ctx, "octopus-dns", metav1.GetOptions{})
		if err != nil || dns.Annotations["meta.helm.sh/release-name"] != charts.Member {
			t.Errorf("%s: the octopus-dns Deployment (%v) is not release %s's", c.Name, err, charts.Member)
		}
	}
}

func chartVerify(ctx context.Context, t *testing.T, f *failoverLab, octopus string) {
	report, err := runVerify(ctx, t, f.l, octopus, 3*time.Minute)
	// Three checks each way, per family of a dual-stack lab.
	want := 6
	if f.dual {
		want = 12
	}
	if err != nil || !report.Passed || len(report.Results) != want {
		t.Fatalf("verify: %v, passed %v, %d results; want %d passing checks", err, report.Passed, len(report.Results), want)
	}
}

func chartGatewayContainerKilled(ctx context.Context, t *testing.T, f *failoverLab) {
	node := f.active.Name
	next := f.measureGatewayKill(ctx, t, "SIGKILL of the active gateway pod's process", true, func() {
		if err := f.l.KillGateway(ctx, node); err != nil {
			t.Fatal(err)
		}
	})
	// The kubelet restarts the container, which stands by (or, had it come back before
	// the standby took over, holds the Lease again): the node keeps a gateway.
	pod := waitGatewayPod(ctx, t, f.cs1, node, func(p *corev1.Pod) bool {
		return podReady(p) && p.Status.ContainerStatuses[0].RestartCount > 0
	})
	t.Logf("the kubelet restarted the gateway container on %s (restarts %d)", node, pod.Status.ContainerStatuses[0].RestartCount)
	if next.Name != f.active.Name {
		f.active, f.standby = f.standby, f.active
	}
}

func chartRelabel(ctx context.Context, t *testing.T, f *failoverLab) {
	probe := startUDPProbe(t, f.client.netns, f.serverEcho)
	defer probe.stop()
	probe.waitFlowing(t, 30*time.Second)
	node := f.active.Name
	unlabelled := time.Now()
	setGatewayLabel(ctx, t, f.cs1, node, false)
	waitFor(t, 2*time.Minute, "the gateway pod to leave "+node, func() error {
		if p, err := lab.GatewayPod(ctx, f.cs1, node); err == nil {
			return fmt.Errorf("pod %s still there", p.Name)
		}
		return nil
	})
	waitGatewayHolder(ctx, t, f.cs1, f.standby.Name, time.Minute)
	probe.waitAnsweredAfter(t, unlabelled, time.Minute)
	gap, lost, sent := probe.longestGap(unlabelled, time.Now())
	t.Logf("label taken off %s: its pod went and %s took the gateway over; longest interruption %.2fs (%d of %d probes lost)",
		node, f.standby.Name, gap.Seconds(), lost, sent)
	f.waitHTTP(t, 30*time.Second)

	setGatewayLabel(ctx, t, f.cs1, node, true)
	waitGatewayPod(ctx, t, f.cs1, node, podReady)
	t.Logf("labelled again: %s runs a gateway pod (standing by)", node)
	checkChartPods(ctx, t, f.cs1, *f.c1)
	// The standby took over: keep the lab as the next checks expect, active the holder.
	f.active, f.standby = f.standby, f.active
}

func chartLeave(ctx context.Context, t *testing.T, f *failoverLab, octopus string) {
	// What the left cluster's route agents log on their way out, shown if one keeps its
	// routes (the known gap in checkLeaveRemovedTunnels): their pods and logs go with them.
	logs := followPodLogs(ctx, t, f.cs2, v1alpha1.SystemNamespace, "app.kubernetes.io/name=octopus-route-agent")
	start := time.Now()
	kubeconfig := f.l.Env.Cluster(f.c2.Name).Kubeconfig
	if out, err := exec.CommandContext(ctx, octopus, "leave", "--kubeconfig", kubeconfig).CombinedOutput(); err != nil {
		t.Fatalf("octopus leave: %v\n%s", err, out)
	}
	t.Logf("octopus leave of %s took %.1fs", f.c2.Name, time.Since(start).Seconds())
	checkLeftNothing(ctx, t, f.cs2, f.hub, f.c2.Name, "")
	if !checkLeaveRemovedTunnels(ctx, t, f.l, f.hub, f.c1.Name, f.c2.Name) {
		for pod, lines := range logs() {
			t.Logf("route agent %s logged, up to its end:\n%s", pod, lines)
		}
	}
}

// followPodLogs follows the logs of the pods selected in namespace from now on, and returns
// what reports each pod's lines so far (its node in the key) — for logs that would be lost
// with pods a check is about to delete.
func followPodLogs(ctx context.Context, t *testing.T, cs kubernetes.Interface, namespace, selector string) func() map[string]string {
	t.Helper()
	pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	logs := map[string]*strings.Builder{}
	fctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	for _, p := range pods.Items {
		key := p.Name + " on " + p.Spec.NodeName
		logs[key] = &strings.Builder{}
		go func() {
			since := metav1.Now()
			r, err := cs.CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{Follow: true, SinceTime: &since}).Stream(fctx)
			if err != nil {
				return
			}
			defer r.Close()
			sc := bufio.NewScanner(r)
			for sc.Scan() {
				mu.Lock()
				fmt.Fprintln(logs[key], sc.Text())
				mu.Unlock()
			}
		}()
	}
	return func() map[string]string {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]string{}
		for k, b := range logs {
			out[k] = b.String()
		}
		return out
	}
}

// checkLeftNothing checks that cluster, after leave, keeps none of the member chart's pods or
// cluster-scoped objects (Octopus's ClusterRoles, octopus-dns's included) and that the hub
// keeps neither its Cluster nor its Peer. With keptBy, the Helm release of the operator that
// left, the member's namespace stays holding only that release's objects (its Role there,
// cluster.LeaveOptions.KeepNamespaceFor), and its ClusterRole stays too; without, the
// namespace is gone.
func checkLeftNothing(ctx context.Context, t *testing.T, cs kubernetes.Interface, hub client.Client, cluster, keptBy string) {
	t.Helper()
	waitFor(t, 2*time.Minute, cluster+"'s namespace "+v1alpha1.SystemNamespace+" and its pods to go", func() error {
		pods, err := cs.CoreV1().Pods(v1alpha1.SystemNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d pods left, %s among them", len(pods.Items), pods.Items[0].Name)
		}
		if keptBy != "" {
			return nil
		}
		ns, err := cs.CoreV1().Namespaces().Get(ctx, v1alpha1.SystemNamespace, metav1.GetOptions{})
		switch {
		case err == nil:
			return fmt.Errorf("namespace still there (%s)", ns.Status.Phase)
		case !apierrors.IsNotFound(err):
			return err
		}
		return nil
	})
	if keptBy != "" {
		leftInSystemNamespace(ctx, t, cs, cluster, keptBy)
	}
	roles, err := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range roles.Items {
		// octopus-lab:… are the lab's own (its flannel's), not Octopus's.
		if strings.HasPrefix(r.Name, "octopus-") && !strings.HasPrefix(r.Name, "octopus-lab:") && (keptBy == "" || r.Annotations[helmReleaseAnnotation] != keptBy) {
			t.Errorf("%s keeps ClusterRole %s after leave", cluster, r.Name)
		}
	}
	for _, obj := range []client.Object{&v1alpha1.Cluster{}, &v1alpha1.Peer{}} {
		err := hub.Get(ctx, client.ObjectKey{Namespace: v1alpha1.DefaultHubNamespace, Name: cluster}, obj)
		if !apierrors.IsNotFound(err) {
			t.Errorf("the hub keeps %T %s after leave: %v", obj, cluster, err)
		}
	}
}

// checkChartPods checks the member chart's pods of cluster c: both controller and both
// octopus-dns replicas, a gateway on each node with labnet.GatewayLabel and on no other, a
// route agent on every node, all Running and Ready.
func checkChartPods(ctx context.Context, t *testing.T, cs kubernetes.Interface, c labnet.ClusterNet) {
	t.Helper()
	var gateways, all []string
	for _, n := range c.Nodes {
		all = append(all, n.Name)
		if n.Gateway {
			gateways = append(gateways, n.Name)
		}
	}
	want := map[string][]string{"octopus-controller": nil, "octopus-dns": nil, "octopus-gateway": gateways, "octopus-route-agent": all}
	for app, nodes := range want {
		pods, err := cs.CoreV1().Pods(v1alpha1.SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + app})
		if err != nil {
			t.Fatal(err)
		}
		var on []string
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning || !podReady(&p) {
				t.Errorf("%s: pod %s on %s is %s, ready %v", c.Name, p.Name, p.Spec.NodeName, p.Status.Phase, podReady(&p))
			}
			on = append(on, p.Spec.NodeName)
		}
		slices.Sort(on)
		switch {
		case nodes == nil && len(on) != 2:
			t.Errorf("%s: %s pods on %v, want 2", c.Name, app, on)
		case nodes != nil && !slices.Equal(on, nodes):
			t.Errorf("%s: %s pods on %v, want one on each of %v", c.Name, app, on, nodes)
		}
	}
}

// waitGatewayPod waits until node's gateway pod satisfies ok and returns it.
func waitGatewayPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, node string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	waitFor(t, 2*time.Minute, "the gateway pod on "+node, func() error {
		var err error
		if pod, err = lab.GatewayPod(ctx, cs, node); err != nil {
			return err
		}
		if len(pod.Status.ContainerStatuses) == 0 || !ok(pod) {
			return fmt.Errorf("pod %s: %s, containers %+v", pod.Name, pod.Status.Phase, pod.Status.ContainerStatuses)
		}
		return nil
	})
	return pod
}

// setGatewayLabel puts labnet.GatewayLabel on node, or takes it off.
func setGatewayLabel(ctx context.Context, t *testing.T, cs kubernetes.Interface, node string, on bool) {
	t.Helper()
	value := `null`
	if on {
		value = `"true"`
	}
	patch := []byte(`{"metadata":{"labels":{"` + labnet.GatewayLabel + `":` + value + `}}}`)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("labelling %s: %v", node, err)
	}
}

// upgradeMemberChart upgrades cluster1's member chart to the project's image under a new tag
// (the lab's registry serves it, so every node pulls it) while a TCP connection from cluster1's
// worker pod to cluster2's echoes a message every 100 ms and UDP probes measure the data
// path; it waits until every component pod of cluster1 runs the new image and is Ready, and
// checks the connection survived (no reset, a message still round-trips). Its longest stall
// and the data path's longest interruption are measured and logged, not bounded: a rolling
// update moves the active gateway role up to twice, and each move waits for the other
// cluster to learn the new gateway's key through the hub, so the stall depends on the
// machine's load (3.9 s and 14.2 s in two runs; docs/benchmarks.md) more than a test should.
func upgradeMemberChart(ctx context.Context, t *testing.T, f *failoverLab) {
	tag := version.Version + "-upgrade"
	newImage := image.OctopusRepo + ":" + tag
	if err := f.l.TagImage(ctx, image.OctopusRepo+":"+version.Version, tag); err != nil {
		t.Fatal(err)
	}
	probe := startUDPProbe(t, f.client.netns, f.serverEcho)
	defer probe.stop()
	probe.waitFlowing(t, 30*time.Second)
	x := startTCPExchange(t, f.server.netns, netip.AddrPortFrom(f.client.ip, echoPort))
	defer func() {
		_ = x.conn.Close() // unblocks a round trip in flight
		_ = x.stop()
	}()
	holder := waitGatewayHolder(ctx, t, f.cs1, "", 5*time.Second)
	stopWatching := watchHolder(ctx, f.cs1)

	start := time.Now()
	cfg, err := clientcmd.BuildConfigFromFlags("", f.l.Env.Cluster(f.c1.Name).Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := release.Upgrade(ctx, cfg, release.Options{
		Chart: charts.Member, Namespace: v1alpha1.SystemNamespace, AppVersion: version.Version,
		Values: map[string]any{"image": map[string]any{"tag": tag}},
	})
	if err != nil {
		t.Fatal(err)
	}
	selector := "app.kubernetes.io/name in (octopus-controller,octopus-dns,octopus-gateway,octopus-route-agent)"
	var pods []corev1.Pod
	waitFor(t, 5*time.Minute, "every component pod of "+f.c1.Name+" to run "+newImage+" and be Ready", func() error {
		list, err := f.cs1.CoreV1().Pods(v1alpha1.SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		pods = list.Items
		// 2 controllers, 2 octopus-dns, a gateway on each of the 2 gateway nodes, a route
		// agent on each of the 3 nodes, and none of the old ones, terminating or not.
		if want := 4 + len(f.gateways1) + len(f.c1.Nodes); len(pods) != want {
			return fmt.Errorf("%d pods, want %d", len(pods), want)
		}
		for _, p := range pods {
			if p.DeletionTimestamp != nil || p.Spec.Containers[0].Image != newImage || !podReady(&p) {
				return fmt.Errorf("pod %s: image %s, ready %v, terminating %v", p.Name, p.Spec.Containers[0].Image, podReady(&p), p.DeletionTimestamp != nil)
			}
		}
		return nil
	})
	rolled := time.Now()
	t.Logf("release %s revision %d: all %d component pods of %s run %s and are Ready %.1fs after the upgrade began",
		charts.Member, rev, len(pods), f.c1.Name, newImage, rolled.Sub(start).Seconds())
	checkChartPods(ctx, t, f.cs1, *f.c1)

	// A few more seconds of exchange after the rollout: a stall the last pods cause shows.
	time.Sleep(5 * time.Second)
	if err := x.stop(); err != nil {
		t.Fatalf("the established TCP connection %s -> %s broke during the upgrade: %v", f.server.name, f.client.name, err)
	}
	if err := echoRoundTrip(x.conn, "after the upgrade\n", 5*time.Second); err != nil {
		t.Fatalf("the established TCP connection %s -> %s after the upgrade: %v", f.server.name, f.client.name, err)
	}
	gap, n := x.result(start, time.Now())
	udpGap, lost, sent := probe.longestGap(start, time.Now())
	// Each move of the active role, and the data path's longest interruption around it: the
	// rolling update moves it off the active's old pod, and back if the standby's old pod goes
	// after it.
	released := ""
	for _, h := range stopWatching()[1:] {
		if h.holder == "" { // the old pod's gateway gave the Lease up on SIGTERM
			released = fmt.Sprintf("released %.1fs, ", h.at.Sub(start).Seconds())
			continue
		}
		g, l, _ := probe.longestGap(h.at.Add(-3*time.Second), h.at.Add(5*time.Second))
		t.Logf("MEASURED upgrade handover to %s (%staken %.1fs after the upgrade began): longest interruption around it %.2fs (%d probes lost)",
			h.holder, released, h.at.Sub(start).Seconds(), g.Seconds(), l)
		released = ""
	}
	t.Logf("established TCP connection %s (%s) -> %s (%s) through the upgrade: %d round trips, longest stall %.2fs; "+
		"UDP probes %s -> %s: longest interruption %.2fs, %d of %d lost; Lease %s -> %s",
		f.server.name, f.c1.Name, f.client.name, f.c2.Name, n, gap.Seconds(),
		f.client.name, f.server.name, udpGap.Seconds(), lost, sent, holder, waitGatewayHolder(ctx, t, f.cs1, "", 5*time.Second))
	// New connections go through the new pods too.
	f.waitHTTP(t, 30*time.Second)
	// Keep the lab as the next subtests expect: active is the Lease holder.
	if h := waitGatewayHolder(ctx, t, f.cs1, "", 5*time.Second); h != f.active.Name {
		f.active, f.standby = f.standby, f.active
	}
}

// helmReleaseAnnotation names the Helm release an object belongs to.
const helmReleaseAnnotation = "meta.helm.sh/release-name"

// leftInSystemNamespace checks that the member's namespace of cluster holds nothing but the
// objects of Helm release keptBy and what the API server makes in every namespace.
func leftInSystemNamespace(ctx context.Context, t *testing.T, cs kubernetes.Interface, cluster, keptBy string) {
	t.Helper()
	ns := v1alpha1.SystemNamespace
	var left []string
	check := func(kind string, o metav1.Object) {
		if o.GetAnnotations()[helmReleaseAnnotation] != keptBy && o.GetName() != "kube-root-ca.crt" && o.GetName() != "default" {
			left = append(left, kind+" "+o.GetName())
		}
	}
	fail := func(kind string, err error) { t.Fatalf("%s: listing %s in %s: %v", cluster, kind, ns, err) }
	opts := metav1.ListOptions{}
	if l, err := cs.CoreV1().Secrets(ns).List(ctx, opts); err != nil {
		fail("Secrets", err)
	} else {
		for i := range l.Items {
			check("Secret", &l.Items[i])
		}
	}
	if l, err := cs.CoreV1().ConfigMaps(ns).List(ctx, opts); err != nil {
		fail("ConfigMaps", err)
	} else {
		for i := range l.Items {
			check("ConfigMap", &l.Items[i])
		}
	}
	if l, err := cs.CoreV1().ServiceAccounts(ns).List(ctx, opts); err != nil {
		fail("ServiceAccounts", err)
	} else {
		for i := range l.Items {
			check("ServiceAccount", &l.Items[i])
		}
	}
	if l, err := cs.RbacV1().Roles(ns).List(ctx, opts); err != nil {
		fail("Roles", err)
	} else {
		for i := range l.Items {
			check("Role", &l.Items[i])
		}
	}
	if len(left) > 0 {
		t.Errorf("%s: namespace %s keeps %s after leave (only release %s's objects may stay)", cluster, ns, strings.Join(left, ", "), keptBy)
	}
}
