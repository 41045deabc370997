package rbac_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/charts"
	"github.com/octopus-mcs/octopus/config/rbac"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/manifests/render"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite testdata/rules/ with what the API server reports now")

// Namespaces the identities are checked in: the member's, the hub's, and one that belongs to
// neither (a user's), where no Octopus identity may do more than cluster-wide grants allow.
const (
	memberNS = v1alpha1.SystemNamespace
	hubNS    = v1alpha1.DefaultHubNamespace
	otherNS  = "default"
	// probeName names no object: requests for it that the authorizer lets through end in
	// NotFound, and a rule restricted to resourceNames does not cover it.
	probeName = "octopus-rbac-probe"
	// testCluster is the cluster whose hub identity is checked.
	testCluster = "east"
)

// A grant is a permission an identity needs, as a reviewer states it: verbs on a group's
// resource in a namespace ("" for every namespace and the cluster scope: a ClusterRole),
// restricted to one object when name is set.
type grant struct {
	verbs, group, resource, namespace, name string
}

// allows says whether g covers one request.
func (g grant) allows(verb, group, resource, namespace, name string) bool {
	return slices.Contains(strings.Split(g.verbs, ","), verb) && g.group == group && g.resource == resource &&
		(g.namespace == "" || g.namespace == namespace) && (g.name == "" || g.name == name)
}

// A request is one API request made as an identity, which the test expects to be refused.
type request struct {
	verb, group, resource, namespace, name string
}

func (r request) String() string {
	s := r.verb + " " + r.resource
	if r.group != "" {
		s += "." + r.group
	}
	if r.name != "" {
		s += " " + r.name
	}
	if r.namespace != "" {
		return s + " in " + r.namespace
	}
	return s + " (cluster-wide)"
}

// identity is one ServiceAccount the charts (or join, for octopus-dns and a cluster's hub
// identity) install, what it needs, and the refusals that matter most, spelt out.
type identity struct {
	name                      string
	namespace, serviceAccount string
	needs                     []grant
	refused                   []request
}

// identities are every Octopus identity with RBAC: the member components (the secondary
// network's with it), and on the hub a joined cluster's credential, the join identity of
// broker-info and the hub's gateway.
//
// needs is the reviewed statement of what each may do; TestComponentsAreDeniedWhatTheyDoNotNeed
// checks every other verb on every resource the API server serves is refused, so widening a
// generated rule (a new marker, a '*') fails it until this table says why.
var identities = []identity{
	{
		name: rbac.Controller, namespace: memberNS, serviceAccount: "octopus-controller",
		needs: []grant{
			{verbs: "get,list,watch", resource: "namespaces"},
			// Secondary addressing publishes pods by the net1 address in their network-status
			// annotation (servicediscovery.SecondaryAddresses); only metadata is watched.
			{verbs: "get,list,watch", resource: "pods"},
			{verbs: "create,delete,get,list,patch,update,watch", resource: "services"},
			{verbs: "create,delete,get,list,patch,update,watch", group: "discovery.k8s.io", resource: "endpointslices"},
			{verbs: "get,list,watch", group: "multicluster.x-k8s.io", resource: "serviceexports"},
			{verbs: "get,patch,update", group: "multicluster.x-k8s.io", resource: "serviceexports/status"},
			{verbs: "create,delete,get,list,patch,update,watch", group: "multicluster.x-k8s.io", resource: "serviceimports"},
			{verbs: "get,patch,update", group: "multicluster.x-k8s.io", resource: "serviceimports/status"},
			{verbs: "update", group: "multicluster.x-k8s.io", resource: "serviceimports/finalizers"},
			{verbs: "create,delete,get,list,watch", group: "octopus.io", resource: "globalingressips"},
			{verbs: "get,update", group: "octopus.io", resource: "globalingressips/status"},
			// The globalnet allocator gives GlobalEgressIPs their ranges in status.
			{verbs: "get,list,watch", group: "octopus.io", resource: "globalegressips"},
			{verbs: "get,update", group: "octopus.io", resource: "globalegressips/status"},
			{verbs: "create,patch", resource: "events", namespace: memberNS},
			{verbs: "get,update", resource: "secrets", namespace: memberNS, name: "octopus-hub"},
			{verbs: "create", group: "coordination.k8s.io", resource: "leases", namespace: memberNS},
			{verbs: "get,update", group: "coordination.k8s.io", resource: "leases", namespace: memberNS, name: "octopus-controller"},
			// The copies of the other clusters' GatewayExIps (issue 33), in its namespace only.
			{verbs: "create,delete,get,list,patch,update,watch", group: "octopus.io", resource: "gatewayexips", namespace: memberNS},
			// The VpcNatTunnel controller (issue 33): tunnels read and their status patched,
			// Vpcs read to check each tunnel's natGwDp.
			{verbs: "get,list,watch", group: "octopus.io", resource: "vpcnattunnels"},
			{verbs: "patch", group: "octopus.io", resource: "vpcnattunnels/status"},
			{verbs: "get,list,watch", group: "octopus.io", resource: "vpcs"},
		},
		refused: []request{
			{verb: "get", resource: "secrets", namespace: otherNS, name: "octopus-hub"},
			{verb: "create", group: "octopus.io", resource: "gatewayexips", namespace: otherNS},
			// It reports on tunnels and Vpcs, never changes them.
			{verb: "update", group: "octopus.io", resource: "vpcnattunnels", name: probeName},
			{verb: "update", group: "octopus.io", resource: "vpcs", name: probeName},
			{verb: "list", resource: "secrets", namespace: memberNS},
			{verb: "delete", resource: "nodes", name: probeName},
			{verb: "create", resource: "pods", namespace: memberNS},
			{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: memberNS, name: "octopus-gateway"},
		},
	},
	{
		name: rbac.Gateway, namespace: memberNS, serviceAccount: "octopus-gateway",
		needs: []grant{
			{verbs: "get", resource: "nodes"},
			{verbs: "get,list,watch", resource: "services"},
			{verbs: "get,list,watch", group: "discovery.k8s.io", resource: "endpointslices"},
			{verbs: "get,list,watch", group: "octopus.io", resource: "globalingressips"},
			// Egress ranges: the NAT maps each pod's address to its GlobalEgressIP's range by
			// namespace or pod selector, so the gateway reads both.
			{verbs: "get,list,watch", group: "octopus.io", resource: "globalegressips"},
			{verbs: "get,list,watch", resource: "pods"},
			{verbs: "create", resource: "configmaps", namespace: memberNS},
			{verbs: "patch", resource: "configmaps", namespace: memberNS, name: "octopus-gateway"},
			{verbs: "get", resource: "secrets", namespace: memberNS, name: "octopus-hub"},
			{verbs: "create", group: "coordination.k8s.io", resource: "leases", namespace: memberNS},
			{verbs: "get,list,update,watch", group: "coordination.k8s.io", resource: "leases", namespace: memberNS, name: "octopus-gateway"},
		},
		refused: []request{
			{verb: "list", resource: "secrets"},
			{verb: "update", resource: "secrets", namespace: memberNS, name: "octopus-hub"},
			{verb: "delete", resource: "nodes", name: probeName},
			{verb: "patch", resource: "nodes", name: probeName},
			{verb: "list", resource: "nodes"},
			{verb: "delete", group: "coordination.k8s.io", resource: "leases", namespace: memberNS, name: "octopus-gateway"},
		},
	},
	{
		name: rbac.RouteAgent, namespace: memberNS, serviceAccount: "octopus-route-agent",
		needs: []grant{
			{verbs: "list,watch", resource: "nodes"},
			{verbs: "list,watch", resource: "configmaps", namespace: memberNS, name: "octopus-gateway"},
			{verbs: "list,watch", group: "coordination.k8s.io", resource: "leases", namespace: memberNS, name: "octopus-gateway"},
			// Whether Octopus is being removed, read as it stops (internal/routeagent/removal.go).
			{verbs: "get", resource: "namespaces", name: memberNS},
			{verbs: "get", group: "apps", resource: "daemonsets", namespace: memberNS, name: "octopus-route-agent"},
		},
		refused: []request{
			{verb: "get", resource: "namespaces", name: otherNS},
			{verb: "get", group: "apps", resource: "daemonsets", namespace: memberNS, name: "octopus-gateway"},
			{verb: "delete", group: "apps", resource: "daemonsets", namespace: memberNS, name: "octopus-route-agent"},
			{verb: "create", resource: "services", namespace: otherNS},
			{verb: "update", resource: "services", namespace: otherNS, name: probeName},
			{verb: "create", group: "discovery.k8s.io", resource: "endpointslices", namespace: otherNS},
			{verb: "patch", group: "discovery.k8s.io", resource: "endpointslices", namespace: otherNS, name: probeName},
			{verb: "update", resource: "configmaps", namespace: memberNS, name: "octopus-gateway"},
			{verb: "get", resource: "secrets", namespace: memberNS, name: "octopus-hub"},
		},
	},
	{
		name: rbac.DNS, namespace: memberNS, serviceAccount: "octopus-dns",
		needs: []grant{
			{verbs: "list,watch", group: "discovery.k8s.io", resource: "endpointslices"},
			{verbs: "list,watch", group: "multicluster.x-k8s.io", resource: "serviceimports"},
		},
		// octopus-dns answers queries: it writes nothing.
		refused: []request{
			{verb: "create", group: "discovery.k8s.io", resource: "endpointslices", namespace: otherNS},
			{verb: "delete", group: "discovery.k8s.io", resource: "endpointslices", namespace: otherNS, name: probeName},
			{verb: "update", group: "multicluster.x-k8s.io", resource: "serviceimports", namespace: otherNS, name: probeName},
			{verb: "create", resource: "configmaps", namespace: memberNS},
			{verb: "get", resource: "secrets", namespace: memberNS, name: "octopus-hub"},
		},
	},
	{
		name: rbac.OVNMaster, namespace: memberNS, serviceAccount: "octopus-ovnmaster",
		needs: []grant{
			// Every pod on the secondary network: its network-status or error annotation.
			{verbs: "get,list,watch,patch", resource: "pods"},
			// Why a pod has no address, in the pod's namespace.
			{verbs: "create,patch", group: "events.k8s.io", resource: "events"},
			{verbs: "create", group: "coordination.k8s.io", resource: "leases", namespace: memberNS},
			{verbs: "get,update", group: "coordination.k8s.io", resource: "leases", namespace: memberNS, name: "octopus-ovnmaster"},
			// The leader election's "became leader" event (client-go's core events), as the controller's.
			{verbs: "create,patch", resource: "events", namespace: memberNS},
			// Which node gets the gateway's port: the one the ConfigMap names, else the Lease holder.
			{verbs: "get,list,watch", resource: "configmaps", namespace: memberNS, name: "octopus-gateway"},
			{verbs: "get,list,watch", group: "coordination.k8s.io", resource: "leases", namespace: memberNS, name: "octopus-gateway"},
			// The Vpc controller: Vpcs read, their finalizer added and removed (update), their
			// conditions patched; the tunnels and DNS forwards naming a Vpc keep it from going.
			{verbs: "get,list,watch,update", group: "octopus.io", resource: "vpcs"},
			{verbs: "patch", group: "octopus.io", resource: "vpcs/status"},
			{verbs: "update", group: "octopus.io", resource: "vpcs/finalizers"},
			{verbs: "get,list,watch", group: "octopus.io", resource: "vpcnattunnels"},
			{verbs: "get,list,watch", group: "octopus.io", resource: "vpcdnsforwards"},
			// A VPC gateway's external address comes from the pool the global ingress
			// addresses and GlobalEgressIP ranges share: read them, never write them.
			{verbs: "get,list,watch", group: "octopus.io", resource: "globalingressips"},
			{verbs: "get,list,watch", group: "octopus.io", resource: "globalegressips"},
		},
		refused: []request{
			{verb: "update", group: "octopus.io", resource: "globalingressips/status", namespace: memberNS, name: probeName},
			{verb: "update", group: "octopus.io", resource: "globalegressips/status", namespace: memberNS, name: probeName},
			{verb: "create", group: "octopus.io", resource: "vpcs"},
			{verb: "delete", group: "octopus.io", resource: "vpcs", name: probeName},
			{verb: "update", group: "octopus.io", resource: "vpcnattunnels", name: probeName},
			{verb: "patch", resource: "configmaps", namespace: memberNS, name: "octopus-gateway"},
			{verb: "get", resource: "configmaps", namespace: memberNS, name: probeName},
			{verb: "update", resource: "pods", namespace: otherNS, name: probeName},
			{verb: "delete", resource: "pods", namespace: otherNS, name: probeName},
			{verb: "create", resource: "pods", namespace: otherNS},
			{verb: "get", resource: "secrets", namespace: memberNS, name: "octopus-hub"},
			{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: memberNS, name: "octopus-controller"},
		},
	},
	{
		name: rbac.ICMaster, namespace: memberNS, serviceAccount: "octopus-icmaster",
		needs: []grant{
			{verbs: "get,list,watch,patch", resource: "configmaps", namespace: "kube-system", name: "ovn-ic-config"},
			// The manual routes: read, and each one's status written; their spec is the user's.
			{verbs: "list,watch", group: "octopus.io", resource: "interconnectroutes"},
			{verbs: "patch", group: "octopus.io", resource: "interconnectroutes/status"},
			{verbs: "create,patch", group: "events.k8s.io", resource: "events", namespace: "kube-system"},
			{verbs: "create,patch", resource: "events", namespace: memberNS},
			{verbs: "create", group: "coordination.k8s.io", resource: "leases", namespace: memberNS},
			{verbs: "get,update", group: "coordination.k8s.io", resource: "leases", namespace: memberNS, name: "octopus-icmaster"},
		},
		refused: []request{
			{verb: "create", group: "octopus.io", resource: "interconnectroutes"},
			{verb: "update", group: "octopus.io", resource: "interconnectroutes", name: probeName},
			{verb: "delete", group: "octopus.io", resource: "interconnectroutes", name: probeName},
			{verb: "get", resource: "configmaps", namespace: "kube-system", name: probeName},
			{verb: "get", resource: "secrets", namespace: memberNS, name: "octopus-hub"},
			{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: memberNS, name: "octopus-ovnmaster"},
		},
	},
	{
		name: rbac.OVNNRI, namespace: memberNS, serviceAccount: "octopus-ovn-nri",
		// It watches its node's pods for their addresses (reading one the watch has not seen
		// yet); the reason a pod cannot start reaches the pod through containerd and the
		// kubelet, not through the API.
		needs: []grant{
			{verbs: "get,list,watch", resource: "pods"},
		},
		refused: []request{
			{verb: "patch", resource: "pods", namespace: otherNS, name: probeName},
			{verb: "delete", resource: "pods", namespace: otherNS, name: probeName},
			{verb: "list", resource: "nodes"},
			{verb: "create", group: "events.k8s.io", resource: "events", namespace: otherNS},
			{verb: "get", resource: "secrets", namespace: memberNS, name: "octopus-hub"},
		},
	},
	{
		name: "hub-cluster", namespace: hubNS, serviceAccount: v1alpha1.ClusterServiceAccount(testCluster),
		// RBAC gives every cluster the same verbs in the hub namespace; the ownership
		// admission policy (internal/manifests/render/policy.go) narrows them to the cluster's own
		// objects, tested in internal/cluster.
		needs: []grant{
			{verbs: "get,list,watch,create,update,patch,delete", group: "octopus.io", resource: "clusters", namespace: hubNS},
			{verbs: "get,list,watch,create,update,patch,delete", group: "octopus.io", resource: "peers", namespace: hubNS},
			{verbs: "get,update,patch", group: "octopus.io", resource: "clusters/status", namespace: hubNS},
			{verbs: "get,update,patch", group: "octopus.io", resource: "peers/status", namespace: hubNS},
			{verbs: "get,list,watch,create,update,patch,delete", group: "coordination.k8s.io", resource: "leases", namespace: hubNS},
			{verbs: "get,list,watch,create,update,patch,delete", resource: "configmaps", namespace: hubNS},
			{verbs: "get,list,watch,create,update,patch,delete", group: "multicluster.x-k8s.io", resource: "serviceimports", namespace: hubNS},
			{verbs: "get,list,watch,create,update,patch,delete", group: "discovery.k8s.io", resource: "endpointslices", namespace: hubNS},
			// Its VPC gateways' GatewayExIps, and every other cluster's read (issue 33); the
			// policy admits only names <cluster>.<gateway> of its own.
			{verbs: "get,list,watch,create,update,patch,delete", group: "octopus.io", resource: "gatewayexips", namespace: hubNS},
			{verbs: "delete", resource: "serviceaccounts", namespace: hubNS},
			{verbs: "create", resource: "serviceaccounts/token", namespace: hubNS},
		},
		refused: []request{
			{verb: "get", resource: "secrets", namespace: hubNS, name: render.JoinTokenSecret},
			{verb: "list", resource: "secrets", namespace: hubNS},
			{verb: "create", group: "rbac.authorization.k8s.io", resource: "rolebindings", namespace: hubNS},
			{verb: "list", resource: "serviceaccounts", namespace: hubNS},
			{verb: "list", group: "octopus.io", resource: "clusters"},
		},
	},
	{
		name: "hub-join", namespace: hubNS, serviceAccount: render.JoinServiceAccount,
		needs: []grant{
			// delete: join replaces an unbound account instead of adopting one someone may
			// have pre-created (and taken a token for); the hub's admission policy lets the
			// join identity delete only accounts that no RoleBinding binds yet
			// (TestRejoinDoesNotAdoptPrecreatedAccount).
			{verbs: "get,create,delete", resource: "serviceaccounts", namespace: hubNS},
			{verbs: "create", resource: "serviceaccounts/token", namespace: hubNS},
			{verbs: "get,create", group: "rbac.authorization.k8s.io", resource: "rolebindings", namespace: hubNS},
			{verbs: "bind", group: "rbac.authorization.k8s.io", resource: "roles", namespace: hubNS, name: v1alpha1.ClusterCredentialRole},
			{verbs: "get,list,watch", group: "octopus.io", resource: "clusters", namespace: hubNS},
		},
		refused: []request{
			{verb: "get", resource: "secrets", namespace: hubNS, name: render.JoinTokenSecret},
			{verb: "list", resource: "serviceaccounts", namespace: hubNS},
			{verb: "update", group: "rbac.authorization.k8s.io", resource: "rolebindings", namespace: hubNS, name: v1alpha1.ClusterServiceAccount(testCluster)},
			{verb: "create", group: "octopus.io", resource: "peers", namespace: hubNS},
		},
	},
	{
		name: "hub-gateway", namespace: hubNS, serviceAccount: v1alpha1.HubGatewayServiceAccount,
		// It writes only its own Peer and election Lease: a compromised hub gateway cannot
		// rewrite a member's Peer (and so its routes) or heartbeat.
		needs: []grant{
			{verbs: "get,list,watch", group: "octopus.io", resource: "peers", namespace: hubNS},
			{verbs: "create,update,patch,delete", group: "octopus.io", resource: "peers", namespace: hubNS, name: v1alpha1.HubPeerName},
			{verbs: "get,update,patch", group: "octopus.io", resource: "peers/status", namespace: hubNS, name: v1alpha1.HubPeerName},
			{verbs: "get,list,watch", group: "octopus.io", resource: "clusters", namespace: hubNS},
			{verbs: "get,list,watch,create", group: "coordination.k8s.io", resource: "leases", namespace: hubNS},
			{verbs: "update,patch", group: "coordination.k8s.io", resource: "leases", namespace: hubNS, name: v1alpha1.HubGatewayLeaseName},
		},
		refused: []request{
			{verb: "update", group: "octopus.io", resource: "peers", namespace: hubNS, name: testCluster},
			{verb: "patch", group: "octopus.io", resource: "peers", namespace: hubNS, name: testCluster},
			{verb: "delete", group: "octopus.io", resource: "peers", namespace: hubNS, name: testCluster},
			{verb: "update", group: "octopus.io", resource: "peers/status", namespace: hubNS, name: testCluster},
			{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: hubNS, name: testCluster},
			{verb: "delete", group: "coordination.k8s.io", resource: "leases", namespace: hubNS, name: v1alpha1.HubGatewayLeaseName},
			// Applying a Peer under a member's name creates it only if the member has none.
			{verb: "create", group: "octopus.io", resource: "peers", namespace: hubNS, name: testCluster},
			{verb: "get", resource: "secrets", namespace: hubNS, name: render.JoinTokenSecret},
			{verb: "create", resource: "serviceaccounts/token", namespace: hubNS, name: v1alpha1.ClusterServiceAccount(testCluster)},
			{verb: "update", group: "octopus.io", resource: "clusters", namespace: hubNS, name: testCluster},
			{verb: "get", resource: "nodes", name: probeName},
		},
	},
}

// everyone is what Kubernetes's bootstrap roles grant every authenticated identity
// (system:basic-user, system:cluster-trust-bundle-discovery): no Octopus rule grants it.
var everyone = []grant{
	{verbs: "create", group: "authorization.k8s.io", resource: "selfsubjectaccessreviews"},
	{verbs: "create", group: "authorization.k8s.io", resource: "selfsubjectrulesreviews"},
	{verbs: "create", group: "authentication.k8s.io", resource: "selfsubjectreviews"},
	{verbs: "get,list,watch", group: "certificates.k8s.io", resource: "clustertrustbundles"},
}

// rbacOnlyVerbs are verbs RBAC checks that discovery does not list: the ones that let an
// identity grant, assume or sign for more than it holds.
var rbacOnlyVerbs = []struct{ group, resource, verbs string }{
	{group: "rbac.authorization.k8s.io", resource: "roles", verbs: "bind,escalate"},
	{group: "rbac.authorization.k8s.io", resource: "clusterroles", verbs: "bind,escalate"},
	{resource: "users", verbs: "impersonate"},
	{resource: "groups", verbs: "impersonate"},
	{resource: "serviceaccounts", verbs: "impersonate"},
	{group: "authentication.k8s.io", resource: "uids", verbs: "impersonate"},
	{group: "authentication.k8s.io", resource: "userextras", verbs: "impersonate"},
	{group: "certificates.k8s.io", resource: "signers", verbs: "approve,sign"},
}

// TestComponentsAreDeniedWhatTheyDoNotNeed applies the RBAC the charts install (and join, for
// octopus-dns and a cluster's hub identity) to a real API server serving Octopus's CRDs, then
// acts as each identity with a token from the TokenRequest API:
//   - every request its needs table lists is authorized (a real request, dry-run for writes;
//     NotFound for a probe name is authorized);
//   - its refused table, real requests again, is refused with 403;
//   - every other verb on every resource the API server serves (and the RBAC-only verbs bind,
//     escalate, impersonate, approve, sign), in its namespace, the other Octopus namespace and
//     a user's, is refused (SelfSubjectAccessReview): widening any rule fails here;
//   - its SelfSubjectRulesReview equals testdata/rules/<identity>.yaml, which also covers
//     kinds the API server does not serve and non-resource URLs.
func TestComponentsAreDeniedWhatTheyDoNotNeed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	env := testenv.ControlPlanes(t, "a")
	adminCfg := env.Cluster("a").RESTConfig()
	admin := testenv.Client(t, adminCfg)
	ctx := t.Context()

	testenv.InstallCRDs(t, adminCfg)
	for _, ns := range []string{memberNS, hubNS} {
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	applyRBAC(t, admin, installedRBAC(t)...)
	// A joined cluster's hub identity, as enrolment makes it.
	sa := render.ClusterServiceAccount(hubNS, testCluster, "4f9d7c1e-0000-4000-8000-000000000001")
	if err := admin.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	applyRBAC(t, admin, render.ClusterGrant(hubNS, testCluster, sa))

	universe := servedResources(t, adminCfg)
	seen := map[string]bool{}
	for _, id := range identities {
		seen[id.serviceAccount] = true
		t.Run(id.name, func(t *testing.T) {
			cfg := tokenFor(t, admin, adminCfg, id)
			dyn, err := dynamic.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}

			t.Run("needs", func(t *testing.T) {
				for _, g := range id.needs {
					for _, verb := range strings.Split(g.verbs, ",") {
						r := request{verb: verb, group: g.group, resource: g.resource, namespace: g.namespace, name: g.name}
						if r.namespace == "" && universe.namespaced(g.group, g.resource) {
							r.namespace = otherNS // cluster-wide: any namespace, a user's included
						}
						if err := do(ctx, dyn, cs, universe, r); err != nil {
							t.Errorf("%s: %v", r, err)
						}
					}
				}
			})

			t.Run("refused", func(t *testing.T) {
				for _, r := range id.refused {
					err := do(ctx, dyn, cs, universe, r)
					if !apierrors.IsForbidden(err) {
						t.Errorf("%s: %v; want 403 Forbidden", r, err)
					}
				}
			})

			t.Run("everything else refused", func(t *testing.T) {
				checks := universe.requests()
				var mu sync.Mutex
				var allowed []string
				parallel(checks, 8, func(r request) {
					for _, g := range slices.Concat(id.needs, everyone) {
						if g.allows(r.verb, r.group, r.resource, r.namespace, r.name) {
							return
						}
					}
					ok, err := accessReview(ctx, cs, r)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err != nil:
						t.Errorf("%s: %v", r, err)
					case ok:
						allowed = append(allowed, r.String())
					}
				})
				slices.Sort(allowed)
				if len(allowed) > 0 {
					t.Errorf("%d requests allowed that %s does not need (widened RBAC? say why in its needs table):\n%s",
						len(allowed), id.name, strings.Join(allowed, "\n"))
				}
				t.Logf("%d requests checked", len(checks))
			})

			t.Run("rules", func(t *testing.T) {
				compareRules(t, cs, id)
			})
		})
	}
	// Every ServiceAccount the charts install is one of the identities above.
	for _, obj := range installedRBAC(t) {
		if obj.GetKind() == "ServiceAccount" && !seen[obj.GetName()] {
			t.Errorf("ServiceAccount %s/%s has no entry in identities", obj.GetNamespace(), obj.GetName())
		}
	}
}

// installedRBAC is the ServiceAccounts, roles and bindings the member and hub charts render
// (the member's with the secondary network on, the hub's with its gateway on), and octopus-dns's, which join installs (render.DNS).
func installedRBAC(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	hubGateway := map[string]any{"gateway": map[string]any{"enabled": true, "healthCheckIP": "10.100.0.1"}}
	// With the interconnection, so that the icmaster's roles are installed too.
	secondaryNetwork := map[string]any{"secondaryNetwork": map[string]any{"enabled": true, "clusterID": "east", "cidr": "10.112.0.0/16",
		"interconnect": map[string]any{"enabled": true, "icDBHost": []any{"10.0.0.1"}, "icNBPort": 6645, "icSBPort": 6646, "secondaryPool": "10.112.0.0/16"}}}
	for chart, ns := range map[string]string{charts.Member: memberNS, charts.Hub: hubNS} {
		c, err := charts.Load(chart, "v0.0.0-test")
		if err != nil {
			t.Fatal(err)
		}
		values := secondaryNetwork
		if chart == charts.Hub {
			values = hubGateway
		}
		rendered, err := charts.Render(c, ns, values)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range slices.Sorted(maps.Keys(rendered)) {
			out = append(out, testenv.Decode(t, rendered[k])...)
		}
	}
	dns, err := render.DNS(render.DNSImage + ":v0.0.0-test")
	if err != nil {
		t.Fatal(err)
	}
	y, err := render.YAML(dns...)
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, testenv.Decode(t, string(y))...)
	return slices.DeleteFunc(out, func(u *unstructured.Unstructured) bool {
		switch u.GetKind() {
		case "ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding":
			return false
		}
		return true
	})
}

func applyRBAC[T client.Object](t *testing.T, admin client.Client, objs ...T) {
	t.Helper()
	for _, obj := range objs {
		u, ok := any(obj).(*unstructured.Unstructured)
		if !ok {
			if err := kube.Apply(t.Context(), admin, obj); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := admin.Apply(t.Context(), client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("octopus-test"), client.ForceOwnership); err != nil {
			t.Fatalf("applying %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
	}
}

// tokenFor returns a client configuration authenticated as id's ServiceAccount with a token
// from the TokenRequest API, once the authorizer knows its bindings.
func tokenFor(t *testing.T, admin client.Client, adminCfg *rest.Config, id identity) *rest.Config {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: id.namespace, Name: id.serviceAccount}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}
	if err := admin.SubResource("token").Create(t.Context(), sa, tr); err != nil {
		t.Fatalf("requesting a token of %s/%s: %v", id.namespace, id.serviceAccount, err)
	}
	cfg := rest.AnonymousClientConfig(adminCfg)
	cfg.BearerToken = tr.Status.Token
	cfg.QPS, cfg.Burst = 1000, 1000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	first := id.needs[0]
	probe := request{verb: strings.Split(first.verbs, ",")[0], group: first.group, resource: first.resource, namespace: first.namespace, name: first.name}
	testenv.Eventually(t, time.Minute, "the API server knows the bindings of "+id.name, func() error {
		ok, err := accessReview(t.Context(), cs, probe)
		if err == nil && !ok {
			err = fmt.Errorf("%s not allowed yet", probe)
		}
		return err
	})
	return cfg
}

// accessReview asks the authorizer whether the caller of cs may make r.
func accessReview(ctx context.Context, cs kubernetes.Interface, r request) (bool, error) {
	res, sub, _ := strings.Cut(r.resource, "/")
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: r.namespace, Verb: r.verb, Group: r.group, Resource: res, Subresource: sub, Name: r.name,
		},
	}}
	out, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return out.Status.Allowed, nil
}

// do makes r as a real request: writes with dryRun=All, so that nothing changes whatever the
// answer. It returns nil when the request was authorized: it succeeded, or failed after
// authorization (NotFound for a probe name, Invalid for an empty object). Verbs without an
// endpoint (bind, finalizers updates) are asked of the authorizer instead.
func do(ctx context.Context, dyn dynamic.Interface, cs kubernetes.Interface, u *served, r request) error {
	res, sub, _ := strings.Cut(r.resource, "/")
	gvr, kind, ok := u.lookup(r.group, res)
	if !ok || (sub != "" && !u.has(r.group, r.resource)) || !slices.Contains([]string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}, r.verb) {
		allowed, err := accessReview(ctx, cs, r)
		if err == nil && !allowed {
			err = apierrors.NewForbidden(gvr.GroupResource(), r.name, errors.New("SelfSubjectAccessReview: not allowed"))
		}
		return err
	}
	var ri dynamic.ResourceInterface = dyn.Resource(gvr)
	if r.namespace != "" {
		ri = dyn.Resource(gvr).Namespace(r.namespace)
	}
	name := r.name
	if name == "" {
		name = probeName
	}
	var subs []string
	if sub != "" {
		subs = []string{sub}
	}
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion(gvr.GroupVersion().String())
	obj.SetKind(kind)
	obj.SetName(name)
	if sub == "token" {
		obj.SetAPIVersion("authentication.k8s.io/v1")
		obj.SetKind("TokenRequest")
	}
	// A rule restricted to resourceNames allows a list or watch of that one object only.
	var selector string
	if r.name != "" {
		selector = "metadata.name=" + r.name
	}
	dry := []string{metav1.DryRunAll}
	var err error
	switch r.verb {
	case "get":
		_, err = ri.Get(ctx, name, metav1.GetOptions{}, subs...)
	case "list":
		_, err = ri.List(ctx, metav1.ListOptions{Limit: 1, FieldSelector: selector})
	case "watch":
		var w interface{ Stop() }
		if w, err = ri.Watch(ctx, metav1.ListOptions{TimeoutSeconds: ptr.To(int64(1)), FieldSelector: selector}); err == nil {
			w.Stop()
		}
	case "create":
		if r.name != "" && sub == "" {
			// A create restricted to a name is one made by applying (server-side apply of
			// an object that does not exist yet), which the API server authorizes as a
			// create of that name; a POST carries no name to authorize.
			body := fmt.Sprintf(`{"apiVersion":%q,"kind":%q,"metadata":{"name":%q}}`, obj.GetAPIVersion(), kind, name)
			_, err = ri.Patch(ctx, name, types.ApplyPatchType, []byte(body), metav1.PatchOptions{DryRun: dry, FieldManager: "octopus-rbac-test"})
			break
		}
		_, err = ri.Create(ctx, obj, metav1.CreateOptions{DryRun: dry}, subs...)
	case "update":
		_, err = ri.Update(ctx, obj, metav1.UpdateOptions{DryRun: dry}, subs...)
	case "patch":
		_, err = ri.Patch(ctx, name, types.MergePatchType, []byte("{}"), metav1.PatchOptions{DryRun: dry}, subs...)
	case "delete":
		err = ri.Delete(ctx, name, metav1.DeleteOptions{DryRun: dry}, subs...)
	case "deletecollection":
		err = ri.DeleteCollection(ctx, metav1.DeleteOptions{DryRun: dry}, metav1.ListOptions{})
	}
	// Any answer but 401 and 403 comes after authorization; a failure to reach the API
	// server is no answer.
	var status apierrors.APIStatus
	if err == nil || (errors.As(err, &status) && !apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err)) {
		return nil
	}
	return err
}

// served is what the API server serves, by group and resource (subresources included, as
// "pods/exec"): what the identities are checked against.
type served struct {
	resources map[schema.GroupResource]servedResource
}

type servedResource struct {
	version, kind string
	namespaced    bool
	verbs         []string
}

func servedResources(t *testing.T, cfg *rest.Config) *served {
	t.Helper()
	lists, err := discovery.NewDiscoveryClientForConfigOrDie(cfg).ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	s := &served{resources: map[schema.GroupResource]servedResource{}}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			s.resources[schema.GroupResource{Group: gv.Group, Resource: r.Name}] = servedResource{
				version: gv.Version, kind: r.Kind, namespaced: r.Namespaced, verbs: r.Verbs,
			}
		}
	}
	for _, v := range rbacOnlyVerbs {
		gr := schema.GroupResource{Group: v.group, Resource: v.resource}
		r := s.resources[gr]
		r.verbs = append(slices.Clone(r.verbs), strings.Split(v.verbs, ",")...)
		s.resources[gr] = r
	}
	return s
}

func (s *served) has(group, resource string) bool {
	_, ok := s.resources[schema.GroupResource{Group: group, Resource: resource}]
	return ok
}

func (s *served) namespaced(group, resource string) bool {
	return s.resources[schema.GroupResource{Group: group, Resource: resource}].namespaced
}

func (s *served) lookup(group, resource string) (schema.GroupVersionResource, string, bool) {
	r, ok := s.resources[schema.GroupResource{Group: group, Resource: resource}]
	return schema.GroupVersionResource{Group: group, Version: r.version, Resource: resource}, r.kind, ok && r.version != ""
}

// requests is every verb on every resource: a namespaced one in each of the namespaces, a
// cluster-scoped one once; on a named object (probeName) where the verb takes one.
func (s *served) requests() []request {
	var out []request
	for gr, r := range s.resources {
		namespaces := []string{""}
		if r.namespaced {
			namespaces = []string{memberNS, hubNS, otherNS}
		}
		for _, verb := range r.verbs {
			name := probeName
			if !strings.Contains(gr.Resource, "/") && slices.Contains([]string{"list", "watch", "create", "deletecollection"}, verb) {
				name = ""
			}
			for _, ns := range namespaces {
				out = append(out, request{verb: verb, group: gr.Group, resource: gr.Resource, namespace: ns, name: name})
			}
		}
	}
	return out
}

// compareRules compares what the API server says id may do (SelfSubjectRulesReview, in its
// namespace and in a user's) with testdata/rules/<id>.yaml; go test -update rewrites it.
func compareRules(t *testing.T, cs kubernetes.Interface, id identity) {
	t.Helper()
	got := map[string][]string{}
	for _, ns := range []string{id.namespace, otherNS} {
		review := &authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns}}
		out, err := cs.AuthorizationV1().SelfSubjectRulesReviews().Create(t.Context(), review, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if out.Status.Incomplete {
			t.Fatalf("rules review in %s incomplete: %s", ns, out.Status.EvaluationError)
		}
		var lines []string
		for _, r := range out.Status.ResourceRules {
			line := sortedJoin(r.Verbs) + " " + sortedJoin(r.Resources)
			if g := sortedJoin(r.APIGroups); g != "" {
				line += " in " + g
			}
			if len(r.ResourceNames) > 0 {
				line += " named " + sortedJoin(r.ResourceNames)
			}
			lines = append(lines, line)
		}
		for _, r := range out.Status.NonResourceRules {
			lines = append(lines, sortedJoin(r.Verbs)+" "+sortedJoin(r.NonResourceURLs))
		}
		slices.Sort(lines)
		got[ns] = slices.Compact(lines)
	}
	y, err := yaml.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "rules", id.name+".yaml")
	if *update {
		if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, y, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test ./config/rbac -run TestComponentsAreDeniedWhatTheyDoNotNeed -update writes it)", err)
	}
	if string(want) != string(y) {
		t.Errorf("the rules of %s differ from %s: if the change is intended, update its needs table and the file (-update).\ngot:\n%s", id.name, golden, y)
	}
}

func sortedJoin(s []string) string {
	s = slices.Sorted(slices.Values(s))
	return strings.Join(s, ",")
}

// parallel calls f for each item on n goroutines.
func parallel[T any](items []T, n int, f func(T)) {
	ch := make(chan T)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for it := range ch {
				f(it)
			}
		})
	}
	for _, it := range items {
		ch <- it
	}
	close(ch)
	wg.Wait()
}
