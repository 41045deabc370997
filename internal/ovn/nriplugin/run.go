package nriplugin

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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
	// Socket is containerd's NRI socket; "" means DefaultSocket.
	Socket string
	// PluginIdx orders the plugin among the node's; "" means DefaultPluginIdx.
	PluginIdx string
	Log       logr.Logger
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
	cs, err := kubernetes.NewForConfig(o.Kube)
	if err != nil {
		return fmt.Errorf("the cluster's client: %w", err)
	}
	p, err := New(o.Config, apiPods{cs}, Podport{}, o.Log)
	if err != nil {
		return fmt.Errorf("NRI plugin: %w", err)
	}
	for {
		if err := Serve(ctx, p, o.Socket, o.PluginIdx, o.Log); ctx.Err() == nil {
			o.Log.Error(err, "Lost the NRI connection; registering again", "socket", o.Socket)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(reconnectDelay):
		}
	}
}

// Serve registers p with the NRI socket and serves it until the connection ends or ctx does.
func Serve(ctx context.Context, p *Plugin, socket, idx string, log logr.Logger) error {
	s, err := stub.New(p,
		stub.WithPluginName(PluginName), stub.WithPluginIdx(idx), stub.WithSocketPath(socket),
		// A pod whose plugin call failed or timed out does not start without net1, and one
		// slow request does not unregister the plugin.
		stub.WithFailurePolicy(&api.FailurePolicy{FailRequest: true, KeepConnected: true}),
		stub.WithLogger(logger{log: log.WithName("nri")}))
	if err != nil {
		return fmt.Errorf("creating the NRI plugin: %w", err)
	}
	if err := s.Run(ctx); err != nil {
		return fmt.Errorf("NRI plugin at %s: %w", socket, err)
	}
	return nil
}

// apiPods reads pods straight from the API server: the plugin reads one pod per sandbox, and
// must see the ovnmaster's annotation as soon as it is written.
type apiPods struct{ cs kubernetes.Interface }

func (a apiPods) Get(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return a.cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

// logger sends the NRI stub's logs to a logr.Logger.
type logger struct{ log logr.Logger }

func (l logger) Debugf(_ context.Context, format string, args ...any) {
	l.log.V(1).Info(fmt.Sprintf(format, args...))
}

func (l logger) Infof(_ context.Context, format string, args ...any) {
	l.log.V(1).Info(fmt.Sprintf(format, args...))
}

func (l logger) Warnf(_ context.Context, format string, args ...any) {
	l.log.Info(fmt.Sprintf(format, args...))
}

func (l logger) Errorf(_ context.Context, format string, args ...any) {
	l.log.Error(nil, fmt.Sprintf(format, args...))
}
