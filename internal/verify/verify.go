// Package verify checks cross-cluster connectivity between joined clusters the way a
// workload sees it: it deploys a probe server (behind an exported Service) and a client pod
// in every cluster, in a namespace of its own, and from each cluster's client requests every
// other cluster's server by pod IP, by ClusterSet IP and by its clusterset.local name. Between
// clusters on the secondary network it requests the server's net1 address, the endpoint the
// import holds (there is no ClusterSet IP) and the name, which answers with net1 addresses.
// It uses only standard Kubernetes APIs, the MCS API, the About API's cluster ID and (for the
// addressing) the cluster's Cluster on the hub, read with the cluster's own credential.
package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/progress"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
	"github.com/octopus-mcs/octopus/internal/workload"
)

// Cluster is one cluster to verify.
type Cluster = workload.Cluster

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
	*workload.Member
	// addressing decides how other clusters reach this one's probe server, and which checks
	// its client runs (pairChecks).
	addressing ClusterAddressing
	// serverIP is where other clusters' clients reach the probe server (podTarget);
	// serverErr, when set, says why there is no such address, and every check that needs it
	// fails at once with it.
	serverIP  netip.Addr
	serverErr error
	// serverIP6 and clientIP6 are the probe pods' IPv6 addresses in a dual-stack cluster with
	// direct addressing (workload.SecondIPv6); invalid elsewhere. A pair whose client and
	// server both have one is checked in each family (workload.PairFamilies).
	serverIP6, clientIP6 netip.Addr
	// imports are the ClusterSet IPs of the other clusters' probe services, by cluster id
	// (clusters on the primary network only); imports6 their IPv6 ones, for pairs checked in
	// both families.
	imports, imports6 map[string]netip.Addr
}

func (m *member) is(a v1alpha1.Addressing) bool { return m.addressing.Addressing == a }

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
		report.Clusters = append(report.Clusters, m.ID)
	}
	defer r.cleanup(ctx)
	if err := r.deploy(ctx); err != nil {
		return report, err
	}
	if err := r.waitReady(ctx); err != nil {
		return report, err
	}
	for _, m := range r.members {
		report.Addressing = append(report.Addressing, m.addressing)
	}
	r.waitImports(ctx)
	report.Results, report.Notes = r.checkAll(ctx)
	report.Finish()
	if err := ctx.Err(); err != nil {
		// Checks cut short by Ctrl-C or --timeout say nothing about the network.
		return report, fmt.Errorf("checks interrupted: %w", err)
	}
	return report, nil
}

// hubTimeout bounds the read of a cluster's addressing on the hub: an unreachable hub must
// not hold up a check of a data plane that works without it.
const hubTimeout = 10 * time.Second

// connect builds the clients and reads each cluster's ID and addressing.
//
// The addressing comes from the cluster's Cluster on the hub, read with the cluster's own hub
// credential (the Secret join left in it): the one record of it, which join wrote and the
// cluster's agent reads at start to export and import accordingly, so verify checks the
// cluster as its agent runs it. Nothing in the member cluster records it by itself; what
// follows from it there comes later or not at all (a ServiceImport is annotated
// octopus.io/addressing: secondary only once a service is imported, which needs the hub). So
// when the hub cannot be read, the probe server's annotations tell (waitReady): the
// ovnmaster, which runs only in a cluster on the secondary network, writes every pod there
// its network-status entry or the reason it has none; without either the cluster is checked
// as direct addressing, and the report says it was assumed.
func (r *runner) connect(ctx context.Context) error {
	members, err := workload.Connect(ctx, r.opts.Clusters)
	if err != nil {
		return err
	}
	for _, m := range members {
		mem := &member{Member: m, imports: map[string]netip.Addr{}, imports6: map[string]netip.Addr{}, addressing: ClusterAddressing{Cluster: m.ID, Source: SourceHub}}
		hctx, cancel := context.WithTimeout(ctx, hubTimeout)
		mem.addressing.Addressing, err = workload.Addressing(hctx, m.Client)
		cancel()
		if err != nil {
			// The data plane may well work with the hub down.
			mem.addressing.Addressing, mem.addressing.Source = v1alpha1.AddressingDirect, SourceAssumed
			r.p.Step("Could not read the addressing of %s from its Cluster on the hub (%v); learning it from its probe server, else checking it as direct addressing", m.ID, err)
		}
		r.members = append(r.members, mem)
	}
	return nil
}

func (r *runner) deploy(ctx context.Context) error {
	start := time.Now()
	r.p.Step("Deploying probes in namespace %s of %s", r.ns, strings.Join(r.ids(), ", "))
	for _, m := range r.members {
		objs := objects(r.ns, m.ID, r.opts.ServerImage, r.opts.ClientImage)
		if m.is(v1alpha1.AddressingGlobalnet) {
			objs = append(objs, globalnetObjects(r.ns, m.ID)...)
		}
		if err := workload.CreateAll(ctx, m.Member, objs, r.opts.ReadyTimeout, "verify", "--namespace"); err != nil {
			return err
		}
	}
	r.p.Done(start, "created a probe server, its exported Service %s and a client pod in each cluster", serviceName("<cluster>"))
	return nil
}

// cleanup deletes the namespace wherever this run created it, also after Ctrl-C.
func (r *runner) cleanup(ctx context.Context) {
	workload.Cleanup(ctx, r.workloadMembers(), r.ns, r.p)
}

func (r *runner) workloadMembers() []*workload.Member {
	members := make([]*workload.Member, len(r.members))
	for i, m := range r.members {
		members[i] = m.Member
	}
	return members
}

func (r *runner) waitReady(ctx context.Context) error {
	start := time.Now()
	r.p.Step("Waiting for the probe pods to be ready")
	pending, err := workload.Poll(ctx, r.p, r.opts.ReadyTimeout, func(ctx context.Context) (bool, string) {
		var waiting []string
		for _, m := range r.members {
			if why := r.serverReady(ctx, m); why != "" {
				waiting = append(waiting, why)
			}
			pod, why := workload.ReadyPod(ctx, m.Member, r.ns, clientName)
			if pod == nil {
				waiting = append(waiting, why)
				continue
			}
			if m.is(v1alpha1.AddressingDirect) || m.addressing.Addressing == "" {
				m.clientIP6 = workload.SecondIPv6(pod)
			}
		}
		return len(waiting) == 0, "pods " + strings.Join(waiting, ", ")
	})
	if err != nil {
		return fmt.Errorf("waiting for the probe pods: %w; still not ready: %s (see `kubectl -n %s describe pods` in that cluster)", err, pending, r.ns)
	}
	r.p.Done(start, "probe pods ready")
	var lines []ClusterAddressing
	for _, m := range r.members {
		lines = append(lines, m.addressing)
	}
	r.p.Step("Addressing: %s", addressingLine(lines))
	return nil
}

// serverReady records where other clusters reach m's probe server once it is ready, and
// returns what it still waits for ("" when done). A ready server in a cluster on the
// secondary network without a net1 address is not waited for: the ovnmaster writes the
// address before the pod starts, so it will not come; the checks that need it fail with why.
func (r *runner) serverReady(ctx context.Context, m *member) string {
	pod := &corev1.Pod{}
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: serverName}, pod); err != nil {
		return fmt.Sprintf("%s/%s (%v)", m.ID, serverName, err)
	}
	if m.addressing.Source == SourceAssumed && secondaryFromAnnotations(pod.Annotations) {
		m.addressing.Addressing, m.addressing.Source = v1alpha1.AddressingSecondary, SourceProbe
	}
	if !workload.PodReady(pod) {
		why := workload.PodState(pod)
		if e := pod.Annotations[podnet.ErrorAnnotation]; e != "" {
			// The NRI plugin does not start a pod without its address: this is why.
			why += "; no address on the secondary network: " + e
		}
		return fmt.Sprintf("%s/%s (%s)", m.ID, serverName, why)
	}
	var globalIP netip.Addr
	if m.is(v1alpha1.AddressingGlobalnet) {
		ip, why := workload.GlobalIP(ctx, m.Client, r.ns, workload.PodGlobalIPName(serverName))
		if !ip.IsValid() {
			return fmt.Sprintf("%s/%s (global IP: %s)", m.ID, serverName, why)
		}
		globalIP = ip
	}
	m.serverIP, m.serverErr = podTarget(m.addressing.Addressing, pod, globalIP)
	if m.is(v1alpha1.AddressingDirect) || m.addressing.Addressing == "" {
		m.serverIP6 = workload.SecondIPv6(pod)
	}
	if m.serverErr != nil && !m.is(v1alpha1.AddressingSecondary) {
		return fmt.Sprintf("%s/%s (%v)", m.ID, serverName, m.serverErr)
	}
	return ""
}

// waitImports waits until each cluster has imported the others' probe services as its
// addressing has it: with a ClusterSet IP on the primary network (recorded for the checks);
// on the secondary network marked so, with the other cluster's probe server's net1 address
// as the endpoint. Pairs that cannot connect, or whose server has no address, are not waited
// for. A missing import is not an error: only the checks that need it fail.
func (r *runner) waitImports(ctx context.Context) {
	type pair struct{ from, to *member }
	var pairs []pair
	for _, from := range r.members {
		for _, to := range r.members {
			if from == to || to.serverErr != nil {
				continue
			}
			if _, err := pairChecks(from.addressing, to.addressing); err == nil {
				pairs = append(pairs, pair{from, to})
			}
		}
	}
	if len(pairs) == 0 {
		return
	}
	start := time.Now()
	r.p.Step("Waiting for each cluster to import the others' probe services")
	done := make([]bool, len(pairs))
	pending, err := workload.Poll(ctx, r.p, r.opts.ReadyTimeout, func(ctx context.Context) (bool, string) {
		var missing []string
		for i, p := range pairs {
			if !done[i] {
				if done[i] = r.imported(ctx, p.from, p.to) == nil; !done[i] {
					missing = append(missing, fmt.Sprintf("%s in %s", serviceName(p.to.ID), p.from.ID))
				}
			}
		}
		return len(missing) == 0, "ServiceImports (with a ClusterSet IP, or on the secondary network with the probe server's net1 address): " + strings.Join(missing, ", ")
	})
	if err != nil {
		r.p.Step("Gave up waiting for %s (%v); the checks that need them will fail", pending, err)
		return
	}
	r.p.Done(start, "every cluster imported the others' probe services")
}

// imported checks from's import of to's probe Service once, recording its ClusterSet IP on
// the primary network.
func (r *runner) imported(ctx context.Context, from, to *member) error {
	if from.is(v1alpha1.AddressingSecondary) {
		_, err := r.secondaryEndpoint(ctx, from, to)
		return err
	}
	si := &mcsv1beta1.ServiceImport{}
	if err := from.Client.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: serviceName(to.ID)}, si); err != nil {
		return err
	}
	if len(si.Spec.IPs) == 0 {
		return errors.New("no ClusterSet IP yet")
	}
	ip, ip6, err := workload.ClusterSetIPs(si.Spec.IPs)
	if err != nil {
		return err
	}
	if len(workload.PairFamilies(from.clientIP6, to.serverIP6)) == 2 {
		if !ip6.IsValid() {
			return errors.New("no IPv6 ClusterSet IP yet")
		}
		from.imports6[to.ID] = ip6
	}
	from.imports[to.ID] = ip
	return nil
}

// secondaryEndpoint reads from's import of to's probe Service and returns the endpoint a
// client on the secondary network connects to (secondaryEndpoint, the pure part).
func (r *runner) secondaryEndpoint(ctx context.Context, from, to *member) (netip.AddrPort, error) {
	si := &mcsv1beta1.ServiceImport{}
	if err := from.Client.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: serviceName(to.ID)}, si); err != nil {
		if apierrors.IsNotFound(err) {
			return netip.AddrPort{}, fmt.Errorf("%w: %s has no ServiceImport %s/%s (is service discovery running in both clusters? `octopus show services`)",
				errNotImported, from.ID, r.ns, serviceName(to.ID))
		}
		return netip.AddrPort{}, fmt.Errorf("reading ServiceImport %s/%s in %s: %w", r.ns, serviceName(to.ID), from.ID, err)
	}
	imported := &discoveryv1.EndpointSliceList{}
	if err := from.Client.List(ctx, imported, client.InNamespace(r.ns),
		client.MatchingLabels{mcsv1beta1.LabelServiceName: serviceName(to.ID), mcsv1beta1.LabelSourceCluster: to.ID}); err != nil {
		return netip.AddrPort{}, fmt.Errorf("listing the imported EndpointSlices of %s/%s in %s: %w", r.ns, serviceName(to.ID), from.ID, err)
	}
	return secondaryEndpoint(si, imported.Items, to.ID, to.serverIP)
}

// checkAll runs the checks of each ordered pair concurrently (a dead link costs one check
// timeout per check, not per pair) and returns them in report order, with the notes of what
// was left out (workload.FamilyNote).
func (r *runner) checkAll(ctx context.Context) ([]Result, []string) {
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
	results := make([][]Result, len(pairs))
	var notes []string
	var wg sync.WaitGroup
	for i, p := range pairs {
		checks, mismatch := pairChecks(p.from.addressing, p.to.addressing)
		families := workload.PairFamilies(p.from.clientIP6, p.to.serverIP6)
		if n := workload.FamilyNote("checked", "probe", p.from.ID, p.to.ID, p.from.clientIP6, p.to.serverIP6); n != "" {
			notes = append(notes, n)
			r.p.Step("%s", n)
		}
		results[i] = make([]Result, 0, len(checks)*len(families))
		wg.Go(func() {
			for _, family := range families {
				for _, c := range checks {
					res := r.check(ctx, c, family, p.from, p.to, mismatch)
					results[i] = append(results[i], res)
					verdict := "passed (" + formatLatency(res.Latency.Duration) + ")"
					if !res.Passed {
						verdict = "FAILED: " + oneLine(res.Detail)
					}
					r.p.Step("%s %s", res.Name(), verdict)
				}
			}
		})
	}
	wg.Wait()
	r.p.Done(start, "checks done")
	return slices.Concat(results...), notes
}

// check retries one check until it passes or CheckTimeout passes. Attempts are not cut
// short at CheckTimeout (each has its own bound, attemptTimeout), so that a failure reports
// what the last attempt saw (curl's or dig's reason), not a cancelled exec; a check may
// thus overrun CheckTimeout by one attempt. A check that cannot pass fails at once, not
// attempted: the pair's addressing does not match (mismatch), or the other cluster's probe
// server has no address to request or to expect.
//
// family is the address family checked (Result.Family), "" for the pair's only one.
func (r *runner) check(ctx context.Context, c Check, family string, from, to *member, mismatch error) Result {
	res := Result{Check: c, From: from.ID, To: to.ID, Family: family}
	if mismatch != nil {
		res.Detail = mismatch.Error()
		return res
	}
	if to.serverErr != nil && (c == CheckPodToPod || from.is(v1alpha1.AddressingSecondary)) {
		res.Detail = to.serverErr.Error()
		return res
	}
	start := time.Now()
	lastReport := start
	for {
		res.Attempts++
		a, detail, err := r.attempt(ctx, c, family, from, to)
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
func (r *runner) attempt(ctx context.Context, c Check, family string, from, to *member) (answer, string, error) {
	var target, what string
	var port int
	secondary := from.is(v1alpha1.AddressingSecondary)
	serverIP, imports := to.serverIP, from.imports
	if family == workload.FamilyIPv6 {
		serverIP, imports = to.serverIP6, from.imports6
	}
	switch {
	case c == CheckPodToPod:
		target, port = serverIP.String(), httpPort
	case c == CheckSecondaryService:
		ep, err := r.secondaryEndpoint(ctx, from, to)
		if err != nil {
			return answer{}, "", err
		}
		target, port = ep.Addr().String(), int(ep.Port())
		what = fmt.Sprintf("%s (the endpoint %s imported of %s)", ep, from.ID, serviceName(to.ID))
	case c == CheckDNS && secondary:
		// No ClusterSet IP: the name answers with the exporters' pods, reached on the
		// target port.
		name := fmt.Sprintf("%s.%s.svc.clusterset.local", serviceName(to.ID), r.ns)
		if err := r.resolve(ctx, from, name, to.serverIP, true); err != nil {
			return answer{}, "", err
		}
		target, port = name, httpPort
		what = fmt.Sprintf("%s (%s):%d", name, to.serverIP, port)
	case c == CheckClusterSetIP || c == CheckDNS:
		ip, ok := imports[to.ID]
		if !ok {
			return answer{}, "", fmt.Errorf("%w: %s has no ServiceImport %s/%s with a ClusterSet IP (is service discovery running in both clusters? `octopus show services`)",
				errNotImported, from.ID, r.ns, serviceName(to.ID))
		}
		target, port = ip.String(), servicePort
		if c == CheckDNS {
			name := fmt.Sprintf("%s.%s.svc.clusterset.local", serviceName(to.ID), r.ns)
			if err := r.resolve(ctx, from, name, ip, false); err != nil {
				return answer{}, "", err
			}
			target = name
			what = fmt.Sprintf("%s (%s):%d", name, ip, port)
		}
	default:
		return answer{}, "", fmt.Errorf("unknown check %q", c)
	}
	out, err := r.exec(ctx, from, curlArgv(target, port, attemptTimeout, family)...)
	if err != nil {
		return answer{}, "", fmt.Errorf("requesting %s: %w", net.JoinHostPort(target, strconv.Itoa(port)), err)
	}
	a, err := parseCurl(out)
	if err != nil {
		return answer{}, "", fmt.Errorf("requesting %s: %w", net.JoinHostPort(target, strconv.Itoa(port)), err)
	}
	if err := a.fromServer(to.ID); err != nil {
		return answer{}, "", fmt.Errorf("requesting %s: %w", net.JoinHostPort(target, strconv.Itoa(port)), err)
	}
	if what == "" {
		what = net.JoinHostPort(target, strconv.Itoa(port))
	}
	return a, what, nil
}

// resolve resolves name in from's client pod and checks the answer (checkResolved).
func (r *runner) resolve(ctx context.Context, from *member, name string, want netip.Addr, secondary bool) error {
	out, err := r.exec(ctx, from, digArgv(name, attemptTimeout)...)
	if err != nil {
		return fmt.Errorf("resolving %s: %w", name, err)
	}
	return checkResolved(name, parseDig(out), want, secondary)
}

func (r *runner) ids() []string {
	ids := make([]string, len(r.members))
	for i, m := range r.members {
		ids[i] = m.ID
	}
	return ids
}
