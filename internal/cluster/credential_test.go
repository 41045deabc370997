package cluster

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
)

// credentialID is the hub's ID of the token cfg authenticates with (its JTI), which tells
// which of a cluster's tokens a client sent.
func credentialID(ctx context.Context, cfg *rest.Config) (string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	ids := r.Status.UserInfo.Extra["authentication.kubernetes.io/credential-id"]
	if len(ids) != 1 {
		return "", errors.New("the hub reports no credential ID")
	}
	return ids[0], nil
}

// TestCredentialRenewalWithoutOutage renews a cluster's token while a client built from the
// live credential keeps calling the hub: every call succeeds, the client switches to each new
// token, the new token is stored in the member Secret, and a component following that Secret
// (as the gateway does) switches too.
func TestCredentialRenewalWithoutOutage(t *testing.T) {
	f := newFabric(t, "east")
	east := f.join(t, "east")
	member := newClient(t, f.env.Cluster("east").RESTConfig())
	stored, err := hubaccess.LoadCredential(t.Context(), member)
	if err != nil || stored.Token != east.Credential.Token {
		t.Fatalf("the member Secret holds %v, %v; want join's credential", stored.Token != "", err)
	}
	first, err := credentialID(t.Context(), east.Credential.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}

	renewer := hubaccess.NewLive(stored)
	follower := hubaccess.NewLive(stored)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var callErrs []error
	var calls atomic.Int64
	// Renewal stops before the follower is checked, so that the token it must end up with is
	// the last one stored, not one the renewer replaced a moment ago.
	renewCtx, stopRenewing := context.WithCancel(ctx)
	renewed := make(chan struct{})
	wg.Add(2)
	go func() {
		defer close(renewed)
		// A day-long token renewed after this fraction of it: about once a second.
		if err := renewer.Renew(renewCtx, hubaccess.RenewOptions{Member: member, Fraction: 1e-5}); err != nil {
			t.Errorf("Renew: %v", err)
		}
	}()
	go func() {
		defer wg.Done()
		follower.Follow(ctx, member, 100*time.Millisecond)
	}()
	hc := newClient(t, renewer.RESTConfig())
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			calls.Add(1)
			if err := hc.List(ctx, &v1alpha1.ClusterList{}, client.InNamespace(f.info.Namespace)); err != nil && ctx.Err() == nil {
				callErrs = append(callErrs, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// Two renewals: the client's token changes twice, and each is the stored one. The hub calls
	// must span them, however slowly a loaded machine serves them.
	seen := map[string]bool{first: true}
	waitFor(t, "two renewals seen by the renewer's client, with ten hub calls made", func() bool {
		id, err := credentialID(t.Context(), renewer.RESTConfig())
		if err != nil {
			t.Fatalf("the renewer's client during renewal: %v", err)
		}
		seen[id] = true
		return len(seen) >= 3 && calls.Load() >= 10
	})
	stopRenewing()
	<-renewed
	var last hubaccess.Credential
	waitFor(t, "the follower to take the stored token", func() bool {
		if last, err = hubaccess.LoadCredential(t.Context(), member); err != nil {
			t.Fatal(err)
		}
		return last.Token != first && follower.Credential().Token == last.Token
	})
	lastID, err := credentialID(t.Context(), last.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	followerID, err := credentialID(t.Context(), follower.RESTConfig())
	if err != nil || followerID != lastID || followerID == first {
		t.Errorf("the follower's client uses credential %q (%v); want the last stored one, %q", followerID, err, lastID)
	}
	cancel()
	wg.Wait()
	if len(callErrs) > 0 {
		t.Errorf("%d of %d hub calls failed during renewal, the first: %v", len(callErrs), calls.Load(), callErrs[0])
	}
	issued, expires, err := hubaccess.TokenTimes(renewer.Credential().Token)
	if err != nil || expires.Sub(issued) != 24*time.Hour {
		t.Errorf("renewed token: issued %s, expires %s, %v; want the lifetime of the first", issued, expires, err)
	}
}

// TestRevokeOneCluster revokes west: east keeps working (hub writes and renewal), west's calls
// fail with 401 and its renewal says it was revoked, and west can enrol again with broker-info.
func TestRevokeOneCluster(t *testing.T) {
	f := newFabric(t, "east", "west")
	east, west := f.join(t, "east"), f.join(t, "west")
	ns := f.info.Namespace
	for _, id := range []string{"east", "west"} {
		as := f.as(t, map[string]*Joined{"east": east, "west": west}[id])
		if err := as.Create(t.Context(), testPeer(ns, id)); err != nil {
			t.Fatalf("%s publishing its Peer: %v", id, err)
		}
		gw := &v1alpha1.GatewayExIp{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.GatewayExIpHubName(id, "red"), Labels: map[string]string{v1alpha1.ClusterLabel: id}},
			Spec:       v1alpha1.GatewayExIPSpec{ExternalIP: "192.0.2.10", GlobalnetCIDR: "242.254.0.0/24"},
		}
		if err := as.Create(t.Context(), gw); err != nil {
			t.Fatalf("%s publishing its VPC gateway's GatewayExIp: %v", id, err)
		}
	}
	if err := hub.Revoke(t.Context(), f.hub, ns, "west"); err != nil {
		t.Fatal(err)
	}
	// What west published is gone, so that no gateway keeps a tunnel or route to it (a
	// gateway refuses a Peer without a Cluster); east's stays.
	for _, obj := range []client.Object{&v1alpha1.Cluster{}, &v1alpha1.Peer{}, &v1alpha1.GatewayExIp{}} {
		name := func(id string) string {
			if _, ok := obj.(*v1alpha1.GatewayExIp); ok {
				return v1alpha1.GatewayExIpHubName(id, "red")
			}
			return id
		}
		if err := f.hub.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name("west")}, obj); !apierrors.IsNotFound(err) {
			t.Errorf("west's %T after revocation: err = %v, want NotFound", obj, err)
		}
		if err := f.hub.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name("east")}, obj); err != nil {
			t.Errorf("east's %T after west's revocation: %v", obj, err)
		}
	}
	asWest := f.as(t, west)
	waitFor(t, "the hub to refuse west's credential", func() bool {
		err := asWest.List(t.Context(), &v1alpha1.ClusterList{}, client.InNamespace(ns))
		return apierrors.IsUnauthorized(err)
	})
	_, err := hubaccess.NewLive(west.Credential).RenewNow(t.Context(), newClient(t, f.env.Cluster("west").RESTConfig()))
	if !errors.Is(err, hubaccess.ErrCredentialRejected) || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("west renewing after revocation: err = %v, want ErrCredentialRejected saying it was revoked", err)
	}

	asEast := f.as(t, east)
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "east", Labels: map[string]string{v1alpha1.ClusterLabel: "east"}}}
	if err := asEast.Create(t.Context(), lease); err != nil {
		t.Errorf("east writing its Lease after west's revocation: %v", err)
	}
	if _, err := hubaccess.NewLive(east.Credential).RenewNow(t.Context(), newClient(t, f.env.Cluster("east").RESTConfig())); err != nil {
		t.Errorf("east renewing after west's revocation: %v", err)
	}

	// The ID is free again: the same member enrols afresh and gets a new credential.
	again := f.join(t, "west")
	if again.Credential.Token == west.Credential.Token {
		t.Error("re-joining after revocation returned the revoked token")
	}
	if err := f.as(t, again).List(t.Context(), &v1alpha1.ClusterList{}, client.InNamespace(ns)); err != nil {
		t.Errorf("west after re-joining: %v", err)
	}
}
