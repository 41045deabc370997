package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"strconv"
	"strings"

	"github.com/go-logr/logr"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// MemberValues are the member chart's values (charts/octopus-member/values.yaml) for a
// joinConfig and, optional, the cloudPrepareConfig beside it. The components take their settings from the chart's config map as OCTOPUS_<FLAG>
// variables (cmd/octopus-agent/env.go), so a setting is one key whichever component reads it.
func MemberValues(jc *v1alpha1.JoinConfig, cp *v1alpha1.CloudPrepareConfig) (map[string]any, error) {
	backend := jc.Backend
	if backend == "" {
		backend = v1alpha1.BackendWireGuard
	}
	gateway := map[string]any{"backend": string(backend)}
	if len(jc.GatewayNodeSelector) > 0 {
		// Helm merges a user's map into the chart's default, so the default label is
		// removed (null) unless the selector names it.
		sel := map[string]any{v1alpha1.GatewayNodeLabel: nil}
		for k, v := range jc.GatewayNodeSelector {
			sel[k] = v
		}
		gateway["nodeSelector"] = sel
	}
	values := map[string]any{"gateway": gateway}
	config := map[string]any{}
	if hc := jc.HealthCheck; hc != nil && hc.Interval.Duration > 0 {
		config["OCTOPUS_HEALTH_INTERVAL"] = hc.Interval.Duration.String()
	}
	if hc := jc.HealthCheck; hc != nil && hc.MaxPacketLoss > 0 {
		config["OCTOPUS_HEALTH_MAX_LOSS"] = strconv.Itoa(int(hc.MaxPacketLoss))
	}
	if ttl := jc.SilentClusterTTL; ttl != nil {
		config["OCTOPUS_SILENT_CLUSTER_TTL"] = ttl.Duration.String()
	}
	maps.Copy(config, gatewayConfig(cp))
	if len(jc.ExcludedSubnets) > 0 {
		config["OCTOPUS_EXCLUDE_SUBNET"] = strings.Join(jc.ExcludedSubnets, ",")
	}
	if len(config) > 0 {
		values["config"] = config
	}
	if jc.Image != "" {
		values["image"] = map[string]any{"repository": jc.Image}
	}
	// Normalized as Helm stores them (JSON), so that sameValues compares like with like.
	return normalize(values)
}

func normalize(v map[string]any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding the member chart's values: %w", err)
	}
	out := map[string]any{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("decoding the member chart's values: %w", err)
	}
	return out, nil
}

// sameValues tells whether a release was installed with values.
func sameValues(installed, values map[string]any) bool {
	a, err := normalize(installed)
	if err != nil {
		return false
	}
	return reflect.DeepEqual(a, values)
}

func logFrom(ctx context.Context) logr.Logger {
	return logr.FromContextOrDiscard(ctx)
}
