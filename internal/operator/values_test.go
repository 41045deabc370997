package operator

import (
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
