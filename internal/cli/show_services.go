package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

type showServicesOptions struct {
	IOStreams
	kube      kubeconfigFlags
	namespace string
	output    outputFormat
}

func newShowServicesCommand(streams IOStreams) *cobra.Command {
	o := &showServicesOptions{IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "services",
		Short: "List the multi-cluster services a cluster sees: imports, their clusters and endpoints, and its own exports",
		Long: `Reads one cluster (not the hub): its ServiceImports (type and the clusters that export each
service), the imported EndpointSlices (endpoints ready of total), and its ServiceExports (whether
the service is exported from here, and the Conflict condition's verdict).

  octopus show services --kubeconfig west.yaml
  octopus show services -n shop -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	o.kube.addFlags(cmd.Flags(), "cluster to look at")
	cmd.Flags().StringVarP(&o.namespace, "namespace", "n", "", "only this namespace (default: all namespaces)")
	o.output.addFlag(cmd.Flags())
	return cmd
}

func (o *showServicesOptions) Validate() error {
	if err := o.output.validate(); err != nil {
		return err
	}
	return nil
}

// serviceStatus is one row of `show services`, and its JSON form.
type serviceStatus struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Type is the import's type, empty while the service is not imported here.
	Type mcsv1beta1.ServiceImportType `json:"type,omitempty"`
	// Secondary is set for an import of a cluster on the secondary network: its endpoints are
	// the exporters' pods' net1 addresses, and a ClusterSetIP import has no virtual IP (DNS
	// answers with the endpoints; docs/architecture.md §6s).
	Secondary bool `json:"secondary,omitempty"`
	// Clusters export the service (the import's status.clusters).
	Clusters []string `json:"clusters"`
	// ReadyEndpoints and Endpoints count the imported endpoints of every cluster.
	ReadyEndpoints int `json:"readyEndpoints"`
	Endpoints      int `json:"endpoints"`
	// Export is this cluster's export of the service: its conditions; nil when not exported here.
	Export *localExport `json:"export,omitempty"`
}

type localExport struct {
	// State is Exported, Pending or the Valid condition's reason (NoService, …).
	State      string             `json:"state"`
	Conflict   *metav1.Condition  `json:"conflict,omitempty"`
	Conditions []metav1.Condition `json:"conditions"`
	// GlobalIPs are the global addresses of a globalnet cluster's export: the Service's, or
	// each ready pod's of a headless Service (docs/architecture.md §6h).
	GlobalIPs []globalIP `json:"globalIPs,omitempty"`
}

// globalIP is one GlobalIngressIP of an export.
type globalIP struct {
	// Kind is Service or Pod; Name names it.
	Kind string `json:"kind"`
	Name string `json:"name"`
	// IP is empty while none is allocated; Reason then says why (PoolExhausted).
	IP     string `json:"ip,omitempty"`
	Reason string `json:"reason,omitempty"`
}

func (o *showServicesOptions) Run(ctx context.Context) error {
	c, cfg, err := o.kube.client()
	if err != nil {
		return err
	}
	rows, err := collectServices(ctx, c, o.namespace)
	if meta.IsNoMatchError(err) {
		return fmt.Errorf("%s has no MCS API (ServiceExport/ServiceImport): join it with `octopus join BROKER-INFO --cluster-id ID`: %w", cfg.Host, err)
	}
	if err != nil {
		return err
	}
	if o.output == outputJSON {
		enc := json.NewEncoder(o.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	return renderServices(o.Out, rows)
}

// collectServices reads the multi-cluster services of one cluster, sorted by namespace and name.
func collectServices(ctx context.Context, c client.Reader, namespace string) ([]serviceStatus, error) {
	var opts []client.ListOption
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	imports := &mcsv1beta1.ServiceImportList{}
	if err := c.List(ctx, imports, opts...); err != nil {
		return nil, fmt.Errorf("listing ServiceImports: %w", err)
	}
	exports := &mcsv1beta1.ServiceExportList{}
	if err := c.List(ctx, exports, opts...); err != nil {
		return nil, fmt.Errorf("listing ServiceExports: %w", err)
	}
	// Imported slices carry the MCS labels; the cluster's own slices never do.
	sl := &discoveryv1.EndpointSliceList{}
	if err := c.List(ctx, sl, append(opts, client.HasLabels{mcsv1beta1.LabelServiceName, mcsv1beta1.LabelSourceCluster})...); err != nil {
		return nil, fmt.Errorf("listing imported EndpointSlices: %w", err)
	}

	rows := map[client.ObjectKey]*serviceStatus{}
	row := func(ns, name string) *serviceStatus {
		k := client.ObjectKey{Namespace: ns, Name: name}
		if rows[k] == nil {
			rows[k] = &serviceStatus{Namespace: ns, Name: name, Clusters: []string{}}
		}
		return rows[k]
	}
	for _, si := range imports.Items {
		r := row(si.Namespace, si.Name)
		r.Type = si.Spec.Type
		r.Secondary = si.Annotations[v1alpha1.AddressingAnnotation] == string(v1alpha1.AddressingSecondary)
		for _, cs := range si.Status.Clusters {
			r.Clusters = append(r.Clusters, cs.Cluster)
		}
	}
	for _, s := range sl.Items {
		r := row(s.Namespace, s.Labels[mcsv1beta1.LabelServiceName])
		for _, ep := range s.Endpoints {
			r.Endpoints++
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				r.ReadyEndpoints++ // nil means ready, as for any EndpointSlice consumer
			}
		}
	}
	for _, se := range exports.Items {
		row(se.Namespace, se.Name).Export = describeExport(&se)
	}
	// Only globalnet clusters have them; a cluster that joined before the kind existed has
	// no such kind at all.
	records := &v1alpha1.GlobalIngressIPList{}
	if err := c.List(ctx, records, opts...); err != nil && !meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("listing GlobalIngressIPs: %w", err)
	}
	for _, g := range records.Items {
		r := rows[client.ObjectKey{Namespace: g.Namespace, Name: g.Labels[mcsv1beta1.LabelServiceName]}]
		if r == nil || r.Export == nil {
			continue
		}
		gip := globalIP{Kind: string(g.Spec.Target.Kind), Name: g.Spec.Target.Name, IP: g.Status.IP}
		if c := meta.FindStatusCondition(g.Status.Conditions, v1alpha1.GlobalIngressIPConditionAllocated); gip.IP == "" && c != nil {
			gip.Reason = c.Reason
		}
		r.Export.GlobalIPs = append(r.Export.GlobalIPs, gip)
	}
	for _, r := range rows {
		if r.Export != nil {
			slices.SortFunc(r.Export.GlobalIPs, func(a, b globalIP) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name)) })
		}
	}
	out := make([]serviceStatus, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b serviceStatus) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

func describeExport(se *mcsv1beta1.ServiceExport) *localExport {
	e := &localExport{State: "Pending", Conditions: se.Status.Conditions}
	valid := meta.FindStatusCondition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionValid))
	ready := meta.FindStatusCondition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionReady))
	switch {
	case valid != nil && valid.Status == metav1.ConditionFalse:
		e.State = valid.Reason
	case ready != nil && ready.Status == metav1.ConditionTrue:
		e.State = "Exported"
	}
	if c := meta.FindStatusCondition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionConflict)); c != nil && c.Status == metav1.ConditionTrue {
		e.Conflict = c
	}
	return e
}

func renderServices(w io.Writer, rows []serviceStatus) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "No multi-cluster services: export one with `octopus export service NAME -n NAMESPACE`.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tTYPE\tCLUSTERS\tENDPOINTS READY\tEXPORTED HERE\tCONFLICTS\tGLOBAL IPS")
	exported, conflicts := 0, 0
	for _, r := range rows {
		typ, clusters, here, conflict := string(r.Type), strings.Join(r.Clusters, ","), "-", "-"
		if typ == "" {
			typ = "-"
		} else if r.Secondary {
			typ += "/net1"
		}
		if clusters == "" {
			clusters = "-"
		}
		if r.Export != nil {
			here = r.Export.State
			if here == "Exported" {
				exported++
			}
			if r.Export.Conflict != nil {
				conflict = r.Export.Conflict.Reason
				conflicts++
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", r.Namespace, r.Name, typ, clusters, r.ReadyEndpoints, r.Endpoints, here, conflict, globalIPs(r.Export))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d service(s), %d exported from here, %d with conflicts.\n", len(rows), exported, conflicts)
	return err
}

// globalIPs renders an export's global addresses: the Service's, or "pod=ip" for each pod of a
// headless one; "-" for none (direct addressing, or not exported here).
func globalIPs(e *localExport) string {
	if e == nil || len(e.GlobalIPs) == 0 {
		return "-"
	}
	var out []string
	for _, g := range e.GlobalIPs {
		ip := g.IP
		if ip == "" {
			ip = cmp.Or(g.Reason, "Pending")
		}
		if g.Kind == string(v1alpha1.GlobalIngressTargetPod) {
			ip = g.Name + "=" + ip
		}
		out = append(out, ip)
	}
	return strings.Join(out, ",")
}
