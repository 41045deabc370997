package verify

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/workload"
)

// Check names one kind of cross-cluster check.
type Check string

const (
	// CheckPodToPod is a request from the client pod of one cluster to the probe server
	// pod's IP in another: the gateways' tunnel and the route agents' routes.
	CheckPodToPod Check = "pod-to-pod"
	// CheckClusterSetIP is a request to the other cluster's exported probe Service through
	// the ClusterSet IP (spec.ips of the ServiceImport in the client's cluster): service
	// discovery, the importing cluster's kube-proxy and the tunnel.
	CheckClusterSetIP Check = "clusterset-ip"
	// CheckSecondaryService replaces CheckClusterSetIP between clusters on the secondary
	// network, where an import has no ClusterSet IP: the client cluster's ServiceImport of
	// the other cluster's probe Service is marked octopus.io/addressing: secondary, its
	// imported EndpointSlices hold exactly the probe server's net1 address, and a request to
	// that endpoint on its port (the target port) answers: service discovery over net1 and
	// the tunnel.
	CheckSecondaryService Check = "secondary-service"
	// CheckDNS resolves <svc>.<ns>.svc.clusterset.local in the client pod, which must
	// give the ClusterSet IP (on the secondary network: only the other cluster's probe
	// server's net1 address), and requests the service by that name (on the secondary
	// network on the target port, as clients there do).
	CheckDNS Check = "dns"
)

// Checks are the checks run for every ordered pair of clusters on the primary network
// (direct or globalnet addressing), in the order reported.
var Checks = []Check{CheckPodToPod, CheckClusterSetIP, CheckDNS}

// SecondaryChecks are the checks run for every ordered pair of clusters on the secondary
// network (secondary addressing), in the order reported; as many as Checks. Pod-to-pod there
// requests the probe server's net1 address.
var SecondaryChecks = []Check{CheckPodToPod, CheckSecondaryService, CheckDNS}

// ClusterAddressing is a cluster's addressing as verify found it, which decides its checks.
type ClusterAddressing struct {
	Cluster    string              `json:"cluster"`
	Addressing v1alpha1.Addressing `json:"addressing"`
	// Source says where verify learned it: the hub, or (the hub unreadable) the probe
	// server's annotations, or nowhere (assumed direct).
	Source AddressingSource `json:"source"`
}

// Result is the outcome of one check from one cluster to another.
type Result struct {
	Check Check  `json:"check"`
	From  string `json:"from"`
	To    string `json:"to"`
	// Family is the address family checked ("IPv4" or "IPv6") when the pair is checked in
	// both, both clusters being dual-stack; empty when the pair is checked in one (the
	// clusters' primary family, or IPv4 under globalnet and secondary addressing).
	Family string `json:"family,omitempty"`
	// Passed is true when an answer came from the probe server of To within the check's
	// timeout.
	Passed bool `json:"passed"`
	// Attempts is zero for a check that could not be tried: the pair's addressing does not
	// match (Detail starts AddressingMismatch), or what it needs is missing (the other
	// cluster's probe server has no address, the import never came).
	// Detail says what answered (on success) or what was seen last (on failure).
	Detail string `json:"detail"`
	// Latency is the passing request's total time as the client measured it; zero when
	// the check failed.
	Latency metav1.Duration `json:"latency"`
	// Attempts is how many tries the check took (it retries until its timeout: tunnels,
	// kube-proxy and DNS converge by themselves within seconds).
	Attempts int `json:"attempts"`
	// Elapsed is the time the check took, retries included.
	Elapsed metav1.Duration `json:"elapsed"`
}

// Name is the check as the summary names it: "dns cluster1->cluster2", or with its family
// "dns/IPv6 cluster1->cluster2".
func (r Result) Name() string { return fmt.Sprintf("%s %s->%s", r.label(), r.From, r.To) }

// label is the check with its family, if any: "pod-to-pod/IPv6".
func (r Result) label() string {
	if r.Family == "" {
		return string(r.Check)
	}
	return string(r.Check) + "/" + r.Family
}

// Report is what a verify run found.
type Report struct {
	// Namespace is the temporary namespace the probes ran in.
	Namespace string `json:"namespace"`
	// Clusters are the cluster IDs, in the order given.
	Clusters []string `json:"clusters"`
	// Addressing is each cluster's addressing, in the order given; it decides the checks.
	Addressing []ClusterAddressing `json:"addressing,omitempty"`
	// Results has one entry per ordered pair of clusters and check, ordered by pair (as the
	// clusters were given) and then as in Checks (SecondaryChecks for a client cluster on the
	// secondary network).
	Results []Result `json:"results"`
	// Notes say what was not checked and why (workload.FamilyNote: IPv6 between a dual-stack
	// cluster and an IPv4-only one).
	Notes []string `json:"notes,omitempty"`
	// Passed is true when every check passed and there was at least one.
	Passed bool `json:"passed"`
}

// Finish computes Passed from the results; call it once the results are in.
func (r *Report) Finish() {
	r.Passed = len(r.Results) > 0 && len(r.Failed()) == 0
}

// Failed returns the failed results, in report order.
func (r *Report) Failed() []Result {
	var failed []Result
	for _, res := range r.Results {
		if !res.Passed {
			failed = append(failed, res)
		}
	}
	return failed
}

// Summary is the report's last line: how many checks passed, and which failed.
func (r *Report) Summary() string {
	failed := r.Failed()
	switch {
	case len(r.Results) == 0:
		return "No checks ran: verify needs at least two clusters."
	case len(failed) == 0:
		return fmt.Sprintf("All %d checks passed between %d clusters.", len(r.Results), len(r.Clusters))
	}
	names := make([]string, len(failed))
	for i, f := range failed {
		names[i] = f.Name()
	}
	return fmt.Sprintf("%d of %d checks failed: %s.", len(failed), len(r.Results), strings.Join(names, ", "))
}

// Render writes each cluster's addressing, the report as a table (CHECK | FROM | TO | RESULT |
// DETAIL) and the summary.
func Render(w io.Writer, r *Report) error {
	if len(r.Addressing) > 0 {
		if _, err := fmt.Fprintf(w, "Addressing: %s.\n\n", addressingLine(r.Addressing)); err != nil {
			return err
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tFROM\tTO\tRESULT\tDETAIL")
	for _, res := range r.Results {
		result := "FAIL"
		detail := res.Detail
		switch {
		case res.Passed:
			result = "PASS"
			detail += " (" + formatLatency(res.Latency.Duration) + ")"
		case res.Attempts > 0:
			detail += fmt.Sprintf(" (%d attempts in %s)", res.Attempts, res.Elapsed.Round(100*time.Millisecond))
		default:
			detail += " (not attempted)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", res.label(), res.From, res.To, result, oneLine(detail))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range r.Notes {
		if _, err := fmt.Fprintf(w, "Note: %s.\n", n); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "\n%s\n", r.Summary())
	return err
}

func formatLatency(d time.Duration) string {
	switch {
	case d <= 0:
		return "latency unknown"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	default:
		return d.Round(10 * time.Microsecond).String()
	}
}

// oneLine keeps a table row on one line: command errors can span several.
func oneLine(s string) string { return workload.OneLine(s, 200) }
