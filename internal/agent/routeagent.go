package agent

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"github.com/octopus-mcs/octopus/internal/route"
	"github.com/octopus-mcs/octopus/internal/route/routeagent"
)

// RouteAgentOptions configures RunRouteAgent.
type RouteAgentOptions struct {
	// Member is the client configuration of the member cluster. Required.
	Member *rest.Config
	// NodeName is the node the agent runs on. Required.
	NodeName string
	// ResyncInterval: see routeagent.DefaultResyncInterval. Optional.
	ResyncInterval time.Duration
	// Log receives what the agent and its route table do. Optional.
	Log logr.Logger
}

// RunRouteAgent runs the route agent of `octopus-agent route-agent` until ctx is done: the
// routeagent controller, applying its routes to the kernel's main table of the network
// namespace the process runs in. The routes stay when it returns.
func RunRouteAgent(ctx context.Context, o RouteAgentOptions) error {
	table, err := route.NewTable(route.TableOptions{Log: o.Log})
	if err != nil {
		return err
	}
	defer table.Close()
	return routeagent.Run(ctx, routeagent.Options{
		Member: o.Member, NodeName: o.NodeName, Routes: table, ResyncInterval: o.ResyncInterval, Log: o.Log,
	})
}
