// Command coredns is stock CoreDNS v1.15.0 with every plugin it ships, built from this pinned
// wrapper module (not the main go.mod) as the baseline of the crossdns benchmark: it serves the
// same records from its file plugin. The main function is CoreDNS's own coredns.go.
package main

import (
	_ "github.com/coredns/coredns/core/plugin" // every in-tree plugin, as the stock binary
	"github.com/coredns/coredns/coremain"
)

func main() {
	coremain.Run()
}
