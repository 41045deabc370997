package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// envPrefix starts the environment variable of every flag: OCTOPUS_HEARTBEAT_INTERVAL sets
// --heartbeat-interval. The charts configure the components through the environment (their
// ConfigMap's keys, charts/octopus-member/templates/config.yaml), so that a setting is one key
// whatever component reads it.
const envPrefix = "OCTOPUS_"

// envName is the environment variable of the flag name.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// flagsFromEnv sets every flag of fs not given on the command line from its environment
// variable, if lookup finds one; the command line wins.
func flagsFromEnv(fs *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			return
		}
		v, ok := lookup(envName(f.Name))
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("$%s: %w", envName(f.Name), err))
		}
	})
	return errors.Join(errs...)
}
