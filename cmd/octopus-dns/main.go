// Command octopus-dns is CoreDNS with a small plugin set and the crossdns plugin: the server
// each member cluster runs for clusterset.local, to which the cluster's own CoreDNS forwards
// that zone. Flags and the Corefile are CoreDNS's own (-conf, -dns.port, -plugins, -version).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/metrics"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"

	"github.com/octopus-mcs/octopus/internal/memlimit"
	_ "github.com/octopus-mcs/octopus/pkg/crossdns"
)

// Directives are the plugins octopus-dns knows, in the order CoreDNS runs them (the relative
// order of CoreDNS's own plugin.cfg), with crossdns where the kubernetes plugin sits: after
// cache, so that cached answers skip the index, and before forward, so that `fallthrough` can
// hand names on. bind is there so that the server can listen on chosen addresses only.
var Directives = []string{
	"reload",
	"bind",
	"ready",
	"health",
	"prometheus",
	"errors",
	"log",
	"cache",
	"crossdns",
	"forward",
}

func main() {
	// Replacing the list (rather than inserting into CoreDNS's) leaves out every plugin this
	// binary does not compile in, so a Corefile naming one fails at startup, not at query time.
	dnsserver.Directives = Directives
	// Like CoreDNS's own deployments, octopus-dns runs with a memory limit: collect garbage
	// harder near it rather than be killed at it.
	if limit, err := memlimit.Set(memlimit.DefaultRatio); err != nil {
		clog.Warningf("Could not read the cgroup memory limit, running without a soft memory limit (set GOMEMLIMIT to choose one): %v", err)
	} else if limit > 0 {
		clog.Infof("Go soft memory limit set to %d bytes, %g of the cgroup's", limit, memlimit.DefaultRatio)
	}
	coremain.Run()
}
