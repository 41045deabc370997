package verify

import (
	"context"
	"time"

	"github.com/octopus-mcs/octopus/internal/workload"
)

// exec runs argv in m's client pod through the API server's exec subresource (WebSocket, as
// kubectl exec does) and returns its standard output. A non-zero exit is an error that
// carries the command's standard error (curl's and dig's reasons).
func (r *runner) exec(ctx context.Context, m *member, argv ...string) (string, error) {
	// The tools give up after attemptTimeout by themselves and say why; the bound is for
	// an exec that hangs.
	return workload.Exec(ctx, m.Member, r.ns, clientName, attemptTimeout+5*time.Second, argv...)
}
