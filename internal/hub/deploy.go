// Package hub turns a Kubernetes API server into the Octopus hub and describes how clusters
// reach it: Deploy applies the hub's objects (rendered by internal/manifests/render) and returns the
// broker-info that lets clusters join. It is provisioning code: the daemons never link it.
package hub

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/manifests/render"
	"github.com/octopus-mcs/octopus/internal/progress"
)

// DeployOptions configure Deploy.
type DeployOptions struct {
	// Namespace holds the hub's shared state. Optional, default octopus-hub.
	Namespace string
	// HubURL is the address clusters use to reach the hub. Optional: default is the server
	// of the admin kubeconfig, which is wrong when that address is only reachable locally.
	HubURL string
	// Globalnet and Secondary are the per-cluster address pools. Optional,
	// DefaultGlobalnetPool and DefaultSecondaryPool.
	Globalnet, Secondary PoolConfig
	// Progress receives one line per step. Optional.
	Progress *progress.Reporter
	// Interconnect, when set, puts OVN-IC's interconnection databases on the hub. Optional.
	Interconnect *InterconnectOptions
	// TokenTimeout bounds the wait for kube-controller-manager to issue the join token.
	// Optional, default 60s.
	TokenTimeout time.Duration
}

func (o *DeployOptions) defaults() {
	if o.Namespace == "" {
		o.Namespace = v1alpha1.DefaultHubNamespace
	}
	if o.Globalnet == (PoolConfig{}) {
		o.Globalnet = DefaultGlobalnetPool
	}
	if o.Secondary == (PoolConfig{}) {
		o.Secondary = DefaultSecondaryPool
	}
	if o.TokenTimeout == 0 {
		o.TokenTimeout = 60 * time.Second
	}
}

// Deploy makes the API server behind cfg the hub, applying render.Hub's objects in order, and
// returns the broker-info that lets clusters join it. Every write is a server-side apply, so
// running it again changes nothing.
func Deploy(ctx context.Context, cfg *rest.Config, opts DeployOptions) (*BrokerInfo, error) {
	opts.defaults()
	p := opts.Progress
	info := &BrokerInfo{
		Version: BrokerInfoVersion, Namespace: opts.Namespace,
		Globalnet: opts.Globalnet, Secondary: opts.Secondary,
	}
	var err error
	if info.HubURL, err = hubURL(cfg, opts.HubURL); err != nil {
		return nil, err
	}
	if info.CAData, err = caData(cfg); err != nil {
		return nil, err
	}
	if _, err := opts.Globalnet.Pool(); err != nil {
		return nil, fmt.Errorf("globalnet pool: %w", err)
	}
	if _, err := opts.Secondary.Pool(); err != nil {
		return nil, fmt.Errorf("secondary pool: %w", err)
	}

	if opts.Interconnect != nil {
		if err := opts.Interconnect.validate(); err != nil {
			return nil, err
		}
	}
	objs, err := render.Hub(render.HubOptions{Namespace: opts.Namespace})
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the hub at %s: %w", cfg.Host, err)
	}

	start := time.Now()
	p.Step("Deploying the hub into namespace %s at %s", opts.Namespace, info.HubURL)
	if err := kube.Apply(ctx, c, objs.Namespace); err != nil {
		return nil, fmt.Errorf("%w (is %s reachable with this kubeconfig, and does it grant cluster-admin?)", err, cfg.Host)
	}
	if err := InstallCRDs(ctx, c, objs.CRDs); err != nil {
		return nil, err
	}
	p.Done(start, "CRDs installed and established")

	if err := kube.Apply(ctx, c, objs.Objects...); err != nil {
		return nil, err
	}
	p.Done(start, "Admission policies %s and %s, RBAC and join identity applied", render.OwnershipPolicyName, render.JoinPolicyName)

	if opts.Interconnect != nil {
		if err := deployInterconnect(ctx, cfg, c, opts.Namespace, *opts.Interconnect, p); err != nil {
			return nil, err
		}
		p.Done(start, "Interconnection databases (IC NB and IC SB, %d-member raft clusters on TLS) applied", render.ICDBReplicas)
	}

	if info.JoinToken, err = WaitForToken(ctx, c, opts.Namespace, render.JoinTokenSecret, opts.TokenTimeout); err != nil {
		return nil, err
	}
	p.Done(start, "Join credential issued")
	return info, nil
}

// InstallCRDs applies CRDs and waits until the API server serves them. A CRD that exists
// without Octopus's managed-by label belongs to another tool (ClusterProperty, say): it is used
// as it is, never taken over, so that leaving does not delete it.
func InstallCRDs(ctx context.Context, c client.Client, crds []*apiextensionsv1.CustomResourceDefinition) error {
	for _, def := range crds {
		existing := &apiextensionsv1.CustomResourceDefinition{}
		err := c.Get(ctx, client.ObjectKeyFromObject(def), existing)
		if err == nil && existing.Labels[kube.ManagedByLabel] != kube.FieldManager {
			continue
		}
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("reading CRD %s: %w", def.Name, err)
		}
		// Keep the labels a CRD ships with: the MCS CRDs carry their release version.
		if def.Labels == nil {
			def.Labels = map[string]string{}
		}
		def.Labels[kube.ManagedByLabel] = kube.FieldManager
		if err := kube.Apply(ctx, c, def); err != nil {
			return err
		}
	}
	for _, def := range crds {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			got := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(def), got); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("waiting for CRD %s to be established: %w", def.Name, err)
		}
		// Established is not yet served: the API server's discovery follows a moment later,
		// and until it does, this client cannot map the kind (a create fails with "no matches
		// for kind").
		gk := schema.GroupKind{Group: def.Spec.Group, Kind: def.Spec.Names.Kind}
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			_, err := c.RESTMapper().RESTMapping(gk)
			return err == nil, nil
		})
		if err != nil {
			return fmt.Errorf("waiting for the API server to serve %s: %w", gk, err)
		}
	}
	return nil
}

// WaitForToken waits until kube-controller-manager has put a token into a
// kubernetes.io/service-account-token Secret and returns it.
func WaitForToken(ctx context.Context, c client.Reader, namespace, name string, timeout time.Duration) (string, error) {
	var token string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		s := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		token = string(s.Data[corev1.ServiceAccountTokenKey])
		return token != "", nil
	})
	if err != nil {
		return "", fmt.Errorf("waiting for the ServiceAccount token in secret %s/%s: %w (the token is issued by kube-controller-manager; is it running on this API server?)", namespace, name, err)
	}
	return token, nil
}

func hubURL(cfg *rest.Config, override string) (string, error) {
	raw := cfg.Host
	if override != "" {
		raw = override
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		// rest.Config allows a bare host:port.
		u, err = url.Parse("https://" + raw)
	}
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("hub URL %q is not a URL; pass --hub-url https://HOST:PORT", raw)
	}
	if u.Scheme != "https" {
		return "", fmt.Errorf("hub URL %q must use https; pass --hub-url https://HOST:PORT", raw)
	}
	return u.String(), nil
}

func caData(cfg *rest.Config) ([]byte, error) {
	if len(cfg.CAData) > 0 {
		return cfg.CAData, nil
	}
	if cfg.CAFile != "" {
		data, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading the hub CA from the kubeconfig: %w", err)
		}
		return data, nil
	}
	return nil, errors.New("the hub kubeconfig has no certificate-authority; clusters could not verify the hub. Use a kubeconfig with certificate-authority-data")
}
