// Command octopus-operator links the CLI through the operator.
package main

import _ "github.com/octopus-mcs/octopus/internal/operator"

func main() {}
