package lab

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
)

// statusTimeout bounds each API call of Status, so a lab whose API servers are gone is
// reported promptly instead of hanging.
const statusTimeout = 3 * time.Second

// Status is what `octopus lab status` shows.
type Status struct {
	Dir        string          `json:"dir"`
	ID         string          `json:"id"`
	Clusters   []ClusterStatus `json:"clusters"`
	Namespaces []string        `json:"namespaces"`
}

// ClusterStatus is one control plane of the lab.
type ClusterStatus struct {
	Name       string       `json:"name"`
	Kubeconfig string       `json:"kubeconfig"`
	Error      string       `json:"error,omitempty"`
	Nodes      []NodeStatus `json:"nodes,omitempty"`
	Pods       []PodStatus  `json:"pods,omitempty"`
	// ClusterDNS is the kube-dns Service's ClusterIP, "" in the hub (no nodes, no DNS).
	ClusterDNS string `json:"clusterDNS,omitempty"`
}

// PodStatus is one Pod as its API server reports it.
type PodStatus struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Node      string `json:"node"`
	Phase     string `json:"phase"`
	Ready     bool   `json:"ready"`
	PodIP     string `json:"podIP,omitempty"`
}

// NodeStatus is one Node as its API server reports it.
type NodeStatus struct {
	Name       string `json:"name"`
	Ready      bool   `json:"ready"`
	Gateway    bool   `json:"gateway"`
	InternalIP string `json:"internalIP"`
	PodCIDR    string `json:"podCIDR"`
}

// CollectStatus reads the lab in dir: its control planes (from their kubeconfigs), their
// Nodes, and its network namespaces. A cluster whose API server does not answer is reported
// with an error rather than failing the whole status.
func CollectStatus(ctx context.Context, dir string) (*Status, error) {
	dir, err := canonicalDir(dir)
	if err != nil {
		return nil, err
	}
	st := &Status{Dir: dir, ID: labnet.LabID(dir)}
	if st.Namespaces, _, err = labnet.Leftovers(st.ID); err != nil {
		return nil, err
	}
	for _, name := range append([]string{HubName}, memberNames(MaxClusters)...) {
		kc := controlplane.KubeconfigPath(dir, name)
		if _, err := os.Stat(kc); err != nil {
			continue
		}
		cs := ClusterStatus{Name: name, Kubeconfig: kc}
		if err := clusterStatus(ctx, kc, &cs); err != nil {
			cs.Error = err.Error()
		}
		st.Clusters = append(st.Clusters, cs)
	}
	return st, nil
}

// clusterStatus fills the nodes, pods and cluster DNS address of one cluster.
func clusterStatus(ctx context.Context, kubeconfig string, st *ClusterStatus) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("reading %s: %w", kubeconfig, err)
	}
	cfg.Timeout = statusTimeout
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client for %s: %w", cfg.Host, err)
	}
	if st.Nodes, err = nodeStatuses(ctx, cs); err != nil {
		return err
	}
	pods, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing pods at %s: %w", cfg.Host, err)
	}
	for _, p := range pods.Items {
		ps := PodStatus{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, Phase: string(p.Status.Phase), PodIP: p.Status.PodIP}
		for _, c := range p.Status.Conditions {
			ps.Ready = ps.Ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
		}
		st.Pods = append(st.Pods, ps)
	}
	if svc, err := cs.CoreV1().Services(kubeSystem).Get(ctx, kubeDNSService, metav1.GetOptions{}); err == nil {
		st.ClusterDNS = svc.Spec.ClusterIP
	}
	return nil
}

func nodeStatuses(ctx context.Context, cs kubernetes.Interface) ([]NodeStatus, error) {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	var out []NodeStatus
	for _, n := range list.Items {
		ns := NodeStatus{Name: n.Name, Gateway: n.Labels[labnet.GatewayLabel] == "true", PodCIDR: n.Spec.PodCIDR}
		for _, c := range n.Status.Conditions {
			ns.Ready = ns.Ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
		}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				ns.InternalIP = a.Address
			}
		}
		out = append(out, ns)
	}
	return out, nil
}
