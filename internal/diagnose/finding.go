package diagnose

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Severity grades a finding.
type Severity int

// Severities, from harmless to broken. Only SeverityError fails a run.
const (
	// SeverityOK: the check passed.
	SeverityOK Severity = iota
	// SeverityInfo: worth knowing, nothing to fix (e.g. a setting Octopus cannot read).
	SeverityInfo
	// SeverityWarning: works now, but degraded or about to break.
	SeverityWarning
	// SeverityError: broken; the finding says what to do.
	SeverityError
)

var severityNames = []string{"ok", "info", "warning", "error"}

func (s Severity) String() string {
	if int(s) < len(severityNames) {
		return severityNames[s]
	}
	return fmt.Sprintf("Severity(%d)", int(s))
}

// MarshalJSON writes the severity by name, the form scripts match on.
func (s Severity) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON reads a severity by name.
func (s *Severity) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err != nil {
		return err
	}
	i := slices.Index(severityNames, name)
	if i < 0 {
		return fmt.Errorf("unknown severity %q, want one of %s", name, strings.Join(severityNames, ", "))
	}
	*s = Severity(i)
	return nil
}

// Finding is one thing a check found about one cluster (or about the set as a whole).
type Finding struct {
	// Check is the name of the check that found it, e.g. "gateway".
	Check string `json:"check"`
	// Cluster is the cluster ID (HubName for the hub); empty for a finding about the whole
	// set. A cluster whose ID could not be read is named by its kubeconfig.
	Cluster string `json:"cluster,omitempty"`
	// Severity grades it.
	Severity Severity `json:"severity"`
	// Message says what was found and what it means for the cluster set.
	Message string `json:"message"`
	// Fix is the command or change that fixes it; empty for ok and info findings that need
	// nothing.
	Fix string `json:"fix,omitempty"`
}

// HubName names the hub in findings.
const HubName = "hub"

// Report is the outcome of a diagnose run.
type Report struct {
	// Checks are the checks that ran, in their order.
	Checks []string `json:"checks"`
	// Clusters are the IDs of the clusters diagnosed (or their kubeconfigs when the ID could
	// not be read), sorted.
	Clusters []string `json:"clusters"`
	// Findings are ordered by check (as in Checks), then set-wide findings first, the hub,
	// then clusters by name, each cluster's findings in the order its check made them.
	Findings []Finding `json:"findings"`
	// Elapsed is how long the run took.
	Elapsed Duration `json:"elapsed"`
}

// Duration is a time.Duration that reads as "1.2s" in JSON.
type Duration struct{ time.Duration }

// MarshalJSON writes the duration as a string such as "1.234s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads what MarshalJSON writes.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	d.Duration = v
	return err
}

// Count returns how many findings have severity s.
func (r *Report) Count(s Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == s {
			n++
		}
	}
	return n
}

// Failed reports whether any finding is an error.
func (r *Report) Failed() bool { return r.Count(SeverityError) > 0 }

// Summary is the report's last line.
func (r *Report) Summary() string {
	return fmt.Sprintf("%s on %s: %d ok, %d info, %s, %s (%s).", plural(len(r.Checks), "check"), plural(len(r.Clusters), "cluster"),
		r.Count(SeverityOK), r.Count(SeverityInfo), plural(r.Count(SeverityWarning), "warning"), plural(r.Count(SeverityError), "error"),
		r.Elapsed.Round(10*time.Millisecond))
}

// Errors names the failing checks and clusters for an error message: "gateway cluster1, dns
// cluster2", each pair once, in report order.
func (r *Report) Errors() string {
	var names []string
	for _, f := range r.Findings {
		if f.Severity != SeverityError {
			continue
		}
		name := f.Check
		if f.Cluster != "" {
			name += " " + f.Cluster
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}

// plural counts: "1 error", "2 errors".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// sortFindings puts findings in report order: by the index of their check in checks, then
// set-wide, the hub, clusters by name; the sort is stable, so each cluster's findings stay in
// the order its check made them.
func sortFindings(findings []Finding, checks []string) {
	clusterRank := func(c string) string {
		switch c {
		case "":
			return "0"
		case HubName:
			return "1"
		}
		return "2" + c
	}
	slices.SortStableFunc(findings, func(a, b Finding) int {
		if c := slices.Index(checks, a.Check) - slices.Index(checks, b.Check); c != 0 {
			return c
		}
		return strings.Compare(clusterRank(a.Cluster), clusterRank(b.Cluster))
	})
}

// Render writes the report as a table (CHECK | CLUSTER | RESULT | FINDING), with each fix on
// a line of its own under its finding, and the summary.
func Render(w io.Writer, r *Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tCLUSTER\tRESULT\tFINDING")
	for _, f := range r.Findings {
		cluster := f.Cluster
		if cluster == "" {
			cluster = "-"
		}
		result := f.Severity.String()
		if f.Severity == SeverityError {
			result = "ERROR"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Check, cluster, result, oneLine(f.Message))
		if f.Fix != "" {
			fmt.Fprintf(tw, "\t\t\tfix: %s\n", oneLine(f.Fix))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%s\n", r.Summary())
	return err
}

// oneLine keeps a table row on one line: API errors can span several.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
