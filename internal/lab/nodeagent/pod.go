package nodeagent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/octopus-mcs/octopus/internal/lab/labnet"
)

// Probe defaults, as in the Pod API.
const (
	defaultProbePeriod  = 10 * time.Second
	defaultProbeTimeout = time.Second
	defaultFailures     = 3
)

// pod is a pod the agent runs: its network and its containers.
type pod struct {
	agent       *Agent
	key         string
	uid         types.UID
	node        Node
	hostNetwork bool
	ip          netip.Addr
	net         labnet.PodNet // unset for hostNetwork pods
	netnsPath   string
	dir         string
	created     time.Time

	containers   []*container
	cancelProbes context.CancelFunc
	mounts       *podMounts // nil when the pod uses the node's files
	// volumeErr, when set, keeps every container waiting with it (a volume the lab
	// cannot provide).
	volumeErr     string
	cancelVolumes context.CancelFunc

	mu     sync.Mutex
	tokens map[string]issuedToken // service account tokens by volume/path
	ready  map[string]bool        // container name → readiness (probed containers only)
	probed map[string]bool        // containers with a readiness probe the lab runs
	// started holds, for each container with a startup probe, the start time of the run
	// whose startup probe passed: until then the run is not started, not ready, and its
	// liveness and readiness probes wait, as with the kubelet.
	started         map[string]time.Time
	hasStartupProbe map[string]bool // containers with a startup probe the lab runs
	tornDown        bool
}

// startContainers prepares and starts every container, and their probes.
func (p *pod) startContainers(obj *corev1.Pod) {
	p.ready, p.probed = map[string]bool{}, map[string]bool{}
	p.started, p.hasStartupProbe = map[string]time.Time{}, map[string]bool{}
	policy := obj.Spec.RestartPolicy
	if policy == "" {
		policy = corev1.RestartPolicyAlways
	}
	onChange := func() { p.agent.enqueue(p.key) }
	for _, c := range obj.Spec.Containers {
		spec := p.containerSpec(obj, c, policy)
		p.containers = append(p.containers, newContainer(spec, p.agent.opts.Start, onChange))
		p.probed[c.Name] = runnable(c.ReadinessProbe)
		p.hasStartupProbe[c.Name] = runnable(c.StartupProbe)
	}
	for _, c := range p.containers {
		c.run()
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancelProbes = cancel
	for i, c := range obj.Spec.Containers {
		for _, kind := range []probeKind{startupProbe, livenessProbe, readinessProbe} {
			if pr := kind.of(c); runnable(pr) {
				go p.probeLoop(ctx, p.containers[i], c, kind, killGrace(obj, pr))
			}
		}
	}
}

// runnable tells whether the lab runs the probe: TCP, HTTP and exec, not gRPC.
func runnable(pr *corev1.Probe) bool {
	return pr != nil && (pr.TCPSocket != nil || pr.HTTPGet != nil || pr.Exec != nil)
}

// killGrace is how long a container killed for a failed probe gets between SIGTERM and
// SIGKILL: the probe's own terminationGracePeriodSeconds, else the pod's.
func killGrace(obj *corev1.Pod, pr *corev1.Probe) time.Duration {
	switch {
	case pr.TerminationGracePeriodSeconds != nil:
		return time.Duration(*pr.TerminationGracePeriodSeconds) * time.Second
	case obj.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*obj.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return corev1.DefaultTerminationGracePeriodSeconds * time.Second
}

// isStartedLocked tells whether the container's run that began at run has started: it has no
// startup probe, or its startup probe passed for this run. p.mu is held.
func (p *pod) isStartedLocked(name string, run time.Time) bool {
	return !p.hasStartupProbe[name] || p.started[name].Equal(run)
}

func (p *pod) isStarted(name string, run time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.isStartedLocked(name, run)
}

// containerSpec resolves one container; problems become its waiting reason.
func (p *pod) containerSpec(obj *corev1.Pod, c corev1.Container, policy corev1.RestartPolicy) containerSpec {
	spec := containerSpec{
		name: c.Name, image: c.Image, netns: p.netnsPath, policy: policy,
		logDir:  filepath.Join(p.dir, c.Name),
		pidPath: filepath.Join(p.dir, c.Name+".pid"),
		workDir: "/",
	}
	if c.WorkingDir != "" {
		if fi, err := os.Stat(c.WorkingDir); err == nil && fi.IsDir() {
			spec.workDir = c.WorkingDir
		}
	}
	if p.volumeErr != "" {
		spec.setupReason, spec.setupErr = reasonConfigError, p.volumeErr
		return spec
	}
	if len(obj.Spec.InitContainers) > 0 {
		spec.setupReason, spec.setupErr = reasonConfigError, "init containers are not supported by the lab node agent"
		return spec
	}
	env, err := containerEnv(p.agent.opts.Cluster, obj, c, p.ip.String())
	if err != nil {
		spec.setupReason, spec.setupErr = reasonConfigError, err.Error()
		return spec
	}
	spec.env = append(p.agent.serviceEnv(env), env...)
	// $(VAR) in command and args refers to the container's env, as in the kubelet.
	c.Command, c.Args = expandAll(c.Command, env), expandAll(c.Args, env)
	argv, err := p.agent.opts.Images.Argv(c)
	if err != nil {
		spec.setupReason, spec.setupErr = reasonRunError, err.Error()
		if errors.Is(err, errBinaryNotFound) {
			spec.setupReason = ReasonBinaryNotFound
		}
		return spec
	}
	spec.argv = p.mounts.wrap(argv)
	return spec
}

// stop ends the probes and the containers (concurrently, each within grace).
func (p *pod) stop(grace time.Duration) {
	if p.cancelProbes != nil {
		p.cancelProbes()
	}
	if p.cancelVolumes != nil {
		p.cancelVolumes()
	}
	var wg sync.WaitGroup
	for _, c := range p.containers {
		wg.Go(func() { c.stop(grace) })
	}
	wg.Wait()
	p.mounts.stop()
	p.mu.Lock()
	p.tornDown = true
	p.mu.Unlock()
}

func (p *pod) isTornDown() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tornDown
}

// status computes the pod's status from its containers, keeping the transition times of
// conditions that did not change.
func (p *pod) status(obj *corev1.Pod) corev1.PodStatus {
	s := corev1.PodStatus{
		HostIP:    p.node.LANAddr.String(),
		HostIPs:   []corev1.HostIP{{IP: p.node.LANAddr.String()}},
		PodIP:     p.ip.String(),
		PodIPs:    []corev1.PodIP{{IP: p.ip.String()}},
		StartTime: obj.Status.StartTime,
		QOSClass:  obj.Status.QOSClass,
	}
	if s.StartTime == nil {
		s.StartTime = ptrTo(metav1.NewTime(p.created))
	}
	p.mu.Lock()
	allReady := true
	for _, c := range p.containers {
		running, since := c.running()
		started := running && p.isStartedLocked(c.spec.name, since)
		ready := started
		if p.probed[c.spec.name] {
			ready = started && p.ready[c.spec.name]
		}
		cs := c.status(ready, started)
		allReady = allReady && cs.Ready
		s.ContainerStatuses = append(s.ContainerStatuses, cs)
	}
	p.mu.Unlock()
	s.Phase = phase(s.ContainerStatuses)
	if s.Phase == corev1.PodSucceeded || s.Phase == corev1.PodFailed {
		allReady = false
	}
	cond := func(t corev1.PodConditionType, ok bool, reason string) corev1.PodCondition {
		c := corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, Reason: reason}
		if ok {
			c.Status, c.Reason = corev1.ConditionTrue, ""
		}
		c.LastTransitionTime = metav1.Now()
		for _, old := range obj.Status.Conditions {
			if old.Type == t && old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			}
		}
		return c
	}
	sandbox := !p.isTornDown()
	s.Conditions = []corev1.PodCondition{
		cond(corev1.PodReadyToStartContainers, sandbox, ""),
		cond(corev1.PodInitialized, true, ""),
		cond(corev1.ContainersReady, allReady, "ContainersNotReady"),
		cond(corev1.PodReady, allReady, "ContainersNotReady"),
	}
	for _, old := range obj.Status.Conditions {
		if old.Type == corev1.PodScheduled {
			s.Conditions = append([]corev1.PodCondition{old}, s.Conditions...)
		}
	}
	return s
}

// phase follows the kubelet's rules: Pending while a container never ran, Running while one
// runs or will be restarted, then Failed if one failed, else Succeeded.
func phase(statuses []corev1.ContainerStatus) corev1.PodPhase {
	var neverRan, running, failed int
	for _, s := range statuses {
		switch {
		case s.State.Running != nil:
			running++
		case s.State.Terminated != nil:
			if s.State.Terminated.ExitCode != 0 {
				failed++
			}
		case s.LastTerminationState.Terminated != nil:
			running++ // waiting to restart
		default:
			neverRan++
		}
	}
	switch {
	case neverRan > 0:
		return corev1.PodPending
	case running > 0:
		return corev1.PodRunning
	case failed > 0:
		return corev1.PodFailed
	}
	return corev1.PodSucceeded
}

// probeKind is one of a container's three probes. They run alike and differ in what their
// result changes: readiness sets the container's Ready; liveness kills the run after
// FailureThreshold failures in a row; startup marks the run started once it passes (until
// then the other two wait) and kills it after FailureThreshold failures, as with the kubelet.
type probeKind string

const (
	startupProbe   probeKind = "startup"
	livenessProbe  probeKind = "liveness"
	readinessProbe probeKind = "readiness"
)

func (k probeKind) of(c corev1.Container) *corev1.Probe {
	switch k {
	case startupProbe:
		return c.StartupProbe
	case livenessProbe:
		return c.LivenessProbe
	}
	return c.ReadinessProbe
}

// probeLoop runs one of a container's probes at its period and acts on the results
// (SuccessThreshold and FailureThreshold applied) for each run of the container; a container
// killed for a failed probe is restarted by its restart policy, as after any exit.
func (p *pod) probeLoop(ctx context.Context, c *container, spec corev1.Container, kind probeKind, grace time.Duration) {
	pr := kind.of(spec)
	period := seconds(pr.PeriodSeconds, defaultProbePeriod)
	timeout := seconds(pr.TimeoutSeconds, defaultProbeTimeout)
	results := newProbeResults(pr)
	var run time.Time // the start of the run the results are about
	log := p.agent.opts.Log.WithValues("cluster", p.agent.opts.Cluster, "pod", p.key, "container", spec.Name, "probe", kind)
	for {
		was := results.passing
		var err error
		running, since := c.running()
		if !running || !since.Equal(run) {
			// A new run starts unprobed, as a new container does.
			results.reset()
			run = since
		}
		// The startup probe runs until the run has started; the others from then on.
		due := running && p.isStarted(spec.Name, since) == (kind != startupProbe) &&
			time.Since(since) >= time.Duration(pr.InitialDelaySeconds)*time.Second
		if due {
			err = p.probe(ctx, c, pr, spec, timeout)
			if ctx.Err() != nil {
				return // the pod stops; its probe was cut short, not failed
			}
			results.record(err == nil)
		}
		switch {
		case kind != readinessProbe && results.failedOut():
			log.Info("Probe failed; killing the container, which its restart policy may restart", "failures", results.failures, "probeError", err)
			c.kill(since, grace)
			results.reset()
		case kind == startupProbe && results.passing && !was:
			p.mu.Lock()
			p.started[spec.Name] = since
			p.mu.Unlock()
			log.V(1).Info("Container started")
			p.agent.enqueue(p.key)
		case kind == readinessProbe && results.passing != was:
			p.mu.Lock()
			p.ready[spec.Name] = results.passing
			p.mu.Unlock()
			log.V(1).Info("Readiness changed", "ready", results.passing, "probeError", err)
			p.agent.enqueue(p.key)
		}
		wait := period
		if kind == readinessProbe && !results.passing {
			// An unready container is probed every second (at most its period), so a new
			// pod becomes Ready soon after it listens: the lab's pods start in well under
			// the default 10 s period. Startup and liveness keep their period, which with
			// FailureThreshold is the time a container is given.
			wait = min(period, time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// probeResults applies a probe's thresholds to its results, as the kubelet's prober does:
// the probe passes after SuccessThreshold successes in a row and fails after FailureThreshold
// failures in a row; it starts failing.
type probeResults struct {
	needSuccess, needFailure int32
	successes, failures      int32 // in a row
	passing                  bool
}

func newProbeResults(pr *corev1.Probe) *probeResults {
	r := &probeResults{needSuccess: max(pr.SuccessThreshold, 1), needFailure: pr.FailureThreshold}
	if r.needFailure <= 0 {
		r.needFailure = defaultFailures
	}
	return r
}

// record adds one probe's result.
func (r *probeResults) record(ok bool) {
	if ok {
		r.successes, r.failures = r.successes+1, 0
		r.passing = r.passing || r.successes >= r.needSuccess
		return
	}
	r.successes, r.failures = 0, r.failures+1
	r.passing = r.passing && r.failures < r.needFailure
}

// failedOut tells whether FailureThreshold probes in a row failed.
func (r *probeResults) failedOut() bool { return r.failures >= r.needFailure }

// reset starts over, failing: the container is new.
func (r *probeResults) reset() {
	*r = probeResults{needSuccess: r.needSuccess, needFailure: r.needFailure}
}

// probe runs one check: TCP and HTTP from the pod's node namespace, exec in the
// container.
func (p *pod) probe(ctx context.Context, c *container, pr *corev1.Probe, spec corev1.Container, timeout time.Duration) error {
	var port intstr.IntOrString
	host := ""
	switch {
	case pr.Exec != nil:
		return p.execProbe(ctx, c, probeCommand(pr.Exec.Command, spec.Env), timeout)
	case pr.TCPSocket != nil:
		port, host = pr.TCPSocket.Port, pr.TCPSocket.Host
	case pr.HTTPGet != nil:
		port, host = pr.HTTPGet.Port, pr.HTTPGet.Host
	}
	num, err := resolvePort(port, spec)
	if err != nil {
		return err
	}
	addr := p.ip
	if host != "" {
		if addr, err = netip.ParseAddr(host); err != nil {
			return fmt.Errorf("probe host %q: %w", host, err)
		}
	}
	conn, err := p.agent.opts.Network.DialTCP(p.node.Netns, netip.AddrPortFrom(addr, num), timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	if pr.HTTPGet == nil {
		return nil
	}
	path := pr.HTTPGet.Path
	if path == "" {
		path = "/"
	}
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.0\r\nHost: %s\r\nUser-Agent: kube-probe/lab\r\n\r\n", path, addr); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	var code int
	if _, err := fmt.Sscanf(line, "HTTP/%s %d", new(string), &code); err != nil {
		return fmt.Errorf("bad HTTP status line %q", strings.TrimSpace(line))
	}
	if code < 200 || code >= 400 {
		return fmt.Errorf("HTTP probe: status %d", code)
	}
	return nil
}

// execProbe runs an exec probe's command as `kubectl exec` runs one (the container's image
// table, env and namespaces) and passes if it exits with 0. At the timeout the command and
// what it forked in its process group are killed, and the probe fails, as with the kubelet's
// exec probe timeout.
func (p *pod) execProbe(ctx context.Context, c *container, argv []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := p.exec(ctx, c, argv, execIO{})
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("exec probe %q of pod %s: timed out after %s", argv, p.key, timeout)
	}
	if err != nil {
		return fmt.Errorf("exec probe: %w", err)
	}
	return nil
}

// probeCommand expands $(VAR) in an exec probe's command as the kubelet does
// (ExpandContainerCommandOnlyStatic): with the env values written in the container's spec
// only, so a valueFrom variable expands to nothing.
func probeCommand(cmd []string, env []corev1.EnvVar) []string {
	vars := make([]string, 0, len(env))
	for _, e := range env {
		vars = append(vars, e.Name+"="+e.Value)
	}
	return expandAll(cmd, vars)
}

// resolvePort turns a probe's port (a number or a container port's name) into a number.
func resolvePort(port intstr.IntOrString, c corev1.Container) (uint16, error) {
	if port.Type == intstr.Int {
		if port.IntVal <= 0 || port.IntVal > 65535 {
			return 0, fmt.Errorf("probe port %d out of range", port.IntVal)
		}
		return uint16(port.IntVal), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return uint16(cp.ContainerPort), nil //nolint:gosec // validated by the API server
		}
	}
	return 0, fmt.Errorf("probe port %q is not a port of container %s", port.StrVal, c.Name)
}

func seconds(s int32, def time.Duration) time.Duration {
	if s <= 0 {
		return def
	}
	return time.Duration(s) * time.Second
}
