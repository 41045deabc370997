package dnsconfig

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// ServiceName is the Service, in v1alpha1.SystemNamespace, in front of the cluster's
// octopus-dns pods. Join creates it so that its ClusterIP is known, and stable, before
// octopus-dns runs; the namespace's deletion at leave removes it.
const ServiceName = "octopus-dns"

// AppLabel selects the octopus-dns pods behind ServiceName.
var AppLabel = map[string]string{"app.kubernetes.io/name": "octopus-dns"}

// CoreDNSConfigMap and CorefileKey are where the cluster's CoreDNS keeps its configuration:
// kubeadm's names, which most distributions keep.
var CoreDNSConfigMap = client.ObjectKey{Namespace: "kube-system", Name: "coredns"}

// CorefileKey is the key of CoreDNSConfigMap that holds the Corefile.
const CorefileKey = "Corefile"

// Result says what Wire did, for the user.
type Result struct {
	// Target is the octopus-dns Service's address that the zone is forwarded to.
	Target netip.AddrPort
	// CoreDNS is false when the cluster has no kube-system/coredns ConfigMap: then nothing
	// was patched and the user must point their DNS at Target themselves.
	CoreDNS bool
	// Reload reports whether CoreDNS reloads its Corefile by itself; if not, its pods need a
	// restart to pick the change up.
	Reload bool
}

// Check reads the cluster's Corefile and returns an error wrapping ErrUnparsable if Wire
// would refuse it, so that join can stop before it changes anything.
func Check(ctx context.Context, c client.Reader) error {
	cm, err := coreDNS(ctx, c)
	if err != nil || cm == nil {
		return err
	}
	if _, err := Inspect(cm.Data[CorefileKey]); err != nil {
		return fmt.Errorf("ConfigMap %s key %s: %w", CoreDNSConfigMap, CorefileKey, err)
	}
	return nil
}

// Wire makes sure ServiceName exists and that the cluster's CoreDNS forwards Zone to it. It is
// idempotent.
func Wire(ctx context.Context, c client.Client) (Result, error) {
	target, err := ensureService(ctx, c)
	if err != nil {
		return Result{}, err
	}
	return forward(ctx, c, target)
}

// Forward makes the cluster's CoreDNS forward Zone to ServiceName, which must exist: where
// another installer owns the Service (the member chart, charts/octopus-member), applying it
// here as Wire does would make this code a second owner of its fields. It is idempotent.
func Forward(ctx context.Context, c client.Client) (Result, error) {
	svc := Service()
	if err := c.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
		return Result{}, fmt.Errorf("reading Service %s/%s, which the cluster's DNS forwards %s to: %w", v1alpha1.SystemNamespace, ServiceName, Zone, err)
	}
	target, err := serviceTarget(svc)
	if err != nil {
		return Result{}, err
	}
	return forward(ctx, c, target)
}

// forward makes the cluster's CoreDNS forward Zone to target.
func forward(ctx context.Context, c client.Client, target netip.AddrPort) (Result, error) {
	res := Result{Target: target}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := coreDNS(ctx, c)
		if err != nil || cm == nil {
			return err
		}
		res.CoreDNS = true
		before := cm.Data[CorefileKey]
		info, err := Inspect(before)
		if err != nil {
			return fmt.Errorf("ConfigMap %s key %s: %w", CoreDNSConfigMap, CorefileKey, err)
		}
		res.Reload = info.Reload
		after, err := Patch(before, []netip.AddrPort{target})
		if err != nil || after == before {
			return err
		}
		cm.Data[CorefileKey] = after
		return c.Update(ctx, cm)
	})
	if err != nil {
		return Result{}, fmt.Errorf("forwarding %s in the cluster's CoreDNS to %s: %w", Zone, target, err)
	}
	return res, nil
}

// ForwardReverse makes Octopus's block in the cluster's CoreDNS forward exactly zones (reverse
// zones, see ArpaZones and PatchReverse) besides Zone, and reports whether it changed the
// Corefile. Without a CoreDNS ConfigMap or without Octopus's block it changes nothing: adding
// the block is join's, and after leave removed it nothing may bring it back.
func ForwardReverse(ctx context.Context, c client.Client, zones []string) (bool, error) {
	changed := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := coreDNS(ctx, c)
		if err != nil || cm == nil {
			return err
		}
		var after string
		after, changed, err = PatchReverse(cm.Data[CorefileKey], zones)
		if err != nil {
			return fmt.Errorf("ConfigMap %s key %s: %w", CoreDNSConfigMap, CorefileKey, err)
		}
		if !changed {
			return nil
		}
		cm.Data[CorefileKey] = after
		return c.Update(ctx, cm)
	})
	if err != nil {
		return false, fmt.Errorf("forwarding reverse zones %v in the cluster's CoreDNS to octopus-dns: %w", zones, err)
	}
	return changed, nil
}

// Unwire removes Octopus's block from the cluster's Corefile, restoring it byte for byte, and
// reports whether there was one.
func Unwire(ctx context.Context, c client.Client) (bool, error) {
	removed := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := coreDNS(ctx, c)
		if err != nil || cm == nil {
			return err
		}
		var after string
		after, removed = Unpatch(cm.Data[CorefileKey])
		if !removed {
			return nil
		}
		cm.Data[CorefileKey] = after
		return c.Update(ctx, cm)
	})
	if err != nil {
		return false, fmt.Errorf("removing %s from the cluster's CoreDNS configuration (ConfigMap %s): %w", Zone, CoreDNSConfigMap, err)
	}
	return removed, nil
}

// coreDNS returns the CoreDNS ConfigMap, or nil when the cluster has none.
func coreDNS(ctx context.Context, c client.Reader) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, CoreDNSConfigMap, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading ConfigMap %s: %w", CoreDNSConfigMap, err)
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	return cm, nil
}

// Service renders the octopus-dns Service, which the cluster's CoreDNS forwards Zone to. It is
// here rather than with the rest of octopus-dns (internal/manifests/render) because Wire needs its
// address before octopus-dns runs.
func Service() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: ServiceName, Namespace: v1alpha1.SystemNamespace, Labels: kube.ManagedLabels()},
		Spec: corev1.ServiceSpec{
			Selector: AppLabel,
			Ports: []corev1.ServicePort{
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(53)},
			},
		},
	}
}

// ensureService applies the octopus-dns Service and returns its ClusterIP and port.
func ensureService(ctx context.Context, c client.Client) (netip.AddrPort, error) {
	svc := Service()
	if err := kube.Apply(ctx, c, svc); err != nil {
		return netip.AddrPort{}, fmt.Errorf("creating Service %s/%s: %w", v1alpha1.SystemNamespace, ServiceName, err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
		return netip.AddrPort{}, fmt.Errorf("reading Service %s/%s: %w", v1alpha1.SystemNamespace, ServiceName, err)
	}
	return serviceTarget(svc)
}

// serviceTarget is the DNS address of the octopus-dns Service svc.
func serviceTarget(svc *corev1.Service) (netip.AddrPort, error) {
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("the Service %s/%s has no ClusterIP (%q): %w", v1alpha1.SystemNamespace, ServiceName, svc.Spec.ClusterIP, err)
	}
	return netip.AddrPortFrom(ip, 53), nil
}
