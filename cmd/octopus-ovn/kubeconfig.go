package main

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The client-side rate limits towards the cluster's API server. client-go's default (5 QPS,
// burst 10) is for occasional tools: the ovnmaster patches every new pod with its address, so
// a burst of 50 pods got its last address some 8 s after the first, and the NRI plugin, which
// reads each starting pod until it has one, waited on the same budget. 50/100 as the agent's
// controller (internal/agent/controller.go says why a limit is kept at all).
const (
	kubeAPIQPS   float32 = 50
	kubeAPIBurst int     = 100
)

// memberConfig loads the cluster's client configuration from kubeconfig (empty: the
// in-cluster one) with the daemons' rate limits.
func memberConfig(kubeconfig string) (*rest.Config, error) {
	c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading the cluster's configuration (outside a cluster, pass --kubeconfig): %w", err)
	}
	c.QPS, c.Burst = kubeAPIQPS, kubeAPIBurst
	return c, nil
}
