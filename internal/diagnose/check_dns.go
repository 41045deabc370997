package diagnose

import (
	"context"
	"fmt"
	"net/netip"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/dnsconfig"
)

var dnsCheck = check{
	Check:  Check{Name: "dns", Summary: "the cluster's CoreDNS forwards clusterset.local to octopus-dns, and octopus-dns is available"},
	member: checkDNS,
}

func checkDNS(ctx context.Context, e *env, m *member) []Finding {
	key := client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: dnsconfig.ServiceName}
	svc := &corev1.Service{}
	if err := m.c.Get(ctx, key, svc); apierrors.IsNotFound(err) {
		svc = nil
	} else if err != nil {
		return []Finding{notChecked("DNS", fmt.Errorf("reading Service %s: %w", key, err), "versions")}
	}
	cm := &corev1.ConfigMap{}
	if err := m.c.Get(ctx, dnsconfig.CoreDNSConfigMap, cm); apierrors.IsNotFound(err) {
		cm = nil
	} else if err != nil {
		return []Finding{notChecked("the CoreDNS configuration", fmt.Errorf("reading ConfigMap %s: %w", dnsconfig.CoreDNSConfigMap, err), "versions")}
	}
	out := []Finding{judgeCorefile(cm, svc, m.rejoin())}

	deploy := &appsv1.Deployment{}
	if err := m.c.Get(ctx, key, deploy); apierrors.IsNotFound(err) {
		deploy = nil
	} else if err != nil {
		return append(out, notChecked("octopus-dns", fmt.Errorf("reading Deployment %s: %w", key, err), "versions"))
	}
	endpointSlices := &discoveryv1.EndpointSliceList{}
	if err := m.c.List(ctx, endpointSlices, client.InNamespace(key.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: key.Name}); err != nil {
		return append(out, notChecked("octopus-dns", fmt.Errorf("listing the EndpointSlices of Service %s: %w", key, err), "versions"))
	}
	return append(out, judgeOctopusDNS(deploy, endpointSlices.Items, m.rejoin()))
}

// judgeCorefile checks that the cluster's CoreDNS configuration (cm, nil when the cluster has
// none) holds Octopus's block forwarding clusterset.local to the octopus-dns Service (svc, nil
// when missing). Patch is idempotent, so the block is right exactly when patching again with
// the Service's address changes nothing.
func judgeCorefile(cm *corev1.ConfigMap, svc *corev1.Service, rejoin string) Finding {
	if svc == nil {
		return failure(fmt.Sprintf("re-run `%s`", rejoin),
			"the Service %s/%s does not exist: clusterset.local names have no server in this cluster", v1alpha1.SystemNamespace, dnsconfig.ServiceName)
	}
	target, err := serviceAddress(svc)
	if err != nil {
		return failure(fmt.Sprintf("re-run `%s`", rejoin), "the Service %s/%s: %v", svc.Namespace, svc.Name, err)
	}
	if cm == nil {
		return info("the cluster has no ConfigMap %s: if it runs another DNS server, forward %s there to %s", dnsconfig.CoreDNSConfigMap, dnsconfig.Zone, target)
	}
	corefile := cm.Data[dnsconfig.CorefileKey]
	parsed, err := dnsconfig.Inspect(corefile)
	if err != nil {
		return failure(fmt.Sprintf("repair the Corefile in ConfigMap %s, then re-run `%s`", dnsconfig.CoreDNSConfigMap, rejoin),
			"the Corefile in ConfigMap %s cannot be used: %v", dnsconfig.CoreDNSConfigMap, err)
	}
	if !parsed.Managed {
		return failure(fmt.Sprintf("re-run `%s` (it adds the block again and changes nothing else)", rejoin),
			"the Corefile in ConfigMap %s has no Octopus block forwarding %s to octopus-dns (it was removed, or the ConfigMap replaced): <service>.<namespace>.svc.%s names do not resolve in this cluster",
			dnsconfig.CoreDNSConfigMap, dnsconfig.Zone, dnsconfig.Zone)
	}
	if want, err := dnsconfig.Patch(corefile, []netip.AddrPort{target}); err != nil || want != corefile {
		return failure(fmt.Sprintf("re-run `%s` (it rewrites the block)", rejoin),
			"the Octopus block in ConfigMap %s does not forward %s to octopus-dns at %s (the block was edited, or the Service recreated with another address): those names resolve elsewhere or not at all",
			dnsconfig.CoreDNSConfigMap, dnsconfig.Zone, target)
	}
	if !parsed.Reload {
		return warning("restart the CoreDNS pods after every change to the Corefile, or add `reload` to its root server block",
			"the Corefile forwards %s to octopus-dns at %s, but CoreDNS has no reload plugin: it serves the block only once its pods were restarted after join", dnsconfig.Zone, target)
	}
	return ok("the cluster's CoreDNS forwards %s to octopus-dns at %s", dnsconfig.Zone, target)
}

// serviceAddress is the address clusterset.local queries are forwarded to: the Service's
// ClusterIP and its DNS port.
func serviceAddress(svc *corev1.Service) (netip.AddrPort, error) {
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("no ClusterIP (%q)", svc.Spec.ClusterIP)
	}
	for _, p := range svc.Spec.Ports {
		if p.Protocol == corev1.ProtocolUDP || p.Protocol == "" {
			return netip.AddrPortFrom(ip, uint16(p.Port)), nil //nolint:gosec // a Service port is 1..65535
		}
	}
	return netip.AddrPort{}, fmt.Errorf("no UDP port")
}

// judgeOctopusDNS checks the octopus-dns Deployment (nil when missing) and that its Service has
// ready endpoints: a pod is ready once its informers have synced, i.e. when it answers from a
// complete index (pkg/crossdns), so ready endpoints are the API's view of "answering".
func judgeOctopusDNS(deploy *appsv1.Deployment, endpointSlices []discoveryv1.EndpointSlice, rejoin string) Finding {
	if deploy == nil {
		return failure(fmt.Sprintf("re-run `%s`", rejoin),
			"the Deployment %s/%s does not exist: nothing answers clusterset.local queries", v1alpha1.SystemNamespace, dnsconfig.ServiceName)
	}
	ready := 0
	for _, s := range endpointSlices {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				ready++
			}
		}
	}
	want := ptrOr(deploy.Spec.Replicas, 1)
	if ready == 0 {
		return failure(fmt.Sprintf("`kubectl -n %s describe deployment %s` and the pods' logs say why", deploy.Namespace, deploy.Name),
			"octopus-dns has no ready endpoint (%d of %d replicas ready): clusterset.local queries fail", deploy.Status.ReadyReplicas, want)
	}
	if deploy.Status.ReadyReplicas < want {
		return warning(fmt.Sprintf("`kubectl -n %s describe deployment %s` and the pods' logs say why", deploy.Namespace, deploy.Name),
			"octopus-dns answers, but only %d of %d replicas are ready: one more failure and clusterset.local queries fail", deploy.Status.ReadyReplicas, want)
	}
	return ok("octopus-dns is available: %d of %d replicas ready, %d ready endpoints", deploy.Status.ReadyReplicas, want, ready)
}
