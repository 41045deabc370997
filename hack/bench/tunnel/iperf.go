package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"time"
)

// iperfResult is what the receiver got over the whole run.
type iperfResult struct {
	BitsPerSecond float64
	Bytes         uint64
	Retransmits   int
}

// runIperf runs an iperf3 client in namespace ns against server for d with streams parallel
// TCP streams, and returns the result and the client's CPU time (user + system, from its
// rusage: `ip netns exec` execs iperf3, so it is iperf3's own).
func runIperf(ctx context.Context, ns string, server netip.Addr, d time.Duration, streams int) (iperfResult, time.Duration, error) {
	args := iperfArgs(ns, server, d, streams)
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", args...)
	out, runErr := cmd.Output()
	res, err := parseIperf(out)
	if err != nil || runErr != nil {
		return res, 0, fmt.Errorf("iperf3 to %s from %s: %w", server, ns, errors.Join(err, runErr))
	}
	st := cmd.ProcessState
	return res, st.UserTime() + st.SystemTime(), nil
}

// iperfArgs are the arguments of ip for runIperf: with -6 for an IPv6 server.
func iperfArgs(ns string, server netip.Addr, d time.Duration, streams int) []string {
	args := []string{"netns", "exec", ns, "iperf3", "-c", server.String(), "-p", strconv.Itoa(iperfPort),
		"-t", strconv.FormatFloat(d.Seconds(), 'f', -1, 64), "-P", strconv.Itoa(streams), "-J"}
	if server.Is6() {
		args = append(args, "-6")
	}
	return args
}

// parseIperf reads iperf3's -J output: the receiver's totals and the sender's retransmits.
func parseIperf(out []byte) (iperfResult, error) {
	var doc struct {
		Error string `json:"error"`
		End   struct {
			SumSent struct {
				Retransmits int `json:"retransmits"`
			} `json:"sum_sent"`
			SumReceived struct {
				Bytes         uint64  `json:"bytes"`
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return iperfResult{}, fmt.Errorf("parsing iperf3's JSON: %w", err)
	}
	if doc.Error != "" {
		return iperfResult{}, errors.New("iperf3: " + doc.Error)
	}
	r := doc.End.SumReceived
	if r.Bytes == 0 || r.BitsPerSecond == 0 {
		return iperfResult{}, errors.New("iperf3 reported no received bytes")
	}
	return iperfResult{BitsPerSecond: r.BitsPerSecond, Bytes: r.Bytes, Retransmits: doc.End.SumSent.Retransmits}, nil
}
