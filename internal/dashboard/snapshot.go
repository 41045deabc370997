// Package dashboard is the model and HTTP server of `octopus dashboard`: it reads the hub and
// the member clusters (get and list only), turns what it read into a view of the cluster set
// (clusters, their gateways, the tunnels between them, exported services and their importers)
// and serves that view as JSON next to an embedded page that draws it.
package dashboard

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// Snapshot is what one collection read, unprocessed: BuildView turns it into a View.
type Snapshot struct {
	// Taken is when the collection started; ages are computed against it.
	Taken time.Time
	// HubNamespace is the hub namespace read.
	HubNamespace string
	// HubError is why the hub could not be read; empty when it was.
	HubError string
	// Statuses are the clusters' registrations and heartbeats (cluster.CollectStatus).
	Statuses []cluster.Status
	// Clusters are the Cluster objects, for their conditions and agent versions.
	Clusters []v1alpha1.Cluster
	// Peers are the gateways' Peers, the hub gateway's included.
	Peers []v1alpha1.Peer
	// HubGatewayLease is the hub gateway's election Lease; nil without a hub gateway.
	HubGatewayLease *coordinationv1.Lease
	// Records are the hub's ServiceImport records, one per exporting cluster and service.
	Records []mcsv1beta1.ServiceImport
	// Members are the clusters whose own kubeconfig was given.
	Members []MemberSnapshot
}

// MemberSnapshot is what was read from one member cluster's own API server.
type MemberSnapshot struct {
	// Source is the kubeconfig the cluster was read with.
	Source string
	// ClusterID is the ID in the cluster's hub credential; empty when it could not be read.
	ClusterID string
	// Error is why the cluster could not be read (fully); empty when it was.
	Error string
	// GatewayLease is the gateway election Lease; nil when absent or unread.
	GatewayLease *coordinationv1.Lease
	// Imports are the ServiceImports Octopus created in the cluster.
	Imports []mcsv1beta1.ServiceImport
}

// Member is a member cluster to read.
type Member struct {
	// Source names the kubeconfig, for the page. Required.
	Source string
	// Client reads the cluster. Required.
	Client client.Reader
}

// Collector reads a Snapshot. It only gets and lists.
type Collector struct {
	// Hub reads the hub namespace. Required.
	Hub client.Reader
	// HubNamespace is the namespace Hub reads. Required.
	HubNamespace string
	// Members are the clusters read directly. Optional: without them the view has no
	// gateway liveness and no importers.
	Members []Member
	// Now is the clock. Optional, time.Now.
	Now func() time.Time
}

// Collect reads the hub and every member. It does not fail: what could not be read is
// recorded in the snapshot, so the page shows a hub outage instead of going blank.
func (c *Collector) Collect(ctx context.Context) Snapshot {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	s := Snapshot{Taken: now(), HubNamespace: c.HubNamespace}
	s.Members = make([]MemberSnapshot, len(c.Members))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.collectHub(ctx, &s); err != nil {
			s.HubError = err.Error()
		}
	}()
	members := make(chan struct{}, len(c.Members))
	for i, m := range c.Members {
		go func() {
			s.Members[i] = collectMember(ctx, m)
			members <- struct{}{}
		}()
	}
	for range c.Members {
		<-members
	}
	<-done
	return s
}

func (c *Collector) collectHub(ctx context.Context, s *Snapshot) error {
	statuses, err := cluster.CollectStatus(ctx, c.Hub, c.HubNamespace, s.Taken)
	if err != nil {
		return err
	}
	s.Statuses = statuses
	clusters := &v1alpha1.ClusterList{}
	if err := c.Hub.List(ctx, clusters, client.InNamespace(c.HubNamespace)); err != nil {
		return fmt.Errorf("listing Clusters on the hub: %w", err)
	}
	s.Clusters = clusters.Items
	peers := &v1alpha1.PeerList{}
	if err := c.Hub.List(ctx, peers, client.InNamespace(c.HubNamespace)); err != nil {
		return fmt.Errorf("listing Peers on the hub: %w", err)
	}
	s.Peers = peers.Items
	// Records carry the exporting cluster's label; the ServiceImport kind may also hold
	// other objects in a shared hub, which have none.
	records := &mcsv1beta1.ServiceImportList{}
	if err := c.Hub.List(ctx, records, client.InNamespace(c.HubNamespace), client.HasLabels{v1alpha1.ClusterLabel, v1alpha1.ServiceNamespaceLabel}); err != nil {
		return fmt.Errorf("listing exported service records on the hub: %w", err)
	}
	s.Records = records.Items
	lease, err := getLease(ctx, c.Hub, c.HubNamespace, v1alpha1.HubGatewayLeaseName)
	if err != nil {
		return err
	}
	s.HubGatewayLease = lease
	return nil
}

func collectMember(ctx context.Context, m Member) MemberSnapshot {
	ms := MemberSnapshot{Source: m.Source}
	var errs []error
	cred, err := hubaccess.LoadCredential(ctx, m.Client)
	if err != nil {
		errs = append(errs, fmt.Errorf("reading the cluster's hub credential: %w", err))
	} else {
		ms.ClusterID = cred.ClusterID
	}
	if lease, err := getLease(ctx, m.Client, v1alpha1.SystemNamespace, v1alpha1.GatewayLeaseName); err != nil {
		errs = append(errs, err)
	} else {
		ms.GatewayLease = lease
	}
	imports := &mcsv1beta1.ServiceImportList{}
	if err := m.Client.List(ctx, imports, client.MatchingLabels{kube.ManagedByLabel: kube.FieldManager}); err != nil {
		errs = append(errs, fmt.Errorf("listing ServiceImports: %w", err))
	} else {
		ms.Imports = imports.Items
	}
	if err := errors.Join(errs...); err != nil {
		ms.Error = err.Error()
	}
	return ms
}

// getLease returns the Lease, or nil when there is none.
func getLease(ctx context.Context, c client.Reader, namespace, name string) (*coordinationv1.Lease, error) {
	lease := &coordinationv1.Lease{}
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, lease)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Lease %s/%s: %w", namespace, name, err)
	}
	return lease, nil
}
