package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Timeouts for the steps of Start; the context passed to Start can shorten them. They are
// generous because a loaded 2-core machine starting several API servers is slow, and a step
// that hangs fails with the process log quoted instead of blocking a test forever.
const (
	etcdReadyTimeout      = 60 * time.Second
	apiServerReadyTimeout = 120 * time.Second
	// maxPortAttempts bounds retries when another process takes a port between our probe and
	// the child's bind.
	maxPortAttempts = 3
)

// Stop grace periods: how long a SIGTERM may take before SIGKILL. kube-apiserver drains
// requests and finishes watches; controllers stop their workers; etcd flushes its WAL.
const (
	apiServerStopGrace  = 15 * time.Second
	controllerStopGrace = 5 * time.Second
	etcdStopGrace       = 10 * time.Second
)

// Options configures Start.
type Options struct {
	// BinDir is the directory with the binaries (see EnsureBinaries). Required.
	BinDir string
	// Dir is the state directory: certificates, kubeconfigs, logs, pidfiles and etcd data.
	// Required. Start first removes what an earlier run left there, killing its processes
	// (see CleanupStale), so two environments must not share a Dir.
	Dir string
	// BindAddress is where the API servers listen and what they advertise. Optional, default
	// 127.0.0.1. The lab passes an address of a lab link so that node namespaces reach them.
	BindAddress netip.Addr
	// Log receives structured logs. Optional.
	Log logr.Logger
	// Progress receives one human-readable line per step ("hub: kube-apiserver ready (2.1s)").
	// Optional.
	Progress io.Writer
}

// ClusterOptions describes one control plane.
type ClusterOptions struct {
	// Name identifies the cluster; an RFC 1123 label. It is also the etcd prefix (/<name>) and
	// the context name in the admin kubeconfig.
	Name string
	// ServiceCIDR is the ClusterIP range (kube-apiserver --service-cluster-ip-range). Required.
	ServiceCIDR netip.Prefix
	// SecondaryServiceCIDR is an optional second ClusterIP range of the other address family:
	// with it the API server is dual-stack (--service-cluster-ip-range=<primary>,<secondary>)
	// and allocates both families to Services that ask, so tests of dual-stack Services and
	// imports need no nodes. kube-controller-manager keeps the primary range, which is all
	// node-ipam uses.
	SecondaryServiceCIDR netip.Prefix
	// PodCIDR is the range node-ipam splits into per-node pod CIDRs
	// (kube-controller-manager --cluster-cidr, /24 per IPv4 node, /64 per IPv6 node). Required.
	PodCIDR netip.Prefix
	// SecondaryPodCIDR is an optional second pod range of SecondaryServiceCIDR's family,
	// which it needs: with it kube-controller-manager is dual-stack too (--cluster-cidr and
	// --service-cluster-ip-range of both families) and node-ipam gives every node a pod CIDR
	// of each family (/24 and /64).
	SecondaryPodCIDR netip.Prefix
	// Scheduler also runs a kube-scheduler. The lab will need it once it runs pods; most tests create objects
	// without scheduling pods and save the CPU.
	Scheduler bool
}

// Environment is a running set of control planes sharing one etcd.
type Environment struct {
	// Dir is the absolute state directory.
	Dir string
	// Clusters are the control planes, in the order given to Start.
	Clusters []*ControlPlane

	bindAddr netip.Addr
	binDir   string
	log      logr.Logger
	progress *lineWriter
	etcd     *process
	etcdURL  string

	// extras are processes started with StartProcess; stopping refuses new ones once Stop
	// has begun.
	extrasMu sync.Mutex
	extras   []*process
	stopping bool

	stopOnce sync.Once
	stopErr  error
}

// Start starts one etcd and, per cluster, a kube-apiserver and a kube-controller-manager (and
// a kube-scheduler if asked), and returns when every API server answers /readyz. API servers
// start concurrently. The processes outlive ctx, which only bounds the start; call Stop to end
// them. If Start fails it stops whatever it started. Controller managers and schedulers are
// restarted after a crash (they exit when their API server vanishes while they initialise),
// the way a kubelet restarts them; etcd and API servers are not.
func Start(ctx context.Context, opts Options, clusters ...ClusterOptions) (*Environment, error) {
	begin := time.Now()
	env, err := newEnvironment(opts, clusters)
	if err != nil {
		return nil, err
	}
	if err := env.start(ctx); err != nil {
		// Stop's error repeats the exits that made the start fail; err already has them.
		if serr := env.Stop(); serr != nil {
			env.log.V(1).Info("Stopping after a failed start reported errors", "dir", env.Dir, "error", serr)
		}
		return nil, err
	}
	env.progress.printf("%d control plane(s) ready in %s (%.1fs)", len(env.Clusters), env.Dir, time.Since(begin).Seconds())
	return env, nil
}

// newEnvironment validates the options, clears a stale state directory and writes certificates.
func newEnvironment(opts Options, clusters []ClusterOptions) (*Environment, error) {
	if opts.BinDir == "" {
		return nil, errors.New("starting control planes: Options.BinDir is required (see EnsureBinaries)")
	}
	if opts.Dir == "" {
		return nil, errors.New("starting control planes: Options.Dir is required")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("starting control planes: state dir %s: %w", opts.Dir, err)
	}
	bind := opts.BindAddress
	if !bind.IsValid() {
		bind = netip.MustParseAddr("127.0.0.1")
	}
	bind = bind.Unmap()
	if bind.IsUnspecified() {
		return nil, fmt.Errorf("starting control planes: BindAddress %s is unspecified; API servers advertise it, so give one address", bind)
	}
	if err := validateClusters(clusters); err != nil {
		return nil, fmt.Errorf("starting control planes: %w", err)
	}
	needed := []string{binEtcd, binAPIServer, binControllerManager}
	for _, c := range clusters {
		if c.Scheduler {
			needed = append(needed, binScheduler)
			break
		}
	}
	for _, b := range needed {
		if _, err := os.Stat(filepath.Join(opts.BinDir, b)); err != nil {
			return nil, fmt.Errorf("starting control planes: %s not found in %s (build it with EnsureBinaries or hack/k8s-binaries.sh): %w", b, opts.BinDir, err)
		}
	}

	log := opts.Log
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	if err := CleanupStale(dir); err != nil {
		return nil, fmt.Errorf("starting control planes: cleaning up after an earlier run: %w", err)
	}
	for _, d := range []string{pidsDir, logsDir, etcdDataDir, clustersDir} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("starting control planes: creating %s: %w", d, err)
		}
	}
	// Children get the canonical path so that CleanupStale, which canonicalises too, finds
	// them in /proc/<pid>/cmdline whichever alias of the directory it is given.
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		return nil, fmt.Errorf("starting control planes: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, markerFile), []byte("state of internal/lab/controlplane; safe to delete when no process uses it\n"), 0o644); err != nil {
		return nil, fmt.Errorf("starting control planes: %w", err)
	}

	env := &Environment{
		Dir:      dir,
		bindAddr: bind,
		binDir:   opts.BinDir,
		log:      log,
		progress: &lineWriter{w: opts.Progress},
	}
	env.etcd = env.newProcess("", binEtcd)
	for _, c := range clusters {
		cp, err := newControlPlane(env, c)
		if err != nil {
			return nil, fmt.Errorf("starting control planes: cluster %s: %w", c.Name, err)
		}
		env.Clusters = append(env.Clusters, cp)
	}
	return env, nil
}

func validateClusters(clusters []ClusterOptions) error {
	if len(clusters) == 0 {
		return errors.New("no clusters given")
	}
	seen := map[string]bool{}
	var errs []error
	for _, c := range clusters {
		if msgs := validation.IsDNS1123Label(c.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("cluster name %q: %s", c.Name, strings.Join(msgs, "; ")))
			continue
		}
		if seen[c.Name] {
			errs = append(errs, fmt.Errorf("cluster name %q given twice", c.Name))
		}
		seen[c.Name] = true
		if err := validateCIDRs(c.ServiceCIDR, c.PodCIDR); err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", c.Name, err))
		}
		if err := validateSecondaryServiceCIDR(c.ServiceCIDR, c.SecondaryServiceCIDR, c.PodCIDR); err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", c.Name, err))
		}
		if err := validateSecondaryPodCIDR(c.SecondaryServiceCIDR, c.SecondaryPodCIDR); err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", c.Name, err))
		}
	}
	return errors.Join(errs...)
}

// validateCIDRs checks what kube-apiserver and kube-controller-manager would otherwise reject
// only at run time, in a log file.
func validateCIDRs(service, pod netip.Prefix) error {
	if !service.IsValid() {
		return errors.New("ServiceCIDR is required")
	}
	if !pod.IsValid() {
		return errors.New("PodCIDR is required")
	}
	// kube-apiserver refuses service ranges larger than /12 (IPv4) or /108 (IPv6).
	if minBits := map[bool]int{true: 12, false: 108}[service.Addr().Is4()]; service.Bits() < minBits {
		return fmt.Errorf("ServiceCIDR %s is too large for kube-apiserver: use /%d or smaller", service, minBits)
	}
	// node-ipam gives each node a /24 (IPv4) or /64 (IPv6) and allows at most 16 bits between
	// the cluster and the node mask.
	nodeBits := map[bool]int{true: 24, false: 64}[pod.Addr().Is4()]
	if pod.Bits() >= nodeBits || nodeBits-pod.Bits() > 16 {
		return fmt.Errorf("PodCIDR %s must be between /%d and /%d so node-ipam can cut /%d node ranges", pod, nodeBits-16, nodeBits-1, nodeBits)
	}
	if service.Overlaps(pod) {
		return fmt.Errorf("ServiceCIDR %s overlaps PodCIDR %s", service, pod)
	}
	return nil
}

// validateSecondaryServiceCIDR checks ClusterOptions.SecondaryServiceCIDR, when set, as kube-apiserver
// would: the other family than the primary range, within the size it accepts.
func validateSecondaryServiceCIDR(primary, secondary, pod netip.Prefix) error {
	if !secondary.IsValid() {
		return nil
	}
	if secondary.Addr().Is4() == primary.Addr().Is4() {
		return fmt.Errorf("SecondaryServiceCIDR %s is of the same address family as ServiceCIDR %s: a dual-stack API server takes one range per family", secondary, primary)
	}
	if minBits := map[bool]int{true: 12, false: 108}[secondary.Addr().Is4()]; secondary.Bits() < minBits {
		return fmt.Errorf("SecondaryServiceCIDR %s is too large for kube-apiserver: use /%d or smaller", secondary, minBits)
	}
	if secondary.Overlaps(pod) {
		return fmt.Errorf("SecondaryServiceCIDR %s overlaps PodCIDR %s", secondary, pod)
	}
	return nil
}

// validateSecondaryPodCIDR checks ClusterOptions.SecondaryPodCIDR, when set: it needs the
// secondary service range (a dual-stack controller manager takes both families of both) and
// is checked against it as the primary ranges are.
func validateSecondaryPodCIDR(secondaryService, secondaryPod netip.Prefix) error {
	if !secondaryPod.IsValid() {
		return nil
	}
	if !secondaryService.IsValid() {
		return fmt.Errorf("SecondaryPodCIDR %s needs a SecondaryServiceCIDR of its family", secondaryPod)
	}
	if secondaryPod.Addr().Is4() != secondaryService.Addr().Is4() {
		return fmt.Errorf("secondary ranges: SecondaryPodCIDR %s is not of the family of SecondaryServiceCIDR %s", secondaryPod, secondaryService)
	}
	if err := validateCIDRs(secondaryService, secondaryPod); err != nil {
		return fmt.Errorf("secondary ranges: %w", err)
	}
	return nil
}

// newProcess prepares a supervised child. Its log and pidfile are named <cluster>-<binary>, or
// <binary> for the shared etcd (cluster == "").
func (e *Environment) newProcess(cluster, binary string) *process {
	name, file := binary, binary
	if cluster != "" {
		name, file = cluster+" "+binary, cluster+"-"+binary
	}
	return &process{
		name:    name,
		binary:  filepath.Join(e.binDir, binary),
		logPath: filepath.Join(e.Dir, logsDir, file+".log"),
		pidPath: filepath.Join(e.Dir, pidsDir, file+".pid"),
		log:     e.log,
	}
}

func (e *Environment) start(ctx context.Context) error {
	if err := e.startEtcd(ctx); err != nil {
		return err
	}
	errs := make([]error, len(e.Clusters))
	var wg sync.WaitGroup
	for i, c := range e.Clusters {
		wg.Go(func() { errs[i] = c.start(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startEtcd starts the etcd all API servers share. It listens on loopback only: the API
// servers run in the root network namespace, and nothing else should reach it.
func (e *Environment) startEtcd(ctx context.Context) error {
	begin := time.Now()
	loopback := netip.MustParseAddr("127.0.0.1")
	dataDir := filepath.Join(e.Dir, etcdDataDir)
	for attempt := 1; ; attempt++ {
		clientPort, err := freePort(loopback)
		if err != nil {
			return err
		}
		peerPort, err := freePort(loopback)
		if err != nil {
			return err
		}
		clientURL := fmt.Sprintf("http://%s", netip.AddrPortFrom(loopback, clientPort))
		peerURL := fmt.Sprintf("http://%s", netip.AddrPortFrom(loopback, peerPort))
		e.etcd.args = []string{
			"--name=octopus",
			"--data-dir=" + dataDir,
			"--listen-client-urls=" + clientURL,
			"--advertise-client-urls=" + clientURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=octopus=" + peerURL,
			// Test and lab data is disposable; fsync would dominate start-up time on slow disks.
			"--unsafe-no-fsync=true",
			"--log-level=warn",
		}
		r, err := e.etcd.start()
		if err != nil {
			return err
		}
		err = e.etcd.waitReady(ctx, r, etcdReadyTimeout, func(ctx context.Context) error {
			return httpOK(ctx, http.DefaultClient, clientURL+"/health")
		})
		if err == nil {
			e.etcdURL = clientURL
			e.progress.printf("etcd ready (%.1fs)", time.Since(begin).Seconds())
			return nil
		}
		if attempt < maxPortAttempts && isClosed(r.done) && addressInUse(e.etcd.logPath) {
			e.log.Info("Port taken before etcd bound it, retrying with new ports", "attempt", attempt)
			e.etcd.forgetUnexpectedExits()
			// The data dir records the member's peer URL; start from scratch with the new one.
			if err := os.RemoveAll(dataDir); err != nil {
				return fmt.Errorf("resetting etcd data dir: %w", err)
			}
			continue
		}
		return fmt.Errorf("starting etcd: %w", err)
	}
}

// Cluster returns the control plane with the given name, or nil.
func (e *Environment) Cluster(name string) *ControlPlane {
	for _, c := range e.Clusters {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Stop stops every process the environment started: controllers and schedulers first, then
// API servers, then etcd, each group concurrently with SIGTERM and a grace period before
// SIGKILL. It is idempotent; later calls return the first call's result. The error also
// reports every process that had exited without being asked to, quoting its log. Stop keeps
// Dir (logs are useful after a failure); CleanupStale removes it.
func (e *Environment) Stop() error {
	e.stopOnce.Do(func() { e.stopErr = e.stop() })
	return e.stopErr
}

func (e *Environment) stop() error {
	begin := time.Now()
	// Extra processes (kube-proxy, kubelets) are clients of the API servers: stop them
	// first so that they don't log connection errors while the servers go away.
	errs := []error{e.stopExtras()}
	var controllers, apiservers []*process
	for _, c := range e.Clusters {
		controllers = append(controllers, c.controllerManager)
		if c.scheduler != nil {
			controllers = append(controllers, c.scheduler)
		}
		apiservers = append(apiservers, c.apiserver)
	}
	errs = append(errs, stopAll(controllers, controllerStopGrace))
	grace := apiServerStopGrace
	if e.etcd.current() == nil {
		// Without etcd an API server's graceful shutdown hangs until the grace period ends,
		// and there is nothing left to write anyway.
		grace = 0
	}
	errs = append(errs, stopAll(apiservers, grace))
	errs = append(errs, e.etcd.stop(etcdStopGrace))
	for _, p := range append(append(controllers, apiservers...), e.etcd) {
		errs = append(errs, p.unexpectedExits())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stopping control planes in %s: %w", e.Dir, err)
	}
	e.progress.printf("control planes stopped (%.1fs)", time.Since(begin).Seconds())
	return nil
}

func stopAll(ps []*process, grace time.Duration) error {
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { errs[i] = p.stop(grace) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// httpOK GETs url and succeeds on status 200.
func httpOK(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// lineWriter serialises progress lines from concurrent cluster starts.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) printf(format string, args ...any) {
	if l.w == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format+"\n", args...)
}
