package podnet

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzNetworkStatus feeds Set and Find the network-status annotation as anyone who can edit a
// pod may write it (Multus, a user, a hostile workload). Neither panics; Set refuses what is
// not a JSON list rather than overwrite it; after Set with an entry, Find returns exactly that
// entry; after Set with none, Find finds none; and every entry that is not the secondary
// network's own is kept byte for byte, in order.
func FuzzNetworkStatus(f *testing.F) {
	f.Add(`[{"name":"default","interface":"eth0","ips":["10.0.0.5"],"default":true}]`, "10.112.0.9", "0a:58:0a:70:00:09", true)
	f.Add(`[{"name":"octopus.io/secondary","interface":"net1"},{"name":"x","dns":{}}]`, "fd00::9", "", false)
	f.Add(``, "10.112.0.1", "", true)
	f.Add(`{"name":"not a list"}`, "10.112.0.1", "", true)
	f.Add(`[1,"two",null,{"name":3}]`, "10.112.0.1", "", true)
	f.Fuzz(func(t *testing.T, current, ip, mac string, set bool) {
		var entry *Status
		if set {
			a, err := netip.ParseAddr(ip)
			// The entry is the ovnmaster's own (an address and a MAC it made): valid text.
			if err != nil || !utf8.ValidString(mac) {
				return
			}
			e := Entry(a, mac)
			entry = &e
		}
		out, err := Set(current, entry)
		if err != nil {
			if _, perr := parse(current); perr == nil {
				t.Fatalf("Set(%q) failed on a list: %v", current, err)
			}
			return
		}
		got, found, err := Find(map[string]string{NetworkStatusAnnotation: out})
		switch {
		case err != nil:
			t.Fatalf("Find after Set(%q) = %q: %v", current, out, err)
		case entry == nil && found:
			t.Fatalf("Set(%q, nil) = %q still has the entry %+v", current, out, got)
		case entry != nil && (!found || !reflect.DeepEqual(got, *entry)):
			t.Fatalf("Set(%q, %+v) = %q: Find gives %+v (found %v)", current, *entry, out, got, found)
		}
		before, _ := parse(current)
		after, _ := parse(out)
		if !reflect.DeepEqual(others(before), others(after)) {
			t.Fatalf("Set(%q) = %q changed the other entries", current, out)
		}
	})
}

// others are the entries that are not the secondary network's, compacted as json.Marshal
// writes them.
func others(l entries) []string {
	var out []string
	for _, raw := range l {
		if (entries{raw}).index() == 0 {
			continue
		}
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			out = append(out, string(raw))
			continue
		}
		out = append(out, b.String())
	}
	return out
}

// FuzzRequestedIP: the address request annotation is a pod author's input; RequestedIP never
// panics and returns an address only when the value is one, in its canonical form.
func FuzzRequestedIP(f *testing.F) {
	f.Add("10.112.0.9")
	f.Add("fd00::1%eth0")
	f.Add("10.112.0.9/24")
	f.Fuzz(func(t *testing.T, v string) {
		a, err := RequestedIP(map[string]string{RequestedIPAnnotation: v})
		if err != nil {
			return
		}
		if want, perr := netip.ParseAddr(v); perr != nil || a != want {
			t.Fatalf("RequestedIP(%q) = %v, ParseAddr gives %v, %v", v, a, want, perr)
		}
	})
}
