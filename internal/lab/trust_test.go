package lab_test

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/gateway"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/lab"
)

// checkRouteHijack: cluster2's own hub credential (what a compromised member holds) rewrites
// its Peer to advertise a public /8 and the cloud metadata address, then also cluster1's pod
// CIDR. The prefixes stay off every node of every cluster, cluster3 keeps reaching cluster1
// and cluster2 (whose own CIDRs are still routed), and cluster3's Peer names the refused
// prefixes, as does every other observer's (the hub's gateway in the hub topology). Before
// advertised = allocated, the first rewrite put both prefixes on every node and the second
// disconnected cluster2 as a whole. It needs a lab of at least three clusters with echo pods
// (startEchoPods); it restores cluster2's Peer at the end. TestHubTopology runs it, where the
// hub's gateway, which tunnels to every cluster, must refuse as the members do.
func checkRouteHijack(ctx context.Context, t *testing.T, l *lab.Lab, pods map[string][]xpod, observers ...string) {
	c1, c2, c3 := l.Network.Clusters[0].Name, l.Network.Clusters[1].Name, l.Network.Clusters[2].Name
	reachable := func(what string, timeout time.Duration) {
		t.Helper()
		for _, dst := range []string{c1, c2} {
			checkTCP(t, what, pods[c3][1], pods[dst][1], timeout)
		}
	}
	reachable("before the attack", 90*time.Second)

	// The attacker holds cluster2's hub credential, as its agents do.
	cred, err := hubaccess.LoadCredential(ctx, kubeClient(t, l.Env.Cluster(c2).Kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	asC2, err := client.New(cred.RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: cred.Namespace, Name: c2}
	honest := &v1alpha1.Peer{}
	if err := asC2.Get(ctx, key, honest); err != nil {
		t.Fatal(err)
	}
	advertise := func(extra ...string) {
		t.Helper()
		p := &v1alpha1.Peer{}
		if err := asC2.Get(ctx, key, p); err != nil {
			t.Fatal(err)
		}
		p.Spec.Subnets = append(slices.Clone(honest.Spec.Subnets), extra...)
		if err := asC2.Update(ctx, p); err != nil {
			t.Fatalf("cluster2's credential rewriting its Peer: %v", err)
		}
	}
	defer func() {
		p := &v1alpha1.Peer{}
		if err := asC2.Get(context.Background(), key, p); err == nil {
			p.Spec.Subnets = honest.Spec.Subnets
			_ = asC2.Update(context.Background(), p)
		}
	}()

	const public, metadata = "8.0.0.0/8", "169.254.169.254/32"
	c1Pod := l.Env.Cluster(c1).PodCIDR.Masked().String()
	hubc := kubeClient(t, l.Env.Cluster(lab.HubName).Kubeconfig)
	refusedBy := func(observer string, prefixes ...string) func() error {
		return func() error {
			p := &v1alpha1.Peer{}
			if err := hubc.Get(ctx, client.ObjectKey{Namespace: cred.Namespace, Name: observer}, p); err != nil {
				return err
			}
			c := meta.FindStatusCondition(p.Status.Conditions, gateway.ConditionSubnetsAccepted)
			if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "cluster "+c2) {
				return fmt.Errorf("%s's condition %s: %+v", observer, gateway.ConditionSubnetsAccepted, c)
			}
			for _, s := range prefixes {
				if !strings.Contains(c.Message, s) {
					return fmt.Errorf("%s's condition does not name %s: %s", observer, s, c.Message)
				}
			}
			return nil
		}
	}
	// offEveryNode fails while any node of any cluster routes one of the prefixes: the route
	// agents' routes, the tunnel driver's, or any other.
	offEveryNode := func(prefixes ...string) {
		t.Helper()
		// Long enough for every gateway to have reconciled the rewritten Peer.
		time.Sleep(5 * time.Second)
		for _, c := range l.Network.Clusters {
			for _, n := range c.Nodes {
				for _, s := range prefixes {
					out, err := exec.Command("ip", "-n", n.Netns, "route", "show", "table", "all", "match", s).CombinedOutput()
					if err != nil {
						t.Fatalf("ip route on %s: %v: %s", n.Name, err, out)
					}
					for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
						if strings.HasPrefix(line, s) || strings.HasPrefix(line, strings.TrimSuffix(s, "/32")+" ") {
							t.Errorf("node %s of %s routes the hijacked prefix: %q", n.Name, c.Name, line)
						}
					}
				}
			}
		}
	}

	advertise(public, metadata)
	for _, observer := range append([]string{c1, c3}, observers...) {
		waitFor(t, 60*time.Second, observer+" to refuse cluster2's public and metadata prefixes", refusedBy(observer, public, metadata))
	}
	offEveryNode(public, metadata)
	reachable("with cluster2 advertising a public /8 and the metadata address", 30*time.Second)

	advertise(c1Pod, public, metadata)
	for _, observer := range append([]string{c3}, observers...) {
		waitFor(t, 60*time.Second, observer+" to refuse cluster2's claim on cluster1's pod CIDR", refusedBy(observer, c1Pod, public, metadata))
	}
	offEveryNode(public, metadata)
	reachable("with cluster2 also advertising cluster1's pod CIDR", 30*time.Second)
	t.Logf("cluster2's hijack of %s, %s and %s was refused; %s still reaches %s and %s", c1Pod, public, metadata, c3, c1, c2)
}
