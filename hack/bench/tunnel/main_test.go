package main

import (
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/bench/stats"
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

func TestCompleteModes(t *testing.T) {
	for _, tc := range []struct {
		name, modes string
		want        []string
		wantErr     string
	}{
		{name: "default", modes: strings.Join(defaultModeKeys(), ","),
			want: []string{"veth", "debian-wg", "lib-wg", "wireguard", "vxlan", "globalnet"}},
		{name: "IPv6 beside IPv4", modes: "wireguard, wireguard-v6", want: []string{"wireguard", "wireguard-v6"}},
		{name: "IPv6 alone", modes: "wireguard-v6", want: []string{"wireguard-v6"}},
		// Over the IPv4 underlay the vxlan driver carries IPv4 only.
		{name: "no vxlan-v6", modes: "vxlan,vxlan-v6", wantErr: `unknown mode "vxlan-v6"`},
		{name: "twice", modes: "wireguard,wireguard-v6,wireguard", wantErr: `"wireguard" is given twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config{rounds: 1, duration: time.Second, streams: 2, pings: 1}
			err := c.complete(tc.modes)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("complete(%q) = %v, want an error containing %q", tc.modes, err, tc.wantErr)
				}
			case err != nil:
				t.Errorf("complete(%q): %v", tc.modes, err)
			case !slices.Equal(c.modes, tc.want):
				t.Errorf("complete(%q) modes = %q, want %q", tc.modes, c.modes, tc.want)
			}
		})
	}
}

func TestPlanSetups(t *testing.T) {
	for _, tc := range []struct {
		modes []string
		want  []setupPlan
	}{
		{[]string{"wireguard"}, []setupPlan{{"wireguard", false}}},
		{[]string{"wireguard", "wireguard-v6"}, []setupPlan{{"wireguard", true}}},
		{[]string{"wireguard-v6"}, []setupPlan{{"wireguard", true}}},
		{[]string{"wireguard-v6", "veth", "wireguard"}, []setupPlan{{"wireguard", true}, {"veth", false}}},
		{defaultModeKeys(), []setupPlan{{"veth", false}, {"debian-wg", false}, {"lib-wg", false},
			{"wireguard", false}, {"vxlan", false}, {"globalnet", false}}},
	} {
		if got := planSetups(tc.modes); !slices.Equal(got, tc.want) {
			t.Errorf("planSetups(%q) = %+v, want %+v", tc.modes, got, tc.want)
		}
	}
}

func TestModeTable(t *testing.T) {
	letters := map[byte]string{}
	for _, m := range modes {
		if o, ok := letters[m.letter]; ok {
			t.Errorf("modes %s and %s share the letter %c (device names would collide)", o, m.key, m.letter)
		}
		letters[m.letter] = m.key
		if m.v6Of == "" {
			if m.connect == nil {
				t.Errorf("mode %s connects nothing", m.key)
			}
			continue
		}
		base := modeByKey(m.v6Of)
		if base.v6Of != "" || base.key != "wireguard" {
			// The helper sends both families' subnets only through our wireguard driver, the
			// one that carries IPv6 over an IPv4 underlay.
			t.Errorf("mode %s measures IPv6 through %s; only the wireguard driver carries it", m.key, m.v6Of)
		}
	}
}

func TestTarget(t *testing.T) {
	pod2 := planGateways(4242, "wireguard", 'd')[1]
	for _, tc := range []struct {
		key  string
		want string
	}{
		{"veth", "198.51.100.66"},
		{"wireguard", "198.51.100.66"},
		{"globalnet", "242.2.0.16"},
		{"wireguard-v6", "2001:db8:2::2"},
	} {
		if got := target(modeByKey(tc.key), pod2); got.String() != tc.want {
			t.Errorf("target(%s) = %s, want %s", tc.key, got, tc.want)
		}
	}
}

func TestPlanGatewaysAddresses(t *testing.T) {
	gws := planGateways(4242, "wireguard", 'd')
	doc4 := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("203.0.113.0/24")}
	for i, g := range gws {
		for _, a := range []netip.Addr{g.podGW6, g.podAddr6, g.podNet6.Addr()} {
			if !docPrefix6.Contains(a) {
				t.Errorf("gateway %d: %s is outside %s", i+1, a, docPrefix6)
			}
		}
		for _, a := range []netip.Addr{g.underlay, g.podGW, g.podAddr} {
			if !slices.ContainsFunc(doc4, func(p netip.Prefix) bool { return p.Contains(a) }) {
				t.Errorf("gateway %d: %s is outside the IPv4 documentation ranges", i+1, a)
			}
		}
		if !g.podNet6.Contains(g.podGW6) || !g.podNet6.Contains(g.podAddr6) || g.podGW6 == g.podAddr6 {
			t.Errorf("gateway %d: %s and %s are not two addresses of %s", i+1, g.podGW6, g.podAddr6, g.podNet6)
		}
	}
	if gws[0].podNet6.Overlaps(gws[1].podNet6) || gws[0].podNet.Overlaps(gws[1].podNet) {
		t.Errorf("the pod subnets overlap: %+v", gws)
	}
}

func TestFamilyFlags(t *testing.T) {
	for _, tc := range []struct {
		dst    string
		want6  bool
		tailIs string
	}{
		{"198.51.100.66", false, "198.51.100.66"},
		{"2001:db8:2::2", true, "2001:db8:2::2"},
	} {
		dst := netip.MustParseAddr(tc.dst)
		p := pingArgs("ns", dst, "-c1")
		if got := slices.Contains(p, "-6"); got != tc.want6 || p[len(p)-1] != tc.tailIs {
			t.Errorf("pingArgs(%s) = %q; want -6: %v, destination last", dst, p, tc.want6)
		}
		if got := slices.Contains(iperfArgs("ns", dst, time.Second, 1), "-6"); got != tc.want6 {
			t.Errorf("iperfArgs(%s) has -6: %v, want %v", dst, got, tc.want6)
		}
	}
}

// recordingTunnel is a gatewayTunnel that records what configureFrom passes it.
type recordingTunnel struct {
	key     string
	ep      netip.AddrPort
	subnets []netip.Prefix
}

var _ gatewayTunnel = (*recordingTunnel)(nil)

func (r *recordingTunnel) publicKey() string { return "-" }
func (r *recordingTunnel) close() error      { return nil }
func (r *recordingTunnel) configure(key string, ep netip.AddrPort, subnets []netip.Prefix) error {
	r.key, r.ep, r.subnets = key, ep, subnets
	return nil
}

func TestConfigureFrom(t *testing.T) {
	for _, tc := range []struct {
		line    string
		want    []string
		wantErr bool
	}{
		{line: "peer k 203.0.113.2:51820 198.51.100.64/26", want: []string{"198.51.100.64/26"}},
		{line: "peer k 203.0.113.2:51820 198.51.100.64/26,2001:db8:2::/64", want: []string{"198.51.100.64/26", "2001:db8:2::/64"}},
		{line: "peer k 203.0.113.2:51820 198.51.100.64/26,", wantErr: true},
		{line: "peer k 203.0.113.2:51820", wantErr: true},
		{line: "peer k 203.0.113.2 198.51.100.64/26", wantErr: true},
	} {
		var r recordingTunnel
		err := configureFrom(&r, tc.line)
		if (err != nil) != tc.wantErr {
			t.Errorf("configureFrom(%q) = %v, want error: %v", tc.line, err, tc.wantErr)
			continue
		}
		if tc.wantErr {
			continue
		}
		var got []string
		for _, s := range r.subnets {
			got = append(got, s.String())
		}
		if !slices.Equal(got, tc.want) || r.key != "k" || r.ep.String() != "203.0.113.2:51820" {
			t.Errorf("configureFrom(%q) passed %q %s %q, want k 203.0.113.2:51820 %q", tc.line, r.key, r.ep, got, tc.want)
		}
	}
}

func TestParseLinkMTU(t *testing.T) {
	for _, tc := range []struct {
		out     string
		want    int
		wantErr bool
	}{
		{out: `[{"ifindex":4,"ifname":"otb42d1","flags":["POINTOPOINT","MULTICAST","NOARP","UP","LOWER_UP"],"mtu":1420,"qdisc":"fq_codel"}]`, want: 1420},
		{out: `[]`, wantErr: true},
		{out: `[{"ifindex":4}]`, wantErr: true},
		{out: `Device "otb42d1" does not exist.`, wantErr: true},
	} {
		got, err := parseLinkMTU([]byte(tc.out))
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("parseLinkMTU(%s) = %d, %v; want %d, error: %v", tc.out, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestActiveTargets(t *testing.T) {
	pairs := func(ts []ratioTarget) []string {
		var out []string
		for _, r := range ts {
			out = append(out, r.num+"÷"+r.den)
		}
		return out
	}
	for _, tc := range []struct {
		modes []string
		want  []string
	}{
		{[]string{"wireguard", "wireguard-v6"}, []string{"wireguard-v6÷wireguard"}},
		{[]string{"wireguard-v6"}, nil},
		{[]string{"wireguard-v6", "globalnet", "wireguard"}, []string{"globalnet÷wireguard", "wireguard-v6÷wireguard"}},
		{defaultModeKeys(), []string{"wireguard÷debian-wg", "wireguard÷lib-wg", "vxlan÷veth", "globalnet÷wireguard"}},
	} {
		if got := pairs(activeTargets(tc.modes)); !slices.Equal(got, tc.want) {
			t.Errorf("activeTargets(%q) = %q, want %q", tc.modes, got, tc.want)
		}
	}
}

func TestRatiosPerRound(t *testing.T) {
	smp := func(gbps float64) sample {
		return sample{single: throughput{iperfResult: iperfResult{BitsPerSecond: gbps * 1e9}}}
	}
	rounds := []round{
		{samples: map[string]sample{"wireguard": smp(2), "wireguard-v6": smp(1.8)}},
		{samples: map[string]sample{"wireguard": smp(1), "wireguard-v6": smp(1)}},
		// A round the load halved for both stays a ratio of 0.95, not an outlier.
		{samples: map[string]sample{"wireguard": smp(0.4), "wireguard-v6": smp(0.38)}},
		{samples: map[string]sample{"wireguard": {}, "wireguard-v6": smp(1)}}, // no denominator: skipped
	}
	got := ratios(rounds, ratioTarget{num: "wireguard-v6", den: "wireguard"}, single)
	want := []float64{0.9, 1, 0.95}
	if len(got) != len(want) {
		t.Fatalf("ratios = %v, want %v", got, want)
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-9 {
			t.Errorf("ratios = %v, want %v", got, want)
		}
	}
	if m := stats.Median(got); math.Abs(m-0.95) > 1e-9 {
		t.Errorf("median of the per-round ratios = %v, want 0.95", m)
	}
}
