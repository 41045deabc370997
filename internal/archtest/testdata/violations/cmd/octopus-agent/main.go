// Command octopus-agent links join code through the package that wires it.
package main

import _ "github.com/octopus-mcs/octopus/internal/agent"

func main() {}
