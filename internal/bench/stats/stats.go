// Package stats is the arithmetic every benchmark reports with: nearest-rank percentiles,
// medians and ratios. One definition, so that a p99 or a median means the same in every
// table of docs/benchmarks.md, whichever benchmark wrote it. It imports only the standard
// library: the load generator, linked into octopus-echo, uses it too.
package stats

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Number is what Median averages: the middle two of an even count are added and halved.
type Number interface {
	~int | ~int32 | ~int64 | ~float64
}

// Percentile is the p-th percentile (0 < p ≤ 100) of sorted by the nearest-rank method: the
// smallest value with at least p percent of the values at or below it, so it is always a
// measured value (p99 of 100 values is the 99th, of 10 values the largest). Zero for none.
func Percentile[T cmp.Ordered](sorted []T, p float64) T {
	var zero T
	if len(sorted) == 0 {
		return zero
	}
	// p*n before the division keeps whole percentiles exact: 99% of 100 values is rank 99.
	rank := int(math.Ceil(p * float64(len(sorted)) / 100))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// PercentileOf is Percentile of xs in any order; xs is left as it is.
func PercentileOf[T cmp.Ordered](xs []T, p float64) T {
	return Percentile(slices.Sorted(slices.Values(xs)), p)
}

// Median of xs in any order: the middle value, or the mean of the middle two for an even
// count; zero for none. xs is left as it is.
func Median[T Number](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// Ratio is num over den, or zero when either is not positive (a side that failed or
// measured nothing has no ratio).
func Ratio(num, den float64) float64 {
	if num <= 0 || den <= 0 {
		return 0
	}
	return num / den
}

// Rate is count per second over d; zero for a non-positive d.
func Rate(count int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(count) / d.Seconds()
}
