package main

import (
	"strings"
	"testing"
)

func TestReportRepeatsReasons(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:10: lab up took 9s\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:11: lab state, n1/routes.txt:\n        10.0.0.0/8 dev eth0\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:12: gap 9s, want at most 8s\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestA","Elapsed":1}`,
		`{"Action":"pass","Package":"p","Test":"TestB","Elapsed":1}`,
		`{"Action":"fail","Package":"p","Elapsed":2}`,
	}, "\n")
	var out strings.Builder
	failed, _, reasons, err := report(strings.NewReader(in), &out)
	if err != nil || failed != 1 {
		t.Fatalf("report: %d failed, %v; want 1, nil", failed, err)
	}
	want := []string{"  p TestA\n      a_test.go:10: lab up took 9s\n      a_test.go:12: gap 9s, want at most 8s"}
	if len(reasons) != 1 || reasons[0] != want[0] {
		t.Errorf("reasons %q, want %q", reasons, want)
	}
	if !strings.Contains(out.String(), "10.0.0.0/8 dev eth0") {
		t.Errorf("the full output lost the test's log:\n%s", out.String())
	}
}
