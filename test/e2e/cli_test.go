package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/heartbeat"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/procfs"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// user runs the octopus CLI with its own state directory, like one person's machine.
type user struct {
	t     *testing.T
	state string
}

func (u user) octopus(args ...string) (stdout, stderr string, err error) {
	cmd := exec.Command(filepath.Join(binDir, "octopus"), args...)
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+u.state)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

func (u user) mustOctopus(args ...string) string {
	u.t.Helper()
	out, errOut, err := u.octopus(args...)
	if err != nil {
		u.t.Fatalf("octopus %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

func (u user) agentPID(clusterID string) int {
	data, err := os.ReadFile(filepath.Join(u.state, "octopus", "agent-"+clusterID+".pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(string(data))
	return pid
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.EventuallyEvery(t, 250*time.Millisecond, timeout, "waiting for "+what, testenv.Holds(what, cond))
}

func showClusters(t *testing.T, u user, kubeconfig string) map[string]cluster.Status {
	t.Helper()
	var statuses []cluster.Status
	if err := json.Unmarshal([]byte(u.mustOctopus("show", "clusters", "--kubeconfig", kubeconfig, "-o", "json")), &statuses); err != nil {
		t.Fatal(err)
	}
	out := map[string]cluster.Status{}
	for _, s := range statuses {
		out[s.ClusterID] = s
	}
	return out
}

// TestUserJourney: deploy the hub twice, join two clusters with the CLI (agents running as
// processes: --agent process, since these control planes have no nodes for the member chart
// to run on), see them connected, survive a hub restart, refuse bad input, and leave.
func TestUserJourney(t *testing.T) {
	env := testenv.ControlPlanes(t, "hub", "east", "west")
	u := user{t: t, state: t.TempDir()}
	t.Cleanup(func() {
		for _, id := range []string{"east", "west"} {
			if pid := u.agentPID(id); pid > 0 && procfs.Alive(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	kc := func(name string) string { return env.Cluster(name).Kubeconfig }
	brokerInfo := filepath.Join(t.TempDir(), "broker-info")

	u.mustOctopus("hub", "deploy", "--kubeconfig", kc("hub"), "--broker-info", brokerInfo)
	first, _ := os.ReadFile(brokerInfo)
	out := u.mustOctopus("hub", "deploy", "--kubeconfig", kc("hub"), "--broker-info", brokerInfo)
	if second, _ := os.ReadFile(brokerInfo); !bytes.Equal(first, second) {
		t.Error("a second hub deploy wrote different broker-info")
	}
	if !strings.Contains(out, "octopus join "+brokerInfo) {
		t.Errorf("hub deploy does not say how to join:\n%s", out)
	}
	if st, _ := os.Stat(brokerInfo); st.Mode().Perm() != 0o600 {
		t.Errorf("broker-info mode %v, want 0600", st.Mode().Perm())
	}

	for _, id := range []string{"east", "west"} {
		// No nodes run the member chart's pods here: the development mode runs the controller.
		out := u.mustOctopus("join", brokerInfo, "--cluster-id", id, "--kubeconfig", kc(id), "--pod-cidr", env.Cluster(id).PodCIDR.String(), "--agent", "process")
		if !strings.Contains(out, "Agent started") {
			t.Fatalf("join %s did not start the agent:\n%s", id, out)
		}
	}
	eventually(t, 60*time.Second, "both clusters Connected in `show clusters`", func() bool {
		s := showClusters(t, u, kc("east"))
		return s["east"].State == heartbeat.StateConnected && s["west"].State == heartbeat.StateConnected
	})
	table := u.mustOctopus("show", "clusters", "--kubeconfig", kc("hub"))
	for _, want := range []string{"CLUSTER", "east", "west", env.Cluster("west").PodCIDR.String(), "Connected", "2 of 2 clusters connected"} {
		if !strings.Contains(table, want) {
			t.Errorf("show clusters table lacks %q:\n%s", want, table)
		}
	}

	// The hub's API server dies and comes back: the agent's heartbeat resumes by itself.
	hubCP := env.Cluster("hub")
	if err := hubCP.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	if err := hubCP.StartAPIServer(t.Context()); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	hc, err := client.New(hubCP.RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "east's heartbeat to resume after the hub restart", func() bool {
		lease := &coordinationv1.Lease{}
		if err := hc.Get(t.Context(), client.ObjectKey{Namespace: v1alpha1.DefaultHubNamespace, Name: v1alpha1.HeartbeatLeaseName("east")}, lease); err != nil {
			return false
		}
		return lease.Spec.RenewTime != nil && lease.Spec.RenewTime.After(restarted)
	})

	// Bad input is refused with what to do next.
	_, errOut, err := u.octopus("join", brokerInfo, "--cluster-id", "east", "--kubeconfig", kc("west"), "--pod-cidr", "10.250.0.0/16", "--agent", "none")
	if err == nil || !strings.Contains(errOut, `this cluster already joined as "west"`) {
		t.Errorf("joining west again as east: err %v, stderr:\n%s", err, errOut)
	}
	tampered := filepath.Join(t.TempDir(), "broker-info")
	_ = os.WriteFile(tampered, bytes.Replace(first, []byte(`"namespace": "octopus-hub"`), []byte(`"namespace": "octopus-hub2"`), 1), 0o600)
	_, errOut, err = u.octopus("join", tampered, "--cluster-id", "north", "--kubeconfig", kc("west"))
	if err == nil || !strings.Contains(errOut, "checksum mismatch") {
		t.Errorf("join with tampered broker-info: err %v, stderr:\n%s", err, errOut)
	}
	_, errOut, err = u.octopus("join", brokerInfo, "--cluster-id", "North", "--kubeconfig", kc("west"))
	if err == nil || !strings.Contains(errOut, `--cluster-id: cluster ID "North" is not valid`) {
		t.Errorf("join with an invalid cluster ID: err %v, stderr:\n%s", err, errOut)
	}

	// Leave stops the agent and removes the cluster from the set.
	eastAgent := u.agentPID("east")
	u.mustOctopus("leave", "--kubeconfig", kc("east"))
	if procfs.Alive(eastAgent) {
		t.Errorf("east's agent (pid %d) still runs after leave", eastAgent)
	}
	s := showClusters(t, u, kc("west"))
	if _, ok := s["east"]; ok || s["west"].State != heartbeat.StateConnected {
		t.Errorf("after east left, show clusters = %+v", s)
	}
	_, errOut, err = u.octopus("show", "clusters", "--kubeconfig", kc("east"))
	if err == nil || !strings.Contains(errOut, "is neither a joined cluster nor a hub") {
		t.Errorf("show clusters on a cluster that left: err %v, stderr:\n%s", err, errOut)
	}
	u.mustOctopus("leave", "--kubeconfig", kc("west"))
}
