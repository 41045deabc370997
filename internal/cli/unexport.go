package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

type unexportOptions struct {
	IOStreams
	svc    serviceFlags
	output outputFormat
}

func newUnexportCommand(streams IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "unexport", Short: "Stop exporting a resource to the cluster set"}
	cmd.AddCommand(newUnexportServiceCommand(streams))
	return cmd
}

func newUnexportServiceCommand(streams IOStreams) *cobra.Command {
	o := &unexportOptions{IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "service NAME",
		Short: "Stop exporting a Service: delete its ServiceExport",
		Long: `Deletes the ServiceExport NAME. The cluster's agent then withdraws the service's endpoints
from the hub, and other clusters drop them (and the ServiceImport, if no other cluster exports
the service). The Service itself is left alone.

  octopus unexport service web -n shop --kubeconfig east.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: runE(o),
	}
	o.svc.addFlags(cmd.Flags())
	o.output.addFlag(cmd.Flags())
	return cmd
}

func (o *unexportOptions) Complete(args []string) error { return o.svc.complete(args) }

func (o *unexportOptions) Validate() error {
	if err := o.output.validate(); err != nil {
		return err
	}
	return nil
}

func (o *unexportOptions) Run(ctx context.Context) error {
	c, err := o.svc.client()
	if err != nil {
		return err
	}
	key := o.svc.namespace + "/" + o.svc.name
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: o.svc.namespace, Name: o.svc.name}}
	if err := c.Delete(ctx, se); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("service %s is not exported: no ServiceExport %s (see `octopus show services`)", key, key)
		}
		return fmt.Errorf("deleting ServiceExport %s: %w", key, err)
	}
	if o.output == outputJSON {
		return json.NewEncoder(o.Out).Encode(map[string]any{"namespace": o.svc.namespace, "name": o.svc.name, "deleted": true})
	}
	_, err = fmt.Fprintf(o.Out, "Deleted ServiceExport %s: its endpoints are withdrawn from the cluster set.\n", key)
	return err
}
