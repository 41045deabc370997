package hub

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/manifests/render"
	"github.com/octopus-mcs/octopus/internal/pki"
	"github.com/octopus-mcs/octopus/internal/progress"
)

// InterconnectOptions put OVN-IC's interconnection databases on the hub (hub deploy
// --interconnect; docs/secondary-network.md "Interconnection databases on the hub").
type InterconnectOptions struct {
	// Image is the secondary network's image (ovsdb-server, OVN's IC schemas). Required.
	Image string
	// TransitSwitches are made at deploy. Optional: render.DefaultTransitSwitch.
	TransitSwitches []string
	// Addresses are the hub nodes' addresses the member clusters reach the databases at
	// (their ovn-ic-config's ic-db-host), written into the databases' certificate for Go
	// clients, which check names; OVN's own clients check only the CA. Optional.
	Addresses []netip.Addr
}

func (o *InterconnectOptions) validate() error {
	if o.Image == "" {
		return errors.New("interconnect: the image of the databases is required (--interconnect-image: the secondary network's image, octopus-ovn)")
	}
	for _, a := range o.Addresses {
		if !a.IsValid() {
			return errors.New("interconnect: an address of the hub's nodes is empty (--interconnect-address takes an IP address)")
		}
	}
	return nil
}

// deployInterconnect issues the databases' certificates and applies their objects. The
// certificates come first: the pods mount them and would wait in ContainerCreating.
func deployInterconnect(ctx context.Context, cfg *rest.Config, c client.Client, ns string, o InterconnectOptions, p *progress.Reporter) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("interconnect: %w", err)
	}
	if err := EnsureInterconnectCertificates(ctx, cs, ns, o.Addresses, p); err != nil {
		return err
	}
	objs, err := InterconnectObjects(ns, o)
	if err != nil {
		return err
	}
	if err := kube.Apply(ctx, c, objs...); err != nil {
		return fmt.Errorf("interconnect: %w", err)
	}
	return nil
}

// InterconnectObjects are the objects deployInterconnect applies in hub namespace ns, the
// certificates' Secrets aside: the hub chart's interconnect values render the same
// (charts.TestInterconnectChartIsHubDeploys), so that the CLI and Helm install one thing.
func InterconnectObjects(ns string, o InterconnectOptions) ([]client.Object, error) {
	return render.Interconnect(render.InterconnectOptions{Namespace: ns, Image: o.Image, TransitSwitches: o.TransitSwitches})
}

// EnsureInterconnectCertificates keeps the interconnection CA (render.ICCASecret, made once,
// mounted by no pod) and the databases' certificate (render.ICDBSecret, issued again when
// missing, due or naming other addresses: pki.CA.Needs) in namespace ns of the hub. The same
// CA is to sign each member cluster's client certificate.
func EnsureInterconnectCertificates(ctx context.Context, cs kubernetes.Interface, ns string, addrs []netip.Addr, p *progress.Reporter) error {
	ca, err := pki.EnsureCA(ctx, cs, ns, render.ICCASecret, render.ICCASecret)
	if err != nil {
		return fmt.Errorf("interconnect: %w", err)
	}
	why, err := pki.EnsureLeaf(ctx, cs, ns, render.ICDBSecret, ca, render.ICDBLeaf(ns, addrs))
	if err != nil {
		return fmt.Errorf("interconnect: %w", err)
	}
	if why != "" {
		p.Step("Issued the interconnection databases' certificate in Secret %s/%s (%s)", ns, render.ICDBSecret, why)
	}
	return nil
}
