// Package operator imports the CLI, which links the lab.
package operator

import _ "github.com/octopus-mcs/octopus/internal/cli"
