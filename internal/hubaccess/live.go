package hubaccess

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// Live is the cluster's hub credential as a running component holds it: its token expires and
// is replaced while the component runs, and every client built from RESTConfig sends the
// current token, so nothing restarts when it changes. The agent's controller renews it
// (Renew); the other components follow the member Secret (Follow).
type Live struct {
	mu   sync.RWMutex
	cred Credential
}

// NewLive holds cred, the credential read from the member Secret.
func NewLive(cred Credential) *Live { return &Live{cred: cred} }

// Credential returns the credential with the current token.
func (l *Live) Credential() Credential {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.cred
}

// Token implements oauth2.TokenSource for client-go's transport, which asks for it on every
// request.
func (l *Live) Token() (*oauth2.Token, error) {
	return &oauth2.Token{AccessToken: l.Credential().Token, TokenType: "Bearer"}, nil
}

func (l *Live) setToken(token string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cred.Token = token
}

// RESTConfig returns a client configuration of the hub that authenticates with the current
// token on every request.
func (l *Live) RESTConfig() *rest.Config {
	cfg := l.Credential().RESTConfig()
	cfg.BearerToken = ""
	cfg.Wrap(transport.TokenSourceWrapTransport(l))
	return cfg
}

// TokenTimes returns when a ServiceAccount token was issued and when it expires, from its JWT
// claims, unverified: the hub verifies the token, these only decide when to renew it. A token
// without an expiry (a legacy Secret-based one) has a zero expires.
func TokenTimes(token string) (issued, expires time.Time, err error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, time.Time{}, errors.New("the hub token is not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("decoding the hub token's claims: %w", err)
	}
	var claims struct {
		IssuedAt  int64 `json:"iat"`
		ExpiresAt int64 `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("decoding the hub token's claims: %w", err)
	}
	if claims.ExpiresAt != 0 {
		expires = time.Unix(claims.ExpiresAt, 0)
	}
	return time.Unix(claims.IssuedAt, 0), expires, nil
}

// Renewal defaults.
const (
	// DefaultRenewFraction of a token's lifetime passes before it is renewed: the kubelet's
	// choice for projected ServiceAccount tokens, leaving a fifth of the lifetime (almost five
	// hours of a day-long token) to retry in while the hub is down.
	DefaultRenewFraction = 0.8
	// renewRetryMin and renewRetryMax bound the backoff after a failed renewal.
	renewRetryMin = 5 * time.Second
	renewRetryMax = time.Minute
	// DefaultFollowInterval is how often Follow re-reads the member Secret: client-go's
	// period for re-reading a token file, far shorter than what is left of a token when
	// it is renewed.
	DefaultFollowInterval = time.Minute
)

// ErrCredentialRejected means the hub no longer accepts the cluster's credential: it was
// revoked (its ServiceAccount deleted on the hub) or it expired before it could be renewed.
var ErrCredentialRejected = errors.New("the hub rejects this cluster's credential")

// RenewOptions configure Renew.
type RenewOptions struct {
	// Member is the member cluster, where the renewed token is stored. Required.
	Member client.Client
	// Fraction of a token's lifetime after which it is renewed, in (0, 1). Optional,
	// DefaultRenewFraction; tests use a tiny one to renew at once.
	Fraction float64
}

// Renew keeps the credential valid until ctx is done: once Fraction of the current token's
// lifetime has passed, it requests a new token of the cluster's own ServiceAccount with the
// current one, of the same lifetime, stores it in the member Secret (for the other components
// and the next start) and switches the clients to it. Failures are retried with backoff and
// logged; it returns only when ctx is done.
func (l *Live) Renew(ctx context.Context, o RenewOptions) error {
	log := logf.FromContext(ctx)
	if o.Fraction <= 0 || o.Fraction >= 1 {
		o.Fraction = DefaultRenewFraction
	}
	delay := renewRetryMin
	for {
		issued, expires, err := TokenTimes(l.Credential().Token)
		if err != nil {
			return err
		}
		if expires.IsZero() {
			log.Info("The hub token does not expire; not renewing it")
			<-ctx.Done()
			return nil
		}
		at := issued.Add(time.Duration(o.Fraction * float64(expires.Sub(issued))))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(at)):
		}
		next, err := l.RenewNow(ctx, o.Member)
		if err != nil {
			if ctx.Err() != nil {
				return nil //nolint:nilerr // a renewal cut short by shutdown is not a failure
			}
			log.Error(err, "Renewing the hub credential failed; retrying", "expires", expires, "retryIn", delay.String())
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(delay):
			}
			delay = min(2*delay, renewRetryMax)
			continue
		}
		delay = renewRetryMin
		log.Info("Renewed the hub credential", "clusterID", l.Credential().ClusterID, "expires", next)
	}
}

// RenewNow requests a new token as Renew does, at once, and returns its expiry.
func (l *Live) RenewNow(ctx context.Context, member client.Client) (time.Time, error) {
	cred := l.Credential()
	issued, expires, err := TokenTimes(cred.Token)
	if err != nil {
		return time.Time{}, err
	}
	lifetime := expires.Sub(issued)
	cs, err := kubernetes.NewForConfig(l.RESTConfig())
	if err != nil {
		return time.Time{}, fmt.Errorf("creating a client of the hub %s: %w", cred.Server, err)
	}
	sa := v1alpha1.ClusterServiceAccount(cred.ClusterID)
	tr, err := cs.CoreV1().ServiceAccounts(cred.Namespace).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(lifetime / time.Second))}}, metav1.CreateOptions{})
	switch {
	case apierrors.IsUnauthorized(err):
		return time.Time{}, fmt.Errorf("%w: cluster %s's token (expiring %s) was refused by %s: the cluster was revoked on the hub (its ServiceAccount %s/%s deleted) or the token expired; run `octopus leave` and `octopus join` again: %w",
			ErrCredentialRejected, cred.ClusterID, expires.Format(time.RFC3339), cred.Server, cred.Namespace, sa, err)
	case apierrors.IsForbidden(err):
		return time.Time{}, fmt.Errorf("%w: cluster %s may not renew its token at %s (its RoleBinding %s/%s was removed?): %w",
			ErrCredentialRejected, cred.ClusterID, cred.Server, cred.Namespace, sa, err)
	case err != nil:
		return time.Time{}, fmt.Errorf("requesting a new token of ServiceAccount %s/%s from %s: %w", cred.Namespace, sa, cred.Server, err)
	}
	if err := storeToken(ctx, member, tr.Status.Token); err != nil {
		return time.Time{}, err
	}
	l.setToken(tr.Status.Token)
	return tr.Status.ExpirationTimestamp.Time, nil
}

// storeToken needs update on the Secret: only the agent's controller renews, so its marker is
// in internal/agent, not here where every component that reads the credential would get it.

// storeToken replaces the token in the member Secret, keeping the rest of the credential.
func storeToken(ctx context.Context, member client.Client, token string) error {
	s := &corev1.Secret{}
	key := client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.CredentialSecretName}
	if err := member.Get(ctx, key, s); err != nil {
		return fmt.Errorf("reading the hub credential %s to store the renewed token: %w", key, err)
	}
	s.Data[credKeyToken] = []byte(token)
	if err := member.Update(ctx, s); err != nil {
		return fmt.Errorf("storing the renewed hub token in %s: %w", key, err)
	}
	return nil
}

// Follow takes the token from the member Secret whenever the renewer there has replaced it,
// re-reading it every interval (DefaultFollowInterval when zero) until ctx is done. A Secret
// for another cluster or hub is ignored: only leave and join replace those, and a component
// holding one restarts.
func (l *Live) Follow(ctx context.Context, member client.Reader, interval time.Duration) {
	log := logf.FromContext(ctx)
	if interval <= 0 {
		interval = DefaultFollowInterval
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		stored, err := LoadCredential(ctx, member)
		cur := l.Credential()
		switch {
		case err != nil:
			log.Info("Could not re-read the hub credential; keeping the current token", "reason", err.Error())
		case stored.ClusterID != cur.ClusterID || stored.Server != cur.Server || stored.Namespace != cur.Namespace:
			log.Info("The hub credential in the cluster is now for another cluster or hub; keeping the current token", "clusterID", stored.ClusterID, "hub", stored.Server)
		case stored.Token != cur.Token:
			l.setToken(stored.Token)
			log.Info("Switched to the renewed hub token", "clusterID", cur.ClusterID)
		}
	}
}
