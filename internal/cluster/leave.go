package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "github.com/octopus-mcs/octopus/api/about/v1alpha1"
	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/config/crd"
	"github.com/octopus-mcs/octopus/internal/dnsconfig"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/manifests/render"
	"github.com/octopus-mcs/octopus/internal/progress"
)

// LeaveOptions configure Leave.
type LeaveOptions struct {
	// Progress receives one line per step. Optional.
	Progress *progress.Reporter
	// KeepHub skips the hub side, for a hub that is gone for good (its IC databases with
	// it, so the interconnection is not left either). Optional.
	KeepHub bool
	// InterconnectTimeout bounds the wait for the icmaster to take an interconnected
	// cluster's AZ out of OVN interconnection. Optional, default 60s.
	InterconnectTimeout time.Duration
	// KeepNamespaceFor names the Helm release whose objects in v1alpha1.SystemNamespace stay,
	// with the namespace: the operator's, whose Role there must outlive a leave for it to
	// join again (the operator may not bind a role in any namespace it likes, so it cannot
	// grant itself that Role anew). Everything else in the namespace is deleted. Optional:
	// the namespace is deleted.
	KeepNamespaceFor string
}

// Leave removes the cluster behind member from its hub: every hub object labelled with its ID,
// then its hub ServiceAccount (which revokes its credential), then everything join put into the
// cluster. Running it again after a partial failure finishes the job: a credential the hub
// already revoked means the hub side is done.
func Leave(ctx context.Context, member *rest.Config, opts LeaveOptions) error {
	mc, err := client.New(member, client.Options{Scheme: kube.Scheme})
	if err != nil {
		return fmt.Errorf("connecting to the cluster at %s: %w", member.Host, err)
	}
	cred, err := hubaccess.LoadCredential(ctx, mc)
	if err != nil {
		return err
	}
	if !opts.KeepHub {
		// First, while the icmaster still runs: the AZ out of the IC SB and everyone's routes.
		timeout := opts.InterconnectTimeout
		if timeout == 0 {
			timeout = 60 * time.Second
		}
		if err := LeaveInterconnect(ctx, mc, cred.ClusterID, timeout, opts.Progress); err != nil {
			return err
		}
		opts.Progress.Step("Removing cluster %s from the hub at %s", cred.ClusterID, cred.Server)
		hc, err := client.New(cred.RESTConfig(), client.Options{Scheme: kube.Scheme})
		if err != nil {
			return fmt.Errorf("connecting to the hub at %s: %w", cred.Server, err)
		}
		err = removeFromHub(ctx, hc, cred)
		if apierrors.IsUnauthorized(err) {
			// The hub no longer knows the credential: an earlier leave got as far as deleting
			// the ServiceAccount (or the hub was rebuilt). Nothing of ours is left there.
			opts.Progress.Step("The hub no longer accepts this cluster's credential; nothing left to remove there")
			err = nil
		}
		if err != nil {
			return fmt.Errorf("%w (if the hub is gone for good, run `octopus leave --keep-hub` to clean up this cluster only)", err)
		}
	}
	opts.Progress.Step("Removing Octopus from the cluster")
	if err := removeFromMember(ctx, mc, cred.Namespace, opts.KeepNamespaceFor); err != nil {
		return err
	}
	if opts.KeepNamespaceFor != "" {
		return emptySystemNamespace(ctx, mc, opts.KeepNamespaceFor)
	}
	// Return only once the namespace is really gone, so that a join right after a leave does
	// not run into a terminating namespace.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := mc.Get(ctx, client.ObjectKey{Name: v1alpha1.SystemNamespace}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err != nil {
		return fmt.Errorf("waiting for namespace %s to be deleted: %w (kubectl get namespace %s -o yaml shows what holds it)", v1alpha1.SystemNamespace, err, v1alpha1.SystemNamespace)
	}
	return nil
}

// removeFromHub deletes, with the cluster's own credential, everything the cluster owns on the
// hub, its ServiceAccount last because that revokes the credential.
func removeFromHub(ctx context.Context, hc client.Client, cred hubaccess.Credential) error {
	own := []client.ListOption{client.InNamespace(cred.Namespace), client.MatchingLabels{v1alpha1.ClusterLabel: cred.ClusterID}}
	var errs []error
	// Exported services first (slices before their records, as the exporter withdraws them).
	lists := []client.ObjectList{
		&discoveryv1.EndpointSliceList{}, &mcsv1beta1.ServiceImportList{},
		&v1alpha1.PeerList{}, &coordinationv1.LeaseList{}, &corev1.ConfigMapList{}, &v1alpha1.GatewayExIpList{}, &v1alpha1.ClusterList{},
	}
	for _, list := range lists {
		if err := hc.List(ctx, list, own...); err != nil {
			if isNoKind(err) {
				continue // a hub deployed before service discovery has no ServiceImport CRD
			}
			errs = append(errs, fmt.Errorf("listing the cluster's objects on the hub: %w", err))
			continue
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, item := range items {
			obj := item.(client.Object)
			if err := hc.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
				errs = append(errs, fmt.Errorf("deleting %s on the hub: %w", obj.GetName(), err))
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.ClusterServiceAccount(cred.ClusterID), Namespace: cred.Namespace}}
	if err := hc.Delete(ctx, sa); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting ServiceAccount %s on the hub: %w", sa.Name, err)
	}
	return nil
}

// removeFromMember deletes what join put into the member cluster. CRDs go only if Octopus
// installed them (another tool may own a ClusterProperty CRD), and a CRD the hub serves too
// (GatewayExIp) stays when the member is also the hub (its namespace hubNamespace is there):
// deleting it would delete every cluster's objects of that kind on the hub.
func removeFromMember(ctx context.Context, mc client.Client, hubNamespace, keepNamespaceFor string) error {
	// The Corefile first: it lives outside Octopus's namespace and forwards to a Service
	// inside it.
	if _, err := dnsconfig.Unwire(ctx, mc); err != nil {
		return err
	}
	var errs []error
	del := func(obj client.Object) {
		if err := mc.Delete(ctx, obj); client.IgnoreNotFound(err) != nil && !isNoKind(err) {
			errs = append(errs, fmt.Errorf("deleting %T %s: %w", obj, obj.GetName(), err))
		}
	}
	// octopus-dns's cluster-scoped objects, which the namespace's deletion does not remove.
	dns, err := render.DNS("")
	if err != nil {
		return err
	}
	for _, obj := range dns {
		if obj.GetNamespace() == "" {
			del(obj)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("removing octopus-dns: %w", errors.Join(errs...))
	}
	del(&aboutv1alpha1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: aboutv1alpha1.ClusterIDProperty}})
	del(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.CredentialSecretName, Namespace: v1alpha1.SystemNamespace}})
	if keepNamespaceFor == "" {
		del(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SystemNamespace}})
	}
	crds, err := crd.Member()
	if err != nil {
		return err
	}
	hubCRDs, err := crd.Hub()
	if err != nil {
		return err
	}
	isHub := mc.Get(ctx, client.ObjectKey{Name: hubNamespace}, &corev1.Namespace{}) == nil
	for _, def := range crds {
		if isHub && slices.ContainsFunc(hubCRDs, func(h *apiextensionsv1.CustomResourceDefinition) bool { return h.Name == def.Name }) {
			continue
		}
		got := &apiextensionsv1.CustomResourceDefinition{}
		if err := mc.Get(ctx, client.ObjectKeyFromObject(def), got); err != nil {
			if client.IgnoreNotFound(err) != nil {
				errs = append(errs, err)
			}
			continue
		}
		if got.Labels[kube.ManagedByLabel] == kube.FieldManager {
			del(got)
		}
	}
	return errors.Join(errs...)
}

// emptySystemNamespace deletes every object of the kinds join and the member chart make in
// v1alpha1.SystemNamespace but those of Helm release keepFor, and waits for its pods to go,
// so that a join right after finds no leftovers: what deleting the namespace does, minus the
// release's grant.
func emptySystemNamespace(ctx context.Context, mc client.Client, keepFor string) error {
	lists := []client.ObjectList{
		&corev1.SecretList{}, &corev1.ConfigMapList{}, &corev1.ServiceList{}, &corev1.ServiceAccountList{},
		&appsv1.DeploymentList{}, &appsv1.DaemonSetList{}, &policyv1.PodDisruptionBudgetList{},
		&coordinationv1.LeaseList{}, &rbacv1.RoleList{}, &rbacv1.RoleBindingList{}, &v1alpha1.GatewayExIpList{},
	}
	var errs []error
	for _, list := range lists {
		if err := mc.List(ctx, list, client.InNamespace(v1alpha1.SystemNamespace)); err != nil {
			if !isNoKind(err) {
				errs = append(errs, fmt.Errorf("listing %T in %s: %w", list, v1alpha1.SystemNamespace, err))
			}
			continue
		}
		err := meta.EachListItem(list, func(o runtime.Object) error {
			obj := o.(client.Object)
			switch {
			case obj.GetAnnotations()[helmReleaseAnnotation] == keepFor,
				// What the API server makes in every namespace.
				obj.GetName() == "kube-root-ca.crt", obj.GetName() == "default":
				return nil
			}
			if err := mc.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
				errs = append(errs, fmt.Errorf("deleting %T %s/%s: %w", obj, obj.GetNamespace(), obj.GetName(), err))
			}
			return nil
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("emptying namespace %s: %w", v1alpha1.SystemNamespace, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		if err := mc.List(ctx, pods, client.InNamespace(v1alpha1.SystemNamespace)); err != nil {
			return false, err
		}
		return len(pods.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the pods of namespace %s to go: %w", v1alpha1.SystemNamespace, err)
	}
	return nil
}

// helmReleaseAnnotation names the Helm release an object belongs to.
const helmReleaseAnnotation = "meta.helm.sh/release-name"
