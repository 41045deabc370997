// Package lab runs a hub and several member clusters on one machine: real control planes
// (see controlplane), the hub deployed, every cluster joined and its agent running as a
// supervised process. It is used by `octopus lab` and by end-to-end tests, never by a
// component that runs in a real cluster.
package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/lab/realnode"
	"github.com/octopus-mcs/octopus/internal/progress"
)

// HubName is the name of the hub's control plane.
const HubName = "hub"

// MaxClusters bounds the member clusters: each gets 10.(N).0.0/16 pods and 10.(96+N).0.0/16
// services, which must stay clear of the default secondary pool 10.112.0.0/12.
const MaxClusters = 15

// Options configure Up.
type Options struct {
	// Clusters is the number of member clusters. Required, 1..MaxClusters.
	//
	// Up checks every field (Validate) and fills in the defaults (WithDefaults) first.
	Clusters int
	// Dir holds everything the lab writes. Required.
	Dir string
	// BinDir has the control-plane binaries (controlplane.EnsureBinaries). Required.
	BinDir string
	// AgentBinary is the octopus-agent executable. Required. When its directory holds every
	// binary of `make build` (images.OctopusBinaries), the nodes get the project's image and
	// the echo and octopus-dns images made from it, and the components run as the member
	// chart's pods; otherwise only as processes (ComponentProcesses), and pods of those
	// images cannot start.
	AgentBinary string
	// ComponentProcesses runs the controller, gateways and route agents as supervised
	// processes in the nodes' namespaces even where the member chart could run them as pods
	// (chartsOnNodes): for tests that still crash a gateway by its pidfile or read its
	// process log. Optional.
	ComponentProcesses bool
	// HeartbeatInterval of the agents. Optional, default 2s so the demo shows live state.
	HeartbeatInterval time.Duration
	// OverlappingCIDRs gives every member cluster the same pod and service CIDRs and joins
	// them with globalnet addressing: they reach each other's exported services by global
	// IPs (docs/architecture.md §6h). With SecondaryNetwork they join with secondary
	// addressing instead, and reach each other over net1. Optional.
	OverlappingCIDRs bool
	// DirectClusters, with OverlappingCIDRs or SecondaryNetwork, names member clusters that
	// keep CIDRs of their own and join with direct addressing beside the globalnet or
	// secondary ones: a mixed cluster set (docs/architecture.md §6h; a secondary cluster
	// connects only to secondary ones, §6s, so the lab holds two sets side by side, as the
	// secondary network's throughput benchmark uses). Optional.
	DirectClusters []string
	// NodesPerCluster is the number of nodes of each member cluster, the first
	// GatewaysPerCluster of them gateways. Optional: 0 means GatewaysPerCluster+1 (one
	// worker), at least labnet.MinNodesPerCluster; at most labnet.MaxNodesPerCluster.
	NodesPerCluster int
	// GatewaysPerCluster is the number of gateway nodes of each member cluster: one active
	// gateway, the others standbys that take over when it dies. Optional, default 1; at most
	// NodesPerCluster-1.
	GatewaysPerCluster int
	// Backends picks the tunnel backend ("wireguard" or "vxlan") of each cluster's gateway by
	// cluster name, and of the hub's gateway by HubName. Optional: wireguard.
	Backends map[string]string
	// Topology is how the clusters' gateways connect: mesh (direct tunnels) or hub (every
	// cluster joins with the hub topology and the hub's gateway, in a namespace of its own on
	// the underlay, forwards between them). Optional, default mesh.
	Topology v1alpha1.Topology
	// HubGateways is the number of the hub's gateway nodes with the hub topology: one active,
	// the others standbys that take over when it dies. Optional: 0 means 1 with the hub
	// topology; at most labnet.MaxHubGateways, and only with the hub topology.
	HubGateways int
	// ContainerdBinDir has containerd, its runc shim and ctr (controlplane.EnsureNodeRuntime);
	// BinDir must then also have the kubelet. Required.
	ContainerdBinDir string
	// CNI is the CNI setup of the nodes: cni.Bridge (the default) or
	// cni.Flannel. Optional.
	CNI string
	// FlannelBinDir has flanneld and the flannel CNI plugin (controlplane.EnsureFlannel).
	// Required with cni.Flannel.
	FlannelBinDir string
	// Unjoined brings up the network, the control planes and the nodes (images, cluster DNS
	// and the gateway nodes' endpoint annotation included) but neither deploys the hub nor
	// joins the clusters nor runs any Octopus component: what a cluster set looks like before
	// anyone installs Octopus, for tests in which something else does (the operator, from
	// Fabric objects: lab.TestOperatorLab). Lab.BrokerInfo is then empty and Lab.Members
	// lists no cluster. Optional; it excludes what only the lab's own join and components
	// use: the hub topology (its hub gateways need the deployed hub), Backends and
	// ComponentProcesses.
	Unjoined bool
	// SecondaryNetwork joins every member cluster with addressing secondary and installs the
	// member chart with its secondary network (secondaryNetwork.enabled, secondary.go): OVN's
	// databases and daemons, the ovnmaster and the NRI plugin run as the cluster's pods from
	// the OVN image, so the agent binary's directory must hold octopus-ovn too. Each node
	// gets a link of its own for the Geneve tunnels (SecondaryUnderlayLink). Optional; not
	// with ComponentProcesses or Unjoined.
	SecondaryNetwork bool
	// Vpcs makes, in every member cluster on the secondary network, the VPCs of issue 33's
	// scenario (vpcs.go): Vpcs red and blue with identical subnets (identical across the
	// clusters too), a namespace bound to each, and an echo pod per VPC on every node; the
	// member chart keeps their gateways on the gateway nodes (secondaryNetwork.gatewayPort.vpcs).
	// Optional; only with SecondaryNetwork.
	Vpcs bool
	// IPFamily is the member clusters' address family: IPFamilyIPv4 (the default) or
	// IPFamilyDual (dual-stack: both families' pod and service CIDRs, node and pod addresses,
	// every IPv6 one inside labnet.IPv6Range; the underlay stays IPv4, the tunnels carry
	// both). Optional; dual excludes OverlappingCIDRs, SecondaryNetwork, the hub topology and
	// flannel.
	IPFamily string
	// IPv4Clusters, with IPFamily dual, names member clusters left IPv4-only: a mixed cluster
	// set, in which the Peers between a dual-stack and an IPv4-only cluster carry IPv4 and say
	// why not IPv6. Optional.
	IPv4Clusters []string
	// Progress receives one line per step. Optional.
	Progress *progress.Reporter
	// Log receives structured logs (node heartbeats, process supervision). Optional.
	Log logr.Logger
}

// Lab is a running hub with joined clusters.
type Lab struct {
	Env        *controlplane.Environment
	BrokerInfo string
	Members    []string
	// Network names every namespace, link and address of the lab (see labnet.Plan).
	Network labnet.Plan
	nodes   *nodeAgents
	// charts says the member clusters' components are the member chart's pods
	// (chartsOnNodes), not processes.
	charts bool
	// lock says the lab runs (labnet.Lock) until Stop.
	lock *os.File
	// opts are the options the lab was brought up with, defaults applied.
	opts Options
}

// ClusterName is the name of the i-th member cluster (1-based).
func ClusterName(i int) string { return fmt.Sprintf("cluster%d", i) }

// clusterCIDRs gives the i-th cluster (0 is the hub) its pod and service CIDRs: distinct per
// cluster, or, with overlapping, those of cluster 1 for every member cluster.
func clusterCIDRs(i int, overlapping bool) (pods, services netip.Prefix) {
	if overlapping && i > 0 {
		i = 1
	}
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 16),
		netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(96 + i), 0, 0}), 16)
}

// Up builds the lab network, starts the control planes bound to an address on it, registers
// the nodes and runs kube-proxy in each, deploys the hub, joins every cluster and starts its
// agent (with Options.Unjoined it stops after the nodes). It needs root. It first removes
// what an earlier lab in the same Dir left (see Down). On error it stops whatever it started.
func Up(ctx context.Context, opts Options) (l *Lab, err error) {
	opts, err = upOptions(opts)
	if err != nil {
		return nil, err
	}
	if err := preflight(); err != nil {
		return nil, err
	}
	p := opts.Progress
	dir, err := canonicalDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	id := labnet.LabID(dir)
	lock, err := labnet.Lock(id)
	if err != nil {
		return nil, fmt.Errorf("%w (the lab in %s; stop it first, or give this one another directory)", err, dir)
	}
	defer func() {
		if l == nil {
			_ = lock.Close()
		}
	}()
	specs, netSpecs := clusterSpecs(opts)
	plan, err := labnet.NewPlan(id, netSpecs, opts.HubGateways)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := createNetwork(dir, plan, p); err != nil {
		return nil, err
	}

	p.Step("Starting etcd and %d control planes in %s", len(specs), dir)
	env, err := controlplane.Start(ctx, controlplane.Options{
		BinDir: opts.BinDir, Dir: dir, BindAddress: labnet.APIAddress, Log: opts.Log, Progress: progressOut(p),
	}, specs...)
	if err != nil {
		return nil, errors.Join(err, labnet.Teardown(id))
	}
	l = &Lab{Env: env, BrokerInfo: filepath.Join(dir, "broker-info"), Network: plan, lock: lock, charts: chartsOnNodes(opts), opts: opts}
	defer func() {
		if err != nil {
			err = errors.Join(err, l.Stop())
		}
	}()

	step := time.Now()
	p.Step("Starting containerd, a kubelet and kube-proxy on %d nodes per cluster", opts.NodesPerCluster)
	if l.nodes, err = startNodes(ctx, env, plan, opts); err != nil {
		return l, err
	}
	p.Done(step, "%d nodes registered", opts.Clusters*opts.NodesPerCluster)

	if opts.Unjoined {
		if err := l.finishUnjoined(ctx); err != nil {
			return l, err
		}
		p.Done(start, "Lab up: hub and %d clusters, none joined (Unjoined)", opts.Clusters)
		return l, nil
	}
	if err := l.deployHubAndJoin(ctx); err != nil {
		return l, err
	}
	p.Done(start, "Lab up: hub and %d clusters joined", opts.Clusters)
	return l, nil
}

// upOptions is Up's options with the defaults filled in, the sizes that follow from other
// options derived, and checked.
func upOptions(opts Options) (Options, error) {
	opts = opts.WithDefaults()
	if err := opts.Validate(); err != nil {
		return opts, fmt.Errorf("lab options: %w", err)
	}
	if opts.NodesPerCluster == 0 {
		opts.NodesPerCluster = max(labnet.MinNodesPerCluster, opts.GatewaysPerCluster+1)
	}
	if opts.Topology == v1alpha1.TopologyHub && opts.HubGateways == 0 {
		opts.HubGateways = 1
	}
	if opts.ContainerdBinDir == "" {
		return opts, errors.New("the nodes need the directory of containerd (see controlplane.EnsureNodeRuntime)")
	}
	return opts, nil
}

// clusterSpecs is what the control planes (the hub first, then every member) and the lab
// network (members only) are made from.
func clusterSpecs(opts Options) ([]controlplane.ClusterOptions, []labnet.ClusterSpec) {
	specs := make([]controlplane.ClusterOptions, 0, opts.Clusters+1)
	var netSpecs []labnet.ClusterSpec
	for i := 0; i <= opts.Clusters; i++ {
		name := HubName
		if i > 0 {
			name = ClusterName(i)
		}
		pods, services := clusterCIDRs(i, opts.OverlappingCIDRs && !slices.Contains(opts.DirectClusters, name))
		// Member clusters schedule pods onto their nodes; the hub has nodes only for the hub
		// chart's gateways (hubGatewayNodes).
		spec := controlplane.ClusterOptions{Name: name, PodCIDR: pods, ServiceCIDR: services, Scheduler: i > 0 || hubGatewayNodes(opts)}
		if i > 0 && opts.dualStack() && !slices.Contains(opts.IPv4Clusters, name) {
			// The hub stays IPv4: it runs no pods of ours in the mesh topology.
			spec.SecondaryPodCIDR, spec.SecondaryServiceCIDR = labnet.PodCIDR6(i), labnet.ServiceCIDR6(i)
		}
		specs = append(specs, spec)
		if i > 0 {
			netSpecs = append(netSpecs, labnet.ClusterSpec{Name: name, Index: i, ServiceCIDR: services,
				ServiceCIDR6: spec.SecondaryServiceCIDR, Nodes: opts.NodesPerCluster, Gateways: opts.GatewaysPerCluster})
		}
	}
	return specs, netSpecs
}

// createNetwork removes what abandoned labs and an earlier lab in dir left, then creates the
// plan's network; if that fails half-way, it removes what it made.
func createNetwork(dir string, plan labnet.Plan, p *progress.Reporter) error {
	if err := clearAbandonedLabs(plan.ID, p); err != nil {
		return err
	}
	p.Step("Removing what an earlier lab in %s left behind", dir)
	if err := Down(dir); err != nil {
		return err
	}
	step := time.Now()
	p.Step("Creating the lab network: %d namespaces (lab ID %s)", len(plan.Namespaces()), plan.ID)
	if err := labnet.Apply(plan); err != nil {
		return errors.Join(err, labnet.Teardown(plan.ID))
	}
	p.Done(step, "API servers listen on %s; cluster LANs in %s; underlay %s", labnet.APIAddress, labnet.LANRange, labnet.UnderlayRange)
	return nil
}

// finishUnjoined finishes a lab whose clusters someone else joins later (Options.Unjoined):
// no broker-info, but the Nodes carry their underlay addresses, since whoever joins runs the
// gateways from the Nodes alone and that address is a fact of the lab's network, not of a join.
func (l *Lab) finishUnjoined(ctx context.Context) error {
	l.BrokerInfo = ""
	for _, c := range l.Network.Clusters {
		if _, err := annotateEndpoints(ctx, l.Env.Cluster(c.Name), c); err != nil {
			return err
		}
	}
	return nil
}

// deployHubAndJoin deploys the hub (with its gateways, as the chart or as processes), writes
// broker-info and joins every member cluster.
func (l *Lab) deployHubAndJoin(ctx context.Context) error {
	opts, env, plan := l.opts, l.Env, l.Network
	opts.Progress.Step("Deploying the hub")
	if hubGatewayNodes(opts) {
		// Before Deploy, as `octopus hub deploy --chart` does: Helm adopts no object it did
		// not make, and Deploy re-applies the chart's objects unchanged.
		if err := installHubChart(ctx, opts, env.Cluster(HubName), plan.HubGateways); err != nil {
			return err
		}
	}
	info, err := hub.Deploy(ctx, env.Cluster(HubName).RESTConfig(), hub.DeployOptions{Progress: opts.Progress})
	if err != nil {
		return err
	}
	if err := info.WriteFile(l.BrokerInfo); err != nil {
		return err
	}
	if !hubGatewayNodes(opts) {
		if err := startHubGateways(ctx, opts, env, plan.HubGateways, info.Namespace); err != nil {
			return err
		}
	}
	if err := joinAll(ctx, opts, env, plan, info); err != nil {
		return err
	}
	for i := 1; i <= opts.Clusters; i++ {
		l.Members = append(l.Members, ClusterName(i))
	}
	return nil
}

// joinAll joins every member cluster to the hub and starts its components, all clusters at
// once: each join waits mostly on its own API server and chart pods, and the hub's claims of
// CIDRs and blocks are race-free (internal/join), so a lab of N clusters joins in about the
// time of one instead of N.
func joinAll(ctx context.Context, opts Options, env *controlplane.Environment, plan labnet.Plan, info *hub.BrokerInfo) error {
	errs := make([]error, opts.Clusters)
	var wg sync.WaitGroup
	for i := 1; i <= opts.Clusters; i++ {
		wg.Go(func() { errs[i-1] = joinOne(ctx, opts, env, plan, info, i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// joinOne joins member cluster i with the addressing the options give it and starts its
// components.
func joinOne(ctx context.Context, opts Options, env *controlplane.Environment, plan labnet.Plan, info *hub.BrokerInfo, i int) error {
	p := opts.Progress
	name := ClusterName(i)
	cp := env.Cluster(name)
	// Direct addressing refuses overlapping CIDRs at join; globalnet is the mode meant for them.
	addressing := v1alpha1.AddressingDirect
	if opts.OverlappingCIDRs && !slices.Contains(opts.DirectClusters, name) {
		addressing = v1alpha1.AddressingGlobalnet
	}
	onSecondary := opts.SecondaryNetwork && !slices.Contains(opts.DirectClusters, name)
	if onSecondary {
		addressing = v1alpha1.AddressingSecondary
	}
	joined, err := cluster.Join(ctx, cp.RESTConfig(), cluster.JoinOptions{
		BrokerInfo: info, ClusterID: name, PodCIDRs: podCIDRs(cp), Progress: p,
		Addressing: addressing, Topology: opts.Topology, DNSByChart: chartsOnNodes(opts),
	})
	if err != nil {
		return fmt.Errorf("joining %s: %w", name, err)
	}
	var secondary map[string]any
	if onSecondary {
		if secondary, err = prepareSecondaryNetwork(ctx, i, *plan.Cluster(name), joined, info, opts.Vpcs); err != nil {
			return err
		}
	}
	if err := startComponents(ctx, opts, env, cp, *plan.Cluster(name), secondary); err != nil {
		return err
	}
	if onSecondary && opts.Vpcs {
		return startVpcs(ctx, opts.Progress, cp, *plan.Cluster(name))
	}
	return nil
}

// podCIDRs are the cluster's pod CIDRs as join registers them: of each family it has.
func podCIDRs(cp *controlplane.ControlPlane) []string {
	cidrs := []string{cp.PodCIDR.String()}
	if cp.SecondaryPodCIDR.IsValid() {
		cidrs = append(cidrs, cp.SecondaryPodCIDR.String())
	}
	return cidrs
}

// startAgent runs the cluster's octopus-agent controller as a supervised child of the
// environment: forked from its spawner thread with Pdeathsig and a pidfile, so it dies with
// the lab and `lab down` finds it after a crash. Environment.Stop sends it SIGTERM first, so
// it reports AgentStopped.
func startAgent(opts Options, env *controlplane.Environment, cp *controlplane.ControlPlane) error {
	binary, err := filepath.Abs(opts.AgentBinary)
	if err != nil {
		return fmt.Errorf("starting the agent of %s: %w", cp.Name, err)
	}
	return env.StartProcess(controlplane.ProcessOptions{
		Name:   "agent-" + cp.Name,
		Binary: binary,
		// The lab's agents share the host's network namespace, where the default metrics
		// port can be bound only once.
		Args: append([]string{"controller", "--kubeconfig", cp.Kubeconfig, "--metrics-bind-address", "0"}, controllerSettings(opts)...),
	})
}

// controllerSettings are the flags the lab gives the cluster's controller, as a process
// (startAgent) or as the member chart's Deployment (chartValues): a short heartbeat, so the
// demo shows live state, and a Lease that outlives three of them.
func controllerSettings(opts Options) []string {
	return []string{"--heartbeat-interval=" + opts.HeartbeatInterval.String(), "--lease-duration=" + (3 * opts.HeartbeatInterval).String()}
}

// Stop ends the node heartbeats and the pods (processes killed, pod namespaces deleted), then
// every process (agents and kube-proxies first, then the control planes), then deletes the
// lab's namespaces and links. It keeps Dir with the logs;
// Down removes it.
func (l *Lab) Stop() error {
	l.nodes.stop()
	// Kube-proxies, kubelets and containerds stop with the environment; what containerd
	// started (shims, pods) goes with the lab's cgroups, and the namespaces only after all of
	// them.
	err := l.Env.Stop()
	err = errors.Join(err, cleanupRealNodes(l.Network.ID), labnet.Teardown(l.Network.ID))
	_ = l.lock.Close()
	return err
}

// Down removes everything a lab in dir made, whether it is still running or crashed: it kills
// every process inside the lab's namespaces (pod containers and whatever they forked, which
// outlive a killed `lab up` when they are not its direct children), in its cgroups (real
// nodes' shims and pods) and of its pidfiles (see controlplane.CleanupStale), deletes its
// cgroups, namespaces and
// root-namespace links (found by the lab ID derived from dir) and then dir. It is safe to run
// twice.
func Down(dir string) error {
	dir, err := canonicalDir(dir)
	if err != nil {
		return err
	}
	// Processes first: a namespace stays alive, unnamed, while a process runs in it.
	id := labnet.LabID(dir)
	namespaces, err := labnet.ListNamespaces(labnet.NetnsOwnerPrefix(id))
	if err != nil {
		return err
	}
	if err := labnet.KillProcessesIn(namespaces, downKillTimeout); err != nil {
		return err
	}
	// Real nodes' pods run in network namespaces only their containerd knew: the lab's
	// cgroups find them.
	if err := realnode.KillCgroupProcesses(id, downKillTimeout); err != nil {
		return err
	}
	if err := controlplane.CleanupStale(dir); err != nil {
		return err
	}
	if err := realnode.RemoveCgroups(id); err != nil {
		return err
	}
	return labnet.Teardown(id)
}

// clearAbandonedLabs makes way for lab id: two labs cannot run at once (both would put
// APIAddress and the same LAN addresses on root links), but the network of one whose run was
// killed outright (the machine's session ended, SIGKILL to the whole group) stays behind with
// nothing running in it, and nobody may know its directory any more. That network is removed;
// a lab that still runs is refused with what to do.
func clearAbandonedLabs(id string, p *progress.Reporter) error {
	others, err := labnet.OtherLabs(id)
	if err != nil {
		return err
	}
	for _, other := range others {
		abandoned, reason, err := labnet.Abandoned(other)
		if err != nil {
			return err
		}
		if !abandoned {
			return fmt.Errorf("another lab is running on this machine (links %s*: %s); stop it first with `octopus lab down` for its directory", labnet.RootLinkOwnerPrefix(other), reason)
		}
		step := time.Now()
		p.Step("Removing the network of lab %s, left behind by a run that was killed (nothing runs in it)", other)
		if err := labnet.Teardown(other); err != nil {
			return err
		}
		p.Done(step, "removed")
	}
	return nil
}

// downKillTimeout bounds how long Down waits for the processes in the lab's namespaces to die.
const downKillTimeout = 10 * time.Second

// canonicalDir makes dir absolute and resolves symlinks if it exists, so that Up and Down
// derive the same lab ID whichever alias of the directory they are given.
func canonicalDir(dir string) (string, error) {
	if dir == "" {
		return "", errors.New("the lab needs a state directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("lab dir %s: %w", dir, err)
	}
	if resolved, err := filepath.EvalSymlinks(abs); err == nil {
		return resolved, nil
	}
	return abs, nil
}

// preflight checks what Up needs before it changes anything.
func preflight() error {
	if os.Geteuid() != 0 {
		return errors.New("the lab needs root: it creates network namespaces and links (run it with sudo)")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return fmt.Errorf("kube-proxy in nftables mode needs the nft tool: install nftables (hack/install-deps.sh): %w", err)
	}
	return nil
}

func progressOut(p *progress.Reporter) io.Writer {
	if p == nil || p.W == nil {
		return io.Discard
	}
	return p.W
}
