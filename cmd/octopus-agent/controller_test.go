//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/config/crd"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

const (
	hubNamespace = v1alpha1.DefaultHubNamespace
	clusterID    = "east"
)

// TestControllerHeartbeatsAsProcess runs the built octopus-agent binary against a member control
// plane, with a hand-made hub credential limited to the cluster's own objects, and stops it with
// SIGTERM.
func TestControllerHeartbeatsAsProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent and starts two control planes")
	}
	// The test's own clients log nothing worth reading; the agent's output is printed below.
	logf.SetLogger(logr.Discard())
	bin := buildAgent(t)
	env := testenv.ControlPlanes(t, "hub", "east")
	hubCP, memberCP := env.Cluster("hub"), env.Cluster("east")
	hubAdmin := testenv.Client(t, hubCP.RESTConfig())
	memberAdmin := testenv.Client(t, memberCP.RESTConfig())

	installHub(t, hubAdmin)
	token := clusterToken(t, hubAdmin)
	create(t, memberAdmin, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SystemNamespace}})
	// What join installs in the member before the credential exists: the controllers that
	// index their kinds (the VpcNatTunnels') need them served.
	memberCRDs, err := crd.Member()
	if err != nil {
		t.Fatal(err)
	}
	installCRDs(t, memberAdmin, memberCRDs)

	// Started before the credential exists: it must wait for it, saying so.
	metricsAddr := freeLoopbackAddr(t)
	agent := startAgent(t, bin, "controller", "--kubeconfig", memberCP.Kubeconfig,
		"--heartbeat-interval", "200ms", "--lease-duration", "2s", "--zap-log-level", "debug",
		"--metrics-bind-address", metricsAddr)
	testenv.Eventually(t, 30*time.Second, "the agent waiting for its hub credential", func() error {
		if !strings.Contains(agent.output(), "Waiting for the hub credential") {
			return errors.New("the agent has not logged that it waits for the hub credential")
		}
		return nil
	})
	cred := hubaccess.Credential{ClusterID: clusterID, Server: hubCP.URL, Namespace: hubNamespace, CAData: hubCP.CAData, Token: token}
	create(t, memberAdmin, cred.Secret())

	var first time.Time
	testenv.Eventually(t, time.Minute, "the heartbeat Lease renewed", func() error {
		l := &coordinationv1.Lease{}
		if err := hubAdmin.Get(t.Context(), client.ObjectKey{Namespace: hubNamespace, Name: v1alpha1.HeartbeatLeaseName(clusterID)}, l); err != nil {
			return err
		}
		if l.Labels[v1alpha1.ClusterLabel] != clusterID || l.Spec.RenewTime == nil {
			return fmt.Errorf("lease %v without label or renewTime", l.ObjectMeta)
		}
		if first.IsZero() {
			first = l.Spec.RenewTime.Time
		}
		if !l.Spec.RenewTime.After(first) {
			return fmt.Errorf("renewTime %s has not advanced", l.Spec.RenewTime.Format(time.RFC3339Nano))
		}
		return nil
	})
	testenv.Eventually(t, 30*time.Second, "the Cluster heartbeating", func() error { return clusterCondition(t, hubAdmin, metav1.ConditionTrue, v1alpha1.ReasonHeartbeating) })

	// The controller serves controller-runtime's registry: its reconcile metrics, per
	// controller, and Octopus's (the heartbeat's here; this hub grants too little for the
	// import side's hub cache to sync).
	testenv.Eventually(t, 30*time.Second, "the metrics served", func() error {
		body, err := testenv.Metrics(metricsAddr)
		if err != nil {
			return err
		}
		for _, want := range []string{
			`controller_runtime_reconcile_errors_total{controller="serviceimport"}`,
			`controller_runtime_reconcile_errors_total{controller="serviceexport"}`,
			`octopus_heartbeat_last_success_timestamp_seconds{cluster="` + clusterID + `"}`,
		} {
			if !strings.Contains(string(body), want) {
				return fmt.Errorf("GET /metrics: no %s in its %d bytes", want, len(body))
			}
		}
		return nil
	})

	if err := agent.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-agent.done:
		if !agent.cmd.ProcessState.Success() {
			t.Fatalf("octopus-agent exited with %s after SIGTERM; output:\n%s", agent.cmd.ProcessState, agent.output())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("octopus-agent still runs 30s after SIGTERM; output:\n%s", agent.output())
	}
	if err := clusterCondition(t, hubAdmin, metav1.ConditionFalse, v1alpha1.ReasonAgentStopped); err != nil {
		t.Fatalf("%v; output:\n%s", err, agent.output())
	}
}

// freeLoopbackAddr returns a loopback address with a port that was free a moment ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func buildAgent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "octopus-agent")
	out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("building octopus-agent: %v\n%s", err, out)
	}
	return bin
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	buf  bytes.Buffer
}

func (p *process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buf.Write(b)
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buf.String()
}

func startAgent(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	// Dies with the test binary rather than heartbeating on.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() || testing.Verbose() {
			t.Logf("octopus-agent output:\n%s", p.output())
		}
	})
	return p
}

// installHub prepares the hub for cluster east by hand (the job of `octopus hub deploy` and
// `octopus join`, tested elsewhere): namespace, the hub CRDs, the Cluster, and a ServiceAccount
// allowed to heartbeat.
func installHub(t *testing.T, c client.Client) {
	t.Helper()
	create(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hubNamespace}})
	crds, err := crd.Hub()
	if err != nil {
		t.Fatal(err)
	}
	installCRDs(t, c, crds)
	testenv.Eventually(t, 30*time.Second, "the Cluster created", func() error {
		return c.Create(t.Context(), &v1alpha1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: hubNamespace, Name: clusterID, Labels: map[string]string{v1alpha1.ClusterLabel: clusterID}},
			Spec:       v1alpha1.ClusterSpec{ClusterID: clusterID, PodCIDRs: []string{"10.1.0.0/16"}, ServiceCIDRs: []string{"10.96.0.0/16"}},
		})
	})

	sa := v1alpha1.ClusterServiceAccount(clusterID)
	create(t, c, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: hubNamespace, Name: sa}})
	create(t, c, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: hubNamespace, Name: sa},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{coordinationv1.GroupName}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
			{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"clusters"}, Verbs: []string{"get"}},
			{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"clusters/status"}, Verbs: []string{"get", "patch", "update"}},
		},
	})
	create(t, c, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: hubNamespace, Name: sa},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: hubNamespace, Name: sa}},
	})
}

// clusterToken returns the token kube-controller-manager mints into a service-account-token
// Secret for the cluster's ServiceAccount.
func clusterToken(t *testing.T, c client.Client) string {
	t.Helper()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: hubNamespace, Name: v1alpha1.ClusterServiceAccount(clusterID) + "-token",
			Annotations: map[string]string{corev1.ServiceAccountNameKey: v1alpha1.ClusterServiceAccount(clusterID)}},
		Type: corev1.SecretTypeServiceAccountToken,
	}
	create(t, c, secret)
	var token string
	testenv.Eventually(t, time.Minute, "the token Secret filled", func() error {
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(secret), secret); err != nil {
			return err
		}
		token = string(secret.Data[corev1.ServiceAccountTokenKey])
		if token == "" {
			return errors.New("kube-controller-manager has not filled the token Secret yet")
		}
		return nil
	})
	return token
}

func clusterCondition(t *testing.T, c client.Client, status metav1.ConditionStatus, reason string) error {
	cl := &v1alpha1.Cluster{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: hubNamespace, Name: clusterID}, cl); err != nil {
		return err
	}
	got := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ClusterConditionAgentConnected)
	if got == nil || got.Status != status || got.Reason != reason {
		return fmt.Errorf("condition %s is %+v, want %s/%s", v1alpha1.ClusterConditionAgentConnected, got, status, reason)
	}
	return nil
}

func create(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(t.Context(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, client.ObjectKeyFromObject(obj), err)
	}
}

// installCRDs creates crds with c and waits until each is established.
func installCRDs(t *testing.T, c client.Client, crds []*apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	for _, d := range crds {
		create(t, c, d)
	}
	for _, d := range crds {
		testenv.Eventually(t, 30*time.Second, "CRD "+d.Name+" established", func() error {
			got := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(d), got); err != nil {
				return err
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
			return fmt.Errorf("CRD %s is not established yet", d.Name)
		})
	}
}
