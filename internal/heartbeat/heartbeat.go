// Package heartbeat keeps a member cluster's presence on the hub: the controller renews the
// cluster's Lease and its Cluster's AgentConnected condition (Heartbeat), and every reader
// (the importers' liveness check, `octopus show clusters`) judges a Lease the same way (State).
// It is runtime code, linked by the controller; provisioning (join, leave) does not use it.
package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// DefaultInterval is how often an agent renews its heartbeat Lease unless told otherwise.
const DefaultInterval = 10 * time.Second

// States of a cluster's heartbeat as State reports them.
const (
	// StateConnected means the Lease was renewed within its leaseDurationSeconds.
	StateConnected = "Connected"
	// StateStale means the Lease exists but has not been renewed within its leaseDurationSeconds.
	StateStale = "Stale"
	// StateNeverSeen means the cluster has never renewed a Lease (no Lease or no renewTime).
	StateNeverSeen = "NeverSeen"
)

const (
	// stopTimeout bounds the AgentStopped write at shutdown: a process being terminated must not
	// hang on a hub that is down, and the Lease going stale tells the same story anyway.
	stopTimeout = 3 * time.Second
	// minRequestTimeout keeps very short test intervals from timing out a healthy TLS handshake.
	minRequestTimeout = time.Second
)

// Options configures a Heartbeat.
type Options struct {
	// Hub is a client of the hub authenticated with the cluster's own credential. Required.
	Hub client.Client
	// Namespace is the hub namespace holding the cluster's objects, its Cluster and Lease
	// included. Required.
	Namespace string
	// ClusterID is the cluster's ID: the name of its Cluster and of its heartbeat Lease. Required.
	ClusterID string
	// Interval between two renewals. Optional; DefaultInterval when zero.
	Interval time.Duration
	// LeaseDuration is written as the Lease's leaseDurationSeconds: readers consider the cluster
	// stale when the Lease is older. Optional; three Intervals when zero, so that two renewals
	// may be lost before anyone notices. Must be longer than Interval.
	LeaseDuration time.Duration
	// Identity is the Lease's holderIdentity, e.g. the pod name. Optional; the hostname when empty.
	Identity string
	// Version is reported as the Cluster's status.agentVersion. Optional.
	Version string
	// Clock is for tests. Optional; the real clock when nil.
	Clock clock.WithTicker
}

// Heartbeat keeps a cluster's presence on the hub up to date: it renews the cluster's
// coordination.k8s.io Lease every Interval and keeps the Cluster's AgentConnected condition True
// while it does. It never gives up on errors: the hub being down is an expected state (the data
// plane keeps working on its last state meanwhile, docs/architecture.md §7), so it keeps trying at the same pace, logs only when the kind of failure changes, and resumes
// on its own when the hub returns. On shutdown it marks the cluster AgentStopped.
//
// Heartbeat is a manager.Runnable that needs leader election, so only one replica of an agent
// renews the Lease. Start must be called at most once.
type Heartbeat struct {
	opts      Options
	clock     clock.WithTicker
	leaseName string

	// lease is the Lease as last written or read; nil when it must be read again first.
	lease *coordinationv1.Lease
	// failing describes the current run of failed ticks; nil while healthy.
	failing *failure
}

var (
	_ manager.Runnable               = (*Heartbeat)(nil)
	_ manager.LeaderElectionRunnable = (*Heartbeat)(nil)
)

// failure is a run of consecutive failed ticks of the same kind.
type failure struct {
	kind  string
	since time.Time
	ticks int
}

// New validates opts and fills in the defaults.
func New(opts Options) (*Heartbeat, error) {
	var errs []error
	if opts.Hub == nil {
		errs = append(errs, errors.New("a hub client is required"))
	}
	if opts.Namespace == "" {
		errs = append(errs, errors.New("the hub namespace is required"))
	}
	if opts.ClusterID == "" {
		errs = append(errs, errors.New("the cluster ID is required"))
	}
	if opts.Interval < 0 || opts.LeaseDuration < 0 {
		errs = append(errs, fmt.Errorf("heartbeat interval (%s) and lease duration (%s) must not be negative", opts.Interval, opts.LeaseDuration))
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.LeaseDuration == 0 {
		opts.LeaseDuration = 3 * opts.Interval
	}
	if opts.LeaseDuration <= opts.Interval {
		errs = append(errs, fmt.Errorf("lease duration %s must be longer than the heartbeat interval %s, or the Lease expires between renewals", opts.LeaseDuration, opts.Interval))
	}
	if opts.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			errs = append(errs, fmt.Errorf("no identity given and reading the hostname failed: %w", err))
		}
		opts.Identity = host
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("configuring the heartbeat: %w", err)
	}
	c := opts.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	return &Heartbeat{opts: opts, clock: c, leaseName: v1alpha1.HeartbeatLeaseName(opts.ClusterID)}, nil
}

// NeedLeaderElection reports true: two replicas renewing one Lease would fight over it.
func (h *Heartbeat) NeedLeaderElection() bool { return true }

// Start renews the heartbeat until ctx is cancelled, then marks the cluster AgentStopped. It
// returns nil: failures to reach the hub are logged and retried, never fatal.
func (h *Heartbeat) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("heartbeat").WithValues("clusterID", h.opts.ClusterID)
	ctx = logf.IntoContext(ctx, log)
	log.Info("Started heartbeat", "lease", h.opts.Namespace+"/"+h.leaseName, "identity", h.opts.Identity,
		"interval", h.opts.Interval.String(), "leaseDuration", h.opts.LeaseDuration.String())

	ticker := h.clock.NewTicker(h.opts.Interval)
	defer ticker.Stop()
	h.tick(ctx)
	for {
		select {
		case <-ctx.Done():
			h.stop(context.WithoutCancel(ctx))
			return nil
		case <-ticker.C():
			h.tick(ctx)
		}
	}
}

// tick renews the Lease, then reconciles the Cluster's condition, and records how it went.
func (h *Heartbeat) tick(ctx context.Context) {
	log := logf.FromContext(ctx)
	// A tick must not outlive the next one: a hung connection would otherwise stall renewals
	// for as long as the kernel keeps the socket.
	tickCtx, cancel := context.WithTimeout(ctx, max(h.opts.Interval, minRequestTimeout))
	defer cancel()

	err := h.renewLease(tickCtx)
	if err == nil && h.lease != nil && h.lease.Spec.RenewTime != nil {
		lastSuccess.WithLabelValues(h.opts.ClusterID).Set(float64(h.lease.Spec.RenewTime.UnixMicro()) / 1e6)
	}
	if errors.Is(err, errLeaseConflict) {
		// Someone else wrote the Lease since we last saw it; the next tick starts from a fresh
		// read. Not a hub failure, so the failure state is left as it is.
		log.V(1).Info("Lost an optimistic update of the heartbeat Lease; re-reading it next tick")
		return
	}
	if err == nil {
		err = h.syncCondition(tickCtx, metav1.ConditionTrue, v1alpha1.ReasonHeartbeating,
			fmt.Sprintf("Agent %s renews Lease %s every %s", h.opts.Identity, h.leaseName, h.opts.Interval), false)
	}
	if ctx.Err() != nil {
		// Shutting down: a request cut short by cancellation says nothing about the hub.
		return
	}
	h.record(log, err)
}

// record logs a failure only when the kind of failure changes and a recovery once, so that a
// hub that is down for an hour yields two lines, not one per tick.
func (h *Heartbeat) record(log logr.Logger, err error) {
	now := h.clock.Now()
	if err == nil {
		if h.failing != nil {
			log.Info("Resumed heartbeat", "failedFor", now.Sub(h.failing.since).Round(time.Millisecond).String(), "failedTicks", h.failing.ticks)
			h.failing = nil
		}
		return
	}
	kind := failureKind(err)
	if h.failing == nil {
		h.failing = &failure{since: now}
	}
	if h.failing.kind != kind {
		log.Error(err, "Failed to heartbeat to the hub; retrying every interval", "interval", h.opts.Interval.String())
		h.failing.kind = kind
	} else {
		log.V(1).Info("Failed to heartbeat to the hub again", "error", err.Error())
	}
	h.failing.ticks++
}

// errLeaseConflict reports an optimistic update of the Lease that lost against another writer.
var errLeaseConflict = errors.New("heartbeat Lease changed since it was read")

// renewLease creates or updates the heartbeat Lease with a new renewTime.
func (h *Heartbeat) renewLease(ctx context.Context) error {
	log := logf.FromContext(ctx)
	key := client.ObjectKey{Namespace: h.opts.Namespace, Name: h.leaseName}
	if h.lease == nil {
		current := &coordinationv1.Lease{}
		err := h.opts.Hub.Get(ctx, key, current)
		if apierrors.IsNotFound(err) {
			return h.createLease(ctx)
		}
		if err != nil {
			return &hubError{op: "reading Lease " + key.String(), err: err}
		}
		h.lease = current
	}

	now := h.clock.Now()
	lease := h.lease.DeepCopy()
	if holder := ptrValue(lease.Spec.HolderIdentity); holder != h.opts.Identity {
		// Another replica held it before us (failover or rollout): count the transition as a
		// leader-election Lease would, so that readers can see the agent changed.
		log.Info("Took over heartbeat Lease", "previousHolder", holder, "identity", h.opts.Identity)
		lease.Spec.AcquireTime = &metav1.MicroTime{Time: now}
		lease.Spec.LeaseTransitions = new(ptrValue(lease.Spec.LeaseTransitions) + 1)
	}
	h.fillLease(lease, now)

	err := h.opts.Hub.Update(ctx, lease)
	switch {
	case err == nil:
		h.lease = lease
		return nil
	case apierrors.IsConflict(err):
		h.lease = nil
		return errLeaseConflict
	case apierrors.IsNotFound(err):
		// Deleted behind our back (e.g. by an administrator): recreate it in the same tick.
		h.lease = nil
		return h.createLease(ctx)
	default:
		return &hubError{op: "renewing Lease " + key.String(), err: err}
	}
}

func (h *Heartbeat) createLease(ctx context.Context) error {
	now := h.clock.Now()
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.opts.Namespace, Name: h.leaseName},
		Spec:       coordinationv1.LeaseSpec{AcquireTime: &metav1.MicroTime{Time: now}, LeaseTransitions: new(int32(0))},
	}
	h.fillLease(lease, now)
	err := h.opts.Hub.Create(ctx, lease)
	if apierrors.IsAlreadyExists(err) {
		// Created by another writer since we looked; read it next tick.
		return errLeaseConflict
	}
	if err != nil {
		return &hubError{op: "creating Lease " + client.ObjectKeyFromObject(lease).String(), err: err}
	}
	logf.FromContext(ctx).Info("Created heartbeat Lease", "lease", client.ObjectKeyFromObject(lease))
	h.lease = lease
	return nil
}

// fillLease sets everything the heartbeat owns on the Lease.
func (h *Heartbeat) fillLease(lease *coordinationv1.Lease, now time.Time) {
	if lease.Labels == nil {
		lease.Labels = map[string]string{}
	}
	// The hub's admission policy rejects any write by a cluster's credential to an object that
	// does not carry the cluster's own label.
	lease.Labels[v1alpha1.ClusterLabel] = h.opts.ClusterID
	lease.Spec.HolderIdentity = new(h.opts.Identity)
	lease.Spec.LeaseDurationSeconds = new(durationSeconds(h.opts.LeaseDuration))
	lease.Spec.RenewTime = &metav1.MicroTime{Time: now}
}

// syncCondition sets the Cluster's AgentConnected condition and agentVersion if they differ from
// what the hub has. Every tick reads the Cluster so that a condition changed by someone else (a
// previous replica shutting down, a hub-side controller) is put right; the read is served from
// the API server's watch cache unless fresh is set, so a steady heartbeat costs the hub one
// write (the Lease) and one cheap read per tick. The patch is a merge patch with an optimistic
// lock: it replaces the whole conditions list, so it must not overwrite a concurrent change.
func (h *Heartbeat) syncCondition(ctx context.Context, status metav1.ConditionStatus, reason, message string, fresh bool) error {
	key := client.ObjectKey{Namespace: h.opts.Namespace, Name: h.opts.ClusterID}
	c := &v1alpha1.Cluster{}
	get := func(opts ...client.GetOption) error {
		err := h.opts.Hub.Get(ctx, key, c, opts...)
		if apierrors.IsNotFound(err) {
			return &hubError{op: "reading Cluster " + key.String(), err: fmt.Errorf("the hub has no Cluster %s; re-run `octopus join`: %w", key, err)}
		}
		if err != nil {
			return &hubError{op: "reading Cluster " + key.String(), err: err}
		}
		return nil
	}
	var opts []client.GetOption
	if !fresh {
		opts = append(opts, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: "0"}})
	}
	if err := get(opts...); err != nil {
		return err
	}
	want := metav1.Condition{
		Type:               v1alpha1.ClusterConditionAgentConnected,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: c.Generation,
		LastTransitionTime: metav1.NewTime(h.clock.Now()),
	}
	if !h.statusDiffers(c, want) {
		return nil
	}
	if !fresh {
		// The cached copy may lag; decide and lock against the current object.
		if err := get(); err != nil {
			return err
		}
		want.ObservedGeneration = c.Generation
		if !h.statusDiffers(c, want) {
			return nil
		}
	}

	before := c.DeepCopy()
	meta.SetStatusCondition(&c.Status.Conditions, want)
	if h.opts.Version != "" {
		c.Status.AgentVersion = h.opts.Version
	}
	if err := h.opts.Hub.Status().Patch(ctx, c, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return &hubError{op: "updating the status of Cluster " + key.String(), err: err}
	}
	logf.FromContext(ctx).Info("Updated Cluster status", "condition", want.Type, "status", want.Status, "reason", want.Reason)
	return nil
}

// statusDiffers reports whether c's status differs from the wanted condition and version.
func (h *Heartbeat) statusDiffers(c *v1alpha1.Cluster, want metav1.Condition) bool {
	if h.opts.Version != "" && c.Status.AgentVersion != h.opts.Version {
		return true
	}
	got := meta.FindStatusCondition(c.Status.Conditions, want.Type)
	return got == nil || got.Status != want.Status || got.Reason != want.Reason ||
		got.Message != want.Message || got.ObservedGeneration != want.ObservedGeneration
}

// stop marks the cluster AgentStopped, best effort: the process is going away and the hub may be
// unreachable, so it tries once within stopTimeout.
func (h *Heartbeat) stop(ctx context.Context) {
	log := logf.FromContext(ctx)
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()

	// If another replica has taken the Lease over, the cluster is not stopping: only the
	// agent's current holder speaks for it.
	lease := &coordinationv1.Lease{}
	err := h.opts.Hub.Get(ctx, client.ObjectKey{Namespace: h.opts.Namespace, Name: h.leaseName}, lease)
	if err == nil && ptrValue(lease.Spec.HolderIdentity) != h.opts.Identity {
		log.Info("Stopped heartbeat; left the Cluster status to the Lease's new holder", "holder", ptrValue(lease.Spec.HolderIdentity))
		return
	}
	if err != nil && !apierrors.IsNotFound(err) {
		log.Error(err, "Failed to mark the cluster stopped on the hub; its Lease will go stale instead")
		return
	}
	err = h.syncCondition(ctx, metav1.ConditionFalse, v1alpha1.ReasonAgentStopped,
		fmt.Sprintf("Agent %s shut down", h.opts.Identity), true)
	if err != nil {
		log.Error(err, "Failed to mark the cluster stopped on the hub; its Lease will go stale instead")
		return
	}
	log.Info("Stopped heartbeat")
}

// hubError is a failed hub request with what it was for.
type hubError struct {
	op  string
	err error
}

func (e *hubError) Error() string { return e.op + ": " + e.err.Error() }
func (e *hubError) Unwrap() error { return e.err }

// failureKind groups errors into the kinds that are worth a log line when they change: the
// request that failed and the API status reason (Unknown for network errors, whose text varies
// from one attempt to the next).
func failureKind(err error) string {
	op := ""
	if he, ok := errors.AsType[*hubError](err); ok {
		op = he.op
	}
	reason := apierrors.ReasonForError(err)
	if reason == metav1.StatusReasonUnknown {
		reason = "Unknown"
	}
	return op + "/" + string(reason)
}

// Age returns how long ago lease was last renewed, and false when it never was (no
// Lease, or no renewTime). A renewTime in the future (clock skew between the agent and the
// reader) counts as just renewed.
func Age(lease *coordinationv1.Lease, now time.Time) (time.Duration, bool) {
	if lease == nil || lease.Spec.RenewTime == nil {
		return 0, false
	}
	return max(now.Sub(lease.Spec.RenewTime.Time), 0), true
}

// State summarises a cluster's heartbeat Lease as StateConnected, StateStale or
// StateNeverSeen. A Lease without leaseDurationSeconds is judged by the default lease duration.
func State(lease *coordinationv1.Lease, now time.Time) string {
	age, ok := Age(lease, now)
	if !ok {
		return StateNeverSeen
	}
	ttl := 3 * DefaultInterval
	if d := ptrValue(lease.Spec.LeaseDurationSeconds); d > 0 {
		ttl = time.Duration(d) * time.Second
	}
	if age > ttl {
		return StateStale
	}
	return StateConnected
}

// durationSeconds rounds d up to whole seconds, at least one: rounding down would announce a
// shorter lease than the agent keeps.
func durationSeconds(d time.Duration) int32 {
	s := (d + time.Second - 1) / time.Second
	return int32(max(s, 1))
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
