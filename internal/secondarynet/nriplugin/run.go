package nriplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/octopus-mcs/octopus/internal/metricsserver"
	"github.com/octopus-mcs/octopus/internal/nrilog"
)

// Plugin registration with containerd's NRI.
const (
	// PluginName is the name the plugin registers under.
	PluginName = "octopus-secondary"
	// DefaultPluginIdx orders it among the node's plugins: after the ones that adjust
	// containers' resources, which do not care about interfaces.
	DefaultPluginIdx = "50"
	// DefaultSocket is containerd's NRI socket.
	DefaultSocket = "/var/run/nri/nri.sock"
)

// reconnectDelay paces reconnections to a runtime that went away (a containerd restart).
const reconnectDelay = time.Second

// Options configure Run.
type Options struct {
	Config
	// Kube is the client configuration of the cluster the pods are in (required).
	Kube *rest.Config
	// NodeName is the node's name: the plugin watches the node's pods and waits for a pod's
	// address on that watch (nodePods). Optional: without it, it reads the pod from the API
	// server every pollInterval while it waits.
	NodeName string
	// Socket is containerd's NRI socket; "" means DefaultSocket.
	Socket string
	// PluginIdx orders the plugin among the node's; "" means DefaultPluginIdx.
	PluginIdx string
	Log       logr.Logger
	// MetricsListener is where Run serves controller-runtime's registry (the hook's
	// histograms, the API client's, Go and process) at /metrics until it returns; Run closes
	// it. Optional: without it there is no metrics endpoint.
	MetricsListener net.Listener
	// HealthListener is where Run answers /healthz and /readyz (registered with containerd)
	// until it returns; Run closes it. Optional.
	HealthListener net.Listener
	// Interfaces makes the pods' interfaces; nil means Podport, the node's (tests pass a fake).
	Interfaces Interfaces
}

// Run serves NRI until ctx ends, registering again whenever containerd restarts: pods
// created while it is away would otherwise start without net1 (or, since the plugin
// registers with a failure policy, not at all while it is unregistered and containerd requires it).
func Run(ctx context.Context, o Options) error {
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	if o.Socket == "" {
		o.Socket = DefaultSocket
	}
	if o.PluginIdx == "" {
		o.PluginIdx = DefaultPluginIdx
	}
	if o.Interfaces == nil {
		o.Interfaces = Podport{}
	}
	ls := metricsserver.Listeners{Metrics: o.MetricsListener, Health: o.HealthListener}
	p, err := newForRun(ctx, o)
	if err != nil {
		ls.Close()
		return err
	}
	defer ls.ServeBoth(ctx, ctrlmetrics.Registry, p.HealthHandler(), o.Log)()
	go func() {
		tick := time.NewTicker(DefaultSweepInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				p.SweepStopped(ctx)
			}
		}
	}()
	for {
		p.registration.set(errRegistering)
		reg, err := Register(ctx, p, o.Socket, o.PluginIdx, o.Log)
		if err == nil {
			select {
			case <-ctx.Done():
				reg.Stop()
				return nil
			case <-reg.Done():
				err = errors.New("containerd closed the connection")
			}
		}
		p.registration.set(fmt.Errorf("not registered with containerd's NRI: %w", err))
		o.Log.Error(err, "No NRI connection; registering again", "socket", o.Socket, "in", reconnectDelay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(reconnectDelay):
		}
	}
}

// newForRun is Run's plugin, with the process's metrics registered and, given the node's
// name, a watch of the node's pods until ctx ends.
func newForRun(ctx context.Context, o Options) (*Plugin, error) {
	if err := registerMetrics(); err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(o.Kube)
	if err != nil {
		return nil, fmt.Errorf("the cluster's client: %w", err)
	}
	var pods Pods = apiPods{cs}
	if o.NodeName != "" {
		if pods, err = newNodePods(ctx, cs, o.NodeName); err != nil {
			return nil, fmt.Errorf("watching the pods of node %s: %w", o.NodeName, err)
		}
	}
	p, err := New(o.Config, pods, o.Interfaces, o.Log)
	if err != nil {
		return nil, fmt.Errorf("NRI plugin: %w", err)
	}
	p.metrics = processMetrics
	return p, nil
}

// Registration is the plugin's connection to containerd.
type Registration struct {
	stub stub.Stub
	done chan struct{}
}

// Done is closed when the connection ends.
func (r *Registration) Done() <-chan struct{} { return r.done }

// Stop closes the connection.
func (r *Registration) Stop() { r.stub.Stop() }

// Register registers p with containerd's NRI socket and returns once containerd has it: the
// sandboxes it starts from then on go through p.
func Register(ctx context.Context, p *Plugin, socket, idx string, log logr.Logger) (*Registration, error) {
	r := &Registration{done: make(chan struct{})}
	var once sync.Once
	s, err := stub.New(p,
		stub.WithPluginName(PluginName), stub.WithPluginIdx(idx), stub.WithSocketPath(socket),
		// A pod whose plugin call failed or timed out does not start without net1, and one
		// slow request does not unregister the plugin.
		stub.WithFailurePolicy(&api.FailurePolicy{FailRequest: true, KeepConnected: true}),
		stub.WithOnClose(func() { once.Do(func() { close(r.done) }) }),
		stub.WithLogger(nrilog.New(log.WithName("nri"))))
	if err != nil {
		return nil, fmt.Errorf("creating the NRI plugin: %w", err)
	}
	r.stub = s
	// The connection lives until containerd closes it or Stop: not bound to the caller's
	// context, which may only bound the registration.
	if err := s.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, fmt.Errorf("registering the NRI plugin at %s: %w", socket, err)
	}
	return r, nil
}

// NewAPIPods reads pods straight from the API server through cs.
func NewAPIPods(cs kubernetes.Interface) Pods { return apiPods{cs} }

// apiPods reads pods straight from the API server: the plugin reads one pod per sandbox, and
// must see the ovnmaster's annotation as soon as it is written.
type apiPods struct{ cs kubernetes.Interface }

func (a apiPods) Get(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return a.cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}
