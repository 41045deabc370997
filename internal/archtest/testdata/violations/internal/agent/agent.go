// Package agent imports join code.
package agent

import _ "github.com/octopus-mcs/octopus/internal/cluster"
