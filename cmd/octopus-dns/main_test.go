package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/config/crd"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// freePort returns a loopback port that was free for TCP a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// upstream serves example.org. A 203.0.113.7 on a loopback UDP port, for the forward plugin.
func upstream(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if r.Question[0].Name == "example.org." && r.Question[0].Qtype == dns.TypeA {
			rr, _ := dns.NewRR("example.org. 60 IN A 203.0.113.7")
			m.Answer = append(m.Answer, rr)
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}

// dig runs dig against the server and returns its output.
func dig(t *testing.T, port int, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "dig", append([]string{"@127.0.0.1", "-p", fmt.Sprint(port), "+time=2", "+tries=1"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("dig %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestOctopusDNS builds octopus-dns, runs it with every plugin of its set against a real API
// server, and queries it with dig over UDP and TCP.
func TestOctopusDNS(t *testing.T) {
	if _, err := exec.LookPath("dig"); err != nil {
		t.Fatal("dig is missing: install Debian's dnsutils (hack/install-deps.sh does)")
	}
	root := testenv.RepoRoot(t)
	bin := filepath.Join(t.TempDir(), "octopus-dns")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./cmd/octopus-dns")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building octopus-dns: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(t.Context(), bin, "-plugins").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range Directives {
		if !slices.Contains(strings.Fields(string(out)), p) {
			t.Errorf("octopus-dns -plugins lacks %s:\n%s", p, out)
		}
	}

	env := testenv.ControlPlanes(t, "member")
	c, err := client.New(env.Cluster("member").RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	port, health, ready, metrics := freePort(t), freePort(t), freePort(t), freePort(t)
	corefile := fmt.Sprintf(`.:%[1]d {
    bind 127.0.0.1
    reload 2s 1s
    errors
    log
    health 127.0.0.1:%[2]d
    ready 127.0.0.1:%[3]d
    prometheus 127.0.0.1:%[4]d
    cache 5
    crossdns clusterset.local in-addr.arpa ip6.arpa {
        kubeconfig %[5]s
    }
    forward . %[6]s
}
`, port, health, ready, metrics, controlplane.KubeconfigPath(env.Dir, "member"), upstream(t))
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Corefile"), []byte(corefile), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "octopus-dns.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-conf", filepath.Join(dir, "Corefile"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("octopus-dns did not exit cleanly on SIGTERM: %v", err)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("octopus-dns still running 10s after SIGTERM; killed: %v", <-done)
		}
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("octopus-dns log:\n%s", b)
		}
	})

	// The cluster does not serve ServiceImports yet: the index cannot sync, so every name is
	// SERVFAIL (never a false NXDOMAIN) and the server is not ready.
	err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return httpGet(ctx, fmt.Sprintf("http://127.0.0.1:%d/health", health)) == nil, nil
	})
	if err != nil {
		t.Fatalf("octopus-dns not up: %v", err)
	}
	if got := dig(t, port, "probe.shop.svc.clusterset.local", "A"); !strings.Contains(got, "status: SERVFAIL") {
		t.Errorf("before the index synced: want SERVFAIL, got\n%s", got)
	}
	if err := httpGet(t.Context(), fmt.Sprintf("http://127.0.0.1:%d/ready", ready)); err == nil {
		t.Error("ready before the index synced")
	}

	crds, err := crd.MCS()
	if err != nil {
		t.Fatal(err)
	}
	if err := hub.InstallCRDs(t.Context(), c, crds); err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}},
		&mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}, Spec: mcsv1beta1.ServiceImportSpec{
			Type: mcsv1beta1.ClusterSetIP, IPs: []string{"10.200.0.10", "fd00:200::a"},
			Ports: []mcsv1beta1.ServicePort{
				{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP},
				{Port: 8443, Protocol: corev1.ProtocolTCP}, // unnamed
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
			},
		}},
		&mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"}, Spec: mcsv1beta1.ServiceImportSpec{
			Type: mcsv1beta1.Headless,
			Ports: []mcsv1beta1.ServicePort{
				{Name: "pg", Port: 5432, Protocol: corev1.ProtocolTCP},
				{Port: 9187, Protocol: corev1.ProtocolTCP}, // unnamed
			},
		}},
		importedSlice("db", "east", discoveryv1.AddressTypeIPv4,
			endpoint("10.100.0.2", "db-0", true), endpoint("10.100.0.3", "", true), endpoint("10.100.0.4", "db-9", false)),
		importedSlice("db", "west", discoveryv1.AddressTypeIPv4, endpoint("10.101.0.2", "db-0", true)),
		importedSlice("db", "west", discoveryv1.AddressTypeIPv6, endpoint("fd00:101::2", "db-0", true)),
	} {
		if err := c.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}

	// Ready only once the index has synced (the ready plugin asks crossdns).
	err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return httpGet(ctx, fmt.Sprintf("http://127.0.0.1:%d/ready", ready)) == nil, nil
	})
	if err != nil {
		t.Fatalf("octopus-dns not ready: %v", err)
	}
	if err := httpGet(t.Context(), fmt.Sprintf("http://127.0.0.1:%d/health", health)); err != nil {
		t.Errorf("health: %v", err)
	}
	// The informers may have listed before the import was created; its watch event follows.
	err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return dig(t, port, "+short", "dns-version.clusterset.local", "TXT") != "" &&
			dig(t, port, "+short", "_https._tcp.web.shop.svc.clusterset.local", "SRV") != "" &&
			dig(t, port, "+short", "db-0.west.db.shop.svc.clusterset.local", "AAAA") != "" &&
			dig(t, port, "+short", "db-0.east.db.shop.svc.clusterset.local", "A") != "", nil
	})
	if err != nil {
		t.Fatalf("octopus-dns does not serve shop/web and shop/db: %v", err)
	}

	cases := []struct {
		args []string
		want []string // substrings of dig's output
	}{
		{[]string{"+short", "web.shop.svc.clusterset.local", "A"}, []string{"10.200.0.10\n"}},
		{[]string{"+short", "+tcp", "web.shop.svc.clusterset.local", "AAAA"}, []string{"fd00:200::a\n"}},

		{[]string{"+short", "+tcp", "dns-version.clusterset.local", "TXT"}, []string{`"1.0.0"`}},
		{[]string{"nope.shop.svc.clusterset.local", "A"}, []string{"status: NXDOMAIN", "flags: qr aa", "clusterset.local.\t5\tIN\tSOA\tns.dns.clusterset.local. hostmaster.clusterset.local."}},
		{[]string{"+tcp", "web.shop.svc.clusterset.local", "TXT"}, []string{"status: NOERROR", "ANSWER: 0", "AUTHORITY: 1"}},
		{[]string{"+short", "example.org", "A"}, []string{"203.0.113.7\n"}}, // forwarded
	}
	for _, tc := range cases {
		got := dig(t, port, tc.args...)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("dig %v: output lacks %q:\n%s", tc.args, w, got)
			}
		}
	}
	t.Run("every form of the specification, with dig and nslookup", func(t *testing.T) { specForms(t, port) })

	body, err := httpBody(t.Context(), fmt.Sprintf("http://127.0.0.1:%d/metrics", metrics))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`coredns_crossdns_queries_total{result="answer",type="A"}`, `coredns_crossdns_queries_total{result="nxdomain",type="A"}`, "coredns_crossdns_index_services 2"} {
		if !strings.Contains(body, w) {
			t.Errorf("metrics lack %q", w)
		}
	}
}

func httpGet(ctx context.Context, url string) error {
	_, err := httpBody(ctx, url)
	return err
}

func httpBody(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), nil
}
