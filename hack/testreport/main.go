// Command testreport reads `go test -json` on stdin and prints what a person needs: one line
// per package, the full output of failed tests, and the skipped tests with their reasons. With
// -fail-on-skip (CI runs as root, where nothing may skip) a skipped test fails the run.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
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

func main() {
	failOnSkip := flag.Bool("fail-on-skip", false, "exit non-zero if any test was skipped")
	flag.Parse()
	failed, skipped, reasons, err := report(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if len(reasons) > 0 {
		// The failures' own messages again, without the logs around them: a long failure
		// log (a lab's state) must not push another test's reason out of what is read.
		fmt.Printf("\n%d failed tests, why:\n", len(reasons))
		for _, r := range reasons {
			fmt.Println(r)
		}
	}
	if len(skipped) > 0 {
		fmt.Printf("\n%d skipped tests:\n", len(skipped))
		for _, s := range skipped {
			fmt.Println("  " + s)
		}
	}
	switch {
	case failed > 0:
		fmt.Printf("\nFAIL: %d failed\n", failed)
		os.Exit(1)
	case *failOnSkip && len(skipped) > 0:
		fmt.Println("\nFAIL: tests were skipped, and this run must not skip any (CI runs as root)")
		os.Exit(1)
	}
	fmt.Println("\nPASS")
}

func report(r io.Reader, w io.Writer) (failed int, skipped, reasons []string, err error) {
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
				skipped = append(skipped, fmt.Sprintf("%s %s: %s", e.Package, e.Test, skipReason(output[k])))
			}
		case "fail":
			if e.Test != "" {
				failed++
				failedIn[e.Package]++
				fmt.Fprintf(w, "--- FAIL: %s %s (%.1fs)\n%s", e.Package, e.Test, e.Elapsed, text(output[k]))
				reasons = append(reasons, fmt.Sprintf("  %s %s%s", e.Package, e.Test, failureReason(output[k])))
			} else {
				fmt.Fprintf(w, "FAIL %s (%.1fs)\n", e.Package, e.Elapsed)
				if failedIn[e.Package] == 0 {
					failed++ // the package failed outside any test (build, TestMain, panic)
					fmt.Fprint(w, text(output[k]))
				}
			}
		case "pass":
			if e.Test == "" {
				fmt.Fprintf(w, "ok   %s (%.1fs)\n", e.Package, e.Elapsed)
			}
		}
		if e.Action != "output" && e.Test != "" && e.Action != "run" && e.Action != "pause" && e.Action != "cont" {
			delete(output, k)
		}
	}
	sort.Strings(skipped)
	return failed, skipped, reasons, sc.Err()
}

// reasonLines bounds how many of a failed test's messages its reason repeats, and reasonWidth
// how much of each.
const reasonLines, reasonWidth = 4, 400

// failureReason is the first messages a failed test logged (`file.go:N: …` lines), skipping
// its lab-state dumps, each on a line of its own.
func failureReason(b *strings.Builder) string {
	var out strings.Builder
	n := 0
	for _, l := range strings.Split(text(b), "\n") {
		l = strings.TrimSpace(l)
		file, rest, ok := strings.Cut(l, ": ")
		if !ok || !strings.Contains(file, ".go:") || strings.HasPrefix(rest, "lab state") {
			continue
		}
		if len(l) > reasonWidth {
			l = l[:reasonWidth] + "…"
		}
		out.WriteString("\n      " + l)
		if n++; n == reasonLines {
			break
		}
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
