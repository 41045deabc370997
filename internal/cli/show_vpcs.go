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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/secondarynet/podnet"
)

type showVpcsOptions struct {
	IOStreams
	kube   kubeconfigFlags
	output outputFormat
}

func newShowVpcsCommand(streams IOStreams) *cobra.Command {
	o := &showVpcsOptions{IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "vpcs",
		Short: "List a cluster's VPCs and VpcNatTunnels: subnets, namespaces, pods, external IPs, tunnels and conditions",
		Long: `Reads one cluster (not the hub): each Vpc's subnets, the namespaces it lists, how many pods
have their net1 address on it (from the octopus.io/vpc-network annotation the ovnmaster writes),
its gateway's external IP (from the cluster's global CIDR; "-" until allocated) and its
conditions. A condition that is not True is shown with its reason and message: a
namespace another Vpc holds (NamespaceConflict), a deletion waiting for pods (InUse), a spec
the controller refused (InvalidSpec).

Then each VpcNatTunnel: its Vpc (natGwDp), the remote cluster and gateway, the type, the remote
gateway's address and whether it is Ready; one that is not is shown with Ready's reason and
message (a remote gateway not there yet, no such Vpc, GRE missing from the kernel, or the data
plane still to be built). With -o json: {"vpcs": [...], "tunnels": [...]}.

  octopus show vpcs --kubeconfig west.yaml
  octopus show vpcs -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.output.validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	o.kube.addFlags(cmd.Flags(), "cluster to look at")
	o.output.addFlag(cmd.Flags())
	return cmd
}

// vpcStatus is one row of `show vpcs`, and its JSON form.
type vpcStatus struct {
	Name       string            `json:"name"`
	Subnets    []vpcSubnetStatus `json:"subnets"`
	Namespaces []string          `json:"namespaces,omitempty"`
	Pods       int               `json:"pods"`
	// ExternalIP is the VPC gateway's external address (status.gateway.externalIP): what
	// it SNATs the VPC's traffic to, and where other clusters' tunnels reach it.
	ExternalIP string             `json:"externalIP,omitempty"`
	Deleting   bool               `json:"deleting,omitempty"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// vpcTunnelStatus is one VpcNatTunnel of `show vpcs`, and its JSON form.
type vpcTunnelStatus struct {
	Name                string             `json:"name"`
	Vpc                 string             `json:"vpc"`
	ClusterID           string             `json:"clusterId"`
	GatewayName         string             `json:"gatewayName"`
	Type                string             `json:"type"`
	RemoteIP            string             `json:"remoteIp,omitempty"`
	RemoteGlobalnetCIDR string             `json:"remoteGlobalnetCidr,omitempty"`
	LocalGlobalnetCIDR  string             `json:"localGlobalnetCidr,omitempty"`
	Conditions          []metav1.Condition `json:"conditions,omitempty"`
}

// vpcsReport is all of `show vpcs`.
type vpcsReport struct {
	Vpcs    []vpcStatus       `json:"vpcs"`
	Tunnels []vpcTunnelStatus `json:"tunnels"`
}

type vpcSubnetStatus struct {
	Name string `json:"name"`
	CIDR string `json:"cidr"`
}

func (o *showVpcsOptions) Run(ctx context.Context) error {
	c, cfg, err := o.kube.client()
	if err != nil {
		return err
	}
	var vpcs v1alpha1.VpcList
	if err := c.List(ctx, &vpcs); err != nil {
		if meta.IsNoMatchError(err) {
			return fmt.Errorf("%s serves no Vpcs: the cluster has not joined a hub with this version of Octopus (run `octopus join`)", cfg.Host)
		}
		return fmt.Errorf("listing Vpcs of %s: %w", cfg.Host, err)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods); err != nil {
		return fmt.Errorf("listing pods of %s: %w", cfg.Host, err)
	}
	var tunnels v1alpha1.VpcNatTunnelList
	if err := c.List(ctx, &tunnels); err != nil {
		return fmt.Errorf("listing VpcNatTunnels of %s: %w", cfg.Host, err)
	}
	report := vpcsReport{Vpcs: vpcRows(vpcs.Items, pods.Items), Tunnels: tunnelRows(tunnels.Items)}
	if o.output == outputJSON {
		enc := json.NewEncoder(o.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	return renderVpcs(o.Out, report)
}

// tunnelRows are the VpcNatTunnels by name.
func tunnelRows(tunnels []v1alpha1.VpcNatTunnel) []vpcTunnelStatus {
	rows := make([]vpcTunnelStatus, 0, len(tunnels))
	for _, t := range tunnels {
		rows = append(rows, vpcTunnelStatus{
			Name: t.Name, Vpc: t.Spec.NatGwDp, ClusterID: t.Spec.ClusterID, GatewayName: t.Spec.GatewayName,
			Type: string(cmp.Or(t.Spec.Type, v1alpha1.VpcTunnelWireGuard)), RemoteIP: t.Status.RemoteIP,
			RemoteGlobalnetCIDR: t.Status.RemoteGlobalnetCIDR, LocalGlobalnetCIDR: t.Status.LocalGlobalnetCIDR,
			Conditions: t.Status.Conditions,
		})
	}
	slices.SortFunc(rows, func(a, b vpcTunnelStatus) int { return cmp.Compare(a.Name, b.Name) })
	return rows
}

// vpcRows are the Vpcs by name, each with the number of pods whose net1 is on it.
func vpcRows(vpcs []v1alpha1.Vpc, pods []corev1.Pod) []vpcStatus {
	onVpc := map[string]int{}
	for _, p := range pods {
		if _, has, _ := podnet.Find(p.Annotations); !has {
			continue
		}
		if a, ok, err := podnet.FindVpc(p.Annotations); ok && err == nil {
			onVpc[a.Vpc]++
		}
	}
	rows := make([]vpcStatus, 0, len(vpcs))
	for _, v := range vpcs {
		r := vpcStatus{Name: v.Name, Namespaces: v.Spec.Namespaces, Pods: onVpc[v.Name], Deleting: !v.DeletionTimestamp.IsZero(), Conditions: v.Status.Conditions}
		if v.Status.Gateway != nil {
			r.ExternalIP = v.Status.Gateway.ExternalIP
		}
		for _, s := range v.Spec.Subnets {
			r.Subnets = append(r.Subnets, vpcSubnetStatus{Name: s.Name, CIDR: s.CIDR})
		}
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b vpcStatus) int { return cmp.Compare(a.Name, b.Name) })
	return rows
}

// renderVpcs writes the Vpcs' table, then every condition that is not True, so that what to
// fix is on the screen without `kubectl describe`; then the tunnels likewise.
func renderVpcs(out io.Writer, report vpcsReport) error {
	if err := renderVpcTable(out, report.Vpcs); err != nil {
		return err
	}
	if len(report.Tunnels) == 0 {
		return nil
	}
	fmt.Fprintln(out)
	return renderTunnels(out, report.Tunnels)
}

// renderTunnels writes the tunnels' table, then Ready's reason and message of every tunnel
// that is not Ready: the controller gathers there what each other condition says is missing,
// so the other conditions would only repeat it.
func renderTunnels(out io.Writer, rows []vpcTunnelStatus) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TUNNEL\tVPC\tCLUSTER\tGATEWAY\tTYPE\tREMOTE IP\tREMOTE GLOBAL CIDR\tREADY")
	var problems []string
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Vpc, r.ClusterID, r.GatewayName, r.Type,
			cmp.Or(r.RemoteIP, "-"), cmp.Or(r.RemoteGlobalnetCIDR, "-"), conditionStatus(r.Conditions, v1alpha1.VpcNatTunnelConditionReady))
		if c := meta.FindStatusCondition(r.Conditions, v1alpha1.VpcNatTunnelConditionReady); c != nil && c.Status != metav1.ConditionTrue {
			problems = append(problems, fmt.Sprintf("VpcNatTunnel %s: Ready=%s (%s): %s", r.Name, c.Status, c.Reason, c.Message))
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, p := range problems {
		fmt.Fprintln(out, p)
	}
	return nil
}

func renderVpcTable(out io.Writer, rows []vpcStatus) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tSUBNETS\tNAMESPACES\tPODS\tEXTERNAL IP\tREADY\tNAMESPACES BOUND")
	var problems []string
	for _, r := range rows {
		subnets := make([]string, len(r.Subnets))
		for i, s := range r.Subnets {
			subnets[i] = s.Name + "=" + s.CIDR
		}
		ready, bound := conditionStatus(r.Conditions, v1alpha1.VpcConditionReady), conditionStatus(r.Conditions, v1alpha1.VpcConditionNamespacesBound)
		if r.Deleting {
			ready += " (deleting)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.Name, strings.Join(subnets, ","), cmp.Or(strings.Join(r.Namespaces, ","), "-"), r.Pods,
			cmp.Or(r.ExternalIP, "-"), ready, bound)
		for _, c := range r.Conditions {
			if c.Status != metav1.ConditionTrue {
				problems = append(problems, fmt.Sprintf("Vpc %s: %s=%s (%s): %s", r.Name, c.Type, c.Status, c.Reason, c.Message))
			}
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, p := range problems {
		fmt.Fprintln(out, p)
	}
	return nil
}

// conditionStatus is the condition's status, or "-" while the controller has not set it.
func conditionStatus(conds []metav1.Condition, typ string) string {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return string(c.Status)
	}
	return "-"
}
