package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/agent"
	"github.com/octopus-mcs/octopus/internal/datapath/health"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/gateway"
)

// gatewayOptions are the flags of `octopus-agent gateway`.
type gatewayOptions struct {
	kubeconfig            string
	nodeName              string
	backend               string
	listenPort            uint16
	device                string
	endpointIP            string
	healthCheckIP         string
	excludeSubnets        []string
	mtu                   int
	underlayProbeInterval time.Duration
	leaseDuration         time.Duration
	renewDeadline         time.Duration
	retryPeriod           time.Duration
	statusInterval        time.Duration
	silentClusterTTL      time.Duration
	healthInterval        time.Duration
	metricsAddr           string
	livenessPort          uint16
	livenessInterval      time.Duration
	livenessFailures      int
	takeoverAfter         time.Duration
	handoverGrace         time.Duration
	hub                   bool
	hubNamespace          string
	openHostFirewall      bool
	healthMaxLoss         int
}

func newGatewayCommand() *cobra.Command {
	o := gatewayOptions{}
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Run the cluster's gateway: tunnels to the other clusters (gateway nodes)",
		Long: `gateway runs on gateway-labelled nodes, in the node's network namespace. The replicas elect one
active gateway through the octopus-system/octopus-gateway Lease; the others stand by. The active
one generates a fresh WireGuard key pair, publishes this cluster's Peer on the hub (public key,
endpoint, subnets, health-check address), tunnels to every other cluster's Peer (mesh), mirrors
their subnets into the octopus-system/octopus-gateway ConfigMap for the route agents, and reports
its connections in the Peer's status. When it loses the Lease it closes its tunnels and stands
by again, in the same process; each active term generates a fresh key pair.

Standbys take over from a dead active gateway before the Lease expires: every gateway process
accepts TCP connections on --liveness-port, and a standby connects to the Lease holder's node
(its InternalIP; with --hub, the hub Peer's endpoint address) every --liveness-interval. When --liveness-failures probes in a row failed AND
the Lease was not renewed for --takeover-after, the standby writes itself into the Lease (an
optimistic-concurrency update: a renewal or another standby's takeover in between wins). An
active gateway that renews, or that answers, is never displaced. --liveness-port 0 turns this
off: standbys then wait out --lease-duration.

On a clean stop (SIGTERM: a rolling update, a drain) the active gateway releases the Lease at
once but keeps its tunnels up, forwarding, until the gateway that took the Lease over has
published the Peer, then one more second, at most --handover-grace; the route agents move to the
new gateway once it names itself in the ConfigMap, after its tunnels are up.

With --hub it is the hub's gateway instead, for clusters joined with --topology hub: --kubeconfig
is the hub's (its ServiceAccount octopus-hub-gateway, made by hub deploy, has the rights it
needs), the Lease is octopus-hub-gateway in the hub namespace, and it publishes the Peer "hub",
tunnels to every member and forwards between them. The node needs IP forwarding; pass
--endpoint-ip and --health-check-ip (an address in no cluster's CIDRs) where the hub has no
Node objects. Fast takeover is off for the hub's gateway, since a standby finds the active one's
address through its Node object and the hub has none: a standby waits out --lease-duration.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := o.complete()
			if err != nil {
				return err
			}
			return agent.RunGateway(ctrl.SetupSignalHandler(), opts, o.openHostFirewall)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the member cluster; empty means in-cluster configuration")
	f.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "name of the node this gateway runs on (default $NODE_NAME)")
	f.StringVar(&o.backend, "backend", string(v1alpha1.BackendWireGuard), "tunnel driver: wireguard or vxlan")
	f.Uint16Var(&o.listenPort, "listen-port", gateway.DefaultListenPort, "UDP port of the tunnel")
	f.StringVar(&o.device, "device", gateway.DefaultDevice, "name of the tunnel device; unique per machine")
	f.StringVar(&o.endpointIP, "endpoint-ip", "", "address other gateways tunnel to (default: the Node's ExternalIP, else InternalIP)")
	f.StringVar(&o.healthCheckIP, "health-check-ip", "", "address in this cluster's pod CIDR that other gateways probe (default: first host of the Node's pod CIDR)")
	f.StringSliceVar(&o.excludeSubnets, "exclude-subnet", nil, "CIDR not to advertise to other clusters (repeatable)")
	f.IntVar(&o.mtu, "mtu", 0, "MTU of the tunnel device; 0 derives it from the underlay")
	f.DurationVar(&o.leaseDuration, "lease-duration", gateway.DefaultLeaseDuration, "how long a standby waits after the active gateway's last renewal before taking over")
	f.DurationVar(&o.renewDeadline, "renew-deadline", gateway.DefaultRenewDeadline, "how long the active gateway retries renewing before it gives up the role")
	f.DurationVar(&o.retryPeriod, "retry-period", gateway.DefaultRetryPeriod, "how often to try to acquire or renew the Lease")
	f.DurationVar(&o.healthInterval, "health-interval", time.Second, "interval of the ICMP health probes to every remote gateway")
	f.IntVar(&o.healthMaxLoss, "health-max-loss", health.DefaultDownAfter, "how many health probes in a row may go unanswered before a connection is down (1-60)")
	f.BoolVar(&o.openHostFirewall, "open-host-firewall", false,
		"accept --listen-port (UDP) in the node's input hook, in an nftables table of the gateway's own (inet "+owner.HostFirewallNFTTable+"), deleted on clean shutdown; it cannot override a drop in the host's own firewall, which must allow the port itself")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", fmt.Sprintf(":%d", gateway.DefaultMetricsPort),
		`address of the Prometheus metrics endpoint (/metrics), standbys included; "0" turns it off`)
	f.BoolVar(&o.hub, "hub", false, "run as the hub's gateway (the hub topology); --kubeconfig is then the hub's")
	f.StringVar(&o.hubNamespace, "hub-namespace", v1alpha1.DefaultHubNamespace, "with --hub: the hub namespace")
	f.Uint16Var(&o.livenessPort, "liveness-port", gateway.DefaultLivenessPort,
		"TCP port every gateway listens on and standbys probe on the active gateway's node InternalIP (with --hub, the hub Peer's endpoint address) for a fast takeover; 0 turns fast takeover off")
	f.DurationVar(&o.livenessInterval, "liveness-interval", gateway.DefaultLivenessInterval, "how often a standby probes the active gateway (a probe times out after 1s; a refused one fails at once)")
	f.IntVar(&o.livenessFailures, "liveness-failures", gateway.DefaultLivenessFailures, "consecutive failed probes before a standby may take over")
	f.DurationVar(&o.takeoverAfter, "takeover-after", 0,
		"how long the Lease must also go unrenewed before a standby takes over; must exceed --retry-period (default 2 × --retry-period)")
	f.DurationVar(&o.handoverGrace, "handover-grace", gateway.DefaultHandoverGrace,
		"on a clean stop (SIGTERM), how long the active gateway may keep its tunnels up until the gateway that took the Lease over has published the Peer (make-before-break); 0 closes them at once")
	f.DurationVar(&o.underlayProbeInterval, "underlay-probe-interval", gateway.DefaultUnderlayProbeInterval,
		"how often to measure the underlay path to every remote gateway (tunnel port reachable, path MTU) with UDP probes to its tunnel port; 0 turns it off (this gateway then answers no probes either)")
	f.DurationVar(&o.statusInterval, "status-interval", gateway.DefaultStatusInterval, "how often to refresh the Peer's status")
	f.DurationVar(&o.silentClusterTTL, "silent-cluster-ttl", gateway.DefaultSilentClusterTTL,
		"how long another cluster's heartbeat Lease may go unrenewed (beyond its lease duration) before its tunnel is torn down; it comes back when the cluster heartbeats again; negative keeps it")
	return cmd
}

func (o gatewayOptions) complete() (gateway.Options, error) {
	if o.nodeName == "" {
		return gateway.Options{}, errors.New("--node-name is required (in a DaemonSet, set it from spec.nodeName through the NODE_NAME variable)")
	}
	member, err := agent.MemberConfig(o.kubeconfig)
	if err != nil {
		return gateway.Options{}, err
	}
	opts := gateway.Options{
		Member: member, NodeName: o.nodeName, Backend: v1alpha1.Backend(o.backend), ListenPort: o.listenPort, Device: o.device,
		MTU: o.mtu, LeaseDuration: o.leaseDuration, RenewDeadline: o.renewDeadline, RetryPeriod: o.retryPeriod,
		StatusInterval: o.statusInterval, SilentClusterTTL: o.silentClusterTTL, Log: ctrl.Log.WithName("gateway"),
		NewProber:    gateway.NewHealthProber(o.healthInterval, o.healthMaxLoss, ctrl.Log.WithName("health")),
		LivenessPort: o.livenessPort, LivenessInterval: o.livenessInterval, LivenessFailures: o.livenessFailures, TakeoverAfter: o.takeoverAfter,
		HandoverGrace: o.handoverGrace,
	}
	if o.handoverGrace <= 0 {
		opts.HandoverGrace = -1 // Options' zero means the default
	}
	if o.underlayProbeInterval > 0 {
		opts.NewUnderlayProber = gateway.NewPathProber(o.underlayProbeInterval, ctrl.Log.WithName("underlay"))
	}
	if o.healthMaxLoss < 1 || o.healthMaxLoss > 60 {
		return gateway.Options{}, fmt.Errorf("--health-max-loss %d: want 1 to 60 probes in a row", o.healthMaxLoss)
	}
	if o.livenessPort != 0 && o.takeoverAfter != 0 && o.takeoverAfter <= o.retryPeriod {
		return gateway.Options{}, fmt.Errorf("--takeover-after %s must exceed --retry-period %s: a live active gateway renews only every retry period", o.takeoverAfter, o.retryPeriod)
	}
	if o.hub {
		opts.Role, opts.HubNamespace = v1alpha1.PeerRoleHub, o.hubNamespace
	}
	for flag, dst := range map[string]*netip.Addr{"--endpoint-ip": &opts.EndpointIP, "--health-check-ip": &opts.HealthCheckIP} {
		v := map[string]string{"--endpoint-ip": o.endpointIP, "--health-check-ip": o.healthCheckIP}[flag]
		if v == "" {
			continue
		}
		if *dst, err = netip.ParseAddr(v); err != nil {
			return gateway.Options{}, fmt.Errorf("%s %q: %w", flag, v, err)
		}
	}
	for _, s := range o.excludeSubnets {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return gateway.Options{}, fmt.Errorf("--exclude-subnet %q: %w", s, err)
		}
		opts.ExcludeSubnets = append(opts.ExcludeSubnets, p)
	}
	// Listening last, once every flag was checked, so that a bad flag leaves no listener open.
	if err := agent.ListenGateway(&opts, o.metricsAddr); err != nil {
		return gateway.Options{}, err
	}
	return opts, nil
}
