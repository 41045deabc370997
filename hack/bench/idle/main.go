// Command idle measures each member component's resident memory at idle, as its own process
// against real control planes (a hub and one joined member cluster, internal/lab/controlplane),
// without a lab: the controller (leader, heartbeating), a gateway standing by (another node
// holds the octopus-gateway Lease, so it opens no tunnel device on this machine), a route agent
// (no remote subnets mirrored: it routes nothing) and octopus-dns (crossdns, bound to 127.0.0.1). Each
// round starts all four afresh, waits -idle, and reads each one's VmRSS from /proc; it prints
// every round and the median.
//
//	go build -o bin/ ./cmd/octopus-agent ./cmd/octopus-dns
//	go run ./hack/bench/idle -rounds 3 -idle 30s
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/cluster"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

func main() {
	rounds := flag.Int("rounds", 3, "rounds; the median is reported")
	idle := flag.Duration("idle", 30*time.Second, "how long the components run before their memory is read")
	bin := flag.String("bin", "bin", "directory holding octopus-agent and octopus-dns")
	flag.Parse()
	if err := run(context.Background(), *rounds, *idle, *bin); err != nil {
		fmt.Fprintln(os.Stderr, "idle:", err)
		os.Exit(1)
	}
}

var components = []string{"controller", "gateway (standby)", "route-agent", "octopus-dns"}

func run(ctx context.Context, rounds int, idle time.Duration, bin string) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	k8s, err := controlplane.EnsureBinaries(ctx, root, os.Stderr)
	if err != nil {
		return fmt.Errorf("control-plane binaries (run from the repository root): %w", err)
	}
	dir, err := os.MkdirTemp("", "octopus-bench-idle-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	var opts []controlplane.ClusterOptions
	for i, n := range []string{"hub", "east"} {
		svc, pod := testenv.CIDRs(i)
		opts = append(opts, controlplane.ClusterOptions{Name: n, ServiceCIDR: svc, PodCIDR: pod})
	}
	env, err := controlplane.Start(ctx, controlplane.Options{BinDir: k8s, Dir: filepath.Join(dir, "env"), Progress: io.Discard}, opts...)
	if err != nil {
		return fmt.Errorf("starting control planes: %w", err)
	}
	defer func() { _ = env.Stop() }()
	info, err := hub.Deploy(ctx, env.Cluster("hub").RESTConfig(), hub.DeployOptions{})
	if err != nil {
		return fmt.Errorf("deploying the hub: %w", err)
	}
	east := env.Cluster("east")
	if _, err := cluster.Join(ctx, east.RESTConfig(), cluster.JoinOptions{BrokerInfo: info, ClusterID: "east", PodCIDRs: []string{east.PodCIDR.String()}}); err != nil {
		return fmt.Errorf("joining east: %w", err)
	}
	c, err := client.New(east.RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		return err
	}
	// Another gateway node holds the Lease for an hour: the measured gateway stands by.
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.SystemNamespace, Name: v1alpha1.GatewayLeaseName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("gw-other"), LeaseDurationSeconds: ptr.To(int32(3600)),
			AcquireTime: ptr.To(metav1.NewMicroTime(time.Now())), RenewTime: ptr.To(metav1.NewMicroTime(time.Now()))},
	}
	if err := c.Create(ctx, lease); err != nil {
		return err
	}
	// Its Node, which the route agent reads for the address to route via: with no remote
	// subnets mirrored (no active gateway), it routes nothing and stays idle.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gw-other"}}
	if err := c.Create(ctx, node); err != nil {
		return err
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.11"}}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error { return c.Status().Update(ctx, node) }); err != nil {
		return err
	}
	results := map[string][]int64{}
	for r := range rounds {
		rss, err := round(dir, bin, east.Kubeconfig, idle)
		if err != nil {
			return fmt.Errorf("round %d: %w", r+1, err)
		}
		fmt.Printf("round %d:", r+1)
		for i, name := range components {
			results[name] = append(results[name], rss[i])
			fmt.Printf(" %s %.1f MiB;", name, mib(rss[i]))
		}
		fmt.Println()
	}
	fmt.Printf("median of %d rounds, VmRSS after %s idle:\n", rounds, idle)
	for _, name := range components {
		v := slices.Sorted(slices.Values(results[name]))
		fmt.Printf("  %-18s %.1f MiB\n", name, mib(v[len(v)/2]))
	}
	return nil
}

// round starts the components, waits idle, and returns each one's VmRSS in bytes.
func round(dir, bin, kubeconfig string, idle time.Duration) ([]int64, error) {
	agent, dns := filepath.Join(bin, "octopus-agent"), filepath.Join(bin, "octopus-dns")
	ports := make([]string, 6)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = "127.0.0.1:" + strconv.Itoa(p)
	}
	corefile := fmt.Sprintf(`clusterset.local:%s {
    bind 127.0.0.1
    errors
    health %s
    ready %s
    prometheus %s
    crossdns clusterset.local {
        kubeconfig %s
    }
}
`, strings.TrimPrefix(ports[3], "127.0.0.1:"), ports[4], ports[5], ports[2], kubeconfig)
	conf := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(conf, []byte(corefile), 0o600); err != nil {
		return nil, err
	}
	argvs := [][]string{
		{agent, "controller", "--kubeconfig=" + kubeconfig, "--metrics-bind-address=" + ports[0]},
		{agent, "gateway", "--kubeconfig=" + kubeconfig, "--node-name=gw1", "--liveness-port=0", "--metrics-bind-address=" + ports[1]},
		{agent, "route-agent", "--kubeconfig=" + kubeconfig, "--node-name=worker1", "--metrics-bind-address=0"},
		{dns, "-conf", conf},
	}
	var cmds []*exec.Cmd
	defer func() {
		for _, cmd := range cmds {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	for i, argv := range argvs {
		log, err := os.Create(filepath.Join(dir, fmt.Sprintf("component-%d.log", i)))
		if err != nil {
			return nil, err
		}
		defer func() { _ = log.Close() }()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("starting %s: %w", components[i], err)
		}
		cmds = append(cmds, cmd)
	}
	time.Sleep(idle)
	var out []int64
	for i, cmd := range cmds {
		rss, err := vmRSS(cmd.Process.Pid)
		if err != nil {
			log, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("component-%d.log", i)))
			return nil, fmt.Errorf("%s (did it exit?): %w\n%s", components[i], err, log)
		}
		out = append(out, rss)
	}
	return out, nil
}

// vmRSS reads the resident set of pid from /proc/<pid>/status, in bytes.
func vmRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmRSS line: the process has exited")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
