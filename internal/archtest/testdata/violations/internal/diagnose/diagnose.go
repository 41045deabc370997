// Package diagnose stands in for `octopus diagnose`, a tool of the CLI.
package diagnose
