package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

type showConnectionsOptions struct {
	IOStreams
	kube      kubeconfigFlags
	namespace string
	output    outputFormat
}

func newShowConnectionsCommand(streams IOStreams) *cobra.Command {
	o := &showConnectionsOptions{IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "connections",
		Short: "List the tunnels between clusters as each cluster's gateway reports them",
		Long: `Reads every cluster's Peer on the hub (through a joined cluster's hub credential or the hub's
own kubeconfig) and prints one line per tunnel: the reporting cluster, the remote cluster, the
backend and the driver running it, the remote endpoint (or "via hub" for a cluster reached
through the hub's gateway), the state, round-trip times and loss of
the health probes, and the bytes carried.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.output.validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	o.kube.addFlags(cmd.Flags(), "hub or of a joined cluster")
	cmd.Flags().StringVar(&o.namespace, "hub-namespace", v1alpha1.DefaultHubNamespace, "hub namespace, when --kubeconfig is the hub's")
	o.output.addFlag(cmd.Flags())
	return cmd
}

// Connection is one tunnel as the gateway of Cluster reports it.
type Connection struct {
	Cluster  string                   `json:"cluster"`
	Peer     string                   `json:"peer"`
	Backend  v1alpha1.Backend         `json:"backend"`
	Driver   string                   `json:"driver,omitempty"`
	Endpoint string                   `json:"endpoint,omitempty"`
	Via      string                   `json:"via,omitempty"`
	State    v1alpha1.ConnectionState `json:"state"`
	Message  string                   `json:"message,omitempty"`
	// IPFamilies and FamilyMessage are the connection's (PeerConnection): the families it
	// carries and why another is not.
	IPFamilies    []string              `json:"ipFamilies,omitempty"`
	FamilyMessage string                `json:"familyMessage,omitempty"`
	RTT           v1alpha1.LatencyStats `json:"rtt"`
	LossPercent   int32                 `json:"lossPercent"`
	RxBytes       int64                 `json:"rxBytes"`
	TxBytes       int64                 `json:"txBytes"`
}

func (o *showConnectionsOptions) Run(ctx context.Context) error {
	cfg, err := o.kube.restConfig()
	if err != nil {
		return err
	}
	hc, ns, err := hubClientFor(ctx, cfg, o.namespace)
	if err != nil {
		return err
	}
	peers := &v1alpha1.PeerList{}
	if err := hc.List(ctx, peers, client.InNamespace(ns)); err != nil {
		if meta.IsNoMatchError(err) {
			return fmt.Errorf("%s is neither a joined cluster nor a hub: run `octopus join` there, or pass the hub's kubeconfig", cfg.Host)
		}
		return fmt.Errorf("listing Peers on the hub: %w", err)
	}
	conns := CollectConnections(peers.Items)
	if o.output == outputJSON {
		enc := json.NewEncoder(o.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(conns)
	}
	return renderConnections(o.Out, conns, len(peers.Items))
}

// CollectConnections flattens the Peers' statuses into one Connection per reported tunnel,
// sorted by cluster and peer; the endpoint is the remote Peer's as published.
func CollectConnections(peers []v1alpha1.Peer) []Connection {
	endpoints := map[string]string{}
	for _, p := range peers {
		ip := p.Spec.Endpoint.PublicIP
		if ip == "" {
			ip = p.Spec.Endpoint.PrivateIP
		}
		if ip != "" {
			endpoints[p.Spec.ClusterID] = net.JoinHostPort(ip, strconv.Itoa(int(p.Spec.Endpoint.Port)))
		}
	}
	conns := []Connection{}
	for _, p := range peers {
		backend := p.Spec.Backend
		if backend == "" {
			backend = v1alpha1.BackendWireGuard
		}
		for _, c := range p.Status.Connections {
			conns = append(conns, Connection{
				Cluster: p.Spec.ClusterID, Peer: c.ClusterID, Backend: backend, Driver: p.Status.Driver,
				Endpoint: endpoints[c.ClusterID], Via: c.Via, State: c.State, Message: c.Message,
				IPFamilies: c.IPFamilies, FamilyMessage: c.FamilyMessage, RTT: c.RTT,
				LossPercent: c.LossPercent, RxBytes: c.RxBytes, TxBytes: c.TxBytes,
			})
		}
	}
	slices.SortFunc(conns, func(a, b Connection) int {
		if c := strings.Compare(a.Cluster, b.Cluster); c != 0 {
			return c
		}
		return strings.Compare(a.Peer, b.Peer)
	})
	return conns
}

func renderConnections(w io.Writer, conns []Connection, peers int) error {
	if peers == 0 {
		_, err := fmt.Fprintln(w, "No gateway has published a Peer yet: is `octopus-agent gateway` running on a gateway node of a joined cluster?")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tPEER\tBACKEND\tDRIVER\tENDPOINT\tSTATE\tFAMILIES\tRTT AVG\tRTT MIN/MAX\tLOSS\tRX\tTX")
	connected := 0
	var notes []string
	for _, c := range conns {
		if c.State == v1alpha1.ConnectionConnected {
			connected++
		}
		state := string(c.State)
		if c.Message != "" && c.State != v1alpha1.ConnectionConnected {
			state += " (" + truncate(c.Message, 60) + ")"
		}
		endpoint := c.Endpoint
		if c.Via != "" {
			endpoint = "via " + c.Via
		}
		families := strings.Join(c.IPFamilies, ",")
		if families == "" {
			families = "-" // refused, the hub gateway's, or a gateway of an earlier version
		}
		if c.FamilyMessage != "" {
			notes = append(notes, c.Cluster+" > "+c.Peer+": "+c.FamilyMessage)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s/%s\t%d%%\t%s\t%s\n", c.Cluster, c.Peer, c.Backend, c.Driver, endpoint, state, families,
			rtt(c.RTT.Avg.Duration), rtt(c.RTT.Min.Duration), rtt(c.RTT.Max.Duration), c.LossPercent, byteCount(c.RxBytes), byteCount(c.TxBytes))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// A family one side lacks is a property of the cluster set, not a fault: said once per
	// connection, below the table, where it does not widen every row.
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintln(w, n)
		}
	}
	_, err := fmt.Fprintf(w, "\n%d of %d connections up.\n", connected, len(conns))
	return err
}

func rtt(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.Round(10 * time.Microsecond).String()
}

func byteCount(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
