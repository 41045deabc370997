package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/lab/images"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/lab/nodeagent"
)

// Node heartbeat timing, as a kubelet's defaults: the Lease is renewed every 10 s and lasts
// 40 s, well inside kube-controller-manager's node-monitor grace period, so a node only goes
// NotReady when its agent stops.
const (
	nodeHeartbeatInterval = 10 * time.Second
	nodeLeaseDuration     = 40 * time.Second
	nodeLeaseNamespace    = "kube-node-lease"
)

// nodeCapacity is what a lab node advertises to the scheduler. Lab pods are host processes
// sharing one machine, so the numbers only need to admit the pods the lab runs.
var nodeCapacity = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("4"),
	corev1.ResourceMemory: resource.MustParse("8Gi"),
	corev1.ResourcePods:   resource.MustParse("110"),
}

// nodeAgent plays the node-status half of a kubelet (the pod half is nodeagent.Agent) for the nodes of one cluster: it registers
// their Node objects and keeps their Ready condition and Leases fresh.
type nodeAgent struct {
	cluster string
	client  kubernetes.Interface
	nodes   []labnet.NodeNet
	log     logr.Logger
}

// register creates or refreshes every Node with its addresses, labels and a Ready condition.
// node-ipam in kube-controller-manager fills spec.podCIDR afterwards.
func (a *nodeAgent) register(ctx context.Context) error {
	for _, n := range a.nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: nodeLabels(n)}}
		_, err := a.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("registering node %s in %s: %w", n.Name, a.cluster, err)
		}
		if err := a.updateStatus(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func nodeLabels(n labnet.NodeNet) map[string]string {
	l := map[string]string{
		corev1.LabelHostname:   n.Name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: runtime.GOARCH,
	}
	if n.Gateway {
		l[labnet.GatewayLabel] = "true"
	}
	return l
}

// updateStatus writes the node's addresses, capacity and a fresh Ready condition. It
// replaces the status wholesale, which is what a kubelet does too: it owns node status.
func (a *nodeAgent) updateStatus(ctx context.Context, n labnet.NodeNet) error {
	now := metav1.Now()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := a.client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ready := corev1.NodeCondition{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "LabNodeAgentReady",
			Message: "the lab node agent is running", LastHeartbeatTime: now, LastTransitionTime: now,
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready.LastTransitionTime = c.LastTransitionTime
			}
		}
		node.Status.Conditions = []corev1.NodeCondition{ready}
		// kube-proxy waits for status.addresses and takes the node IP from InternalIP.
		node.Status.Addresses = []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: n.LANAddr.Addr().String()},
			{Type: corev1.NodeHostName, Address: n.Name},
		}
		// The API server proxies exec and logs to this port (the node agent's kubelet API).
		node.Status.DaemonEndpoints.KubeletEndpoint.Port = controlplane.KubeletPort
		node.Status.Capacity = nodeCapacity
		node.Status.Allocatable = nodeCapacity
		node.Status.NodeInfo.OperatingSystem = "linux"
		node.Status.NodeInfo.Architecture = runtime.GOARCH
		node.Status.NodeInfo.KubeletVersion = controlplane.KubernetesVersion
		_, err = a.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("updating status of node %s in %s: %w", n.Name, a.cluster, err)
	}
	return nil
}

// renewLease creates or renews the node's Lease in kube-node-lease, which the node lifecycle
// controller reads as the node's heartbeat between status updates.
func (a *nodeAgent) renewLease(ctx context.Context, n labnet.NodeNet) error {
	leases := a.client.CoordinationV1().Leases(nodeLeaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lease, err := leases.Get(ctx, n.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			node, err := a.client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			lease = &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{
					Name: n.Name, Namespace: nodeLeaseNamespace,
					// As a kubelet does: the Lease goes away with its Node.
					OwnerReferences: []metav1.OwnerReference{{
						APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
					}},
				},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity:       ptr.To(n.Name),
					LeaseDurationSeconds: ptr.To(int32(nodeLeaseDuration / time.Second)),
					RenewTime:            &now,
				},
			}
			_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		lease.Spec.RenewTime = &now
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("renewing lease of node %s in %s: %w", n.Name, a.cluster, err)
	}
	return nil
}

// heartbeat renews every node's Lease and Ready condition.
func (a *nodeAgent) heartbeat(ctx context.Context) error {
	var errs []error
	for _, n := range a.nodes {
		errs = append(errs, a.renewLease(ctx, n), a.updateStatus(ctx, n))
	}
	return errors.Join(errs...)
}

// run heartbeats until ctx ends. Failures are logged and retried on the next tick: an API
// server that is briefly away (a fault-injection test) must not end the agent.
func (a *nodeAgent) run(ctx context.Context) {
	t := time.NewTicker(nodeHeartbeatInterval)
	defer t.Stop()
	for {
		if err := a.heartbeat(ctx); err != nil && ctx.Err() == nil {
			a.log.Error(err, "Node heartbeat failed; retrying", "cluster", a.cluster)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// nodeAgents runs one nodeAgent per cluster until stop is called, and the registry of real
// nodes.
type nodeAgents struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	registry *images.Registry
}

func (n *nodeAgents) stop() {
	if n == nil {
		return
	}
	n.cancel()
	n.wg.Wait()
	if n.registry != nil {
		_ = n.registry.Close()
	}
}

// startNodes starts every cluster's nodes, runs kube-proxy in every node namespace and
// deploys each cluster's DNS (deployClusterDNS). Stand-in nodes are registered and kept Ready
// by nodeAgent and run their pods with a nodeagent.Agent; real nodes run a kubelet and
// containerd (startAllRealNodes), all clusters' at once.
func startNodes(ctx context.Context, env *controlplane.Environment, plan labnet.Plan, opts Options) (*nodeAgents, error) {
	images := nodeagent.Images{EchoBinary: opts.EchoBinary, OctopusDNSBinary: opts.DNSBinary}
	log := opts.Log
	if images.CoreDNSBinary == "" {
		// Built by hack/coredns.sh (make k8s-binaries, testenv.BinDir); without it the
		// coredns pods say so in their status and the rest of the lab works.
		if path, err := controlplane.CoreDNSPath(); err == nil {
			images.CoreDNSBinary = path
		}
	}
	hctx, cancel := context.WithCancel(context.Background())
	agents := &nodeAgents{cancel: cancel}
	if opts.NodeRuntime == NodeRuntimeKubelet {
		var err error
		if agents.registry, err = startAllRealNodes(ctx, env, plan, opts); err != nil {
			agents.stop()
			return nil, err
		}
	}
	for _, c := range plan.Clusters {
		cp := env.Cluster(c.Name)
		if cp == nil {
			agents.stop()
			return nil, fmt.Errorf("starting nodes: no control plane for cluster %s", c.Name)
		}
		cs, err := kubernetes.NewForConfig(cp.RESTConfig())
		if err != nil {
			agents.stop()
			return nil, fmt.Errorf("starting nodes of %s: %w", c.Name, err)
		}
		if opts.NodeRuntime != NodeRuntimeKubelet {
			if err := startStandinNodes(ctx, env, plan, c, cp, cs, images, agents, hctx, log); err != nil {
				agents.stop()
				return nil, err
			}
		}
		for _, n := range c.Nodes {
			if err := env.StartProcess(kubeProxyProcess(cp, n)); err != nil {
				agents.stop()
				return nil, fmt.Errorf("starting kube-proxy on node %s: %w", n.Name, err)
			}
		}
		// Cluster DNS comes with the nodes, as kubeadm deploys it with the control plane.
		if err := deployClusterDNS(ctx, cs, cp.ServiceCIDR); err != nil {
			agents.stop()
			return nil, fmt.Errorf("cluster %s: %w", c.Name, err)
		}
	}
	return agents, nil
}

// startStandinNodes registers cluster c's nodes, starts their heartbeats and the agent that
// runs their pods, both until agents stop (hctx).
func startStandinNodes(ctx context.Context, env *controlplane.Environment, plan labnet.Plan, c labnet.ClusterNet,
	cp *controlplane.ControlPlane, cs kubernetes.Interface, images nodeagent.Images, agents *nodeAgents, hctx context.Context, log logr.Logger) error {
	a := &nodeAgent{cluster: c.Name, client: cs, nodes: c.Nodes, log: log.WithValues("cluster", c.Name)}
	if err := a.register(ctx); err != nil {
		return err
	}
	agents.wg.Go(func() { a.run(hctx) })
	pods, err := podAgent(env, plan, c, cp, cs, images, log)
	if err != nil {
		return err
	}
	agents.wg.Go(func() {
		if err := pods.Run(hctx); err != nil {
			log.Error(err, "Stopping the pods of the lab nodes failed", "cluster", c.Name)
		}
	})
	return nil
}

// podAgent makes the agent that runs the pods bound to the cluster's nodes (see nodeagent).
func podAgent(env *controlplane.Environment, plan labnet.Plan, c labnet.ClusterNet, cp *controlplane.ControlPlane,
	cs kubernetes.Interface, images nodeagent.Images, log logr.Logger) (*nodeagent.Agent, error) {
	nodes := make([]nodeagent.Node, 0, len(c.Nodes))
	ips := make([]netip.Addr, 0, len(c.Nodes))
	for _, n := range c.Nodes {
		nodes = append(nodes, nodeagent.Node{Name: n.Name, Netns: n.Netns, LANAddr: n.LANAddr.Addr()})
		ips = append(ips, n.LANAddr.Addr())
	}
	cert, key, err := cp.IssueKubeletServing(ips)
	if err != nil {
		return nil, err
	}
	dns, err := nodeagent.ClusterDNSAddr(cp.ServiceCIDR)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", c.Name, err)
	}
	// The default/kubernetes Service has the service CIDR's first address.
	apiService := netip.AddrPortFrom(cp.ServiceCIDR.Masked().Addr().Next(), 443)
	return nodeagent.New(nodeagent.Options{
		Cluster: c.Name, Client: cs, Nodes: nodes, ClusterPodCIDR: cp.PodCIDR, LabID: plan.ID,
		Dir:    filepath.Join(env.Dir, podsDir, c.Name),
		Images: images, Network: nodeagent.LabNetwork{}, Start: controlplane.StartInNetns,
		ClusterDNS: dns, APIService: apiService,
		Kubelet: &nodeagent.KubeletServing{
			Port: controlplane.KubeletPort, CertPEM: cert, KeyPEM: key,
			ClientCAPEM: cp.CAData, ClientUser: controlplane.KubeletClientUser,
		},
		Log: log.WithValues("cluster", c.Name),
	})
}

// podsDir, under the lab dir, holds a directory per cluster with one per pod: its containers'
// logs and pidfiles.
const podsDir = "pods"

// kubeProxyProcess runs the real kube-proxy in a node's namespace.
func kubeProxyProcess(cp *controlplane.ControlPlane, n labnet.NodeNet) controlplane.ProcessOptions {
	return controlplane.ProcessOptions{
		Name:   n.Name + "-kube-proxy",
		Binary: "kube-proxy",
		Args: []string{
			// The admin kubeconfig: kube-proxy reaches the API server at labnet.APIAddress
			// through the node's route. A per-node identity is not worth it in a lab.
			"--kubeconfig=" + cp.Kubeconfig,
			"--hostname-override=" + n.Name,
			"--proxy-mode=nftables",
			// 0 leaves the global nf_conntrack_max alone: the lab must not change host sysctls.
			"--conntrack-max-per-core=0",
			// Traffic from outside the pod range to a Service gets masqueraded, as in a
			// real cluster.
			"--cluster-cidr=" + cp.PodCIDR.String(),
			"--v=2",
		},
		Netns: n.NetnsPath(),
		// A real node restarts a crashed kube-proxy (DaemonSet); so does the lab.
		RestartOnCrash: true,
	}
}
