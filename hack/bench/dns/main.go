// Command dns benchmarks octopus-dns (crossdns fed by a real API server) against stock CoreDNS
// v1.15.0 serving the same records from its file plugin (built from the pinned wrapper module
// in ./coredns), on the same machine and the same pinned CPU, in one run:
//
//   - throughput (dnsperf, unthrottled) and latency p50/p99 (dnsperf at a fixed rate, per-query
//     latencies from -v) for a mix of ClusterSetIP, headless and NXDOMAIN queries, over 1,000
//     and 10,000 services; medians over rounds, the servers in a rotating order;
//   - freshness: time from an EndpointSlice update (from the start of the API call) to octopus-dns
//     answering with the change;
//   - the floors: the same dnsperf runs against a responder that does no DNS work at all (it
//     flips the query into an NXDOMAIN reply), pinned like the servers, and against the same
//     responder busy per query for as much CPU time as octopus-dns spends answering (the
//     difference of the two's time per query, saturated) but doing nothing else: no
//     allocation, no goroutine, no garbage collector. No server can do better than the first
//     on this machine, nor one as costly as octopus-dns than the second; they are the
//     controls that say how much of a p99 is the machine's.
//
// Run from the repository root as root or not (nothing here needs privileges):
//
//	go run ./hack/bench/dns -sizes 1000,10000 -rounds 3 -duration 10s
//
// It prints a Markdown report for docs/benchmarks.md. Needs dnsperf and taskset.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/config/crd"
	"github.com/octopus-mcs/octopus/internal/bench/stats"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/lab/controlplane"
	"github.com/octopus-mcs/octopus/internal/procfs"
)

const (
	zone       = "clusterset.local."
	namespaces = 10
	ttl        = 5
)

type options struct {
	sizes              []int
	rounds             int
	duration           time.Duration
	rate               int
	serverCPU          string
	clientCPU          string
	freshnessSamples   int
	floor              bool
	workdir, repoRoot  string
	octopusDNS, stockD string
}

// floorServerArg, as the first argument, makes this program the floor responder instead.
const floorServerArg = "floor-server"

func main() {
	if len(os.Args) == 4 && os.Args[1] == floorServerArg {
		if err := serveFloor(os.Args[2], os.Args[3]); err != nil {
			fatalf("floor responder: %v", err)
		}
		return
	}
	var o options
	sizes := flag.String("sizes", "1000,10000", "numbers of services, comma-separated")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds per size and server; the report gives medians")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "length of one dnsperf run")
	flag.IntVar(&o.rate, "rate", 10000, "queries per second of the latency runs")
	flag.StringVar(&o.serverCPU, "server-cpu", "1", "taskset CPU list for the DNS servers")
	flag.StringVar(&o.clientCPU, "client-cpu", "0", "taskset CPU list for dnsperf")
	flag.IntVar(&o.freshnessSamples, "freshness", 200, "EndpointSlice changes timed for freshness")
	flag.BoolVar(&o.floor, "floor", true, "also measure responders that do no DNS work, idle and busy per query as long as octopus-dns: the floors under any server")
	flag.Parse()
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 10 {
			fatalf("-sizes: %q is not a number of services ≥ 10", s)
		}
		o.sizes = append(o.sizes, n)
	}
	slices.Sort(o.sizes)
	logf.SetLogger(logr.Discard()) // controller-runtime's client would warn that no logger is set
	if err := run(context.Background(), &o); err != nil {
		fatalf("%v", err)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench-dns: "+format+"\n", args...)
	os.Exit(1)
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "==> "+format+"\n", args...)
}

func run(ctx context.Context, o *options) error {
	for _, tool := range []string{"dnsperf", "taskset"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is missing: run hack/install-deps.sh (Debian packages dnsperf, util-linux)", tool)
		}
	}
	var err error
	if o.repoRoot, err = os.Getwd(); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(o.repoRoot, "cmd", "octopus-dns")); err != nil {
		return fmt.Errorf("run from the repository root: %w", err)
	}
	if o.workdir, err = os.MkdirTemp("", "bench-dns-"); err != nil {
		return err
	}
	defer os.RemoveAll(o.workdir)

	progress("building octopus-dns and stock CoreDNS v1.15.0")
	o.octopusDNS, o.stockD = filepath.Join(o.workdir, "octopus-dns"), filepath.Join(o.workdir, "coredns")
	if err := command(ctx, o.repoRoot, "go", "build", "-o", o.octopusDNS, "./cmd/octopus-dns"); err != nil {
		return err
	}
	if err := command(ctx, filepath.Join(o.repoRoot, "hack", "bench", "dns", "coredns"), "go", "build", "-o", o.stockD, "."); err != nil {
		return err
	}

	progress("starting a control plane")
	binDir, err := controlplane.EnsureBinaries(ctx, o.repoRoot, os.Stderr)
	if err != nil {
		return err
	}
	env, err := controlplane.Start(ctx, controlplane.Options{BinDir: binDir, Dir: filepath.Join(o.workdir, "cp"), Log: logr.Discard(), Progress: os.Stderr},
		controlplane.ClusterOptions{Name: "bench", ServiceCIDR: netip.MustParsePrefix("10.200.0.0/16"), PodCIDR: netip.MustParsePrefix("10.100.0.0/16")})
	if err != nil {
		return err
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}()
	cfg := env.Cluster("bench").RESTConfig()
	cfg.QPS, cfg.Burst = 2000, 4000
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		return err
	}
	crds, err := crd.MCS()
	if err != nil {
		return err
	}
	if err := hub.InstallCRDs(ctx, c, crds); err != nil {
		return err
	}
	for i := range namespaces {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName(i)}}); err != nil {
			return err
		}
	}
	kubeconfig := controlplane.KubeconfigPath(env.Dir, "bench")

	report := &strings.Builder{}
	fmt.Fprintf(report, "| services | server | QPS (unthrottled) | p50 at %d QPS | p99 at %d QPS | lost at %d QPS | CPU steal at %d QPS |\n|---|---|---|---|---|---|---|\n", o.rate, o.rate, o.rate, o.rate)
	created := 0
	var fresh []time.Duration
	for _, size := range o.sizes {
		progress("creating services %d..%d", created, size-1)
		if err := createServices(ctx, c, created, size); err != nil {
			return err
		}
		created = size
		rows, f, err := measure(ctx, o, c, kubeconfig, size)
		if err != nil {
			return err
		}
		report.WriteString(rows)
		if size == o.sizes[len(o.sizes)-1] {
			fresh = f
		}
	}
	slices.Sort(fresh)
	fmt.Printf("Machine: %d CPUs (%s); servers pinned to CPU %s, dnsperf to CPU %s; %d rounds of %s per cell, medians.\n\n",
		runtime.NumCPU(), cpuModel(), o.serverCPU, o.clientCPU, o.rounds, o.duration)
	fmt.Print(report.String())
	if len(fresh) > 0 {
		fmt.Printf("\nFreshness over %d services (%d EndpointSlice updates; from the start of the update call to the changed answer): p50 %s, p99 %s, max %s\n",
			o.sizes[len(o.sizes)-1], len(fresh), stats.Percentile(fresh, 50).Round(time.Microsecond), stats.Percentile(fresh, 99).Round(time.Microsecond), fresh[len(fresh)-1].Round(time.Microsecond))
	}
	return nil
}

func nsName(i int) string { return fmt.Sprintf("bench-%d", i) }

// The services: every fifth is headless with three ready endpoints in cluster "east", the rest
// ClusterSetIP. Service i lives in namespace i%namespaces.
func svcName(i int) string      { return fmt.Sprintf("svc-%05d", i) }
func headless(i int) bool       { return i%5 == 4 }
func clusterSetIP(i int) string { return fmt.Sprintf("10.210.%d.%d", i/250, i%250+1) }
func endpointIP(i, k int) string {
	n := i*3 + k
	return fmt.Sprintf("10.100.%d.%d", n/250, n%250+1)
}

func fqdn(i int) string { return svcName(i) + "." + nsName(i%namespaces) + ".svc." + zone }

func createServices(ctx context.Context, c client.Client, from, to int) error {
	work := make(chan int)
	errs := make(chan error, 32)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := range work {
				if err := createService(ctx, c, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for i := from; i < to; i++ {
		select {
		case work <- i:
		case err := <-errs:
			close(work)
			wg.Wait()
			return err
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

func createService(ctx context.Context, c client.Client, i int) error {
	ns, name := nsName(i%namespaces), svcName(i)
	si := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if headless(i) {
		si.Spec = mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.Headless, Ports: []mcsv1beta1.ServicePort{{Name: "pg", Port: 5432, Protocol: corev1.ProtocolTCP}}}
	} else {
		si.Spec = mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, IPs: []string{clusterSetIP(i)},
			Ports: []mcsv1beta1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}
	}
	if err := c.Create(ctx, si); err != nil {
		return fmt.Errorf("creating ServiceImport %s/%s: %w", ns, name, err)
	}
	if !headless(i) {
		return nil
	}
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-east", Labels: map[string]string{
			mcsv1beta1.LabelServiceName: name, mcsv1beta1.LabelSourceCluster: "east", discoveryv1.LabelManagedBy: "bench.octopus.io",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("pg"), Port: ptr.To[int32](5432)}},
	}
	for k := range 3 {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{endpointIP(i, k)}, Hostname: ptr.To(fmt.Sprintf("pod-%d", k)),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	if err := c.Create(ctx, s); err != nil {
		return fmt.Errorf("creating EndpointSlice %s/%s: %w", ns, s.Name, err)
	}
	return nil
}

// zoneFile writes the records crossdns serves for services 0..size-1 as a zone file for the file
// plugin: the same names, types and data (the file plugin also adds the NS to positive answers).
func zoneFile(path string, size int) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "$ORIGIN %s\n$TTL %d\n", zone, ttl)
	fmt.Fprintf(&b, "@ IN SOA ns.dns.%s hostmaster.%s 1 7200 1800 86400 %d\n", zone, zone, ttl)
	fmt.Fprintf(&b, "@ IN NS ns.dns.%s\nns.dns IN A 203.0.113.53\n", zone)
	fmt.Fprintf(&b, "dns-version IN TXT \"1.0.0\"\n")
	for i := range size {
		name := fqdn(i)
		if !headless(i) {
			fmt.Fprintf(&b, "%s IN A %s\n_http._tcp.%s IN SRV 0 100 80 %s\n", name, clusterSetIP(i), name, name)
			continue
		}
		for k := range 3 {
			host := fmt.Sprintf("pod-%d.east.%s", k, name)
			fmt.Fprintf(&b, "%s IN A %s\n%s IN A %s\n_pg._tcp.%s IN SRV 0 33 5432 %s\n", name, endpointIP(i, k), host, endpointIP(i, k), name, host)
		}
	}
	return os.WriteFile(path, b.Bytes(), 0o600)
}

// queryFile writes n dnsperf queries: a third ClusterSetIP A, a third headless A, a third
// names that do not exist (NXDOMAIN), at random services.
func queryFile(path string, size, n int) error {
	r := rand.New(rand.NewPCG(1, uint64(size)))
	var b bytes.Buffer
	for q := range n {
		i := r.IntN(size)
		switch q % 3 {
		case 0:
			for headless(i) {
				i = r.IntN(size)
			}
			fmt.Fprintf(&b, "%s A\n", fqdn(i))
		case 1:
			for !headless(i) {
				i = r.IntN(size)
			}
			fmt.Fprintf(&b, "%s A\n", fqdn(i))
		default:
			fmt.Fprintf(&b, "missing-%d.%s.svc.%s A\n", i, nsName(i%namespaces), zone)
		}
	}
	return os.WriteFile(path, b.Bytes(), 0o600)
}

type server struct {
	name string
	port int
	cmd  *exec.Cmd
}

// startCoreDNS starts a CoreDNS binary with corefile, pinned to the server CPU.
func startCoreDNS(ctx context.Context, o *options, name, bin, corefile string, port int) (*server, error) {
	dir := runDir(o, port)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cf := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(cf, []byte(corefile), 0o600); err != nil {
		return nil, err
	}
	return startServer(ctx, o, name, port, bin, "-conf", cf)
}

// startFloor starts this program as the floor responder, busy for work per query, pinned to
// the server CPU, and waits until it answers.
func startFloor(ctx context.Context, o *options, name string, port int, work time.Duration) (*server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this program to start the floor responder: %w", err)
	}
	s, err := startServer(ctx, o, name, port, self, floorServerArg, fmt.Sprintf("127.0.0.1:%d", port), work.String())
	if err != nil {
		return nil, err
	}
	if err := waitNXDomain(ctx, s); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// runDir holds the Corefile and log of the server on port.
func runDir(o *options, port int) string {
	return filepath.Join(o.workdir, fmt.Sprintf("run-%d", port))
}

func startServer(ctx context.Context, o *options, name string, port int, argv ...string) (*server, error) {
	dir := runDir(o, port)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "taskset", append([]string{"-c", o.serverCPU}, argv...)...)
	cmd.Stdout, cmd.Stderr, cmd.Dir = logf, logf, dir
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	return &server{name: name, port: port, cmd: cmd}, nil
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// waitNXDomain waits until s answers a query, with NXDOMAIN.
func waitNXDomain(ctx context.Context, s *server) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := query(ctx, s.addr(), "missing."+zone)
		if err == nil && r.Rcode == dns.RcodeNameError {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("it answered %s", dns.RcodeToString[r.Rcode])
			}
			return fmt.Errorf("%s is not answering NXDOMAIN on %s after 30 s: %w", s.name, s.addr(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *server) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// query returns the reply to name A from s.
func query(ctx context.Context, addr, name string) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	c := &dns.Client{Timeout: time.Second}
	r, _, err := c.ExchangeContext(ctx, m, addr)
	return r, err
}

func answerKey(r *dns.Msg) string {
	var out []string
	for _, rr := range r.Answer {
		out = append(out, rr.String())
	}
	slices.Sort(out)
	return dns.RcodeToString[r.Rcode] + " " + strings.Join(out, "; ")
}

func measure(ctx context.Context, o *options, c client.Client, kubeconfig string, size int) (string, []time.Duration, error) {
	zf, qf := filepath.Join(o.workdir, "zone"), filepath.Join(o.workdir, "queries")
	if err := zoneFile(zf, size); err != nil {
		return "", nil, err
	}
	if err := queryFile(qf, size, 30000); err != nil {
		return "", nil, err
	}
	// No cache in either: the benchmark compares the backends, not CoreDNS's cache.
	op, sp := 15353, 15354
	octo, err := startCoreDNS(ctx, o, "octopus-dns", o.octopusDNS, fmt.Sprintf("%s:%d {\n bind 127.0.0.1\n crossdns {\n  kubeconfig %s\n  ttl %d\n }\n}\n", zone, op, kubeconfig, ttl), op)
	if err != nil {
		return "", nil, err
	}
	defer octo.stop()
	stock, err := startCoreDNS(ctx, o, "coredns-file", o.stockD, fmt.Sprintf("%s:%d {\n bind 127.0.0.1\n file %s\n}\n", zone, sp, zf), sp)
	if err != nil {
		return "", nil, err
	}
	defer stock.stop()
	servers := []*server{octo, stock}
	if o.floor {
		floor, err := startFloor(ctx, o, "floor (no DNS work)", 15355, 0)
		if err != nil {
			return "", nil, err
		}
		defer floor.stop()
		// What answering costs octopus-dns beyond receiving and sending, per query: the
		// difference of the two servers' times per query when dnsperf keeps them saturated.
		progress("%d services: octopus-dns's CPU time per query", size)
		qpsOcto, _, _, err := dnsperf(ctx, o, octo, qf, 0)
		if err != nil {
			return "", nil, err
		}
		qpsFloor, _, _, err := dnsperf(ctx, o, floor, qf, 0)
		if err != nil {
			return "", nil, err
		}
		work := max(0, time.Duration(float64(time.Second)/qpsOcto-float64(time.Second)/qpsFloor)).Round(100 * time.Nanosecond)
		busy, err := startFloor(ctx, o, fmt.Sprintf("floor + %s of CPU per query (octopus-dns's, without its DNS work)", work), 15356, work)
		if err != nil {
			return "", nil, err
		}
		defer busy.stop()
		servers = append(servers, floor, busy)
	}

	// Both serve everything, and the same answers.
	last := fqdn(size - 1)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		a, errA := query(ctx, octo.addr(), last)
		b, errB := query(ctx, stock.addr(), last)
		if errA == nil && errB == nil && a.Rcode == dns.RcodeSuccess && answerKey(a) == answerKey(b) {
			break
		}
		if time.Now().After(deadline) {
			return "", nil, fmt.Errorf("servers not serving %s after 2 minutes (octopus-dns %v, file %v): %w", last, a, b, errors.Join(errA, errB))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, i := range []int{0, 1, 4, size / 2, size - 2} {
		for _, name := range []string{fqdn(i), "missing." + nsName(0) + ".svc." + zone, "pod-1.east." + fqdn(i)} {
			a, errA := query(ctx, octo.addr(), name)
			b, errB := query(ctx, stock.addr(), name)
			if errA != nil || errB != nil || answerKey(a) != answerKey(b) {
				return "", nil, fmt.Errorf("the servers disagree on %s: octopus-dns %v, file %v (errors: %w)", name, a, b, errors.Join(errA, errB))
			}
		}
	}

	type cell struct{ qps, p50, p99, lost, steal []float64 }
	cells := map[*server]*cell{}
	for round := range o.rounds {
		// Each round starts with another server, so that none is always measured first.
		order := slices.Clone(servers)
		rotate(order, round)
		for _, s := range order {
			progress("%d services, round %d, %s", size, round+1, s.name)
			qps, _, _, err := dnsperf(ctx, o, s, qf, 0)
			if err != nil {
				return "", nil, err
			}
			before, err := procfs.ReadSystemCPU()
			if err != nil {
				return "", nil, err
			}
			_, lat, lost, err := dnsperf(ctx, o, s, qf, o.rate)
			if err != nil {
				return "", nil, err
			}
			after, err := procfs.ReadSystemCPU()
			if err != nil {
				return "", nil, err
			}
			cl := cells[s]
			if cl == nil {
				cl = &cell{}
				cells[s] = cl
			}
			cl.qps = append(cl.qps, qps)
			cl.p50 = append(cl.p50, float64(stats.Percentile(lat, 50)))
			cl.p99 = append(cl.p99, float64(stats.Percentile(lat, 99)))
			cl.lost = append(cl.lost, lost)
			cl.steal = append(cl.steal, stealShare(after.Sub(before)))
		}
	}
	var rows strings.Builder
	for _, s := range servers {
		cl := cells[s]
		fmt.Fprintf(&rows, "| %d | %s | %.0f | %s | %s | %.2f%% | %.1f%% |\n", size, s.name, stats.Median(cl.qps),
			time.Duration(stats.Median(cl.p50)).Round(time.Microsecond), time.Duration(stats.Median(cl.p99)).Round(time.Microsecond), stats.Median(cl.lost), stats.Median(cl.steal))
	}

	progress("%d services: freshness", size)
	fresh, err := freshness(ctx, o, c, octo, size)
	if err != nil {
		return "", nil, err
	}
	return rows.String(), fresh, nil
}

// dnsperf runs dnsperf against s; rate 0 is unthrottled. It returns the QPS, with rate > 0 the
// per-query latencies (from -v), and the share of queries lost in percent.
func dnsperf(ctx context.Context, o *options, s *server, qf string, rate int) (float64, []time.Duration, float64, error) {
	args := []string{"-c", o.clientCPU, "dnsperf", "-s", "127.0.0.1", "-p", strconv.Itoa(s.port), "-d", qf,
		"-l", strconv.Itoa(int(o.duration.Seconds())), "-c", "4", "-q", "200", "-t", "1"}
	if rate > 0 {
		args = append(args, "-Q", strconv.Itoa(rate), "-v")
	}
	cmd := exec.CommandContext(ctx, "taskset", args...)
	out, err := cmd.Output()
	if err != nil {
		return 0, nil, 0, fmt.Errorf("dnsperf against %s: %w", s.name, err)
	}
	var qps, lost float64
	var lat []time.Duration
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "Queries per second:") && len(f) >= 4:
			qps, _ = strconv.ParseFloat(f[3], 64)
		case strings.HasPrefix(line, "Queries lost:") && len(f) >= 4:
			lost, _ = strconv.ParseFloat(strings.Trim(f[3], "(%)"), 64)
		case strings.HasPrefix(line, "> ") && len(f) >= 5:
			// "> NOERROR name A 0.000123"
			if sec, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				lat = append(lat, time.Duration(sec*float64(time.Second)))
			}
		}
	}
	if qps == 0 {
		return 0, nil, 0, fmt.Errorf("dnsperf against %s: no QPS in its output:\n%s", s.name, out)
	}
	if rate > 0 && len(lat) == 0 {
		return 0, nil, 0, fmt.Errorf("dnsperf -v against %s printed no latencies:\n%.2000s", s.name, out)
	}
	slices.Sort(lat)
	return qps, lat, lost, nil
}

// freshness flips the readiness of one endpoint of headless services, one update at a time, and
// times each from the start of the API call to the first changed answer (polled every 200 µs).
func freshness(ctx context.Context, o *options, c client.Client, s *server, size int) ([]time.Duration, error) {
	var out []time.Duration
	// Each service is changed twice, unready then ready again, so that the records end as the
	// zone file of the next size has them.
	for n := range o.freshnessSamples + o.freshnessSamples%2 {
		i := ((n/2)*5 + 4) % size
		if !headless(i) {
			continue
		}
		key := client.ObjectKey{Namespace: nsName(i % namespaces), Name: svcName(i) + "-east"}
		sl := &discoveryv1.EndpointSlice{}
		if err := c.Get(ctx, key, sl); err != nil {
			return nil, err
		}
		before, err := query(ctx, s.addr(), fqdn(i))
		if err != nil {
			return nil, err
		}
		want := len(before.Answer) - 1
		if !*sl.Endpoints[0].Conditions.Ready {
			want = len(before.Answer) + 1
		}
		sl.Endpoints[0].Conditions.Ready = ptr.To(!*sl.Endpoints[0].Conditions.Ready)
		start := time.Now() // the change is made during Update: counting from its start bounds the delay from above
		if err := c.Update(ctx, sl); err != nil {
			return nil, err
		}
		for {
			r, err := query(ctx, s.addr(), fqdn(i))
			if err == nil && len(r.Answer) == want {
				break
			}
			if time.Since(start) > 10*time.Second {
				return nil, fmt.Errorf("the change of %s never showed", key)
			}
			time.Sleep(200 * time.Microsecond)
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// rotate turns s left by n places.
func rotate[T any](s []T, n int) {
	n %= len(s)
	slices.Reverse(s[:n])
	slices.Reverse(s[n:])
	slices.Reverse(s)
}

// stealShare is the share of all CPUs' time, in percent, that the hypervisor gave to others
// during d: time in which nothing of ours ran, whatever its priority.
func stealShare(d procfs.SystemCPU) float64 {
	if d.Total <= 0 {
		return 0
	}
	return 100 * float64(d.Steal) / float64(d.Total)
}

// busy spins until its thread has used d of CPU time: time the hypervisor or the scheduler
// takes away does not count, as it would not for a server's real work.
func busy(d time.Duration) {
	if d <= 0 {
		return
	}
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	end := ts.Nano() + d.Nanoseconds()
	for ts.Nano() < end {
		_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	}
}

// serveFloor answers every UDP query on addr with the query itself turned into an NXDOMAIN
// reply, from one goroutine and one buffer: no parsing, no allocation, no DNS logic. Before
// each reply it spins for work (a duration), standing in for a server's CPU time per query.
func serveFloor(addr, work string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return err
	}
	spin, err := time.ParseDuration(work)
	if err != nil {
		return err
	}
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
	if err != nil {
		return err
	}
	runtime.LockOSThread() // the thread's CPU clock is the goroutine's
	buf := make([]byte, 65535)
	for {
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			return err
		}
		if n < 12 { // shorter than a DNS header
			continue
		}
		busy(spin)
		buf[2] |= 0x80                             // QR: a response
		buf[3] = buf[3]&^0x0f | dns.RcodeNameError // RCODE
		if _, err := c.WriteToUDPAddrPort(buf[:n], from); err != nil {
			return err
		}
	}
}

func command(ctx context.Context, dir, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %v: %w\n%s", name, args, err, out)
	}
	return nil
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			_, v, _ := strings.Cut(l, ":")
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
