package icconfig

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		data    map[string]string
		want    Config
		wantErr string
	}{
		{
			name: "Kube-OVN's documented example",
			data: map[string]string{
				"enable-ic": "true", "az-name": "az1", "ic-db-host": "192.168.65.3",
				"ic-nb-port": "6645", "ic-sb-port": "6646", "gw-nodes": "az1-gw", "auto-route": "true",
			},
			want: Config{Enabled: true, AZName: "az1", DBHosts: []string{"192.168.65.3"}, NBPort: 6645, SBPort: 6646,
				GatewayNodes: []string{"az1-gw"}, AutoRoute: true},
		},
		{
			name: "raft members and active-backup gateways, in order, blanks dropped",
			data: map[string]string{"enable-ic": "true", "ic-db-host": "10.0.0.1, 10.0.0.2,10.0.0.3,", "gw-nodes": "gw-a, gw-b"},
			want: Config{Enabled: true, DBHosts: []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}, NBPort: 6645, SBPort: 6646,
				GatewayNodes: []string{"gw-a", "gw-b"}},
		},
		{
			name: "only \"true\" enables, as in Kube-OVN",
			data: map[string]string{"enable-ic": "yes", "auto-route": "True"},
			want: Config{NBPort: 6645, SBPort: 6646},
		},
		{name: "enabled without hosts", data: map[string]string{"enable-ic": "true"}, wantErr: "ic-db-host: required"},
		{name: "port out of range", data: map[string]string{"ic-nb-port": "70000"}, wantErr: `ic-nb-port "70000"`},
		{name: "host with port", data: map[string]string{"ic-db-host": "10.0.0.1:6645"}, wantErr: "without port"},
		{name: "misspelt key", data: map[string]string{"gw-node": "a"}, wantErr: `unknown key "gw-node"`},
		{name: "gateway twice", data: map[string]string{"gw-nodes": "a,b,a"}, wantErr: `node "a" listed twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.data)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse: error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Parse = %+v, want %+v", got, tc.want)
			}
			back, err := Parse(got.Data())
			if err != nil || !reflect.DeepEqual(back, got) {
				t.Fatalf("Parse(Data()) = %+v, %v; want %+v", back, err, got)
			}
		})
	}
}

func TestEndpoints(t *testing.T) {
	c := Config{DBHosts: []string{"10.0.0.1", "10.0.0.2"}, NBPort: 6645, SBPort: 6646}
	if got, want := c.ICNB(), "ssl:10.0.0.1:6645,ssl:10.0.0.2:6645"; got != want {
		t.Errorf("ICNB = %q, want %q", got, want)
	}
	if got, want := c.ICSB(), "ssl:10.0.0.1:6646,ssl:10.0.0.2:6646"; got != want {
		t.Errorf("ICSB = %q, want %q", got, want)
	}
}

func TestCheckAZName(t *testing.T) {
	for _, tc := range []struct {
		az   string
		fail bool
	}{{"", false}, {"east", false}, {"az1", true}} {
		if err := (Config{AZName: tc.az}).CheckAZName("east"); (err != nil) != tc.fail {
			t.Errorf("CheckAZName(%q) for east: %v, want failure %v", tc.az, err, tc.fail)
		}
	}
}

func TestTransitAddress(t *testing.T) {
	pool := netip.MustParsePrefix("10.112.0.0/16")
	for _, tc := range []struct {
		block, want, wantErr string
	}{
		{block: "10.112.0.0/24", want: "169.254.100.1/24"},
		{block: "10.112.1.0/24", want: "169.254.100.2/24"},
		{block: "10.112.253.0/24", want: "169.254.100.254/24"},
		{block: "10.112.254.0/24", wantErr: "has only 254 addresses"},
		{block: "10.113.0.0/24", wantErr: "inside the pool"},
		{block: "10.112.0.0/15", wantErr: "inside the pool"},
	} {
		got, err := TransitAddress(pool, netip.MustParsePrefix(tc.block))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("TransitAddress(%s): %v, want an error containing %q", tc.block, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("TransitAddress(%s) = %s, %v; want %s", tc.block, got, err, tc.want)
		}
	}
}

func TestParseConfigMap(t *testing.T) {
	kubeOVN := `apiVersion: v1
kind: ConfigMap
metadata:
  name: ovn-ic-config
  namespace: kube-system
data:
  enable-ic: "true"
  az-name: "az1"
  ic-db-host: "192.168.65.3,192.168.65.4"
  ic-nb-port: "6645"
  ic-sb-port: "6646"
  gw-nodes: "az1-gateway"
  auto-route: "true"
`
	got, err := ParseConfigMap([]byte(kubeOVN))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Enabled: true, AZName: "az1", DBHosts: []string{"192.168.65.3", "192.168.65.4"},
		NBPort: 6645, SBPort: 6646, GatewayNodes: []string{"az1-gateway"}, AutoRoute: true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseConfigMap(Kube-OVN's example) = %+v, want %+v", got, want)
	}
	for name, tc := range map[string]struct{ file, wantErr string }{
		"another ConfigMap": {strings.Replace(kubeOVN, "name: ovn-ic-config", "name: kube-proxy", 1), `"kube-proxy", not ovn-ic-config`},
		"a Secret":          {strings.Replace(kubeOVN, "kind: ConfigMap", "kind: Secret", 1), "not a v1 ConfigMap"},
		"a misspelt key":    {strings.Replace(kubeOVN, "gw-nodes:", "gw-node:", 1), `unknown key "gw-node"`},
		"no data":           {"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ovn-ic-config\n", "no data"},
		"not YAML":          {"{", "reading the ovn-ic-config file"},
	} {
		if _, err := ParseConfigMap([]byte(tc.file)); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.wantErr)
		}
	}
}
