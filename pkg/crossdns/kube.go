package crossdns

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	discoveryclient "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"
)

// byService indexes EndpointSlices by "<namespace>/<multicluster service name>".
const byService = "crossdns-service"

// Kube is a Source fed by informers on the cluster's ServiceImports and on the EndpointSlices
// labelled as imported (multicluster.kubernetes.io/service-name and source-cluster).
type Kube struct {
	*Index
	mcs    mcsinformers.SharedInformerFactory
	slices cache.SharedIndexInformer
	// synced reports whether both informers have delivered their initial lists to our
	// handlers, i.e. the index holds the whole cluster's state.
	synced []cache.InformerSynced

	mu     sync.Mutex // serialises index updates: each reads the listers, then writes
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
}

// RESTConfig returns the client configuration for kubeconfig, or the in-cluster one when
// kubeconfig is empty.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no kubeconfig given and not running in a cluster (%w); add `kubeconfig PATH` to the crossdns block", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w; check the path in the crossdns block", kubeconfig, err)
	}
	return cfg, nil
}

// NewKube returns a source for ix that watches the cluster cfg points at. It does nothing until
// Start.
func NewKube(cfg *rest.Config, ix *Index) (*Kube, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "crossdns"
	// The typed discovery client alone, not the whole clientset: every API group's client
	// would add tens of megabytes to every CoreDNS build that includes the plugin.
	dc, err := discoveryclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the EndpointSlice client: %w", err)
	}
	mc, err := mcsclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the MCS client: %w", err)
	}
	k := &Kube{Index: ix}
	k.ctx, k.cancel = context.WithCancel(context.Background())

	// Only imported slices: the cluster's own slices are many and none of our business.
	svcReq, err := labels.NewRequirement(mcsv1beta1.LabelServiceName, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	srcReq, err := labels.NewRequirement(mcsv1beta1.LabelSourceCluster, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	selector := labels.NewSelector().Add(*svcReq, *srcReq).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return dc.EndpointSlices(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return dc.EndpointSlices(metav1.NamespaceAll).Watch(ctx, o)
		},
	}
	k.slices = cache.NewSharedIndexInformerWithOptions(lw, &discoveryv1.EndpointSlice{}, cache.SharedIndexInformerOptions{
		Indexers: cache.Indexers{byService: sliceServiceKeys},
	})
	if err := k.slices.SetTransform(stripManagedFields); err != nil {
		return nil, fmt.Errorf("watching EndpointSlices: %w", err)
	}
	k.mcs = mcsinformers.NewSharedInformerFactoryWithOptions(mc, 0,
		mcsinformers.WithTransform(stripManagedFields))

	sliceInf := k.slices
	siInf := k.mcs.Multicluster().V1beta1().ServiceImports().Informer()

	sliceReg, err := sliceInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.sliceChanged(nil, obj) },
		UpdateFunc: func(old, obj any) { k.sliceChanged(old, obj) },
		DeleteFunc: func(obj any) { k.sliceChanged(nil, obj) },
	})
	if err != nil {
		return nil, fmt.Errorf("watching EndpointSlices: %w", err)
	}
	siReg, err := siInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    k.importChanged,
		UpdateFunc: func(_, obj any) { k.importChanged(obj) },
		DeleteFunc: k.importChanged,
	})
	if err != nil {
		return nil, fmt.Errorf("watching ServiceImports: %w", err)
	}
	k.synced = []cache.InformerSynced{sliceReg.HasSynced, siReg.HasSynced}
	return k, nil
}

// Start starts the informers; it returns at once (OnStartup must not block the server).
func (k *Kube) Start() error {
	go k.slices.RunWithContext(k.ctx)
	k.mcs.Start(k.ctx.Done())
	return nil
}

// Stop stops the informers. Safe to call more than once.
func (k *Kube) Stop() error {
	k.once.Do(func() {
		k.cancel()
		k.mcs.Shutdown()
	})
	return nil
}

// HasSynced implements Source.
func (k *Kube) HasSynced() bool {
	for _, s := range k.synced {
		if !s() {
			return false
		}
	}
	return true
}

// WaitForSync blocks until HasSynced or timeout, for callers that want to serve only then.
func (k *Kube) WaitForSync(timeout time.Duration) bool {
	deadline := time.After(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !k.HasSynced() {
		select {
		case <-deadline:
			return false
		case <-tick.C:
		}
	}
	return true
}

func (k *Kube) importChanged(obj any) {
	if key, ok := objectKey(obj); ok {
		k.refresh(key)
	}
}

// sliceChanged refreshes the service of obj, and that of old when the slice moved from one
// service to another (its label changed).
func (k *Kube) sliceChanged(old, obj any) {
	keys, _ := sliceServiceKeys(obj)
	if old != nil {
		keys, _ = sliceServiceKeysOf(old, keys)
	}
	for _, key := range keys {
		ns, name, _ := strings.Cut(key, "/")
		k.refresh(types.NamespacedName{Namespace: ns, Name: name})
	}
}

// refresh recomputes the records of key from the listers. Updates are serialised so that a
// refresh that read older state never overwrites one that read newer state.
func (k *Kube) refresh(key types.NamespacedName) {
	start := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	si, err := k.mcs.Multicluster().V1beta1().ServiceImports().Lister().ServiceImports(key.Namespace).Get(key.Name)
	if err != nil {
		si = nil // not found: the lister has nothing else to say
	}
	var eps []*discoveryv1.EndpointSlice
	if si != nil && answeredByEndpoints(si) {
		objs, _ := k.slices.GetIndexer().ByIndex(byService, key.String())
		for _, o := range objs {
			if s, ok := o.(*discoveryv1.EndpointSlice); ok {
				eps = append(eps, s)
			}
		}
	}
	k.Set(key, si, eps)
	services, addrs := k.Size()
	indexServices.Set(float64(services))
	indexEndpoints.Set(float64(addrs))
	indexLag.Observe(time.Since(start).Seconds())
}

func objectKey(obj any) (types.NamespacedName, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	si, ok := obj.(*mcsv1beta1.ServiceImport)
	if !ok {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: si.Namespace, Name: si.Name}, true
}

// sliceServiceKeys is the byService index function.
func sliceServiceKeys(obj any) ([]string, error) {
	return sliceServiceKeysOf(obj, nil)
}

func sliceServiceKeysOf(obj any, keys []string) ([]string, error) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return keys, nil
	}
	name := s.Labels[mcsv1beta1.LabelServiceName]
	if name == "" {
		return keys, nil
	}
	key := s.Namespace + "/" + name
	for _, k := range keys {
		if k == key {
			return keys, nil
		}
	}
	return append(keys, key), nil
}

// stripManagedFields drops what the index never reads and a large cluster would otherwise keep
// in memory for every object.
func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
