package cli

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
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
