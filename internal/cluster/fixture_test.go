package cluster

import (
	"testing"

	"github.com/go-logr/logr"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

func init() {
	// The controller-runtime client logs through this; tests report through t instead.
	log.SetLogger(logr.Discard())
}

// fabric is a real hub plus member control planes, the hub deployed.
type fabric struct {
	env  *controlplane.Environment
	info *hub.BrokerInfo
	hub  client.Client // admin on the hub
}

func newFabric(t testing.TB, members ...string) *fabric {
	t.Helper()
	env := testenv.ControlPlanes(t, append([]string{"hub"}, members...)...)
	info, err := hub.Deploy(t.Context(), env.Cluster("hub").RESTConfig(), hub.DeployOptions{})
	if err != nil {
		t.Fatalf("deploying the hub: %v", err)
	}
	return &fabric{env: env, info: info, hub: newClient(t, env.Cluster("hub").RESTConfig())}
}

func newClient(t testing.TB, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// joinOptions are the options for joining member name: its pod CIDR given (the test control
// planes run no pods to discover it from), its service CIDR discovered.
func (f *fabric) joinOptions(name string) JoinOptions {
	return JoinOptions{BrokerInfo: f.info, ClusterID: name, PodCIDRs: []string{f.env.Cluster(name).PodCIDR.String()}}
}

func (f *fabric) join(t testing.TB, name string) *Joined {
	t.Helper()
	j, err := Join(t.Context(), f.env.Cluster(name).RESTConfig(), f.joinOptions(name))
	if err != nil {
		t.Fatalf("joining %s: %v", name, err)
	}
	return j
}

// as returns a hub client authenticated with a joined cluster's own credential.
func (f *fabric) as(t testing.TB, j *Joined) client.Client {
	return newClient(t, j.Credential.RESTConfig())
}
