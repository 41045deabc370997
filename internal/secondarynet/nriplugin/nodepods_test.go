package nriplugin

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/internal/testenv"
)

// podReads counts the requests that read one pod by name.
type podReads struct {
	rt    http.RoundTripper
	count atomic.Int32
}

func (c *podReads) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/pods/") && r.URL.Query().Get("watch") == "" {
		c.count.Add(1)
	}
	return c.rt.RoundTrip(r)
}

// TestWatchedPodsWaitForTheAddress runs the plugin's wait for a pod's address on a watch of
// its node's pods, against a real API server: the address written a second after the sandbox
// started reaches the plugin without a single read of the pod (polling read it about twenty
// times), and a pod the watch does not hold (another node's, or one it has not seen yet) is
// read from the API server.
func TestWatchedPodsWaitForTheAddress(t *testing.T) {
	const node = "node-a"
	env := testenv.ControlPlanes(t, "east")
	admin := testenv.Client(t, env.Cluster("east").RESTConfig())
	cfg := rest.CopyConfig(env.Cluster("east").RESTConfig())
	reads := &podReads{}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { reads.rt = rt; return reads }
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The controller manager makes it too, perhaps not yet.
	if err := admin.Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "default"}}); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	newPod := func(name, nodeName string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c"}},
				AutomountServiceAccountToken: new(false)},
		}
		if err := admin.Create(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	here, elsewhere := newPod("web", node), newPod("db", "node-b")

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pods, err := newNodePods(ctx, cs, node)
	if err != nil {
		t.Fatal(err)
	}
	if !cache.WaitForCacheSync(ctx.Done(), pods.informer.HasSynced) {
		t.Fatal("the watch of the node's pods did not sync")
	}
	cfgWait := testConfig
	cfgWait.AddressWait = 10 * time.Second
	p, err := New(cfgWait, pods, &fakeInterfaces{}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	sandboxOf := func(pod *corev1.Pod) *api.PodSandbox {
		sb := sandbox(pod.Namespace, nil, true)
		sb.Name, sb.Uid = pod.Name, string(pod.UID)
		return sb
	}

	go func() {
		time.Sleep(time.Second)
		patched := here.DeepCopy()
		patched.Annotations = withAddress("10.112.0.5")
		if err := admin.Patch(context.Background(), patched, client.MergeFrom(here)); err != nil {
			t.Error(err)
		}
	}()
	before := reads.count.Load()
	status, err := p.waitAddress(t.Context(), sandboxOf(here))
	if err != nil {
		t.Fatal(err)
	}
	if status.status.IPs[0] != "10.112.0.5" {
		t.Errorf("address %v, want 10.112.0.5", status.status.IPs)
	}
	// The watch's recheck may read the cache; a read of the API server would be counted.
	if n := reads.count.Load() - before; n != 0 {
		t.Errorf("the wait read the pod from the API server %d times; the watch should have told", n)
	}
	if len(pods.waiting) != 0 {
		t.Errorf("wakeups left behind after the wait: %v", pods.waiting)
	}

	before = reads.count.Load()
	if _, err := pods.Get(t.Context(), elsewhere.Namespace, elsewhere.Name); err != nil {
		t.Fatal(err)
	}
	if n := reads.count.Load() - before; n != 1 {
		t.Errorf("another node's pod was read %d times from the API server, want once (the watch holds only this node's)", n)
	}
}
