package lab_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/diagnose"
	"github.com/octopus-mcs/octopus/internal/dnsconfig"
	"github.com/octopus-mcs/octopus/internal/gather"
	"github.com/octopus-mcs/octopus/internal/gather/gathertest"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
	"github.com/octopus-mcs/octopus/internal/testenv"
	"github.com/octopus-mcs/octopus/internal/verify"
)

// diagnoseLab is the lab of TestDiagnose and the `octopus` binary run against it.
type diagnoseLab struct {
	l           *lab.Lab
	dir         string
	octopus     string
	kubeconfigs []string
	hub         string
}

// TestDiagnose runs `octopus diagnose all` and `octopus gather` on a lab of a hub and two
// clusters (one gateway and one worker each, wireguard; cluster1 dual-stack, cluster2
// IPv4-only, whose mixed pair checkMixedFamilies checks after verify): diagnose is green on the healthy
// lab, gather writes the expected files and no credential, and then, one fault at a time with
// the lab restored in between, diagnose names the cause and the fix of: the CoreDNS
// forwarding block removed, the hub's API server stopped, the tunnel port dropped on a
// gateway node's underlay, the underlay's MTU lowered, and a gateway killed for good (last:
// nothing restarts it). `octopus dashboard`, opened in a headless Chromium before the kill,
// draws the lab and then follows the kill without a reload (dashboard_test.go). `octopus
// verify` passes every check on the healthy lab and fails exactly the cross-cluster ones once
// the gateway is killed (verify_test.go). Before the dashboard, checkCrossCluster runs its
// data-path and MCS checks on the same lab: one lab bring-up for all of them.
func TestDiagnose(t *testing.T) {
	testenv.LabNetwork(t)
	binDir := testenv.BinDir(t)
	bins := buildCommands(t, "octopus-agent", "octopus-echo", "octopus-dns", "octopus")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	// Processes: the checks cut a gateway off by its pidfile and read its process log
	// through gather.
	// cluster1 dual-stack beside an IPv4-only cluster2: a mixed cluster set (issue 35), whose
	// checks (checkMixedFamilies) share this lab.
	l, dir := startLab(ctx, t, lab.Options{
		Clusters: 2, NodesPerCluster: 2, BinDir: binDir, AgentBinary: bins["octopus-agent"],
		ComponentProcesses: true, IPFamily: lab.IPFamilyDual, IPv4Clusters: []string{lab.ClusterName(2)},
	})
	d := &diagnoseLab{l: l, dir: dir, octopus: bins["octopus"], hub: l.Env.Cluster(lab.HubName).Kubeconfig}
	for _, c := range l.Network.Clusters {
		d.kubeconfigs = append(d.kubeconfigs, l.Env.Cluster(c.Name).Kubeconfig)
	}
	c1, c2 := l.Network.Clusters[0], l.Network.Clusters[1]

	// The gateways elect, publish and handshake, octopus-dns becomes ready: green in time.
	r := d.waitGreen(t, 3*time.Minute)
	t.Logf("healthy lab: %s", r.Summary())
	t.Run("healthy, with the hub's kubeconfig", func(t *testing.T) {
		r, code := d.run(t, "--hub-kubeconfig", d.hub)
		if code != 0 || r.Count(diagnose.SeverityWarning) > 0 {
			t.Fatalf("exit %d, report:\n%s", code, renderReport(r))
		}
		d.expect(t, r, "hub-access", diagnose.HubName, diagnose.SeverityOK, "the hub's kubeconfig reaches", "")
	})

	var healthy *verify.Report
	t.Run("verify", func(t *testing.T) { healthy = verifyHealthy(ctx, t, l, d.octopus) })

	t.Run("mixed families", func(t *testing.T) {
		if healthy == nil {
			t.Fatal("no report of verify on the healthy lab")
		}
		checkMixedFamilies(ctx, t, l, c1.Name, c2.Name, healthy)
		// diagnose says what each tunnel carries, and why not IPv6, without a warning.
		r, code := d.run(t)
		if code != 0 || r.Count(diagnose.SeverityWarning) > 0 {
			t.Fatalf("diagnose on the mixed pair: exit %d, report:\n%s", code, renderReport(r))
		}
		for _, pair := range [][2]string{{c1.Name, c2.Name}, {c2.Name, c1.Name}} {
			d.expect(t, r, "gateway", pair[0], diagnose.SeverityOK, "tunnel to "+pair[1]+" connected (IPv4): rtt", "")
			d.expect(t, r, "gateway", pair[0], diagnose.SeverityInfo, "IPv6 is not offered between "+pair[0]+" and "+pair[1], "")
		}
	})

	t.Run("gather", func(t *testing.T) { d.gather(ctx, t) })

	t.Run("CoreDNS forwarding block removed", func(t *testing.T) {
		mc := kubeClient(t, l.Env.Cluster(c2.Name).Kubeconfig)
		cm := &corev1.ConfigMap{}
		if err := mc.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, cm); err != nil {
			t.Fatal(err)
		}
		original := cm.Data["Corefile"]
		unpatched, removed := dnsconfig.Unpatch(original)
		if !removed {
			t.Fatalf("%s's Corefile has no Octopus block:\n%s", c2.Name, original)
		}
		cm.Data["Corefile"] = unpatched
		if err := mc.Update(ctx, cm); err != nil {
			t.Fatal(err)
		}
		r := d.waitFinding(t, 30*time.Second, "dns", c2.Name, "has no Octopus block forwarding clusterset.local to octopus-dns")
		d.expect(t, r, "dns", c2.Name, diagnose.SeverityError, "names do not resolve in this cluster", "re-run `octopus join BROKER-INFO --cluster-id "+c2.Name)
		d.onlyErrorsOf(t, r, "dns "+c2.Name)

		if err := mc.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
			t.Fatal(err)
		}
		cm.Data["Corefile"] = original
		if err := mc.Update(ctx, cm); err != nil {
			t.Fatal(err)
		}
		d.waitGreen(t, time.Minute)
	})

	t.Run("hub API server stopped", func(t *testing.T) {
		hubCP := l.Env.Cluster(lab.HubName)
		if err := hubCP.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		started := false
		defer func() {
			if !started {
				_ = hubCP.StartAPIServer(ctx)
			}
		}()
		r, code := d.run(t)
		t.Logf("diagnose all with the hub down took %s", r.Elapsed)
		if code == 0 {
			t.Errorf("exit 0 with the hub down")
		}
		for _, c := range []string{c1.Name, c2.Name} {
			d.expect(t, r, "hub-access", c, diagnose.SeverityError, "does not answer from this machine", "start the hub's API server")
			d.expect(t, r, "heartbeat", c, diagnose.SeverityError, "not checked", "octopus diagnose hub-access")
			// The data plane does not depend on the hub: what the clusters show stays green.
			d.expect(t, r, "gateway", c, diagnose.SeverityOK, "is the active gateway", "")
			d.expect(t, r, "dns", c, diagnose.SeverityOK, "forwards clusterset.local to octopus-dns", "")
		}
		if err := hubCP.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		started = true
		d.waitGreen(t, 2*time.Minute)
	})

	t.Run("tunnel port dropped on the underlay", func(t *testing.T) {
		gw := c1.Nodes[0]
		if !gw.Gateway {
			t.Fatalf("%s is not a gateway node", gw.Name)
		}
		// On the gateway node's side of the underlay, as a firewall between the gateways would.
		rules := `table inet octopus-test-diagnose {
	chain in { type filter hook input priority -10; udp dport 4500 counter drop; udp sport 4500 counter drop; }
	chain out { type filter hook output priority -10; udp dport 4500 counter drop; udp sport 4500 counter drop; }
}`
		nftIn(t, gw.Netns, rules)
		restored := false
		restore := func() {
			if !restored {
				nftIn(t, gw.Netns, "delete table inet octopus-test-diagnose")
				restored = true
			}
		}
		defer restore()
		// Both gateways' own probes of the tunnel port name the firewall: cluster1's are
		// dropped on their way out, cluster2's on their way in (and its answers on their way out).
		// Each gateway's health check finds the tunnel down on its own schedule: a CI run saw
		// cluster2's down while cluster1's still said connected, so each is waited for.
		var r *diagnose.Report
		for _, from := range []struct{ cluster, to string }{{c1.Name, c2.Name}, {c2.Name, c1.Name}} {
			d.waitFinding(t, 60*time.Second, "gateway", from.cluster, "UDP probes from this gateway to the tunnel port of "+from.to)
			r = d.waitFinding(t, 60*time.Second, "gateway", from.cluster, "the tunnel to "+from.to+" is down (Error)")
		}
		for _, from := range []struct{ cluster, to string }{{c1.Name, c2.Name}, {c2.Name, c1.Name}} {
			d.expect(t, r, "gateway", from.cluster, diagnose.SeverityError, "the tunnel to "+from.to+" is down (Error)", "check that UDP to the tunnel port passes in both directions")
			d.expect(t, r, "gateway", from.cluster, diagnose.SeverityError, "drops the tunnel port, so the tunnel carries nothing",
				"let UDP port 4500 pass in both directions between ")
		}
		d.onlyErrorsOf(t, r, "gateway "+c1.Name, "gateway "+c2.Name)
		restore()
		d.waitGreen(t, 2*time.Minute)
	})

	t.Run("MTU lowered on the underlay", func(t *testing.T) {
		// The underlay's switch port of cluster1's gateway drops frames above 1400 bytes
		// without a word, in both directions: an MTU black hole. Pings and the health probes
		// still pass; the tunnel's full-size packets (1420 + 60 bytes of WireGuard over IPv4)
		// do not.
		port := l.Network.Cables(c1, c1.Nodes[0])[1]
		setMTU := func(mtu string) {
			if out, err := exec.Command("ip", "-n", port.Netns, "link", "set", port.Link, "mtu", mtu).CombinedOutput(); err != nil {
				t.Fatalf("setting the MTU of %s in %s: %v: %s", port.Link, port.Netns, err, out)
			}
		}
		setMTU("1400")
		restored := false
		defer func() {
			if !restored {
				setMTU("1500")
			}
		}()
		var r *diagnose.Report
		for _, from := range []struct{ cluster, to string }{{c1.Name, c2.Name}, {c2.Name, c1.Name}} {
			r = d.waitFinding(t, 60*time.Second, "gateway", from.cluster, "the underlay path from this gateway to "+from.to)
		}
		// Towards cluster1 the bridge drops frames above the port's MTU exactly. From cluster1
		// the frames enter the port from its veth peer, which lets a VLAN tag's 4 bytes more
		// through (the kernel's is_skb_forwardable): that direction measures 1404, and
		// diagnose reports what was measured.
		d.expect(t, r, "gateway", c2.Name, diagnose.SeverityError,
			"the underlay path from this gateway to "+c1.Name+" at "+c1.Nodes[0].UnderlayAddr.Addr().String()+":4500 carries packets of at most 1400 bytes unfragmented, but the tunnel sends up to 1480 (MTU 1420 plus encapsulation)",
			"lower the tunnel MTU to 1340 with `octopus-agent gateway --mtu 1340`")
		d.expect(t, r, "gateway", c1.Name, diagnose.SeverityError,
			"the underlay path from this gateway to "+c2.Name+" at "+c2.Nodes[0].UnderlayAddr.Addr().String()+":4500 carries packets of at most 140",
			"`octopus-agent gateway --mtu 134")
		d.onlyErrorsOf(t, r, "gateway "+c1.Name, "gateway "+c2.Name)
		setMTU("1500")
		restored = true
		d.waitGreen(t, 2*time.Minute)
	})
	// Restorable like the faults above: its last step kills the gateway, which its
	// supervisor restarts with a new key.
	t.Run("cross-cluster", func(t *testing.T) { checkCrossCluster(ctx, t, l, binDir, bins) })
	d.waitGreen(t, 2*time.Minute)

	// Opened before the kill, so that the test sees the page follow it.
	var dash *labDashboard
	t.Run("dashboard", func(st *testing.T) { dash = d.openDashboard(ctx, t, st) })

	t.Run("gateway killed", func(t *testing.T) {
		gw := c1.Nodes[0]
		if err := l.Env.StopProcess(lab.GatewayProcessName(gw.Name), 0); err != nil {
			t.Fatal(err)
		}
		r := d.waitFinding(t, 60*time.Second, "gateway", c1.Name, "the gateway is not running")
		d.expect(t, r, "gateway", c1.Name, diagnose.SeverityError, "the active gateway "+gw.Name+" last renewed the Lease", "start the gateway on "+gw.Name+" again")
		d.waitFinding(t, 60*time.Second, "gateway", c2.Name, "the tunnel to "+c1.Name+" is down")
	})

	t.Run("dashboard after the gateway was killed", func(t *testing.T) {
		if dash == nil {
			t.Skip("the dashboard subtest failed")
		}
		dash.gatewayKilled(ctx, t)
	})

	t.Run("verify after the gateway was killed", func(t *testing.T) { verifyGatewayDown(ctx, t, l, d.octopus) })
}

// run runs `octopus diagnose all` on both clusters (with extra flags) and returns its report
// and exit code.
func (d *diagnoseLab) run(t *testing.T, extra ...string) (*diagnose.Report, int) {
	t.Helper()
	args := []string{"diagnose", "all", "-o", "json"}
	for _, k := range d.kubeconfigs {
		args = append(args, "--kubeconfig", k)
	}
	cmd := exec.Command(d.octopus, append(args, extra...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("octopus diagnose: %v\n%s", err, stderr.String())
	}
	r := &diagnose.Report{}
	if err := json.Unmarshal(stdout.Bytes(), r); err != nil {
		t.Fatalf("octopus diagnose -o json: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if (code != 0) != r.Failed() {
		t.Errorf("exit code %d with %d error findings", code, r.Count(diagnose.SeverityError))
	}
	return r, code
}

// waitGreen runs diagnose until it finds neither errors nor warnings.
func (d *diagnoseLab) waitGreen(t *testing.T, timeout time.Duration) *diagnose.Report {
	t.Helper()
	var r *diagnose.Report
	waitFor(t, timeout, "diagnose to be green", func() error {
		var code int
		r, code = d.run(t)
		if code != 0 || r.Count(diagnose.SeverityWarning) > 0 {
			return fmt.Errorf("exit %d:\n%s", code, renderReport(r))
		}
		return nil
	})
	t.Logf("green, diagnose all took %s:\n%s", r.Elapsed, renderReport(r))
	return r
}

// waitFinding runs diagnose until check reports an error for cluster containing message.
func (d *diagnoseLab) waitFinding(t *testing.T, timeout time.Duration, check, cluster, message string) *diagnose.Report {
	t.Helper()
	var r *diagnose.Report
	waitFor(t, timeout, fmt.Sprintf("diagnose %s to report %q for %s", check, message, cluster), func() error {
		r, _ = d.run(t)
		if !slices.ContainsFunc(r.Findings, func(f diagnose.Finding) bool {
			return f.Check == check && f.Cluster == cluster && f.Severity == diagnose.SeverityError && strings.Contains(f.Message, message)
		}) {
			return fmt.Errorf("not yet:\n%s", renderReport(r))
		}
		return nil
	})
	t.Logf("diagnose all took %s:\n%s", r.Elapsed, renderReport(r))
	return r
}

func (d *diagnoseLab) expect(t *testing.T, r *diagnose.Report, check, cluster string, severity diagnose.Severity, message, fix string) {
	t.Helper()
	if !slices.ContainsFunc(r.Findings, func(f diagnose.Finding) bool {
		return f.Check == check && f.Cluster == cluster && f.Severity == severity && strings.Contains(f.Message, message) && strings.Contains(f.Fix, fix)
	}) {
		t.Errorf("no %s %s finding for %s with %q and fix %q; report:\n%s", severity, check, cluster, message, fix, renderReport(r))
	}
}

// onlyErrorsOf checks that the fault shows where it is and nowhere else: the error findings
// are all of the given "check cluster" pairs.
func (d *diagnoseLab) onlyErrorsOf(t *testing.T, r *diagnose.Report, allowed ...string) {
	t.Helper()
	for _, f := range r.Findings {
		if f.Severity == diagnose.SeverityError && !slices.Contains(allowed, f.Check+" "+f.Cluster) {
			t.Errorf("unexpected error finding %s %s: %s", f.Check, f.Cluster, f.Message)
		}
	}
}

// gather runs `octopus gather --lab-dir` with a kubeconfig holding cluster1's real hub token
// planted in a ConfigMap, and checks the archive's files and that no token of the lab is in it.
func (d *diagnoseLab) gather(ctx context.Context, t *testing.T) {
	c1 := d.l.Network.Clusters[0]
	mc := kubeClient(t, d.kubeconfigs[0])
	var secrets []string
	for _, k := range d.kubeconfigs {
		cred, err := hubaccess.LoadCredential(ctx, kubeClient(t, k))
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, cred.Token)
	}
	info, err := hub.ReadBrokerInfo(d.l.BrokerInfo)
	if err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, info.JoinToken)
	planted := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.SystemNamespace, Name: "planted-kubeconfig"},
		Data: map[string]string{"config": "users:\n- name: hub\n  user:\n    token: " + secrets[0] + "\n"}}
	if err := mc.Create(ctx, planted); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mc.Delete(ctx, planted) }()

	out := t.TempDir()
	args := []string{"gather", "--hub-kubeconfig", d.hub, "-o", out, "--lab-dir=" + d.dir}
	for _, k := range d.kubeconfigs {
		args = append(args, "--kubeconfig", k)
	}
	begin := time.Now()
	b, err := exec.Command(d.octopus, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("octopus gather: %v\n%s", err, b)
	}
	t.Logf("octopus gather took %.1fs: %s", time.Since(begin).Seconds(), b)
	archives, _ := filepath.Glob(filepath.Join(out, "octopus-gather-*.tar.gz"))
	if len(archives) != 1 {
		t.Fatalf("archives in %s: %v", out, archives)
	}
	files, err := gathertest.ReadArchive(archives[0])
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	t.Logf("%d files: %s", len(names), strings.Join(names, " "))

	gwNetns := strings.TrimPrefix(c1.Nodes[0].Netns, labnet.NetnsOwnerPrefix(d.l.Network.ID))
	for _, want := range []struct{ file, content string }{
		{"hub/peers.yaml", "clusterID: " + c1.Name},
		{"hub/clusters.yaml", "clusterID: " + c1.Name},
		{"hub/leases.yaml", "name: " + c1.Name},
		{"clusters/" + c1.Name + "/octopus-system/leases.yaml", "name: octopus-gateway"},
		{"clusters/" + c1.Name + "/octopus-system/pods.yaml", "octopus-dns"},
		{"clusters/" + c1.Name + "/octopus-system/configmaps.yaml", "token: " + gather.Redacted},
		{"clusters/" + c1.Name + "/kube-system/configmap-coredns.yaml", "octopus:begin clusterset.local"},
		{"clusters/" + c1.Name + "/kube-system/dns-pods.yaml", "coredns"},
		{"nodes/" + gwNetns + "/nftables.txt", "table inet octopus-tunnel-"},
		{"nodes/" + gwNetns + "/routes.txt", "proto 213"},
		{"nodes/" + gwNetns + "/links.txt", lab.GatewayDevice(c1.Name)},
		{"nodes/processes/" + lab.GatewayProcessName(c1.Nodes[0].Name) + ".log", ""},
		{"nodes/processes/agent-" + c1.Name + ".log", ""},
		{"index.json", `"octopusVersion"`},
	} {
		content, ok := files[want.file]
		if !ok {
			t.Errorf("the archive has no %s", want.file)
		} else if !strings.Contains(content, want.content) {
			t.Errorf("%s does not contain %q:\n%.3000s", want.file, want.content, content)
		}
	}
	if !slices.ContainsFunc(names, func(n string) bool {
		return strings.HasPrefix(n, "clusters/"+c1.Name+"/logs/octopus-system/octopus-dns-") && strings.HasSuffix(n, ".log")
	}) {
		t.Errorf("no octopus-dns pod log in the archive")
	}
	if leaks := gathertest.Leaks(files, secrets); len(leaks) > 0 {
		t.Errorf("the archive leaks credentials:\n%s", strings.Join(leaks, "\n"))
	}
}

// nft applies an nftables script inside a namespace.
func nftIn(t *testing.T, netns, script string) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", netns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft in %s: %v: %s", netns, err, out)
	}
}

func renderReport(r *diagnose.Report) string {
	var b strings.Builder
	_ = diagnose.Render(&b, r)
	return b.String()
}
