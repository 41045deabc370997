package verify

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func dur(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }

func TestReportAggregation(t *testing.T) {
	pass := func(c Check, from, to string) Result {
		return Result{Check: c, From: from, To: to, Passed: true, Detail: "ok", Latency: dur(time.Millisecond), Attempts: 1}
	}
	fail := func(c Check, from, to string) Result {
		return Result{Check: c, From: from, To: to, Detail: "requesting 10.2.0.5:8080: curl: exit 28", Attempts: 20, Elapsed: dur(20 * time.Second)}
	}
	tests := []struct {
		name       string
		results    []Result
		wantPassed bool
		wantFailed []string
		summary    string
	}{
		{"no checks", nil, false, nil, "No checks ran: verify needs at least two clusters."},
		{"all pass", []Result{pass(CheckPodToPod, "a", "b"), pass(CheckDNS, "b", "a")}, true, nil, "All 2 checks passed between 2 clusters."},
		{
			"some fail, in report order",
			[]Result{fail(CheckPodToPod, "a", "b"), pass(CheckClusterSetIP, "a", "b"), fail(CheckDNS, "b", "a")},
			false, []string{"pod-to-pod a->b", "dns b->a"},
			"2 of 3 checks failed: pod-to-pod a->b, dns b->a.",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Report{Clusters: []string{"a", "b"}, Results: tt.results}
			r.Finish()
			if r.Passed != tt.wantPassed {
				t.Errorf("Passed = %v, want %v", r.Passed, tt.wantPassed)
			}
			var failed []string
			for _, f := range r.Failed() {
				failed = append(failed, f.Name())
			}
			if strings.Join(failed, ",") != strings.Join(tt.wantFailed, ",") {
				t.Errorf("Failed = %v, want %v", failed, tt.wantFailed)
			}
			if got := r.Summary(); got != tt.summary {
				t.Errorf("Summary = %q, want %q", got, tt.summary)
			}
		})
	}
}

func TestRender(t *testing.T) {
	r := &Report{Clusters: []string{"east", "west"}, Results: []Result{
		{Check: CheckPodToPod, From: "east", To: "west", Passed: true, Detail: "10.2.0.5:8080: answered by west/probe-server on node west-1", Latency: dur(1234 * time.Microsecond), Attempts: 1},
		{Check: CheckDNS, From: "west", To: "east", Detail: "resolving probe-east.ns.svc.clusterset.local:\n dig: exit 9", Attempts: 7, Elapsed: dur(20*time.Second + 40*time.Millisecond)},
	}}
	r.Finish()
	var out bytes.Buffer
	if err := Render(&out, r); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	// Column widths depend on the content: compare with runs of spaces collapsed.
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	want := []string{
		"CHECK FROM TO RESULT DETAIL",
		"pod-to-pod east west PASS 10.2.0.5:8080: answered by west/probe-server on node west-1 (1.23ms)",
		"dns west east FAIL resolving probe-east.ns.svc.clusterset.local: dig: exit 9 (7 attempts in 20s)",
		"",
		"1 of 2 checks failed: dns west->east.",
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), out.String())
	}
	for i := range want {
		if got := norm(lines[i]); got != want[i] {
			t.Errorf("line %d = %q, want %q", i, got, want[i])
		}
	}
	// The columns line up: RESULT starts at the same offset in every row.
	col := strings.Index(lines[0], "RESULT")
	for _, l := range lines[1:3] {
		if !strings.HasPrefix(l[col:], "PASS") && !strings.HasPrefix(l[col:], "FAIL") {
			t.Errorf("row %q: RESULT not at column %d", l, col)
		}
	}
}

// TestRenderNotes: what was not checked is said under the table, before the summary.
func TestRenderNotes(t *testing.T) {
	r := &Report{Clusters: []string{"east", "west"}, Results: []Result{
		{Check: CheckPodToPod, From: "east", To: "west", Passed: true, Detail: "ok", Attempts: 1},
	}, Notes: []string{"IPv6 not checked from east to west: west's probe server has no IPv6 address (an IPv4-only cluster, or addressing other than direct)"}}
	r.Finish()
	var out bytes.Buffer
	if err := Render(&out, r); err != nil {
		t.Fatal(err)
	}
	want := "Note: IPv6 not checked from east to west: west's probe server has no IPv6 address (an IPv4-only cluster, or addressing other than direct).\n\nAll 1 checks passed between 2 clusters.\n"
	if !strings.HasSuffix(out.String(), want) {
		t.Errorf("Render ends with %q, want %q", out.String(), want)
	}
}

// TestRenderSecondary: the addressing line heads the table, a secondary pair's service
// check is secondary-service, and a mismatched pair's checks fail not attempted with the
// reason, counted in the summary like any failure.
func TestRenderSecondary(t *testing.T) {
	mismatch := "AddressingMismatch: east uses secondary addressing and north direct addressing, which cannot reach each other"
	r := &Report{
		Clusters: []string{"east", "west", "north"},
		Addressing: []ClusterAddressing{
			{Cluster: "east", Addressing: secondary, Source: SourceHub},
			{Cluster: "west", Addressing: secondary, Source: SourceProbe},
			{Cluster: "north", Addressing: direct, Source: SourceHub},
		},
		Results: []Result{
			{Check: CheckPodToPod, From: "east", To: "west", Passed: true, Detail: "10.112.1.5:8080: answered by west/probe-server on node west-1", Latency: dur(2 * time.Millisecond), Attempts: 1},
			{Check: CheckSecondaryService, From: "east", To: "west", Passed: true, Detail: "10.112.1.5:8080 (the endpoint east imported of probe-west): answered by west/probe-server on node west-1", Latency: dur(3 * time.Millisecond), Attempts: 2},
			{Check: CheckPodToPod, From: "east", To: "north", Detail: mismatch},
			{Check: CheckPodToPod, From: "west", To: "east", Detail: "pod ns/probe-server has no address on the secondary network: the secondary block 10.112.0.0/16 is exhausted"},
		},
	}
	r.Finish()
	if r.Passed {
		t.Error("Passed with failed checks")
	}
	var out bytes.Buffer
	if err := Render(&out, r); err != nil {
		t.Fatal(err)
	}
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		"Addressing: east secondary, west secondary (from its probe server's annotations: the hub could not be read), north direct.",
		"",
		"CHECK FROM TO RESULT DETAIL",
		"pod-to-pod east west PASS 10.112.1.5:8080: answered by west/probe-server on node west-1 (2ms)",
		"secondary-service east west PASS 10.112.1.5:8080 (the endpoint east imported of probe-west): answered by west/probe-server on node west-1 (3ms)",
		// Cut at 200 bytes like every detail; the summary and -o json keep it whole.
		norm("pod-to-pod east north FAIL " + oneLine(mismatch) + " (not attempted)"),
		"pod-to-pod west east FAIL pod ns/probe-server has no address on the secondary network: the secondary block 10.112.0.0/16 is exhausted (not attempted)",
		"",
		"2 of 4 checks failed: pod-to-pod east->north, pod-to-pod west->east.",
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), out.String())
	}
	for i := range want {
		if got := norm(lines[i]); got != want[i] {
			t.Errorf("line %d = %q, want %q", i, got, want[i])
		}
	}
	// -o json carries the addressing with its source.
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"addressing":[{"cluster":"east","addressing":"secondary","source":"hub"},{"cluster":"west","addressing":"secondary","source":"probe-server"}`) {
		t.Errorf("JSON report lacks the addressing: %s", raw)
	}
}

func TestParseCurl(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		want    answer
		wantErr string
	}{
		{
			name: "echo answer",
			out:  "cluster=west node=west-1 pod=probe-server namespace=ns ip=10.2.0.5 client=10.1.0.7:41234 path=/\n\n0.001234\n",
			want: answer{Cluster: "west", Node: "west-1", Pod: "probe-server", Latency: 1234 * time.Microsecond},
		},
		{name: "no timing line", out: "cluster=west pod=p", wantErr: "unexpected reply"},
		{name: "garbage timing", out: "cluster=west pod=p\nabc\n", wantErr: "unexpected timing"},
		{name: "someone else answered", out: "<html>hello</html>\n0.002\n", wantErr: "not the probe server's"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseCurl(tt.out)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("parseCurl = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestAnswerFromServer(t *testing.T) {
	tests := []struct {
		a    answer
		want string
		ok   bool
	}{
		{answer{Cluster: "west", Pod: serverName}, "west", true},
		// A service answered by the client's own cluster must not pass.
		{answer{Cluster: "east", Pod: serverName}, "west", false},
		{answer{Cluster: "west", Pod: "other"}, "west", false},
	}
	for _, tt := range tests {
		if err := tt.a.fromServer(tt.want); (err == nil) != tt.ok {
			t.Errorf("%+v.fromServer(%s) = %v, want ok=%v", tt.a, tt.want, err, tt.ok)
		}
	}
}

func TestParseDig(t *testing.T) {
	out := "probe-west.ns.svc.cluster.local.\n10.96.100.7\n\nfd00::7\n;; connection timed out\n"
	got := parseDig(out)
	want := []netip.Addr{netip.MustParseAddr("10.96.100.7"), netip.MustParseAddr("fd00::7")}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("parseDig = %v, want %v", got, want)
	}
}

func TestArgv(t *testing.T) {
	for family, want := range map[string]string{
		"":     "curl -sS --max-time 5 -w \n%{time_total}\n http://[fd00::5]:8080/",
		"IPv4": "curl -sS --max-time 5 -4 -w \n%{time_total}\n http://[fd00::5]:8080/",
		"IPv6": "curl -sS --max-time 5 -6 -w \n%{time_total}\n http://[fd00::5]:8080/",
	} {
		if got := strings.Join(curlArgv("fd00::5", 8080, 5*time.Second, family), " "); got != want {
			t.Errorf("curlArgv with family %q = %q, want %q", family, got, want)
		}
	}
	if got, want := strings.Join(digArgv("x.clusterset.local", 500*time.Millisecond), " "), "dig +short +time=1 +tries=1 x.clusterset.local A x.clusterset.local AAAA"; got != want {
		t.Errorf("digArgv = %q, want %q", got, want)
	}
}

func TestObjectsExportDistinctNames(t *testing.T) {
	// Each cluster exports a name of its own: same-named exports would merge into one
	// service and a request could be answered at home.
	a, b := objects("ns", "east", DefaultServerImage, DefaultClientImage), objects("ns", "west", DefaultServerImage, DefaultClientImage)
	if a[len(a)-1].GetName() == b[len(b)-1].GetName() {
		t.Fatalf("both clusters export %s", a[len(a)-1].GetName())
	}
	if a[0].GetName() != "ns" || a[0].GetLabels()[managedByLabel] != managedBy {
		t.Fatalf("the namespace %s comes first and carries the managed-by label, got labels %v", a[0].GetName(), a[0].GetLabels())
	}
}
