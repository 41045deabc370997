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
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// mountsReadyTimeout bounds the start of a pod's mount namespace holder.
const mountsReadyTimeout = 10 * time.Second

// mountsScript runs in the new mount namespace of `unshare --mount --propagation private`
// and executes the operations of its arguments (see mountOps), then says so and only holds
// the namespace. The mounts are made by the process that owns the namespace, after unshare
// created it, so they can never land in the host's mount namespace.
const mountsScript = `set -e
while [ $# -gt 0 ]; do
  case "$1" in
  tmpfs) mount -t tmpfs lab-pod "$2"; shift 2 ;;
  overlay) mount -t overlay lab-pod -o "lowerdir=$2,upperdir=$3,workdir=$4" "$2"; shift 4 ;;
  mkdir) mkdir -p "$2"; shift 2 ;;
  touch) mkdir -p "$(dirname "$2")"; [ -e "$2" ] || : > "$2"; shift 2 ;;
  bind) mount --bind "$2" "$3"; shift 3 ;;
  ro) mount -o remount,bind,ro "$2"; shift 2 ;;
  *) echo "unknown operation $1" >&2; exit 2 ;;
  esac
done
echo ready
exec sleep infinity`

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

// bindMount is one bind mount of the pod's namespace.
type bindMount struct {
	src, target string
	readOnly    bool
}

// mountOps turns bind mounts into mountsScript operations. A target the host lacks (a
// volume at /etc/coredns) is made inside the pod's namespace only: its nearest existing
// ancestor is overlaid there with a writable layer on a tmpfs at scratch, so the pod sees
// the ancestor's content plus the new mount point and the host is not touched. Overlays come
// first, so the binds below them stay visible. Overlaying an ancestor hides the mounts under
// it from the pod (e.g. /run/netns for a volume under /var/run): lab pods don't use those.
func mountOps(mounts []bindMount, scratch string) ([]string, error) {
	var ops []string
	overlaid := map[string]bool{}
	var ancestors []string
	for _, m := range mounts {
		if _, err := os.Lstat(m.target); err == nil {
			continue
		}
		a, err := existingAncestor(m.target)
		if err != nil {
			return nil, err
		}
		if !overlaid[a] {
			overlaid[a] = true
			ancestors = append(ancestors, a)
		}
	}
	sort.Strings(ancestors) // parents before children
	if len(ancestors) > 0 {
		ops = append(ops, "tmpfs", scratch)
		for i, a := range ancestors {
			upper, work := filepath.Join(scratch, fmt.Sprintf("u%d", i)), filepath.Join(scratch, fmt.Sprintf("w%d", i))
			ops = append(ops, "mkdir", upper, "mkdir", work, "overlay", a, upper, work)
		}
	}
	sorted := slices.Clone(mounts)
	sort.SliceStable(sorted, func(i, j int) bool { return len(sorted[i].target) < len(sorted[j].target) })
	for _, m := range sorted {
		if _, err := os.Lstat(m.target); err != nil {
			fi, err := os.Stat(m.src)
			if err != nil {
				return nil, fmt.Errorf("mount source %s: %w", m.src, err)
			}
			if fi.IsDir() {
				ops = append(ops, "mkdir", m.target)
			} else {
				ops = append(ops, "touch", m.target)
			}
		}
		ops = append(ops, "bind", m.src, m.target)
		if m.readOnly {
			ops = append(ops, "ro", m.target)
		}
	}
	return ops, nil
}

// existingAncestor returns the nearest existing ancestor of path, symlinks resolved; the root
// is refused (an overlay there would be the whole machine).
func existingAncestor(path string) (string, error) {
	for d := filepath.Dir(filepath.Clean(path)); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			real, err := filepath.EvalSymlinks(d)
			if err != nil {
				return "", err
			}
			if real == "/" {
				return "", fmt.Errorf("mount point %s: no directory above it but / exists on this machine; the lab cannot make it", path)
			}
			return real, nil
		}
		if d == "/" {
			return "", fmt.Errorf("mount point %s: nothing above it exists", path)
		}
	}
}

// setupMounts writes the pod's resolv.conf and hosts into its directory, materialises its
// volumes and starts the holder of its mount namespace with all of them mounted. A pod that
// keeps the node's files and has no volumes gets no namespace of its own. Volume problems
// become the containers' waiting reason (volumeErr), not an error.
func (p *pod) setupMounts(ctx context.Context, obj *corev1.Pod) error {
	var mounts []bindMount
	if conf, ok := resolvConf(obj, p.agent.opts.ClusterDNS); ok && p.agent.opts.ClusterDNS.IsValid() {
		path := filepath.Join(p.dir, "resolv.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return fmt.Errorf("writing resolv.conf of pod %s: %w", p.key, err)
		}
		mounts = append(mounts, bindMount{src: path, target: "/etc/resolv.conf"})
	}
	if !p.hostNetwork {
		path := filepath.Join(p.dir, "hosts")
		if err := os.WriteFile(path, []byte(hostsFile(obj, p.ip)), 0o644); err != nil {
			return fmt.Errorf("writing hosts of pod %s: %w", p.key, err)
		}
		mounts = append(mounts, bindMount{src: path, target: "/etc/hosts"})
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
	ops, err := mountOps(mounts, filepath.Join(p.dir, "scratch"))
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
func (p *pod) prepareVolumes(ctx context.Context, obj *corev1.Pod) ([]bindMount, error) {
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
	var mounts []bindMount
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
			mounts = append(mounts, bindMount{src: src, target: vm.MountPath, readOnly: vm.ReadOnly})
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
	cmd := exec.Command(tools[0], append([]string{"--mount", "--propagation", "private", "--", tools[2], "-c", mountsScript, "sh"}, ops...)...)
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
