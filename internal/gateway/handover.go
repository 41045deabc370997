package gateway

// Handover on a clean stop: make-before-break.
//
// A rolling update (or a drain) stops the active gateway with SIGTERM. client-go releases the
// Lease at once (ReleaseOnCancel) and a standby takes it within a fraction of a second, but
// the standby is not forwarding yet: it still creates its tunnel driver (a new key pair),
// syncs its cache of the hub, applies the tunnels and publishes the Peer with its key, and the
// remote gateways re-point only when they see that Peer. Closing the old active's tunnels at
// SIGTERM made all of that an interruption of every cross-cluster connection (2.35–3.96 s per
// handover on a loaded lab, docs/benchmarks.md).
//
// Instead the stopping active keeps its device, peers and routes, and so keeps forwarding,
// until the successor has published the Peer (its key or its node in the Peer's spec), and
// closes them handoverLinger later, time for the remote gateways to re-point and for the
// route agents and the ovnmaster (the secondary network's gateway port), which move to the
// gateway the ConfigMap names once it wrote itself there (after its Peer), to follow. It stops waiting when no other gateway took the Lease within
// successorWait (a cluster with one gateway node, an uninstall), when the successor released
// it again, and after Options.HandoverGrace in any case. It writes nothing meanwhile: its
// controller has stopped, so it cannot overwrite the successor's Peer or ConfigMap.
//
// A crashed or killed active cannot do this; the standby's fast takeover (takeover.go) covers
// that case.

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

const (
	// DefaultHandoverGrace bounds how long a stopping active gateway keeps its tunnels up for
	// its successor. Well within Kubernetes' default terminationGracePeriodSeconds (30 s).
	DefaultHandoverGrace = 10 * time.Second

	// handoverLinger is how long the tunnels stay up after the successor's Peer was seen:
	// the remote gateways re-point and the route agents and the ovnmaster move when they see
	// it (or the ConfigMap written right after it), each through a watch and a reconcile of
	// its own.
	handoverLinger = time.Second

	// handoverPoll spaces the reads of the Lease and the Peer while handing over.
	handoverPoll = 50 * time.Millisecond

	// handoverReadTimeout bounds one of those reads.
	handoverReadTimeout = time.Second
)

// successorWait is how long a stopping active waits for another gateway to take the released
// Lease before it concludes there is none: a standby with fast takeover acquires a released
// Lease at once (it watches it), one without retries every RetryPeriod with up to 120 %
// jitter.
func (o *Options) successorWait() time.Duration {
	return min(2*o.RetryPeriod+time.Second, o.HandoverGrace)
}

// handOver keeps the active term's tunnels up, after its controller stopped because the
// process is stopping, until a successor has taken over (see the top of this file). It
// returns when the tunnels may be closed.
func (a *active) handOver() {
	if a.o.HandoverGrace <= 0 || a.published == nil {
		return // nothing of ours is published: no remote gateway tunnels to us
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), a.o.HandoverGrace)
	defer cancel()
	log := a.o.Log.WithValues("node", a.o.NodeName)
	log.Info("Stopping: keeping the tunnels up until a successor has published the Peer", "grace", a.o.HandoverGrace.String())
	tick := time.NewTicker(handoverPoll)
	defer tick.Stop()
	successor := ""
	for {
		holder, err := a.leaseHolder(ctx)
		switch {
		case err != nil:
			// Retried until the deadlines below.
		case holder != "" && holder != a.o.NodeName:
			successor = holder
		case holder == "" && successor != "":
			log.Info("The successor released the Lease again; closing the tunnels", "successor", successor)
			return
		}
		if successor == "" && time.Since(start) >= a.o.successorWait() {
			log.Info("No other gateway took the Lease; closing the tunnels", "waited", time.Since(start).Round(time.Millisecond).String())
			return
		}
		if successor != "" {
			if done, err := a.peerTakenOver(ctx); err == nil && done {
				log.Info("The successor published the Peer; closing the tunnels shortly", "successor", successor,
					"after", time.Since(start).Round(time.Millisecond).String(), "linger", handoverLinger.String())
				select {
				case <-ctx.Done():
				case <-time.After(handoverLinger):
				}
				return
			}
		}
		select {
		case <-ctx.Done():
			log.Info("No successor published the Peer within the handover grace; closing the tunnels", "successor", successor)
			return
		case <-tick.C:
		}
	}
}

// leaseHolder reads the holder of the election's Lease.
func (a *active) leaseHolder(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, handoverReadTimeout)
	defer cancel()
	l := &coordinationv1.Lease{}
	if err := a.member.Get(ctx, client.ObjectKey{Namespace: a.at.leaseNamespace, Name: a.at.leaseName}, l); err != nil {
		return "", err
	}
	return holderOf(l), nil
}

// peerTakenOver tells whether the Peer on the hub is no longer the one this term published:
// another node's or another key's, or gone (the cluster is leaving).
func (a *active) peerTakenOver(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, handoverReadTimeout)
	defer cancel()
	p := &v1alpha1.Peer{}
	if err := a.hub.Get(ctx, client.ObjectKey{Namespace: a.at.Namespace, Name: a.at.ClusterID}, p); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}
	return p.Spec.Hostname != a.published.Hostname || p.Spec.PublicKey != a.published.PublicKey, nil
}
