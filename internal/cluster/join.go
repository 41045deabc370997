// Package cluster is a member cluster's side of the cluster set as the CLI sees it: joining the
// hub and leaving it, discovering its CIDRs, claiming its address blocks, and the clusters'
// status for `octopus show clusters`. Join applies what internal/manifests/render renders; the running
// components (internal/heartbeat, internal/hubaccess) never link this package.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aboutv1alpha1 "github.com/octopus-mcs/octopus/api/about/v1alpha1"
	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/dnsconfig"
	"github.com/octopus-mcs/octopus/internal/globalnet/globalip"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/ipam"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/manifests/render"
	"github.com/octopus-mcs/octopus/internal/progress"
	"github.com/octopus-mcs/octopus/internal/secondarynet/icconfig"
	"github.com/octopus-mcs/octopus/internal/version"
)

// JoinOptions configure Join.
type JoinOptions struct {
	// BrokerInfo is what `octopus hub deploy` wrote. Required.
	BrokerInfo *hub.BrokerInfo
	// ClusterID is the cluster's identity in the cluster set, an RFC-1123 label. Required.
	ClusterID string
	// PodCIDRs and ServiceCIDRs override discovery. Optional.
	PodCIDRs, ServiceCIDRs []string
	// Addressing is how other clusters reach this one. Optional, default direct.
	Addressing v1alpha1.Addressing
	// Topology is how this cluster's gateway reaches the others (Cluster.spec.topology).
	// Optional, default mesh.
	Topology v1alpha1.Topology
	// GlobalEgressSize is how many addresses at the start of the global CIDR are the cluster's
	// egress range (Cluster.spec.globalEgressSize), globalnet addressing only. It is written
	// into the Cluster, where both the controller's allocator and the gateway's NAT read it,
	// and cannot change while the cluster is joined. Optional: 0 leaves it unset, which means
	// globalip.DefaultClusterEgressSize.
	GlobalEgressSize int32
	// DNSImage is the octopus-dns image deployed in the cluster. Optional, default
	// render.DNSImage tagged with this build's version.
	DNSImage string
	// DNSByChart leaves octopus-dns and the cluster DNS's forwarding to it out: the member
	// chart (charts/octopus-member), which the caller installs after Join, deploys octopus-dns,
	// and the caller then runs ForwardDNS. Optional.
	DNSByChart bool
	// Interconnect makes the cluster an OVN-IC availability zone (join --interconnect ovn-ic):
	// Kube-OVN's ovn-ic-config, written into the member's kube-system, and the cluster's
	// interconnection client certificate, requested from the hub's signer. Secondary
	// addressing only. Optional.
	Interconnect *icconfig.Config
	// InterconnectCertTimeout bounds the wait for the hub to sign. Optional, default 60s.
	InterconnectCertTimeout time.Duration
	// Progress receives one line per step. Optional.
	Progress *progress.Reporter
	// HubAttempts bounds the attempts to reach the hub, HubRetryInterval spaces them.
	// Optional, defaults 5 and 2s.
	HubAttempts      int
	HubRetryInterval time.Duration
}

// Joined is the outcome of a successful Join.
type Joined struct {
	Cluster    *v1alpha1.Cluster
	Credential hubaccess.Credential
}

// ValidateClusterID checks that id can name the cluster everywhere it is used.
func ValidateClusterID(id string) error {
	if errs := validation.IsDNS1123Label(id); len(errs) > 0 {
		return fmt.Errorf("cluster ID %q is not valid: %s", id, strings.Join(errs, "; "))
	}
	if slices.Contains(v1alpha1.ReservedClusterIDs, id) {
		return fmt.Errorf("cluster ID %q is reserved for the hub's own components; pick another --cluster-id", id)
	}
	return nil
}

// Join enrols the cluster behind member in the hub described by opts.BrokerInfo. Everything it
// checks (input, reachability, duplicate ID, overlapping CIDRs) is checked before anything is
// written. If registration fails after this run created the cluster's ServiceAccount, its hub
// objects and the ServiceAccount are removed again; a failure between the two (issuing the
// token) leaves the ServiceAccount, which a re-run resumes from. Running it again for the same
// cluster changes nothing that is already right.
//
// The steps, each a function below: complete the options, inspect the member, check the hub,
// enrol (the cluster's own hub credential), register (Cluster and member objects, undone on
// failure), then the DNS and the hub topology's report.
func Join(ctx context.Context, member *rest.Config, opts JoinOptions) (*Joined, error) {
	if err := opts.complete(); err != nil {
		return nil, err
	}
	p, info, id := opts.Progress, opts.BrokerInfo, opts.ClusterID
	m, err := inspectMember(ctx, member, opts)
	if err != nil {
		return nil, err
	}
	p.Step("Joining cluster %s (pods %s, services %s) to the hub at %s", id, joinPrefixes(m.pods), joinPrefixes(m.services), info.HubURL)
	jc, err := checkHub(ctx, opts, m)
	if err != nil {
		return nil, err
	}

	start := time.Now()
	e, err := enrolCluster(ctx, jc, m, opts, start)
	if err != nil {
		return nil, err
	}
	objs, err := render.Member(render.MemberOptions{Credential: e.cred, DNSImage: opts.DNSImage})
	if err != nil {
		return nil, err
	}
	joined, err := registerOrUndo(ctx, e, m, objs, opts)
	if err != nil {
		return nil, err
	}
	p.Done(start, "Cluster %s registered: global CIDR %s, secondary CIDR %s", id, joined.Cluster.Spec.GlobalCIDR, joined.Cluster.Spec.SecondaryCIDR)
	if !opts.DNSByChart {
		if err := deployDNS(ctx, p, m.client, objs); err != nil {
			return nil, err
		}
	}
	if opts.Topology == v1alpha1.TopologyHub {
		reportHubGateway(ctx, p, e.hub, info.Namespace)
	}
	if opts.Interconnect != nil {
		if err := joinInterconnect(ctx, e.hub, m.client, opts); err != nil {
			return nil, err
		}
	}
	return joined, nil
}

// complete checks opts and fills in the defaults of the optional fields.
func (opts *JoinOptions) complete() error {
	if opts.BrokerInfo == nil {
		return errors.New("broker-info is required")
	}
	if err := ValidateClusterID(opts.ClusterID); err != nil {
		return err
	}
	if opts.DNSImage == "" {
		opts.DNSImage = render.DNSImage + ":" + version.Version
	}
	if opts.Addressing == "" {
		opts.Addressing = v1alpha1.AddressingDirect
	}
	switch opts.Addressing {
	case v1alpha1.AddressingDirect, v1alpha1.AddressingGlobalnet, v1alpha1.AddressingSecondary:
	default:
		return fmt.Errorf("addressing %q is not one of direct, globalnet, secondary", opts.Addressing)
	}
	if opts.Topology == "" {
		opts.Topology = v1alpha1.TopologyMesh
	}
	if opts.Topology != v1alpha1.TopologyMesh && opts.Topology != v1alpha1.TopologyHub {
		return fmt.Errorf("topology %q is not one of mesh, hub", opts.Topology)
	}
	if err := checkInterconnect(opts); err != nil {
		return err
	}
	return checkGlobalEgressSize(*opts)
}

// joiningMember is what Join learns of the member cluster before it writes anything.
type joiningMember struct {
	client         client.Client
	uid            string
	pods, services []netip.Prefix
}

// inspectMember connects to the member cluster and reads what the join needs of it: its
// identity, its CIDRs, and whether its Corefile can take the clusterset zone.
func inspectMember(ctx context.Context, member *rest.Config, opts JoinOptions) (*joiningMember, error) {
	mc, err := client.New(member, client.Options{Scheme: kube.Scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster at %s: %w", member.Host, err)
	}
	uid, err := memberIdentity(ctx, mc, opts.ClusterID)
	if err != nil {
		return nil, err
	}
	pods, services, err := resolveCIDRs(ctx, mc, opts)
	if err != nil {
		return nil, err
	}
	// Before anything is written: a Corefile that join would refuse to patch later must not
	// leave a half-joined cluster behind.
	if err := dnsconfig.Check(ctx, mc); err != nil {
		return nil, fmt.Errorf("%w (join adds a %s zone to the cluster's CoreDNS; fix the Corefile and run join again)", err, dnsconfig.Zone)
	}
	return &joiningMember{client: mc, uid: uid, pods: pods, services: services}, nil
}

// checkHub waits for the hub, connects with the join token and checks the member's CIDRs
// against the other clusters' (direct addressing) or the global pool (globalnet).
func checkHub(ctx context.Context, opts JoinOptions, m *joiningMember) (client.Client, error) {
	info := opts.BrokerInfo
	joinCfg := &rest.Config{Host: info.HubURL, BearerToken: info.JoinToken, TLSClientConfig: rest.TLSClientConfig{CAData: info.CAData}, UserAgent: "octopus-join"}
	if err := waitForHub(ctx, joinCfg, opts); err != nil {
		return nil, err
	}
	jc, err := client.New(joinCfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the hub at %s: %w", info.HubURL, err)
	}
	if opts.Addressing == v1alpha1.AddressingDirect {
		if err := checkOverlap(ctx, jc, info.Namespace, opts.ClusterID, m.pods, m.services); err != nil {
			return nil, err
		}
	}
	if opts.Addressing == v1alpha1.AddressingGlobalnet {
		if err := checkGlobalFamily(opts.ClusterID, m.pods); err != nil {
			return nil, err
		}
		if err := checkGlobalPool(info.Globalnet, opts.ClusterID, m.pods, m.services); err != nil {
			return nil, err
		}
	}
	return jc, nil
}

// enrolment is the cluster's own standing on the hub once enrol has run.
type enrolment struct {
	cred hubaccess.Credential
	// hub is a client acting with cred.
	hub client.Client
	// created says this run created the cluster's ServiceAccount, so a failed registration
	// removes it again.
	created bool
}

// enrolCluster issues the cluster's hub credential with the join token and waits until the
// hub accepts it. From here on the cluster acts with its own credential, so the hub's
// ownership policy checks every write exactly as it will for the running agent.
func enrolCluster(ctx context.Context, jc client.Client, m *joiningMember, opts JoinOptions, start time.Time) (*enrolment, error) {
	info, id := opts.BrokerInfo, opts.ClusterID
	cred := hubaccess.Credential{ClusterID: id, Server: info.HubURL, Namespace: info.Namespace, CAData: info.CAData}
	created, err := enrol(ctx, jc, m.client, &cred, m.uid)
	if err != nil {
		return nil, err
	}
	opts.Progress.Done(start, "Hub credential for cluster %s issued (ServiceAccount %s)", id, v1alpha1.ClusterServiceAccount(id))
	hc, err := client.New(cred.RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the hub as cluster %s: %w", id, err)
	}
	if err := waitAccepted(ctx, hc, info.Namespace); err != nil {
		return nil, fmt.Errorf("the hub does not accept cluster %s's new credential: %w", id, err)
	}
	return &enrolment{cred: cred, hub: hc, created: created}, nil
}

// registerOrUndo registers the cluster; when that fails and this run created the cluster's
// ServiceAccount, it removes the cluster from the hub again.
func registerOrUndo(ctx context.Context, e *enrolment, m *joiningMember, objs *render.MemberObjects, opts JoinOptions) (*Joined, error) {
	joined, err := register(ctx, e.hub, m.client, e.cred, objs, opts, m.pods, m.services)
	if err != nil && e.created {
		if cleanupErr := removeFromHub(ctx, e.hub, e.cred); cleanupErr != nil {
			err = errors.Join(err, fmt.Errorf("undoing the partial join: %w", cleanupErr))
		}
	}
	return joined, err
}

// deployDNS makes the cluster's CoreDNS forward the clusterset zone and deploys octopus-dns
// (when the member chart does not).
func deployDNS(ctx context.Context, p *progress.Reporter, mc client.Client, objs *render.MemberObjects) error {
	dns, err := dnsconfig.Wire(ctx, mc)
	if err == nil {
		if err = kube.Apply(ctx, mc, objs.DNS...); err != nil {
			err = fmt.Errorf("deploying octopus-dns: %w", err)
		}
	}
	if err != nil {
		return fmt.Errorf("%w (the cluster is registered; run join again to finish)", err)
	}
	reportDNS(p, dns)
	return nil
}

// reportHubGateway tells a cluster joining with the hub topology whether the hub's gateway
// has published its Peer: until it does, the cluster reaches no other.
func reportHubGateway(ctx context.Context, p *progress.Reporter, hc client.Reader, namespace string) {
	err := hc.Get(ctx, client.ObjectKey{Namespace: namespace, Name: v1alpha1.HubPeerName}, &v1alpha1.Peer{})
	switch {
	case err == nil:
		p.Step("The hub's gateway is up (Peer %s/%s): this cluster's gateway tunnels to it", namespace, v1alpha1.HubPeerName)
	case apierrors.IsNotFound(err):
		p.Step("No hub gateway yet (no Peer %s/%s): with --topology hub this cluster reaches the others only once `octopus-agent gateway --hub` runs with the hub's kubeconfig", namespace, v1alpha1.HubPeerName)
	default:
		p.Step("Could not check for the hub's gateway (Peer %s/%s): %v", namespace, v1alpha1.HubPeerName, err)
	}
}

// ForwardDNS makes the cluster's CoreDNS forward the clusterset zone to the octopus-dns Service
// that the member chart installed (after a Join with DNSByChart), and tells p how that went.
func ForwardDNS(ctx context.Context, cfg *rest.Config, p *progress.Reporter) error {
	mc, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		return fmt.Errorf("connecting to the member cluster: %w", err)
	}
	dns, err := dnsconfig.Forward(ctx, mc)
	if err != nil {
		return err
	}
	reportDNS(p, dns)
	return nil
}

// reportDNS tells the user whether names under clusterset.local resolve without more work.
func reportDNS(p *progress.Reporter, dns dnsconfig.Result) {
	switch {
	case !dns.CoreDNS:
		p.Step("No CoreDNS configuration (ConfigMap kube-system/coredns) found: forward the %s zone of the cluster's DNS to octopus-dns at %s yourself", dnsconfig.Zone, dns.Target)
	case !dns.Reload:
		p.Step("CoreDNS forwards %s to octopus-dns at %s once restarted: its Corefile has no reload plugin, so run `kubectl -n kube-system rollout restart deployment coredns`", dnsconfig.Zone, dns.Target)
	default:
		p.Step("CoreDNS forwards %s to octopus-dns at %s (its reload plugin picks the change up within a minute)", dnsconfig.Zone, dns.Target)
	}
}

// register writes the cluster's hub objects and its member-side state but octopus-dns.
func register(ctx context.Context, hc, mc client.Client, cred hubaccess.Credential, member *render.MemberObjects, opts JoinOptions, pods, services []netip.Prefix) (*Joined, error) {
	info, id := opts.BrokerInfo, cred.ClusterID
	globalPool, err := info.Globalnet.Pool()
	if err != nil {
		return nil, err
	}
	secondaryPool, err := info.Secondary.Pool()
	if err != nil {
		return nil, err
	}
	global, err := claimBlock(ctx, hc, info.Namespace, id, PoolGlobalnet, globalPool)
	if err != nil {
		return nil, err
	}
	secondary, err := claimBlock(ctx, hc, info.Namespace, id, PoolSecondary, secondaryPool)
	if err != nil {
		return nil, err
	}
	cl := render.Cluster(info.Namespace, v1alpha1.ClusterSpec{
		ClusterID: id, PodCIDRs: prefixStrings(pods), ServiceCIDRs: prefixStrings(services),
		Addressing: opts.Addressing, Topology: opts.Topology, GlobalCIDR: global.String(), SecondaryCIDR: secondary.String(),
		GlobalEgressSize: opts.GlobalEgressSize,
	})
	if err := kube.Apply(ctx, hc, cl); err != nil {
		return nil, fmt.Errorf("registering cluster %s on the hub: %w", id, err)
	}
	if err := hub.InstallCRDs(ctx, mc, member.CRDs); err != nil {
		return nil, fmt.Errorf("installing CRDs in the cluster: %w", err)
	}
	if err := kube.Apply(ctx, mc, member.Objects...); err != nil {
		return nil, fmt.Errorf("storing the hub credential in the cluster: %w", err)
	}
	return &Joined{Cluster: cl, Credential: cred}, nil
}

// memberIdentity returns the UID of kube-system and refuses a cluster that already joined
// under another ID.
func memberIdentity(ctx context.Context, mc client.Client, id string) (string, error) {
	ns := &corev1.Namespace{}
	if err := mc.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, ns); err != nil {
		return "", fmt.Errorf("reading the cluster's kube-system namespace: %w (is the kubeconfig right, and is it cluster-admin?)", err)
	}
	prop := &aboutv1alpha1.ClusterProperty{}
	err := mc.Get(ctx, client.ObjectKey{Name: aboutv1alpha1.ClusterIDProperty}, prop)
	switch {
	case err == nil && prop.Spec.Value != id:
		return "", fmt.Errorf("this cluster already joined as %q; run `octopus leave` before joining as %q", prop.Spec.Value, id)
	case err != nil && !apierrors.IsNotFound(err) && !isNoKind(err):
		return "", fmt.Errorf("reading ClusterProperty %s: %w", aboutv1alpha1.ClusterIDProperty, err)
	}
	return string(ns.UID), nil
}

func isNoKind(err error) bool {
	return strings.Contains(err.Error(), "no matches for kind")
}

func resolveCIDRs(ctx context.Context, mc client.Client, opts JoinOptions) (pods, services []netip.Prefix, err error) {
	podStrs, svcStrs := opts.PodCIDRs, opts.ServiceCIDRs
	if len(podStrs) == 0 {
		if podStrs, err = DiscoverPodCIDRs(ctx, mc); err != nil {
			return nil, nil, fmt.Errorf("could not discover the cluster's pod CIDR (%w); pass --pod-cidr", err)
		}
	}
	if len(svcStrs) == 0 {
		if svcStrs, err = DiscoverServiceCIDRs(ctx, mc); err != nil {
			return nil, nil, fmt.Errorf("could not discover the cluster's service CIDR (%w); pass --service-cidr", err)
		}
	}
	if pods, err = ipam.ParsePrefixes(podStrs); err != nil {
		return nil, nil, fmt.Errorf("pod CIDR: %w", err)
	}
	if services, err = ipam.ParsePrefixes(svcStrs); err != nil {
		return nil, nil, fmt.Errorf("service CIDR: %w", err)
	}
	for _, c := range []struct {
		kind, flag string
		cidrs      []netip.Prefix
	}{{"pod", "--pod-cidr", pods}, {"service", "--service-cidr", services}} {
		// Discovery may find two of one family (a second ServiceCIDR object, say); the hub
		// would refuse them, so say here which ones and how to choose.
		if a, b, dup := ipam.SameFamily(c.cidrs); dup {
			return nil, nil, fmt.Errorf("%s CIDRs %s and %s are of the same address family: a cluster registers at most one %s CIDR per family (one IPv4 and one IPv6 when dual-stack); pass %s with one CIDR per family",
				c.kind, a, b, c.kind, c.flag)
		}
	}
	for _, pc := range pods {
		if s, hit := ipam.FirstOverlap(pc, services); hit {
			return nil, nil, fmt.Errorf("pod CIDR %s overlaps service CIDR %s of the same cluster", pc, s)
		}
	}
	return pods, services, nil
}

// checkGlobalFamily refuses globalnet addressing for a cluster without IPv4 pods, before
// anything is written: global addresses are IPv4 (the hub's pool) and the gateway translates
// them to IPv4 pods and services only, so an IPv6-only cluster would be joined with nothing
// it could offer or reach (NAT64 is not offered). A dual-stack cluster is joined; its IPv6
// exports are refused one by one (servicediscovery.ReasonUnsupportedIPFamily).
func checkGlobalFamily(id string, pods []netip.Prefix) error {
	if slices.ContainsFunc(pods, func(p netip.Prefix) bool { return p.Addr().Is4() }) {
		return nil
	}
	return fmt.Errorf("cluster %q has no IPv4 pod CIDR (pod CIDRs %s): globalnet's global addresses are IPv4 and lead only to IPv4 pods and services; "+
		"join it with --addressing direct (its CIDRs must then be apart from every other cluster's), or give it an IPv4 pod CIDR",
		id, joinPrefixes(pods))
}

// checkGlobalPool refuses a globalnet cluster whose pod or service CIDRs overlap the hub's
// globalnet pool, before anything is written: its own global CIDR, or another cluster's from
// the same pool, would then be routed into the tunnel and shadow this cluster's own pods and
// Services (docs/architecture.md §6h).
func checkGlobalPool(pool hub.PoolConfig, id string, pods, services []netip.Prefix) error {
	p, err := pool.Pool()
	if err != nil {
		return fmt.Errorf("the hub's globalnet pool: %w", err)
	}
	for _, c := range []struct {
		kind  string
		cidrs []netip.Prefix
	}{{"pod", pods}, {"service", services}} {
		for _, cidr := range c.cidrs {
			if cidr.Overlaps(p.CIDR) {
				return fmt.Errorf("%s CIDR %s of cluster %q overlaps the hub's globalnet pool %s, from which its global CIDR comes: "+
					"with globalnet addressing the global CIDRs must be apart from every cluster's own CIDRs; deploy the hub with another --globalnet-cidr, or use other CIDRs",
					c.kind, cidr, id, p.CIDR)
			}
		}
	}
	return nil
}

// checkGlobalEgressSize refuses, before anything is written, an egress size the hub would
// refuse (a size without globalnet addressing, not positive) or that the cluster's global CIDR
// cannot hold: every block of the hub's globalnet pool has the same size, so whichever block
// join claims, the controller and the gateway could not lay it out and the cluster would be
// joined but unable to translate.
func checkGlobalEgressSize(opts JoinOptions) error {
	size := opts.GlobalEgressSize
	if size == 0 {
		return nil
	}
	if opts.Addressing != v1alpha1.AddressingGlobalnet {
		return fmt.Errorf("--global-egress-size %d is only meaningful with --addressing globalnet (this join has %s addressing): drop the flag, or join with --addressing globalnet", size, opts.Addressing)
	}
	if size < 0 || size > v1alpha1.MaxGlobalEgressSize {
		return fmt.Errorf("--global-egress-size %d: want 1 to %d addresses; leave the flag out for the default %d", size, v1alpha1.MaxGlobalEgressSize, globalip.DefaultClusterEgressSize)
	}
	pool, err := opts.BrokerInfo.Globalnet.Pool()
	if err != nil {
		return fmt.Errorf("the hub's globalnet pool: %w", err)
	}
	block, err := pool.Block(0)
	if err != nil {
		return fmt.Errorf("the hub's globalnet pool: %w", err)
	}
	if _, err := globalip.NewLayout(block, int(size)); err != nil {
		return fmt.Errorf("--global-egress-size %d does not fit cluster %q's global CIDR: the hub's globalnet pool %s gives every cluster a /%d of %d addresses, "+
			"which must also hold the health-check address and at least one ingress address; pick a smaller --global-egress-size, or deploy the hub with a shorter --globalnet-prefix-length",
			size, opts.ClusterID, pool.CIDR, pool.BlockBits, ipam.RangeOf(block).Len())
	}
	return nil
}

// checkOverlap refuses CIDRs that collide with another cluster's in direct addressing, where
// both would be routed as they are.
func checkOverlap(ctx context.Context, hc client.Client, namespace, id string, pods, services []netip.Prefix) error {
	clusters := &v1alpha1.ClusterList{}
	if err := hc.List(ctx, clusters, client.InNamespace(namespace)); err != nil {
		return fmt.Errorf("listing clusters on the hub: %w", err)
	}
	return overlapWith(clusters.Items, id, pods, services)
}

// overlapWith is checkOverlap's judgement on the registered clusters. It works per address
// family by construction: prefixes of different families never overlap, so a dual-stack
// cluster collides with another only through two CIDRs of one family, and an IPv4-only cluster
// never with an IPv6 range.
func overlapWith(clusters []v1alpha1.Cluster, id string, pods, services []netip.Prefix) error {
	mine := map[string][]netip.Prefix{"pod": pods, "service": services}
	for _, other := range clusters {
		if other.Name == id {
			continue
		}
		if other.Spec.Addressing != "" && other.Spec.Addressing != v1alpha1.AddressingDirect {
			continue
		}
		theirs := map[string][]string{"pod": other.Spec.PodCIDRs, "service": other.Spec.ServiceCIDRs}
		for _, myKind := range []string{"pod", "service"} {
			for _, theirKind := range []string{"pod", "service"} {
				theirPrefixes, err := ipam.ParsePrefixes(theirs[theirKind])
				if err != nil {
					continue // the hub's CRD validation guards these; skip rather than block joins
				}
				for _, m := range mine[myKind] {
					if t, hit := ipam.FirstOverlap(m, theirPrefixes); hit {
						return fmt.Errorf("%s CIDR %s overlaps %s CIDR %s of cluster %q; with direct addressing CIDRs must not overlap: choose other CIDRs, or join with --addressing globalnet or --addressing secondary",
							myKind, m, theirKind, t, other.Name)
					}
				}
			}
		}
	}
	return nil
}

// enrol creates the cluster's ServiceAccount on the hub, requests its first token with the join
// identity (into cred.Token) and binds it to the cluster Role, in that order: once it is bound,
// the join policy refuses the join identity any token of it, so broker-info can never obtain
// the credential of a cluster that has enrolled. It reports whether this run enrolled the
// cluster (so a failure later may remove it). A re-run for a cluster whose ServiceAccount is
// bound already uses the credential stored in the member.
func enrol(ctx context.Context, jc client.Client, mc client.Reader, cred *hubaccess.Credential, memberUID string) (bool, error) {
	namespace, id := cred.Namespace, cred.ClusterID
	sa := render.ClusterServiceAccount(namespace, id, memberUID)
	created := true
	err := jc.Create(ctx, sa)
	if apierrors.IsAlreadyExists(err) {
		created = false
		if err = jc.Get(ctx, client.ObjectKeyFromObject(sa), sa); err != nil {
			return false, fmt.Errorf("reading ServiceAccount %s on the hub: %w", sa.Name, err)
		}
		// An account that is not bound yet may have been made by anyone holding broker-info
		// (after a revoke, say), with this cluster's member-uid, which broker-info can read,
		// and that someone may hold a token of it: never adopt it. The join policy lets the
		// join identity delete only unbound accounts; the new one has a new UID, which no
		// earlier token names. A bound account is refused here and resumed below.
		derr := jc.Delete(ctx, sa, client.Preconditions{UID: &sa.UID})
		switch {
		case derr == nil || apierrors.IsNotFound(derr):
			sa = render.ClusterServiceAccount(namespace, id, memberUID)
			if err := jc.Create(ctx, sa); err != nil {
				return false, fmt.Errorf("re-creating ServiceAccount %s on the hub (replacing one that was not bound): %w", sa.Name, err)
			}
			created = true
		case !apierrors.IsForbidden(derr):
			return false, fmt.Errorf("replacing ServiceAccount %s on the hub: %w", sa.Name, derr)
		}
	} else if err != nil {
		return false, fmt.Errorf("creating ServiceAccount %s on the hub: %w", sa.Name, err)
	}
	if !created {
		if sa.Annotations[render.MemberUIDAnnotation] != memberUID {
			return false, fmt.Errorf("%w: cluster ID %q is already used by another cluster (joined %s); choose another --cluster-id, or run `octopus leave` in the cluster that holds it",
				ErrDuplicateClusterID, id, sa.CreationTimestamp.Format(time.RFC3339))
		}
	}
	token, err := firstToken(ctx, jc, sa, created)
	switch {
	case errors.Is(err, errEnrolled):
		// A re-run after the cluster was bound: only the cluster itself holds its credential.
		revoke := fmt.Sprintf("have the hub's admin revoke it (`octopus hub revoke %s`), then join again", id)
		stored, loadErr := hubaccess.LoadCredential(ctx, mc)
		if loadErr == nil && (stored.ClusterID != id || stored.Server != cred.Server || stored.Namespace != namespace) {
			loadErr = fmt.Errorf("the stored credential is cluster %s's at %s, namespace %s", stored.ClusterID, stored.Server, stored.Namespace)
		}
		if loadErr != nil {
			return false, fmt.Errorf("cluster %s is enrolled on the hub, but this cluster holds no credential for it (%w), and broker-info cannot issue one for an enrolled cluster; %s",
				id, loadErr, revoke)
		}
		if _, expires, terr := hubaccess.TokenTimes(stored.Token); terr == nil && !expires.IsZero() && time.Now().After(expires) {
			return false, fmt.Errorf("cluster %s's hub credential expired at %s (no agent renewed it); %s", id, expires.Format(time.RFC3339), revoke)
		}
		cred.Token = stored.Token
		return false, nil
	case err != nil:
		return false, err
	}
	cred.Token = token
	if err := jc.Create(ctx, render.ClusterGrant(namespace, id, sa)); err != nil && !apierrors.IsAlreadyExists(err) {
		return true, fmt.Errorf("binding ServiceAccount %s to Role %s on the hub: %w", sa.Name, v1alpha1.ClusterCredentialRole, err)
	}
	// This run issued the cluster's first credential: it owns the enrolment, even if an
	// earlier run created the ServiceAccount.
	return true, nil
}

// errEnrolled is the join policy's refusal to issue a token of a bound ServiceAccount.
var errEnrolled = errors.New("the cluster's ServiceAccount is bound already")

// firstToken requests the cluster's first token with the join identity. A ServiceAccount this
// run just created may still be bound by the RoleBinding of an earlier cluster of the same ID
// that left, until the garbage collector removes it (it is owned by the deleted
// ServiceAccount): the request is retried for that long.
func firstToken(ctx context.Context, jc client.Client, sa *corev1.ServiceAccount, created bool) (string, error) {
	var tr *authenticationv1.TokenRequest
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		tr = render.ClusterTokenRequest(render.ClusterTokenLifetime)
		lastErr = jc.SubResource("token").Create(ctx, sa, tr)
		if apierrors.IsForbidden(lastErr) && strings.Contains(lastErr.Error(), "already enrolled") {
			if !created {
				return false, errEnrolled
			}
			return false, nil
		}
		return lastErr == nil, lastErr
	})
	if errors.Is(err, errEnrolled) {
		return "", err
	}
	if err != nil {
		if lastErr != nil {
			err = lastErr
		}
		return "", fmt.Errorf("requesting the first token of ServiceAccount %s/%s on the hub: %w", sa.Namespace, sa.Name, err)
	}
	return tr.Status.Token, nil
}

// waitAccepted waits until the hub authorizes a freshly issued token: the RBAC authorizer's
// cache of the new RoleBinding can trail it by a moment on a busy server (403). A 401 is
// retried too: the API server checks the token's ServiceAccount in its cache, which can trail
// the ServiceAccount's creation the same way.
func waitAccepted(ctx context.Context, hc client.Client, namespace string) error {
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		lastErr = hc.List(ctx, &v1alpha1.ClusterList{}, client.InNamespace(namespace), client.Limit(1))
		if apierrors.IsUnauthorized(lastErr) || apierrors.IsForbidden(lastErr) {
			return false, nil
		}
		return true, lastErr
	})
	if err != nil && lastErr != nil {
		return lastErr
	}
	return err
}

// waitForHub checks that the hub answers, retrying a bounded number of times with visible
// progress, so that a wrong URL or a down hub fails fast with the cause.
func waitForHub(ctx context.Context, cfg *rest.Config, opts JoinOptions) error {
	attempts, interval := opts.HubAttempts, opts.HubRetryInterval
	if attempts <= 0 {
		attempts = 5
	}
	if interval <= 0 {
		interval = 2 * time.Second
	}
	probe := rest.CopyConfig(cfg)
	probe.Timeout = 5 * time.Second
	dc, err := discovery.NewDiscoveryClientForConfig(probe)
	if err != nil {
		return fmt.Errorf("hub %s: %w", cfg.Host, err)
	}
	for i := 1; ; i++ {
		_, err = dc.ServerVersion()
		if err == nil {
			return nil
		}
		if apierrors.IsUnauthorized(err) {
			return fmt.Errorf("the hub at %s rejected the join credential: %w; the broker-info is stale (was the hub redeployed?), get a fresh one from `octopus hub deploy`", cfg.Host, err)
		}
		if i == attempts {
			return fmt.Errorf("cannot reach the hub at %s after %d attempts: %w", cfg.Host, attempts, err)
		}
		opts.Progress.Step("Hub %s not reachable (attempt %d/%d): %v; retrying in %s", cfg.Host, i, attempts, err, interval)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

func joinPrefixes(ps []netip.Prefix) string { return strings.Join(prefixStrings(ps), ",") }
