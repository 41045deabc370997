package main

import (
	"testing"

	"github.com/octopus-mcs/octopus/internal/agent"
	"github.com/octopus-mcs/octopus/internal/gateway"
	"github.com/octopus-mcs/octopus/internal/routeagent"
)

// TestNodePortsDiffer: the TCP ports octopus-agent's components listen on by default are
// distinct, since a gateway node runs the gateway and the route agent in its network
// namespace (and a cluster's controller may run there too). Two equal defaults make whichever
// component starts second fail to listen, at random.
func TestNodePortsDiffer(t *testing.T) {
	ports := map[string]int{
		"gateway metrics":     gateway.DefaultMetricsPort,
		"gateway liveness":    gateway.DefaultLivenessPort,
		"route agent metrics": routeagent.DefaultMetricsPort,
		"route agent health":  routeagent.DefaultHealthPort,
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
