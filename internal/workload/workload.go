// Package workload is what the CLI's commands that run temporary pods in joined clusters
// (`octopus verify`, `octopus bench`) share: connecting to each cluster and reading its ID,
// creating objects in a namespace of the command's own, waiting for pods, exec in them, and
// deleting the namespace again. Only standard Kubernetes APIs and the About API's cluster ID.
package workload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "github.com/octopus-mcs/octopus/api/about/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/progress"
)

// Cluster is one cluster to run in.
type Cluster struct {
	// Config reaches the cluster's API server. Required.
	Config *rest.Config
	// Source says where Config came from (a kubeconfig path), for messages. Optional.
	Source string
}

// Member is a connected cluster.
type Member struct {
	// ID is the cluster ID (the About API's cluster.clusterset.k8s.io ClusterProperty).
	ID     string
	Source string
	Config *rest.Config
	Client client.Client
	CS     kubernetes.Interface
	// created is set once the command's namespace exists here, so that Cleanup deletes
	// only what this run made.
	created bool
}

// Connect builds the clients of each cluster and reads its ID, which joining sets: a cluster
// without one has not joined, and the error says to run `octopus join`.
func Connect(ctx context.Context, clusters []Cluster) ([]*Member, error) {
	seen := map[string]string{}
	var members []*Member
	for i, cl := range clusters {
		src := cl.Source
		if src == "" {
			src = fmt.Sprintf("cluster #%d", i+1)
		}
		if cl.Config == nil {
			return nil, fmt.Errorf("%s: no REST config", src)
		}
		c, err := client.New(cl.Config, client.Options{Scheme: kube.Scheme})
		if err != nil {
			return nil, fmt.Errorf("connecting to %s (%s): %w", src, cl.Config.Host, err)
		}
		cs, err := kubernetes.NewForConfig(cl.Config)
		if err != nil {
			return nil, fmt.Errorf("connecting to %s (%s): %w", src, cl.Config.Host, err)
		}
		prop := &aboutv1alpha1.ClusterProperty{}
		if err := c.Get(ctx, client.ObjectKey{Name: aboutv1alpha1.ClusterIDProperty}, prop); err != nil {
			// Without the About API's CRD the lookup fails in discovery ("no matches for
			// about.k8s.io/v1alpha1"), before any NotFound.
			if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) || strings.Contains(err.Error(), "no matches for") {
				return nil, fmt.Errorf("%s (%s) has no cluster ID (ClusterProperty %s): it has not joined a cluster set; run `octopus join` there first",
					src, cl.Config.Host, aboutv1alpha1.ClusterIDProperty)
			}
			return nil, fmt.Errorf("reading the cluster ID of %s (%s): %w", src, cl.Config.Host, err)
		}
		id := prop.Spec.Value
		if other, dup := seen[id]; dup {
			return nil, fmt.Errorf("%s and %s are the same cluster (%s): pass each cluster once", other, src, id)
		}
		seen[id] = src
		members = append(members, &Member{ID: id, Source: src, Config: cl.Config, Client: c, CS: cs})
	}
	return members, nil
}

// CreateAll creates objs in m in order; the first must be the command's namespace, which must
// not exist yet (flag names the option that picks another). Cleanup deletes it afterwards.
func CreateAll(ctx context.Context, m *Member, objs []client.Object, timeout time.Duration, command, flag string) error {
	for i, obj := range objs {
		if err := create(ctx, m, obj, timeout); err != nil {
			if i == 0 && apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("namespace %s already exists in %s: pass another %s, or delete it if a killed %s left it", obj.GetName(), m.ID, flag, command)
			}
			return fmt.Errorf("creating %T %s in %s: %w", obj, obj.GetName(), m.ID, err)
		}
		if i == 0 {
			m.created = true
		}
	}
	return nil
}

// create creates obj, retrying while the new namespace has no default ServiceAccount yet:
// until kube-controller-manager makes it, the ServiceAccount admission plugin refuses pods,
// and on a busy control plane that takes seconds.
func create(ctx context.Context, m *Member, obj client.Object, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := m.Client.Create(ctx, obj)
		if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "serviceaccount") {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (the namespace's default ServiceAccount never appeared: is kube-controller-manager running?)", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Cleanup deletes namespace ns wherever CreateAll created it, with a context of its own so
// that it also happens after Ctrl-C or the overall deadline.
func Cleanup(ctx context.Context, members []*Member, ns string, p *progress.Reporter) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var deleted []string
	for _, m := range members {
		if !m.created {
			continue
		}
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		err := m.Client.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if client.IgnoreNotFound(err) != nil {
			p.Step("Could not delete namespace %s in %s: %v (delete it with kubectl)", ns, m.ID, err)
			continue
		}
		deleted = append(deleted, m.ID)
	}
	if len(deleted) > 0 {
		p.Step("Deleted namespace %s in %s", ns, strings.Join(deleted, ", "))
	}
}

// ErrTimedOut is Poll's error when its timeout passes with f still waiting.
var ErrTimedOut = errors.New("timed out")

// Poll calls f every second until it returns true, ctx ends or timeout passes; every 10 s it
// prints f's account of what it is still waiting for. On failure it returns that account.
//
// The timeout bounds the waiting between rounds, not a round: f runs with ctx, so a round
// always finishes and its account is what the objects say, not the deadline that cut an API
// call short (on a loaded API server, or behind the client's rate limiter, the first round
// alone can outlast a short timeout).
func Poll(ctx context.Context, p *progress.Reporter, timeout time.Duration, f func(context.Context) (bool, string)) (string, error) {
	deadline := time.Now().Add(timeout)
	lastReport := time.Now()
	var pending string
	for {
		done, s := f(ctx)
		if done {
			return "", nil
		}
		if ctx.Err() != nil {
			// Interrupted: a round cut short accounts for the interruption, not the state.
			if pending == "" {
				pending = s
			}
			return pending, ctx.Err()
		}
		pending = s
		left := time.Until(deadline)
		if left <= 0 {
			return pending, fmt.Errorf("%w after %s", ErrTimedOut, timeout)
		}
		if time.Since(lastReport) >= 10*time.Second {
			p.Step("Still waiting for %s", pending)
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			return pending, ctx.Err()
		case <-time.After(min(time.Second, left)):
		}
	}
}

// Exec runs argv in pod ns/pod of m through the API server's exec subresource (WebSocket, as
// kubectl exec does) and returns its standard output. A non-zero exit is an error that
// carries the command's standard error. timeout bounds an exec that hangs.
func Exec(ctx context.Context, m *Member, ns, pod string, timeout time.Duration, argv ...string) (string, error) {
	req := m.CS.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: argv, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(m.Config, "GET", req.URL().String())
	if err != nil {
		return "", fmt.Errorf("exec in %s/%s: %w", m.ID, pod, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return stdout.String(), fmt.Errorf("%s: %w: %s", argv[0], err, msg)
	}
	return stdout.String(), nil
}

// CommandRan says whether an error of Exec is the command's own exit status: the command ran
// and failed. Any other error (the API server's, the kubelet's, the runtime's "failed to exec
// in container" under load) means it may never have started, and running it again is safe
// for a command that only measures.
func CommandRan(err error) bool {
	var exit utilexec.ExitError
	return errors.As(err, &exit)
}

// ReadyPod reads pod name in namespace of m: the pod when it is ready, else why not, as
// "<cluster>/<pod> (<reason>)" for a list of what is still awaited.
func ReadyPod(ctx context.Context, m *Member, namespace, name string) (*corev1.Pod, string) {
	pod := &corev1.Pod{}
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		return nil, fmt.Sprintf("%s/%s (%v)", m.ID, name, err)
	}
	if !PodReady(pod) {
		return nil, fmt.Sprintf("%s/%s (%s)", m.ID, name, PodState(pod))
	}
	return pod, ""
}

// PodReady says whether pod's Ready condition is True.
func PodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodState is a short account of why a pod is not ready: its phase and the reason a
// container waits (ImagePullBackOff, say).
func PodState(pod *corev1.Pod) string {
	s := string(pod.Status.Phase)
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			s += ": " + w.Reason
		}
	}
	if s == "" {
		s = "not scheduled"
	}
	return s
}

// FieldEnv is an environment variable set from one of the pod's fields (the downward API).
func FieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

// ImportIPs are the ClusterSet IPs of one ServiceImport: its primary one and, beside an IPv4
// primary, its IPv6 one (ClusterSetIPs); either invalid when absent.
type ImportIPs struct {
	Primary, IPv6 netip.Addr
}

// WaitImports waits until every member has imported, in namespace ns, every other member's
// Service serviceName(exporter ID) with a ClusterSet IP (and an IPv6 one too where
// wantIPv6(importer ID, exporter ID) says so; nil wants none), and returns the ClusterSet IPs
// by importing and then exporting cluster ID. A missing import is not an error: it returns
// what it found and says on p what it gave up on, so that only what needs the import fails.
// services names the Services in messages, dependents what fails without them.
func WaitImports(ctx context.Context, p *progress.Reporter, members []*Member, ns string, serviceName func(clusterID string) string,
	timeout time.Duration, services, dependents string, wantIPv6 func(from, to string) bool) map[string]map[string]ImportIPs {
	start := time.Now()
	p.Step("Waiting for each cluster to import the others' %s", services)
	ips := map[string]map[string]ImportIPs{}
	for _, m := range members {
		ips[m.ID] = map[string]ImportIPs{}
	}
	complete := func(m, o *Member) bool {
		got := ips[m.ID][o.ID]
		return got.Primary.IsValid() && (got.IPv6.IsValid() || wantIPv6 == nil || !wantIPv6(m.ID, o.ID))
	}
	pending, err := Poll(ctx, p, timeout, func(ctx context.Context) (bool, string) {
		var missing []string
		for _, m := range members {
			for _, o := range members {
				if o == m || complete(m, o) {
					continue
				}
				si := &mcsv1beta1.ServiceImport{}
				if err := m.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: serviceName(o.ID)}, si); err == nil {
					if primary, ipv6, err := ClusterSetIPs(si.Spec.IPs); err == nil {
						ips[m.ID][o.ID] = ImportIPs{Primary: primary, IPv6: ipv6}
						if complete(m, o) {
							continue
						}
					}
				}
				missing = append(missing, fmt.Sprintf("%s in %s", serviceName(o.ID), m.ID))
			}
		}
		return len(missing) == 0, "ServiceImports with a ClusterSet IP (of each family where both clusters are dual-stack): " + strings.Join(missing, ", ")
	})
	if err != nil {
		p.Step("Gave up waiting for %s (%v); the %s that need them will fail", pending, err, dependents)
		return ips
	}
	p.Done(start, "every cluster imported the others' %s", services)
	return ips
}

// OneLine keeps s on one line of at most maxLen bytes, for a table cell or a step line:
// command errors can span several.
func OneLine(s string, maxLen int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxLen {
		s = s[:maxLen-3] + "..."
	}
	return s
}
