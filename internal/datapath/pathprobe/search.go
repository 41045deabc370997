package pathprobe

// largestFitting returns the largest size in [lo, hi] for which fits is true, given that lo
// fits and that fitting is monotonic (a size fits when a larger one does). It tries hi first,
// since a path usually carries what the local link does and that costs a single probe, then
// halves the interval in between: about log2(hi-lo) probes, 11 from 64 to 1500 bytes. An
// error from fits ends the search.
func largestFitting(lo, hi int, fits func(size int) (bool, error)) (int, error) {
	if hi <= lo {
		return lo, nil
	}
	ok, err := fits(hi)
	if err != nil || ok {
		return hi, err
	}
	hi-- // hi does not fit; the answer is in [lo, hi-1]
	for lo < hi {
		mid := lo + (hi-lo+1)/2 // rounded up, so that lo = mid always moves
		ok, err := fits(mid)
		if err != nil {
			return lo, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo, nil
}
