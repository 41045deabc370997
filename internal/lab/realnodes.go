package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/octopus-mcs/octopus/internal/lab/cni"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/lab/images"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/lab/realnode"
	"github.com/octopus-mcs/octopus/internal/version"
)

// realNodeReadyTimeout bounds the wait for real nodes to register, get their pod CIDR and
// become Ready.
const realNodeReadyTimeout = 3 * time.Minute

// labImageSet is what real nodes get their images from: a registry holding every image of the
// lab's catalog, which every node's containerd uses instead of the registries the images name,
// and the tarballs of the images the lab itself runs, which every node imports before its
// kubelet starts so that its first pods need no pull.
type labImageSet struct {
	preload  []string
	registry *images.Registry
	// hosts are the registries the node's containerd must use the lab's registry for.
	hosts []string
	// pushed yields the result of filling the registry, which goes on while the nodes start.
	pushed chan error
}

// preloaded are the images every real node imports at start: the sandbox of every pod and the
// cluster DNS the lab deploys. Others, the project's own large image among them, are pulled
// from the lab's registry by the nodes whose pods need them, as in a cluster.
var preloaded = []string{images.PauseImage, images.CoreDNSImage}

// startLabImages builds (or finds in the cache) the workload images of images.Catalog and,
// when the agent binary's directory holds every binary of `make build`, the project's own
// images, and starts serving them from a registry on the API address, which every node
// reaches, with its blobs in labDir.
func startLabImages(ctx context.Context, opts Options, labDir string) (*labImageSet, error) {
	coredns, err := controlplane.CoreDNSPath()
	if err != nil {
		return nil, err
	}
	cache, err := controlplane.CacheDir()
	if err != nil {
		return nil, err
	}
	catalog := images.CatalogOptions{CoreDNSBinary: coredns, Version: version.Version}
	if dir := filepath.Dir(opts.AgentBinary); hasOctopusBinaries(dir) {
		catalog.OctopusBinDir = dir
	}
	specs, err := images.Catalog(catalog)
	if err != nil {
		return nil, fmt.Errorf("the images of the lab's nodes: %w", err)
	}
	tarballs := make([]string, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Go(func() { tarballs[i], errs[i] = images.Ensure(filepath.Join(cache, "images"), s) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("the images of the lab's nodes: %w", err)
	}
	hosts, err := images.RegistryHosts(specs)
	if err != nil {
		return nil, err
	}
	set := &labImageSet{pushed: make(chan error, 1), hosts: hosts}
	for i, s := range specs {
		for _, ref := range s.Refs {
			if slices.Contains(preloaded, ref) {
				set.preload = append(set.preload, tarballs[i])
				break
			}
		}
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(labnet.APIAddress, 0).String())
	if err != nil {
		return nil, fmt.Errorf("the lab's registry: %w", err)
	}
	blobs := filepath.Join(labDir, "registry")
	if err := os.MkdirAll(blobs, 0o700); err != nil {
		return nil, errors.Join(err, ln.Close())
	}
	set.registry = images.StartRegistry(ln, blobs)
	go func() {
		var err error
		for _, t := range tarballs {
			if err = set.registry.Push(ctx, t); err != nil {
				break
			}
		}
		set.pushed <- err
	}()
	return set, nil
}

// startAllRealNodes starts the real nodes of every cluster at once (startRealNodes) and
// returns once all are Ready and the lab's registry is filled. The registry serves until the
// caller closes it, also on error.
func startAllRealNodes(ctx context.Context, env *controlplane.Environment, plan labnet.Plan, opts Options) (*images.Registry, error) {
	imgs, err := startLabImages(ctx, opts, env.Dir)
	if err != nil {
		return nil, err
	}
	// One for each cluster's nodes, the registry and the hub's nodes.
	errs := make([]error, len(plan.Clusters)+2)
	var wg sync.WaitGroup
	for i, c := range plan.Clusters {
		wg.Go(func() {
			cp := env.Cluster(c.Name)
			if cp == nil {
				errs[i] = fmt.Errorf("starting nodes: no control plane for cluster %s", c.Name)
				return
			}
			cs, err := kubernetes.NewForConfig(cp.RESTConfig())
			if err != nil {
				errs[i] = fmt.Errorf("starting nodes of %s: %w", c.Name, err)
				return
			}
			errs[i] = startRealNodes(ctx, env, plan, c, cp, cs, opts, imgs)
		})
	}
	if hubGatewayNodes(opts) {
		wg.Go(func() {
			errs[len(plan.Clusters)+1] = startHubNodes(ctx, env, plan, opts, imgs)
		})
	}
	wg.Wait()
	if err := <-imgs.pushed; err != nil {
		errs[len(plan.Clusters)] = fmt.Errorf("filling the lab's registry: %w", err)
	}
	return imgs.registry, errors.Join(errs...)
}

// startHubNodes makes the hub's gateway namespaces real nodes of the hub cluster
// (HubGatewayNet.Node), for the hub chart's gateway DaemonSet. They run no pod of their own
// network (the gateway is a host-network pod), so they use the bridge whatever Options.CNI.
func startHubNodes(ctx context.Context, env *controlplane.Environment, plan labnet.Plan, opts Options, imgs *labImageSet) error {
	cp := env.Cluster(HubName)
	cs, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		return fmt.Errorf("starting the hub's nodes: %w", err)
	}
	for _, h := range plan.HubGateways {
		if err := labnet.RouteServices(h.Netns, cp.ServiceCIDR, h.UplinkAddr.Addr()); err != nil {
			return fmt.Errorf("hub gateway node %s: %w", h.Name, err)
		}
	}
	opts.CNI, opts.FlannelBinDir = "", ""
	return startRealNodes(ctx, env, plan, hubNodes(plan), cp, cs, opts, imgs)
}

// hubNodes are the hub's gateway nodes as a cluster's network.
func hubNodes(plan labnet.Plan) labnet.ClusterNet {
	c := labnet.ClusterNet{Name: HubName}
	for _, h := range plan.HubGateways {
		c.Nodes = append(c.Nodes, h.Node())
	}
	return c
}

// hasOctopusBinaries reports whether dir holds every binary the project's image needs.
func hasOctopusBinaries(dir string) bool {
	for _, b := range images.OctopusBinaries {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return false
		}
	}
	return true
}

// startRealNodes starts containerd and a kubelet on every node of cluster c, waits until node
// IPAM has given each its pod CIDR, then writes each node's CNI configuration and its routes
// to the other nodes' pod CIDRs (labnet.ConfigureNode; none with
// cni.Flannel, whose flanneld routes), and waits until every Node is Ready.
func startRealNodes(ctx context.Context, env *controlplane.Environment, plan labnet.Plan, c labnet.ClusterNet,
	cp *controlplane.ControlPlane, cs kubernetes.Interface, opts Options, imgs *labImageSet) error {
	dns, err := ClusterDNSAddrs(cp.ServiceCIDR, cp.SecondaryServiceCIDR)
	if err != nil {
		return fmt.Errorf("cluster %s: %w", c.Name, err)
	}
	nodes := make([]*realnode.Node, len(c.Nodes))
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Go(func() {
			nodes[i], errs[i] = realnode.Start(ctx, realnode.Options{
				Env: env, Cluster: cp, Node: n, LabID: plan.ID,
				KubeBinDir: opts.BinDir, ContainerdBinDir: opts.ContainerdBinDir, Images: imgs.preload,
				Mirror: imgs.registry.Addr, Registries: imgs.hosts,
				ClusterDNS: dns, Log: opts.Log.WithValues("node", n.Name),
				ContainerEnv: map[string]string{realnode.EnvCluster: c.Name},
				CNI:          opts.CNI, FlannelBinDir: opts.FlannelBinDir,
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	podCIDRs, err := waitPodCIDRs(ctx, cs, c)
	if err != nil {
		return err
	}
	if err := labelGateways(ctx, cs, c); err != nil {
		return err
	}
	if opts.CNI == cni.Flannel {
		if err := grantFlannel(ctx, cs); err != nil {
			return fmt.Errorf("cluster %s: %w", c.Name, err)
		}
	}
	for i, n := range c.Nodes {
		if err := nodes[i].ConfigureNetwork(ctx, podCIDRs[n.Name]); err != nil {
			return err
		}
		// flanneld routes between the nodes over its VXLAN device; with the bridge the lab
		// routes each node's pod CIDR to the node, as a host-gateway CNI would. The hub's
		// nodes run host-network pods only and share no LAN.
		peers := map[netip.Prefix]netip.Addr{}
		for _, other := range c.Nodes {
			if other.Name != n.Name && opts.CNI != cni.Flannel && c.Name != HubName {
				for _, p := range podCIDRs[other.Name] {
					if via := other.LANAddr.Addr(); p.Addr().Is4() {
						peers[p] = via
					} else if other.LANAddr6.IsValid() {
						peers[p] = other.LANAddr6.Addr()
					}
				}
			}
		}
		if err := labnet.ConfigureNode(labnet.NodeConfig{Netns: n.Netns, ClusterPodCIDR: cp.PodCIDR, ClusterPodCIDR6: cp.SecondaryPodCIDR, PeerRoutes: peers}); err != nil {
			return err
		}
	}
	return waitNodesReady(ctx, cs, c)
}

// labelGateways labels c's gateway nodes with labnet.GatewayLabel as the cluster's admin, once
// they are registered: a kubelet may not set a node-restriction.kubernetes.io/ label on its own
// Node (NodeRestriction), nor pass one to --node-labels, which is the point of the label.
func labelGateways(ctx context.Context, cs kubernetes.Interface, c labnet.ClusterNet) error {
	patch := []byte(`{"metadata":{"labels":{"` + labnet.GatewayLabel + `":"true"}}}`)
	for _, n := range c.Nodes {
		if !n.Gateway {
			continue
		}
		if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("labelling gateway node %s with %s: %w", n.Name, labnet.GatewayLabel, err)
		}
	}
	return nil
}

// grantFlannel gives flanneld's certificates (cni.FlannelGroup) what kube-flannel's manifest
// gives its ServiceAccount (cni.FlannelRBAC).
func grantFlannel(ctx context.Context, cs kubernetes.Interface) error {
	role, binding := cni.FlannelRBAC()
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("granting flanneld its role: %w", err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("granting flanneld its role: %w", err)
	}
	return nil
}

// waitPodCIDRs waits until every node of c is registered with its pod CIDRs: one, or on a
// dual-stack node (one with an IPv6 LAN address) one of each family, IPv4 first.
func waitPodCIDRs(ctx context.Context, cs kubernetes.Interface, c labnet.ClusterNet) (map[string][]netip.Prefix, error) {
	cidrs := map[string][]netip.Prefix{}
	want := map[string]int{}
	for _, n := range c.Nodes {
		want[n.Name] = 1
		if n.LANAddr6.IsValid() {
			want[n.Name] = 2
		}
	}
	err := pollNodes(ctx, cs, c, "registered with a pod CIDR of each family", func(n *corev1.Node) bool {
		if len(n.Spec.PodCIDRs) != want[n.Name] {
			return false
		}
		var ps []netip.Prefix
		for _, s := range n.Spec.PodCIDRs {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return false
			}
			ps = append(ps, p)
		}
		cidrs[n.Name] = ps
		return true
	})
	return cidrs, err
}

// waitNodesReady waits until every node of c is Ready.
func waitNodesReady(ctx context.Context, cs kubernetes.Interface, c labnet.ClusterNet) error {
	return pollNodes(ctx, cs, c, "Ready", func(n *corev1.Node) bool {
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue
			}
		}
		return false
	})
}

// pollNodes polls c's Nodes until ok holds for each, for at most realNodeReadyTimeout.
func pollNodes(ctx context.Context, cs kubernetes.Interface, c labnet.ClusterNet, what string, ok func(*corev1.Node) bool) error {
	ctx, cancel := context.WithTimeout(ctx, realNodeReadyTimeout)
	defer cancel()
	for {
		var pending []string
		for _, n := range c.Nodes {
			node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil || !ok(node) {
				pending = append(pending, n.Name)
			}
		}
		if len(pending) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster %s: nodes %v not %s within %s (see the kubelet logs under the lab dir's logs/): %w",
				c.Name, pending, what, realNodeReadyTimeout, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// cleanupRealNodes kills what real nodes leave running once their kubelet and containerd are
// gone (the shims and the pods' processes, found by the lab's cgroup) and removes the lab's
// cgroups. A lab that never started its nodes has none, which makes it a no-op.
func cleanupRealNodes(labID string) error {
	if err := realnode.KillCgroupProcesses(labID, downKillTimeout); err != nil {
		return err
	}
	return realnode.RemoveCgroups(labID)
}

// TagImage makes an image the lab's registry serves to the real nodes (ref, e.g. the project's
// ghcr.io/octopus-mcs/octopus:<version>) available under tag too, as pushing a new build of
// it would: a pod that asks for the new tag makes its node pull it from the registry, which
// fetches no layer the node already has. It is how a test upgrades the components to a "new"
// image (`helm upgrade` with another image.tag) without building one.
func (l *Lab) TagImage(ctx context.Context, ref, tag string) error {
	if l.nodes == nil || l.nodes.registry == nil {
		return errors.New("tagging an image: the lab has no real nodes, so no registry")
	}
	return l.nodes.registry.Tag(ctx, ref, tag)
}
