package cli

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/octopus-mcs/octopus/internal/workload"
)

// workloadFlags are the flags of the commands that run temporary pods in several joined
// clusters (verify, bench): one kubeconfig per cluster, the namespace, the deadlines and the
// output format.
type workloadFlags struct {
	kubeconfigs  []string
	namespace    string
	timeout      time.Duration
	readyTimeout time.Duration
	output       outputFormat

	// clusters are the loaded kubeconfigs, set by Complete.
	clusters []workload.Cluster
}

func (w *workloadFlags) addFlags(f *pflag.FlagSet, command string, timeout, readyTimeout time.Duration) {
	f.StringArrayVar(&w.kubeconfigs, "kubeconfig", nil, "kubeconfig of a joined cluster; give it once per cluster (at least two)")
	f.StringVar(&w.namespace, "namespace", "", fmt.Sprintf("namespace to create for the pods in every cluster (default octopus-%s-<random>)", command))
	f.DurationVar(&w.timeout, "timeout", timeout, "deadline of the whole run")
	f.DurationVar(&w.readyTimeout, "ready-timeout", readyTimeout, "time to wait for the pods, and then for the service imports")
	w.output.addFlag(f)
}

// Complete loads the kubeconfigs, each with its current context.
func (w *workloadFlags) Complete([]string) error {
	w.clusters = nil
	for _, path := range w.kubeconfigs {
		cfg, err := loadKubeconfig(path)
		if err != nil {
			return err
		}
		w.clusters = append(w.clusters, workload.Cluster{Config: cfg, Source: path})
	}
	return nil
}

// validate returns what is wrong with the flags, one message each; what is the command's
// job ("verify checks", "bench measures").
func (w *workloadFlags) validate(what string) []string {
	var errs []string
	if len(w.kubeconfigs) < 2 {
		errs = append(errs, fmt.Sprintf("%s between clusters: pass --kubeconfig at least twice (got %d)", what, len(w.kubeconfigs)))
	}
	errs = append(errs, duplicateKubeconfigs(w.kubeconfigs)...)
	if err := w.output.validate(); err != nil {
		errs = append(errs, err.Error())
	}
	if w.namespace != "" {
		if msgs := validation.IsDNS1123Label(w.namespace); len(msgs) > 0 {
			errs = append(errs, fmt.Sprintf("--namespace %q: %s", w.namespace, strings.Join(msgs, "; ")))
		}
	}
	return append(errs, positiveDurations(map[string]time.Duration{"--timeout": w.timeout, "--ready-timeout": w.readyTimeout})...)
}

// positiveDurations returns a message for each flag whose duration is not positive, ordered
// by flag name.
func positiveDurations(flags map[string]time.Duration) []string {
	var errs []string
	for name, d := range flags {
		if d <= 0 {
			errs = append(errs, fmt.Sprintf("%s %s: want a positive duration", name, d))
		}
	}
	slices.Sort(errs)
	return errs
}
