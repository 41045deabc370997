package hubaccess

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

const (
	// DefaultPollInterval is how often WaitForCredential looks for the credential until
	// `octopus join` has written it, when the caller does not choose.
	DefaultPollInterval = 5 * time.Second
	// reminderInterval spaces the log lines repeating that the credential is still missing:
	// visible in `kubectl logs`, without one line per poll.
	reminderInterval = 30 * time.Second
)

// WaitForCredential reads the cluster's hub credential from the member cluster, retrying every
// interval (DefaultPollInterval when zero) while it is missing or unreadable. It logs, through
// the context's logger, why it waits when the reason changes and at most every 30s otherwise,
// and once when it has the credential. It returns early only when ctx is done.
//
// A component started before its cluster has joined waits here instead of failing: Kubernetes
// would restart it in a loop, and join may come much later.
func WaitForCredential(ctx context.Context, member client.Reader, interval time.Duration) (Credential, error) {
	log := logf.FromContext(ctx)
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	var lastMsg string
	var lastLog time.Time
	for {
		cred, err := LoadCredential(ctx, member)
		if err == nil {
			log.Info("Loaded the hub credential", "clusterID", cred.ClusterID, "hub", cred.Server, "namespace", cred.Namespace)
			return cred, nil
		}
		if msg := err.Error(); msg != lastMsg || time.Since(lastLog) >= reminderInterval {
			log.Info("Waiting for the hub credential", "secret", v1alpha1.SystemNamespace+"/"+v1alpha1.CredentialSecretName, "reason", msg, "retryEvery", interval.String())
			lastMsg, lastLog = msg, time.Now()
		}
		select {
		case <-ctx.Done():
			return Credential{}, fmt.Errorf("waiting for the hub credential: %w", context.Cause(ctx))
		case <-time.After(interval):
		}
	}
}
