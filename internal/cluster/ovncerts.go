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
// mounts them by these names): the CA, which stays with the installer's credential and is
// mounted by no pod, and one leaf per component. Each leaf Secret also holds the CA's
// certificate as ca.crt, the only CA its holder trusts.
const (
	OVNCASecret         = "octopus-ovn-ca"
	OVNCentralSecret    = "octopus-ovn-central-tls"
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

// ovnLeaves are the certificates of the secondary network's OVN components in namespace ns:
// the databases' server certificate names the Service as the ovnmaster dials it (Go checks
// the name; OVN's own clients check only the CA) and 127.0.0.1, where ovn-northd dials it.
func ovnLeaves(ns string) map[string]pki.Leaf {
	svc := ovnCentralService + "." + ns
	return map[string]pki.Leaf{
		OVNCentralSecret: {CommonName: "ovn-central", Server: true,
			DNSNames: []string{ovnCentralService, svc, svc + ".svc", svc + ".svc.cluster.local", "localhost"},
			IPs:      []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
		OVNNorthdSecret:            {CommonName: "ovn-northd", Client: true},
		OVNControllerSecret:        {CommonName: "ovn-controller", Client: true},
		OVNMasterSecret:            {CommonName: "ovnmaster", Client: true},
		OVNInterconnectLocalSecret: {CommonName: "ovn-ic", Client: true},
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
	if err := ensureNamespace(ctx, cs, ns); err != nil {
		return fmt.Errorf("issuing the OVN certificates: %w", err)
	}
	ca, err := pki.EnsureCA(ctx, cs, ns, OVNCASecret, "octopus-ovn-ca")
	if err != nil {
		return err
	}
	for name, leaf := range ovnLeaves(ns) {
		why, err := pki.EnsureLeaf(ctx, cs, ns, name, ca, leaf)
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
