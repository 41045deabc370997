// Package verify checks cross-cluster connectivity between joined clusters the way a
// workload sees it: it deploys a probe server (behind an exported Service) and a client pod
// in every cluster, in a namespace of its own, and from each cluster's client requests every
// other cluster's server by pod IP, by ClusterSet IP and by its clusterset.local name. It uses
// only standard Kubernetes APIs, the MCS API and the About API's cluster ID, so it runs
// against any clusters Octopus joined.
package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "github.com/octopus-mcs/octopus/api/about/v1alpha1"
	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/progress"
)

// Cluster is one cluster to verify.
type Cluster struct {
	// Config reaches the cluster's API server. Required.
	Config *rest.Config
	// Source says where Config came from (a kubeconfig path), for messages. Optional.
	Source string
}

// Options configure a verify run.
type Options struct {
	// Clusters are the clusters to check between; at least two. Required.
	Clusters []Cluster
	// Namespace is created in every cluster and deleted at the end. Optional, default
	// octopus-verify-<random>; it must not exist yet.
	Namespace string
	// ServerImage and ClientImage are the probe images. Optional, default
	// DefaultServerImage and DefaultClientImage.
	ServerImage, ClientImage string
	// CheckTimeout bounds each check, retries included. Optional, default 30s.
	CheckTimeout time.Duration
	// ReadyTimeout bounds the wait for the probe pods to be ready and, separately, for each
	// cluster to import the others' probe services. Optional, default 3m.
	ReadyTimeout time.Duration
	// Progress receives step lines while verify sets up and waits. Optional.
	Progress io.Writer
}

// DefaultCheckTimeout and DefaultReadyTimeout are the defaults of Options.
const (
	DefaultCheckTimeout = 30 * time.Second
	DefaultReadyTimeout = 3 * time.Minute
)

// attemptTimeout bounds one try of a check; a check retries until CheckTimeout.
const attemptTimeout = 5 * time.Second

// member is one cluster during a run.
type member struct {
	id, source string
	cfg        *rest.Config
	c          client.Client
	cs         kubernetes.Interface
	created    bool
	// globalnet is set when the cluster joined with globalnet addressing: other clusters
	// reach its probe server at its global IP.
	globalnet bool
	serverIP  netip.Addr
	// imports are the ClusterSet IPs of the other clusters' probe services, by cluster id.
	imports map[string]netip.Addr
}

type runner struct {
	opts    Options
	ns      string
	members []*member
	p       *progress.Reporter
}

// Run deploys the probes, waits for them, runs every check for every ordered pair of
// clusters and deletes the namespace again, also when ctx is cancelled. The error is for
// runs that could not check at all (a cluster unreachable or not joined, probes never ready);
// failed checks are in the report (Report.Passed).
func Run(ctx context.Context, opts Options) (*Report, error) {
	if len(opts.Clusters) < 2 {
		return nil, fmt.Errorf("verify needs at least two clusters, got %d: pass --kubeconfig once per cluster", len(opts.Clusters))
	}
	if opts.Namespace == "" {
		opts.Namespace = "octopus-verify-" + utilrand.String(5)
	}
	if opts.ServerImage == "" {
		opts.ServerImage = DefaultServerImage
	}
	if opts.ClientImage == "" {
		opts.ClientImage = DefaultClientImage
	}
	if opts.CheckTimeout <= 0 {
		opts.CheckTimeout = DefaultCheckTimeout
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = DefaultReadyTimeout
	}
	r := &runner{opts: opts, ns: opts.Namespace, p: &progress.Reporter{W: opts.Progress}}
	report := &Report{Namespace: r.ns}
	if err := r.connect(ctx); err != nil {
		return nil, err
	}
	for _, m := range r.members {
		report.Clusters = append(report.Clusters, m.id)
	}
	defer r.cleanup(ctx)
	if err := r.deploy(ctx); err != nil {
		return report, err
	}
	if err := r.waitReady(ctx); err != nil {
		return report, err
	}
	r.waitImports(ctx)
	report.Results = r.checkAll(ctx)
	report.Finish()
	if err := ctx.Err(); err != nil {
		// Checks cut short by Ctrl-C or --timeout say nothing about the network.
		return report, fmt.Errorf("checks interrupted: %w", err)
	}
	return report, nil
}

// connect builds the clients and reads each cluster's ID (the About API's
// cluster.clusterset.k8s.io ClusterProperty, which joining sets).
func (r *runner) connect(ctx context.Context) error {
	seen := map[string]string{}
	for i, cl := range r.opts.Clusters {
		src := cl.Source
		if src == "" {
			src = fmt.Sprintf("cluster #%d", i+1)
		}
		if cl.Config == nil {
			return fmt.Errorf("%s: no REST config", src)
		}
		c, err := client.New(cl.Config, client.Options{Scheme: kube.Scheme})
		if err != nil {
			return fmt.Errorf("connecting to %s (%s): %w", src, cl.Config.Host, err)
		}
		cs, err := kubernetes.NewForConfig(cl.Config)
		if err != nil {
			return fmt.Errorf("connecting to %s (%s): %w", src, cl.Config.Host, err)
		}
		prop := &aboutv1alpha1.ClusterProperty{}
		if err := c.Get(ctx, client.ObjectKey{Name: aboutv1alpha1.ClusterIDProperty}, prop); err != nil {
			// Without the About API's CRD the lookup fails in discovery ("no matches for
			// about.k8s.io/v1alpha1"), before any NotFound.
			if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) || strings.Contains(err.Error(), "no matches for") {
				return fmt.Errorf("%s (%s) has no cluster ID (ClusterProperty %s): it has not joined a cluster set; run `octopus join` there first",
					src, cl.Config.Host, aboutv1alpha1.ClusterIDProperty)
			}
			return fmt.Errorf("reading the cluster ID of %s (%s): %w", src, cl.Config.Host, err)
		}
		id := prop.Spec.Value
		if other, dup := seen[id]; dup {
			return fmt.Errorf("%s and %s are the same cluster (%s): pass each cluster once", other, src, id)
		}
		seen[id] = src
		m := &member{id: id, source: src, cfg: cl.Config, c: c, cs: cs, imports: map[string]netip.Addr{}}
		if m.globalnet, err = isGlobalnet(ctx, c); err != nil {
			// The data plane may well work with the hub down: check it as direct addressing.
			r.p.Step("Could not read the addressing of %s from its Cluster on the hub (%v); checking it as direct addressing", id, err)
		}
		r.members = append(r.members, m)
	}
	return nil
}

// isGlobalnet reads, with the cluster's own hub credential, whether the cluster joined with
// globalnet addressing.
func isGlobalnet(ctx context.Context, c client.Reader) (bool, error) {
	cred, err := hubaccess.LoadCredential(ctx, c)
	if err != nil {
		return false, err
	}
	hc, err := client.New(cred.RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		return false, err
	}
	cl := &v1alpha1.Cluster{}
	if err := hc.Get(ctx, client.ObjectKey{Namespace: cred.Namespace, Name: cred.ClusterID}, cl); err != nil {
		return false, err
	}
	return cl.Spec.Addressing == v1alpha1.AddressingGlobalnet, nil
}

func (r *runner) deploy(ctx context.Context) error {
	start := time.Now()
	r.p.Step("Deploying probes in namespace %s of %s", r.ns, strings.Join(r.ids(), ", "))
	for _, m := range r.members {
		objs := objects(r.ns, m.id, r.opts.ServerImage, r.opts.ClientImage)
		if m.globalnet {
			objs = append(objs, globalnetObjects(r.ns, m.id)...)
		}
		for i, obj := range objs {
			if err := r.create(ctx, m, obj); err != nil {
				if i == 0 && apierrors.IsAlreadyExists(err) {
					return fmt.Errorf("namespace %s already exists in %s: pass another --namespace, or delete it if a killed verify left it", r.ns, m.id)
				}
				return fmt.Errorf("creating %T %s in %s: %w", obj, obj.GetName(), m.id, err)
			}
			if i == 0 {
				m.created = true
			}
		}
	}
	r.p.Done(start, "created a probe server, its exported Service %s and a client pod in each cluster", serviceName("<cluster>"))
	return nil
}

// create creates obj, retrying while the new namespace has no default ServiceAccount yet:
// until kube-controller-manager makes it, the ServiceAccount admission plugin refuses pods,
// and on a busy control plane that takes seconds.
func (r *runner) create(ctx context.Context, m *member, obj client.Object) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.ReadyTimeout)
	defer cancel()
	for {
		err := m.c.Create(ctx, obj)
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

// cleanup deletes the namespace wherever this run created it, with a context of its own so
// that it also happens after Ctrl-C or the overall deadline.
func (r *runner) cleanup(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var deleted []string
	for _, m := range r.members {
		if !m.created {
			continue
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}
		err := m.c.Delete(ctx, ns, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if client.IgnoreNotFound(err) != nil {
			r.p.Step("Could not delete namespace %s in %s: %v (delete it with kubectl)", r.ns, m.id, err)
			continue
		}
		deleted = append(deleted, m.id)
	}
	if len(deleted) > 0 {
		r.p.Step("Deleted namespace %s in %s", r.ns, strings.Join(deleted, ", "))
	}
}

// poll calls f every second until it returns true, ctx ends or timeout passes; every 10 s
// it prints f's account of what it is still waiting for.
func (r *runner) poll(ctx context.Context, timeout time.Duration, f func(context.Context) (bool, string)) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	lastReport := time.Now()
	var pending string
	for {
		done, p := f(ctx)
		if done {
			return "", nil
		}
		// A round cut short by the deadline reports the deadline, not the state: keep the
		// previous round's account then.
		if ctx.Err() == nil || pending == "" {
			pending = p
		}
		if time.Since(lastReport) >= 10*time.Second {
			r.p.Step("Still waiting for %s", pending)
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			return pending, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func (r *runner) waitReady(ctx context.Context) error {
	start := time.Now()
	r.p.Step("Waiting for the probe pods to be ready")
	pending, err := r.poll(ctx, r.opts.ReadyTimeout, func(ctx context.Context) (bool, string) {
		var waiting []string
		for _, m := range r.members {
			for _, name := range []string{serverName, clientName} {
				pod := &corev1.Pod{}
				if err := m.c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: name}, pod); err != nil {
					waiting = append(waiting, fmt.Sprintf("%s/%s (%v)", m.id, name, err))
					continue
				}
				if !podReady(pod) {
					waiting = append(waiting, fmt.Sprintf("%s/%s (%s)", m.id, name, podState(pod)))
					continue
				}
				if name == serverName && m.globalnet {
					if ip, why := globalIP(ctx, m.c, r.ns, "pod-"+serverName); ip.IsValid() {
						m.serverIP = ip
					} else {
						waiting = append(waiting, fmt.Sprintf("%s/%s (global IP: %s)", m.id, name, why))
					}
					continue
				}
				if name == serverName {
					ip, err := netip.ParseAddr(pod.Status.PodIP)
					if err != nil {
						waiting = append(waiting, fmt.Sprintf("%s/%s (pod IP %q)", m.id, name, pod.Status.PodIP))
						continue
					}
					m.serverIP = ip
				}
			}
		}
		return len(waiting) == 0, "pods " + strings.Join(waiting, ", ")
	})
	if err != nil {
		return fmt.Errorf("waiting for the probe pods: %w; still not ready: %s (see `kubectl -n %s describe pods` in that cluster)", err, pending, r.ns)
	}
	r.p.Done(start, "probe pods ready")
	return nil
}

// globalIP is the address of the GlobalIngressIP name in namespace, or why there is none yet.
func globalIP(ctx context.Context, c client.Reader, namespace, name string) (netip.Addr, string) {
	g := &v1alpha1.GlobalIngressIP{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, g); err != nil {
		return netip.Addr{}, err.Error()
	}
	if ip, err := netip.ParseAddr(g.Status.IP); err == nil {
		return ip, ""
	}
	if cond := meta.FindStatusCondition(g.Status.Conditions, v1alpha1.GlobalIngressIPConditionAllocated); cond != nil {
		return netip.Addr{}, cond.Reason + ": " + cond.Message
	}
	return netip.Addr{}, "not allocated yet"
}

// waitImports waits until every cluster has imported every other cluster's probe service
// with a ClusterSet IP. A missing import is not an error here: the checks that need it
// fail and say so, and the others still run.
func (r *runner) waitImports(ctx context.Context) {
	start := time.Now()
	r.p.Step("Waiting for each cluster to import the others' probe services")
	pending, err := r.poll(ctx, r.opts.ReadyTimeout, func(ctx context.Context) (bool, string) {
		var missing []string
		for _, m := range r.members {
			for _, o := range r.members {
				if o == m {
					continue
				}
				if _, ok := m.imports[o.id]; ok {
					continue
				}
				si := &mcsv1beta1.ServiceImport{}
				err := m.c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: serviceName(o.id)}, si)
				if err == nil && len(si.Spec.IPs) > 0 {
					if ip, perr := netip.ParseAddr(si.Spec.IPs[0]); perr == nil {
						m.imports[o.id] = ip
						continue
					}
				}
				missing = append(missing, fmt.Sprintf("%s in %s", serviceName(o.id), m.id))
			}
		}
		return len(missing) == 0, "ServiceImports with a ClusterSet IP: " + strings.Join(missing, ", ")
	})
	if err != nil {
		r.p.Step("Gave up waiting for %s (%v); the checks that need them will fail", pending, err)
		return
	}
	r.p.Done(start, "every cluster imported the others' probe services")
}

// checkAll runs the checks of each ordered pair concurrently (a dead link costs one check
// timeout per check, not per pair) and returns them in report order.
func (r *runner) checkAll(ctx context.Context) []Result {
	type pair struct{ from, to *member }
	var pairs []pair
	for _, a := range r.members {
		for _, b := range r.members {
			if a != b {
				pairs = append(pairs, pair{a, b})
			}
		}
	}
	start := time.Now()
	r.p.Step("Checking %d pairs of clusters (%s per check at most)", len(pairs), r.opts.CheckTimeout)
	results := make([]Result, len(pairs)*len(Checks))
	var wg sync.WaitGroup
	for i, p := range pairs {
		wg.Go(func() {
			for j, c := range Checks {
				res := r.check(ctx, c, p.from, p.to)
				results[i*len(Checks)+j] = res
				verdict := "passed (" + formatLatency(res.Latency.Duration) + ")"
				if !res.Passed {
					verdict = "FAILED: " + oneLine(res.Detail)
				}
				r.p.Step("%s %s", res.Name(), verdict)
			}
		})
	}
	wg.Wait()
	r.p.Done(start, "checks done")
	return results
}

// check retries one check until it passes or CheckTimeout passes. Attempts are not cut
// short at CheckTimeout (each has its own bound, attemptTimeout), so that a failure reports
// what the last attempt saw (curl's or dig's reason), not a cancelled exec; a check may
// thus overrun CheckTimeout by one attempt.
func (r *runner) check(ctx context.Context, c Check, from, to *member) Result {
	res := Result{Check: c, From: from.id, To: to.id}
	start := time.Now()
	lastReport := start
	for {
		res.Attempts++
		a, detail, err := r.attempt(ctx, c, from, to)
		res.Elapsed = metav1.Duration{Duration: time.Since(start)}
		if err == nil {
			res.Passed, res.Detail, res.Latency = true, detail+": "+a.String(), metav1.Duration{Duration: a.Latency}
			return res
		}
		res.Detail = err.Error()
		if errors.Is(err, errNotImported) || time.Since(start) >= r.opts.CheckTimeout {
			return res
		}
		if time.Since(lastReport) >= 10*time.Second {
			r.p.Step("%s still failing after %d attempts: %s", res.Name(), res.Attempts, oneLine(res.Detail))
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			return res
		case <-time.After(time.Second):
		}
	}
}

var errNotImported = errors.New("not imported")

// attempt tries a check once; on success it returns the server's answer and what was
// requested.
func (r *runner) attempt(ctx context.Context, c Check, from, to *member) (answer, string, error) {
	var target string
	var port int
	switch c {
	case CheckPodToPod:
		target, port = to.serverIP.String(), httpPort
	case CheckClusterSetIP, CheckDNS:
		ip, ok := from.imports[to.id]
		if !ok {
			return answer{}, "", fmt.Errorf("%w: %s has no ServiceImport %s/%s with a ClusterSet IP (is service discovery running in both clusters? `octopus show services`)",
				errNotImported, from.id, r.ns, serviceName(to.id))
		}
		target, port = ip.String(), servicePort
		if c == CheckDNS {
			name := fmt.Sprintf("%s.%s.svc.clusterset.local", serviceName(to.id), r.ns)
			out, err := r.exec(ctx, from, digArgv(name, attemptTimeout)...)
			if err != nil {
				return answer{}, "", fmt.Errorf("resolving %s: %w", name, err)
			}
			if got := parseDig(out); !slices.Contains(got, ip) {
				return answer{}, "", fmt.Errorf("%s resolved to %v, want the ClusterSet IP %s (is the clusterset.local zone forwarded to octopus-dns?)", name, got, ip)
			}
			target = name
		}
	default:
		return answer{}, "", fmt.Errorf("unknown check %q", c)
	}
	out, err := r.exec(ctx, from, curlArgv(target, port, attemptTimeout)...)
	if err != nil {
		return answer{}, "", fmt.Errorf("requesting %s:%d: %w", target, port, err)
	}
	a, err := parseCurl(out)
	if err != nil {
		return answer{}, "", fmt.Errorf("requesting %s:%d: %w", target, port, err)
	}
	if err := a.fromServer(to.id); err != nil {
		return answer{}, "", fmt.Errorf("requesting %s:%d: %w", target, port, err)
	}
	what := fmt.Sprintf("%s:%d", target, port)
	if c == CheckDNS {
		what = fmt.Sprintf("%s (%s):%d", target, from.imports[to.id], port)
	}
	return a, what, nil
}

func (r *runner) ids() []string {
	ids := make([]string, len(r.members))
	for i, m := range r.members {
		ids[i] = m.id
	}
	return ids
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podState is a short account of why a pod is not ready: its phase and the reason a
// container waits (ImagePullBackOff, say).
func podState(pod *corev1.Pod) string {
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
