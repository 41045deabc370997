package testenv

import (
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/internal/kube"
)

// Client returns a client of cfg that knows every type Octopus uses (kube.Scheme: the
// built-in kinds, Octopus's CRDs and the MCS API), failing t if it cannot be made.
func Client(t testing.TB, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatalf("creating a client of %s: %v", cfg.Host, err)
	}
	return c
}
