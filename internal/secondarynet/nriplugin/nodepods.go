package nriplugin

import (
	"context"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// nodePods is Pods from a watch of the pods bound to one node. The scheduler binds a pod before
// the kubelet starts its sandbox, so the pod is usually in the cache by then, often with the
// ovnmaster's address already, and waiting for the address is a wakeup on the watch event
// rather than reads of the API server. Polling cost one read per waiting pod every
// pollInterval: a burst of sandboxes on a node ran into the client's rate limit, and the
// RunPodSandbox hook's p99 with it (docs/benchmarks.md).
//
// A pod not in the cache yet (the watch lags the kubelet, or has not listed yet) is read from
// the API server, once per wakeup.
type nodePods struct {
	api      apiPods
	informer cache.SharedIndexInformer

	mu sync.Mutex
	// waiting holds, by namespace/name, the channels to close at the pod's next event.
	waiting map[string][]chan struct{}
}

// newNodePods starts watching the pods of node until ctx ends.
func newNodePods(ctx context.Context, cs kubernetes.Interface, node string) (*nodePods, error) {
	lw := cache.NewFilteredListWatchFromClient(cs.CoreV1().RESTClient(), "pods", metav1.NamespaceAll, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	})
	informer := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	// Only the metadata and the spec fields waitAddress reads are of use here.
	if err := informer.SetTransform(func(obj any) (any, error) {
		if pod, ok := obj.(*corev1.Pod); ok {
			pod.ManagedFields = nil
			pod.Spec = corev1.PodSpec{NodeName: pod.Spec.NodeName, HostNetwork: pod.Spec.HostNetwork}
			pod.Status = corev1.PodStatus{}
		}
		return obj, nil
	}); err != nil {
		return nil, err
	}
	p := &nodePods{api: apiPods{cs}, informer: informer, waiting: map[string][]chan struct{}{}}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    p.wake,
		UpdateFunc: func(_, obj any) { p.wake(obj) },
		DeleteFunc: p.wake,
	}); err != nil {
		return nil, err
	}
	go informer.RunWithContext(ctx)
	return p, nil
}

// Get returns the pod as last seen on the watch, or read from the API server if it has not
// been seen. The cached pod is shared: callers must not change it.
func (p *nodePods) Get(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	obj, found, err := p.informer.GetStore().GetByKey(namespace + "/" + name)
	if err == nil && found {
		if pod, ok := obj.(*corev1.Pod); ok {
			return pod, nil
		}
	}
	return p.api.Get(ctx, namespace, name)
}

// Changed returns a channel closed at the pod's next event on the watch, and a func to call
// when it is no longer waited for. Asked for before a Get, it misses no change made after that
// Get's answer.
func (p *nodePods) Changed(namespace, name string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	key := namespace + "/" + name
	p.mu.Lock()
	p.waiting[key] = append(p.waiting[key], ch)
	p.mu.Unlock()
	return ch, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.waiting[key] = slices.DeleteFunc(p.waiting[key], func(c chan struct{}) bool { return c == ch })
		if len(p.waiting[key]) == 0 {
			delete(p.waiting, key)
		}
	}
}

func (p *nodePods) wake(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	p.mu.Lock()
	chans := p.waiting[key]
	delete(p.waiting, key)
	p.mu.Unlock()
	for _, ch := range chans {
		close(ch)
	}
}
