// Package nodeagent plays the pod half of a kubelet for the lab's nodes: it runs the pods the
// scheduler binds to them. Each pod gets a network namespace joined to its node by a veth, an
// address from the node's pod CIDR, and its containers as host processes inside that
// namespace (well-known images map to host binaries, see Images). It reports pod status
// (podIP, phase, Ready and ContainersReady, container states), follows the restart policy,
// and on deletion kills the pod's processes, removes its namespace and finalizes the pod.
// With Options.Kubelet it serves the kubelet API that `kubectl exec` and `kubectl logs` reach
// through the API server (server.go). Each pod has its own mount namespace with the
// kubelet's resolv.conf (cluster DNS) and /etc/hosts (mountns.go). Not yet: init containers
// and volumes.
package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/octopus-mcs/octopus/internal/lab/labnet"
)

const (
	// workers reconcile pods concurrently: a pod's deletion waits out its grace period and
	// must not hold up the others.
	workers = 4
	// resync revisits every pod and node, healing anything an event did not cover.
	resync = 30 * time.Second
	// maxGrace caps a deleted pod's termination grace period: lab processes are not PID 1
	// and die on SIGTERM, so a long wait only delays tests.
	maxGrace = 30 * time.Second
	// nodesKey is the queue key of the node routing sync; pod keys are namespace/name.
	nodesKey = "\x00nodes"
)

// Node is a lab node the agent runs pods for.
type Node struct {
	// Name is the Kubernetes Node name.
	Name string
	// Netns is the node's network namespace.
	Netns string
	// LANAddr is the node's InternalIP.
	LANAddr netip.Addr
}

// Options configure an Agent. All fields are required unless marked optional.
type Options struct {
	// Cluster names the cluster, for EnvCluster and logs.
	Cluster string
	// Client talks to the cluster's API server.
	Client kubernetes.Interface
	// Nodes are the nodes whose pods this agent runs: all the cluster's nodes.
	Nodes []Node
	// ClusterPodCIDR is the cluster's pod range (each node's spec.podCIDR is inside it).
	ClusterPodCIDR netip.Prefix
	// LabID names the pods' namespaces (labnet.PodNetnsName).
	LabID string
	// Dir holds the containers' logs and pidfiles, one directory per pod.
	Dir string
	// Images maps container images to host binaries.
	Images Images
	// Network creates pod namespaces and node routes; LabNetwork in the lab.
	Network Network
	// Start starts container processes in a namespace: controlplane.StartInNetns in the lab.
	Start Starter
	// ClusterDNS is the kube-dns Service's ClusterIP (ClusterDNSAddr): the nameserver of
	// pods' resolv.conf. Optional: without it pods keep the node's resolv.conf.
	ClusterDNS netip.Addr
	// APIService is the ClusterIP and port of the default/kubernetes Service, given to
	// containers as KUBERNETES_SERVICE_HOST and _PORT (in-cluster clients such as CoreDNS
	// find the API server by them). Optional.
	APIService netip.AddrPort
	// Kubelet serves the kubelet API (exec, logs) on every node's address. Optional:
	// without it `kubectl exec` and `kubectl logs` fail as for a node without a kubelet.
	Kubelet *KubeletServing
	// Log receives structured logs. Optional.
	Log logr.Logger
}

// Agent runs the pods of one cluster's lab nodes.
type Agent struct {
	opts  Options
	nodes map[string]Node
	queue workqueue.TypedRateLimitingInterface[string]
	podsL listersv1.PodLister
	nodeL listersv1.NodeLister

	mu   sync.Mutex
	pods map[string]*pod // by namespace/name
	// configured is the last NodeConfig applied per node, so unchanged ones are not rewritten
	// on every Node status heartbeat.
	configured map[string]string
}

// New checks the options and returns an Agent; Run starts it.
func New(opts Options) (*Agent, error) {
	switch {
	case opts.Client == nil, opts.Network == nil, opts.Start == nil:
		return nil, errors.New("node agent: Client, Network and Start are required")
	case len(opts.Nodes) == 0:
		return nil, errors.New("node agent: no nodes")
	case !opts.ClusterPodCIDR.IsValid(), opts.LabID == "", opts.Dir == "":
		return nil, errors.New("node agent: ClusterPodCIDR, LabID and Dir are required")
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	a := &Agent{opts: opts, nodes: map[string]Node{}, pods: map[string]*pod{}, configured: map[string]string{}}
	for _, n := range opts.Nodes {
		a.nodes[n.Name] = n
	}
	return a, nil
}

// Run watches pods and nodes and reconciles until ctx ends, then stops every pod it runs
// (processes killed, namespaces removed; the Pod objects stay) and returns.
func (a *Agent) Run(ctx context.Context) error {
	if err := os.MkdirAll(a.opts.Dir, 0o755); err != nil {
		return fmt.Errorf("node agent of %s: %w", a.opts.Cluster, err)
	}
	a.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "lab-node-agent-" + a.opts.Cluster})
	factory := informers.NewSharedInformerFactory(a.opts.Client, resync)
	podInf := factory.Core().V1().Pods()
	nodeInf := factory.Core().V1().Nodes()
	a.podsL, a.nodeL = podInf.Lister(), nodeInf.Lister()
	enqueuePod := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			a.queue.Add(key)
		}
	}
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueuePod, UpdateFunc: func(_, o any) { enqueuePod(o) }, DeleteFunc: enqueuePod,
	}); err != nil {
		return fmt.Errorf("node agent of %s: watching pods: %w", a.opts.Cluster, err)
	}
	enqueueNodes := func(any) { a.queue.Add(nodesKey) }
	if _, err := nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueueNodes, UpdateFunc: func(_, o any) { enqueueNodes(o) }, DeleteFunc: enqueueNodes,
	}); err != nil {
		return fmt.Errorf("node agent of %s: watching nodes: %w", a.opts.Cluster, err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	waitKubelet := func() {}
	if a.opts.Kubelet != nil {
		var err error
		if waitKubelet, err = a.serveKubelet(ctx); err != nil {
			a.queue.ShutDown()
			factory.Shutdown()
			return err
		}
	}

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for a.processNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	a.queue.ShutDown()
	wg.Wait()
	waitKubelet()
	factory.Shutdown()
	return a.stopAll()
}

func (a *Agent) processNext(ctx context.Context) bool {
	key, quit := a.queue.Get()
	if quit {
		return false
	}
	defer a.queue.Done(key)
	err := a.reconcile(ctx, key)
	if err == nil {
		a.queue.Forget(key)
		return true
	}
	if ctx.Err() == nil {
		a.opts.Log.Error(err, "Reconciling failed; retrying", "cluster", a.opts.Cluster, "key", key)
		a.queue.AddRateLimited(key)
	}
	return true
}

// stopAll stops every pod's containers and removes its namespace.
func (a *Agent) stopAll() error {
	a.mu.Lock()
	pods := make([]*pod, 0, len(a.pods))
	for _, p := range a.pods {
		pods = append(pods, p)
	}
	a.pods = map[string]*pod{}
	a.mu.Unlock()
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Go(func() { errs[i] = a.teardown(p, 2*time.Second) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (a *Agent) reconcile(ctx context.Context, key string) error {
	if key == nodesKey {
		return a.syncNodes()
	}
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil //nolint:nilerr // a malformed key never becomes valid; drop it
	}
	obj, err := a.podsL.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		obj = nil
	} else if err != nil {
		return err
	}
	a.mu.Lock()
	rt := a.pods[key]
	a.mu.Unlock()
	if rt != nil && (obj == nil || obj.UID != rt.uid || obj.Spec.NodeName != rt.node.Name) {
		// Gone, recreated under the same name, or (impossibly) moved: the old pod's
		// processes and namespace go.
		a.forget(key, rt)
		if err := a.teardown(rt, 0); err != nil {
			return err
		}
		if err := rt.removeDir(); err != nil {
			return err
		}
		rt = nil
	}
	if obj == nil {
		return nil
	}
	node, ours := a.nodes[obj.Spec.NodeName]
	if !ours {
		return nil
	}
	if obj.DeletionTimestamp != nil {
		return a.finalize(ctx, key, obj, rt)
	}
	if rt == nil {
		if obj.Status.Phase == corev1.PodSucceeded || obj.Status.Phase == corev1.PodFailed {
			return nil // finished before this agent started; nothing runs
		}
		if rt, err = a.createPod(key, obj, node); err != nil {
			return err
		}
	}
	status := rt.status(obj)
	if (status.Phase == corev1.PodSucceeded || status.Phase == corev1.PodFailed) && !rt.isTornDown() {
		// As a kubelet removes a finished pod's sandbox: its address goes back to the pool.
		if err := a.teardown(rt, 0); err != nil {
			return err
		}
	}
	return a.updateStatus(ctx, obj, status)
}

// finalize stops a pod being deleted, within its grace period, and deletes it for good, as a
// kubelet does once the pod's containers are gone.
func (a *Agent) finalize(ctx context.Context, key string, obj *corev1.Pod, rt *pod) error {
	if rt != nil {
		grace := maxGrace
		if s := obj.DeletionGracePeriodSeconds; s != nil {
			grace = min(time.Duration(*s)*time.Second, maxGrace)
		}
		if err := a.teardown(rt, grace); err != nil {
			return err
		}
		if err := rt.removeDir(); err != nil {
			return err
		}
		a.forget(key, rt)
	}
	err := a.opts.Client.CoreV1().Pods(obj.Namespace).Delete(ctx, obj.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptrTo(int64(0)),
		Preconditions:      &metav1.Preconditions{UID: &obj.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("finalizing pod %s: %w", key, err)
	}
	a.opts.Log.V(1).Info("Pod deleted", "cluster", a.opts.Cluster, "pod", key)
	return nil
}

func (a *Agent) forget(key string, rt *pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pods[key] == rt {
		delete(a.pods, key)
	}
}

// updateStatus writes status unless the pod already has it.
func (a *Agent) updateStatus(ctx context.Context, obj *corev1.Pod, status corev1.PodStatus) error {
	if equality.Semantic.DeepEqual(obj.Status, status) {
		return nil
	}
	next := obj.DeepCopy()
	next.Status = status
	if _, err := a.opts.Client.CoreV1().Pods(obj.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // deleted meanwhile; the delete event brings us back
		}
		return fmt.Errorf("updating status of pod %s/%s: %w", obj.Namespace, obj.Name, err)
	}
	return nil
}

// podCIDR returns the node's spec.podCIDR, which node-ipam assigns shortly after the node
// registers.
func (a *Agent) podCIDR(node string) (netip.Prefix, error) {
	n, err := a.nodeL.Get(node)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("reading node %s: %w", node, err)
	}
	p, err := netip.ParsePrefix(n.Spec.PodCIDR)
	if err != nil || !p.Addr().Is4() || p.Bits() > 30 {
		return netip.Prefix{}, fmt.Errorf("node %s has no usable IPv4 pod CIDR yet (%q)", node, n.Spec.PodCIDR)
	}
	return p.Masked(), nil
}

// createPod sets up the pod's network and starts its containers.
func (a *Agent) createPod(key string, obj *corev1.Pod, node Node) (*pod, error) {
	rt := &pod{uid: obj.UID, node: node, hostNetwork: obj.Spec.HostNetwork, created: time.Now(), agent: a, key: key,
		tokens: map[string]issuedToken{}}
	if rt.hostNetwork {
		rt.ip = node.LANAddr
		rt.netnsPath = labnet.NetnsPath(node.Netns)
	} else {
		cidr, err := a.podCIDR(node.Name)
		if err != nil {
			return nil, err
		}
		netnsName := labnet.PodNetnsName(a.opts.LabID, string(obj.UID))
		ip, err := a.chooseIP(obj, node, cidr, netnsName)
		if err != nil {
			return nil, err
		}
		rt.net = labnet.PodNet{
			Netns: netnsName, NodeNetns: node.Netns, HostVeth: labnet.PodVethName(string(obj.UID)),
			Addr: ip, Gateway: labnet.PodGateway(cidr),
		}
		rt.ip = ip
		rt.netnsPath = labnet.NetnsPath(netnsName)
		// Reserve the address before the (slow) setup so a concurrent worker picks another.
		a.mu.Lock()
		a.pods[key] = rt
		a.mu.Unlock()
		if err := a.opts.Network.SetupPod(rt.net); err != nil {
			a.forget(key, rt)
			return nil, errors.Join(fmt.Errorf("setting up the network of pod %s: %w", key, err), a.opts.Network.DeletePod(rt.net))
		}
	}
	rt.dir = filepath.Join(a.opts.Dir, fmt.Sprintf("%s_%s_%s", obj.Namespace, obj.Name, obj.UID))
	if err := os.MkdirAll(rt.dir, 0o755); err != nil {
		a.forget(key, rt)
		return nil, errors.Join(fmt.Errorf("pod %s: %w", key, err), a.teardown(rt, 0))
	}
	if err := rt.setupMounts(context.Background(), obj); err != nil {
		a.forget(key, rt)
		return nil, errors.Join(err, a.teardown(rt, 0))
	}
	rt.startContainers(obj)
	a.mu.Lock()
	a.pods[key] = rt
	a.mu.Unlock()
	a.opts.Log.V(1).Info("Pod started", "cluster", a.opts.Cluster, "pod", key, "node", node.Name, "ip", rt.ip)
	return rt, nil
}

// chooseIP keeps the address of an existing namespace (a restarted agent) or the one the pod
// reports, if still free, and else takes the lowest free address of the node's pod CIDR
// after the gateway.
func (a *Agent) chooseIP(obj *corev1.Pod, node Node, cidr netip.Prefix, netnsName string) (netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	used := map[netip.Addr]bool{labnet.PodGateway(cidr): true}
	for _, p := range a.pods {
		if p.node.Name == node.Name && !p.hostNetwork && !p.isTornDown() {
			used[p.ip] = true
		}
	}
	if ip, ok := a.opts.Network.PodAddr(netnsName); ok && cidr.Contains(ip) && !used[ip] {
		return ip, nil
	}
	if ip, err := netip.ParseAddr(obj.Status.PodIP); err == nil && cidr.Contains(ip) && !used[ip] && ip != cidr.Addr() {
		return ip, nil
	}
	return allocate(cidr, used)
}

// allocate returns the lowest address of cidr that is not used, the network and broadcast
// addresses excluded.
func allocate(cidr netip.Prefix, used map[netip.Addr]bool) (netip.Addr, error) {
	last := lastAddr(cidr)
	for ip := cidr.Addr().Next(); ip.IsValid() && ip.Less(last); ip = ip.Next() {
		if !used[ip] {
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("pod CIDR %s is full", cidr)
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := (uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// teardown stops the pod's containers within grace and removes its namespace.
func (a *Agent) teardown(rt *pod, grace time.Duration) error {
	rt.stop(grace)
	if rt.hostNetwork {
		return nil
	}
	if err := a.opts.Network.DeletePod(rt.net); err != nil {
		return fmt.Errorf("removing the network of pod %s: %w", rt.key, err)
	}
	return nil
}

// removeDir deletes the pod's directory (logs, volumes, resolv.conf) once the pod is gone
// for good, as a kubelet removes a deleted pod's directory; a finished pod keeps it so that
// its logs stay readable.
func (p *pod) removeDir() error {
	if p.dir == "" {
		return nil
	}
	if err := os.RemoveAll(p.dir); err != nil {
		return fmt.Errorf("removing the directory of pod %s: %w", p.key, err)
	}
	return nil
}

// syncNodes routes every node's pods' traffic to the other nodes' pod CIDRs (see
// labnet.ConfigureNode), once each node has a pod CIDR.
func (a *Agent) syncNodes() error {
	all, err := a.nodeL.List(labels.Everything())
	if err != nil {
		return err
	}
	type peer struct {
		cidr netip.Prefix
		addr netip.Addr
	}
	peers := map[string]peer{}
	for _, n := range all {
		cidr, err := netip.ParsePrefix(n.Spec.PodCIDR)
		if err != nil {
			continue // not assigned yet; the node's update brings us back
		}
		for _, addr := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(addr.Address); err == nil && addr.Type == corev1.NodeInternalIP {
				peers[n.Name] = peer{cidr: cidr.Masked(), addr: ip}
			}
		}
	}
	var errs []error
	for _, n := range a.opts.Nodes {
		c := labnet.NodeConfig{Netns: n.Netns, ClusterPodCIDR: a.opts.ClusterPodCIDR, PeerRoutes: map[netip.Prefix]netip.Addr{}}
		for name, p := range peers {
			if name != n.Name {
				c.PeerRoutes[p.cidr] = p.addr
			}
		}
		sig := configSignature(c)
		a.mu.Lock()
		same := a.configured[n.Name] == sig
		a.mu.Unlock()
		if same {
			continue
		}
		if err := a.opts.Network.ConfigureNode(c); err != nil {
			errs = append(errs, err)
			continue
		}
		a.mu.Lock()
		a.configured[n.Name] = sig
		a.mu.Unlock()
	}
	return errors.Join(errs...)
}

func configSignature(c labnet.NodeConfig) string {
	routes := make([]string, 0, len(c.PeerRoutes))
	for dst, gw := range c.PeerRoutes {
		routes = append(routes, dst.String()+">"+gw.String())
	}
	sort.Strings(routes)
	return c.ClusterPodCIDR.String() + " " + strings.Join(routes, ",")
}

// enqueue asks for the pod's status to be recomputed (a container exited, a probe changed).
func (a *Agent) enqueue(key string) {
	if a.queue != nil {
		a.queue.Add(key)
	}
}

// serviceEnv returns the kubernetes Service variables the kubelet gives every container,
// leaving out those env already sets.
func (a *Agent) serviceEnv(env []string) []string {
	svc := a.opts.APIService
	if !svc.IsValid() {
		return nil
	}
	port := strconv.Itoa(int(svc.Port()))
	vars := [][2]string{
		{"KUBERNETES_SERVICE_HOST", svc.Addr().String()},
		{"KUBERNETES_SERVICE_PORT", port},
		{"KUBERNETES_SERVICE_PORT_HTTPS", port},
		{"KUBERNETES_PORT", "tcp://" + svc.String()},
	}
	var out []string
	for _, v := range vars {
		if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, v[0]+"=") }) {
			out = append(out, v[0]+"="+v[1])
		}
	}
	return out
}
