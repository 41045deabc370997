package operator

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// BrokerInfoSecretName is the Secret in the hub namespace where a hub Fabric publishes
// broker-info. A Secret, never a ConfigMap: broker-info holds the join credential.
const BrokerInfoSecretName = "broker-info"

// The hub's RBAC: what hub deploy applies (render.Hub) and the broker-info Secret. No
// escalate or bind: the operator holds every rule of the roles it installs, cluster-wide for
// their ClusterRoles and in the namespace of their Roles (internal/manifests/chartgen
// OperatorRoles says why).
//
// Secrets and ServiceAccounts only in the namespaces the operator writes them in: the hub's
// (the chart's hub.namespace stands for v1alpha1.DefaultHubNamespace here), the member's, and
// its own, where a member Fabric's broker-info is by default. Reading every Secret of the
// cluster, or minting a token for any ServiceAccount, would make it cluster-admin in effect.
//
// Every namespaced kind only in the namespaces it writes: a Deployment in any namespace runs
// as any ServiceAccount there. Namespaces are written by apply (a patch, which carries the
// name), Helm's included, so writes can be confined to the two it makes.
//
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=patch;update;delete,resourceNames=octopus-system;octopus-hub
// +kubebuilder:rbac:groups="",namespace=octopus-hub,resources=secrets;serviceaccounts;configmaps;services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",namespace=octopus-operator,resources=secrets,verbs=get
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings;clusterroles;clusterrolebindings,verbs=get;list;watch;create;update;patch;delete
// The interconnection databases and the signer (hubConfig.interconnect).
// +kubebuilder:rbac:groups=apps,namespace=octopus-hub,resources=statefulsets;deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=get;list;watch;create;update;patch;delete

// reconcileHub makes the cluster the hub (hub.Deploy, as `octopus hub deploy`) and publishes
// broker-info in the Secret BrokerInfoSecretName of the hub namespace. While the hubConfig
// and the Secret are unchanged it only checks that the Secret is there.
func (r *Reconciler) reconcileHub(ctx context.Context, f *v1alpha1.Fabric, st *v1alpha1.FabricStatus) (bool, error) {
	hc := f.Spec.HubConfig
	ns := hc.Namespace
	if ns == "" {
		ns = v1alpha1.DefaultHubNamespace
	}
	if why := r.hubNamespaceGranted(ns); why != "" {
		set(f, st, v1alpha1.FabricBrokerReady, false, ReasonHubNamespaceNotGranted, "%s", why)
		return false, nil
	}
	key := ctrl.ObjectKey{Namespace: ns, Name: BrokerInfoSecretName}
	want := hash(hc)
	st.BrokerInfoSecret = key.String()
	if st.AppliedHash == want {
		err := r.Client.Get(ctx, key, &corev1.Secret{})
		if err == nil {
			set(f, st, v1alpha1.FabricBrokerReady, true, "Published", "the hub is deployed in namespace %s; copy Secret %s to the clusters that join (key %s)", ns, key, v1alpha1.BrokerInfoKey)
			return true, nil
		}
		if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("reading broker-info Secret %s: %w", key, err)
		}
	}
	opts := hub.DeployOptions{Namespace: ns, HubURL: hc.HubURL}
	if hc.Globalnet != nil {
		opts.Globalnet = hub.PoolConfig{CIDR: hc.Globalnet.CIDR, ClusterPrefixLength: int(hc.Globalnet.ClusterPrefixLength)}
	}
	if hc.Secondary != nil {
		opts.Secondary = hub.PoolConfig{CIDR: hc.Secondary.CIDR, ClusterPrefixLength: int(hc.Secondary.ClusterPrefixLength)}
	}
	if ic := hc.Interconnect; ic != nil {
		opts.Interconnect = &hub.InterconnectOptions{Image: ic.Image, TransitSwitches: ic.TransitSwitches}
		for _, a := range ic.Addresses {
			addr, err := netip.ParseAddr(a)
			if err != nil {
				// The CRD's CEL rule admits IP addresses only; this is an edit that bypassed it.
				set(f, st, v1alpha1.FabricBrokerReady, false, "DeployFailed", "hubConfig.interconnect.addresses: %v (give the hub nodes' IP addresses)", err)
				return false, nil
			}
			opts.Interconnect.Addresses = append(opts.Interconnect.Addresses, addr)
		}
	}
	info, err := hub.Deploy(ctx, r.Config, opts)
	if err != nil {
		set(f, st, v1alpha1.FabricBrokerReady, false, "DeployFailed", "deploying the hub: %v", err)
		return false, nil
	}
	data, err := info.Encode()
	if err != nil {
		set(f, st, v1alpha1.FabricBrokerReady, false, "DeployFailed", "encoding broker-info: %v", err)
		return false, nil
	}
	secret := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: kube.ManagedLabels()},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{v1alpha1.BrokerInfoKey: data},
	}
	if err := kube.Apply(ctx, r.Client, secret); err != nil {
		return false, fmt.Errorf("publishing broker-info in Secret %s: %w", key, err)
	}
	st.AppliedHash = want
	set(f, st, v1alpha1.FabricBrokerReady, true, "Published", "the hub is deployed in namespace %s; copy Secret %s to the clusters that join (key %s)", ns, key, v1alpha1.BrokerInfoKey)
	return true, nil
}

// NoHubNamespace is Reconciler.HubNamespace when the operator's chart grants it no hub
// namespace.
const NoHubNamespace = "none"

// ReasonHubNamespaceNotGranted is the BrokerReady reason of a hub Fabric in a namespace the
// operator's RBAC does not cover.
const ReasonHubNamespaceNotGranted = "HubNamespaceNotGranted"

// hubNamespaceGranted says why the operator may not deploy the hub in ns ("" if it may).
func (r *Reconciler) hubNamespaceGranted(ns string) string {
	switch r.HubNamespace {
	case "", ns:
		return ""
	case NoHubNamespace:
		return fmt.Sprintf("the operator's chart grants it no hub namespace; run helm upgrade octopus-operator with --set hub.enabled=true,hub.namespace=%s", ns)
	}
	return fmt.Sprintf("hubConfig.namespace %q: the operator's chart grants it rights in namespace %q only; set hubConfig.namespace to %q, or run helm upgrade octopus-operator with --set hub.namespace=%s", ns, r.HubNamespace, r.HubNamespace, ns)
}

// finalizeHub withdraws the published broker-info. The hub's own objects stay: the clusters
// joined to it keep their state there, and `octopus hub deploy` has no undo either.
func (r *Reconciler) finalizeHub(ctx context.Context, f *v1alpha1.Fabric) error {
	ns := f.Spec.HubConfig.Namespace
	if ns == "" {
		ns = v1alpha1.DefaultHubNamespace
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: BrokerInfoSecretName, Namespace: ns}}
	if err := r.Client.Delete(ctx, s); ctrl.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting broker-info Secret %s/%s: %w", ns, s.Name, err)
	}
	return nil
}
