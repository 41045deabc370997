package icmaster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/datapath/ovn"
	"github.com/octopus-mcs/octopus/internal/datapath/ovn/ovntest"
	"github.com/octopus-mcs/octopus/internal/datapath/ovnic"
	"github.com/octopus-mcs/octopus/internal/pki"
	"github.com/octopus-mcs/octopus/internal/secondarynet/icconfig"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

var pool = netip.MustParsePrefix("10.112.0.0/16")

// icPKI is the hub's IC CA as files: the IC databases' server certificate, and the client
// TLS configuration of a member's icmaster with its cluster certificate (as `octopus-ovn ic`
// builds it from --ic-certificate, --ic-private-key and --ic-ca-cert).
func icPKI(t *testing.T) (*tls.Config, ovntest.TLSFiles) {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.NewCA("octopus-ic-ca", 0)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _, err := ca.PEM()
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, leaf pki.Leaf) ovntest.TLSFiles {
		cert, key, err := ca.Issue(leaf)
		if err != nil {
			t.Fatal(err)
		}
		f := ovntest.TLSFiles{Key: filepath.Join(dir, name+".key"), Cert: filepath.Join(dir, name+".crt"), CA: filepath.Join(dir, "ca.crt")}
		for path, b := range map[string][]byte{f.Key: key, f.Cert: cert, f.CA: caPEM} {
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return f
	}
	server := write("server", pki.Leaf{CommonName: "octopus-ic-db", Server: true, IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}})
	client := write("cluster", pki.Leaf{CommonName: "cluster", Client: true})
	cfg, err := pki.ClientConfig(client.Cert, client.Key, client.CA, "")
	if err != nil {
		t.Fatal(err)
	}
	return cfg, server
}

// convergeTimeout bounds each wait on the daemons and the controller: idle, milliseconds to
// a few seconds; on this shared two-core machine ovn-ic's backoff alone can reach 8 s.
const convergeTimeout = 60 * time.Second

// az is one member cluster: a control plane with an icmaster, and its OVN central with ovn-ic.
type az struct {
	id      string
	block   netip.Prefix
	central *ovntest.Central
	kube    client.Client
}

// TestInterconnectFromConfigMap runs two member clusters (real kube-apiservers, each with an
// icmaster) whose OVN centrals are AZs of one pair of real IC databases with ovn-ic: each
// cluster's Kube-OVN-style ovn-ic-config makes it an AZ that advertises its block and learns
// the other's, live changes (gateway nodes, the opt-out) move what must move, and refusals are
// reported on the ConfigMap.
func TestInterconnectFromConfigMap(t *testing.T) {
	if testing.Short() {
		t.Skip("starts control planes and OVN daemons")
	}
	env := testenv.ControlPlanes(t, "east", "west", "south")
	icTLS, serverTLS := icPKI(t)
	ic := ovntest.StartInterconnection(t, serverTLS)
	if out, err := ic.NB.Ctl(t.Context(), "ts-add", icconfig.TransitSwitch); err != nil {
		t.Fatalf("making the transit switch: %v %s", err, out)
	}
	zones := map[string]*az{}
	// south is given east's block, as a hub would never do: the overlap check's case.
	blocks := map[string]string{"east": "10.112.0.0/24", "west": "10.112.1.0/24", "south": "10.112.0.0/24"}
	for _, id := range []string{"east", "west", "south"} {
		z := &az{id: id, block: netip.MustParsePrefix(blocks[id]), central: ovntest.StartCentral(t)}
		z.central.StartOVNIC(t, ic)
		// The secondary network's switch, the ovnmaster's job.
		if _, err := z.central.NB.Ctl(t.Context(), "ls-add", ovn.SwitchName(id)); err != nil {
			t.Fatal(err)
		}
		cfg := env.Cluster(id).RESTConfig()
		// The member's CRDs, as join installs them: InterconnectRoute among them.
		testenv.InstallCRDs(t, cfg)
		z.kube = testenv.Client(t, cfg)
		for _, ns := range []string{"kube-system", "octopus-system"} {
			_ = z.kube.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, Options{
				Member: cfg, ClusterID: id, CIDR: z.block, Pool: pool, NBEndpoint: z.central.NB.Endpoint, ICTLS: icTLS,
				LeaderElection: true, LeaderElectionNamespace: "octopus-system", MetricsBindAddress: "0",
				Log: testr.NewWithOptions(t, testr.Options{Verbosity: 1}).WithValues("cluster", id),
			})
		}()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("icmaster of %s: %v", id, err)
			}
		})
		zones[id] = z
	}
	east, west, south := zones["east"], zones["west"], zones["south"]
	config := func(gw string) map[string]string {
		return map[string]string{
			"enable-ic": "true", "ic-db-host": "127.0.0.1", "ic-nb-port": fmt.Sprint(ic.NBPort),
			"ic-sb-port": fmt.Sprint(ic.SBPort), "gw-nodes": gw, "auto-route": "true",
		}
	}
	east.writeConfig(t, config("east-gw1,east-gw2"), nil)
	// west joins once east's transit port is in IC SB. Two ovn-ic 23.03 processes that create
	// their first transit port at once both pick tunnel key 1: the second transaction fails on
	// IC SB's unique index, and that ovn-ic waits for a database change that, over unix
	// sockets (no inactivity probe), never comes, advertising and learning nothing (OVN fixed
	// it after 23.03: "ovn-ic: wakeup on ovsdb transaction failures"). A member's ovn-ic talks
	// to IC SB over SSL, whose 5 s probe wakes it; the test's would wait forever (CI19).
	eventually(t, "east's transit port in IC SB", func() error {
		out, err := ic.SB.Ctl(t.Context(), "--bare", "--columns=tunnel_key", "find", "Port_Binding",
			"logical_port="+ovnic.SwitchPortName("east", icconfig.TransitSwitch))
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) == "" {
			return errors.New("no Port_Binding yet")
		}
		return nil
	})
	west.writeConfig(t, config("west-gw1"), nil)

	t.Run("routes learned both ways", func(t *testing.T) {
		east.waitStatus(t, "Applied: AZ east on transit switch ts at 169.254.100.1/24, gateway chassis [east-gw1 east-gw2], routes: automatic")
		west.waitStatus(t, "Applied: AZ west on transit switch ts at 169.254.100.2/24")
		east.waitRoute(t, "10.112.1.0/24", "169.254.100.2")
		west.waitRoute(t, "10.112.0.0/24", "169.254.100.1")
		// What `octopus show routes` reads, over the cluster's IC certificate.
		icsb := icconfig.Config{DBHosts: []string{"127.0.0.1"}, SBPort: ic.SBPort}.ICSB()
		routes, names, err := ovnic.ReadRoutes(t.Context(), icsb, icTLS)
		want := []ovnic.AdvertisedRoute{
			{AZ: "east", TransitSwitch: "ts", Prefix: "10.112.0.0/24", NextHop: "169.254.100.1", Origin: "connected"},
			{AZ: "west", TransitSwitch: "ts", Prefix: "10.112.1.0/24", NextHop: "169.254.100.2", Origin: "connected"},
		}
		if err != nil || !slices.Equal(routes, want) || !slices.Equal(names, []string{"east", "west"}) {
			t.Errorf("ReadRoutes = %+v, %v, %v; want %+v of east and west", routes, names, err, want)
		}
		if _, _, err := ovnic.ReadRoutes(t.Context(), icsb, nil); err == nil {
			t.Error("ReadRoutes without a certificate succeeded")
		}
		azs, err := ic.SB.Ctl(t.Context(), "--bare", "--columns=name", "list", "Availability_Zone")
		if err != nil || strings.Join(strings.Fields(azs), ",") != "east,west" && strings.Join(strings.Fields(azs), ",") != "west,east" {
			t.Errorf("IC SB availability zones: %q, %v; want east and west", azs, err)
		}
	})

	t.Run("gateway nodes changed live", func(t *testing.T) {
		east.writeConfig(t, config("east-gw3,east-gw1"), nil)
		port := ovnic.RouterPortName("east", icconfig.TransitSwitch)
		eventually(t, "east's transit port on east-gw3 then east-gw1", func() error {
			out, err := east.central.NB.Ctl(t.Context(), "lrp-get-gateway-chassis", port)
			if err != nil {
				return err
			}
			if f := strings.Fields(out); len(f) != 4 || !strings.HasPrefix(f[0], port+"-east-gw3") || !strings.HasPrefix(f[2], port+"-east-gw1") {
				return fmt.Errorf("gateway chassis: %q", out)
			}
			return nil
		})
		east.waitStatus(t, "gateway chassis [east-gw3 east-gw1]")
		west.waitRoute(t, "10.112.0.0/24", "169.254.100.1")
	})

	t.Run("opt-out withdraws the block and its removal brings it back", func(t *testing.T) {
		east.writeConfig(t, config("east-gw3,east-gw1"), map[string]string{OptOutAnnotation: "true"})
		east.waitStatus(t, "10.112.0.0/24 opted out")
		west.waitRoute(t, "10.112.0.0/24", "")
		start := time.Now()
		east.writeConfig(t, config("east-gw3,east-gw1"), map[string]string{OptOutAnnotation: "false"})
		west.waitRoute(t, "10.112.0.0/24", "169.254.100.1")
		t.Logf("MEASURED: opt-out removed -> west learned east's block in %s", time.Since(start).Round(time.Millisecond))
	})

	t.Run("refusals reported, nothing changed", func(t *testing.T) {
		bad := config("east-gw3,east-gw1")
		bad["az-name"] = "az1"
		east.writeConfig(t, bad, nil)
		east.waitStatus(t, `Refused: ovn-ic-config: az-name "az1" differs from the cluster ID "east"`)
		bad = config("east-gw3,east-gw1")
		bad["gw-node"] = "x"
		east.writeConfig(t, bad, nil)
		east.waitStatus(t, `unknown key "gw-node"`)
		west.waitRoute(t, "10.112.0.0/24", "169.254.100.1")
	})

	t.Run("a second AZ advertising a learned prefix is refused, naming both", func(t *testing.T) {
		south.writeConfig(t, config("south-gw1"), nil)
		south.waitStatus(t, "prefix 10.112.0.0/24 of AZ south overlaps 10.112.0.0/24, which AZ east already advertises")
		west.waitRoute(t, "10.112.0.0/24", "169.254.100.1")
		if out, err := south.central.NB.Ctl(t.Context(), "lr-list"); err != nil || strings.Contains(out, ovnic.RouterName("south")) {
			t.Errorf("south's NB routers after the refusal: %q, %v; want none of ours", out, err)
		}
		// South leaves, or its 30-s re-check would take the prefix once east leaves below.
		off := config("south-gw1")
		off["enable-ic"] = "false"
		south.writeConfig(t, off, nil)
		south.waitStatus(t, "AZ south left the interconnection")
	})

	t.Run("manual routes from InterconnectRoutes", func(t *testing.T) {
		manual := config("east-gw3,east-gw1")
		manual["auto-route"] = "false"
		east.writeConfig(t, manual, nil)
		east.waitStatus(t, "routes: manual (0)")
		// Manual: east no longer learns west's block.
		east.waitRoute(t, "10.112.1.0/24", "")
		east.createRoute(t, "to-west", v1alpha1.InterconnectRouteSpec{Prefix: "10.112.1.0/24", TargetCluster: "west"})
		east.createRoute(t, "to-north", v1alpha1.InterconnectRouteSpec{Prefix: "10.112.9.0/24", TargetCluster: "north"})
		east.createRoute(t, "own-block", v1alpha1.InterconnectRouteSpec{Prefix: "10.112.0.0/16", NextHop: "169.254.100.2"})
		// targetCluster resolved from IC SB (west's transit port), the route on the router as
		// Kube-OVN's lr-route-add puts it; the bad ones reported and left out.
		east.waitRoute(t, "10.112.1.0/24", "169.254.100.2")
		east.waitRouteCondition(t, "to-west", metav1.ConditionTrue, v1alpha1.ReasonRouteApplied, "10.112.1.0/24 via 169.254.100.2", "169.254.100.2")
		east.waitRouteCondition(t, "to-north", metav1.ConditionFalse, v1alpha1.ReasonUnknownCluster, "cluster north has no AZ", "")
		east.waitRouteCondition(t, "own-block", metav1.ConditionFalse, v1alpha1.ReasonOverlapsOwnBlock, "own secondary block 10.112.0.0/24", "")
		east.waitStatus(t, "routes: manual (1)")
		east.waitRoute(t, "10.112.9.0/24", "")
		east.waitRoute(t, "10.112.0.0/16", "")

		// Automatic: ignored, and said why.
		east.writeConfig(t, config("east-gw3,east-gw1"), nil)
		east.waitRouteCondition(t, "to-west", metav1.ConditionFalse, v1alpha1.ReasonAutomaticRoutes, `set it to "false"`, "")
		east.waitStatus(t, "routes: automatic")
		east.waitRoute(t, "10.112.1.0/24", "169.254.100.2") // learned again

		// Manual again, then the route deleted: gone from the router.
		east.writeConfig(t, manual, nil)
		east.waitRouteCondition(t, "to-west", metav1.ConditionTrue, v1alpha1.ReasonRouteApplied, "", "169.254.100.2")
		start := time.Now()
		for _, name := range []string{"to-west", "to-north", "own-block"} {
			if err := east.kube.Delete(t.Context(), &v1alpha1.InterconnectRoute{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
				t.Fatal(err)
			}
		}
		east.waitRoute(t, "10.112.1.0/24", "")
		t.Logf("MEASURED: InterconnectRoute deleted -> static route gone in %s", time.Since(start).Round(time.Millisecond))
		east.waitStatus(t, "routes: manual (0)")
	})

	t.Run("octopus leave: the AZ leaves and the other drops its routes", func(t *testing.T) {
		east.writeConfig(t, config("east-gw3,east-gw1"), nil)
		east.waitStatus(t, "Applied: AZ east")
		west.waitRoute(t, "10.112.0.0/24", "169.254.100.1")
		// What `octopus leave` does first (cluster.Leave): enable-ic off, wait for the
		// icmaster's word, then the ConfigMap gone.
		start := time.Now()
		if err := cluster.LeaveInterconnect(t.Context(), east.kube, "east", convergeTimeout, nil); err != nil {
			t.Fatal(err)
		}
		t.Logf("MEASURED: leave's interconnection step took %s", time.Since(start).Round(time.Millisecond))
		// The IC SB routes went with the AZ (checked below); west's ovn-ic drops what it
		// learned from them.
		west.waitRoute(t, "10.112.0.0/24", "")
		var cm corev1.ConfigMap
		if err := east.kube.Get(t.Context(), types.NamespacedName{Namespace: icconfig.ConfigMapNamespace, Name: icconfig.ConfigMapName}, &cm); err != nil || cm.Data["enable-ic"] != "false" {
			t.Errorf("east's ovn-ic-config after leave: enable-ic %q, %v; want \"false\" (the user's own ConfigMap is kept, disabled)", cm.Data["enable-ic"], err)
		}
		if azs, err := ic.SB.Ctl(t.Context(), "--bare", "--columns=name", "list", "Availability_Zone"); err != nil || strings.Contains(azs, "east") {
			t.Errorf("IC SB availability zones: %q, %v; want no east", azs, err)
		}
		if out, err := east.central.NB.Ctl(t.Context(), "lr-list"); err != nil || strings.Contains(out, ovnic.RouterName("east")) {
			t.Errorf("east's NB routers after leaving: %q, %v; want no interconnection router", out, err)
		}
	})
}

func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	testenv.EventuallyEvery(t, 50*time.Millisecond, convergeTimeout, "waiting for "+what, f)
}

// writeConfig creates or replaces the cluster's ovn-ic-config, with annotations (the status
// annotation is the icmaster's and is dropped).
func (z *az) writeConfig(t *testing.T, data, annotations map[string]string) {
	t.Helper()
	key := types.NamespacedName{Namespace: icconfig.ConfigMapNamespace, Name: icconfig.ConfigMapName}
	// The icmaster annotates the ConfigMap concurrently: retry on its newer version.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cm corev1.ConfigMap
		if err := z.kube.Get(t.Context(), key, &cm); err != nil {
			cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Annotations: annotations}, Data: data}
			return z.kube.Create(t.Context(), &cm)
		}
		cm.Data = data
		status := cm.Annotations[StatusAnnotation]
		cm.Annotations = maps.Clone(annotations)
		if status != "" {
			if cm.Annotations == nil {
				cm.Annotations = map[string]string{}
			}
			cm.Annotations[StatusAnnotation] = status
		}
		return z.kube.Update(t.Context(), &cm)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitStatus waits for the ConfigMap's status annotation to contain want.
func (z *az) waitStatus(t *testing.T, want string) {
	t.Helper()
	eventually(t, z.id+"'s status to say "+want, func() error {
		var cm corev1.ConfigMap
		if err := z.kube.Get(t.Context(), types.NamespacedName{Namespace: icconfig.ConfigMapNamespace, Name: icconfig.ConfigMapName}, &cm); err != nil {
			return err
		}
		if got := cm.Annotations[StatusAnnotation]; !strings.Contains(got, want) {
			return fmt.Errorf("status %q", got)
		}
		return nil
	})
}

// waitRoute waits until the AZ's router routes prefix via nextHop ("": no route), as
// `ovn-nbctl lr-route-list` shows it, the Kube-OVN user's view.
func (z *az) waitRoute(t *testing.T, prefix, nextHop string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s's route to %s via %q", z.id, prefix, nextHop), func() error {
		out, err := z.central.NB.Ctl(t.Context(), "lr-route-list", ovnic.RouterName(z.id))
		if err != nil {
			return err
		}
		got := ""
		for line := range strings.SplitSeq(out, "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == prefix {
				got = f[1]
			}
		}
		if got != nextHop {
			return errors.New("routes: " + strings.TrimSpace(out))
		}
		return nil
	})
}

func (z *az) createRoute(t *testing.T, name string, spec v1alpha1.InterconnectRouteSpec) {
	t.Helper()
	if err := z.kube.Create(t.Context(), &v1alpha1.InterconnectRoute{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}); err != nil {
		t.Fatal(err)
	}
}

// waitRouteCondition waits for the InterconnectRoute's Ready condition and resolved next hop.
func (z *az) waitRouteCondition(t *testing.T, name string, status metav1.ConditionStatus, reason, inMessage, nextHop string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s's InterconnectRoute %s to be %s %s", z.id, name, status, reason), func() error {
		var r v1alpha1.InterconnectRoute
		if err := z.kube.Get(t.Context(), types.NamespacedName{Name: name}, &r); err != nil {
			return err
		}
		c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.InterconnectRouteConditionReady)
		if c == nil || c.Status != status || c.Reason != reason || !strings.Contains(c.Message, inMessage) || r.Status.NextHop != nextHop {
			return fmt.Errorf("status %+v", r.Status)
		}
		return nil
	})
}
