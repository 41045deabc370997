package realnode

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/octopus-mcs/octopus/internal/nrilog"
)

// envPluginName and envPluginIdx register the lab's own NRI plugin (envPlugin); plugins of
// tests and of the product use other names, and a higher index runs after it.
const (
	envPluginName = "octopus-lab-env"
	envPluginIdx  = "10"
)

// EnvCluster is set in every lab container (by envPlugin, from the lab's ContainerEnv) to the
// name of the cluster it runs in: the echo server (cmd/octopus-echo) reports it, so that tests
// see which cluster answered.
const EnvCluster = "OCTOPUS_LAB_CLUSTER"

// envPlugin is the lab's NRI plugin on every real node: it adds the node's ContainerEnv to
// every container (EnvCluster tells the echo server which cluster it runs in), without
// anything in the pods' manifests. It runs in the
// `lab up` process, connected to the node's NRI socket, for as long as the node's containerd
// runs.
type envPlugin struct {
	env map[string]string
}

func (p envPlugin) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adjust := &api.ContainerAdjustment{}
	for _, k := range slices.Sorted(maps.Keys(p.env)) {
		adjust.AddEnv(k, p.env[k])
	}
	return adjust, nil, nil
}

// startEnvPlugin registers envPlugin with the node's containerd before its kubelet starts,
// so that every container of the node gets env. A container is not created without it
// (FailRequest): an echo server that cannot say its cluster would fail tests far from here.
func (n *Node) startEnvPlugin(ctx context.Context, env map[string]string) error {
	if len(env) == 0 {
		return nil
	}
	s, err := stub.New(envPlugin{env: env},
		stub.WithPluginName(envPluginName), stub.WithPluginIdx(envPluginIdx), stub.WithSocketPath(n.NRISocket()),
		stub.WithFailurePolicy(&api.FailurePolicy{FailRequest: true, KeepConnected: true}),
		stub.WithLogger(nrilog.New(n.opts.Log.WithName("nri"))))
	if err != nil {
		return fmt.Errorf("the lab's NRI plugin: %w", err)
	}
	// The plugin lives as long as the connection: containerd's exit ends it. Not the
	// caller's context, which may end with `lab up`'s start.
	if err := s.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("registering the lab's NRI plugin at %s: %w", n.NRISocket(), err)
	}
	return nil
}
