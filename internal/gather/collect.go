package gather

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	"sigs.k8s.io/yaml"

	aboutv1alpha1 "github.com/octopus-mcs/octopus/api/about/v1alpha1"
	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// listing is one file of objects: every object of a kind, where the options select.
type listing struct {
	file string
	// list is the typed list of the kind, which names its group, version and kind (the
	// objects themselves are read unstructured, so that every field the server has is kept).
	list client.ObjectList
	opts []client.ListOption
}

// mcsServiceNameLabel marks the EndpointSlices of imported services (KEP-1645).
const mcsServiceNameLabel = "multicluster.kubernetes.io/service-name"

// kubeDNSSelector selects the cluster's CoreDNS pods: kubeadm's label, which most
// distributions keep.
var kubeDNSSelector = client.MatchingLabels{"k8s-app": "kube-dns"}

// memberListings are what gather takes from every member: Octopus's own namespace, the
// cluster-scoped Octopus objects and Nodes, the MCS objects of every namespace, and the
// cluster DNS pods.
func memberListings() []listing {
	sys := client.InNamespace(v1alpha1.SystemNamespace)
	return []listing{
		{file: "nodes.yaml", list: &corev1.NodeList{}},
		{file: "clusterproperties.yaml", list: &aboutv1alpha1.ClusterPropertyList{}},
		{file: "fabrics.yaml", list: &v1alpha1.FabricList{}},
		{file: v1alpha1.SystemNamespace + "/pods.yaml", list: &corev1.PodList{}, opts: []client.ListOption{sys}},
		{file: v1alpha1.SystemNamespace + "/events.yaml", list: &corev1.EventList{}, opts: []client.ListOption{sys}},
		{file: v1alpha1.SystemNamespace + "/deployments.yaml", list: &appsv1.DeploymentList{}, opts: []client.ListOption{sys}},
		{file: v1alpha1.SystemNamespace + "/daemonsets.yaml", list: &appsv1.DaemonSetList{}, opts: []client.ListOption{sys}},
		{file: v1alpha1.SystemNamespace + "/services.yaml", list: &corev1.ServiceList{}, opts: []client.ListOption{sys}},
		{file: v1alpha1.SystemNamespace + "/endpointslices.yaml", list: &discoveryv1.EndpointSliceList{}, opts: []client.ListOption{sys}},
		{file: v1alpha1.SystemNamespace + "/configmaps.yaml", list: &corev1.ConfigMapList{}, opts: []client.ListOption{sys}},
		{file: v1alpha1.SystemNamespace + "/leases.yaml", list: &coordinationv1.LeaseList{}, opts: []client.ListOption{sys}},
		{file: "mcs/serviceexports.yaml", list: &mcsv1beta1.ServiceExportList{}},
		{file: "mcs/serviceimports.yaml", list: &mcsv1beta1.ServiceImportList{}},
		{file: "mcs/endpointslices-imported.yaml", list: &discoveryv1.EndpointSliceList{}, opts: []client.ListOption{client.HasLabels{mcsServiceNameLabel}}},
		{file: "kube-system/dns-pods.yaml", list: &corev1.PodList{}, opts: []client.ListOption{client.InNamespace(metav1.NamespaceSystem), kubeDNSSelector}},
	}
}

// hubListings are what gather takes from the hub namespace: everything the clusters share
// there (Clusters, Peers, heartbeat and election Leases, CIDR claims, the exported services'
// records and EndpointSlices), and its pods and events where the access allows.
func hubListings(ns string) []listing {
	in := client.InNamespace(ns)
	return []listing{
		{file: "clusters.yaml", list: &v1alpha1.ClusterList{}, opts: []client.ListOption{in}},
		{file: "peers.yaml", list: &v1alpha1.PeerList{}, opts: []client.ListOption{in}},
		{file: "leases.yaml", list: &coordinationv1.LeaseList{}, opts: []client.ListOption{in}},
		{file: "configmaps.yaml", list: &corev1.ConfigMapList{}, opts: []client.ListOption{in}},
		{file: "serviceimports.yaml", list: &mcsv1beta1.ServiceImportList{}, opts: []client.ListOption{in}},
		{file: "endpointslices.yaml", list: &discoveryv1.EndpointSliceList{}, opts: []client.ListOption{in}},
		{file: "pods.yaml", list: &corev1.PodList{}, opts: []client.ListOption{in}},
		{file: "events.yaml", list: &corev1.EventList{}, opts: []client.ListOption{in}},
	}
}

// singles are objects read by name: the cluster DNS and kube-proxy configurations.
var singles = []struct {
	file string
	key  client.ObjectKey
}{
	{"kube-system/configmap-coredns.yaml", client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "coredns"}},
	{"kube-system/configmap-kube-proxy.yaml", client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "kube-proxy"}},
}

func (s *source) gatherMember(ctx context.Context, opts Options, a *archive) {
	var wg sync.WaitGroup
	for _, l := range memberListings() {
		wg.Go(func() { s.list(ctx, a, l) })
	}
	for _, one := range singles {
		wg.Go(func() {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
			if err := s.c.Get(ctx, one.key, u); err != nil {
				a.skip(describe(s, "ConfigMap "+one.key.String()), err)
				return
			}
			a.add(s.dir+one.file, objectsYAML(u.Object))
		})
	}
	wg.Go(func() { s.exported(ctx, a) })
	wg.Go(func() { s.logs(ctx, opts, a, client.InNamespace(v1alpha1.SystemNamespace)) })
	wg.Go(func() { s.logs(ctx, opts, a, client.InNamespace(metav1.NamespaceSystem), kubeDNSSelector) })
	wg.Wait()
}

func (s *source) gatherHub(ctx context.Context, opts Options, a *archive) {
	var wg sync.WaitGroup
	for _, l := range hubListings(s.hubNamespace) {
		wg.Go(func() { s.list(ctx, a, l) })
	}
	wg.Go(func() { s.logs(ctx, opts, a, client.InNamespace(s.hubNamespace)) })
	wg.Wait()
}

// list writes one listing's objects, or says in the index why it could not.
func (s *source) list(ctx context.Context, a *archive, l listing) {
	items, err := s.listObjects(ctx, l.list, l.opts...)
	if err != nil {
		a.skip(describe(s, l.file), explain(err))
		return
	}
	a.add(s.dir+l.file, objectsYAML(items...))
}

func (s *source) listObjects(ctx context.Context, typed client.ObjectList, opts ...client.ListOption) ([]map[string]any, error) {
	gvk, err := apiutil.GVKForObject(typed, kube.Scheme)
	if err != nil {
		return nil, err
	}
	u := &unstructured.UnstructuredList{}
	u.SetGroupVersionKind(gvk)
	if err := s.c.List(ctx, u, opts...); err != nil {
		return nil, err
	}
	items := make([]map[string]any, len(u.Items))
	for i := range u.Items {
		items[i] = u.Items[i].Object
	}
	return items, nil
}

// exported writes, for every ServiceExport, the exported Service and its EndpointSlices:
// what the cluster publishes to the hub is computed from them.
func (s *source) exported(ctx context.Context, a *archive) {
	exports := &mcsv1beta1.ServiceExportList{}
	if err := s.c.List(ctx, exports); err != nil {
		a.skip(describe(s, "exported services"), explain(err))
		return
	}
	var services, slices []map[string]any
	for _, ex := range exports.Items {
		svc := &unstructured.Unstructured{}
		svc.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Service"))
		switch err := s.c.Get(ctx, client.ObjectKey{Namespace: ex.Namespace, Name: ex.Name}, svc); {
		case err == nil:
			services = append(services, svc.Object)
		case !apierrors.IsNotFound(err):
			a.skip(describe(s, "Service "+ex.Namespace+"/"+ex.Name), err)
		}
		items, err := s.listObjects(ctx, &discoveryv1.EndpointSliceList{}, client.InNamespace(ex.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: ex.Name})
		if err != nil {
			a.skip(describe(s, "EndpointSlices of "+ex.Namespace+"/"+ex.Name), err)
			continue
		}
		slices = append(slices, items...)
	}
	a.add(s.dir+"mcs/services-exported.yaml", objectsYAML(services...))
	a.add(s.dir+"mcs/endpointslices-exported.yaml", objectsYAML(slices...))
}

// logs writes the logs of every container of the selected pods, and of the previous run of
// each container that restarted, at most opts.LogLimitBytes each.
func (s *source) logs(ctx context.Context, opts Options, a *archive, sel ...client.ListOption) {
	pods := &corev1.PodList{}
	if err := s.c.List(ctx, pods, sel...); err != nil {
		a.skip(describe(s, "pod logs"), explain(err))
		return
	}
	for _, pod := range pods.Items {
		restarts := map[string]int32{}
		for _, st := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
			restarts[st.Name] = st.RestartCount
		}
		var containers []string
		for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
			containers = append(containers, c.Name)
		}
		for _, c := range containers {
			base := fmt.Sprintf("%slogs/%s/%s/%s", s.dir, pod.Namespace, pod.Name, c)
			s.log(ctx, opts, a, pod, c, false, base+".log")
			if restarts[c] > 0 {
				s.log(ctx, opts, a, pod, c, true, base+".previous.log")
			}
		}
	}
}

func (s *source) log(ctx context.Context, opts Options, a *archive, pod corev1.Pod, container string, previous bool, file string) {
	ctx, cancel := context.WithTimeout(ctx, logTimeout)
	defer cancel()
	limit := opts.LogLimitBytes
	rc, err := s.cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: container, Previous: previous, LimitBytes: &limit}).Stream(ctx)
	if err != nil {
		a.skip(describe(s, "log "+file), err)
		return
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, limit))
	if err != nil {
		a.skip(describe(s, "log "+file), err)
		return
	}
	a.add(file, data)
}

// explain turns the two common reasons an object cannot be listed into what they mean here.
func explain(err error) error {
	switch {
	case meta.IsNoMatchError(err):
		return fmt.Errorf("the API server does not serve this kind (its CRD is not installed): %w", err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("the access used may not read it (the hub's own kubeconfig, --hub-kubeconfig, may): %w", err)
	}
	return err
}

// objectsYAML writes objects, redacted, as a v1 List.
func objectsYAML(objects ...map[string]any) []byte {
	items := make([]any, len(objects))
	for i, o := range objects {
		redactObject(o)
		items[i] = o
	}
	b, err := yaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		// Unstructured objects are JSON values, so this cannot happen; say so in the file.
		return []byte("# " + errors.Join(errors.New("could not write the objects as YAML"), err).Error() + "\n")
	}
	return b
}
