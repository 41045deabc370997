package cli

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/manifests/render"
)

func TestHubDeployValidateInterconnect(t *testing.T) {
	valid := func() hubDeployOptions {
		return hubDeployOptions{globalnet: hub.DefaultGlobalnetPool, secondary: hub.DefaultSecondaryPool}
	}
	testValidate(t, valid, []validateCase[hubDeployOptions]{
		{"without interconnect", func(*hubDeployOptions) {}, ""},
		{"interconnect with defaults", func(o *hubDeployOptions) {
			o.interconnect, o.icTransitSwitches = true, []string{render.DefaultTransitSwitch}
		}, ""},
		{"an interconnect flag without --interconnect", func(o *hubDeployOptions) { o.icImage = "x" }, "add --interconnect"},
		{"an address that is a name", func(o *hubDeployOptions) {
			o.interconnect, o.icAddresses = true, []string{"hub-1"}
		}, "--interconnect-address \"hub-1\": give a hub node's IP address"},
	})

	o := valid()
	o.interconnect, o.icTransitSwitches, o.icAddresses = true, []string{"ts"}, []string{"192.0.2.10"}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	ic := o.deploy.Interconnect
	if ic == nil || ic.Image == "" || !slices.Equal(ic.TransitSwitches, []string{"ts"}) || !slices.Equal(ic.Addresses, []netip.Addr{netip.MustParseAddr("192.0.2.10")}) {
		t.Errorf("deploy.Interconnect = %+v, want the default image, ts and 192.0.2.10", ic)
	}
}
