package lab_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/octopus-mcs/octopus/internal/bench/stats"
	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/procfs"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

var (
	leaseLoad     = flag.Int("lease-load", 100, "BenchmarkLeaseUnderLoad: busy processes run beside the election")
	leaseLoadNice = flag.Int("lease-load-nice", 0, "BenchmarkLeaseUnderLoad: the busy processes' nice value (the suite's fast tier runs at 19)")
	leaseFor      = flag.Duration("lease-for", 3*time.Minute, "BenchmarkLeaseUnderLoad: how long the election runs under load")
)

// BenchmarkLeaseUnderLoad asks whether the lab's gateway Lease timings (lab.GatewayTimings)
// hold on a loaded machine: two candidates elect through a Lease on a real API server, with
// those timings and client-go's elector as the gateways use it (internal/gateway/election.go),
// while -lease-load busy processes at -lease-load-nice keep every core runnable. A Lease that
// holds has one leader for the whole run: no leader change, and the longest time between two
// renewals stays well under RenewDeadline. It reports leader changes, renewal latency
// (p50, p99, max) and the longest gap between renewals, with the load average at the end.
//
//	go test -run '^$' -bench BenchmarkLeaseUnderLoad -benchtime 1x ./internal/lab -lease-load 100
func BenchmarkLeaseUnderLoad(b *testing.B) {
	env := testenv.ControlPlanes(b, "c1")
	cfg := env.Cluster("c1").RESTConfig()
	stopLoad := startBusyLoad(b, *leaseLoad, *leaseLoadNice)
	defer stopLoad()
	t := lab.GatewayTimings
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), *leaseFor)
		var (
			mu       sync.Mutex
			renewals []time.Duration // latency of each Lease update by the leader
			lastOK   time.Time
			maxGap   time.Duration
			leaders  []string
		)
		var wg sync.WaitGroup
		for _, id := range []string{"gateway-a", "gateway-b"} {
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				b.Fatal(err)
			}
			lock := &timedLock{Interface: &resourcelock.LeaseLock{
				LeaseMeta:  metav1.ObjectMeta{Namespace: "kube-system", Name: "lease-under-load"},
				Client:     cs.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: id},
			}, observe: func(took time.Duration, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					return
				}
				now := time.Now()
				renewals = append(renewals, took)
				if !lastOK.IsZero() && now.Sub(lastOK) > maxGap {
					maxGap = now.Sub(lastOK)
				}
				lastOK = now
			}}
			le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
				Lock: lock, LeaseDuration: t.LeaseDuration, RenewDeadline: t.RenewDeadline, RetryPeriod: t.RetryPeriod,
				ReleaseOnCancel: true, Name: "lease-under-load",
				Callbacks: leaderelection.LeaderCallbacks{
					OnStartedLeading: func(context.Context) {},
					OnStoppedLeading: func() {},
					OnNewLeader: func(who string) {
						mu.Lock()
						defer mu.Unlock()
						if len(leaders) == 0 || leaders[len(leaders)-1] != who {
							leaders = append(leaders, who)
						}
					},
				},
			})
			if err != nil {
				b.Fatal(err)
			}
			wg.Go(func() { le.Run(ctx) })
		}
		wg.Wait()
		cancel()
		mu.Lock()
		slices.Sort(renewals)
		changes := max(len(leaders)-1, 0)
		if len(renewals) == 0 {
			b.Fatal("no Lease update succeeded")
		}
		pct := func(p float64) float64 {
			return float64(stats.Percentile(renewals, p*100).Microseconds()) / 1000
		}
		b.ReportMetric(float64(changes), "leader-changes")
		b.ReportMetric(pct(0.5), "renew-p50-ms")
		b.ReportMetric(pct(0.99), "renew-p99-ms")
		b.ReportMetric(pct(1), "renew-max-ms")
		b.ReportMetric(maxGap.Seconds(), "max-gap-s")
		fmt.Fprintf(os.Stderr, "BenchmarkLeaseUnderLoad: %d busy processes at nice %d for %s, load average %s: %d renewals, leaders %v, longest gap %.2fs (RenewDeadline %s, LeaseDuration %s)\n",
			*leaseLoad, *leaseLoadNice, *leaseFor, procfs.LoadAverage(), len(renewals), leaders, maxGap.Seconds(), t.RenewDeadline, t.LeaseDuration)
		mu.Unlock()
	}
}

// timedLock reports how long each Lease update took and whether it succeeded: the leader's
// renewals (a candidate that does not hold the Lease only reads it).
type timedLock struct {
	resourcelock.Interface
	observe func(took time.Duration, err error)
}

func (l *timedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	begin := time.Now()
	err := l.Interface.Update(ctx, r)
	l.observe(time.Since(begin), err)
	return err
}

// startBusyLoad starts n shell loops that never sleep, at the given nice value, each in its
// own process group, and returns what stops them (by PID).
func startBusyLoad(tb testing.TB, n, nice int) func() {
	tb.Helper()
	var cmds []*exec.Cmd
	stop := func() {
		for _, c := range cmds {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			_ = c.Wait()
		}
		cmds = nil
	}
	for range n {
		c := exec.Command("nice", "-n", strconv.Itoa(nice), "sh", "-c", "while :; do :; done")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			stop()
			tb.Fatalf("starting busy load: %v", err)
		}
		cmds = append(cmds, c)
	}
	return stop
}
