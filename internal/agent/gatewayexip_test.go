package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlcluster "sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

func hubGatewayExIP(cluster, gateway, externalIP, global string) *v1alpha1.GatewayExIp {
	return &v1alpha1.GatewayExIp{
		ObjectMeta: metav1.ObjectMeta{Namespace: "octopus-hub", Name: v1alpha1.GatewayExIpHubName(cluster, gateway), Labels: map[string]string{v1alpha1.ClusterLabel: cluster}},
		Spec:       v1alpha1.GatewayExIPSpec{ExternalIP: externalIP, GlobalnetCIDR: global},
	}
}

// TestWantedGatewayExIPs checks what the syncer copies: other clusters' gateways still on the
// hub, inside their registered global CIDR, under their member name; never this cluster's own.
func TestWantedGatewayExIPs(t *testing.T) {
	clusters := []v1alpha1.Cluster{
		*cluster("a", "", "10.1.0.0/16", "242.1.0.0/16", ""),
		*cluster("b", "", "10.2.0.0/16", "242.2.0.0/16", ""),
		*cluster("x-a", "", "10.3.0.0/16", "242.3.0.0/16", ""),
		*cluster("a-b", "", "10.4.0.0/16", "242.4.0.0/16", ""),
	}
	forged := hubGatewayExIP("b", "blue", "242.2.0.3", "242.2.0.0/16")
	forged.Labels[v1alpha1.ClusterLabel] = "x-a"
	hub := []v1alpha1.GatewayExIp{
		*hubGatewayExIP("a", "red", "242.1.0.1", "242.1.0.0/16"),       // our own
		*hubGatewayExIP("b", "red", "242.2.0.2", "242.2.0.0/16"),       // copied
		*hubGatewayExIP("b", "green", "242.1.0.4", "242.1.0.0/16"),     // a's range: refused
		*hubGatewayExIP("gone", "red", "242.5.0.5", "242.5.0.0/16"),    // cluster left
		*hubGatewayExIP("x-a", "red-b", "242.3.0.6", "242.3.0.0/16"),   // red-b-x-a
		*hubGatewayExIP("a-b", "red", "242.4.0.7", "242.4.0.0/24"),     // red-a-b
		*hubGatewayExIP("b", "red-a", "242.2.128.8", "242.2.128.0/17"), // red-a-b too: refused
		*hubGatewayExIP("b", "grey", "10.1.0.9", "242.2.0.0/16"),       // an address of a's: refused
		*hubGatewayExIP("b", "brown", "", "242.2.0.0/16"),              // no address: refused
		*forged,
	}
	want, refused := wantedGatewayExIPs("a", hub, clusters)
	var got []string
	for _, name := range sortedKeys(want) {
		g := want[name]
		got = append(got, fmt.Sprintf("%s/%s=%s,%s,%s", g.Namespace, name, g.Labels[v1alpha1.ClusterLabel], g.Labels[gatewayExIPGatewayLabel], g.Spec.ExternalIP))
	}
	wantNames := "octopus-system/red-a-b=a-b,red,242.4.0.7 octopus-system/red-b=b,red,242.2.0.2 octopus-system/red-b-x-a=x-a,red-b,242.3.0.6"
	if strings.Join(got, " ") != wantNames {
		t.Errorf("copies:\n%s\nwant\n%s", strings.Join(got, " "), wantNames)
	}
	msgs := fmt.Sprint(refused)
	for _, w := range []string{"b.green of cluster b: globalnetcidr 242.1.0.0/16 is not inside the cluster's global CIDR 242.2.0.0/16", "b.grey of cluster b: externalip 10.1.0.9 is not inside the cluster's global CIDR 242.2.0.0/16", `b.brown of cluster b: externalip ""`, "b.red-a of cluster b: its member name red-a-b is taken by gateway red of cluster a-b", "b.blue on the hub: its name is not <cluster>.<gateway> of its owner \"x-a\""} {
		if !strings.Contains(msgs, w) {
			t.Errorf("refusals %s\nlack %q", msgs, w)
		}
	}
	if len(refused) != 5 {
		t.Errorf("%d refusals, want 5: %v", len(refused), refused)
	}
}

// TestGatewayExIPSync runs the syncer against a real hub and member: cluster b's GatewayExIp
// appears in a within 10 s, follows an update, goes when the hub's goes and when b's Cluster
// does (leave, revoke); a's own is never copied back, and a copy deleted by hand comes back.
func TestGatewayExIPSync(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub", "a")
	hubCfg, memberCfg := env.Cluster("hub").RESTConfig(), env.Cluster("a").RESTConfig()
	testenv.InstallCRDs(t, hubCfg)
	testenv.InstallCRDs(t, memberCfg)
	hub, member := testenv.Client(t, hubCfg), testenv.Client(t, memberCfg)
	ctx := t.Context()
	for c, ns := range map[client.Client]string{hub: "octopus-hub", member: v1alpha1.SystemNamespace} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, cl := range []*v1alpha1.Cluster{cluster("a", "", "10.1.0.0/16", "242.1.0.0/16", ""), cluster("b", "", "10.2.0.0/16", "242.2.0.0/16", "")} {
		if err := hub.Create(ctx, cl); err != nil {
			t.Fatal(err)
		}
	}
	own := hubGatewayExIP("a", "red", "242.1.0.1", "242.1.0.0/16")
	if err := hub.Create(ctx, own); err != nil {
		t.Fatal(err)
	}

	mgr, copies := startAgentManager(t, memberCfg)
	if err := SetupGatewayExIPSync(mgr, copies, hubCfg, "octopus-hub", "a"); err != nil {
		t.Fatal(err)
	}

	copyOf := func(name string) (*v1alpha1.GatewayExIp, error) {
		g := &v1alpha1.GatewayExIp{}
		return g, member.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: name}, g)
	}
	hasCopy := func(name, externalIP string) func() error {
		return func() error {
			g, err := copyOf(name)
			if err != nil {
				return err
			}
			if g.Spec.ExternalIP != externalIP || g.Spec.GlobalnetCIDR != "242.2.0.0/16" || g.Labels[v1alpha1.ClusterLabel] != "b" {
				return fmt.Errorf("copy %s: %+v labels %v; want external IP %s", name, g.Spec, g.Labels, externalIP)
			}
			return nil
		}
	}
	noCopy := func(name string) func() error {
		return func() error {
			if _, err := copyOf(name); !apierrors.IsNotFound(err) {
				return fmt.Errorf("copy %s still there (%w)", name, err)
			}
			return nil
		}
	}

	remote := hubGatewayExIP("b", "red", "242.2.0.2", "242.2.0.0/16")
	if err := hub.Create(ctx, remote); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "b's GatewayExIp appears in a as red-b", hasCopy("red-b", "242.2.0.2"))
	if _, err := copyOf(v1alpha1.GatewayExIpName("red", "a")); !apierrors.IsNotFound(err) {
		t.Errorf("a's own GatewayExIp was copied back into a (%v)", err)
	}

	remote.Spec.ExternalIP = "242.2.0.22" // a gateway failover
	if err := hub.Update(ctx, remote); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the copy follows the hub's update", hasCopy("red-b", "242.2.0.22"))

	if err := member.Delete(ctx, &v1alpha1.GatewayExIp{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.SystemNamespace, Name: "red-b"}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "a copy deleted by hand is put back", hasCopy("red-b", "242.2.0.22"))

	if err := hub.Delete(ctx, remote); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the copy goes with the hub's", noCopy("red-b"))

	// b's Cluster goes (leave, revoke): its gateways go with it, even where its GatewayExIp
	// was left behind on the hub.
	blue := hubGatewayExIP("b", "blue", "242.2.0.3", "242.2.0.0/16")
	if err := hub.Create(ctx, blue); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "b's blue gateway appears in a", hasCopy("blue-b", "242.2.0.3"))
	if err := hub.Delete(ctx, cluster("b", "", "", "", "")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "b's copies go with its Cluster", noCopy("blue-b"))

	// Objects of the kind in the namespace that are not copies are left alone.
	if _, err := copyOf(v1alpha1.GatewayExIpName("red", "a")); !apierrors.IsNotFound(err) {
		t.Errorf("a's own GatewayExIp in a: %v", err)
	}
}

// startAgentManager runs a manager with the agent controller's options against cfg until the
// test ends, with the GatewayExIp copies' cache; the caller sets its controllers up on it
// afterwards, as the agent does once it has the hub's answer.
func startAgentManager(t *testing.T, cfg *rest.Config) (manager.Manager, ctrlcluster.Cluster) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	mgr, err := manager.New(cfg, ControllerOptions{Member: cfg, MetricsBindAddress: "0"}.managerOptions())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	copies, err := NewGatewayExIPCopies(mgr)
	if err != nil {
		t.Fatal(err)
	}
	return mgr, copies
}
