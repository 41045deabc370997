package lab

import (
	"context"
	"fmt"
	"net/netip"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/octopus-mcs/octopus/internal/lab/images"
)

// kubeadmCorefile is kubeadm's default Corefile (v1.37), unchanged: the crossdns issue wires
// clusterset.local into it exactly as into a real cluster's.
const kubeadmCorefile = `.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30 {
       disable success cluster.local
       disable denial cluster.local
    }
    loop
    reload
    loadbalance
}
`

// Names of the cluster DNS objects, kubeadm's.
const (
	coreDNSName     = "coredns"
	kubeDNSService  = "kube-dns"
	coreDNSRoleName = "system:coredns"
	kubeSystem      = metav1.NamespaceSystem
)

// ClusterDNSAddr returns the ClusterIP of the kube-dns Service in a cluster with the given
// service CIDR: its 10th address, as kubeadm chooses.
func ClusterDNSAddr(serviceCIDR netip.Prefix) (netip.Addr, error) {
	a := serviceCIDR.Masked().Addr()
	for range 10 {
		a = a.Next()
	}
	if !a.IsValid() || !serviceCIDR.Contains(a) {
		return netip.Addr{}, fmt.Errorf("service CIDR %s has no 10th address for cluster DNS", serviceCIDR)
	}
	return a, nil
}

// ClusterDNSAddrs returns the kube-dns Service's ClusterIPs in a cluster with the given
// service CIDRs, one per CIDR (ClusterDNSAddr), in their order: the kubelets' clusterDNS and
// the Service's clusterIPs, whose first is the primary family's as kube-apiserver requires.
// An invalid prefix (a single-stack cluster's missing second range) is skipped.
func ClusterDNSAddrs(serviceCIDRs ...netip.Prefix) ([]netip.Addr, error) {
	var addrs []netip.Addr
	for _, cidr := range serviceCIDRs {
		if !cidr.IsValid() {
			continue
		}
		a, err := ClusterDNSAddr(cidr)
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no service CIDR for cluster DNS")
	}
	return addrs, nil
}

// deployClusterDNS creates in a member cluster what kubeadm deploys for cluster DNS: the
// coredns ConfigMap, ServiceAccount, ClusterRole and binding, Deployment and the kube-dns
// Service at the 10th address of each service CIDR (ClusterDNSAddrs). With two, kube-dns is
// RequireDualStack, as a dual-stack kubeadm cluster's is: pods of an IPv6 client stack reach
// it without IPv4, and AAAA is asked over IPv6 as well. Objects that exist are left as they
// are, so a user's Corefile edit survives. One replica instead of kubeadm's two: the lab shares
// a small machine and nothing here tests DNS failover.
func deployClusterDNS(ctx context.Context, cs kubernetes.Interface, serviceCIDRs ...netip.Prefix) error {
	dnsIPs, err := ClusterDNSAddrs(serviceCIDRs...)
	if err != nil {
		return err
	}
	labels := map[string]string{"k8s-app": kubeDNSService}
	create := func(what string, err error) error {
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("deploying cluster DNS: creating %s: %w", what, err)
		}
		return nil
	}
	meta := metav1.ObjectMeta{Name: coreDNSName, Namespace: kubeSystem}
	_, err = cs.CoreV1().ConfigMaps(kubeSystem).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta,
		Data: map[string]string{"Corefile": kubeadmCorefile}}, metav1.CreateOptions{})
	if err := create("ConfigMap coredns", err); err != nil {
		return err
	}
	_, err = cs.CoreV1().ServiceAccounts(kubeSystem).Create(ctx, &corev1.ServiceAccount{ObjectMeta: meta}, metav1.CreateOptions{})
	if err := create("ServiceAccount coredns", err); err != nil {
		return err
	}
	_, err = cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: coreDNSRoleName},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}, metav1.CreateOptions{})
	if err := create("ClusterRole system:coredns", err); err != nil {
		return err
	}
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: coreDNSRoleName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: coreDNSRoleName},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: coreDNSName, Namespace: kubeSystem}},
	}, metav1.CreateOptions{})
	if err := create("ClusterRoleBinding system:coredns", err); err != nil {
		return err
	}
	httpProbe := func(path string, port int32) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: path, Port: intstr.FromInt32(port), Scheme: corev1.URISchemeHTTP}},
			PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 3, SuccessThreshold: 1}
	}
	_, err = cs.AppsV1().Deployments(kubeSystem).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: coreDNSName, Namespace: kubeSystem, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: coreDNSName,
					PriorityClassName:  "system-cluster-critical",
					// As kubeadm: CoreDNS forwards other names to the node's resolvers.
					DNSPolicy: corev1.DNSDefault,
					Containers: []corev1.Container{{
						Name:  coreDNSName,
						Image: images.CoreDNSImage,
						Args:  []string{"-conf", "/etc/coredns/Corefile"},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true},
						},
						Ports: []corev1.ContainerPort{
							{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
							{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
							{Name: "metrics", ContainerPort: 9153, Protocol: corev1.ProtocolTCP},
						},
						LivenessProbe:  httpProbe("/health", 8080),
						ReadinessProbe: httpProbe("/ready", 8181),
					}},
					Volumes: []corev1.Volume{{Name: "config-volume", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: coreDNSName},
							Items:                []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}},
						}}}},
				},
			},
		},
	}, metav1.CreateOptions{})
	if err := create("Deployment coredns", err); err != nil {
		return err
	}
	clusterIPs := make([]string, len(dnsIPs))
	for i, a := range dnsIPs {
		clusterIPs[i] = a.String()
	}
	policy := corev1.IPFamilyPolicySingleStack
	if len(dnsIPs) > 1 {
		policy = corev1.IPFamilyPolicyRequireDualStack
	}
	_, err = cs.CoreV1().Services(kubeSystem).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: kubeDNSService, Namespace: kubeSystem, Labels: labels},
		Spec: corev1.ServiceSpec{
			Selector:       labels,
			ClusterIP:      clusterIPs[0],
			ClusterIPs:     clusterIPs,
			IPFamilyPolicy: &policy,
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
				{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9153)},
			},
		},
	}, metav1.CreateOptions{})
	return create("Service kube-dns", err)
}
