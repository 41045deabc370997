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
	res, err := report(strings.NewReader(in), &out)
	if err != nil || res.failed != 1 {
		t.Fatalf("report: %d failed, %v; want 1, nil", res.failed, err)
	}
	reasons := res.reasons
	want := []string{"  p TestA\n      a_test.go:10: lab up took 9s\n      a_test.go:12: gap 9s, want at most 8s"}
	if len(reasons) != 1 || reasons[0] != want[0] {
		t.Errorf("reasons %q, want %q", reasons, want)
	}
	if !strings.Contains(out.String(), "10.0.0.0/8 dev eth0") {
		t.Errorf("the full output lost the test's log:\n%s", out.String())
	}
}

// TestReasonIsTheTestsOwnMessages: a library's log lines come first in a failed test's
// output (a control plane starting), and the reason must be the test's own last messages.
func TestReasonIsTheTestsOwnMessages(t *testing.T) {
	var b strings.Builder
	for _, l := range []string{
		"=== RUN   TestTakeover",
		"    print.go:225: etcd ready (1.5s)",
		"    print.go:225: hub: kube-apiserver ready (18.8s)",
		"    takeover_test.go:470: gw2 took the Lease over 2s after",
		"    active.go:252: Tunnel configuration applied",
		"    takeover_test.go:10: step 1",
		"    takeover_test.go:11: step 2",
		"    takeover_test.go:12: step 3",
		"    takeover_test.go:450: lease east-gw2@7: want east-gw1's, unrenewed",
		"--- FAIL: TestTakeover (30.00s)",
	} {
		b.WriteString(l + "\n")
	}
	want := "\n      takeover_test.go:10: step 1\n      takeover_test.go:11: step 2\n      takeover_test.go:12: step 3" +
		"\n      takeover_test.go:450: lease east-gw2@7: want east-gw1's, unrenewed"
	if got := failureReason(&b); got != want {
		t.Errorf("reason %q, want %q", got, want)
	}
	var lib strings.Builder
	lib.WriteString("    print.go:225: etcd ready\n    main.go:9: panic: boom\n")
	if got := failureReason(&lib); got != "\n      print.go:225: etcd ready\n      main.go:9: panic: boom" {
		t.Errorf("without the test's own messages, reason %q, want the library's", got)
	}
}

// TestSummaryTimes lists every package by wall time, the lab package's tests with their
// subtests, the slowest top-level tests across streams, and fails on a skip when asked to.
func TestSummaryTimes(t *testing.T) {
	lab := strings.Join([]string{
		`{"Action":"pass","Package":"github.com/octopus-mcs/octopus/internal/lab","Test":"TestShared/mesh/read-only","Elapsed":40}`,
		`{"Action":"pass","Package":"github.com/octopus-mcs/octopus/internal/lab","Test":"TestShared/mesh","Elapsed":300}`,
		`{"Action":"pass","Package":"github.com/octopus-mcs/octopus/internal/lab","Test":"TestShared","Elapsed":301}`,
		`{"Action":"pass","Package":"github.com/octopus-mcs/octopus/internal/lab","Elapsed":302}`,
	}, "\n")
	fast := strings.Join([]string{
		`{"Action":"output","Package":"github.com/octopus-mcs/octopus/internal/ipam","Test":"TestRoot","Output":"    ipam_test.go:3: needs root\n"}`,
		`{"Action":"skip","Package":"github.com/octopus-mcs/octopus/internal/ipam","Test":"TestRoot","Elapsed":0}`,
		`{"Action":"pass","Package":"github.com/octopus-mcs/octopus/internal/ipam","Test":"TestFast","Elapsed":1.5}`,
		`{"Action":"pass","Package":"github.com/octopus-mcs/octopus/internal/ipam","Elapsed":2}`,
	}, "\n")
	var all result
	for _, in := range []string{lab, fast} {
		r, err := report(strings.NewReader(in), &strings.Builder{})
		if err != nil {
			t.Fatal(err)
		}
		all.add(r)
	}
	var out strings.Builder
	if code := summarize(&out, all, false); code != 0 {
		t.Errorf("exit %d without -fail-on-skip, want 0", code)
	}
	for _, want := range []string{
		"Wall time per package (2):\n     302.0s  internal/lab\n       2.0s  internal/ipam\n",
		"      40.0s      read-only\n     300.0s    mesh\n     301.0s  TestShared\n",
		"Slowest 2 tests:\n     301.0s  internal/lab TestShared\n       1.5s  internal/ipam TestFast\n",
		"internal/ipam TestRoot: ipam_test.go:3: needs root",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	if code := summarize(&strings.Builder{}, all, true); code != 1 {
		t.Errorf("exit %d with -fail-on-skip and a skip, want 1", code)
	}
}
