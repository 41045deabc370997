package lab_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/gateway"
	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestOverlappingCIDRs runs `lab up --overlapping-cidrs` (hub + 2 clusters): both clusters get
// the same pod and service CIDRs, join with globalnet addressing (direct addressing would
// refuse the overlap), run pods with addresses from the same range, and their gateways refuse
// to tunnel to each other with a status condition that says why, rather than route one
// cluster's pods into the other.
func TestOverlappingCIDRs(t *testing.T) {
	testenv.LabNetwork(t)
	binDir := testenv.BinDir(t)
	bins := buildCommands(t, "octopus-agent")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// The network of a lab whose run was killed outright, processes and all, is in the way of
	// this one (same API address, same LAN addresses) and nothing uses it: Up removes it.
	abandoned := abandonedLabNetwork(t)
	l, _ := startLab(ctx, t, lab.Options{
		Clusters: 2, BinDir: binDir, AgentBinary: bins["octopus-agent"], OverlappingCIDRs: true,
	})
	if namespaces, links, err := labnet.Leftovers(abandoned); err != nil || len(namespaces)+len(links) > 0 {
		t.Errorf("after lab up, the abandoned lab %s still has namespaces %v, links %v (%v)", abandoned, namespaces, links, err)
	}
	c1, c2 := l.Env.Cluster(lab.ClusterName(1)), l.Env.Cluster(lab.ClusterName(2))
	if c1.PodCIDR != c2.PodCIDR || c1.ServiceCIDR != c2.ServiceCIDR {
		t.Fatalf("CIDRs differ: %s/%s vs %s/%s", c1.PodCIDR, c1.ServiceCIDR, c2.PodCIDR, c2.ServiceCIDR)
	}

	hubc := kubeClient(t, l.Env.Cluster(lab.HubName).Kubeconfig)
	for _, name := range l.Members {
		cl := &v1alpha1.Cluster{}
		if err := hubc.Get(ctx, client.ObjectKey{Namespace: v1alpha1.DefaultHubNamespace, Name: name}, cl); err != nil {
			t.Fatal(err)
		}
		if cl.Spec.Addressing != v1alpha1.AddressingGlobalnet || strings.Join(cl.Spec.PodCIDRs, ",") != c1.PodCIDR.String() {
			t.Errorf("Cluster %s: addressing %q, pod CIDRs %v; want globalnet and %s", name, cl.Spec.Addressing, cl.Spec.PodCIDRs, c1.PodCIDR)
		}
	}

	// The cluster DNS pods of both clusters run with addresses from the one shared range.
	for _, cp := range []string{c1.Kubeconfig, c2.Kubeconfig} {
		mc := kubeClient(t, cp)
		waitFor(t, 2*time.Minute, "a running CoreDNS pod in the shared pod range", func() error {
			pods := &corev1.PodList{}
			if err := mc.List(ctx, pods, client.InNamespace("kube-system"), client.MatchingLabels{"k8s-app": "kube-dns"}); err != nil {
				return err
			}
			for _, p := range pods.Items {
				if ip, err := netip.ParseAddr(p.Status.PodIP); err == nil && p.Status.Phase == corev1.PodRunning && c1.PodCIDR.Contains(ip) {
					return nil
				}
			}
			return fmt.Errorf("%d kube-dns pods, none running in %s", len(pods.Items), c1.PodCIDR)
		})
	}

	// Each gateway refuses the other cluster's Peer, naming the overlap and the way out.
	for _, name := range l.Members {
		waitFor(t, 2*time.Minute, name+"'s Peer to refuse the overlapping cluster", func() error {
			p := &v1alpha1.Peer{}
			if err := hubc.Get(ctx, client.ObjectKey{Namespace: v1alpha1.DefaultHubNamespace, Name: name}, p); err != nil {
				return err
			}
			cond := meta.FindStatusCondition(p.Status.Conditions, gateway.ConditionPeersAccepted)
			if cond == nil || cond.Status != "False" || cond.Reason != gateway.ReasonOverlappingSubnets || !strings.Contains(cond.Message, "globalnet") {
				return fmt.Errorf("condition %s = %+v", gateway.ConditionPeersAccepted, cond)
			}
			return nil
		})
	}
}
