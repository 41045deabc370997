package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
)

type showPodsOptions struct {
	IOStreams
	kube      kubeconfigFlags
	namespace string
	output    outputFormat
}

func newShowPodsCommand(streams IOStreams) *cobra.Command {
	o := &showPodsOptions{IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "pods",
		Short: "List a cluster's pods with their address on the secondary network (net1)",
		Long: `Reads one cluster (not the hub): each pod's node, primary address and, with secondary
addressing, its net1 address and MAC from the k8s.v1.cni.cncf.io/network-status annotation the
ovnmaster writes, or why it has none (octopus.io/secondary-network-error). Host-network pods,
the system namespaces and opted-out pods show "-".

  octopus show pods --kubeconfig west.yaml -n shop
  octopus show pods -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.output.validate(); err != nil {
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

// podStatus is one row of `show pods`, and its JSON form.
type podStatus struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Node      string `json:"node,omitempty"`
	Phase     string `json:"phase"`
	PodIP     string `json:"podIP,omitempty"`
	// SecondaryIP and SecondaryMAC are net1's, empty when the pod has no address on the
	// secondary network; SecondaryError then says why, if the ovnmaster said.
	SecondaryIP    string `json:"secondaryIP,omitempty"`
	SecondaryMAC   string `json:"secondaryMAC,omitempty"`
	SecondaryError string `json:"secondaryError,omitempty"`
}

func (o *showPodsOptions) Run(ctx context.Context) error {
	c, cfg, err := o.kube.client()
	if err != nil {
		return err
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(o.namespace)); err != nil {
		return fmt.Errorf("listing pods of %s: %w", cfg.Host, err)
	}
	rows := podRows(pods.Items)
	if o.output == outputJSON {
		enc := json.NewEncoder(o.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	return renderPods(o.Out, rows)
}

// podRows reads each pod's secondary address from its annotations, sorted by namespace and name.
func podRows(pods []corev1.Pod) []podStatus {
	rows := make([]podStatus, 0, len(pods))
	for _, p := range pods {
		r := podStatus{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, Phase: string(p.Status.Phase), PodIP: p.Status.PodIP,
			SecondaryError: p.Annotations[podnet.ErrorAnnotation]}
		st, ok, err := podnet.Find(p.Annotations)
		switch {
		case err != nil:
			r.SecondaryError = err.Error()
		case ok && len(st.IPs) > 0:
			r.SecondaryIP, r.SecondaryMAC = st.IPs[0], st.MAC
		}
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b podStatus) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return rows
}

func renderPods(out io.Writer, rows []podStatus) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAMESPACE\tNAME\tNODE\tPHASE\tPOD IP\tNET1 IP\tNET1 MAC")
	for _, r := range rows {
		ip, mac := cmp.Or(r.SecondaryIP, "-"), cmp.Or(r.SecondaryMAC, "-")
		if r.SecondaryIP == "" && r.SecondaryError != "" {
			ip = "error: " + r.SecondaryError
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Namespace, r.Name, cmp.Or(r.Node, "-"), r.Phase, cmp.Or(r.PodIP, "-"), ip, mac)
	}
	return w.Flush()
}
