package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	if err := removeFromMember(ctx, mc, cred.Namespace); err != nil {
		return err
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
func removeFromMember(ctx context.Context, mc client.Client, hubNamespace string) error {
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
	del(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SystemNamespace}})
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
