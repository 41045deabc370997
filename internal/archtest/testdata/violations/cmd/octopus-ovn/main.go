// Command octopus-ovn links rendered manifests through the ovnmaster.
package main

import _ "github.com/octopus-mcs/octopus/internal/ovn/ovnmaster"

func main() {}
