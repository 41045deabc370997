// Package gateway runs in clusters and imports the lab.
package gateway

import _ "github.com/octopus-mcs/octopus/internal/lab"
