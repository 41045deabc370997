package main

import (
	"cmp"
	"math"
	"slices"
)

// percentile is the nearest-rank p-th percentile (0 < p ≤ 100) of sorted, which must not be
// empty: the smallest value with at least p % of the values at or below it.
func percentile[T cmp.Ordered](sorted []T, p float64) T {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// median of xs (the mean of the middle two for an even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
