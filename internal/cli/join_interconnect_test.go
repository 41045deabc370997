package cli

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/octopus-mcs/octopus/internal/secondarynet/icconfig"
)

// TestInterconnectFlags: join's OVN-IC flags are the ovn-ic-config keys; a Kube-OVN file gives
// all of them and flags given too override its keys; every input goes through the parser the
// icmaster reads the ConfigMap with.
func TestInterconnectFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ovn-ic-config.yaml")
	if err := os.WriteFile(file, []byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: ovn-ic-config, namespace: kube-system}
data:
  enable-ic: "true"
  ic-db-host: "192.0.2.1,192.0.2.2,192.0.2.3"
  ic-nb-port: "7645"
  ic-sb-port: "7646"
  gw-nodes: "gw1,gw2"
  auto-route: "false"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		want    *icconfig.Config
		wantErr string
	}{
		{name: "no interconnect", args: nil},
		{name: "flags", args: []string{"--interconnect=ovn-ic", "--ic-db-host=192.0.2.1,192.0.2.2", "--gw-nodes=gw1"},
			want: &icconfig.Config{Enabled: true, DBHosts: []string{"192.0.2.1", "192.0.2.2"}, NBPort: 6645, SBPort: 6646, GatewayNodes: []string{"gw1"}, AutoRoute: true}},
		{name: "Kube-OVN's file", args: []string{"--interconnect=ovn-ic", "--ovn-ic-config=" + file},
			want: &icconfig.Config{Enabled: true, DBHosts: []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"}, NBPort: 7645, SBPort: 7646, GatewayNodes: []string{"gw1", "gw2"}}},
		{name: "the file and a flag over it", args: []string{"--interconnect=ovn-ic", "--ovn-ic-config=" + file, "--gw-nodes=gw3", "--auto-route"},
			want: &icconfig.Config{Enabled: true, DBHosts: []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"}, NBPort: 7645, SBPort: 7646, GatewayNodes: []string{"gw3"}, AutoRoute: true}},
		{name: "a key flag without --interconnect", args: []string{"--gw-nodes=gw1"}, wantErr: "add --interconnect ovn-ic"},
		{name: "another interconnect", args: []string{"--interconnect=vxlan"}, wantErr: `--interconnect "vxlan"`},
		{name: "no database host", args: []string{"--interconnect=ovn-ic"}, wantErr: "ic-db-host: required"},
		{name: "a host with a port", args: []string{"--interconnect=ovn-ic", "--ic-db-host=192.0.2.1:6645"}, wantErr: "without port"},
		{name: "a gateway node twice", args: []string{"--interconnect=ovn-ic", "--ic-db-host=h", "--gw-nodes=a,a"}, wantErr: `node "a" listed twice`},
		{name: "a missing file", args: []string{"--interconnect=ovn-ic", "--ovn-ic-config=/nonexistent"}, wantErr: "--ovn-ic-config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f interconnectFlags
			fs := pflag.NewFlagSet("join", pflag.ContinueOnError)
			f.addFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := f.config()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("config() = %+v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("config() = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
