// Package cli may import the lab.
package cli

import _ "github.com/octopus-mcs/octopus/internal/lab"
