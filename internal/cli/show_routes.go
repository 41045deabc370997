package cli

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/datapath/ovnic"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/secondarynet/icconfig"
)

type showRoutesOptions struct {
	IOStreams
	kube   kubeconfigFlags
	output outputFormat
}

func newShowRoutesCommand(streams IOStreams) *cobra.Command {
	o := &showRoutesOptions{IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "routes",
		Short: "List the OVN interconnection routes: advertised by each cluster, learned by this one",
		Long: `Reads the hub's IC SB database (what ovn-ic-sbctl show lists) with the cluster's own IC
certificate (Secret octopus-system/octopus-ovn-ic-tls) at the endpoints of its ovn-ic-config:
every AZ's advertised routes, each marked for the cluster looked at as its own (advertised),
learned (auto-route on) or not learned (auto-route off: only manual routes count); then the
cluster's manual routes, from its InterconnectRoutes and their status: manual (on the router)
or manual-not-applied with the reason.

  octopus show routes --kubeconfig east.yaml
  octopus show routes -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.output.validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	o.kube.addFlags(cmd.Flags(), "interconnected cluster to look at")
	o.output.addFlag(cmd.Flags())
	return cmd
}

// routeRow is one row of `show routes`, and its JSON form.
type routeRow struct {
	ovnic.AdvertisedRoute
	// Kind is the route for the cluster looked at: advertised, learned, not-learned, manual
	// or manual-not-applied.
	Kind string `json:"kind"`
	// Name and Reason: a manual route's InterconnectRoute, and why it is not applied.
	Name   string `json:"name,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Kinds of routeRow.
const (
	routeAdvertised = "advertised"
	routeLearned    = "learned"
	routeNotLearned = "not-learned"
	// routeManual is an InterconnectRoute on the cluster's router; routeManualNotApplied one
	// the icmaster left out (Reason says why).
	routeManual           = "manual"
	routeManualNotApplied = "manual-not-applied"
)

// originManual is the Origin of a manual route's row: what it comes from.
const originManual = "InterconnectRoute"

func (o *showRoutesOptions) Run(ctx context.Context) error {
	c, cfg, err := o.kube.client()
	if err != nil {
		return err
	}
	cred, err := hubaccess.LoadCredential(ctx, c)
	if err != nil {
		return err
	}
	ic, tlsConfig, err := interconnectAccess(ctx, c)
	if err != nil {
		return fmt.Errorf("%s: %w", cfg.Host, err)
	}
	routes, azs, err := ovnic.ReadRoutes(ctx, ic.ICSB(), tlsConfig)
	if err != nil {
		return err
	}
	rows := routeRows(cred.ClusterID, ic.AutoRoute, routes)
	// Manual routes live in the AZ's NB, which the CLI does not reach; their InterconnectRoute
	// objects, with the icmaster's status, are in the member and say the same.
	var manual v1alpha1.InterconnectRouteList
	switch err := c.List(ctx, &manual); {
	case meta.IsNoMatchError(err):
		// A member joined before the CRD existed has no manual routes.
	case err != nil:
		return fmt.Errorf("%s: listing InterconnectRoutes: %w", cfg.Host, err)
	default:
		rows = append(rows, manualRows(cred.ClusterID, manual.Items)...)
	}
	if o.output == outputJSON {
		enc := json.NewEncoder(o.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	return renderRoutes(o.Out, cred.ClusterID, azs, rows)
}

// interconnectAccess is the cluster's ovn-ic-config and its IC client certificate as a TLS
// configuration (no server name: each IC database member is checked against its address).
func interconnectAccess(ctx context.Context, c client.Client) (icconfig.Config, *tls.Config, error) {
	cm := &corev1.ConfigMap{}
	err := c.Get(ctx, client.ObjectKey{Namespace: icconfig.ConfigMapNamespace, Name: icconfig.ConfigMapName}, cm)
	if apierrors.IsNotFound(err) {
		return icconfig.Config{}, nil, errors.New("the cluster is not interconnected (no kube-system/ovn-ic-config): join it with --interconnect ovn-ic")
	}
	if err != nil {
		return icconfig.Config{}, nil, err
	}
	ic, err := icconfig.Parse(cm.Data)
	if err != nil {
		return icconfig.Config{}, nil, err
	}
	if len(ic.DBHosts) == 0 {
		return icconfig.Config{}, nil, fmt.Errorf("%s has no %s", icconfig.ConfigMapName, icconfig.KeyDBHost)
	}
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: cluster.InterconnectSecret}, s); err != nil {
		return icconfig.Config{}, nil, fmt.Errorf("reading the cluster's IC certificate (Secret %s/%s; join --interconnect ovn-ic issues it): %w", v1alpha1.SystemNamespace, cluster.InterconnectSecret, err)
	}
	pair, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return icconfig.Config{}, nil, fmt.Errorf("the cluster's IC certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.Data[v1alpha1.InterconnectCAKey]) {
		return icconfig.Config{}, nil, fmt.Errorf("the IC certificate Secret %s/%s has no CA certificate in %s", v1alpha1.SystemNamespace, cluster.InterconnectSecret, v1alpha1.InterconnectCAKey)
	}
	return ic, &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, Certificates: []tls.Certificate{pair}}, nil
}

// routeRows marks each advertised route for cluster self: its own are advertised, the
// others' learned when its auto-route is on (ovn-ic copies them into its router) and not
// learned otherwise.
func routeRows(self string, autoRoute bool, routes []ovnic.AdvertisedRoute) []routeRow {
	rows := make([]routeRow, 0, len(routes))
	for _, r := range routes {
		kind := routeLearned
		switch {
		case r.AZ == self:
			kind = routeAdvertised
		case !autoRoute:
			kind = routeNotLearned
		}
		rows = append(rows, routeRow{AdvertisedRoute: r, Kind: kind})
	}
	return rows
}

// manualRows are cluster self's InterconnectRoutes as rows, by their status: manual when the
// icmaster put them on the router, manual-not-applied (with its reason) otherwise.
func manualRows(self string, items []v1alpha1.InterconnectRoute) []routeRow {
	rows := make([]routeRow, 0, len(items))
	for _, r := range items {
		row := routeRow{AdvertisedRoute: ovnic.AdvertisedRoute{AZ: self, TransitSwitch: icconfig.TransitSwitch,
			Prefix: r.Spec.Prefix, NextHop: r.Status.NextHop, Origin: originManual}, Kind: routeManualNotApplied, Name: r.Name}
		switch c := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.InterconnectRouteConditionReady); {
		case c == nil:
			row.Reason = "not handled yet by the icmaster"
		case c.Status == metav1.ConditionTrue:
			row.Kind = routeManual
		default:
			row.Reason = c.Reason
		}
		if row.NextHop == "" {
			row.NextHop = r.Spec.NextHop
		}
		rows = append(rows, row)
	}
	slices.SortFunc(rows, func(a, b routeRow) int { return cmp.Compare(a.Prefix, b.Prefix) })
	return rows
}

func renderRoutes(out io.Writer, self string, azs []string, rows []routeRow) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CLUSTER (AZ)\tTRANSIT SWITCH\tPREFIX\tNEXT HOP\tORIGIN\tFOR "+self)
	advertised, manual := 0, 0
	for _, r := range rows {
		kind, origin := r.Kind, r.Origin
		if r.Name != "" {
			origin += "/" + r.Name
			manual++
		} else {
			advertised++
		}
		if r.Reason != "" {
			kind += " (" + r.Reason + ")"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.AZ, r.TransitSwitch, r.Prefix, r.NextHop, origin, kind)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "\n%d AZs in the interconnection, %d routes advertised, %d manual.\n", len(azs), advertised, manual)
	return err
}
