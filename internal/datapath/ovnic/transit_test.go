package ovnic

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/ovn-kubernetes/libovsdb/model"

	"github.com/octopus-mcs/octopus/internal/datapath/ovnic/icsbdb"
)

// TestTransitAddresses reads the AZs' transit port addresses from a real IC SB database, as
// the icmaster resolves an InterconnectRoute's targetCluster with them. One AZ, east, is real:
// ovn-ic publishes its port from what Apply wrote, so the test reads the address format ovn-ic
// actually writes. The others are rows written with ovn-ic-sbctl, each one case ovn-ic can
// leave behind: an AZ that registered but has no port yet, a port with several networks (IPv6
// first), a port on another transit switch only, an IPv6-only port, a port ovn-ic has not
// given an address. The result must be exactly the expected map: an AZ too many would make the
// icmaster route to a port that is not there.
func TestTransitAddresses(t *testing.T) {
	ctx := context.Background()
	dir := scratch(t)
	icnb := startICDB(t, dir, "icnb", icNBSchema, "ovn-ic-nbctl")
	icsb := startICDB(t, dir, "icsb", icSBSchema, "ovn-ic-sbctl")
	icnb.run(t, "ts-add", "ts", "--", "ts-add", "ts2")

	east := startZone(t, "east", icnb, icsb)
	east.nbctl(t, "ls-add", "octopus-east")
	east.apply(t, AZ{
		Name: "east", TransitSwitch: "ts", TransitAddress: netip.MustParsePrefix("169.254.100.1/24"),
		GatewayChassis: []string{"east-gw1"}, AutoRoutes: true,
		Subnets: []Subnet{{Switch: "octopus-east", Address: netip.MustParsePrefix("10.112.0.1/24")}},
	})

	// port writes one Port_Binding of a new AZ per transit switch and address; tunnel keys and
	// logical port names are unique, as the table's indexes demand.
	key := 100
	port := func(ts, address string) []string {
		key++
		return []string{"--", "create", "Port_Binding", "availability_zone=@az", "transit_switch=" + ts,
			fmt.Sprintf("logical_port=lp-%d", key), fmt.Sprintf("tunnel_key=%d", key),
			fmt.Sprintf("address=%q", address)}
	}
	addAZ := func(name string, ports ...[]string) {
		args := []string{"--id=@az", "create", "Availability_Zone", "name=" + name}
		for _, p := range ports {
			args = append(args, p...)
		}
		icsb.run(t, args...)
	}
	// west: what ovn-ic writes, "<mac> <address>/<bits>", and another port on ts2.
	addAZ("west", port("ts", "0a:58:a9:fe:64:02 169.254.100.2/24"), port("ts2", "0a:58:a9:fe:65:02 169.254.101.2/24"))
	// north registered, ovn-ic has not published its port yet.
	addAZ("north")
	// south: several networks on the port, the IPv6 one first; the IPv4 address is the next hop.
	addAZ("south", port("ts", "0a:58:a9:fe:64:03 fd00:100::3/64 169.254.100.3/24 169.254.200.3/24"))
	// only on ts2: absent from ts.
	addAZ("far", port("ts2", "0a:58:a9:fe:65:04 169.254.101.4/24"))
	// IPv6 only, and no address at all: nothing a manual IPv4 route can name.
	addAZ("v6only", port("ts", "0a:58:a9:fe:64:05 fd00:100::5/64"))
	addAZ("unset", port("ts", ""))
	// A bare address, no MAC and no prefix length, is still the port's address; a bare IPv6
	// one is not an IPv4 next hop.
	addAZ("bare", port("ts", "169.254.100.7"))
	addAZ("bare6", port("ts", "fd00:100::8"))

	for _, tc := range []struct {
		ts   string
		want map[string]netip.Addr
	}{
		{ts: "ts", want: map[string]netip.Addr{
			"east":  netip.MustParseAddr("169.254.100.1"),
			"west":  netip.MustParseAddr("169.254.100.2"),
			"south": netip.MustParseAddr("169.254.100.3"),
			"bare":  netip.MustParseAddr("169.254.100.7"),
		}},
		{ts: "ts2", want: map[string]netip.Addr{
			"west": netip.MustParseAddr("169.254.101.2"),
			"far":  netip.MustParseAddr("169.254.101.4"),
		}},
		{ts: "no-such-switch", want: map[string]netip.Addr{}},
	} {
		t.Run(tc.ts, func(t *testing.T) {
			// The client reads its monitor's cache: poll until the rows written above (and east's
			// port, published by ovn-ic) have reached it, and fail if it never equals want.
			eventually(t, convergeTimeout, "the transit addresses on "+tc.ts, func() error {
				got, err := east.client.TransitAddresses(ctx, tc.ts)
				if err != nil {
					t.Fatalf("TransitAddresses(%s): %v", tc.ts, err)
				}
				if got == nil || !maps.Equal(got, tc.want) {
					return fmt.Errorf("got %v, want %v; IC SB port bindings:\n%s", got, tc.want,
						icsb.run(t, "--columns=availability_zone,transit_switch,address", "list", "Port_Binding"))
				}
				return nil
			})
		})
	}

	// A leaving AZ's port goes with it (Leave deletes its Availability_Zone and Port_Binding
	// rows): it must drop out, not stay at its last address.
	icsb.run(t, "--", "destroy", "Port_Binding", portOf(t, icsb, "west", "ts"))
	eventually(t, convergeTimeout, "west's ts port to be gone", func() error {
		got, err := east.client.TransitAddresses(ctx, "ts")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := got["west"]; ok || got["east"] != netip.MustParseAddr("169.254.100.1") {
			return fmt.Errorf("got %v, want west gone and east kept", got)
		}
		return nil
	})
}

// portOf is the UUID of AZ az's port binding on transit switch ts.
func portOf(t *testing.T, icsb icDB, az, ts string) string {
	t.Helper()
	azUUID := strings.TrimSpace(icsb.run(t, "--bare", "--columns=_uuid", "find", "Availability_Zone", "name="+az))
	uuid := strings.TrimSpace(icsb.run(t, "--bare", "--columns=_uuid", "find", "Port_Binding",
		"availability_zone="+azUUID, "transit_switch="+ts))
	if uuid == "" || strings.Contains(uuid, "\n") {
		t.Fatalf("AZ %s's port on %s: %q", az, ts, uuid)
	}
	return uuid
}

// TestTransitAddressesErrors: each table TransitAddresses lists is named when it cannot be
// read, so that the icmaster's status says which. A client whose model lacks the table is the
// one way the cache refuses a List (a Client from Connect always has both).
func TestTransitAddressesErrors(t *testing.T) {
	ctx := context.Background()
	dir := scratch(t)
	icsb := startICDB(t, dir, "icsb", icSBSchema, "ovn-ic-sbctl")
	for _, tc := range []struct {
		name    string
		tables  map[string]model.Model
		monitor []model.Model
		want    string
	}{
		{
			name:    "no availability zones",
			tables:  map[string]model.Model{icsbdb.PortBindingTable: &icsbdb.PortBinding{}},
			monitor: []model.Model{&icsbdb.PortBinding{}},
			want:    "listing IC SB availability zones",
		},
		{
			name:    "no port bindings",
			tables:  map[string]model.Model{icsbdb.AvailabilityZoneTable: &icsbdb.AvailabilityZone{}},
			monitor: []model.Model{&icsbdb.AvailabilityZone{}},
			want:    "listing IC SB port bindings",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := model.NewClientDBModel(icsbdb.Schema().Name, tc.tables)
			if err != nil {
				t.Fatal(err)
			}
			c, err := connect(ctx, m, icsb.endpoint, nil, logr.Discard(), "OVN IC SB", tc.monitor...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			got, err := (&Client{icsb: c}).TransitAddresses(ctx, "ts")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("TransitAddresses = %v, %v; want an error containing %q", got, err, tc.want)
			}
			if got != nil {
				t.Errorf("TransitAddresses returned %v with its error; want nil", got)
			}
		})
	}
}
