// Package operator imports the CLI, which links the lab, and diagnose, a tool of the CLI.
package operator

import (
	_ "github.com/octopus-mcs/octopus/internal/cli"
	_ "github.com/octopus-mcs/octopus/internal/diagnose"
)
