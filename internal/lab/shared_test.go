package lab_test

import (
	"testing"
)

// A labCheck is one check of a lab configuration's test: a subtest run on the lab that the
// checks before it used. The checks of a configuration run in their order: read-only ones
// first, then faults that restore what they break, then destructive ones (kills for good,
// upgrades, leave), so that each finds the lab as the check before it left it.
type labCheck[L any] struct {
	name string
	run  func(t *testing.T, l L)
}

// runOnSharedLab runs checks as subtests of t on one lab made by up, bringing a lab up before
// the first check and again before the check after one that failed: a failed check may leave
// its lab broken, and the checks after it must still say whether they pass on a healthy lab.
// up returns the lab and a function that stops it; runOnSharedLab stops the last lab when the
// checks are done. Each bring-up is a lab's minute or two, which is why a configuration's
// checks share one instead of bringing up their own (the suite has one bring-up per configuration: eight).
func runOnSharedLab[L any](t *testing.T, up func(t *testing.T) (L, func()), checks ...labCheck[L]) {
	t.Helper()
	var (
		l    L
		stop func()
	)
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for _, c := range checks {
		if stop == nil {
			l, stop = up(t)
		}
		if !t.Run(c.name, func(t *testing.T) { c.run(t, l) }) {
			t.Logf("%s failed: the checks after it run on a new lab", c.name)
			stop()
			stop = nil
		}
	}
}
