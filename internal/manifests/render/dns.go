package render

import (
	"errors"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/config/rbac"
	"github.com/octopus-mcs/octopus/internal/dnsconfig"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// DNSImage is the repository of octopus-dns (cmd/octopus-dns) that join deploys.
const DNSImage = "ghcr.io/octopus-mcs/octopus-dns"

// dnsCorefileKey is the key of octopus-dns's Corefile in its ConfigMap.
const dnsCorefileKey = "Corefile"

// dnsCorefile is octopus-dns's own configuration: authoritative for the zone and for the
// reverse trees (the cluster's CoreDNS forwards the zone here, and of the reverse trees only
// the zones of other clusters' endpoint addresses, which the controller keeps in its block:
// dnsconfig.ForwardReverse), in-cluster credentials, and the ports CoreDNS's images use for
// health, readiness and metrics, so probes look as users know them.
const dnsCorefile = dnsconfig.Zone + `:53 in-addr.arpa:53 ip6.arpa:53 {
    errors
    health :8080
    ready :8181
    prometheus :9153
    crossdns ` + dnsconfig.Zone + ` in-addr.arpa ip6.arpa
    reload
}
`

// DNS renders octopus-dns in v1alpha1.SystemNamespace: the Service in front of it
// (dnsconfig.Service, which the cluster's CoreDNS forwards to), its ServiceAccount with the
// ClusterRole generated from its RBAC markers (config/rbac/dns), its Corefile, and a
// Deployment of two replicas behind the Service, so that one pod's restart does not fail
// lookups. The ClusterRole and its binding are the cluster-scoped part, which deleting the
// namespace does not remove.
func DNS(image string) ([]client.Object, error) {
	generated, err := rbac.Load(rbac.DNS)
	if err != nil {
		return nil, err
	}
	if generated.ClusterRole == nil || len(generated.Roles) > 0 {
		return nil, errors.New("the generated RBAC of octopus-dns is not one ClusterRole: run `make generate`")
	}
	role := generated.ClusterRole
	role.Labels = kube.ManagedLabels()
	ns := v1alpha1.SystemNamespace
	labels := kube.ManagedLabels()
	meta := metav1.ObjectMeta{Name: dnsconfig.ServiceName, Namespace: ns, Labels: labels}
	podLabels := map[string]string{}
	for k, v := range dnsconfig.AppLabel {
		podLabels[k] = v
	}
	httpProbe := func(path string, port int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(port)}},
			PeriodSeconds: 2, TimeoutSeconds: 1, FailureThreshold: 3,
		}
	}
	return []client.Object{
		dnsconfig.Service(),
		&corev1.ServiceAccount{ObjectMeta: meta},
		role,
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role.Name, Labels: labels},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: dnsconfig.ServiceName, Namespace: ns}},
		},
		&corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{dnsCorefileKey: dnsCorefile}},
		&appsv1.Deployment{
			ObjectMeta: meta,
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(int32(2)),
				Selector: &metav1.LabelSelector{MatchLabels: dnsconfig.AppLabel},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
					Spec: corev1.PodSpec{
						ServiceAccountName: dnsconfig.ServiceName,
						// Like the cluster's CoreDNS: octopus-dns must not resolve through
						// the cluster DNS that forwards to it.
						DNSPolicy: corev1.DNSDefault,
						Containers: []corev1.Container{{
							Name:  "octopus-dns",
							Image: image,
							Args:  []string{"-conf", "/etc/octopus-dns/" + dnsCorefileKey},
							Ports: []corev1.ContainerPort{
								{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
								{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
								{Name: "metrics", ContainerPort: 9153, Protocol: corev1.ProtocolTCP},
							},
							VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/etc/octopus-dns", ReadOnly: true}},
							LivenessProbe:  httpProbe("/health", 8080),
							ReadinessProbe: httpProbe("/ready", 8181),
						}},
						Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
							ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: dnsconfig.ServiceName}},
						}}},
					},
				},
			},
		},
	}, nil
}
