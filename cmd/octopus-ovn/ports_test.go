package main

import (
	"testing"

	"github.com/octopus-mcs/octopus/internal/agent"
	"github.com/octopus-mcs/octopus/internal/gateway"
	"github.com/octopus-mcs/octopus/internal/routeagent"
	"github.com/octopus-mcs/octopus/internal/secondarynet/gatewayuplink"
	"github.com/octopus-mcs/octopus/internal/secondarynet/nriplugin"
)

// TestNodePortsDiffer: the components that listen in a node's network namespace by default —
// octopus-ovn's NRI plugin (every node) and gateway port (gateway nodes) beside octopus-agent's
// route agent (every node) and gateway (gateway nodes), and the agent's controller, which may
// run there too — use distinct ports. Two equal defaults make whichever component starts second
// fail to listen, at random. One test for both binaries: their ports share the nodes.
func TestNodePortsDiffer(t *testing.T) {
	ports := map[string]int{
		"gateway metrics":     gateway.DefaultMetricsPort,
		"gateway liveness":    gateway.DefaultLivenessPort,
		"route agent metrics": routeagent.DefaultMetricsPort,
		"route agent health":  routeagent.DefaultHealthPort,
		"gateway port health": gatewayuplink.DefaultHealthPort,
		"NRI plugin metrics":  nriplugin.DefaultMetricsPort,
		"NRI plugin health":   nriplugin.DefaultHealthPort,
		"controller metrics":  agent.DefaultMetricsPort,
	}
	seen := map[int]string{}
	for what, port := range ports {
		if other, dup := seen[port]; dup {
			t.Errorf("%s and %s both default to port %d", what, other, port)
		}
		seen[port] = what
	}
}
