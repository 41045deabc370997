package controlplane_test

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/procfs"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestControlPlanes runs the hub and three clusters the way the multi-cluster tests do and
// checks what those tests rely on. Subtests share one environment to keep the suite fast.
func TestControlPlanes(t *testing.T) {
	names := []string{"hub", "c1", "c2", "c3"}
	env := testenv.ControlPlanes(t, names...)
	clients := map[string]kubernetes.Interface{}
	for _, name := range names {
		clients[name] = newClient(t, env.Cluster(name).RESTConfig())
	}

	t.Run("admin access", func(t *testing.T) {
		for i, name := range names {
			cp := env.Cluster(name)
			if cp == nil {
				t.Fatalf("Cluster(%q) = nil", name)
			}
			wantSvc, wantPod := testenv.CIDRs(i)
			if cp.ServiceCIDR != wantSvc || cp.PodCIDR != wantPod {
				t.Errorf("%s: CIDRs = %s, %s; want %s, %s", name, cp.ServiceCIDR, cp.PodCIDR, wantSvc, wantPod)
			}
			v, err := clients[name].Discovery().ServerVersion()
			if err != nil {
				t.Fatalf("%s: server version via RESTConfig: %v", name, err)
			}
			// hack/k8s-binaries.sh stamps the version Kubernetes' own build would: tools
			// that gate on the server version (kubectl's skew warning, Helm's kubeVersion)
			// must see the release, not v0.0.0-master+$Format:%H$.
			wantPrefix := "v1." + v.Minor + "."
			if v.GitVersion != controlplane.KubernetesVersion || v.Major != "1" || !strings.HasPrefix(v.GitVersion, wantPrefix) {
				t.Errorf("%s: server version %s (major %q, minor %q), want %s", name, v.GitVersion, v.Major, v.Minor, controlplane.KubernetesVersion)
			}
			// The kubeconfig file must work on its own and be private.
			fi, err := os.Stat(cp.Kubeconfig)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: kubeconfig mode %v, want 0600", name, fi.Mode().Perm())
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
			if err != nil {
				t.Fatalf("%s: loading kubeconfig: %v", name, err)
			}
			if cfg.Host != cp.URL {
				t.Errorf("%s: kubeconfig server %s, want %s", name, cfg.Host, cp.URL)
			}
			if _, err := newClient(t, cfg).CoreV1().Namespaces().Get(t.Context(), "kube-system", metav1.GetOptions{}); err != nil {
				t.Errorf("%s: using kubeconfig: %v", name, err)
			}
		}
		if env.Cluster("nope") != nil {
			t.Error(`Cluster("nope") != nil`)
		}
	})

	t.Run("etcd prefixes isolate clusters", func(t *testing.T) {
		const ns = "only-in-c1"
		ctx := t.Context()
		if _, err := clients["c1"].CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			_, err := clients[name].CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			switch {
			case name == "c1" && err != nil:
				t.Errorf("c1: namespace %s not found after creating it: %v", ns, err)
			case name != "c1" && !apierrors.IsNotFound(err):
				t.Errorf("%s: namespace created in c1 is visible or lookup failed: err = %v", name, err)
			}
		}
	})

	t.Run("controller manager fills service account token secrets", func(t *testing.T) {
		cp := env.Cluster("c2")
		c := clients["c2"]
		ctx := t.Context()
		sa, err := c.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "robot"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:        "robot-token",
				Annotations: map[string]string{corev1.ServiceAccountNameKey: sa.Name},
			},
			Type: corev1.SecretTypeServiceAccountToken,
		}
		if _, err := c.CoreV1().Secrets("default").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var got *corev1.Secret
		waitFor(t, 60*time.Second, "token secret populated by kube-controller-manager", func() (bool, error) {
			got, err = c.CoreV1().Secrets("default").Get(ctx, secret.Name, metav1.GetOptions{})
			return err == nil && len(got.Data[corev1.ServiceAccountTokenKey]) > 0, err
		})
		if !bytes.Equal(got.Data[corev1.ServiceAccountRootCAKey], cp.CAData) {
			t.Errorf("ca.crt in token secret differs from the cluster CA")
		}
		if ns := string(got.Data[corev1.ServiceAccountNamespaceKey]); ns != "default" {
			t.Errorf("namespace in token secret = %q, want default", ns)
		}
		// The token authenticates as the ServiceAccount: the SA key flags of kube-apiserver and
		// kube-controller-manager match.
		cfg := &rest.Config{Host: cp.URL, BearerToken: string(got.Data[corev1.ServiceAccountTokenKey])}
		cfg.CAData = got.Data[corev1.ServiceAccountRootCAKey]
		review, err := newClient(t, cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("authenticating with the token: %v", err)
		}
		if want := "system:serviceaccount:default:robot"; review.Status.UserInfo.Username != want {
			t.Errorf("token authenticates as %q, want %q", review.Status.UserInfo.Username, want)
		}
	})

	t.Run("node-ipam allocates from PodCIDR", func(t *testing.T) {
		cp := env.Cluster("c3")
		c := clients["c3"]
		ctx := t.Context()
		if _, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var podCIDR string
		waitFor(t, 60*time.Second, "node pod CIDR allocated", func() (bool, error) {
			n, err := c.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			podCIDR = n.Spec.PodCIDR
			return podCIDR != "", nil
		})
		p, err := netip.ParsePrefix(podCIDR)
		if err != nil || p.Bits() != 24 || !cp.PodCIDR.Contains(p.Addr()) {
			t.Errorf("node pod CIDR %q is not a /24 inside %s", podCIDR, cp.PodCIDR)
		}
	})

	t.Run("API server restart keeps URL and data", func(t *testing.T) {
		cp := env.Cluster("c3")
		tests := []struct {
			name string
			stop func() error
		}{
			{"stop", cp.StopAPIServer},
			{"kill", cp.KillAPIServer},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := t.Context()
				c := newClient(t, cp.RESTConfig())
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before-" + tt.name}, Data: map[string]string{"k": "v"}}
				if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				url := cp.URL
				if err := tt.stop(); err != nil {
					t.Fatalf("%s: %v", tt.name, err)
				}
				if _, err := c.Discovery().ServerVersion(); err == nil {
					t.Fatal("API server still answers after it was stopped")
				}
				if err := tt.stop(); err != nil {
					t.Errorf("stopping a stopped API server: %v", err)
				}
				begin := time.Now()
				if err := cp.StartAPIServer(ctx); err != nil {
					t.Fatal(err)
				}
				t.Logf("kube-apiserver ready again after %v", time.Since(begin).Round(100*time.Millisecond))
				if err := cp.StartAPIServer(ctx); err == nil {
					t.Error("StartAPIServer on a running API server succeeded, want an error")
				}
				if cp.URL != url {
					t.Errorf("URL changed from %s to %s", url, cp.URL)
				}
				got, err := c.CoreV1().ConfigMaps("default").Get(ctx, cm.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatalf("configmap created before the restart: %v", err)
				}
				if got.Data["k"] != "v" {
					t.Errorf("configmap data = %v", got.Data)
				}
			})
		}
	})
}

// TestStartFailureQuotesLog checks that a child that dies during Start makes Start fail with
// the child's log file named and its last lines quoted, and that nothing is left running.
func TestStartFailureQuotesLog(t *testing.T) {
	realBin := testenv.BinDir(t)
	bin := t.TempDir()
	must(t, os.Symlink(filepath.Join(realBin, "etcd"), filepath.Join(bin, "etcd")))
	must(t, os.Symlink(filepath.Join(realBin, "kube-controller-manager"), filepath.Join(bin, "kube-controller-manager")))
	writeScript(t, filepath.Join(bin, "kube-apiserver"), "echo 'E0101 something specific went wrong' >&2\nexit 3\n")

	opts := testenv.Options(t)
	opts.BinDir = bin
	svc, pod := testenv.CIDRs(0)
	env, err := controlplane.Start(t.Context(), opts, controlplane.ClusterOptions{Name: "broken", ServiceCIDR: svc, PodCIDR: pod})
	if err == nil {
		_ = env.Stop()
		t.Fatal("Start succeeded with an API server that exits at once")
	}
	msg := err.Error()
	for _, want := range []string{"broken kube-apiserver", "exit status 3", filepath.Join("logs", "broken-kube-apiserver.log"), "something specific went wrong"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not mention %q:\n%s", want, msg)
		}
	}
	pids, _ := filepath.Glob(filepath.Join(opts.Dir, "pids", "*.pid"))
	if len(pids) > 0 {
		t.Errorf("pidfiles left after a failed Start (processes still running?): %v", pids)
	}
}

// TestStartRetriesWhenPortTaken makes the API server fail once the way a lost port race does
// and checks that Start retries on another port.
func TestStartRetriesWhenPortTaken(t *testing.T) {
	realBin := testenv.BinDir(t)
	bin := t.TempDir()
	must(t, os.Symlink(filepath.Join(realBin, "etcd"), filepath.Join(bin, "etcd")))
	must(t, os.Symlink(filepath.Join(realBin, "kube-controller-manager"), filepath.Join(bin, "kube-controller-manager")))
	marker := filepath.Join(bin, "failed-once")
	writeScript(t, filepath.Join(bin, "kube-apiserver"),
		"if [ ! -e "+marker+" ]; then touch "+marker+"; echo 'failed to listen: listen tcp: bind: address already in use' >&2; exit 1; fi\n"+
			"exec "+filepath.Join(realBin, "kube-apiserver")+` "$@"`+"\n")

	opts := testenv.Options(t)
	opts.BinDir = bin
	svc, pod := testenv.CIDRs(0)
	env, err := controlplane.Start(t.Context(), opts, controlplane.ClusterOptions{Name: "retry", ServiceCIDR: svc, PodCIDR: pod})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Stop(); err != nil {
		t.Errorf("Stop after a retried start: %v", err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the fake failure never happened: %v", err)
	}
}

// TestUnexpectedExits kills processes behind the environment's back: a controller manager is
// restarted (as a kubelet would), a dead etcd is reported by Stop with its log.
func TestUnexpectedExits(t *testing.T) {
	opts := testenv.Options(t)
	svc, pod := testenv.CIDRs(0)
	env, err := controlplane.Start(t.Context(), opts, controlplane.ClusterOptions{Name: "solo", ServiceCIDR: svc, PodCIDR: pod, Scheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	pids := filepath.Join(env.Dir, "pids")

	for _, name := range []string{"solo-kube-controller-manager", "solo-kube-scheduler"} {
		old := readPidfiles(t, pids)[name]
		killFromPidfile(t, filepath.Join(pids, name+".pid"))
		waitFor(t, 20*time.Second, name+" restarted after a crash", func() (bool, error) {
			now, ok := readPidfiles(t, pids)[name]
			return ok && now != old && procfs.Alive(now), nil
		})
	}

	// kube-controller-manager exits if the API fails it while it builds its controllers (with
	// etcd dead, it does): that crash would rightly be reported. Its informers start once every
	// controller is built, so their first sync says the restart is complete.
	kcmLog := filepath.Join(env.Dir, "logs", "solo-kube-controller-manager.log")
	waitFor(t, 60*time.Second, "restarted kube-controller-manager built its controllers", func() (bool, error) {
		b, err := os.ReadFile(kcmLog)
		if err != nil {
			return false, err
		}
		lastRun := b[max(bytes.LastIndex(b, []byte("==> ")), 0):]
		return bytes.Contains(lastRun, []byte(`"Caches are synced"`)), nil
	})

	killFromPidfile(t, filepath.Join(pids, "etcd.pid"))
	waitFor(t, 10*time.Second, "etcd pidfile removed after it died", func() (bool, error) {
		_, ok := readPidfiles(t, pids)["etcd"]
		return !ok, nil
	})
	err = env.Stop()
	if err == nil {
		t.Fatal("Stop returned nil although etcd had died")
	}
	for _, want := range []string{"etcd (pid", "signal: killed", filepath.Join("logs", "etcd.log")} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Stop error does not mention %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "kube-controller-manager") || strings.Contains(err.Error(), "kube-scheduler") {
		t.Errorf("Stop reports controllers that were restarted successfully:\n%v", err)
	}
	if err2 := env.Stop(); err2 == nil || err2.Error() != err.Error() {
		t.Errorf("second Stop = %v, want the first result again", err2)
	}
	if left := readPidfiles(t, pids); len(left) > 0 {
		t.Errorf("pidfiles left after Stop: %v", left)
	}
}

// BenchmarkColdStartHubAnd3Clusters measures one Start of a hub and three clusters from an
// empty state directory until every API server is ready, plus the Stop. Run with
// -benchtime=1x -count=5; ns/op covers both, start-s and stop-s split them.
func BenchmarkColdStartHubAnd3Clusters(b *testing.B) {
	opts := testenv.Options(b)
	opts.Progress = nil
	clusters := make([]controlplane.ClusterOptions, 4)
	for i, name := range []string{"hub", "c1", "c2", "c3"} {
		svc, pod := testenv.CIDRs(i)
		clusters[i] = controlplane.ClusterOptions{Name: name, ServiceCIDR: svc, PodCIDR: pod}
	}
	var startTotal, stopTotal time.Duration
	n := 0
	for b.Loop() {
		begin := time.Now()
		env, err := controlplane.Start(b.Context(), opts, clusters...)
		if err != nil {
			b.Fatal(err)
		}
		started := time.Now()
		if err := env.Stop(); err != nil {
			b.Fatal(err)
		}
		startTotal += started.Sub(begin)
		stopTotal += time.Since(started)
		n++
	}
	b.ReportMetric(startTotal.Seconds()/float64(n), "start-s")
	b.ReportMetric(stopTotal.Seconds()/float64(n), "stop-s")
}

func newClient(t testing.TB, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitFor polls cond every 200ms until it returns true, failing the test after timeout with
// the last error.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		ok, err := cond()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %v waiting for %s (last error: %v)", timeout, what, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func writeScript(t testing.TB, path, body string) {
	t.Helper()
	must(t, os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
