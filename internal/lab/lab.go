// Package lab runs a hub and several member clusters on one machine: real control planes
// (see controlplane), the hub deployed, every cluster joined and its agent running as a
// supervised process. It is used by `octopus lab` and by end-to-end tests, never by a
// component that runs in a real cluster.
package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/progress"
)

// HubName is the name of the hub's control plane.
const HubName = "hub"

// MaxClusters bounds the member clusters: each gets 10.(N).0.0/16 pods and 10.(96+N).0.0/16
// services, which must stay clear of the default secondary pool 10.112.0.0/12.
const MaxClusters = 15

// Options configure Up.
type Options struct {
	// Clusters is the number of member clusters. Required, 1..MaxClusters.
	Clusters int
	// Dir holds everything the lab writes. Required.
	Dir string
	// BinDir has the control-plane binaries (controlplane.EnsureBinaries). Required.
	BinDir string
	// AgentBinary is the octopus-agent executable. Required.
	AgentBinary string
	// HeartbeatInterval of the agents. Optional, default 2s so the demo shows live state.
	HeartbeatInterval time.Duration
	// Progress receives one line per step. Optional.
	Progress *progress.Reporter
}

// Lab is a running hub with joined clusters.
type Lab struct {
	Env        *controlplane.Environment
	BrokerInfo string
	Members    []string
	agents     []*exec.Cmd
}

// ClusterName is the name of the i-th member cluster (1-based).
func ClusterName(i int) string { return fmt.Sprintf("cluster%d", i) }

func clusterCIDRs(i int) (pods, services netip.Prefix) {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 16),
		netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(96 + i), 0, 0}), 16)
}

// Up starts the control planes, deploys the hub, joins every cluster and starts its agent. On
// error it stops whatever it started.
func Up(ctx context.Context, opts Options) (l *Lab, err error) {
	if opts.Clusters < 1 || opts.Clusters > MaxClusters {
		return nil, fmt.Errorf("--clusters %d: want 1 to %d", opts.Clusters, MaxClusters)
	}
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval = 2 * time.Second
	}
	p := opts.Progress
	specs := make([]controlplane.ClusterOptions, 0, opts.Clusters+1)
	for i := 0; i <= opts.Clusters; i++ {
		name := HubName
		if i > 0 {
			name = ClusterName(i)
		}
		pods, services := clusterCIDRs(i)
		specs = append(specs, controlplane.ClusterOptions{Name: name, PodCIDR: pods, ServiceCIDR: services})
	}
	start := time.Now()
	p.Step("Starting etcd and %d control planes in %s", len(specs), opts.Dir)
	env, err := controlplane.Start(ctx, controlplane.Options{BinDir: opts.BinDir, Dir: opts.Dir, Progress: progressOut(p)}, specs...)
	if err != nil {
		return nil, err
	}
	l = &Lab{Env: env, BrokerInfo: filepath.Join(opts.Dir, "broker-info")}
	defer func() {
		if err != nil {
			err = errors.Join(err, l.Stop())
		}
	}()

	p.Step("Deploying the hub")
	info, err := hub.Deploy(ctx, env.Cluster(HubName).RESTConfig(), hub.DeployOptions{Progress: p})
	if err != nil {
		return l, err
	}
	if err := info.WriteFile(l.BrokerInfo); err != nil {
		return l, err
	}
	for i := 1; i <= opts.Clusters; i++ {
		name := ClusterName(i)
		cp := env.Cluster(name)
		if _, err := cluster.Join(ctx, cp.RESTConfig(), cluster.JoinOptions{
			BrokerInfo: info, ClusterID: name, PodCIDRs: []string{cp.PodCIDR.String()}, Progress: p,
		}); err != nil {
			return l, fmt.Errorf("joining %s: %w", name, err)
		}
		agent, err := startAgent(opts, cp)
		if err != nil {
			return l, err
		}
		l.agents = append(l.agents, agent)
		l.Members = append(l.Members, name)
	}
	p.Done(start, "Lab up: hub and %d clusters joined", opts.Clusters)
	return l, nil
}

// startAgent runs the cluster's octopus-agent controller as a child that dies with the lab.
func startAgent(opts Options, cp *controlplane.ControlPlane) (*exec.Cmd, error) {
	logPath := filepath.Join(opts.Dir, "logs", "agent-"+cp.Name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening agent log: %w", err)
	}
	defer logFile.Close()
	cmd := exec.Command(opts.AgentBinary, "controller", "--kubeconfig", cp.Kubeconfig,
		"--heartbeat-interval", opts.HeartbeatInterval.String(), "--lease-duration", (3 * opts.HeartbeatInterval).String())
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the agent of %s (%s): %w", cp.Name, opts.AgentBinary, err)
	}
	return cmd, nil
}

// Stop ends the agents (SIGTERM, so they report AgentStopped) and then the control planes.
func (l *Lab) Stop() error {
	for _, a := range l.agents {
		_ = a.Process.Signal(syscall.SIGTERM)
	}
	for _, a := range l.agents {
		done := make(chan struct{})
		go func() { _ = a.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = a.Process.Kill()
			<-done
		}
	}
	l.agents = nil
	return l.Env.Stop()
}

func progressOut(p *progress.Reporter) io.Writer {
	if p == nil || p.W == nil {
		return io.Discard
	}
	return p.W
}
