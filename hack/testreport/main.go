// Command testreport reads `go test -json` and prints what a person needs. It has two uses,
// which hack/run-tests.sh combines so that a run shows progress while it goes and one summary
// at its end, whatever number of test tiers ran side by side:
//
//   - live (no file arguments; the stream on stdin, passed through by `tee`): one line per
//     package as it finishes and the full output of each failed test;
//   - summary (the streams' files as arguments): the failures' reasons, the skipped tests
//     with their reasons, each package's wall time, each lab test's (and its subtests'), and
//     the ten slowest tests. With -fail-on-skip (CI runs as root, where nothing may skip) a
//     skipped test fails the run. The exit status is the run's.
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

type key struct{ pkg, test string }

// labPackage is the package whose tests' times the summary lists one by one: each brings up
// or shares a lab, and their times are where a run's minutes go.
const labPackage = "github.com/octopus-mcs/octopus/internal/lab"

// slowest is how many of the slowest tests the summary lists.
const slowest = 10

func main() {
	failOnSkip := flag.Bool("fail-on-skip", false, "exit non-zero if any test was skipped")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: go test -json ... | testreport            (live: packages as they finish, failures in full)")
		fmt.Fprintln(os.Stderr, "       testreport [-fail-on-skip] FILE.json...  (summary of finished runs; exit status is theirs)")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		if _, err := report(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
		return
	}
	var all result
	for _, f := range flag.Args() {
		in, err := os.Open(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
		r, err := report(in, io.Discard)
		in.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "testreport: %s: %v\n", f, err)
			os.Exit(2)
		}
		all.add(r)
	}
	os.Exit(summarize(os.Stdout, all, *failOnSkip))
}

// result is what one or more `go test -json` streams came to.
type result struct {
	failed   int
	skipped  []string
	reasons  []string
	packages []timing // each package's wall time
	tests    []timing // each test's and subtest's
}

type timing struct {
	pkg, test string
	seconds   float64
	failed    bool
}

func (r *result) add(o result) {
	r.failed += o.failed
	r.skipped = append(r.skipped, o.skipped...)
	r.reasons = append(r.reasons, o.reasons...)
	r.packages = append(r.packages, o.packages...)
	r.tests = append(r.tests, o.tests...)
}

// summarize prints the summary of r and returns the run's exit status.
func summarize(w io.Writer, r result, failOnSkip bool) int {
	printTimes(w, r)
	if len(r.reasons) > 0 {
		// The failures' own messages again, without the logs around them: a long failure
		// log (a lab's state) must not push another test's reason out of what is read.
		fmt.Fprintf(w, "\n%d failed tests, why:\n", len(r.reasons))
		for _, reason := range r.reasons {
			fmt.Fprintln(w, reason)
		}
	}
	if len(r.skipped) > 0 {
		sort.Strings(r.skipped)
		fmt.Fprintf(w, "\n%d skipped tests:\n", len(r.skipped))
		for _, s := range r.skipped {
			fmt.Fprintln(w, "  "+s)
		}
	}
	switch {
	case r.failed > 0:
		fmt.Fprintf(w, "\nFAIL: %d failed\n", r.failed)
		return 1
	case failOnSkip && len(r.skipped) > 0:
		fmt.Fprintln(w, "\nFAIL: tests were skipped, and this run must not skip any (CI runs as root)")
		return 1
	}
	fmt.Fprintln(w, "\nPASS")
	return 0
}

// printTimes lists every package by wall time, the lab package's tests and subtests in the
// order they ran, and the slowest tests of the run.
func printTimes(w io.Writer, r result) {
	byTime := func(a, b timing) int { return cmp.Compare(b.seconds, a.seconds) }
	pkgs := slices.SortedStableFunc(slices.Values(r.packages), byTime)
	fmt.Fprintf(w, "\nWall time per package (%d):\n", len(pkgs))
	for _, p := range pkgs {
		fmt.Fprintf(w, "  %8.1fs  %s%s\n", p.seconds, strings.TrimPrefix(p.pkg, "github.com/octopus-mcs/octopus/"), failMark(p))
	}
	var lab []timing
	for _, t := range r.tests {
		if t.pkg == labPackage {
			lab = append(lab, t)
		}
	}
	if len(lab) > 0 {
		fmt.Fprintln(w, "\nLab tests (internal/lab), in the order they ended:")
		for _, t := range lab {
			depth := strings.Count(t.test, "/")
			name := t.test[strings.LastIndex(t.test, "/")+1:]
			fmt.Fprintf(w, "  %8.1fs  %s%s%s\n", t.seconds, strings.Repeat("  ", depth), name, failMark(t))
		}
	}
	var top []timing
	for _, t := range r.tests {
		if !strings.Contains(t.test, "/") {
			top = append(top, t)
		}
	}
	top = slices.SortedStableFunc(slices.Values(top), byTime)
	fmt.Fprintf(w, "\nSlowest %d tests:\n", min(slowest, len(top)))
	for _, t := range top[:min(slowest, len(top))] {
		fmt.Fprintf(w, "  %8.1fs  %s %s%s\n", t.seconds, strings.TrimPrefix(t.pkg, "github.com/octopus-mcs/octopus/"), t.test, failMark(t))
	}
}

func failMark(t timing) string {
	if t.failed {
		return "  FAIL"
	}
	return ""
}

// report reads one `go test -json` stream, writes the live view of it to w and returns what
// it came to.
func report(r io.Reader, w io.Writer) (res result, err error) {
	output := map[key]*strings.Builder{}
	failedIn := map[string]int{} // failed tests per package
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			fmt.Fprintln(w, sc.Text()) // build errors arrive as plain text
			continue
		}
		k := key{e.Package, e.Test}
		switch e.Action {
		case "output":
			if output[k] == nil {
				output[k] = &strings.Builder{}
			}
			output[k].WriteString(e.Output)
		case "skip":
			if e.Test != "" {
				res.skipped = append(res.skipped, fmt.Sprintf("%s %s: %s", e.Package, e.Test, skipReason(output[k])))
			}
		case "fail":
			if e.Test != "" {
				res.failed++
				failedIn[e.Package]++
				res.tests = append(res.tests, timing{e.Package, e.Test, e.Elapsed, true})
				fmt.Fprintf(w, "--- FAIL: %s %s (%.1fs)\n%s", e.Package, e.Test, e.Elapsed, text(output[k]))
				res.reasons = append(res.reasons, fmt.Sprintf("  %s %s%s", e.Package, e.Test, failureReason(output[k])))
			} else {
				res.packages = append(res.packages, timing{e.Package, "", e.Elapsed, true})
				fmt.Fprintf(w, "FAIL %s (%.1fs)\n", e.Package, e.Elapsed)
				if failedIn[e.Package] == 0 {
					res.failed++ // the package failed outside any test (build, TestMain, panic)
					res.reasons = append(res.reasons, fmt.Sprintf("  %s (outside any test)%s", e.Package, lastLines(output[k])))
					fmt.Fprint(w, text(output[k]))
				}
			}
		case "pass":
			if e.Test == "" {
				res.packages = append(res.packages, timing{e.Package, "", e.Elapsed, false})
				fmt.Fprintf(w, "ok   %s (%.1fs)\n", e.Package, e.Elapsed)
			} else {
				res.tests = append(res.tests, timing{e.Package, e.Test, e.Elapsed, false})
			}
		}
		if e.Action != "output" && e.Test != "" && e.Action != "run" && e.Action != "pause" && e.Action != "cont" {
			delete(output, k)
		}
	}
	sort.Strings(res.skipped)
	return res, sc.Err()
}

// reasonLines bounds how many of a failed test's messages its reason repeats, and reasonWidth
// how much of each.
const reasonLines, reasonWidth = 4, 400

// failureReason is the last messages a failed test logged from its own files (`x_test.go:N:
// …` lines; t.Fatal is where a test ends, and t.Error is seldom far from it), skipping its
// lab-state dumps, each on a line of its own. Messages of other files (a library's logger
// writing through t.Log, such as a control plane's progress) are the reason only when the
// test logged nothing itself: they come first in a test's log and would hide its failure.
func failureReason(b *strings.Builder) string {
	var own, other []string
	for _, l := range strings.Split(text(b), "\n") {
		l = strings.TrimSpace(l)
		file, rest, ok := strings.Cut(l, ": ")
		if !ok || !strings.Contains(file, ".go:") || strings.HasPrefix(rest, "lab state") {
			continue
		}
		if len(l) > reasonWidth {
			l = l[:reasonWidth] + "…"
		}
		if strings.Contains(file, "_test.go:") {
			own = append(own, l)
		} else if len(other) < reasonLines {
			other = append(other, l)
		}
	}
	lines := other
	if len(own) > 0 {
		lines = own[max(0, len(own)-reasonLines):]
	}
	var out strings.Builder
	for _, l := range lines {
		out.WriteString("\n      " + l)
	}
	return out.String()
}

// lastLines is the end of a package's own output (a build error, a panic, a TestMain
// failure), for the summary of a package that failed outside its tests.
func lastLines(b *strings.Builder) string {
	lines := strings.Split(strings.TrimSpace(text(b)), "\n")
	var out strings.Builder
	for _, l := range lines[max(0, len(lines)-reasonLines):] {
		if len(l) > reasonWidth {
			l = l[:reasonWidth] + "…"
		}
		out.WriteString("\n      " + l)
	}
	return out.String()
}

func text(b *strings.Builder) string {
	if b == nil {
		return ""
	}
	return b.String()
}

func skipReason(b *strings.Builder) string {
	lines := strings.Split(strings.TrimSpace(text(b)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l != "" && !strings.HasPrefix(l, "--- SKIP") && !strings.HasPrefix(l, "=== ") {
			return l
		}
	}
	return "(no reason given)"
}
