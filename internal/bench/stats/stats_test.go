package stats

import (
	"slices"
	"testing"
	"time"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// From internal/bench/load, whose Summarize reports these.
func TestPercentile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = ms(i + 1)
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"no samples", nil, 50, 0},
		{"one sample is every percentile", []time.Duration{ms(7)}, 99, ms(7)},
		{"median of an odd count", []time.Duration{ms(1), ms(2), ms(3)}, 50, ms(2)},
		{"median of an even count is the lower middle", []time.Duration{ms(1), ms(2), ms(3), ms(4)}, 50, ms(2)},
		{"p99 of 100 is the 99th, not the maximum", hundred, 99, ms(99)},
		{"p50 of 100", hundred, 50, ms(50)},
		{"p99 of 10 is the maximum", hundred[:10], 99, ms(10)},
		{"p100 is the maximum", hundred, 100, ms(100)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.sorted, tt.p); got != tt.want {
				t.Fatalf("Percentile(%d samples, %g) = %s, want %s", len(tt.sorted), tt.p, got, tt.want)
			}
		})
	}
}

// From hack/bench/tunnel: any ordered type, fractional p.
func TestPercentileInts(t *testing.T) {
	var hundred []int
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, i)
	}
	for _, tc := range []struct {
		sorted []int
		p      float64
		want   int
	}{
		{hundred, 50, 50},
		{hundred, 99, 99},
		{hundred, 100, 100},
		{hundred, 0.5, 1},
		{[]int{7}, 99, 7},
		{[]int{1, 2, 3, 4, 5}, 50, 3},
		{[]int{1, 2, 3, 4, 5}, 99, 5}, // nearest rank: p99 of 5 values is the maximum
		{[]int{1, 2, 3, 4}, 50, 2},
	} {
		if got := Percentile(tc.sorted, tc.p); got != tc.want {
			t.Errorf("Percentile(%v, %v) = %d, want %d", tc.sorted, tc.p, got, tc.want)
		}
	}
}

// From hack/bench/lab (its quantile): unsorted input, left as it was.
func TestPercentileOf(t *testing.T) {
	msList := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = ms(x)
		}
		return out
	}
	in := msList(5, 1, 4, 2, 3)
	tests := []struct {
		p    float64
		want time.Duration
	}{{50, 3 * time.Millisecond}, {99, 5 * time.Millisecond}, {0, time.Millisecond}}
	for _, tt := range tests {
		if got := PercentileOf(in, tt.p); got != tt.want {
			t.Errorf("PercentileOf(%v) = %s, want %s", tt.p, got, tt.want)
		}
	}
	if !slices.Equal(in, msList(5, 1, 4, 2, 3)) {
		t.Errorf("PercentileOf sorted its input in place: %v", in)
	}
}

// From hack/bench/tunnel.
func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := Median(tc.xs); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
	if got := Median([]int64{4, 1, 3, 2}); got != 2 {
		t.Errorf("Median of int64 1..4 = %d, want 2 (the halved sum, truncated)", got)
	}
}

func TestRatio(t *testing.T) {
	for _, tc := range []struct{ num, den, want float64 }{
		{3, 2, 1.5},
		{0, 2, 0},
		{3, 0, 0},
		{-1, 2, 0},
	} {
		if got := Ratio(tc.num, tc.den); got != tc.want {
			t.Errorf("Ratio(%v, %v) = %v, want %v", tc.num, tc.den, got, tc.want)
		}
	}
}

func TestRate(t *testing.T) {
	if got := Rate(10, 2*time.Second); got != 5 {
		t.Errorf("Rate(10, 2s) = %v, want 5", got)
	}
	if got := Rate(10, 0); got != 0 {
		t.Errorf("Rate(10, 0) = %v, want 0", got)
	}
}
