package nodeagent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/octopus-mcs/octopus/internal/lab/mountns"
)

// mountsReadyTimeout bounds the start of a pod's mount namespace holder.
const mountsReadyTimeout = 10 * time.Second

// podMounts is a pod's own mount namespace, in which /etc/resolv.conf and /etc/hosts are
// the pod's files and its volumes are mounted. Go cannot run code between fork and exec, so
// a holder process made with util-linux's unshare keeps the namespace (it dies with the agent
// by Pdeathsig, so a crash leaves no mount behind), and containers and exec sessions enter it
// with nsenter, which then execs the command itself: the command keeps nsenter's PID.
type podMounts struct {
	holder  *exec.Cmd
	nsPath  string // /proc/<holder>/ns/mnt
	nsenter string
	exited  chan struct{}
}

// setupMounts writes the pod's resolv.conf and hosts into its directory, materialises its
// volumes and starts the holder of its mount namespace with all of them mounted. A pod that
// keeps the node's files and has no volumes gets no namespace of its own. Volume problems
// become the containers' waiting reason (volumeErr), not an error.
func (p *pod) setupMounts(ctx context.Context, obj *corev1.Pod) error {
	var mounts []mountns.Bind
	if conf, ok := resolvConf(obj, p.agent.opts.ClusterDNS); ok && p.agent.opts.ClusterDNS.IsValid() {
		path := filepath.Join(p.dir, "resolv.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return fmt.Errorf("writing resolv.conf of pod %s: %w", p.key, err)
		}
		mounts = append(mounts, mountns.Bind{Src: path, Target: "/etc/resolv.conf"})
	}
	if !p.hostNetwork {
		path := filepath.Join(p.dir, "hosts")
		if err := os.WriteFile(path, []byte(hostsFile(obj, p.ip)), 0o644); err != nil {
			return fmt.Errorf("writing hosts of pod %s: %w", p.key, err)
		}
		mounts = append(mounts, mountns.Bind{Src: path, Target: "/etc/hosts"})
	}
	volumeMounts, err := p.prepareVolumes(ctx, obj)
	var unsupported *unsupportedVolumeError
	switch {
	case errors.As(err, &unsupported):
		p.volumeErr = err.Error()
	case err != nil:
		// A source that does not exist yet (kube-root-ca.crt right after a namespace is
		// made, a ConfigMap created after the pod): the pod is set up again with back-off,
		// as a kubelet keeps a pod ContainerCreating until its volumes can be mounted.
		return fmt.Errorf("pod %s: %w", p.key, err)
	default:
		mounts = append(mounts, volumeMounts...)
	}
	if len(mounts) == 0 {
		return nil
	}
	ops, err := mountns.Ops(mounts, filepath.Join(p.dir, "scratch"))
	if err != nil {
		p.volumeErr = err.Error()
		return nil //nolint:nilerr // reported as the containers' waiting reason, like a kubelet's mount failure
	}
	if err := os.MkdirAll(filepath.Join(p.dir, "scratch"), 0o755); err != nil {
		return err
	}
	return p.startHolder(ops)
}

// unsupportedVolumeError marks a volume the lab can never provide: the pod's containers wait
// with it for good instead of the pod being retried.
type unsupportedVolumeError struct{ err error }

func (e *unsupportedVolumeError) Error() string { return e.err.Error() }
func (e *unsupportedVolumeError) Unwrap() error { return e.err }

// prepareVolumes materialises the volumes and lists the bind mounts of every container's
// volumeMounts (one namespace serves all containers of the pod).
func (p *pod) prepareVolumes(ctx context.Context, obj *corev1.Pod) ([]mountns.Bind, error) {
	if err := checkVolumes(obj); err != nil {
		return nil, &unsupportedVolumeError{err}
	}
	if len(obj.Spec.Volumes) == 0 {
		return nil, nil
	}
	if err := p.syncVolumes(ctx, obj); err != nil {
		return nil, err
	}
	vctx, cancel := context.WithCancel(context.Background())
	p.cancelVolumes = cancel
	go p.syncVolumesLoop(vctx, obj.DeepCopy())
	var mounts []mountns.Bind
	seen := map[string]bool{}
	for _, c := range append(slices.Clone(obj.Spec.InitContainers), obj.Spec.Containers...) {
		for _, vm := range c.VolumeMounts {
			if seen[vm.MountPath] {
				continue
			}
			seen[vm.MountPath] = true
			src := p.volumeDir(vm.Name)
			if vm.SubPath != "" {
				src = filepath.Join(src, filepath.Clean("/"+vm.SubPath))
			}
			mounts = append(mounts, mountns.Bind{Src: src, Target: vm.MountPath, ReadOnly: vm.ReadOnly})
		}
	}
	return mounts, nil
}

// startHolder starts the namespace's holder and waits until it has made the mounts.
func (p *pod) startHolder(ops []string) error {
	var tools [3]string
	for i, name := range []string{"unshare", "nsenter", "sh"} {
		path, err := exec.LookPath(name)
		if err != nil {
			return fmt.Errorf("pod %s: %s is needed for the pod's mount namespace: install Debian package util-linux: %w", p.key, name, err)
		}
		tools[i] = path
	}
	cmd := exec.Command(tools[0], append([]string{"--mount", "--propagation", "private", "--", tools[2], "-c", mountns.Script, "sh"}, ops...)...)
	cmd.Dir = "/"
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := p.agent.opts.Start(cmd, p.netnsPath); err != nil {
		return fmt.Errorf("starting the mount namespace of pod %s: %w", p.key, err)
	}
	m := &podMounts{holder: cmd, nsPath: "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/mnt", nsenter: tools[1], exited: make(chan struct{})}
	ready := make(chan error, 1)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ready" {
			err = fmt.Errorf("unexpected output %q", line)
		}
		ready <- err
	}()
	go func() {
		<-readDone // the reader must be done with the pipe before Wait closes it
		_ = cmd.Wait()
		close(m.exited)
	}()
	var readyErr error
	select {
	case readyErr = <-ready:
	case <-time.After(mountsReadyTimeout):
		readyErr = fmt.Errorf("not ready after %s", mountsReadyTimeout)
	}
	if readyErr != nil {
		m.stop()
		return fmt.Errorf("setting up the mount namespace of pod %s: %w: %s", p.key, readyErr, strings.TrimSpace(stderr.String()))
	}
	p.mounts = m
	return nil
}

// wrap makes argv run inside the pod's mount namespace.
func (m *podMounts) wrap(argv []string) []string {
	if m == nil {
		return argv
	}
	return append([]string{m.nsenter, "--mount=" + m.nsPath, "--"}, argv...)
}

// stop kills the holder; the namespace goes when the last process in it is gone.
func (m *podMounts) stop() {
	if m == nil {
		return
	}
	if err := syscall.Kill(-m.holder.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return
	}
	select {
	case <-m.exited:
	case <-time.After(mountsReadyTimeout):
	}
}
