// Command octopus-dns imports the embedded CRDs.
package main

import _ "github.com/octopus-mcs/octopus/config/crd"

func main() {}
