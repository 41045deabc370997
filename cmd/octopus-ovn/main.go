// Command octopus-ovn runs the components of the OVN secondary network, in a binary of their
// own so that octopus-agent never links libovsdb: the ovnmaster (`octopus-ovn master`) and the
// node's NRI plugin (`octopus-ovn nri`) and the gateway nodes' interface on the switch
// (`octopus-ovn gateway-port`).
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
