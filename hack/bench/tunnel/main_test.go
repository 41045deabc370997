package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseIperf(t *testing.T) {
	// Trimmed from iperf3 3.12 -J output of a 4-stream run.
	out := `{"start": {"connected": []}, "intervals": [],
	  "end": {"streams": [],
	    "sum_sent": {"start": 0, "end": 5.0, "seconds": 5.0, "bytes": 3000000000, "bits_per_second": 4.8e9, "retransmits": 17, "sender": true},
	    "sum_received": {"start": 0, "end": 5.0004, "seconds": 5.0004, "bytes": 2999000000, "bits_per_second": 4798080153.6, "sender": true},
	    "cpu_utilization_percent": {"host_total": 80.1, "remote_total": 60.2}}}`
	got, err := parseIperf([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := iperfResult{BitsPerSecond: 4798080153.6, Bytes: 2999000000, Retransmits: 17}
	if got != want {
		t.Errorf("parseIperf = %+v, want %+v", got, want)
	}
	for name, bad := range map[string]string{
		"error":    `{"start": {}, "intervals": [], "end": {}, "error": "unable to connect to server: Connection refused"}`,
		"no bytes": `{"end": {"sum_received": {"bytes": 0, "bits_per_second": 0}}}`,
		"not JSON": `iperf3: error - unable to connect`,
		"empty":    ``,
	} {
		if _, err := parseIperf([]byte(bad)); err == nil {
			t.Errorf("%s: parseIperf accepted %q", name, bad)
		}
	}
	if _, err := parseIperf([]byte(`{"error": "the server is busy running a test. try again later"}`)); err == nil || !strings.Contains(err.Error(), "busy") {
		t.Errorf("the error should carry iperf3's message, got %v", err)
	}
}

func TestParsePingRTTs(t *testing.T) {
	out := `PING 198.51.100.66 (198.51.100.66) 56(84) bytes of data.
64 bytes from 198.51.100.66: icmp_seq=1 ttl=62 time=0.412 ms
64 bytes from 198.51.100.66: icmp_seq=2 ttl=62 time=12.5 ms
From 198.51.100.1 icmp_seq=3 Destination Host Unreachable
64 bytes from 198.51.100.66: icmp_seq=4 ttl=62 time=1024 ms

--- 198.51.100.66 ping statistics ---
4 packets transmitted, 3 received, +1 errors, 25% packet loss, time 31ms
rtt min/avg/max/mdev = 0.412/345.637/1024.000/480.000 ms
`
	want := []time.Duration{412 * time.Microsecond, 12500 * time.Microsecond, 1024 * time.Millisecond}
	if got := parsePingRTTs(out); !slices.Equal(got, want) {
		t.Errorf("parsePingRTTs = %v, want %v", got, want)
	}
}

func TestParseStatTicks(t *testing.T) {
	// A command name with spaces and a ')' must not shift the fields.
	stat := "4242 (wire guard) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 567 0 0 20 0 9 0 100 0 0"
	got, err := parseStatTicks(stat)
	if err != nil || got != 1234+567 {
		t.Errorf("parseStatTicks = %d, %v; want %d", got, err, 1234+567)
	}
	if _, err := parseStatTicks("4242 (short) S 1"); err == nil {
		t.Error("a short line was accepted")
	}
}
