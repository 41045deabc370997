package crossdns

import (
	"slices"
	"strings"
	"testing"

	"github.com/coredns/caddy"
)

func TestParse(t *testing.T) {
	cases := []struct {
		name, corefile string
		want           Config
		fallFor        string // a name fallthrough must cover, "" for none
		wantErr        string
	}{
		{name: "defaults", corefile: "crossdns", want: Config{Zone: "clusterset.local.", TTL: 5}},
		{name: "everything", corefile: "crossdns clusterset.local {\n kubeconfig /etc/k.yaml\n ttl 30\n fallthrough\n}",
			want: Config{Zone: "clusterset.local.", TTL: 30, Kubeconfig: "/etc/k.yaml"}, fallFor: "a.clusterset.local."},
		{name: "another zone, any case", corefile: "crossdns Example.ORG", want: Config{Zone: "example.org.", TTL: 5}},
		{name: "reverse zones", corefile: "crossdns clusterset.local in-addr.arpa IP6.ARPA",
			want: Config{Zone: "clusterset.local.", TTL: 5, Reverse: []string{"in-addr.arpa.", "ip6.arpa."}}},
		{name: "reverse zones only: the default zone", corefile: "crossdns 100.10.in-addr.arpa",
			want: Config{Zone: "clusterset.local.", TTL: 5, Reverse: []string{"100.10.in-addr.arpa."}}},
		{name: "a CIDR stands for its reverse zones", corefile: "crossdns clusterset.local 10.100.0.0/15 fd00::/8",
			want: Config{Zone: "clusterset.local.", TTL: 5, Reverse: []string{"100.10.in-addr.arpa.", "101.10.in-addr.arpa.", "d.f.ip6.arpa."}}},
		{name: "not a reverse zone", corefile: "crossdns clusterset.local x.in-addr.arpa", wantErr: "reverse zone x.in-addr.arpa."},
		{name: "ttl 0", corefile: "crossdns {\n ttl 0\n}", want: Config{Zone: "clusterset.local."}},
		{name: "negative ttl", corefile: "crossdns {\n ttl -1\n}", wantErr: "ttl"},
		{name: "huge ttl", corefile: "crossdns {\n ttl 2147483648\n}", wantErr: "ttl"},
		{name: "ttl without value", corefile: "crossdns {\n ttl\n}", wantErr: "Wrong argument count"},
		{name: "kubeconfig without path", corefile: "crossdns {\n kubeconfig\n}", wantErr: "kubeconfig takes one path"},
		{name: "two zones", corefile: "crossdns a.local b.local", wantErr: "one zone"},
		{name: "unknown property", corefile: "crossdns {\n endpoint http://x\n}", wantErr: `unknown property "endpoint"`},
		{name: "twice", corefile: "crossdns\ncrossdns", wantErr: "only be used once"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(caddy.NewTestController("dns", tc.corefile))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Zone != tc.want.Zone || got.TTL != tc.want.TTL || got.Kubeconfig != tc.want.Kubeconfig || !slices.Equal(got.Reverse, tc.want.Reverse) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if through := got.Fall.Through("a.clusterset.local."); through != (tc.fallFor != "") {
				t.Errorf("fallthrough %v, want %v", through, tc.fallFor != "")
			}
		})
	}
}
