// Command coredns is stock CoreDNS v1.15.0 with the plugins of kubeadm's default Corefile (and
// log): the cluster DNS the lab deploys in every member cluster, as kubeadm does. Only the
// plugin set is smaller than upstream's binary (core/plugin pulls every cloud SDK); the
// server, the plugins and their order (dnsserver.Directives) are CoreDNS's own.
package main

import (
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() {
	coremain.Run()
}
