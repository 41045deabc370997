package podnet

import (
	"net/netip"
	"slices"
	"testing"
	"unicode/utf8"
)

func TestSet(t *testing.T) {
	ours := Entry(netip.MustParseAddr("10.112.0.2"), "0a:58:0a:70:00:02")
	const oursJSON = `{"name":"octopus.io/secondary","interface":"net1","ips":["10.112.0.2"],"mac":"0a:58:0a:70:00:02"}`
	const multus = `{"name":"cbr0","interface":"eth0","ips":["10.244.0.5"],"default":true,"dns":{"nameservers":["10.96.0.10"]},"mtu":1450}`
	for _, tc := range []struct {
		name, current string
		entry         *Status
		want          string
		wantErr       bool
	}{
		{name: "add to nothing", entry: &ours, want: "[" + oursJSON + "]"},
		{name: "add after Multus's entry, keeping its fields", current: "[" + multus + "]", entry: &ours, want: "[" + multus + "," + oursJSON + "]"},
		{name: "replace ours in place", current: `[{"name":"octopus.io/secondary","ips":["10.112.0.9"]},` + multus + `]`, entry: &ours, want: "[" + oursJSON + "," + multus + "]"},
		{name: "remove ours", current: "[" + multus + "," + oursJSON + "]", want: "[" + multus + "]"},
		{name: "remove the last entry removes the annotation", current: "[" + oursJSON + "]", want: ""},
		{name: "remove from nothing", want: ""},
		{name: "not a list is left alone", current: `{"name":"x"}`, entry: &ours, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Set(tc.current, tc.entry)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Set() error = %v, want error %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("Set() =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestFind(t *testing.T) {
	v, err := Set(`[{"name":"cbr0","interface":"eth0"}]`, &Status{Name: NetworkName, Interface: "net1", IPs: []string{"10.112.0.7"}, MAC: "0a:58:0a:70:00:07"})
	if err != nil {
		t.Fatal(err)
	}
	s, ok, err := Find(map[string]string{NetworkStatusAnnotation: v})
	if err != nil || !ok || s.IPs[0] != "10.112.0.7" || s.Interface != "net1" {
		t.Fatalf("Find = %+v, %v, %v", s, ok, err)
	}
	if _, ok, err := Find(map[string]string{}); ok || err != nil {
		t.Fatalf("Find on no annotation = %v, %v", ok, err)
	}
	if _, _, err := Find(map[string]string{NetworkStatusAnnotation: "nope"}); err == nil {
		t.Fatal("Find accepted a broken annotation")
	}
}

func TestRequestedIP(t *testing.T) {
	if a, err := RequestedIP(map[string]string{RequestedIPAnnotation: "10.112.0.50"}); err != nil || a != netip.MustParseAddr("10.112.0.50") {
		t.Errorf("RequestedIP = %v, %v", a, err)
	}
	if a, err := RequestedIP(nil); err != nil || a.IsValid() {
		t.Errorf("RequestedIP(nil) = %v, %v", a, err)
	}
	if _, err := RequestedIP(map[string]string{RequestedIPAnnotation: "10.112.0.50/24"}); err == nil {
		t.Error("RequestedIP accepted a prefix")
	}
}

func TestPlacement(t *testing.T) {
	entry, err := Set("", &Status{Name: NetworkName, Interface: "net1", IPs: []string{"10.0.1.2"}})
	if err != nil {
		t.Fatal(err)
	}
	red := VpcAttachment{Vpc: "red", Subnet: "a", CIDR: netip.MustParsePrefix("10.0.1.0/24")}.Encode()
	bound := map[string]string{"shop": "blue"}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		namespace   string
		want        string
	}{
		{name: "no address yet: where the namespace is bound", namespace: "shop", want: "blue"},
		{name: "no address, namespace unbound: the cluster's network", namespace: "other", want: ""},
		{name: "addressed on red stays on red though the namespace moved to blue", namespace: "shop",
			annotations: map[string]string{NetworkStatusAnnotation: entry, VpcAnnotation: red}, want: "red"},
		{name: "addressed on the cluster's network stays there though the namespace is bound", namespace: "shop",
			annotations: map[string]string{NetworkStatusAnnotation: entry}, want: ""},
		{name: "a VPC annotation without an address does not place the pod", namespace: "other",
			annotations: map[string]string{VpcAnnotation: red}, want: ""},
		{name: "a malformed VPC annotation: where the namespace is bound", namespace: "shop",
			annotations: map[string]string{NetworkStatusAnnotation: entry, VpcAnnotation: "{"}, want: "blue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Placement(tc.annotations, tc.namespace, bound); got != tc.want {
				t.Errorf("Placement = %q, want %q", got, tc.want)
			}
		})
	}
	got, ok, err := FindVpc(map[string]string{VpcAnnotation: red})
	if err != nil || !ok || got.Vpc != "red" || got.CIDR != netip.MustParsePrefix("10.0.1.0/24") {
		t.Errorf("FindVpc(Encode) = %+v, %v, %v", got, ok, err)
	}
}

// FuzzNetworkStatus writes the secondary network's entry into, and removes it from, any
// annotation value (a pod's author can write anything there): a value that is not a JSON list
// is refused and left alone; otherwise Find then returns exactly what Set wrote, or nothing
// after removal, even when the value already held entries of that name, and every other entry
// is kept byte for byte and in order.
func FuzzNetworkStatus(f *testing.F) {
	for _, seed := range []string{
		"",
		`[{"name":"cbr0","interface":"eth0","ips":["10.244.0.5"],"default":true}]`,
		`[{"name":"octopus.io/secondary","ips":["10.112.0.9"]},{"name":"octopus.io/secondary","ips":["10.112.0.66"]}]`,
		`[{"NAME":"octopus.io/secondary"},{"name":"x"}]`,
		`[1,"a",null,{}]`,
		`{"name":"x"}`,
	} {
		f.Add(seed, "10.112.0.7", "0a:58:0a:70:00:07")
	}
	f.Fuzz(func(t *testing.T, current, ip, mac string) {
		if !utf8.ValidString(ip) || !utf8.ValidString(mac) {
			// JSON cannot carry them; the ovnmaster writes addresses and MACs it formatted.
			return
		}
		want := Status{Name: NetworkName, Interface: InterfaceName, IPs: []string{ip}, MAC: mac}
		others := func(v string) []string {
			list, err := parse(v)
			if err != nil {
				t.Fatalf("parse(%q): %v", v, err)
			}
			var out []string
			for _, raw := range list {
				if !isOurs(raw) {
					out = append(out, string(raw))
				}
			}
			return out
		}
		written, err := Set(current, &want)
		if _, perr := parse(current); perr != nil {
			if err == nil || written != "" {
				t.Fatalf("Set over %q, not a list: %q, %v; want an error", current, written, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Set(%q): %v", current, err)
		}
		got, ok, err := Find(map[string]string{NetworkStatusAnnotation: written})
		if err != nil || !ok || !equalStatus(got, want) {
			t.Fatalf("Find(Set(%q)) = %+v, %v, %v; want %+v", current, got, ok, err, want)
		}
		if !slices.Equal(others(written), others(current)) {
			t.Fatalf("Set(%q) = %q: the other entries changed", current, written)
		}
		removed, err := Set(written, nil)
		if err != nil {
			t.Fatalf("Set(%q, nil): %v", written, err)
		}
		if _, ok, err := Find(map[string]string{NetworkStatusAnnotation: removed}); ok || err != nil {
			t.Fatalf("Find after removal from %q = %v, %v; want nothing", written, ok, err)
		}
		if removed != "" && !slices.Equal(others(removed), others(current)) {
			t.Fatalf("removal from %q = %q: the other entries changed", written, removed)
		}
	})
}

func equalStatus(a, b Status) bool {
	return a.Name == b.Name && a.Interface == b.Interface && slices.Equal(a.IPs, b.IPs) && a.MAC == b.MAC && a.Default == b.Default
}
