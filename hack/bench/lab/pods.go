package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/octopus-mcs/octopus/internal/lab/images"
)

// podKind is one pod shape whose start-to-Ready latency is measured.
type podKind struct {
	name string
	pod  func(name string) *corev1.Pod
}

// echoPort is octopus-echo's default HTTP port, which the readiness probe dials.
const echoPort = 8080

var podKinds = []podKind{
	{name: "busybox sleep (no probe)", pod: func(name string) *corev1.Pod {
		return benchPod(name, corev1.Container{Name: "sleep", Image: "busybox", Command: []string{"sleep", "3600"},
			ImagePullPolicy: corev1.PullIfNotPresent})
	}},
	{name: "octopus-echo, TCP readiness probe", pod: func(name string) *corev1.Pod {
		return benchPod(name, corev1.Container{Name: "echo", Image: images.EchoImage, ImagePullPolicy: corev1.PullIfNotPresent,
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: echoPort}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
				TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(echoPort)}}}})
	}},
}

// benchPod makes a pod of container c. Its image must be pulled only if not present: the
// lab's real nodes have their images imported and no registry to pull from (a :latest image
// defaults to pulling always).
func benchPod(name string, c corev1.Container) *corev1.Pod {
	grace := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "bench"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{c}, TerminationGracePeriodSeconds: &grace},
	}
}

// podTimes is what a watch saw of one pod, as offsets from its Create call.
type podTimes struct {
	scheduled, addressed, running, ready time.Duration
}

// podSightings records the first time a watch saw each milestone of each pod.
type podSightings struct {
	mu      sync.Mutex
	created map[string]time.Time
	seen    map[string]*podTimes
	ready   map[string]chan struct{}
}

func newPodSightings() *podSightings {
	return &podSightings{created: map[string]time.Time{}, seen: map[string]*podTimes{}, ready: map[string]chan struct{}{}}
}

// expect registers a pod about to be created; its milestones count from now.
func (s *podSightings) expect(name string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.created[name] = time.Now()
	s.seen[name] = &podTimes{}
	ch := make(chan struct{})
	s.ready[name] = ch
	return ch
}

func (s *podSightings) observe(obj any) {
	now := time.Now()
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.seen[p.Name]
	if !ok {
		return
	}
	since := now.Sub(s.created[p.Name])
	mark := func(d *time.Duration, cond bool) {
		if cond && *d == 0 {
			*d = since
		}
	}
	mark(&t.scheduled, p.Spec.NodeName != "")
	mark(&t.addressed, p.Status.PodIP != "")
	running := false
	for _, c := range p.Status.ContainerStatuses {
		running = running || c.State.Running != nil
	}
	mark(&t.running, running)
	isReady := false
	for _, c := range p.Status.Conditions {
		isReady = isReady || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
	}
	if isReady && t.ready == 0 {
		t.ready = since
		close(s.ready[p.Name])
	}
}

func (s *podSightings) times(name string) podTimes {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *s.seen[name]
}

// podLatencies creates n pods of kind k one after another in namespace ns and returns, for
// each, the times from its Create call until a watch saw it scheduled, with a pod IP, with a
// running container and Ready. Creating them one at a time measures the latency of one pod,
// not the queueing of many.
func podLatencies(ctx context.Context, cs kubernetes.Interface, ns string, k podKind, prefix string, n int, timeout time.Duration) ([]podTimes, error) {
	if err := ensureNamespace(ctx, cs, ns); err != nil {
		return nil, err
	}
	seen := newPodSightings()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: seen.observe, UpdateFunc: func(_, o any) { seen.observe(o) },
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	// Shutdown waits for the informers, which stop only once ctx is cancelled.
	defer func() { cancel(); factory.Shutdown() }()
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("the pod watch in %s did not sync", ns)
	}
	out := make([]podTimes, 0, n)
	for i := range n {
		name := fmt.Sprintf("%s-%02d", prefix, i)
		ready := seen.expect(name)
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, k.pod(name), metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("creating pod %s/%s: %w", ns, name, err)
		}
		select {
		case <-ready:
		case <-time.After(timeout):
			p, _ := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			return nil, fmt.Errorf("pod %s/%s not Ready within %s (status %+v); see the kubelet logs under the lab dir's logs/", ns, name, timeout, statusOf(p))
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		out = append(out, seen.times(name))
	}
	return out, nil
}

func statusOf(p *corev1.Pod) any {
	if p == nil {
		return nil
	}
	return p.Status
}

// ensureNamespace creates ns and waits for its default ServiceAccount, without which the
// ServiceAccount admission plugin refuses pods.
func ensureNamespace(ctx context.Context, cs kubernetes.Interface, ns string) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the default ServiceAccount of %s (created by kube-controller-manager; see its log in the lab dir): %w", ns, err)
	}
	return nil
}
