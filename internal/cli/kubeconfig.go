package cli

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/internal/kube"
)

// kubeconfigFlags select a cluster the way kubectl does.
type kubeconfigFlags struct {
	path    string
	context string
}

func (k *kubeconfigFlags) addFlags(fs *pflag.FlagSet, which string) {
	fs.StringVar(&k.path, "kubeconfig", "", "kubeconfig of the "+which+" (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&k.context, "context", "", "kubeconfig context to use (default: the current context)")
}

func (k *kubeconfigFlags) restConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: k.context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w (pass --kubeconfig, or select a context with --context)", err)
	}
	return cfg, nil
}

// client connects to the selected cluster with the scheme of Octopus's and the MCS API's
// types; its config comes along for messages that name the cluster (cfg.Host).
func (k *kubeconfigFlags) client() (client.Client, *rest.Config, error) {
	cfg, err := k.restConfig()
	if err != nil {
		return nil, nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to %s: %w", cfg.Host, err)
	}
	return c, cfg, nil
}

// loadKubeconfig reads the kubeconfig at path and returns its current context's
// configuration: commands that take one --kubeconfig per cluster use each file's own context.
func loadKubeconfig(path string) (*rest.Config, error) {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w (check the path and its current context)", path, err)
	}
	return cfg, nil
}

// duplicateKubeconfigs lists the --kubeconfig paths given more than once.
func duplicateKubeconfigs(paths []string) []string {
	seen := map[string]bool{}
	var dups []string
	for _, p := range paths {
		if seen[p] {
			dups = append(dups, fmt.Sprintf("--kubeconfig %s is given twice", p))
		}
		seen[p] = true
	}
	return dups
}
