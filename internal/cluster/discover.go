package cluster

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// DiscoverServiceCIDRs reads the cluster's service ranges from its ServiceCIDR objects
// (networking.k8s.io/v1, served since Kubernetes 1.33).
func DiscoverServiceCIDRs(ctx context.Context, c client.Reader) ([]string, error) {
	list := &networkingv1.ServiceCIDRList{}
	if err := c.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing ServiceCIDRs: %w", err)
	}
	var cidrs []string
	for _, sc := range list.Items {
		cidrs = append(cidrs, sc.Spec.CIDRs...)
	}
	if len(cidrs) == 0 {
		return nil, fmt.Errorf("the cluster has no ServiceCIDR objects")
	}
	return dedupe(cidrs), nil
}

// DiscoverPodCIDRs finds the cluster-wide pod range where clusters commonly record it: the
// --cluster-cidr flag of kube-controller-manager or kube-proxy running as pods, or kubeadm's
// kube-proxy configuration. Node podCIDRs are not used: they are slices of the range, and
// guessing the whole from its parts would route addresses the cluster does not own.
func DiscoverPodCIDRs(ctx context.Context, c client.Reader) ([]string, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(metav1.NamespaceSystem)); err != nil {
		return nil, fmt.Errorf("listing kube-system pods: %w", err)
	}
	for _, pod := range pods.Items {
		for _, ctr := range pod.Spec.Containers {
			if cidrs := FlagValue(append(append([]string{}, ctr.Command...), ctr.Args...), "--cluster-cidr"); cidrs != "" {
				return dedupe(strings.Split(cidrs, ",")), nil
			}
		}
	}
	cm := &corev1.ConfigMap{}
	err := c.Get(ctx, KubeProxyConfigMap, cm)
	if err == nil {
		var conf struct {
			ClusterCIDR string `json:"clusterCIDR"`
		}
		if yaml.Unmarshal([]byte(cm.Data[KubeProxyConfigKey]), &conf) == nil && conf.ClusterCIDR != "" {
			return dedupe(strings.Split(conf.ClusterCIDR, ",")), nil
		}
	} else if client.IgnoreNotFound(err) != nil {
		return nil, fmt.Errorf("reading kube-system/kube-proxy: %w", err)
	}
	return nil, fmt.Errorf("found no --cluster-cidr in kube-system pods and no clusterCIDR in the kube-proxy ConfigMap")
}

// KubeProxyConfigMap and KubeProxyConfigKey are where kubeadm keeps kube-proxy's
// configuration, which records the pod CIDR (clusterCIDR) and the proxy mode.
var KubeProxyConfigMap = client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "kube-proxy"}

// KubeProxyConfigKey is the key of KubeProxyConfigMap that holds the configuration file.
const KubeProxyConfigKey = "config.conf"

// FlagValue returns the value of the command-line flag name in args ("--name=v" or
// "--name v"), "" when it is absent.
func FlagValue(args []string, name string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func dedupe(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		s = strings.TrimSpace(s)
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
