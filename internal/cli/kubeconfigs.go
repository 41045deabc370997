package cli

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

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
