package pathprobe

import (
	"errors"
	"testing"
)

func TestLargestFitting(t *testing.T) {
	tests := []struct {
		name      string
		lo, hi    int
		threshold int // sizes up to it fit
		want      int
		maxProbes int
	}{
		{name: "the whole link MTU passes: one probe", lo: 64, hi: 1500, threshold: 1500, want: 1500, maxProbes: 1},
		{name: "jumbo link, 1500 path", lo: 64, hi: 9000, threshold: 1500, want: 1500, maxProbes: 15},
		{name: "underlay lowered to 1400", lo: 64, hi: 1500, threshold: 1400, want: 1400, maxProbes: 12},
		{name: "one byte short", lo: 64, hi: 1500, threshold: 1499, want: 1499, maxProbes: 12},
		{name: "only the smallest fits", lo: 64, hi: 1500, threshold: 64, want: 64, maxProbes: 12},
		{name: "just above the smallest", lo: 64, hi: 1500, threshold: 65, want: 65, maxProbes: 12},
		{name: "empty interval", lo: 1500, hi: 1500, threshold: 1500, want: 1500, maxProbes: 0},
		{name: "inverted interval", lo: 1500, hi: 1280, threshold: 9000, want: 1500, maxProbes: 0},
		{name: "two sizes, the lower fits", lo: 1499, hi: 1500, threshold: 1499, want: 1499, maxProbes: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			probes := 0
			tried := map[int]bool{}
			got, err := largestFitting(tt.lo, tt.hi, func(size int) (bool, error) {
				probes++
				if size < tt.lo || size > tt.hi {
					t.Errorf("probed %d outside [%d, %d]", size, tt.lo, tt.hi)
				}
				if tried[size] {
					t.Errorf("probed %d twice", size)
				}
				tried[size] = true
				return size <= tt.threshold, nil
			})
			if err != nil || got != tt.want {
				t.Fatalf("largestFitting(%d, %d) with threshold %d = %d, %v; want %d", tt.lo, tt.hi, tt.threshold, got, err, tt.want)
			}
			if probes > tt.maxProbes {
				t.Errorf("%d probes, want at most %d", probes, tt.maxProbes)
			}
		})
	}
}

func TestLargestFittingStopsOnError(t *testing.T) {
	boom := errors.New("socket closed")
	probes := 0
	got, err := largestFitting(64, 1500, func(size int) (bool, error) {
		probes++
		if probes == 3 {
			return false, boom
		}
		return size <= 1000, nil
	})
	if !errors.Is(err, boom) || probes != 3 {
		t.Fatalf("got %d, %v after %d probes; want the error after 3", got, err, probes)
	}
	if got < 64 || got > 1000 {
		t.Errorf("the size known to fit when the search stopped is %d, outside [64, 1000]", got)
	}
}

func TestMessageRoundTrip(t *testing.T) {
	b := make([]byte, 100)
	for i := range b {
		b[i] = 0xff // padding left as it is must not matter
	}
	want := message{typ: typeReply, nonce: 0x0102030405060708, size: 1400}
	want.marshal(b)
	got, err := parse(b)
	if err != nil || got != want {
		t.Fatalf("parse(marshal(%+v)) = %+v, %v", want, got, err)
	}
	for _, bad := range [][]byte{
		b[:messageLen-1],
		append([]byte{1, 0, 0, 0}, b[4:]...),    // a WireGuard handshake initiation's first bytes
		append([]byte{0x08, 0, 0, 0}, b[4:]...), // a VXLAN header's
		append([]byte(Magic+"\x07"), b[5:]...),  // an unknown type
	} {
		if _, err := parse(bad); err == nil {
			t.Errorf("parse(%x) accepted a non-probe", bad[:8])
		}
	}
}
