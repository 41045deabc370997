// Package diagnose explains what is wrong with a cluster set: it reads the member clusters and
// the hub through their APIs only (no node access), runs a fixed list of checks concurrently,
// each under a timeout, and reports one finding per thing it looked at, with a severity, what
// it means and the command or change that fixes it. It never writes anything.
package diagnose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/progress"
)

// Target is a cluster to diagnose.
type Target struct {
	// Config reaches the cluster's API server with an admin-like credential (the checks read
	// kube-system and octopus-system). Required.
	Config *rest.Config
	// Source says where Config came from (a kubeconfig path); fixes name it. Required.
	Source string
}

// Options configure Run.
type Options struct {
	// Clusters are the member clusters. At least one, or Hub.
	Clusters []Target
	// Hub is the hub's own kubeconfig. Optional: without it the hub is read through the
	// clusters' hub credentials (Secret octopus-system/octopus-hub).
	Hub *Target
	// HubNamespace is the hub namespace when Hub is given. Optional, default
	// v1alpha1.DefaultHubNamespace; the credentials name their own.
	HubNamespace string
	// Checks are the names of the checks to run (see Checks). Optional: all of them.
	Checks []string
	// CheckTimeout bounds each check on each cluster. Optional, DefaultCheckTimeout.
	CheckTimeout time.Duration
	// RequestTimeout bounds each API request. Optional, DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Now is the clock findings compare timestamps with. Optional, time.Now.
	Now func() time.Time
	// Progress receives step lines. Optional.
	Progress io.Writer
}

// Defaults of Options. A run on a lab of three clusters takes about 2.5 s, most of it the
// clock measurement (clock.go), so these leave room for a slow API server while keeping a run
// against a dead one short.
const (
	DefaultCheckTimeout   = 8 * time.Second
	DefaultRequestTimeout = 3 * time.Second
)

// Check describes one check, for the CLI's subcommands.
type Check struct {
	// Name is the subcommand, e.g. "gateway".
	Name string
	// Summary is one line on what it checks.
	Summary string
}

// check is a Check with its implementation. A check has a part that runs once (findings
// about the hub or the whole set), a part that runs per cluster, or both.
type check struct {
	Check
	set    func(ctx context.Context, e *env) []Finding
	member func(ctx context.Context, e *env, m *member) []Finding
}

// registry lists every check in report order.
var registry = []check{
	versionsCheck,
	hubAccessCheck,
	registrationCheck,
	overlapCheck,
	heartbeatCheck,
	clockCheck,
	gatewayCheck,
	dnsCheck,
	kubeProxyCheck,
	cniCheck,
}

// Checks lists the checks in the order Run reports them.
func Checks() []Check {
	out := make([]Check, len(registry))
	for i, c := range registry {
		out[i] = c.Check
	}
	return out
}

// Run runs the selected checks on every cluster and the hub concurrently and returns their
// findings. The error is for runs that could not start (bad options, an unknown check);
// everything the checks find, unreachable API servers included, is in the report.
func Run(ctx context.Context, opts Options) (*Report, error) {
	begin := time.Now()
	opts, selected, err := complete(opts)
	if err != nil {
		return nil, err
	}
	e, err := newEnv(ctx, opts)
	if err != nil {
		return nil, err
	}
	return e.diagnose(ctx, selected, begin), nil
}

// diagnose identifies the clusters and runs the selected checks on them.
func (e *env) diagnose(ctx context.Context, selected []check, begin time.Time) *Report {
	p := &progress.Reporter{W: e.opts.Progress}
	if slices.ContainsFunc(selected, func(c check) bool { return c.Name == clockCheck.Name }) {
		// The clock measurements take the longest (clock.go) and need no cluster ID: start
		// them now rather than after identify.
		go func() { _, _ = e.hub.offset.get(ctx) }()
		for _, m := range e.members {
			go func() { _, _ = m.offset.get(ctx) }()
		}
	}
	p.Step("Reading the hub credentials of %d clusters", len(e.members))
	e.identify(ctx)

	names := make([]string, len(selected))
	for i, c := range selected {
		names[i] = c.Name
	}
	p.Step("Running %d checks: %s", len(selected), strings.Join(names, ", "))
	var (
		mu       sync.Mutex
		findings []Finding
		wg       sync.WaitGroup
	)
	collect := func(c check, cluster string, run func(context.Context) []Finding) {
		defer wg.Done()
		fs := e.runCheck(ctx, c, cluster, run)
		mu.Lock()
		findings = append(findings, fs...)
		mu.Unlock()
	}
	for _, c := range selected {
		if c.set != nil {
			wg.Add(1)
			go collect(c, "", func(ctx context.Context) []Finding { return c.set(ctx, e) })
		}
		if c.member != nil {
			for _, m := range e.members {
				wg.Add(1)
				go collect(c, m.name(), func(ctx context.Context) []Finding { return c.member(ctx, e, m) })
			}
		}
	}
	wg.Wait()

	report := &Report{Checks: names, Findings: findings, Elapsed: Duration{time.Since(begin)}}
	for _, m := range e.members {
		report.Clusters = append(report.Clusters, m.name())
	}
	slices.Sort(report.Clusters)
	sortFindings(report.Findings, names)
	p.Done(begin, "%d findings, %d errors", len(report.Findings), report.Count(SeverityError))
	return report
}

func complete(opts Options) (Options, []check, error) {
	if len(opts.Clusters) == 0 && opts.Hub == nil {
		return opts, nil, errors.New("nothing to diagnose: give at least one cluster's kubeconfig (or the hub's)")
	}
	if opts.HubNamespace == "" {
		opts.HubNamespace = v1alpha1.DefaultHubNamespace
	}
	if opts.CheckTimeout <= 0 {
		opts.CheckTimeout = DefaultCheckTimeout
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if len(opts.Checks) == 0 {
		return opts, registry, nil
	}
	var selected []check
	for _, c := range registry {
		if slices.Contains(opts.Checks, c.Name) {
			selected = append(selected, c)
		}
	}
	for _, name := range opts.Checks {
		if !slices.ContainsFunc(registry, func(c check) bool { return c.Name == name }) {
			known := make([]string, len(registry))
			for i, c := range registry {
				known[i] = c.Name
			}
			return opts, nil, fmt.Errorf("unknown check %q; the checks are %s", name, strings.Join(known, ", "))
		}
	}
	return opts, selected, nil
}

// runCheck runs one part of a check under the check timeout. A check that does not return in
// time is reported as an error finding of its own; its goroutine ends when its requests do
// (they carry the same context).
func (e *env) runCheck(ctx context.Context, c check, cluster string, run func(context.Context) []Finding) []Finding {
	ctx, cancel := context.WithTimeout(ctx, e.opts.CheckTimeout)
	defer cancel()
	out := make(chan []Finding, 1)
	go func() { out <- run(ctx) }()
	var fs []Finding
	select {
	case fs = <-out:
	case <-ctx.Done():
		fs = []Finding{{Severity: SeverityError,
			Message: fmt.Sprintf("the check did not finish within %s (%v)", e.opts.CheckTimeout, context.Cause(ctx)),
			Fix:     "look at the API servers' load and their reachability from this machine; raise --check-timeout if they are just slow"}}
	}
	for i := range fs {
		fs[i].Check = c.Name
		if fs[i].Cluster == "" {
			fs[i].Cluster = cluster
		}
	}
	return fs
}

// Finding constructors for the checks; runCheck fills in Check and, for per-cluster checks,
// Cluster.

func ok(format string, args ...any) Finding {
	return Finding{Severity: SeverityOK, Message: fmt.Sprintf(format, args...)}
}

func info(format string, args ...any) Finding {
	return Finding{Severity: SeverityInfo, Message: fmt.Sprintf(format, args...)}
}

func warning(fix, format string, args ...any) Finding {
	return Finding{Severity: SeverityWarning, Message: fmt.Sprintf(format, args...), Fix: fix}
}

func failure(fix, format string, args ...any) Finding {
	return Finding{Severity: SeverityError, Message: fmt.Sprintf(format, args...), Fix: fix}
}

// notChecked is the finding of a check that could not get what it needs: an error, since the
// check cannot vouch for anything, whose fix points at the check that explains why.
func notChecked(what string, err error, see string) Finding {
	return failure("`octopus diagnose "+see+"` says why and what to do", "%s not checked: %s", what, brief(err))
}

// brief shortens an error for a finding whose own check is not the one that explains it: a
// failed dial says everything in its last part ("dial tcp 192.0.2.1:6443: connect: connection
// refused"), not in the layers of client and URL around it.
func brief(err error) string {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Error()
	}
	return err.Error()
}
