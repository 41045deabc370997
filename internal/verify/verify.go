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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"

	"github.com/octopus-mcs/octopus/internal/progress"
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
		report.Clusters = append(report.Clusters, m.ID)
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

// connect builds the clients and reads each cluster's ID.
func (r *runner) connect(ctx context.Context) error {
	members, err := workload.Connect(ctx, r.opts.Clusters)
	if err != nil {
		return err
	}
	for _, m := range members {
		mem := &member{Member: m, imports: map[string]netip.Addr{}}
		if mem.globalnet, err = workload.Globalnet(ctx, m.Client); err != nil {
			// The data plane may well work with the hub down: check it as direct addressing.
			r.p.Step("Could not read the addressing of %s from its Cluster on the hub (%v); checking it as direct addressing", m.ID, err)
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
		if m.globalnet {
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
			for _, name := range []string{serverName, clientName} {
				pod, why := workload.ReadyPod(ctx, m.Member, r.ns, name)
				if pod == nil {
					waiting = append(waiting, why)
					continue
				}
				if name == serverName && m.globalnet {
					if ip, why := workload.GlobalIP(ctx, m.Client, r.ns, workload.PodGlobalIPName(serverName)); ip.IsValid() {
						m.serverIP = ip
					} else {
						waiting = append(waiting, fmt.Sprintf("%s/%s (global IP: %s)", m.ID, name, why))
					}
					continue
				}
				if name == serverName {
					ip, err := netip.ParseAddr(pod.Status.PodIP)
					if err != nil {
						waiting = append(waiting, fmt.Sprintf("%s/%s (pod IP %q)", m.ID, name, pod.Status.PodIP))
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

// waitImports records, for each cluster, the ClusterSet IPs of the others' probe services.
func (r *runner) waitImports(ctx context.Context) {
	ips := workload.WaitImports(ctx, r.p, r.workloadMembers(), r.ns, serviceName, r.opts.ReadyTimeout, "probe services", "checks")
	for _, m := range r.members {
		m.imports = ips[m.ID]
	}
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
	res := Result{Check: c, From: from.ID, To: to.ID}
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
		ip, ok := from.imports[to.ID]
		if !ok {
			return answer{}, "", fmt.Errorf("%w: %s has no ServiceImport %s/%s with a ClusterSet IP (is service discovery running in both clusters? `octopus show services`)",
				errNotImported, from.ID, r.ns, serviceName(to.ID))
		}
		target, port = ip.String(), servicePort
		if c == CheckDNS {
			name := fmt.Sprintf("%s.%s.svc.clusterset.local", serviceName(to.ID), r.ns)
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
	if err := a.fromServer(to.ID); err != nil {
		return answer{}, "", fmt.Errorf("requesting %s:%d: %w", target, port, err)
	}
	what := fmt.Sprintf("%s:%d", target, port)
	if c == CheckDNS {
		what = fmt.Sprintf("%s (%s):%d", target, from.imports[to.ID], port)
	}
	return a, what, nil
}

func (r *runner) ids() []string {
	ids := make([]string, len(r.members))
	for i, m := range r.members {
		ids[i] = m.ID
	}
	return ids
}
