// Package gather collects what it takes to understand a cluster set after the fact into one
// archive: the Octopus objects of the hub and of every cluster, the Multi-Cluster Services
// objects and the EndpointSlices behind them, the events and the logs of the components that
// run as pods (previous containers too), the cluster DNS configuration, and — where a
// NodeCollector can reach the nodes — their kernel state. No Secret is ever read, and every
// byte passes the redaction of redact.go.
package gather

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/progress"
	"github.com/octopus-mcs/octopus/internal/version"
)

// Target is a cluster to gather from.
type Target struct {
	// Config reaches the cluster's API server. Required.
	Config *rest.Config
	// Source says where Config came from (a kubeconfig path), for the index. Required.
	Source string
}

// NodeCollector gathers what only the nodes know — routes, rules, nftables rulesets, tunnel
// devices — which the Kubernetes API does not expose. Where nodes can be reached (the lab:
// internal/lab's NodeState) one is given; elsewhere the index says it was skipped.
type NodeCollector interface {
	// Describe names where the state comes from, for the index.
	Describe() string
	// CollectNodes adds one file per node and kind of state through add (paths relative to
	// the archive's nodes/ directory) and reports what it could not collect through skip. Its
	// error is for a failure to collect anything at all.
	CollectNodes(ctx context.Context, add func(name string, data []byte), skip func(what string, why error)) error
}

// Options configure Run.
type Options struct {
	// Clusters are the member clusters. At least one, or Hub.
	Clusters []Target
	// Hub is the hub's own kubeconfig. Optional: without it the hub's shared objects are read
	// through a cluster's hub credential, which may not read the hub's pods and events.
	Hub *Target
	// HubNamespace is the hub namespace when Hub is given. Optional, default
	// v1alpha1.DefaultHubNamespace.
	HubNamespace string
	// Dir is where the archive is written. Optional, default ".".
	Dir string
	// Nodes collects the nodes' kernel state. Optional.
	Nodes NodeCollector
	// LogLimitBytes bounds each container log taken. Optional, DefaultLogLimitBytes.
	LogLimitBytes int64
	// Now dates the archive. Optional, time.Now.
	Now func() time.Time
	// Progress receives step lines. Optional.
	Progress io.Writer
}

// DefaultLogLimitBytes keeps the archive of a set of long-running components to a size that
// can be attached to an issue, while holding hours of a component's logs at normal verbosity.
const DefaultLogLimitBytes = 5 << 20

// requestTimeout bounds each API request; a log stream gets logTimeout.
const (
	requestTimeout = 10 * time.Second
	logTimeout     = 30 * time.Second
)

// Result is a finished archive.
type Result struct {
	// Path is the archive's file.
	Path string
	// Index is its index.json.
	Index Index
}

// Run writes one archive into opts.Dir and returns where. Whatever cannot be collected is
// listed in the index (Index.Skipped) and does not fail the run; the error is for an archive
// that could not be written.
func Run(ctx context.Context, opts Options) (*Result, error) {
	if len(opts.Clusters) == 0 && opts.Hub == nil {
		return nil, errors.New("nothing to gather: give at least one cluster's kubeconfig (or the hub's)")
	}
	if opts.HubNamespace == "" {
		opts.HubNamespace = v1alpha1.DefaultHubNamespace
	}
	if opts.Dir == "" {
		opts.Dir = "."
	}
	if opts.LogLimitBytes <= 0 {
		opts.LogLimitBytes = DefaultLogLimitBytes
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p := &progress.Reporter{W: opts.Progress}
	begin := opts.Now().UTC()
	name := "octopus-gather-" + begin.Format("20060102T150405Z")
	a, path, err := createArchive(opts.Dir, name, Index{CreatedAt: begin, OctopusVersion: version.Version, Redaction: redactionNote})
	if err != nil {
		return nil, err
	}

	members, hubTarget := connect(ctx, opts, a)
	p.Step("Gathering from the hub (%s) and %d clusters into %s", a.index.Hub, len(members), path)
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Go(func() { m.gather(ctx, opts, a) })
	}
	if hubTarget != nil {
		wg.Go(func() { hubTarget.gather(ctx, opts, a) })
	}
	if opts.Nodes != nil {
		wg.Go(func() {
			err := opts.Nodes.CollectNodes(ctx,
				func(name string, data []byte) { a.add("nodes/"+name, data) },
				func(what string, why error) { a.skip("nodes: "+what, why) })
			if err != nil {
				a.skip("node kernel state ("+opts.Nodes.Describe()+")", err)
			}
		})
	} else {
		a.skip("node kernel state (routes, rules, nftables ruleset, tunnel devices)",
			errors.New("it needs access to the nodes, which the Kubernetes API does not give; `octopus gather --lab-dir DIR` collects it from a lab's nodes"))
	}
	wg.Wait()
	index, err := a.close()
	if err != nil {
		return nil, err
	}
	p.Done(begin, "%d files, %d things skipped (see index.json)", len(index.Files), len(index.Skipped))
	return &Result{Path: path, Index: index}, nil
}

// source is one API server to gather from, the hub or a member, under dir in the archive.
type source struct {
	name, dir string
	c         client.Client
	cs        kubernetes.Interface
	// hubNamespace is the hub namespace, for the hub only.
	hubNamespace string
}

// connect makes the clients, names the clusters by the IDs of their hub credentials, and
// picks how to read the hub: its own kubeconfig, or the first credential found.
func connect(ctx context.Context, opts Options, a *archive) ([]*source, *source) {
	var members []*source
	var hubCfg *rest.Config
	hubNS := opts.HubNamespace
	a.index.Hub = "not reached"
	if opts.Hub != nil {
		hubCfg = tuned(opts.Hub.Config)
		a.index.Hub = "the hub's kubeconfig " + opts.Hub.Source
	}
	used := map[string]bool{}
	for _, t := range opts.Clusters {
		cfg := tuned(t.Config)
		c, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
		if err == nil {
			var cs *kubernetes.Clientset
			cs, err = kubernetes.NewForConfig(cfg)
			if err == nil {
				s := &source{c: c, cs: cs, name: filepath.Base(t.Source)}
				if cred, err := hubaccess.LoadCredential(ctx, c); err == nil {
					s.name = cred.ClusterID
					if hubCfg == nil {
						hubCfg, hubNS = tuned(cred.RESTConfig()), cred.Namespace
						a.index.Hub = cred.ClusterID + "'s hub credential (it may not read the hub's pods and events)"
					}
				} else {
					a.skip("the hub credential of "+t.Source, err)
				}
				for used[s.name] {
					s.name += "_"
				}
				used[s.name] = true
				s.dir = "clusters/" + s.name + "/"
				members = append(members, s)
				a.index.Clusters = append(a.index.Clusters, ClusterSource{Name: s.name, Kubeconfig: t.Source, Server: cfg.Host})
				continue
			}
		}
		a.skip("cluster "+t.Source, err)
	}
	if hubCfg == nil {
		a.skip("the hub", errors.New("no cluster has a hub credential and no --hub-kubeconfig was given"))
		return members, nil
	}
	c, err := client.New(hubCfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		a.skip("the hub", err)
		return members, nil
	}
	cs, err := kubernetes.NewForConfig(hubCfg)
	if err != nil {
		a.skip("the hub", err)
		return members, nil
	}
	return members, &source{name: "hub", dir: "hub/", c: c, cs: cs, hubNamespace: hubNS}
}

// tuned copies cfg with a timeout per request, so that an API server that does not answer
// costs seconds, and without client-side throttling: a run lists a few dozen kinds at once.
func tuned(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	if cfg.Timeout == 0 || cfg.Timeout > requestTimeout {
		cfg.Timeout = requestTimeout
	}
	cfg.QPS, cfg.Burst = -1, 0
	return cfg
}

func (s *source) gather(ctx context.Context, opts Options, a *archive) {
	if s.hubNamespace != "" {
		s.gatherHub(ctx, opts, a)
		return
	}
	s.gatherMember(ctx, opts, a)
}

func describe(s *source, what string) string { return fmt.Sprintf("%s: %s", s.name, what) }
