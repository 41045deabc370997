package cluster

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/octopus-mcs/octopus/internal/pki"
	"github.com/octopus-mcs/octopus/internal/progress"
)

// The Secrets of the secondary network's OVN TLS (charts/octopus-member/templates/ovn.yaml
// mounts them by these names): two CAs, which stay with the installer's credential and are
// mounted by no pod, and one leaf per component. Each leaf Secret also holds, as ca.crt, the
// CAs its holder trusts.
//
// OVSDB authorizes a client by the CA that signed it, and the NB database has no finer
// rule: whoever it trusts may rewrite every switch and port of the cluster. So the
// certificate every node holds (its ovn-controller's, which gateway-port reuses to read the
// SB) is signed by a CA of its own, the node CA, which the SB database trusts and the NB
// database does not: a compromised node can no longer write the NB. The central CA signs
// the databases' server certificates and the clients that run beside them or in the
// ovnmaster (ovn-northd, the ovnmaster, the cluster's ovn-ic), which both databases trust.
const (
	OVNCASecret     = "octopus-ovn-ca"
	OVNNodeCASecret = "octopus-ovn-node-ca"
	// OVNCentralSecret is the NB database's server certificate: it trusts the central CA
	// alone. OVNSouthboundSecret is the SB database's: it trusts the node CA too.
	OVNCentralSecret    = "octopus-ovn-central-tls"
	OVNSouthboundSecret = "octopus-ovn-sb-tls"
	OVNNorthdSecret     = "octopus-ovn-northd-tls"
	OVNControllerSecret = "octopus-ovn-controller-tls"
	OVNMasterSecret     = "octopus-ovnmaster-tls"
	// OVNInterconnectLocalSecret is the member's octopus-ovn-ic pods' certificate for their own
	// cluster's databases (their db-proxy presents it); the cluster's certificate for the
	// hub's IC databases is InterconnectSecret, of another CA.
	OVNInterconnectLocalSecret = "octopus-ovn-ic-local-tls"
)

// ovnCentralService is the member chart's Service of the OVN databases.
const ovnCentralService = "octopus-ovn-central"

// ovnLeaf is one component's certificate: what it certifies, whether the node CA signs it
// (the central CA otherwise), and whether its holder trusts the node CA's clients too (a
// server: the SB database).
type ovnLeaf struct {
	pki.Leaf
	byNodeCA, trustsNodes bool
}

// ovnLeaves are the certificates of the secondary network's OVN components in namespace ns:
// the databases' server certificates name the Service as the ovnmaster dials it (Go checks
// the name; OVN's own clients check only the CA) and 127.0.0.1, where ovn-northd dials them.
func ovnLeaves(ns string) map[string]ovnLeaf {
	svc := ovnCentralService + "." + ns
	server := pki.Leaf{CommonName: "ovn-central", Server: true,
		DNSNames: []string{ovnCentralService, svc, svc + ".svc", svc + ".svc.cluster.local", "localhost"},
		IPs:      []netip.Addr{netip.MustParseAddr("127.0.0.1")}}
	return map[string]ovnLeaf{
		OVNCentralSecret:           {Leaf: server},
		OVNSouthboundSecret:        {Leaf: server, trustsNodes: true},
		OVNNorthdSecret:            {Leaf: pki.Leaf{CommonName: "ovn-northd", Client: true}},
		OVNControllerSecret:        {Leaf: pki.Leaf{CommonName: "ovn-controller", Client: true}, byNodeCA: true},
		OVNMasterSecret:            {Leaf: pki.Leaf{CommonName: "ovnmaster", Client: true}},
		OVNInterconnectLocalSecret: {Leaf: pki.Leaf{CommonName: "ovn-ic", Client: true}},
	}
}

// EnsureOVNCertificates issues what the member chart's secondary network needs to run its
// OVN databases on TLS with client certificates, into Secrets of namespace ns (which it
// creates if need be): the CA once, each component's certificate when missing or due
// (pki.CA.Needs). It runs before every install or upgrade of the chart with the secondary
// network on, so that running it again renews what is due and leaves the rest.
func EnsureOVNCertificates(ctx context.Context, cfg *rest.Config, ns string, p *progress.Reporter) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("issuing the OVN certificates: %w", err)
	}
	return ensureOVNCertificates(ctx, cs, ns, p)
}

func ensureOVNCertificates(ctx context.Context, cs kubernetes.Interface, ns string, p *progress.Reporter) error {
	if err := ensureNamespace(ctx, cs, ns); err != nil {
		return fmt.Errorf("issuing the OVN certificates: %w", err)
	}
	central, err := pki.EnsureCA(ctx, cs, ns, OVNCASecret, "octopus-ovn-ca")
	if err != nil {
		return err
	}
	nodes, err := pki.EnsureCA(ctx, cs, ns, OVNNodeCASecret, "octopus-ovn-node-ca")
	if err != nil {
		return err
	}
	for name, leaf := range ovnLeaves(ns) {
		// Every holder verifies the databases, which the central CA signs.
		signer, trust := central, []*pki.CA{central}
		if leaf.byNodeCA {
			signer = nodes
		}
		if leaf.trustsNodes {
			trust = append(trust, nodes)
		}
		why, err := pki.EnsureLeaf(ctx, cs, ns, name, signer, leaf.Leaf, trust...)
		if err != nil {
			return err
		}
		if why != "" {
			p.Step("Issued the OVN certificate of %s in Secret %s/%s (%s)", leaf.CommonName, ns, name, why)
		}
	}
	return nil
}

// ensureNamespace creates namespace ns unless it exists (Helm's CreateNamespace takes an
// existing one as it is).
func ensureNamespace(ctx context.Context, cs kubernetes.Interface, ns string) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	return nil
}
