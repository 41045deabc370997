package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/octopus-mcs/octopus/internal/agent"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/servicediscovery"
)

const testKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: member
  cluster:
    server: https://member.example:6443
users:
- name: agent
  user:
    token: secret
contexts:
- name: member
  context:
    cluster: member
    user: agent
current-context: member
`

// TestControllerFlags checks that the rate-limit and worker flags reach the clients and
// controllers the agent builds: without them, the member and hub clients fell back to
// client-go's 5 QPS and the controllers to one worker.
func TestControllerFlags(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "member.kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(testKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name                         string
		args                         []string
		memberQPS, hubQPS            float32
		memberBurst, hubBurst        int
		exportWorkers, importWorkers int
		pprof                        string
	}{
		{
			name:      "defaults",
			memberQPS: agent.DefaultKubeAPIQPS, memberBurst: agent.DefaultKubeAPIBurst,
			hubQPS: agent.DefaultHubAPIQPS, hubBurst: agent.DefaultHubAPIBurst,
			exportWorkers: servicediscovery.DefaultWorkers, importWorkers: servicediscovery.DefaultWorkers,
			pprof: "0",
		},
		{
			name: "set",
			args: []string{"--kube-api-qps=20", "--kube-api-burst=30", "--hub-api-qps=10", "--hub-api-burst=15",
				"--export-workers=2", "--import-workers=8", "--pprof-bind-address=127.0.0.1:6060"},
			memberQPS: 20, memberBurst: 30, hubQPS: 10, hubBurst: 15, exportWorkers: 2, importWorkers: 8,
			pprof: "127.0.0.1:6060",
		},
		{
			name:      "limits off",
			args:      []string{"--kube-api-qps=-1", "--hub-api-qps=-1"},
			memberQPS: -1, memberBurst: agent.DefaultKubeAPIBurst, hubQPS: -1, hubBurst: agent.DefaultHubAPIBurst,
			exportWorkers: servicediscovery.DefaultWorkers, importWorkers: servicediscovery.DefaultWorkers,
			pprof: "0",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &controllerOptions{}
			if err := controllerCommand(o).ParseFlags(append([]string{"--kubeconfig=" + kubeconfig}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			got, err := o.agentOptions()
			if err != nil {
				t.Fatal(err)
			}
			m := got.MemberRESTConfig()
			if m.Host != "https://member.example:6443" || m.QPS != tc.memberQPS || m.Burst != tc.memberBurst {
				t.Errorf("member config: host %q, QPS %g, burst %d; want the kubeconfig's host, %g, %d", m.Host, m.QPS, m.Burst, tc.memberQPS, tc.memberBurst)
			}
			h := got.HubRESTConfig(hubaccess.NewLive(hubaccess.Credential{Server: "https://hub.example:6443", Token: "t"}))
			if h.QPS != tc.hubQPS || h.Burst != tc.hubBurst {
				t.Errorf("hub config: QPS %g, burst %d; want %g, %d", h.QPS, h.Burst, tc.hubQPS, tc.hubBurst)
			}
			if got.ExportWorkers != tc.exportWorkers || got.ImportWorkers != tc.importWorkers {
				t.Errorf("workers: export %d, import %d; want %d, %d", got.ExportWorkers, got.ImportWorkers, tc.exportWorkers, tc.importWorkers)
			}
			if got.PprofBindAddress != tc.pprof {
				t.Errorf("pprof address %q, want %q", got.PprofBindAddress, tc.pprof)
			}
		})
	}
}
