package diagnose

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRender(t *testing.T) {
	r := &Report{
		Checks:   []string{"versions", "gateway"},
		Clusters: []string{"east", "west"},
		Findings: []Finding{
			{Check: "versions", Cluster: HubName, Severity: SeverityOK, Message: "Kubernetes v1.37.1"},
			{Check: "versions", Severity: SeverityOK, Message: "versions within 2 minor releases"},
			{Check: "gateway", Cluster: "east", Severity: SeverityError, Message: "the tunnel to west is down (Error):\nthe remote gateway stopped answering", Fix: "check that UDP passes"},
			{Check: "gateway", Cluster: "west", Severity: SeverityWarning, Message: "the tunnel to east loses 7% of its health probes", Fix: "look for drops"},
			{Check: "gateway", Cluster: "west", Severity: SeverityInfo, Message: "an info"},
		},
		Elapsed: Duration{1234 * time.Millisecond},
	}
	var b bytes.Buffer
	if err := Render(&b, r); err != nil {
		t.Fatal(err)
	}
	want := `CHECK     CLUSTER  RESULT   FINDING
versions  hub      ok       Kubernetes v1.37.1
versions  -        ok       versions within 2 minor releases
gateway   east     ERROR    the tunnel to west is down (Error): the remote gateway stopped answering
                            fix: check that UDP passes
gateway   west     warning  the tunnel to east loses 7% of its health probes
                            fix: look for drops
gateway   west     info     an info

2 checks on 2 clusters: 2 ok, 1 info, 1 warning, 1 error (1.23s).
`
	if got := b.String(); got != want {
		t.Errorf("Render:\n%s\nwant:\n%s", got, want)
	}
	if !r.Failed() || r.Errors() != "gateway east" {
		t.Errorf("Failed %v, Errors %q; want true, %q", r.Failed(), r.Errors(), "gateway east")
	}
}

// TestReportJSON checks the JSON form scripts read: severities and durations by name, and a
// round trip that loses nothing.
func TestReportJSON(t *testing.T) {
	r := &Report{Checks: []string{"dns"}, Clusters: []string{"east"}, Elapsed: Duration{1500 * time.Millisecond},
		Findings: []Finding{{Check: "dns", Cluster: "east", Severity: SeverityWarning, Message: "m", Fix: "f"}, {Check: "dns", Severity: SeverityOK, Message: "n"}}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"checks":["dns"],"clusters":["east"],"findings":[{"check":"dns","cluster":"east","severity":"warning","message":"m","fix":"f"},{"check":"dns","severity":"ok","message":"n"}],"elapsed":"1.5s"}`
	if string(b) != want {
		t.Errorf("JSON %s\nwant %s", b, want)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.Findings, r.Findings) || back.Elapsed != r.Elapsed {
		t.Errorf("round trip: %+v, want %+v", back, r)
	}
	if err := json.Unmarshal([]byte(`"fatal"`), new(Severity)); err == nil || !strings.Contains(err.Error(), "ok, info, warning, error") {
		t.Errorf("unknown severity: %v", err)
	}
}

// TestSortFindings: whatever order concurrent checks deliver in, the report is ordered by
// check, then set-wide, hub, clusters by name, and keeps each cluster's own order.
func TestSortFindings(t *testing.T) {
	checks := []string{"versions", "gateway", "dns"}
	want := []Finding{
		{Check: "versions", Message: "spread"},
		{Check: "versions", Cluster: HubName, Message: "hub"},
		{Check: "versions", Cluster: "a", Message: "a"},
		{Check: "versions", Cluster: "b", Message: "b"},
		{Check: "gateway", Cluster: HubName, Message: "hub 1"},
		{Check: "gateway", Cluster: HubName, Message: "hub 2"},
		{Check: "gateway", Cluster: "a", Message: "a 2"},
		{Check: "gateway", Cluster: "a", Message: "a 1"},
		{Check: "dns", Cluster: "b", Message: "b"},
	}
	for range 20 {
		// Concurrent checks deliver each cluster's findings as one block, in any order.
		blocks := [][]Finding{want[:1], want[1:2], want[2:3], want[3:4], want[4:6], want[6:8], want[8:]}
		rand.Shuffle(len(blocks), func(i, j int) { blocks[i], blocks[j] = blocks[j], blocks[i] })
		var got []Finding
		for _, b := range blocks {
			got = append(got, b...)
		}
		sortFindings(got, checks)
		if !slices.Equal(got, want) {
			t.Fatalf("sorted:\n%v\nwant:\n%v", got, want)
		}
	}
}
