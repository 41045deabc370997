package lab_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/charts"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/gateway"
	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/manifests/release"
	"github.com/octopus-mcs/octopus/internal/operator"
	"github.com/octopus-mcs/octopus/internal/testenv"
	"github.com/octopus-mcs/octopus/internal/version"
)

// hubOperatorProcess names the hub's operator, a supervised process of the lab (its log is
// <Dir>/logs/operator-hub.log).
const hubOperatorProcess = "operator-hub"

// operatorReconcileSlack is how long past its retry interval a member's operator may take to
// notice another cluster on the hub: the time of a reconcile (hub reads, the Helm release's
// status) on a loaded machine.
const operatorReconcileSlack = 30 * time.Second

// TestOperatorLab proves issue 18's first bullets on real nodes (kubelet, containerd): a hub and
// two clusters that the lab brings up unjoined (lab.Options.Unjoined: control planes, nodes,
// images, no Octopus) become a connected cluster set only through `kubectl apply` of three
// Fabric objects, plus the broker-info Secret copied from the hub to the members:
//   - operators: the members' operators are pods on the real nodes, installed by the
//     octopus-operator chart (Helm SDK) from the project's image, so the test runs the
//     operator as a user gets it, under the chart's own ServiceAccount and RBAC. The hub has
//     no nodes (its pods could never be scheduled), so its operator is a process of the lab
//     with the hub's kubeconfig, and its Fabric CRD is applied from the chart's crds/;
//   - hub Fabric: BrokerReady and the broker-info Secret named in status.brokerInfoSecret;
//   - member Fabrics (joinConfig and cloudPrepareConfig generic, gateways 1 of each member's
//     two underlay nodes): the first alone reaches Ready=True NoOtherClusters (issue 29: a lone
//     cluster is ready, and says it is alone); then the second is applied and both reach
//     Ready=True, GatewaysConnected never True while the Fabric's Peer is not Connected to the
//     other member; each condition transition logged;
//   - generic prepare: the lab's nodes carry the gateway label from registration, and the
//     provider leaves a node that is a gateway already as it is (it marks only nodes it
//     labels, internal/operator/cloud.go), so the test takes the label off every node first:
//     then exactly the requested number of nodes carries it, each marked by the operator,
//     and it is the first of the lab's underlay nodes (by count the provider picks by name,
//     and the lab's underlay nodes come first);
//   - verify: `octopus verify` passes pod → pod, pod → ClusterSet IP and DNS both ways;
//   - host firewall: each gateway node's nftables ruleset holds the gateway's table accepting
//     the tunnel port, its counter showing the tunnel's packets; nodes without a gateway
//     have no such table;
//   - aws: a member Fabric switched to provider aws reports CloudPrepared=False and
//     Ready=False, both ProviderUnavailable; back to generic, it is Ready again;
//   - live changes (operator_live_test.go), each one `kubectl patch fabric` under UDP probes
//     from a pod of cluster2 to a pod of cluster1: backend wireguard → vxlan → wireguard, the
//     health interval, the gateway moved to the other underlay node by
//     joinConfig.gatewayNodeSelector alone; each takes effect without re-create or re-join,
//     Ready is never True while a gateway pod of the old template remains, and traffic flows
//     from the moment every Fabric says Ready;
//   - delete: cluster2's Fabric deleted, nothing of cluster2 remains on the hub or in it.
func TestOperatorLab(t *testing.T) {
	testenv.LabNetwork(t)
	binDir := testenv.BinDir(t)
	// The nodes get the project's image only when the agent's directory holds every binary
	// of it (buildCommands builds images.OctopusBinaries, the operator among them).
	bins := buildCommands(t, "octopus-agent", "octopus-echo", "octopus-dns", "octopus", "octopus-operator")
	// Room for the live changes after the bring-up, each waiting out a generous recovery.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	_, containerd, err := controlplane.EnsureNodeRuntime(ctx, testenv.RepoRoot(t), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	l, dir := startLab(ctx, t, lab.Options{
		// Two underlay nodes per member: the operator's generic prepare makes one of them the
		// gateway, and "gateway move" moves it to the other (workers cannot reach the underlay).
		Clusters: 2, GatewaysPerCluster: 2, Unjoined: true,
		BinDir: binDir, AgentBinary: bins["octopus-agent"], ContainerdBinDir: containerd,
	})
	if !l.Charts() {
		t.Fatal("the lab's nodes have no Octopus image: the operator chart could not run")
	}
	k := kubectlRunner{bin: filepath.Join(binDir, "kubectl"), ctx: ctx}
	hubKubeconfig := l.Env.Cluster(lab.HubName).Kubeconfig
	members := l.Network.Clusters
	// Registered after startLab's cleanup, so it runs first, while the lab still runs.
	t.Cleanup(func() {
		if t.Failed() {
			logOperatorState(t, k, dir, hubKubeconfig, l)
		}
	})

	t.Run("operators", func(t *testing.T) {
		crds := filepath.Join(testenv.RepoRoot(t), "charts", "octopus-operator", "crds", "zz_generated.fabric.yaml")
		t.Logf("hub: %s", k.run(t, hubKubeconfig, "", "apply", "--server-side", "-f", crds))
		k.run(t, hubKubeconfig, "", "wait", "--for=condition=Established", "--timeout=60s", "crd/fabrics.octopus.io")
		err := l.Env.StartProcess(controlplane.ProcessOptions{
			Name: hubOperatorProcess, Binary: bins["octopus-operator"], RestartOnCrash: true,
			// One replica: no Lease to elect with (and no octopus-operator namespace on the
			// hub to keep it in). The lab's processes share the host's network namespace.
			Args: []string{"--kubeconfig", hubKubeconfig, "--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=0"},
		})
		if err != nil {
			t.Fatal(err)
		}
		// The members' operators install at once: each cluster's nodes pull the image.
		start := time.Now()
		errs := make([]error, len(members))
		var wg sync.WaitGroup
		for i, c := range members {
			wg.Go(func() {
				_, errs[i] = release.Install(ctx, l.Env.Cluster(c.Name).RESTConfig(), release.Options{
					Chart: charts.Operator, Namespace: v1alpha1.OperatorNamespace, AppVersion: version.Version,
					Wait: true, Timeout: 4 * time.Minute,
				})
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("installing the operator chart: %v", err)
		}
		t.Logf("the operator chart's pods were ready in both clusters %.1fs after install", time.Since(start).Seconds())
		for _, c := range members {
			t.Logf("%s: kubectl get pods -n %s -o wide:\n%s", c.Name, v1alpha1.OperatorNamespace,
				k.run(t, l.Env.Cluster(c.Name).Kubeconfig, "", "get", "pods", "-n", v1alpha1.OperatorNamespace, "-o", "wide"))
		}
	})
	if t.Failed() {
		return
	}

	var secretRef string // namespace/name of the hub's broker-info Secret
	t.Run("hub fabric", func(t *testing.T) {
		start := time.Now()
		k.run(t, hubKubeconfig, "apiVersion: octopus.io/v1alpha1\nkind: Fabric\nmetadata: {name: octopus}\nspec:\n  hubConfig: {}\n", "apply", "-f", "-")
		w := newFabricWatch(t, start, map[string]string{lab.HubName: hubKubeconfig})
		f := w.until(t, 3*time.Minute, "the hub Fabric BrokerReady with its Secret", func(f *v1alpha1.Fabric) bool {
			return conditionIs(f, v1alpha1.FabricBrokerReady, metav1.ConditionTrue, "") && f.Status.BrokerInfoSecret != ""
		})[lab.HubName]
		secretRef = f.Status.BrokerInfoSecret
		t.Logf("hub: BrokerReady after %.1fs, broker-info in Secret %s", time.Since(start).Seconds(), secretRef)
	})
	if t.Failed() {
		return
	}

	fabrics := map[string]string{}
	for _, c := range members {
		fabrics[c.Name] = l.Env.Cluster(c.Name).Kubeconfig
	}
	var joined map[string]*v1alpha1.Fabric
	t.Run("member fabrics", func(t *testing.T) {
		ns, name, ok := strings.Cut(secretRef, "/")
		if !ok {
			t.Fatalf("status.brokerInfoSecret %q is not namespace/name", secretRef)
		}
		encoded := k.run(t, hubKubeconfig, "", "get", "secret", "-n", ns, name, "-o", `go-template={{index .data "`+v1alpha1.BrokerInfoKey+`"}}`)
		if encoded == "" {
			t.Fatalf("Secret %s has no key %s", secretRef, v1alpha1.BrokerInfoKey)
		}
		start := time.Now()
		apply := func(c labnet.ClusterNet) {
			kubeconfig := fabrics[c.Name]
			// The Secret goes where joinConfig.brokerInfoSecretRef looks by default.
			k.run(t, kubeconfig, fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: %s, namespace: %s}\ndata:\n  %s: %s\n",
				name, v1alpha1.OperatorNamespace, v1alpha1.BrokerInfoKey, encoded), "apply", "-f", "-")
			// Cloud preparation is to choose the gateway nodes: none may be one already.
			t.Logf("%s: %s", c.Name, k.run(t, kubeconfig, "", "label", "nodes", "--all", v1alpha1.GatewayNodeLabel+"-"))
			// Join discovers no pod CIDR in the lab (its kube-controller-manager is no pod),
			// so the Fabric names it, as the lab's own join does.
			k.run(t, kubeconfig, fmt.Sprintf(`apiVersion: octopus.io/v1alpha1
kind: Fabric
metadata: {name: octopus}
spec:
  joinConfig:
    clusterID: %s
    brokerInfoSecretRef: {name: %s}
    podCIDRs: [%q]
  cloudPrepareConfig:
    provider: generic
    gateways: %d
`, c.Name, name, l.Env.Cluster(c.Name).PodCIDR.String(), operatorLabGateways), "apply", "-f", "-")
		}
		// The first member joins alone: nothing to connect to is Ready, and says so
		// (GatewaysConnected and Ready True, reason NoOtherClusters), not a red light.
		first, rest := members[0], members[1:]
		apply(first)
		w := newFabricWatch(t, start, map[string]string{first.Name: fabrics[first.Name]})
		alone := w.until(t, 8*time.Minute, first.Name+"'s Fabric Ready alone", func(f *v1alpha1.Fabric) bool {
			return conditionIs(f, v1alpha1.FabricReady, metav1.ConditionTrue, operator.ReasonNoOtherClusters) &&
				conditionIs(f, v1alpha1.FabricGatewaysConnected, metav1.ConditionTrue, operator.ReasonNoOtherClusters)
		})[first.Name]
		t.Logf("%s: Ready alone %.1fs after it was applied: %s", first.Name, time.Since(start).Seconds(),
			meta.FindStatusCondition(alone.Status.Conditions, v1alpha1.FabricReady).Message)
		for _, c := range rest {
			apply(c)
		}
		// Then the others: from the moment a second cluster is on the hub (plus the operator's
		// retry interval, which is when a lone cluster looks again, and a reconcile's own time:
		// under CI's load one took 16.5 s from the last update to the next, CI19), no Fabric may
		// say its gateways are connected while its Peer is not connected to every other member.
		hubc := kubeClient(t, hubKubeconfig)
		live := &operatorLive{ctx: ctx, hub: hubc, members: members}
		var othersSince time.Time
		w = newFabricWatch(t, start, fabrics)
		joined = w.until(t, 8*time.Minute, "every member Fabric Ready", func(f *v1alpha1.Fabric) bool {
			if othersSince.IsZero() {
				cls := &v1alpha1.ClusterList{}
				if err := hubc.List(ctx, cls, client.InNamespace(v1alpha1.DefaultHubNamespace)); err == nil && len(cls.Items) > 1 {
					othersSince = time.Now()
					t.Logf("%6.1fs: %d clusters on the hub", time.Since(start).Seconds(), len(cls.Items))
				}
			}
			if c := meta.FindStatusCondition(f.Status.Conditions, v1alpha1.FabricGatewaysConnected); c != nil && c.Status == metav1.ConditionTrue &&
				!othersSince.IsZero() && time.Since(othersSince) > operator.DefaultRetryInterval+operatorReconcileSlack {
				p, err := live.peer(f.Spec.JoinConfig.ClusterID)
				if err == nil {
					err = live.connected(p)
				}
				if err != nil {
					t.Errorf("%s: GatewaysConnected=True %s (%s) while %v", f.Spec.JoinConfig.ClusterID, c.Reason, c.Message, err)
				}
			}
			return conditionIs(f, v1alpha1.FabricReady, metav1.ConditionTrue, "Ready") && f.Status.ObservedGeneration == f.Generation
		})
		t.Logf("both member Fabrics Ready %.1fs after they were applied", time.Since(start).Seconds())
		for _, c := range members {
			t.Logf("%s: kubectl get fabric -o wide:\n%s", c.Name, k.run(t, fabrics[c.Name], "", "get", "fabric", "-o", "wide"))
		}
	})
	if t.Failed() {
		return
	}

	t.Run("generic prepare", func(t *testing.T) {
		for _, c := range members {
			// By count the provider orders the nodes by name, and the lab names its underlay
			// nodes first: the first requested ones are the gateways.
			want := gatewayNodes(c.Nodes)[:operatorLabGateways]
			cs := clientset(t, fabrics[c.Name])
			nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.GatewayNodeLabel + "=true"})
			if err != nil {
				t.Fatal(err)
			}
			var labelled []string
			for _, n := range nodes.Items {
				labelled = append(labelled, n.Name)
				if n.Annotations[operator.PreparedByAnnotation] == "" {
					t.Errorf("%s: node %s is a gateway but not marked %s: the operator did not label it", c.Name, n.Name, operator.PreparedByAnnotation)
				}
			}
			slices.Sort(labelled)
			var reported []string
			for _, g := range joined[c.Name].Status.GatewayNodes {
				reported = append(reported, g.Name+" ("+g.Endpoint+")")
			}
			t.Logf("%s: the operator labelled %v of %d nodes as gateways (requested %d); status.gatewayNodes %v",
				c.Name, labelled, len(c.Nodes), operatorLabGateways, reported)
			if !slices.Equal(labelled, want) || len(reported) != len(want) {
				t.Errorf("%s: gateway nodes %v, reported %v; want %v, the first of the lab's underlay nodes %v", c.Name, labelled, reported, want, gatewayNodes(c.Nodes))
			}
		}
	})
	if t.Failed() {
		return
	}

	t.Run("verify", func(t *testing.T) {
		report, err := runVerify(ctx, t, l, bins["octopus"], 3*time.Minute)
		if err != nil || !report.Passed || len(report.Results) != 6 {
			t.Fatalf("verify: %v, passed %v, %d results; want 6 passing checks", err, report.Passed, len(report.Results))
		}
	})
	if t.Failed() {
		return
	}

	t.Run("host firewall", func(t *testing.T) {
		// udp dport 4500 counter packets N bytes M accept (a set when there are several ports).
		rule := regexp.MustCompile(`udp dport (?:\{ )?` + strconv.Itoa(gateway.DefaultListenPort) + `(?: \})? counter packets (\d+) bytes \d+ accept`)
		for _, c := range members {
			// The nodes a gateway runs on: the spare underlay node runs none, as workers.
			var gws []string
			for _, g := range joined[c.Name].Status.GatewayNodes {
				gws = append(gws, g.Name)
			}
			for _, n := range c.Nodes {
				out, err := exec.CommandContext(ctx, "ip", "netns", "exec", n.Netns, "nft", "list", "table", "inet", owner.HostFirewallNFTTable).CombinedOutput()
				if !slices.Contains(gws, n.Name) {
					if err == nil {
						t.Errorf("%s runs no gateway but has table inet %s:\n%s", n.Name, owner.HostFirewallNFTTable, out)
					}
					continue
				}
				t.Logf("%s: nft list table inet %s: %v\n%s", n.Name, owner.HostFirewallNFTTable, err, out)
				m := rule.FindSubmatch(out)
				if err != nil || m == nil {
					t.Errorf("%s: no rule accepting UDP %d in table inet %s", n.Name, gateway.DefaultListenPort, owner.HostFirewallNFTTable)
					continue
				}
				// The tunnel to the other cluster went through this node's port.
				if packets, _ := strconv.Atoi(string(m[1])); packets == 0 {
					t.Errorf("%s: the accept rule counted no packet, though verify crossed the tunnel", n.Name)
				}
			}
		}
	})
	if t.Failed() {
		return
	}

	t.Run("aws", func(t *testing.T) {
		c := members[1]
		start := time.Now()
		k.run(t, fabrics[c.Name], "", "patch", "fabric", v1alpha1.FabricName, "--type=merge", "-p", `{"spec":{"cloudPrepareConfig":{"provider":"aws"}}}`)
		w := newFabricWatch(t, start, map[string]string{c.Name: fabrics[c.Name]})
		f := w.until(t, 2*time.Minute, c.Name+"'s Fabric reporting aws unavailable", func(f *v1alpha1.Fabric) bool {
			return f.Status.ObservedGeneration == f.Generation &&
				conditionIs(f, v1alpha1.FabricCloudPrepared, metav1.ConditionFalse, operator.ReasonProviderUnavailable) &&
				conditionIs(f, v1alpha1.FabricReady, metav1.ConditionFalse, operator.ReasonProviderUnavailable)
		})[c.Name]
		t.Logf("%s: CloudPrepared=False %s after %.1fs: %s", c.Name, operator.ReasonProviderUnavailable, time.Since(start).Seconds(),
			meta.FindStatusCondition(f.Status.Conditions, v1alpha1.FabricCloudPrepared).Message)
		// Back to generic, for the live changes that follow: the same node is prepared again.
		start = time.Now()
		k.run(t, fabrics[c.Name], "", "patch", "fabric", v1alpha1.FabricName, "--type=merge", "-p", `{"spec":{"cloudPrepareConfig":{"provider":"generic"}}}`)
		w.until(t, 3*time.Minute, c.Name+"'s Fabric Ready with provider generic again", func(f *v1alpha1.Fabric) bool {
			return f.Status.ObservedGeneration == f.Generation && conditionIs(f, v1alpha1.FabricReady, metav1.ConditionTrue, "")
		})
		t.Logf("%s: Ready again %.1fs after provider generic was restored", c.Name, time.Since(start).Seconds())
	})
	if t.Failed() {
		return
	}

	// Issue 18's live changes: each a patch of the Fabric that takes effect without delete or
	// re-create, with cross-cluster traffic measured through it.
	live := &operatorLive{ctx: ctx, k: k, l: l, hub: kubeClient(t, hubKubeconfig), members: members, fabrics: fabrics}
	t.Run("traffic", live.startTraffic)
	if t.Failed() {
		return
	}
	t.Run("backend vxlan", func(t *testing.T) { live.switchBackend(t, v1alpha1.BackendVXLAN) })
	if t.Failed() {
		return
	}
	t.Run("backend wireguard", func(t *testing.T) { live.switchBackend(t, v1alpha1.BackendWireGuard) })
	if t.Failed() {
		return
	}
	t.Run("health interval", func(t *testing.T) { live.healthInterval(t, members[0], "2s") })
	if t.Failed() {
		return
	}
	t.Run("gateway move", func(t *testing.T) { live.moveGateway(t, members[0]) })
	if t.Failed() {
		return
	}
	// Last: the cluster is gone afterwards.
	t.Run("delete", func(t *testing.T) { live.deleteMember(t, members[len(members)-1]) })
}

// operatorLabGateways is the member Fabrics' cloudPrepareConfig.gateways: one of each
// member's two underlay nodes, so that the other is free to move the gateway to.
const operatorLabGateways = 1

// gatewayNodes are the names of the lab's gateway nodes (those on the underlay), sorted.
func gatewayNodes(nodes []labnet.NodeNet) []string {
	var out []string
	for _, n := range nodes {
		if n.Gateway {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out
}

// conditionIs reports whether f has condition typ with status and, unless empty, reason.
func conditionIs(f *v1alpha1.Fabric, typ string, status metav1.ConditionStatus, reason string) bool {
	c := meta.FindStatusCondition(f.Status.Conditions, typ)
	return c != nil && c.Status == status && (reason == "" || c.Reason == reason)
}

// fabricWatch polls the Fabric of several clusters and logs every condition transition it
// sees (status or reason), so that a run tells how far each operator got and when.
type fabricWatch struct {
	start   time.Time
	clients map[string]client.Client
	seen    map[string]string // cluster/type → "status reason"
}

func newFabricWatch(t *testing.T, start time.Time, kubeconfigs map[string]string) *fabricWatch {
	w := &fabricWatch{start: start, clients: map[string]client.Client{}, seen: map[string]string{}}
	for name, kubeconfig := range kubeconfigs {
		w.clients[name] = kubeClient(t, kubeconfig)
	}
	return w
}

// until polls until done holds for every cluster's Fabric and returns them.
func (w *fabricWatch) until(t *testing.T, timeout time.Duration, what string, done func(*v1alpha1.Fabric) bool) map[string]*v1alpha1.Fabric {
	t.Helper()
	got := map[string]*v1alpha1.Fabric{}
	names := make([]string, 0, len(w.clients))
	for name := range w.clients {
		names = append(names, name)
	}
	slices.Sort(names)
	waitFor(t, timeout, what, func() error {
		var pending []string
		for _, name := range names {
			f := &v1alpha1.Fabric{}
			if err := w.clients[name].Get(context.Background(), client.ObjectKey{Name: v1alpha1.FabricName}, f); err != nil {
				pending = append(pending, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			for _, c := range f.Status.Conditions {
				key, state := name+"/"+c.Type, string(c.Status)+" "+c.Reason
				if w.seen[key] != state {
					w.seen[key] = state
					t.Logf("%6.1fs %s: %s=%s %s: %s", time.Since(w.start).Seconds(), name, c.Type, c.Status, c.Reason, c.Message)
				}
			}
			got[name] = f
			if !done(f) {
				pending = append(pending, name)
			}
		}
		if len(pending) > 0 {
			return fmt.Errorf("pending: %s", strings.Join(pending, "; "))
		}
		return nil
	})
	return got
}

// kubectlRunner runs the lab's kubectl.
type kubectlRunner struct {
	bin string
	ctx context.Context
}

// run runs kubectl against kubeconfig with stdin (if not empty) and returns its trimmed
// standard output; a failure fails the test with its standard error.
func (k kubectlRunner) run(t *testing.T, kubeconfig, stdin string, args ...string) string {
	t.Helper()
	out, err := k.output(kubeconfig, stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func (k kubectlRunner) output(kubeconfig, stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(k.ctx, k.bin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// logOperatorState logs, for a failed run, the operators' side: the hub operator's log, and
// each member's Fabric, its operator's log and the pods of every namespace.
func logOperatorState(t *testing.T, k kubectlRunner, dir, hubKubeconfig string, l *lab.Lab) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k.ctx = ctx
	if data, err := os.ReadFile(filepath.Join(dir, "logs", hubOperatorProcess+".log")); err == nil {
		if len(data) > 3*failureLogLimit {
			data = data[len(data)-3*failureLogLimit:]
		}
		t.Logf("the hub operator's log:\n%s", data)
	}
	out, err := k.output(hubKubeconfig, "", "get", "fabric", "-o", "yaml")
	t.Logf("hub: kubectl get fabric -o yaml: %v\n%s", err, out)
	for _, c := range l.Network.Clusters {
		kubeconfig := l.Env.Cluster(c.Name).Kubeconfig
		for _, args := range [][]string{
			{"get", "fabric", "-o", "yaml"},
			{"get", "pods", "-A", "-o", "wide"},
			{"logs", "-n", v1alpha1.OperatorNamespace, "deployment/octopus-operator", "--tail=60"},
			{"logs", "-n", v1alpha1.SystemNamespace, "daemonset/octopus-gateway", "--tail=40"},
		} {
			out, err := k.output(kubeconfig, "", args...)
			t.Logf("%s: kubectl %s: %v\n%s", c.Name, strings.Join(args, " "), err, out)
		}
	}
}
