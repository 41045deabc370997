package diagnose

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// env is what the checks of one run share: the clusters, the hub and the facts fetched from
// them.
type env struct {
	opts    Options
	members []*member
	hub     *hubView
}

// member is one cluster under diagnosis.
type member struct {
	source string
	cfg    *rest.Config
	c      client.Client
	disc   discovery.DiscoveryInterface

	// id is the cluster ID from its hub credential, or "" when that could not be read.
	id      string
	cred    *fact[hubaccess.Credential]
	hubc    *fact[client.Client]
	version *fact[*version.Info]
	offset  *fact[interval]
}

// name is how findings name the cluster: its ID, or its kubeconfig when the ID is unknown.
func (m *member) name() string {
	if m.id != "" {
		return m.id
	}
	return m.source
}

// rejoin is the command that re-registers the cluster: join resumes, so re-running it
// repairs the credential, the registration and the CoreDNS block without losing anything.
func (m *member) rejoin() string {
	id := m.id
	if id == "" {
		id = "ID"
	}
	return fmt.Sprintf("octopus join BROKER-INFO --cluster-id %s --kubeconfig %s", id, m.source)
}

// hubView is the hub as the run reaches it: through the hub's own kubeconfig when given,
// otherwise through the clusters' credentials (which can read Clusters, Peers and Leases in
// the hub namespace, see internal/manifests/render/hubrbac.go).
type hubView struct {
	// admin is the hub's own kubeconfig; nil without Options.Hub.
	admin *rest.Config
	// reader reads the hub namespace; its first successful read lists the Clusters.
	reader *fact[hubReader]
	peers  *fact[[]v1alpha1.Peer]
	// leases are the Leases in the hub namespace: the clusters' heartbeats and the hub
	// gateway's election.
	leases *fact[[]coordinationv1.Lease]
	// configs are the hub configurations known before anything is read: the admin one, then
	// every cluster credential's; the hub's version and clock are read through the first that
	// answers.
	version *fact[*version.Info]
	offset  *fact[interval]
}

// hubReader is a working client of the hub namespace.
type hubReader struct {
	c         client.Client
	cfg       *rest.Config
	namespace string
	// via says whose access it is, for messages: "the hub's kubeconfig" or "cluster1's
	// credential".
	via      string
	clusters []v1alpha1.Cluster
}

func newEnv(ctx context.Context, opts Options) (*env, error) {
	e := &env{opts: opts}
	for _, t := range opts.Clusters {
		m, err := e.newMember(ctx, t)
		if err != nil {
			return nil, err
		}
		e.members = append(e.members, m)
	}
	e.hub = &hubView{}
	if opts.Hub != nil {
		e.hub.admin = e.tuned(opts.Hub.Config)
	}
	e.hub.reader = newFact(ctx, opts.RequestTimeout, e.findHubReader)
	e.hub.peers = newFact(ctx, opts.RequestTimeout, func(ctx context.Context) ([]v1alpha1.Peer, error) {
		r, err := e.hub.reader.get(ctx)
		if err != nil {
			return nil, err
		}
		list := &v1alpha1.PeerList{}
		if err := r.c.List(ctx, list, client.InNamespace(r.namespace)); err != nil {
			return nil, fmt.Errorf("listing Peers on the hub with %s: %w", r.via, err)
		}
		return list.Items, nil
	})
	e.hub.leases = newFact(ctx, opts.RequestTimeout, func(ctx context.Context) ([]coordinationv1.Lease, error) {
		r, err := e.hub.reader.get(ctx)
		if err != nil {
			return nil, err
		}
		list := &coordinationv1.LeaseList{}
		if err := r.c.List(ctx, list, client.InNamespace(r.namespace)); err != nil {
			return nil, fmt.Errorf("listing Leases on the hub with %s: %w", r.via, err)
		}
		return list.Items, nil
	})
	e.hub.version = newFact(ctx, opts.RequestTimeout, func(ctx context.Context) (*version.Info, error) {
		r, err := e.hub.reader.get(ctx)
		if err != nil {
			return nil, err
		}
		return serverVersion(r.cfg)
	})
	e.hub.offset = newFact(ctx, clockTimeout, func(ctx context.Context) (interval, error) {
		cfg, err := e.hubConfig(ctx)
		if err != nil {
			return interval{}, err
		}
		return e.measureOffset(ctx, cfg)
	})
	return e, nil
}

func (e *env) newMember(ctx context.Context, t Target) (*member, error) {
	cfg := e.tuned(t.Config)
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		return nil, fmt.Errorf("client for %s (%s): %w", t.Source, cfg.Host, err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client for %s (%s): %w", t.Source, cfg.Host, err)
	}
	m := &member{source: t.Source, cfg: cfg, c: c, disc: disc}
	timeout := e.opts.RequestTimeout
	m.cred = newFact(ctx, timeout, func(ctx context.Context) (hubaccess.Credential, error) { return hubaccess.LoadCredential(ctx, c) })
	m.hubc = newFact(ctx, timeout, func(ctx context.Context) (client.Client, error) {
		cred, err := m.cred.get(ctx)
		if err != nil {
			return nil, err
		}
		return client.New(e.tuned(cred.RESTConfig()), client.Options{Scheme: kube.Scheme})
	})
	m.version = newFact(ctx, timeout, func(context.Context) (*version.Info, error) { return disc.ServerVersion() })
	m.offset = newFact(ctx, clockTimeout, func(ctx context.Context) (interval, error) { return e.measureOffset(ctx, cfg) })
	return m, nil
}

// identify reads every cluster's ID from its credential, concurrently, before the checks run,
// so that findings can be named and sorted by cluster.
func (e *env) identify(ctx context.Context) {
	done := make(chan struct{}, len(e.members))
	for _, m := range e.members {
		go func() {
			if cred, err := m.cred.get(ctx); err == nil {
				m.id = cred.ClusterID
			}
			done <- struct{}{}
		}()
	}
	for range e.members {
		<-done
	}
}

// findHubReader finds a working way to read the hub namespace: the hub's kubeconfig, else
// each cluster's credential in turn. An error that another credential would meet just the
// same (the hub not answering) ends the search at once.
func (e *env) findHubReader(ctx context.Context) (hubReader, error) {
	type candidate struct {
		cfg       *rest.Config
		namespace string
		via       string
	}
	var candidates []candidate
	if e.hub.admin != nil {
		candidates = append(candidates, candidate{e.hub.admin, e.opts.HubNamespace, hubKubeconfig})
	}
	var errs []error
	for _, m := range e.members {
		cred, err := m.cred.get(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.name(), err))
			continue
		}
		candidates = append(candidates, candidate{e.tuned(cred.RESTConfig()), cred.Namespace, m.name() + "'s credential"})
	}
	for _, cand := range candidates {
		c, err := client.New(cand.cfg, client.Options{Scheme: kube.Scheme})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", cand.via, err))
			continue
		}
		list := &v1alpha1.ClusterList{}
		err = c.List(ctx, list, client.InNamespace(cand.namespace))
		if err == nil {
			return hubReader{c: c, cfg: cand.cfg, namespace: cand.namespace, via: cand.via, clusters: list.Items}, nil
		}
		err = fmt.Errorf("listing Clusters on the hub (%s) with %s: %w", cand.cfg.Host, cand.via, err)
		if !isAPIStatus(err) {
			return hubReader{}, err
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return hubReader{}, errors.New("no way to reach the hub: no cluster has a hub credential and no --hub-kubeconfig was given")
	}
	return hubReader{}, errors.Join(errs...)
}

// hubConfig returns a configuration that reaches the hub's API server, for its clock: the
// hub's kubeconfig, else any cluster's credential (a rejected token still gets an answer with
// a Date header).
func (e *env) hubConfig(ctx context.Context) (*rest.Config, error) {
	if e.hub.admin != nil {
		return e.hub.admin, nil
	}
	var errs []error
	for _, m := range e.members {
		cred, err := m.cred.get(ctx)
		if err == nil {
			return e.tuned(cred.RESTConfig()), nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", m.name(), err))
	}
	return nil, fmt.Errorf("no way to reach the hub: %w", errors.Join(errs...))
}

// tuned copies cfg with the run's client settings: a per-request timeout, so an API server
// that does not answer costs seconds, not minutes, and no client-side throttling, since a
// run sends a few dozen requests in a burst.
func (e *env) tuned(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	if cfg.Timeout == 0 || cfg.Timeout > e.opts.RequestTimeout {
		cfg.Timeout = e.opts.RequestTimeout
	}
	cfg.QPS, cfg.Burst = -1, 0
	return cfg
}

func serverVersion(cfg *rest.Config) (*version.Info, error) {
	d, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return d.ServerVersion()
}

// isAPIStatus reports whether err is an answer of the API server (401, 403, 404, ...), as
// opposed to no answer at all.
func isAPIStatus(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status)
}

// hostOf returns the host:port of an API server URL, for messages.
func hostOf(server string) string {
	u, err := url.Parse(server)
	if err != nil || u.Host == "" {
		return server
	}
	return u.Host
}
