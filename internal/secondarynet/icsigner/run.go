package icsigner

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/pki"
)

// Options configure Run.
type Options struct {
	// Hub is the hub's client configuration, the signer's own ServiceAccount (required).
	Hub *rest.Config
	// Namespace is the hub namespace the requests are in (required).
	Namespace string
	// CA is the interconnection CA (render.ICCASecret), which signs (required).
	CA *pki.CA
	// HealthProbeBindAddress and MetricsBindAddress: "0" or "" turns them off.
	HealthProbeBindAddress, MetricsBindAddress string
	Log                                        logr.Logger
}

// Run signs requests until ctx is cancelled. One replica is enough and two are harmless: each
// write carries the resourceVersion it read, so a request is signed once.
func Run(ctx context.Context, o Options) error {
	if o.Hub == nil || o.Namespace == "" || o.CA == nil {
		return errors.New("ic-signer: the hub's configuration, its namespace and the CA are required")
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	requests, err := labels.NewRequirement(v1alpha1.InterconnectCSRLabel, selection.Exists, nil)
	if err != nil {
		return fmt.Errorf("ic-signer: %w", err)
	}
	mgr, err := manager.New(o.Hub, manager.Options{
		Scheme: kube.Scheme,
		Cache: cache.Options{
			DefaultTransform: cache.TransformStripManagedFields(),
			// Only the requests: the role may read no other ConfigMap (the CIDR claims are
			// the clusters').
			ByObject: map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {
				Namespaces: map[string]cache.Config{o.Namespace: {}},
				Label:      labels.NewSelector().Add(*requests),
			}},
		},
		Metrics:                metricsserver.Options{BindAddress: kube.MetricsBindAddress(o.MetricsBindAddress)},
		HealthProbeBindAddress: o.HealthProbeBindAddress,
		Logger:                 o.Log,
	})
	if err != nil {
		return fmt.Errorf("creating the ic-signer's manager: %w", err)
	}
	if err := kube.AddPingProbes(mgr, o.HealthProbeBindAddress); err != nil {
		return err
	}
	r := &Reconciler{Client: mgr.GetClient(), CA: o.CA, Log: o.Log}
	err = builder.ControllerManagedBy(mgr).Named("ic-signer").For(&corev1.ConfigMap{}).
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("creating the ic-signer controller: %w", err)
	}
	return mgr.Start(ctx)
}
