// Package version holds the version of the Octopus binaries.
package version

// Version is set at build time with
// -ldflags "-X github.com/octopus-mcs/octopus/internal/version.Version=v0.1.0".
var Version = "dev"
