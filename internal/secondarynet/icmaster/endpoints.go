package icmaster

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/octopus-mcs/octopus/internal/datapath/ovnic"
	"github.com/octopus-mcs/octopus/internal/secondarynet/icconfig"
)

// EndpointsWriter writes the IC endpoints of the ovn-ic-config ConfigMap (ic-db-host,
// ic-nb-port, ic-sb-port) to the endpoints file of its pod, which the ovn-ic container's
// supervisor follows (ovnic.Supervisor): ovn-ic takes its IC databases only on its command
// line, and its pod cannot mount a ConfigMap of kube-system.
//
// It runs on every replica, not only the leader: each replica's ovn-ic must follow, the
// standby's too, or a failover would bring back the old endpoints. A configuration the
// Reconciler refuses (a bad key, a foreign az-name) is not written either, so ovn-ic never
// follows what the AZ itself does not; nor is one without ic-db-host. The file is left as it
// is then, and when the ConfigMap is deleted: ovn-ic keeps its last good endpoints.
type EndpointsWriter struct {
	Client    client.Client
	ConfigMap types.NamespacedName
	ClusterID string
	// File is the endpoints file (icconfig.EndpointsFile of the pod's shared directory).
	File string
	Log  logr.Logger
}

// Reconcile writes the ConfigMap's endpoints if they differ from the file's.
func (w *EndpointsWriter) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	var cm corev1.ConfigMap
	if err := w.Client.Get(ctx, w.ConfigMap, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			w.Log.V(1).Info("No interconnection configuration; IC endpoints file left as it is", "configMap", w.ConfigMap, "file", w.File)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("reading %s: %w", w.ConfigMap, err)
	}
	cfg, err := icconfig.Parse(cm.Data)
	if err == nil {
		err = cfg.CheckAZName(w.ClusterID)
	}
	if err != nil {
		// The Reconciler reports it on the ConfigMap; the next change brings a new request.
		w.Log.Info("IC endpoints file left as it is: the configuration is refused", "configMap", w.ConfigMap, "reason", err.Error())
		return reconcile.Result{}, nil
	}
	if len(cfg.DBHosts) == 0 {
		w.Log.V(1).Info("IC endpoints file left as it is: no "+icconfig.KeyDBHost, "configMap", w.ConfigMap)
		return reconcile.Result{}, nil
	}
	e := ovnic.Endpoints{NB: cfg.ICNB(), SB: cfg.ICSB()}
	changed, err := ovnic.WriteEndpointsFile(w.File, e)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("writing the IC endpoints of %s: %w", w.ConfigMap, err)
	}
	if changed {
		w.Log.Info("Wrote the IC endpoints for ovn-ic", "file", w.File, "icNB", e.NB, "icSB", e.SB)
	}
	return reconcile.Result{}, nil
}
