package agent

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/octopus-mcs/octopus/internal/datapath/hostfirewall"
	"github.com/octopus-mcs/octopus/internal/datapath/owner"
	"github.com/octopus-mcs/octopus/internal/gateway"
	"github.com/octopus-mcs/octopus/internal/metricsserver"
)

// ListenGateway opens the gateway's listeners into opts: metrics on metricsAddr ("0" none) and,
// unless opts.LivenessPort is 0, the liveness port standbys probe for a fast takeover. Opening
// them before the gateway starts makes a taken port fail the start instead of going unnoticed.
// The errors name the flags of `octopus-agent gateway`, the one caller.
func ListenGateway(opts *gateway.Options, metricsAddr string) error {
	var err error
	if opts.MetricsListener, err = metricsserver.Listen(metricsAddr); err != nil {
		return err
	}
	if opts.LivenessPort == 0 {
		return nil
	}
	if opts.LivenessListener, err = net.Listen("tcp", fmt.Sprintf(":%d", opts.LivenessPort)); err != nil {
		if opts.MetricsListener != nil {
			_ = opts.MetricsListener.Close()
		}
		return fmt.Errorf("listening for liveness probes: %w (pick another port with --liveness-port, the same on every gateway node, or 0 to turn fast takeover off)", err)
	}
	return nil
}

// RunGateway runs the gateway (gateway.Run) until ctx ends. With openHostFirewall its tunnel port
// is accepted in the node's input hook for as long as it runs (the underlay probes use the same
// port, internal/gateway/underlay.go). The gateway opens it itself because nothing can program
// another node's firewall through the Kubernetes API; standbys open it too, so a takeover finds
// the port already open.
func RunGateway(ctx context.Context, opts gateway.Options, openHostFirewall bool) error {
	if !openHostFirewall {
		return gateway.Run(ctx, opts)
	}
	fw, err := hostfirewall.New()
	if err != nil {
		return err
	}
	if err := fw.Open(ctx, opts.ListenPort); err != nil {
		return err
	}
	opts.Log.Info("Accepted the tunnel port in the host firewall", "table", "inet "+owner.HostFirewallNFTTable, "udpPort", opts.ListenPort)
	runErr := gateway.Run(ctx, opts)
	// ctx is done by now on a clean shutdown; the deletion must still run.
	closeErr := fw.Close(context.WithoutCancel(ctx))
	if closeErr != nil {
		opts.Log.Error(closeErr, "Leaving the host firewall table behind")
	}
	return errors.Join(runErr, closeErr)
}
