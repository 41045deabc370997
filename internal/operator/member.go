package operator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"

	aboutv1alpha1 "github.com/octopus-mcs/octopus/api/about/v1alpha1"
	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/charts"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/dnsconfig"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/manifests/release"
	"github.com/octopus-mcs/octopus/internal/secondarynet/icconfig"
)

// Condition reasons a user acts on.
const (
	ReasonBrokerInfoMissing   = "BrokerInfoMissing"
	ReasonBrokerInfoInvalid   = "BrokerInfoInvalid"
	ReasonHubUnreachable      = "HubUnreachable"
	ReasonClusterIDTaken      = "ClusterIDTaken"
	ReasonJoinFailed          = "JoinFailed"
	ReasonLeaving             = "Leaving"
	ReasonProviderUnavailable = "ProviderUnavailable"
)

// What join applies in the member cluster, and the member chart's release.
//
// +kubebuilder:rbac:groups="",namespace=octopus-system,resources=secrets;serviceaccounts;configmaps;services,verbs=get;list;watch;create;update;patch;delete
// kube-system: the kube-proxy ConfigMap (CIDR discovery), CoreDNS's Corefile (the clusterset
// zone) and Kube-OVN's ovn-ic-config (join --interconnect).
// +kubebuilder:rbac:groups="",namespace=kube-system,resources=configmaps,verbs=get;list;watch;create;update;patch;delete
// Nodes are only read (CIDR discovery, the Node watch) and labelled (cloud.go): never created,
// replaced or deleted.
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=apps,namespace=octopus-system,resources=deployments;daemonsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=policy,namespace=octopus-system,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=servicecidrs,verbs=list
// +kubebuilder:rbac:groups="",resources=pods,verbs=list
// +kubebuilder:rbac:groups=about.k8s.io,resources=clusterproperties,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=monitoring.coreos.com,namespace=octopus-system,resources=prometheusrules,verbs=get;list;watch;create;update;patch;delete

// reconcileMember joins the cluster to the hub of its broker-info (cluster.Join, as `octopus
// join`), then installs or upgrades the member chart with the values of the joinConfig, and
// reports the state the hub and the cluster show. Join runs again only when its inputs change
// (status.appliedHash) or the hub lost the cluster; the chart is upgraded only when its values
// differ from the release's, so an unchanged Fabric is checked without a write.
func (r *Reconciler) reconcileMember(ctx context.Context, f *v1alpha1.Fabric, st *v1alpha1.FabricStatus) (bool, error) {
	jc := f.Spec.JoinConfig
	id, err := r.clusterID(ctx, jc, st)
	if err != nil {
		return false, err
	}
	st.ClusterID = id
	info, raw, ok := r.brokerInfo(ctx, f, st)
	if !ok {
		return false, nil
	}
	want := hash(struct {
		BrokerInfo     []byte
		ID             string
		Pods, Services []string
		Topology       v1alpha1.Topology
		Addressing     v1alpha1.Addressing
		EgressSize     int32
	}{raw, id, jc.PodCIDRs, jc.ServiceCIDRs, jc.Topology, jc.Addressing, jc.GlobalEgressSize})

	registered := false
	if st.AppliedHash == want {
		var checked bool
		if registered, checked = r.registered(ctx, f, st, id); !checked {
			return false, nil // the condition says why
		}
	}
	if !registered {
		if !r.join(ctx, f, st, info, id) {
			return false, nil
		}
		st.AppliedHash = want
	}
	deployed, rolledOut := r.deployComponents(ctx, f, st)
	if !deployed {
		return false, nil
	}
	// Reported during a rollout too: the gateways' state is what a user watches then.
	ok = r.reportGateways(ctx, f, st, id) && rolledOut
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.FabricGatewaysConnected); c != nil && c.Reason == ReasonNoOtherClusters {
		// Alone, the cluster is ready, but the next cluster to join changes that: check again
		// at the retry interval (no watch covers the hub), not the resync's.
		ok = false
	}
	return r.reportServiceDiscovery(ctx, f, st) && ok, nil
}

// clusterID is joinConfig.clusterID, else the one already in use, else the cluster's
// ClusterProperty cluster.clusterset.k8s.io, else the UID of kube-system (a valid DNS label).
func (r *Reconciler) clusterID(ctx context.Context, jc *v1alpha1.JoinConfig, st *v1alpha1.FabricStatus) (string, error) {
	if jc.ClusterID != "" {
		return jc.ClusterID, nil
	}
	if st.ClusterID != "" {
		return st.ClusterID, nil
	}
	prop := &aboutv1alpha1.ClusterProperty{}
	err := r.Client.Get(ctx, ctrl.ObjectKey{Name: aboutv1alpha1.ClusterIDProperty}, prop)
	if err == nil && prop.Spec.Value != "" {
		return prop.Spec.Value, nil
	}
	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, ctrl.ObjectKey{Name: metav1.NamespaceSystem}, ns); err != nil {
		return "", fmt.Errorf("defaulting the cluster ID from the kube-system namespace's UID: %w", err)
	}
	return string(ns.UID), nil
}

// brokerInfo reads and checks the referenced broker-info; a missing or malformed one is a
// condition that says how to fix it.
func (r *Reconciler) brokerInfo(ctx context.Context, f *v1alpha1.Fabric, st *v1alpha1.FabricStatus) (*hub.BrokerInfo, []byte, bool) {
	ref := f.Spec.JoinConfig.BrokerInfoSecretRef
	if ref.Namespace == "" {
		ref.Namespace = v1alpha1.OperatorNamespace
	}
	key := ctrl.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}
	s := &corev1.Secret{}
	if err := r.Client.Get(ctx, key, s); err != nil {
		if apierrors.IsNotFound(err) {
			set(f, st, v1alpha1.FabricJoined, false, ReasonBrokerInfoMissing,
				"joinConfig.brokerInfoSecretRef: Secret %s not found; create it from the hub's broker-info: kubectl -n %s create secret generic %s --from-file=%s=BROKER-INFO",
				key, key.Namespace, key.Name, v1alpha1.BrokerInfoKey)
		} else {
			set(f, st, v1alpha1.FabricJoined, false, ReasonBrokerInfoMissing, "joinConfig.brokerInfoSecretRef: reading Secret %s: %v", key, err)
		}
		return nil, nil, false
	}
	raw := s.Data[v1alpha1.BrokerInfoKey]
	info, err := hub.DecodeBrokerInfo(bytes.NewReader(raw))
	if err != nil {
		set(f, st, v1alpha1.FabricJoined, false, ReasonBrokerInfoInvalid,
			"joinConfig.brokerInfoSecretRef: key %q of Secret %s is not valid broker-info (%v); put the file `octopus hub deploy` wrote there unchanged", v1alpha1.BrokerInfoKey, key, err)
		return nil, nil, false
	}
	return info, raw, true
}

// join runs cluster.Join once (no retry loop inside a reconcile: the reconciler retries).
func (r *Reconciler) join(ctx context.Context, f *v1alpha1.Fabric, st *v1alpha1.FabricStatus, info *hub.BrokerInfo, id string) bool {
	jc := f.Spec.JoinConfig
	joined, err := cluster.Join(ctx, r.Config, cluster.JoinOptions{
		BrokerInfo: info, ClusterID: id, PodCIDRs: jc.PodCIDRs, ServiceCIDRs: jc.ServiceCIDRs,
		Addressing: jc.Addressing, GlobalEgressSize: jc.GlobalEgressSize, Topology: jc.Topology, HubAttempts: 1,
		// The member chart installs octopus-dns (deployComponents); join's own copy would be
		// objects Helm refuses to adopt.
		DNSByChart:   true,
		Interconnect: interconnectConfig(jc.Interconnect),
	})
	switch {
	case errors.Is(err, cluster.ErrDuplicateClusterID):
		set(f, st, v1alpha1.FabricJoined, false, ReasonClusterIDTaken, "joinConfig.clusterID: %v", err)
		return false
	case err != nil && unreachable(err):
		set(f, st, v1alpha1.FabricJoined, false, ReasonHubUnreachable, "%v; retrying every %s", err, r.retryInterval())
		return false
	case err != nil:
		set(f, st, v1alpha1.FabricJoined, false, ReasonJoinFailed, "%v", err)
		return false
	}
	set(f, st, v1alpha1.FabricJoined, true, "Registered", "cluster %s is registered on the hub at %s (global CIDR %s, secondary CIDR %s)",
		id, info.HubURL, joined.Cluster.Spec.GlobalCIDR, joined.Cluster.Spec.SecondaryCIDR)
	return true
}

// registered checks, with the cluster's own credential, that the hub still has its Cluster;
// checked is false when it could not tell (the Joined condition says why).
func (r *Reconciler) registered(ctx context.Context, f *v1alpha1.Fabric, st *v1alpha1.FabricStatus, id string) (registered, checked bool) {
	hc, cred, err := r.hubClient(ctx)
	if errors.Is(err, hubaccess.ErrNotJoined) {
		return false, true
	}
	if err != nil {
		set(f, st, v1alpha1.FabricJoined, false, ReasonJoinFailed, "%v", err)
		return false, false
	}
	cl := &v1alpha1.Cluster{}
	err = hc.Get(ctx, ctrl.ObjectKey{Namespace: cred.Namespace, Name: id}, cl)
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsUnauthorized(err):
		return false, true // revoked or removed on the hub: join again
	case err != nil:
		set(f, st, v1alpha1.FabricJoined, false, ReasonHubUnreachable, "checking cluster %s on the hub at %s: %v; retrying every %s", id, cred.Server, err, r.retryInterval())
		return false, false
	}
	set(f, st, v1alpha1.FabricJoined, true, "Registered", "cluster %s is registered on the hub at %s (global CIDR %s, secondary CIDR %s)",
		id, cred.Server, cl.Spec.GlobalCIDR, cl.Spec.SecondaryCIDR)
	return true, true
}

// hubClient is a client of the hub with the cluster's own credential, as the agent uses it.
func (r *Reconciler) hubClient(ctx context.Context) (ctrl.Client, hubaccess.Credential, error) {
	cred, err := hubaccess.LoadCredential(ctx, r.Client)
	if err != nil {
		return nil, cred, err
	}
	hc, err := ctrl.New(cred.RESTConfig(), ctrl.Options{Scheme: kube.Scheme})
	if err != nil {
		return nil, cred, fmt.Errorf("connecting to the hub at %s: %w", cred.Server, err)
	}
	return hc, cred, nil
}

// deployComponents installs or upgrades the member chart when its release's values differ
// from the joinConfig's: a changed backend, health interval, gateway selector or excluded
// subnet is a Helm upgrade of the running components, never a re-join. deployed is whether
// the release is at the joinConfig's values, rolledOut whether every pod runs them too.
func (r *Reconciler) deployComponents(ctx context.Context, f *v1alpha1.Fabric, st *v1alpha1.FabricStatus) (deployed, rolledOut bool) {
	values, err := MemberValues(f.Spec.JoinConfig, f.Spec.CloudPrepareConfig)
	if err != nil {
		set(f, st, v1alpha1.FabricComponentsReady, false, "InvalidValues", "%v", err)
		return false, false
	}
	cur, err := release.Current(r.Config, charts.Member, v1alpha1.SystemNamespace)
	if err != nil {
		set(f, st, v1alpha1.FabricComponentsReady, false, "ReleaseUnreadable", "%v", err)
		return false, false
	}
	rev := 0
	if cur != nil && sameValues(cur.Values, values) {
		rev = cur.Revision
	} else {
		rev, err = release.Install(ctx, r.Config, release.Options{
			Chart: charts.Member, Namespace: v1alpha1.SystemNamespace, AppVersion: r.AppVersion, Values: values,
		})
		if err != nil {
			set(f, st, v1alpha1.FabricComponentsReady, false, "InstallFailed", "%v", err)
			return false, false
		}
		logFrom(ctx).Info("Member chart deployed", "revision", rev)
	}
	// The cluster's CoreDNS forwards the clusterset zone to the chart's octopus-dns; written
	// only when the Corefile lacks it, so an unchanged Fabric still costs no write.
	if err := cluster.ForwardDNS(ctx, r.Config, nil); err != nil {
		set(f, st, v1alpha1.FabricComponentsReady, false, "DNSForwardFailed", "%v", err)
		return false, false
	}
	st.ComponentsRevision = int32(rev) //nolint:gosec // Helm revisions are small counters
	// Helm returns once the objects are written; the components are ready once every pod the
	// change replaces has been replaced (Ready stays False while the gateways restart).
	waiting, err := r.rollingOut(ctx)
	if err != nil {
		set(f, st, v1alpha1.FabricComponentsReady, false, "RolloutUnknown", "%v", err)
		return true, false
	}
	if waiting != "" {
		set(f, st, v1alpha1.FabricComponentsReady, false, ReasonRollingOut, "%s (release %s revision %d)", waiting, charts.Member, rev)
		return true, false
	}
	set(f, st, v1alpha1.FabricComponentsReady, true, "Deployed", "release %s in namespace %s is at revision %d with the joinConfig's values",
		charts.Member, v1alpha1.SystemNamespace, rev)
	return true, true
}

// reportGateways reads this cluster's Peer on the hub: the active gateway publishes it with its
// backend and the state of its tunnels to the other clusters.
func (r *Reconciler) reportGateways(ctx context.Context, f *v1alpha1.Fabric, st *v1alpha1.FabricStatus, id string) bool {
	hc, cred, err := r.hubClient(ctx)
	if err != nil {
		set(f, st, v1alpha1.FabricGatewaysConnected, false, ReasonHubUnreachable, "%v", err)
		return false
	}
	peers := &v1alpha1.PeerList{}
	if err := hc.List(ctx, peers, ctrl.InNamespace(cred.Namespace), ctrl.MatchingLabels{v1alpha1.ClusterLabel: id}); err != nil {
		set(f, st, v1alpha1.FabricGatewaysConnected, false, ReasonHubUnreachable, "listing the cluster's Peer on the hub at %s: %v", cred.Server, err)
		return false
	}
	if len(peers.Items) == 0 {
		set(f, st, v1alpha1.FabricGatewaysConnected, false, "NoActiveGateway",
			"no gateway of this cluster has published its Peer on the hub yet; check that nodes match the gateway node selector (%s) and that the gateway pods in %s run",
			selectorString(f.Spec.JoinConfig), v1alpha1.SystemNamespace)
		return false
	}
	p := peers.Items[0]
	if want := f.Spec.JoinConfig.Backend; want != "" && p.Spec.Backend != want {
		set(f, st, v1alpha1.FabricGatewaysConnected, false, "Reconfiguring", "the active gateway %s still runs backend %s; waiting for it to restart with %s", p.Spec.Hostname, p.Spec.Backend, want)
		return false
	}
	// After a gateway moved or restarted, the Peer is the old gateway's until the new one
	// takes over: its connections say nothing of the pods that run now.
	if on, err := r.gatewayPodNodes(ctx); err != nil {
		set(f, st, v1alpha1.FabricGatewaysConnected, false, "GatewayPodsUnknown", "%v", err)
		return false
	} else if !slices.Contains(on, p.Spec.Hostname) {
		set(f, st, v1alpha1.FabricGatewaysConnected, false, "Reconfiguring",
			"the cluster's Peer was published by the gateway on node %s, which runs no gateway pod now (gateway pods on %v); waiting for one of them to take over",
			p.Spec.Hostname, on)
		return false
	}
	clusters := &v1alpha1.ClusterList{}
	if err := hc.List(ctx, clusters, ctrl.InNamespace(cred.Namespace)); err != nil {
		set(f, st, v1alpha1.FabricGatewaysConnected, false, ReasonHubUnreachable, "listing the joined clusters on the hub at %s: %v", cred.Server, err)
		return false
	}
	var others []string
	for _, cl := range clusters.Items {
		if cl.Name != id {
			others = append(others, cl.Name)
		}
	}
	ok, reason, msg := gatewaysVerdict(&p, others)
	set(f, st, v1alpha1.FabricGatewaysConnected, ok, reason, "%s", msg)
	return ok
}

// ReasonNoOtherClusters is GatewaysConnected=True for a cluster joined alone: its gateway is
// active and published, and there is nothing to connect to (docs/operator-and-charts.md).
const ReasonNoOtherClusters = "NoOtherClusters"

// gatewayPodLabel selects the member chart's gateway pods (charts/octopus-member gateway.yaml).
const gatewayPodLabel = "app.kubernetes.io/name"

// gatewayPodNodes are the nodes running a gateway pod that is not being deleted, sorted.
func (r *Reconciler) gatewayPodNodes(ctx context.Context) ([]string, error) {
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, ctrl.InNamespace(v1alpha1.SystemNamespace), ctrl.MatchingLabels{gatewayPodLabel: "octopus-gateway"}); err != nil {
		return nil, fmt.Errorf("listing the gateway pods in %s: %w", v1alpha1.SystemNamespace, err)
	}
	var out []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
			out = append(out, p.Spec.NodeName)
		}
	}
	slices.Sort(out)
	return out, nil
}

// gatewaysVerdict decides GatewaysConnected from the active gateway's Peer and the other
// clusters joined to the hub: True only when the gateway reports a Connected connection to
// every one of them, since that is when traffic flows to each. Once another cluster has
// joined, a gateway connected to none of them is not connected (it reported Connected with 0
// clusters before). A cluster joined alone is True with reason NoOtherClusters: everything
// it can do is done, and a condition that stays False until a second cluster exists would be
// a red light nobody can fix from this cluster; the reason and message say it is alone.
func gatewaysVerdict(p *v1alpha1.Peer, others []string) (ok bool, reason, message string) {
	byCluster := map[string]v1alpha1.PeerConnection{}
	for _, c := range p.Status.Connections {
		byCluster[c.ClusterID] = c
	}
	if len(others) == 0 {
		return true, ReasonNoOtherClusters, fmt.Sprintf("gateway %s (%s) is active; no other cluster has joined the hub yet, so there is nothing to connect to", p.Spec.Hostname, p.Spec.Backend)
	}
	slices.Sort(others)
	var down []string
	for _, id := range others {
		switch c, seen := byCluster[id]; {
		case !seen:
			down = append(down, id+" (no tunnel yet)")
		case c.State != v1alpha1.ConnectionConnected:
			down = append(down, fmt.Sprintf("%s (%s: %s)", id, c.State, c.Message))
		}
	}
	if len(down) > 0 {
		return false, "ConnectionsDown", fmt.Sprintf("gateway %s: connected to %d of %d other cluster(s), not to %s",
			p.Spec.Hostname, len(others)-len(down), len(others), strings.Join(down, ", "))
	}
	return true, "Connected", fmt.Sprintf("gateway %s (%s) is connected to every other cluster (%d)", p.Spec.Hostname, p.Spec.Backend, len(others))
}

// reportServiceDiscovery reports whether octopus-dns, which join deploys, is available.
func (r *Reconciler) reportServiceDiscovery(ctx context.Context, f *v1alpha1.Fabric, st *v1alpha1.FabricStatus) bool {
	d := &appsv1.Deployment{}
	key := ctrl.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: dnsconfig.ServiceName}
	if err := r.Client.Get(ctx, key, d); err != nil {
		set(f, st, v1alpha1.FabricServiceDiscoveryReady, false, "DNSMissing", "reading Deployment %s: %v", key, err)
		return false
	}
	if d.Status.AvailableReplicas == 0 {
		set(f, st, v1alpha1.FabricServiceDiscoveryReady, false, "DNSUnavailable", "Deployment %s has no available replica (kubectl -n %s describe deployment %s)", key, key.Namespace, key.Name)
		return false
	}
	set(f, st, v1alpha1.FabricServiceDiscoveryReady, true, "Available", "octopus-dns answers for %s (%d replica(s) available)", dnsconfig.Zone, d.Status.AvailableReplicas)
	return true
}

// finalizeMember does what `octopus leave --agent charts` does: it uninstalls the member chart,
// then removes the cluster from the hub and Octopus from the cluster. While the hub is
// unreachable it reports so and is retried; it completes when the hub answers again.
func (r *Reconciler) finalizeMember(ctx context.Context, f *v1alpha1.Fabric, st *v1alpha1.FabricStatus) (bool, error) {
	if err := release.Uninstall(ctx, r.Config, charts.Member, v1alpha1.SystemNamespace, 0); err != nil {
		set(f, st, v1alpha1.FabricJoined, false, ReasonLeaving, "uninstalling the components: %v; retrying every %s", err, r.retryInterval())
		return false, nil
	}
	err := cluster.Leave(ctx, r.Config, cluster.LeaveOptions{KeepNamespaceFor: charts.Operator})
	switch {
	case errors.Is(err, hubaccess.ErrNotJoined):
		return true, nil // never joined, or left already
	case err != nil && unreachable(err):
		set(f, st, v1alpha1.FabricJoined, false, ReasonHubUnreachable,
			"leaving: %v; retrying every %s, the Fabric is deleted once the hub has removed the cluster (to give up on a hub that is gone for good, run `octopus leave --keep-hub`, then remove the finalizer %s)",
			err, r.retryInterval(), Finalizer)
		return false, nil
	case err != nil:
		set(f, st, v1alpha1.FabricJoined, false, ReasonLeaving, "leaving: %v; retrying every %s", err, r.retryInterval())
		return false, nil
	}
	return true, nil
}

// unreachable tells a network failure to reach an API server from a refusal.
func unreachable(err error) bool {
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "connection refused") || strings.Contains(msg, "cannot reach the hub") ||
		strings.Contains(msg, "no such host") || strings.Contains(msg, "i/o timeout") || apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err)
}

func selectorString(jc *v1alpha1.JoinConfig) string {
	sel := jc.GatewayNodeSelector
	if len(sel) == 0 {
		return v1alpha1.GatewayNodeLabel + "=true"
	}
	keys := make([]string, 0, len(sel))
	for k := range sel {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + sel[k]
	}
	return strings.Join(parts, ",")
}

// interconnectConfig is joinConfig.interconnect as the ovn-ic-config it maps onto, key for key;
// nil without it. The CRD's defaults fill the ports and autoRoute.
func interconnectConfig(ic *v1alpha1.JoinInterconnect) *icconfig.Config {
	if ic == nil {
		return nil
	}
	return &icconfig.Config{
		DBHosts: ic.ICDBHost, NBPort: int(ic.ICNBPort), SBPort: int(ic.ICSBPort),
		GatewayNodes: ic.GWNodes, AutoRoute: ic.AutoRoute == nil || *ic.AutoRoute,
	}
}
