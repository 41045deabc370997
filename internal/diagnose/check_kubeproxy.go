package diagnose

import (
	"context"
	"fmt"
	"path"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/octopus-mcs/octopus/internal/cluster"
)

var kubeProxyCheck = check{
	Check:  Check{Name: "kube-proxy", Summary: "kube-proxy's mode, where the cluster records it (the kube-proxy ConfigMap or the flags of its pods)"},
	member: checkKubeProxy,
}

// proxyMode is kube-proxy's mode and where it was read.
type proxyMode struct {
	mode, source string
}

func checkKubeProxy(ctx context.Context, e *env, m *member) []Finding {
	found, err := readProxyMode(ctx, m.c)
	if err != nil {
		return []Finding{notChecked("kube-proxy's mode", err, "versions")}
	}
	return []Finding{judgeProxyMode(found)}
}

// readProxyMode reads kube-proxy's mode: the --proxy-mode flag of a kube-proxy container in
// kube-system wins (flags override the configuration file), then the mode of kubeadm's
// kube-proxy ConfigMap. Nil when the cluster records neither.
func readProxyMode(ctx context.Context, c client.Reader) (*proxyMode, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(metav1.NamespaceSystem)); err != nil {
		return nil, fmt.Errorf("listing kube-system pods: %w", err)
	}
	for _, pod := range pods.Items {
		for _, ctr := range pod.Spec.Containers {
			args := append(append([]string{}, ctr.Command...), ctr.Args...)
			if len(args) == 0 || path.Base(args[0]) != "kube-proxy" {
				continue
			}
			if mode := cluster.FlagValue(args, "--proxy-mode"); mode != "" {
				return &proxyMode{mode: mode, source: fmt.Sprintf("--proxy-mode of pod %s/%s", pod.Namespace, pod.Name)}, nil
			}
		}
	}
	cm := &corev1.ConfigMap{}
	err := c.Get(ctx, cluster.KubeProxyConfigMap, cm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading ConfigMap %s: %w", cluster.KubeProxyConfigMap, err)
	}
	var conf struct {
		Mode string `json:"mode"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data[cluster.KubeProxyConfigKey]), &conf); err != nil {
		return nil, fmt.Errorf("ConfigMap %s key %s: %w", cluster.KubeProxyConfigMap, cluster.KubeProxyConfigKey, err)
	}
	return &proxyMode{mode: conf.Mode, source: fmt.Sprintf("ConfigMap %s", cluster.KubeProxyConfigMap)}, nil
}

// judgeProxyMode says what kube-proxy's mode means for Octopus: ClusterSet IPs are ClusterIPs
// of the imports' derived Services, programmed by kube-proxy like any other, in every mode.
func judgeProxyMode(found *proxyMode) Finding {
	if found == nil {
		return info("the cluster does not record kube-proxy's mode where the API shows it (no kube-proxy pod with --proxy-mode, no ConfigMap %s): kube-proxy runs outside pods, or something else serves Services; ClusterSet IPs need it to serve the imports' derived Services like any other", cluster.KubeProxyConfigMap)
	}
	switch found.mode {
	case "nftables":
		return ok("kube-proxy runs in nftables mode (%s), the mode the lab tests Octopus with", found.source)
	case "iptables", "":
		return ok("kube-proxy runs in iptables mode (%s)", found.source)
	case "ipvs":
		return info("kube-proxy runs in IPVS mode (%s), which Octopus's tests do not cover", found.source)
	}
	return warning("check that whatever serves Services here serves the imports' derived Services (ClusterSet IPs)", "kube-proxy mode %q (%s) is not one Octopus knows", found.mode, found.source)
}
