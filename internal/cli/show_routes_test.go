package cli

import (
	"strings"
	"testing"

	"github.com/octopus-mcs/octopus/internal/datapath/ovnic"
)

// TestShowRoutesKinds: each AZ's advertised route is, for the cluster looked at, its own
// (advertised), learned with auto-route on, not learned with it off.
func TestShowRoutesKinds(t *testing.T) {
	routes := []ovnic.AdvertisedRoute{
		{AZ: "east", TransitSwitch: "ts", Prefix: "10.112.0.0/24", NextHop: "169.254.100.1", Origin: "connected"},
		{AZ: "west", TransitSwitch: "ts", Prefix: "10.112.1.0/24", NextHop: "169.254.100.2", Origin: "connected"},
	}
	for _, tc := range []struct {
		auto bool
		want map[string]string
	}{
		{true, map[string]string{"east": routeAdvertised, "west": routeLearned}},
		{false, map[string]string{"east": routeAdvertised, "west": routeNotLearned}},
	} {
		rows := routeRows("east", tc.auto, routes)
		var b strings.Builder
		if err := renderRoutes(&b, "east", []string{"east", "west"}, rows); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		if len(lines) != 5 || !strings.Contains(lines[0], "FOR east") || !strings.Contains(lines[4], "2 AZs") {
			t.Fatalf("auto-route %v, output:\n%s", tc.auto, b.String())
		}
		for _, line := range lines[1:3] {
			f := strings.Fields(line)
			if got := f[len(f)-1]; got != tc.want[f[0]] {
				t.Errorf("auto-route %v: %s's route is %q for east, want %q", tc.auto, f[0], got, tc.want[f[0]])
			}
		}
	}
}
