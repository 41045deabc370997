package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"helm.sh/helm/v4/pkg/strvals"
	"k8s.io/client-go/rest"

	"github.com/octopus-mcs/octopus/internal/manifests/release"
	"github.com/octopus-mcs/octopus/internal/version"
)

// chartFlags are the flags of the commands that install an embedded chart (charts/).
type chartFlags struct {
	set  []string
	wait bool
}

func (f *chartFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringArrayVar(&f.set, "set", nil, "with the chart: a value of the chart as helm --set takes it, e.g. gateway.backend=vxlan (repeatable)")
	fs.BoolVar(&f.wait, "wait", false, "with the chart: wait until its workloads are ready")
}

// install installs or upgrades chart in namespace, its image tagged with this CLI's version,
// with values (nil: none) under the --set ones, and prints the release's revision.
func (f *chartFlags) install(ctx context.Context, s IOStreams, cfg *rest.Config, chart, namespace string, values map[string]any) error {
	if values == nil {
		values = map[string]any{}
	}
	for _, kv := range f.set {
		if err := strvals.ParseInto(kv, values); err != nil {
			return fmt.Errorf("--set %s: %w", kv, err)
		}
	}
	start := time.Now()
	rev, err := release.Install(ctx, cfg, release.Options{
		Chart: chart, Namespace: namespace, AppVersion: version.Version, Values: values, Wait: f.wait,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(s.Out, "Chart %s installed in namespace %s (revision %d, %.1fs); helm list -n %s shows it.\n",
		chart, namespace, rev, time.Since(start).Seconds(), namespace)
	return nil
}
