// Package release installs, upgrades and uninstalls the embedded charts (charts/) through the
// Helm SDK, against an API server given as a rest.Config: `octopus hub deploy --install charts`
// and `octopus join --agent charts` install them, `octopus leave` uninstalls. A release is
// named after its chart and its history is kept as Helm keeps it (Secrets in the release's
// namespace), so `helm list`, `helm upgrade` and `helm uninstall` manage what the CLI
// installed, and the other way round.
package release

import (
	"context"
	"errors"
	"fmt"
	"time"

	"helm.sh/helm/v4/pkg/action"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/kube"
	ri "helm.sh/helm/v4/pkg/release"
	rv1 "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/octopus-mcs/octopus/charts"
)

// DefaultTimeout bounds an install, an upgrade or an uninstall, waiting included.
const DefaultTimeout = 5 * time.Minute

// Options say which chart to install where.
type Options struct {
	// Chart is charts.Hub or charts.Member; the release has its name. Required.
	Chart string
	// Namespace is the release's, created if missing. Required.
	Namespace string
	// AppVersion is the image tag the chart defaults to. Optional: the chart's appVersion.
	AppVersion string
	// Values override the chart's values.yaml; values.schema.json checks them.
	Values map[string]any
	// Wait waits until every workload is ready (Helm's status watcher).
	Wait bool
	// Timeout: DefaultTimeout if zero.
	Timeout time.Duration
}

// Install installs o.Chart, or upgrades its release if it exists (helm upgrade --install), with
// server-side apply. It returns the release's revision.
func Install(ctx context.Context, cfg *rest.Config, o Options) (int, error) {
	c, ac, err := prepare(cfg, o, "installing a chart")
	if err != nil {
		return 0, err
	}
	timeout, wait := o.timing()
	_, err = action.NewHistory(ac).Run(o.Chart)
	switch {
	case errors.Is(err, driver.ErrReleaseNotFound):
		in := action.NewInstall(ac)
		in.ReleaseName, in.Namespace, in.CreateNamespace = o.Chart, o.Namespace, true
		in.WaitStrategy, in.Timeout = wait, timeout
		// The release's objects live in Octopus's own namespaces under Octopus's names: one an
		// earlier `octopus join` applied itself (octopus-dns, before the member chart carried
		// it) becomes the release's, fields and all, as `helm install --take-ownership
		// --force-conflicts` does, instead of failing the install until the cluster leaves and
		// joins again.
		in.TakeOwnership, in.ForceConflicts = true, true
		rel, err := in.RunWithContext(ctx, c, o.Values)
		if err != nil {
			return 0, fmt.Errorf("installing chart %s in namespace %s: %w", o.Chart, o.Namespace, err)
		}
		return revision(rel)
	case err != nil:
		return 0, fmt.Errorf("reading the history of release %s in namespace %s: %w", o.Chart, o.Namespace, err)
	}
	up := action.NewUpgrade(ac)
	up.Namespace, up.WaitStrategy, up.Timeout = o.Namespace, wait, timeout
	up.ServerSideApply = "true"
	rel, err := up.RunWithContext(ctx, o.Chart, c, o.Values)
	if err != nil {
		return 0, fmt.Errorf("upgrading release %s in namespace %s: %w", o.Chart, o.Namespace, err)
	}
	return revision(rel)
}

// Upgrade upgrades the existing release of o.Chart to the embedded chart with o.AppVersion,
// keeping the values it was installed or last upgraded with and merging o.Values over them,
// as `helm upgrade --reuse-values --set ...` does: a new image is one value (image.tag) away,
// and the settings a user gave at install stay. A release that is not there is an error:
// there is nothing to upgrade. It returns the new revision.
func Upgrade(ctx context.Context, cfg *rest.Config, o Options) (int, error) {
	c, ac, err := prepare(cfg, o, "upgrading a release")
	if err != nil {
		return 0, err
	}
	up := action.NewUpgrade(ac)
	up.Namespace, up.ReuseValues = o.Namespace, true
	up.Timeout, up.WaitStrategy = o.timing()
	up.ServerSideApply = "true"
	rel, err := up.RunWithContext(ctx, o.Chart, c, o.Values)
	if err != nil {
		return 0, fmt.Errorf("upgrading release %s in namespace %s: %w", o.Chart, o.Namespace, err)
	}
	return revision(rel)
}

// prepare checks o and loads its chart and a Helm configuration for its namespace; what names
// the action in the error of a missing field.
func prepare(cfg *rest.Config, o Options, what string) (*chart.Chart, *action.Configuration, error) {
	if o.Chart == "" || o.Namespace == "" {
		return nil, nil, fmt.Errorf("%s: the chart and the namespace are required", what)
	}
	c, err := charts.Load(o.Chart, o.AppVersion)
	if err != nil {
		return nil, nil, err
	}
	ac, err := configuration(cfg, o.Namespace)
	if err != nil {
		return nil, nil, err
	}
	return c, ac, nil
}

// timing is how long an install or upgrade may take (DefaultTimeout unless o.Timeout says)
// and what it waits for: its hooks only, or with o.Wait every object ready.
func (o Options) timing() (time.Duration, kube.WaitStrategy) {
	timeout, wait := o.Timeout, kube.HookOnlyStrategy
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if o.Wait {
		wait = kube.StatusWatcherStrategy
	}
	return timeout, wait
}

// Uninstall removes the release of chart from namespace with every object it installed, and
// waits until they are gone; a release that is not there is no error.
func Uninstall(ctx context.Context, cfg *rest.Config, chart, namespace string, timeout time.Duration) error {
	ac, err := configuration(cfg, namespace)
	if err != nil {
		return err
	}
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	un := action.NewUninstall(ac)
	un.IgnoreNotFound, un.WaitStrategy, un.Timeout = true, kube.StatusWatcherStrategy, timeout
	if _, err := un.Run(chart); err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return fmt.Errorf("uninstalling release %s from namespace %s: %w", chart, namespace, err)
	}
	_ = ctx // Uninstall.Run takes no context; its Timeout bounds it.
	return nil
}

// Deployed is the current revision of a release and the values it was installed with.
type Deployed struct {
	Revision int
	// Values are the values given at install or upgrade, not the chart's defaults.
	Values map[string]any
}

// Current reads the release of chart in namespace without changing anything, so that a caller
// that converges on desired values (the operator) upgrades only when they differ. It returns
// nil when there is no release.
func Current(cfg *rest.Config, chart, namespace string) (*Deployed, error) {
	ac, err := configuration(cfg, namespace)
	if err != nil {
		return nil, err
	}
	rel, err := action.NewGet(ac).Run(chart)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading release %s in namespace %s: %w", chart, namespace, err)
	}
	switch r := rel.(type) {
	case *rv1.Release:
		return &Deployed{Revision: r.Version, Values: r.Config}, nil
	case rv1.Release:
		return &Deployed{Revision: r.Version, Values: r.Config}, nil
	}
	return nil, fmt.Errorf("reading release %s in namespace %s: unexpected release type %T", chart, namespace, rel)
}

func revision(rel ri.Releaser) (int, error) {
	acc, err := ri.NewAccessor(rel)
	if err != nil {
		return 0, fmt.Errorf("reading the release: %w", err)
	}
	return acc.Version(), nil
}

// configuration is Helm's action configuration for the API server of cfg, with releases
// stored as Secrets in namespace (Helm's default).
func configuration(cfg *rest.Config, namespace string) (*action.Configuration, error) {
	ac := action.NewConfiguration()
	if err := ac.Init(&restGetter{cfg: cfg, namespace: namespace}, namespace, "secret"); err != nil {
		return nil, fmt.Errorf("connecting Helm to the API server %s: %w", cfg.Host, err)
	}
	return ac, nil
}

// restGetter gives Helm the API server of a rest.Config: the CLI and the lab hold rest.Configs,
// not kubeconfig files.
type restGetter struct {
	cfg       *rest.Config
	namespace string
}

func (g *restGetter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(g.cfg), nil }

func (g *restGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(rest.CopyConfig(g.cfg))
	if err != nil {
		return nil, err
	}
	return memory.NewMemCacheClient(dc), nil
}

func (g *restGetter) ToRESTMapper() (meta.RESTMapper, error) {
	dc, err := g.ToDiscoveryClient()
	if err != nil {
		return nil, err
	}
	// Reset on a miss: the hub chart installs CRDs that later objects may need mapped.
	return restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(dc), dc, nil), nil
}

func (g *restGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return clientcmd.NewDefaultClientConfig(*clientcmdapi.NewConfig(), &clientcmd.ConfigOverrides{
		Context: clientcmdapi.Context{Namespace: g.namespace},
	})
}
