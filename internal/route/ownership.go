// Package route keeps a node's routes to remote clusters pointing at the active gateway. The
// kernel side (Table) takes a desired set of routes and applies it; the Kubernetes side
// (Agent) learns that set from the member cluster alone, so nodes need no hub credential.
package route

// Ownership markers of the routes the route agent writes, in one place: the agent
// lists, replaces and deletes only routes that carry both, so it never touches a route someone
// else made, and it finds its own again after a restart by reading the kernel.
const (
	// Protocol is the rtm_protocol of our routes (`ip route show proto 212`). 212 is unused by
	// the kernel and the routing daemons of /etc/iproute2/rt_protos, and differs from the lab's
	// own 211 (labnet.RouteProtocol), so the lab and the agent never take each other's routes.
	Protocol = 212
	// Metric is the priority of our routes. A route is identified by (table, dst, tos, metric):
	// with a metric of our own, RouteReplace can never overwrite someone else's route to the
	// same destination (say the tunnel driver's on the gateway node, metric 0), and theirs, being
	// more specific in preference, keeps winning where both exist.
	Metric = 212
	// TableMain is where our routes live: pods' traffic is routed by the main table, and a
	// table of our own would need an ip rule, one more thing to own.
	TableMain = 254
)
