package cli

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
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

// TestShowRoutesManual: the cluster's InterconnectRoutes are listed after the advertised
// routes, as their status says: manual when on the router (with the resolved next hop),
// manual-not-applied with the condition's reason otherwise, or before the icmaster saw them.
func TestShowRoutesManual(t *testing.T) {
	ready := func(status metav1.ConditionStatus, reason string) []metav1.Condition {
		return []metav1.Condition{{Type: v1alpha1.InterconnectRouteConditionReady, Status: status, Reason: reason}}
	}
	items := []v1alpha1.InterconnectRoute{
		{ObjectMeta: metav1.ObjectMeta{Name: "to-north"}, Spec: v1alpha1.InterconnectRouteSpec{Prefix: "10.112.9.0/24", TargetCluster: "north"},
			Status: v1alpha1.InterconnectRouteStatus{Conditions: ready(metav1.ConditionFalse, v1alpha1.ReasonUnknownCluster)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "to-west"}, Spec: v1alpha1.InterconnectRouteSpec{Prefix: "10.112.1.0/24", TargetCluster: "west"},
			Status: v1alpha1.InterconnectRouteStatus{NextHop: "169.254.100.2", Conditions: ready(metav1.ConditionTrue, v1alpha1.ReasonRouteApplied)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "new"}, Spec: v1alpha1.InterconnectRouteSpec{Prefix: "10.112.5.0/24", NextHop: "169.254.100.5"}},
	}
	rows := append(routeRows("east", false, []ovnic.AdvertisedRoute{
		{AZ: "east", TransitSwitch: "ts", Prefix: "10.112.0.0/24", NextHop: "169.254.100.1", Origin: "connected"},
	}), manualRows("east", items)...)
	var b strings.Builder
	if err := renderRoutes(&b, "east", []string{"east", "west"}, rows); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"east ts 10.112.0.0/24 169.254.100.1 connected advertised",
		"east ts 10.112.1.0/24 169.254.100.2 InterconnectRoute/to-west manual",
		"east ts 10.112.5.0/24 169.254.100.5 InterconnectRoute/new manual-not-applied (not handled yet by the icmaster)",
		"east ts 10.112.9.0/24 InterconnectRoute/to-north manual-not-applied (UnknownCluster)",
		"2 AZs in the interconnection, 1 routes advertised, 3 manual.",
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 0 {
			got = append(got, strings.Join(f, " "))
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("output:\n%s\nwant rows:\n%s", b.String(), strings.Join(want, "\n"))
	}
}
