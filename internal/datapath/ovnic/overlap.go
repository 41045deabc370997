package ovnic

import (
	"errors"
	"net/netip"

	"github.com/octopus-mcs/octopus/internal/datapath/ovnic/icsbdb"
)

// checkOverlap refuses the prefixes az would advertise that overlap a prefix another AZ
// advertises on az's transit switch, unless az advertises that very prefix already (it came
// first, or both raced and ovn-ic published both: then neither Apply withdraws it, and the
// overlap is only reported by the other AZ's Apply). zones maps IC SB Availability_Zone UUIDs to
// names; routes are the IC SB Route rows.
func checkOverlap(az AZ, zones map[string]string, routes []icsbdb.Route) error {
	want := az.advertised()
	if len(want) == 0 {
		return nil
	}
	type adv struct {
		az     string
		prefix netip.Prefix
	}
	var others []adv
	ours := map[netip.Prefix]bool{}
	for _, r := range routes {
		if r.TransitSwitch != az.TransitSwitch {
			continue
		}
		p, err := netip.ParsePrefix(r.IPPrefix)
		if err != nil {
			continue // not a prefix ovn-ic would learn either
		}
		name := zones[r.AvailabilityZone]
		if name == az.Name {
			ours[p.Masked()] = true
			continue
		}
		others = append(others, adv{az: name, prefix: p.Masked()})
	}
	var errs []error
	for _, p := range want {
		if ours[p] {
			continue
		}
		for _, o := range others {
			if p.Overlaps(o.prefix) {
				errs = append(errs, &OverlapError{AZ: az.Name, OtherAZ: o.az, Prefix: p, OtherPrefix: o.prefix, TransitSwitch: az.TransitSwitch})
			}
		}
	}
	return errors.Join(errs...)
}
