package operator

import (
	"maps"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// TestMemberValuesConfig checks the chart config keys a Fabric's health check and cloud
// provider turn into: the gateway flags --health-interval, --health-max-loss,
// --silent-cluster-ttl and --open-host-firewall (cmd/octopus-agent/gateway.go) read them as OCTOPUS_<FLAG>.
func TestMemberValuesConfig(t *testing.T) {
	hc := &v1alpha1.HealthCheck{Interval: metav1.Duration{Duration: 2 * time.Second}, MaxPacketLoss: 5}
	tests := []struct {
		name string
		jc   v1alpha1.JoinConfig
		cp   *v1alpha1.CloudPrepareConfig
		want map[string]any // nil: no config key at all
	}{
		{name: "defaults", want: nil},
		{name: "health check", jc: v1alpha1.JoinConfig{HealthCheck: hc},
			want: map[string]any{"OCTOPUS_HEALTH_INTERVAL": "2s", "OCTOPUS_HEALTH_MAX_LOSS": "5"}},
		{name: "generic opens the host firewall", cp: &v1alpha1.CloudPrepareConfig{Provider: v1alpha1.CloudProviderGeneric},
			want: map[string]any{"OCTOPUS_OPEN_HOST_FIREWALL": "true"}},
		{name: "silent cluster TTL", jc: v1alpha1.JoinConfig{SilentClusterTTL: &metav1.Duration{Duration: 90 * time.Second}},
			want: map[string]any{"OCTOPUS_SILENT_CLUSTER_TTL": "1m30s"}},
		{name: "a cloud provider does not", cp: &v1alpha1.CloudPrepareConfig{Provider: v1alpha1.CloudProviderAWS}, want: nil},
		{name: "both", jc: v1alpha1.JoinConfig{HealthCheck: hc}, cp: &v1alpha1.CloudPrepareConfig{Provider: v1alpha1.CloudProviderGeneric},
			want: map[string]any{"OCTOPUS_HEALTH_INTERVAL": "2s", "OCTOPUS_HEALTH_MAX_LOSS": "5", "OCTOPUS_OPEN_HOST_FIREWALL": "true"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			values, err := MemberValues(&tt.jc, tt.cp)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := values["config"].(map[string]any)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("config = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestInterconnectConfig: joinConfig.interconnect maps key for key onto ovn-ic-config, the
// CRD's autoRoute default (true) included.
func TestInterconnectConfig(t *testing.T) {
	if interconnectConfig(nil) != nil {
		t.Error("no interconnect field gave an ovn-ic-config")
	}
	off := false
	for _, tc := range []struct {
		in   v1alpha1.JoinInterconnect
		want map[string]string
	}{
		{v1alpha1.JoinInterconnect{ICDBHost: []string{"a", "b"}, ICNBPort: 6645, ICSBPort: 6646, GWNodes: []string{"g1", "g2"}},
			map[string]string{"enable-ic": "false", "ic-db-host": "a,b", "ic-nb-port": "6645", "ic-sb-port": "6646", "gw-nodes": "g1,g2", "auto-route": "true"}},
		{v1alpha1.JoinInterconnect{ICDBHost: []string{"a"}, ICNBPort: 1, ICSBPort: 2, AutoRoute: &off},
			map[string]string{"enable-ic": "false", "ic-db-host": "a", "ic-nb-port": "1", "ic-sb-port": "2", "auto-route": "false"}},
	} {
		// enable-ic and az-name are join's to set (the field's presence, the cluster ID).
		if got := interconnectConfig(&tc.in).Data(); !maps.Equal(got, tc.want) {
			t.Errorf("interconnectConfig(%+v).Data() = %v, want %v", tc.in, got, tc.want)
		}
	}
}
