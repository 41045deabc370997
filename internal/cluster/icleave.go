package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/progress"
	"github.com/octopus-mcs/octopus/internal/secondarynet/icconfig"
)

// LeaveInterconnect takes an interconnected cluster's AZ out of OVN interconnection, the first
// step of leave: ovn-ic never removes an AZ, so without it the cluster would stay in the IC SB
// and in every other AZ's learned routes. It turns the cluster's ovn-ic-config's enable-ic off
// and waits (up to timeout) for the icmaster to report that the AZ left (ovnic.Leave: its NB
// rows, then its IC SB AZ with its routes, port bindings and gateways), then deletes the
// ConfigMap if join wrote it. No ovn-ic-config, or one not enabled, leaves nothing to do.
// The icmaster does the work because only it reaches the cluster's NB and holds the cluster's
// IC certificate; the namespace it runs in must therefore still be there.
func LeaveInterconnect(ctx context.Context, mc client.Client, clusterID string, timeout time.Duration, p *progress.Reporter) error {
	key := client.ObjectKey{Namespace: icconfig.ConfigMapNamespace, Name: icconfig.ConfigMapName}
	cm := &corev1.ConfigMap{}
	if err := mc.Get(ctx, key, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading %s: %w", key, err)
	}
	cfg, err := icconfig.Parse(cm.Data)
	if err == nil && cfg.Enabled {
		patched := cm.DeepCopy()
		patched.Data[icconfig.KeyEnable] = "false"
		if err := mc.Patch(ctx, patched, client.MergeFrom(cm)); err != nil {
			return fmt.Errorf("turning %s off in %s: %w", icconfig.KeyEnable, key, err)
		}
		p.Step("Taking AZ %s out of the OVN interconnection (%s %s=false)", clusterID, key, icconfig.KeyEnable)
		left := icconfig.LeftStatus(clusterID)
		var last string
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			got := &corev1.ConfigMap{}
			if err := mc.Get(ctx, key, got); err != nil {
				return false, nil //nolint:nilerr // a transient read error: poll again
			}
			last = got.Annotations[icconfig.StatusAnnotation]
			return strings.HasSuffix(last, left), nil
		})
		if err != nil {
			return fmt.Errorf("waiting %s for the icmaster to take AZ %s out of the interconnection (its last status: %q; kubectl -n octopus-system logs deploy/octopus-ovn-ic -c icmaster): %w; run leave again once it can",
				timeout, clusterID, last, err)
		}
		p.Step("AZ %s left the interconnection: the other AZs dropped its routes", clusterID)
	}
	if cm.Labels[kube.ManagedByLabel] != kube.FieldManager {
		return nil // the user's own ovn-ic-config (Kube-OVN's): left in place, now disabled
	}
	if err := mc.Delete(ctx, cm); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting %s: %w", key, err)
	}
	return nil
}
