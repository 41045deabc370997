package hubaccess

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

var testCred = Credential{ClusterID: "east", Server: "https://hub.example:6443", Namespace: "octopus-hub", CAData: []byte("ca"), Token: "t"}

func TestCredentialSecretRoundTrip(t *testing.T) {
	s := testCred.Secret()
	if s.Namespace != v1alpha1.SystemNamespace || s.Name != v1alpha1.CredentialSecretName {
		t.Fatalf("Secret %s/%s, want %s/%s", s.Namespace, s.Name, v1alpha1.SystemNamespace, v1alpha1.CredentialSecretName)
	}
	got, err := CredentialFromSecret(s)
	if err != nil || got.ClusterID != testCred.ClusterID || got.Server != testCred.Server || got.Namespace != testCred.Namespace ||
		string(got.CAData) != string(testCred.CAData) || got.Token != testCred.Token {
		t.Fatalf("CredentialFromSecret = %+v, %v; want %+v", got, err, testCred)
	}
	delete(s.Data, "token")
	if _, err := CredentialFromSecret(s); err == nil || !strings.Contains(err.Error(), `no "token"`) {
		t.Errorf("without a token: err = %v, want one naming the missing key", err)
	}
	cfg := testCred.RESTConfig()
	if cfg.Host != testCred.Server || cfg.BearerToken != testCred.Token || cfg.UserAgent != "octopus/east" {
		t.Errorf("RESTConfig = host %q, token %q, user agent %q", cfg.Host, cfg.BearerToken, cfg.UserAgent)
	}
}

func TestLoadCredential(t *testing.T) {
	empty := fake.NewClientBuilder().WithScheme(kube.Scheme).Build()
	if _, err := LoadCredential(t.Context(), empty); !errors.Is(err, ErrNotJoined) {
		t.Errorf("no Secret: err = %v, want ErrNotJoined", err)
	}
	joined := fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(testCred.Secret()).Build()
	if got, err := LoadCredential(t.Context(), joined); err != nil || got.ClusterID != "east" {
		t.Errorf("joined: %+v, %v", got, err)
	}
}

// TestWaitForCredential starts waiting before join has written the Secret: the wait logs why
// once (not once per poll), returns the credential once it appears, and says so.
func TestWaitForCredential(t *testing.T) {
	var gets sync.WaitGroup
	gets.Add(3)
	var calls int
	var mu sync.Mutex
	c := fake.NewClientBuilder().WithScheme(kube.Scheme).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			mu.Lock()
			calls++
			if calls <= 3 {
				gets.Done()
			}
			mu.Unlock()
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	var logs testenv.Logs
	ctx := logr.NewContext(t.Context(), logs.Logger())
	type result struct {
		cred Credential
		err  error
	}
	done := make(chan result, 1)
	go func() {
		cred, err := WaitForCredential(ctx, c, 10*time.Millisecond)
		done <- result{cred, err}
	}()
	gets.Wait() // three polls without the Secret
	if err := c.Create(t.Context(), testCred.Secret()); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.cred.ClusterID != "east" || r.cred.Token != "t" {
			t.Fatalf("WaitForCredential = %+v, %v", r.cred, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitForCredential did not return 10s after the Secret appeared")
	}
	if n := len(logs.Matching("Waiting for the hub credential")); n != 1 {
		t.Errorf("logged the wait %d times over 3+ polls with the same reason, want once", n)
	}
	if n := len(logs.Matching("Loaded the hub credential")); n != 1 {
		t.Errorf("logged the credential loaded %d times, want once", n)
	}
}

func TestWaitForCredentialEndsWithContext(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(kube.Scheme).Build()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := WaitForCredential(ctx, c, time.Hour)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	// The Secret of another namespace or name is not the credential.
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: v1alpha1.CredentialSecretName}}
	c = fake.NewClientBuilder().WithScheme(kube.Scheme).WithObjects(other).Build()
	if _, err := LoadCredential(t.Context(), c); !errors.Is(err, ErrNotJoined) {
		t.Errorf("a Secret outside %s: err = %v, want ErrNotJoined", v1alpha1.SystemNamespace, err)
	}
}
