package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// completer is the options struct of a command that takes arguments: the kubectl-plugin
// pattern of Complete (fill in from args and defaults), Validate (refuse before doing
// anything) and Run.
type completer interface {
	Complete(args []string) error
	Validate() error
	Run(ctx context.Context) error
}

// runE runs o's Complete, Validate and Run in that order, as a cobra RunE.
func runE(o completer) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := o.Complete(args); err != nil {
			return err
		}
		if err := o.Validate(); err != nil {
			return err
		}
		return o.Run(cmd.Context())
	}
}

// outputFormat is the -o flag of every command that prints objects: a table for people, JSON
// for scripts.
type outputFormat string

const (
	outputTable outputFormat = "table"
	outputJSON  outputFormat = "json"
)

func (f *outputFormat) addFlag(fs *pflag.FlagSet) {
	fs.StringVarP((*string)(f), "output", "o", string(outputTable), "output format: table or json")
}

func (f outputFormat) validate() error {
	if f != outputTable && f != outputJSON {
		return fmt.Errorf("-o %q: want table or json", string(f))
	}
	return nil
}

// print writes v as indented JSON, or as render writes it for the table format.
func (f outputFormat) print(w io.Writer, v any, render func(io.Writer) error) error {
	if f != outputJSON {
		return render(w)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
