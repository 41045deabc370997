package lab_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/internal/dashboard"
	"github.com/octopus-mcs/octopus/internal/dashboard/dashboardtest"
	"github.com/octopus-mcs/octopus/internal/heartbeat"
	"github.com/octopus-mcs/octopus/internal/browser"
)

// dashboardService is the service TestDiagnose's dashboard subtest exports from cluster1.
const dashboardService = "dashboard-demo"

// labDashboard is `octopus dashboard` serving TestDiagnose's lab and a headless Chromium
// showing it; both outlive the subtest that opens them, so that the page seen before the
// gateway is killed is the one that must follow the kill.
type labDashboard struct {
	b      *browser.Browser
	c1, c2 string
}

// openDashboard exports a service from cluster1, starts `octopus dashboard` for the lab on
// a free loopback port and checks the page shows the healthy lab: both clusters, their
// running gateways, both halves of the tunnel connected, the service exported by cluster1
// and imported in both, and cluster1's conditions after a click. The processes end with
// parent.
func (d *diagnoseLab) openDashboard(ctx context.Context, parent, t *testing.T) *labDashboard {
	c1, c2 := d.l.Network.Clusters[0].Name, d.l.Network.Clusters[1].Name
	mc := kubeClient(t, d.kubeconfigs[0])
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: dashboardService, Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": dashboardService}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	export := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: dashboardService, Namespace: "default"}}
	if err := mc.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if err := mc.Create(ctx, export); err != nil {
		t.Fatal(err)
	}
	parent.Cleanup(func() {
		_ = mc.Delete(context.Background(), export)
		_ = mc.Delete(context.Background(), svc)
	})

	url := d.startDashboard(parent, t)
	begin := time.Now()
	b := dashboardtest.Start(ctx, parent)
	if err := b.Navigate(ctx, url); err != nil {
		t.Fatal(err)
	}
	// A marker that a reload would lose: the page must follow the lab by polling.
	if err := b.Execute(ctx, `window.octopusTestMarker = true;`, nil); err != nil {
		t.Fatal(err)
	}
	dashboardtest.Wait(ctx, t, b, 90*time.Second, "the healthy lab", func(p dashboardtest.Page) error {
		return errors.Join(
			dashboardtest.Expect("hub", map[string]string{"hub": p.Hub}, map[string]string{"hub": "up"}),
			dashboardtest.Expect("cluster", p.Clusters, map[string]string{c1: heartbeat.StateConnected, c2: heartbeat.StateConnected}),
			dashboardtest.Expect("gateway", p.Gateways, map[string]string{c1: dashboard.LivenessRunning, c2: dashboard.LivenessRunning}),
			dashboardtest.Expect("tunnel", p.Tunnels, map[string]string{c1 + ">" + c2: "Connected", c2 + ">" + c1: "Connected"}),
			dashboardtest.Expect("service", p.Services, map[string]string{"default/" + dashboardService: c1 + "|" + c1 + "," + c2}),
		)
	})
	t.Logf("the page showed the healthy lab %.1fs after it was opened", time.Since(begin).Seconds())
	if err := b.Click(ctx, `g[data-cluster="`+c1+`"]`); err != nil {
		t.Fatal(err)
	}
	dashboardtest.Wait(ctx, t, b, 10*time.Second, c1+"'s conditions", func(p dashboardtest.Page) error {
		return errors.Join(
			dashboardtest.Expect("details", map[string]string{"cluster": p.Details}, map[string]string{"cluster": c1}),
			dashboardtest.Expect("condition", p.Conditions, map[string]string{"Cluster/AgentConnected": "True"}),
		)
	})
	dashboardtest.Screenshot(ctx, t, b, "dashboard-lab-healthy.png")
	return &labDashboard{b: b, c1: c1, c2: c2}
}

// gatewayKilled checks, after cluster1's gateway was killed for good, that the same page
// (not reloaded) shows the gateway stopped, its last report stale and cluster2's half of
// the tunnel not connected.
func (ld *labDashboard) gatewayKilled(ctx context.Context, t *testing.T) {
	begin := time.Now()
	p := dashboardtest.Wait(ctx, t, ld.b, 60*time.Second, "the killed gateway", func(p dashboardtest.Page) error {
		return errors.Join(
			dashboardtest.Expect("gateway", p.Gateways, map[string]string{ld.c1: dashboard.LivenessStopped, ld.c2: dashboard.LivenessRunning}),
			dashboardtest.Expect("tunnel", p.Tunnels, map[string]string{ld.c1 + ">" + ld.c2: dashboard.StateStale}),
			func() error {
				if s := p.Tunnels[ld.c2+">"+ld.c1]; s == "Connected" || s == "" {
					return fmt.Errorf("tunnel %s>%s is %q, want it not connected", ld.c2, ld.c1, s)
				}
				return nil
			}(),
		)
	})
	t.Logf("the page showed the killed gateway %.1fs after this check began: tunnels %v", time.Since(begin).Seconds(), p.Tunnels)
	var marker bool
	if err := ld.b.Execute(ctx, `return window.octopusTestMarker === true;`, &marker); err != nil {
		t.Fatal(err)
	}
	if !marker {
		t.Errorf("the page was reloaded; it should follow the lab by polling")
	}
	dashboardtest.Screenshot(ctx, t, ld.b, "dashboard-lab-gateway-killed.png")
}

// startDashboard runs `octopus dashboard` for the lab's clusters and hub on a free loopback
// port until parent ends, and returns its URL.
func (d *diagnoseLab) startDashboard(parent, t *testing.T) string {
	args := []string{"dashboard", "--hub-kubeconfig", d.hub, "--listen", "127.0.0.1:0", "--refresh", "1s"}
	for _, k := range d.kubeconfigs {
		args = append(args, "--kubeconfig", k)
	}
	cmd := exec.Command(d.octopus, args...)
	logPath := filepath.Join(parent.TempDir(), "dashboard.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	parent.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logFile.Close()
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "Serving the dashboard on "); ok {
				urls <- strings.Fields(rest)[0]
			}
		}
	}()
	select {
	case url := <-urls:
		t.Logf("octopus dashboard serves %s", url)
		return url
	case <-time.After(30 * time.Second):
		b, _ := os.ReadFile(logPath)
		t.Fatalf("octopus dashboard did not print its URL within 30s; its stderr:\n%s", b)
		return ""
	}
}
