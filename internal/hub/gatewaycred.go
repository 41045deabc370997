package hub

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// GatewayConfig issues a token of the hub gateway's ServiceAccount (made by Deploy) with
// the TokenRequest API and returns a client configuration of the hub that uses it: for running
// `octopus-agent gateway --hub` outside a Pod of the hub cluster (inside one, the Pod's own
// ServiceAccount token does this). admin must be allowed to create serviceaccounts/token in
// namespace. The token expires after ttl; the API server may shorten it.
func GatewayConfig(ctx context.Context, admin *rest.Config, namespace string, ttl time.Duration) (*rest.Config, error) {
	c, err := client.New(admin, client.Options{Scheme: kube.Scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the hub at %s: %w", admin.Host, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.HubGatewayServiceAccount, Namespace: namespace}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(ttl / time.Second))}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return nil, fmt.Errorf("issuing a token of ServiceAccount %s/%s: %w (has `octopus hub deploy` run?)", namespace, v1alpha1.HubGatewayServiceAccount, err)
	}
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = tr.Status.Token
	cfg.UserAgent = "octopus/hub-gateway"
	return cfg, nil
}
