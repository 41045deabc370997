package dashboard

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// TestCollect reads a hub and two members, one of which has not joined, and checks what
// the snapshot holds: the records with the cluster label only, the managed imports only, and
// the member's failure recorded rather than returned.
func TestCollect(t *testing.T) {
	ns := v1alpha1.DefaultHubNamespace
	foreign := mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "someone-elses"}}
	webRecord := record("east", "shop", "web")
	hub := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(
		&v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "east"}, Spec: v1alpha1.ClusterSpec{ClusterID: "east"}},
		&v1alpha1.Peer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "east"}, Spec: v1alpha1.PeerSpec{ClusterID: "east", Hostname: "east-gw"}},
		&webRecord, &foreign,
	).Build()
	managed := imported("shop", "web")
	managed.Labels = map[string]string{kube.ManagedByLabel: kube.FieldManager}
	usersOwn := imported("shop", "mine")
	gwLease := lease("east-gw", now)
	gwLease.Namespace, gwLease.Name = v1alpha1.SystemNamespace, v1alpha1.GatewayLeaseName
	cred := hubaccess.Credential{ClusterID: "east", Server: "https://hub:6443", Namespace: ns, Token: "t"}
	east := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(cred.Secret(), gwLease, &managed, &usersOwn).Build()
	notJoined := fake.NewClientBuilder().WithScheme(kube.Scheme).Build()

	c := &Collector{Hub: hub, HubNamespace: ns, Now: func() time.Time { return now },
		Members: []Member{{Source: "east.yaml", Client: east}, {Source: "west.yaml", Client: notJoined}}}
	s := c.Collect(context.Background())
	if s.HubError != "" || len(s.Statuses) != 1 || len(s.Clusters) != 1 || len(s.Peers) != 1 || s.HubGatewayLease != nil {
		t.Fatalf("hub part %+v", s)
	}
	if len(s.Records) != 1 || s.Records[0].Name != webRecord.Name {
		t.Errorf("records %v, want only %s", s.Records, webRecord.Name)
	}
	m := s.Members[0]
	if m.ClusterID != "east" || m.Error != "" || m.GatewayLease == nil || len(m.Imports) != 1 || m.Imports[0].Name != "web" {
		t.Errorf("east %+v", m)
	}
	if w := s.Members[1]; w.ClusterID != "" || !strings.Contains(w.Error, "has not joined a hub") || w.Source != "west.yaml" {
		t.Errorf("west %+v", w)
	}
	v := BuildView(s)
	if got := ids(v); !cmp.Equal(got, []string{"east", "west.yaml"}) {
		t.Errorf("clusters %v", got)
	}

	// The hub failing one read: the error is in the snapshot, the members are still read.
	c.Hub = fake.NewClientBuilder().WithScheme(kube.Scheme).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*v1alpha1.PeerList); ok {
				return errors.New("forbidden")
			}
			return cl.List(ctx, list, opts...)
		},
	}).Build()
	s = c.Collect(context.Background())
	if !strings.Contains(s.HubError, "listing Peers on the hub: forbidden") || s.Members[0].ClusterID != "east" {
		t.Errorf("hub error %q, east %+v", s.HubError, s.Members[0])
	}
}
