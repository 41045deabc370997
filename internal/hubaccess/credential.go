// Package hubaccess is a component's access to the hub: the cluster's own Credential, stored
// by join in the member cluster's Secret v1alpha1.CredentialSecretName, and the one loop
// (WaitForCredential) with which the controller and the gateway wait for it. The daemons link
// it; join writes the Secret with Credential.Secret, so the format lives in one place.
package hubaccess

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// Keys of the credential Secret.
const (
	credKeyClusterID = "clusterID"
	credKeyServer    = "server"
	credKeyNamespace = "namespace"
	credKeyCA        = "ca.crt"
	credKeyToken     = "token"
)

// ErrNotJoined means the member cluster has no hub credential.
var ErrNotJoined = errors.New("this cluster has not joined a hub; run `octopus join BROKER-INFO --cluster-id ID` first")

// Credential is one cluster's access to the hub. It can only write hub objects labelled with
// ClusterID; the hub's admission policy enforces that.
type Credential struct {
	ClusterID string
	Server    string
	Namespace string
	CAData    []byte
	Token     string
}

// RESTConfig returns a client configuration for the hub that authenticates as the cluster.
func (c Credential) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            c.Server,
		BearerToken:     c.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CAData},
		UserAgent:       "octopus/" + c.ClusterID,
	}
}

// Secret renders the credential as the Secret stored in the member cluster.
func (c Credential) Secret() *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.CredentialSecretName, Namespace: v1alpha1.SystemNamespace},
		Type:       corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			credKeyClusterID: []byte(c.ClusterID),
			credKeyServer:    []byte(c.Server),
			credKeyNamespace: []byte(c.Namespace),
			credKeyCA:        c.CAData,
			credKeyToken:     []byte(c.Token),
		},
	}
}

// CredentialFromSecret parses the Secret written by Secret.
func CredentialFromSecret(s *corev1.Secret) (Credential, error) {
	c := Credential{
		ClusterID: string(s.Data[credKeyClusterID]),
		Server:    string(s.Data[credKeyServer]),
		Namespace: string(s.Data[credKeyNamespace]),
		CAData:    s.Data[credKeyCA],
		Token:     string(s.Data[credKeyToken]),
	}
	for key, v := range map[string]string{credKeyClusterID: c.ClusterID, credKeyServer: c.Server, credKeyNamespace: c.Namespace, credKeyToken: c.Token} {
		if v == "" {
			return Credential{}, fmt.Errorf("secret %s/%s has no %q: re-run `octopus join`", s.Namespace, s.Name, key)
		}
	}
	return c, nil
}

// The components that load the credential need this one Secret of their cluster:
// +kubebuilder:rbac:groups="",namespace=octopus-system,resources=secrets,resourceNames=octopus-hub,verbs=get

// LoadCredential reads the cluster's hub credential from the member cluster.
func LoadCredential(ctx context.Context, member client.Reader) (Credential, error) {
	s := &corev1.Secret{}
	err := member.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.CredentialSecretName}, s)
	if apierrors.IsNotFound(err) {
		return Credential{}, ErrNotJoined
	}
	if err != nil {
		return Credential{}, fmt.Errorf("reading the hub credential %s/%s: %w", v1alpha1.SystemNamespace, v1alpha1.CredentialSecretName, err)
	}
	return CredentialFromSecret(s)
}
