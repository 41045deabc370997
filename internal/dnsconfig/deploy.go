package dnsconfig

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// Image is the repository of octopus-dns (cmd/octopus-dns) that join deploys.
const Image = "ghcr.io/octopus-mcs/octopus-dns"

// clusterRoleName is the cluster-scoped part of the deployment, which the namespace's
// deletion at leave does not remove (Remove does).
const clusterRoleName = "octopus-dns"

// corefile is octopus-dns's own configuration: authoritative for the zone only (the
// cluster's CoreDNS forwards it here), in-cluster credentials, and the ports CoreDNS's images
// use for health, readiness and metrics, so probes look as users know them.
const corefile = Zone + `:53 {
    errors
    health :8080
    ready :8181
    prometheus :9153
    crossdns
    reload
}
`

// Deploy applies octopus-dns in the cluster: its ServiceAccount with read access to
// ServiceImports and EndpointSlices (all crossdns reads), its Corefile, and a Deployment of
// two replicas behind ServiceName, so that one pod's restart does not fail lookups. It is
// idempotent.
func Deploy(ctx context.Context, c client.Client, image string) error {
	ns := v1alpha1.SystemNamespace
	labels := kube.ManagedLabels()
	meta := metav1.ObjectMeta{Name: ServiceName, Namespace: ns, Labels: labels}
	podLabels := map[string]string{}
	for k, v := range AppLabel {
		podLabels[k] = v
	}
	httpProbe := func(path string, port int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(port)}},
			PeriodSeconds: 2, TimeoutSeconds: 1, FailureThreshold: 3,
		}
	}
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: meta},
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: clusterRoleName, Labels: labels},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{"multicluster.x-k8s.io"}, Resources: []string{"serviceimports"}, Verbs: []string{"list", "watch"}},
				{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
			},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: clusterRoleName, Labels: labels},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRoleName},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: ServiceName, Namespace: ns}},
		},
		&corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{corefileKey: corefile}},
		&appsv1.Deployment{
			ObjectMeta: meta,
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(int32(2)),
				Selector: &metav1.LabelSelector{MatchLabels: AppLabel},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
					Spec: corev1.PodSpec{
						ServiceAccountName: ServiceName,
						// Like the cluster's CoreDNS: octopus-dns must not resolve through
						// the cluster DNS that forwards to it.
						DNSPolicy: corev1.DNSDefault,
						Containers: []corev1.Container{{
							Name:  "octopus-dns",
							Image: image,
							Args:  []string{"-conf", "/etc/octopus-dns/Corefile"},
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
							ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: ServiceName}},
						}}},
					},
				},
			},
		},
	}
	if err := kube.Apply(ctx, c, objs...); err != nil {
		return fmt.Errorf("deploying octopus-dns: %w", err)
	}
	return nil
}

// Remove deletes the cluster-scoped objects of Deploy; the rest goes with the namespace.
func Remove(ctx context.Context, c client.Client) error {
	for _, obj := range []client.Object{
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: clusterRoleName}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: clusterRoleName}},
	} {
		if err := c.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("removing octopus-dns's %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return nil
}
