package main

import (
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// importedSlice is an EndpointSlice of shop/<svc> imported from cluster, as the import side
// writes them.
func importedSlice(svc, cluster string, family discoveryv1.AddressType, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: svc + "-" + cluster + "-" + strings.ToLower(string(family)), Labels: map[string]string{
			mcsv1beta1.LabelServiceName: svc, mcsv1beta1.LabelSourceCluster: cluster,
		}},
		AddressType: family,
		Endpoints:   eps,
	}
}

func endpoint(addr, hostname string, ready bool) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}
	if hostname != "" {
		e.Hostname = ptr.To(hostname)
	}
	return e
}

// reply is what a client made of one answer: the rcode and the records of each section, as
// "owner TYPE rdata" (an SOA without its serial and timers, which change).
type reply struct {
	status                string
	answer, authority, xt []string
}

// Results of the queries below.
const (
	noError  = "NOERROR"
	nxDomain = "NXDOMAIN"
)

// soaOf is how the reply lines show the SOA of zone in a negative answer.
func soaOf(zone string) []string {
	return []string{zone + " SOA ns.dns.clusterset.local. hostmaster.clusterset.local."}
}

// specForms queries every name form of the MCS DNS specification (KEP-1645 specification.md)
// and the SRV record at the service name that the kubernetes plugin answers, for the
// ClusterSetIP import shop/web and the headless import shop/db that TestOctopusDNS created,
// with dig and with BIND's nslookup, each over UDP and TCP, and checks every record.
func specForms(t *testing.T, port int) {
	if _, err := exec.LookPath("nslookup"); err != nil {
		t.Fatal("nslookup is missing: install Debian's dnsutils (hack/install-deps.sh does)")
	}
	webAddrs := []string{"web.shop.svc.clusterset.local. A 10.200.0.10", "web.shop.svc.clusterset.local. AAAA fd00:200::a"}
	dbTargets := []string{
		"10-100-0-3.east.db.shop.svc.clusterset.local. A 10.100.0.3",
		"db-0.east.db.shop.svc.clusterset.local. A 10.100.0.2",
		"db-0.west.db.shop.svc.clusterset.local. A 10.101.0.2",
		"db-0.west.db.shop.svc.clusterset.local. AAAA fd00:101::2",
	}
	cluster, ip6 := soaOf("clusterset.local."), soaOf("ip6.arpa.")
	cases := []struct {
		name, qtype string
		want        reply
	}{
		{"dns-version.clusterset.local.", "TXT", reply{status: noError, answer: []string{`dns-version.clusterset.local. TXT "1.0.0"`}}},

		// ClusterSetIP (§2.3).
		{"web.shop.svc.clusterset.local.", "A", reply{status: noError, answer: webAddrs[:1]}},
		{"web.shop.svc.clusterset.local.", "AAAA", reply{status: noError, answer: webAddrs[1:]}},
		{"Web.SHOP.svc.ClusterSet.local.", "A", reply{status: noError, answer: webAddrs[:1]}},
		{"web.shop.svc.clusterset.local.", "SRV", reply{status: noError, xt: webAddrs, answer: []string{
			"web.shop.svc.clusterset.local. SRV 0 33 443 web.shop.svc.clusterset.local.",
			"web.shop.svc.clusterset.local. SRV 0 33 8443 web.shop.svc.clusterset.local.",
			"web.shop.svc.clusterset.local. SRV 0 33 53 web.shop.svc.clusterset.local.",
		}}},
		{"_https._tcp.web.shop.svc.clusterset.local.", "SRV", reply{status: noError, xt: webAddrs, answer: []string{
			"_https._tcp.web.shop.svc.clusterset.local. SRV 0 100 443 web.shop.svc.clusterset.local.",
		}}},
		{"_dns._udp.web.shop.svc.clusterset.local.", "SRV", reply{status: noError, xt: webAddrs, answer: []string{
			"_dns._udp.web.shop.svc.clusterset.local. SRV 0 100 53 web.shop.svc.clusterset.local.",
		}}},
		{"_8443._tcp.web.shop.svc.clusterset.local.", "SRV", reply{status: nxDomain, authority: cluster}}, // unnamed port
		{"_https._udp.web.shop.svc.clusterset.local.", "SRV", reply{status: nxDomain, authority: cluster}},
		{"_tcp.web.shop.svc.clusterset.local.", "SRV", reply{status: noError, authority: cluster}},
		{"east.web.shop.svc.clusterset.local.", "A", reply{status: nxDomain, authority: cluster}}, // §2.3.4
		{"web.shop.svc.clusterset.local.", "TXT", reply{status: noError, authority: cluster}},
		{"10.0.200.10.in-addr.arpa.", "PTR", reply{status: nxDomain, authority: soaOf("in-addr.arpa.")}}, // §2.3.3 Limitations

		// Headless (§2.4).
		{"db.shop.svc.clusterset.local.", "A", reply{status: noError, answer: []string{
			"db.shop.svc.clusterset.local. A 10.100.0.2", "db.shop.svc.clusterset.local. A 10.100.0.3", "db.shop.svc.clusterset.local. A 10.101.0.2",
		}}},
		{"db.shop.svc.clusterset.local.", "AAAA", reply{status: noError, answer: []string{"db.shop.svc.clusterset.local. AAAA fd00:101::2"}}},
		{"db-0.east.db.shop.svc.clusterset.local.", "A", reply{status: noError, answer: dbTargets[1:2]}},
		{"db-0.east.db.shop.svc.clusterset.local.", "AAAA", reply{status: noError, authority: cluster}},
		{"db-0.west.db.shop.svc.clusterset.local.", "A", reply{status: noError, answer: dbTargets[2:3]}},
		{"db-0.west.db.shop.svc.clusterset.local.", "AAAA", reply{status: noError, answer: dbTargets[3:]}},
		{"DB-0.West.db.shop.svc.clusterset.local.", "AAAA", reply{status: noError, answer: dbTargets[3:]}},
		{"10-100-0-3.east.db.shop.svc.clusterset.local.", "A", reply{status: noError, answer: dbTargets[:1]}},
		{"db-9.east.db.shop.svc.clusterset.local.", "A", reply{status: nxDomain, authority: cluster}}, // not ready
		{"east.db.shop.svc.clusterset.local.", "A", reply{status: noError, authority: cluster}},       // §2.4.4
		{"north.db.shop.svc.clusterset.local.", "A", reply{status: nxDomain, authority: cluster}},
		{"db.shop.svc.clusterset.local.", "SRV", reply{status: noError, xt: dbTargets, answer: []string{
			"db.shop.svc.clusterset.local. SRV 0 16 5432 10-100-0-3.east.db.shop.svc.clusterset.local.",
			"db.shop.svc.clusterset.local. SRV 0 16 9187 10-100-0-3.east.db.shop.svc.clusterset.local.",
			"db.shop.svc.clusterset.local. SRV 0 16 5432 db-0.east.db.shop.svc.clusterset.local.",
			"db.shop.svc.clusterset.local. SRV 0 16 9187 db-0.east.db.shop.svc.clusterset.local.",
			"db.shop.svc.clusterset.local. SRV 0 16 5432 db-0.west.db.shop.svc.clusterset.local.",
			"db.shop.svc.clusterset.local. SRV 0 16 9187 db-0.west.db.shop.svc.clusterset.local.",
		}}},
		{"_pg._tcp.db.shop.svc.clusterset.local.", "SRV", reply{status: noError, xt: dbTargets, answer: []string{
			"_pg._tcp.db.shop.svc.clusterset.local. SRV 0 33 5432 10-100-0-3.east.db.shop.svc.clusterset.local.",
			"_pg._tcp.db.shop.svc.clusterset.local. SRV 0 33 5432 db-0.east.db.shop.svc.clusterset.local.",
			"_pg._tcp.db.shop.svc.clusterset.local. SRV 0 33 5432 db-0.west.db.shop.svc.clusterset.local.",
		}}},
		{"_9187._tcp.db.shop.svc.clusterset.local.", "SRV", reply{status: nxDomain, authority: cluster}}, // unnamed port
		{"db-0.west.db.shop.svc.clusterset.local.", "SRV", reply{status: noError, xt: dbTargets[2:], answer: []string{
			"db-0.west.db.shop.svc.clusterset.local. SRV 0 50 5432 db-0.west.db.shop.svc.clusterset.local.",
			"db-0.west.db.shop.svc.clusterset.local. SRV 0 50 9187 db-0.west.db.shop.svc.clusterset.local.",
		}}},
		{"2.0.100.10.in-addr.arpa.", "PTR", reply{status: noError, answer: []string{"2.0.100.10.in-addr.arpa. PTR db-0.east.db.shop.svc.clusterset.local."}}},
		{"3.0.100.10.in-addr.arpa.", "PTR", reply{status: noError, answer: []string{"3.0.100.10.in-addr.arpa. PTR 10-100-0-3.east.db.shop.svc.clusterset.local."}}},
		{"2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.1.0.1.0.0.0.d.f.ip6.arpa.", "PTR", reply{status: noError, answer: []string{
			"2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.1.0.1.0.0.0.d.f.ip6.arpa. PTR db-0.west.db.shop.svc.clusterset.local.",
		}}},
		{"4.0.100.10.in-addr.arpa.", "PTR", reply{status: nxDomain, authority: soaOf("in-addr.arpa.")}}, // not ready
		{"1.0.1.0.0.0.d.f.ip6.arpa.", "PTR", reply{status: noError, authority: ip6}},                    // above a PTR

		{"nope.shop.svc.clusterset.local.", "SRV", reply{status: nxDomain, authority: cluster}},
		{"shop.svc.clusterset.local.", "SRV", reply{status: noError, authority: cluster}},
	}
	for _, tc := range cases {
		for _, tcp := range []bool{false, true} {
			transport := map[bool]string{false: "udp", true: "tcp"}[tcp]
			t.Run(fmt.Sprintf("dig/%s/%s/%s", transport, tc.qtype, tc.name), func(t *testing.T) {
				got := digReply(t, port, tcp, tc.name, tc.qtype)
				if msg := compare(got, tc.want); msg != "" {
					t.Error(msg)
				}
			})
			t.Run(fmt.Sprintf("nslookup/%s/%s/%s", transport, tc.qtype, tc.name), func(t *testing.T) {
				got, err := nslookup(t, port, tcp, tc.name, tc.qtype)
				if err != nil {
					t.Fatal(err)
				}
				if want := nslookupLines(tc.name, tc.want); !slices.Equal(got, want) {
					t.Errorf("nslookup printed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			})
		}
	}
}

// digReply asks with dig and returns its reply; it fails the test unless the reply is
// authoritative.
func digReply(t *testing.T, port int, tcp bool, name, qtype string) reply {
	t.Helper()
	args := []string{"+nottlid", "+noclass", "+noall", "+comments", "+answer", "+authority", "+additional", name, qtype}
	if tcp {
		args = append([]string{"+tcp"}, args...)
	}
	out := dig(t, port, args...)
	var r reply
	section := (*[]string)(nil)
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, ";; ->>HEADER<<-"):
			_, after, _ := strings.Cut(line, "status: ")
			r.status, _, _ = strings.Cut(after, ",")
		case strings.HasPrefix(line, ";; flags:"):
			flags, _, _ := strings.Cut(strings.TrimPrefix(line, ";; flags:"), ";")
			if !slices.Contains(strings.Fields(flags), "aa") {
				t.Errorf("dig %v: reply not authoritative:\n%s", args, out)
			}
		case line == ";; ANSWER SECTION:":
			section = &r.answer
		case line == ";; AUTHORITY SECTION:":
			section = &r.authority
		case line == ";; ADDITIONAL SECTION:":
			section = &r.xt
		case line == "" || strings.HasPrefix(line, ";"):
		case section == nil:
			t.Fatalf("dig %v: a record outside a section: %q\n%s", args, line, out)
		default:
			f := strings.Fields(line)
			if len(f) > 1 && f[1] == "SOA" {
				f = f[:min(len(f), 4)] // without serial and timers
			}
			*section = append(*section, strings.Join(f, " "))
		}
	}
	return r
}

// compare returns how got differs from want, "" when it does not.
func compare(got, want reply) string {
	var diffs []string
	if got.status != want.status {
		diffs = append(diffs, fmt.Sprintf("status %s, want %s", got.status, want.status))
	}
	for _, s := range []struct {
		name      string
		got, want []string
	}{{"answer", got.answer, want.answer}, {"authority", got.authority, want.authority}, {"additional", got.xt, want.xt}} {
		if g, w := sorted(s.got), sorted(s.want); !slices.Equal(g, w) {
			diffs = append(diffs, fmt.Sprintf("%s section\n  %s\nwant\n  %s", s.name, strings.Join(g, "\n  "), strings.Join(w, "\n  ")))
		}
	}
	return strings.Join(diffs, "\n")
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// nslookup asks with BIND's nslookup (-vc: over TCP) and returns what it printed after the
// server lines, one entry per record (an address's "Name:" and "Address:" lines joined), sorted.
func nslookup(t *testing.T, port int, tcp bool, name, qtype string) ([]string, error) {
	args := []string{"-port=" + fmt.Sprint(port), "-type=" + qtype, "-timeout=2", "-retry=0"}
	if tcp {
		args = append(args, "-vc")
	}
	args = append(args, name, "127.0.0.1")
	out, err := exec.CommandContext(t.Context(), "nslookup", args...).CombinedOutput()
	var exit *exec.ExitError
	nxdomain := errors.As(err, &exit) && strings.Contains(string(out), ": NXDOMAIN") // nslookup exits 1
	if err != nil && !nxdomain {
		return nil, fmt.Errorf("nslookup %v: %w\n%s", args, err, out)
	}
	_, body, ok := strings.Cut(string(out), "127.0.0.1#"+fmt.Sprint(port)+"\n")
	if !ok {
		return nil, fmt.Errorf("nslookup %v: no server lines:\n%s", args, out)
	}
	var entries []string
	for line := range strings.Lines(body) {
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
		case strings.HasPrefix(line, "Address: ") && len(entries) > 0 && strings.HasPrefix(entries[len(entries)-1], "Name:"):
			entries[len(entries)-1] += " " + line
		default:
			entries = append(entries, line)
		}
	}
	slices.Sort(entries)
	return entries, nil
}

// nslookupLines is what nslookup prints for a reply to name: its answer records in nslookup's
// words, or its "can't find" line. It shows neither the additional section nor the SOA.
func nslookupLines(name string, r reply) []string {
	switch {
	case r.status == nxDomain:
		return []string{"** server can't find " + strings.TrimSuffix(name, ".") + ": NXDOMAIN"}
	case len(r.answer) == 0:
		return []string{"*** Can't find " + name + ": No answer"}
	}
	var lines []string
	for _, rr := range r.answer {
		f := strings.SplitN(rr, " ", 3)
		owner, rdata := strings.TrimSuffix(f[0], "."), f[2]
		switch f[1] {
		case "A", "AAAA":
			lines = append(lines, "Name:\t"+owner+" Address: "+rdata)
		case "SRV":
			lines = append(lines, owner+"\tservice = "+rdata)
		case "PTR":
			lines = append(lines, owner+"\tname = "+rdata)
		case "TXT":
			lines = append(lines, owner+"\ttext = "+rdata)
		}
	}
	slices.Sort(lines)
	return lines
}
