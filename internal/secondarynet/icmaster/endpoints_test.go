package icmaster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/internal/datapath/ovnic"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestEndpointsFileFollowsConfigMap runs two icmaster replicas (leader-elected, as the chart's
// two ovn-ic pods) against a real kube-apiserver, each with its own pod's endpoints file: both
// files, the standby's too, get ovn-ic-config's IC endpoints and are rewritten when
// ic-db-host and the ports are edited; a refused configuration leaves them as they were.
func TestEndpointsFileFollowsConfigMap(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	env := testenv.ControlPlanes(t, "east")
	cfg := env.Cluster("east").RESTConfig()
	testenv.InstallCRDs(t, cfg)
	kube := testenv.Client(t, cfg)
	for _, ns := range []string{"kube-system", "octopus-system"} {
		_ = kube.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	dir := t.TempDir()
	// No NB: the leader's Apply fails (and retries) while the writers do their part, which
	// needs none.
	nb := "unix:" + filepath.Join(dir, "no-nb.sock")
	var files []string
	for i := range 2 {
		file := filepath.Join(dir, fmt.Sprintf("replica-%d", i), "ic-endpoints.json")
		if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
			t.Fatal(err)
		}
		files = append(files, file)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, Options{
				Member: cfg, ClusterID: "east", CIDR: netip.MustParsePrefix("10.112.0.0/24"), Pool: pool, NBEndpoint: nb,
				EndpointsFile: file, LeaderElection: true, LeaderElectionNamespace: "octopus-system", MetricsBindAddress: "0",
				Log: testr.NewWithOptions(t, testr.Options{Verbosity: 1}).WithValues("replica", i),
			})
		}()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("icmaster replica %d: %v", i, err)
			}
		})
	}
	z := &az{id: "east", kube: kube}
	waitFiles := func(want ovnic.Endpoints) {
		t.Helper()
		eventually(t, fmt.Sprintf("both replicas' endpoints files to hold %+v", want), func() error {
			var errs []error
			for _, f := range files {
				data, err := os.ReadFile(f)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				if got, err := ovnic.ParseEndpoints(data); err != nil || got != want {
					errs = append(errs, fmt.Errorf("%s holds %+v (%w)", f, got, err))
				}
			}
			return errors.Join(errs...)
		})
	}

	z.writeConfig(t, map[string]string{"enable-ic": "true", "ic-db-host": "127.0.0.1", "ic-nb-port": "16645", "ic-sb-port": "16646"}, nil)
	first := ovnic.Endpoints{NB: "ssl:127.0.0.1:16645", SB: "ssl:127.0.0.1:16646"}
	waitFiles(first)

	// Edited live: the hub's databases moved to a raft cluster on other hosts and ports.
	z.writeConfig(t, map[string]string{"enable-ic": "true", "ic-db-host": "127.0.0.2,127.0.0.3", "ic-nb-port": "26645", "ic-sb-port": "26646"}, nil)
	second := ovnic.Endpoints{NB: "ssl:127.0.0.2:26645,ssl:127.0.0.3:26645", SB: "ssl:127.0.0.2:26646,ssl:127.0.0.3:26646"}
	waitFiles(second)

	// Refused (unknown key, then a foreign az-name): the files keep the last good endpoints,
	// then follow again once the configuration is valid.
	z.writeConfig(t, map[string]string{"enable-ic": "true", "ic-db-host": "127.0.0.9", "ic-db-hots": "x"}, nil)
	z.waitStatus(t, "unknown key")
	z.writeConfig(t, map[string]string{"enable-ic": "true", "ic-db-host": "127.0.0.9", "az-name": "west"}, nil)
	z.waitStatus(t, "differs from the cluster ID")
	// The writers are a controller of their own: give them the time they take (milliseconds)
	// to get a refused configuration wrong before the files are read.
	time.Sleep(time.Second)
	waitFiles(second)
	z.writeConfig(t, map[string]string{"enable-ic": "true", "ic-db-host": "127.0.0.4"}, nil)
	waitFiles(ovnic.Endpoints{NB: "ssl:127.0.0.4:6645", SB: "ssl:127.0.0.4:6646"})
}
