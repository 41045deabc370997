package controlplane

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// extraStopGrace is how long an extra process gets after SIGTERM: an octopus-agent uses it
// to report AgentStopped to the hub; kube-proxy exits at once.
const extraStopGrace = 10 * time.Second

// ProcessOptions describes a supervised child the environment runs besides its control
// planes, such as kube-proxy inside a node's network namespace.
type ProcessOptions struct {
	// Name names the log (<Dir>/logs/<Name>.log) and the pidfile; an RFC 1123 subdomain,
	// unique in the environment. Required.
	Name string
	// Binary is an absolute path, or a name in Options.BinDir. Required.
	Binary string
	// Args must include a path inside Dir (a kubeconfig, say): CleanupStale identifies a
	// pidfile's process by it before killing, so a child without one could be left behind.
	Args []string
	// Netns is the path of a network namespace (e.g. /run/netns/<name>) to start the child
	// in. Optional: default the environment's own.
	Netns string
	// RestartOnCrash restarts the child with back-off after an exit nobody asked for, like
	// the controllers; otherwise such an exit is reported by Stop.
	RestartOnCrash bool
}

// StartProcess starts a supervised child with the same guarantees as the control-plane
// processes: forked from the spawner thread with Pdeathsig, its own process group, a log and
// a pidfile under Dir. Stop ends extra processes first, before the API servers they talk to.
func (e *Environment) StartProcess(o ProcessOptions) error {
	if msgs := validation.IsDNS1123Subdomain(o.Name); len(msgs) > 0 {
		return fmt.Errorf("starting process %q: bad name: %s", o.Name, strings.Join(msgs, "; "))
	}
	if o.Binary == "" {
		return fmt.Errorf("starting process %s: no binary given", o.Name)
	}
	if !argsReferTo(o.Args, e.Dir) {
		return fmt.Errorf("starting process %s: no argument refers to a path inside %s, so a later CleanupStale could not identify it", o.Name, e.Dir)
	}
	binary := o.Binary
	if !filepath.IsAbs(binary) {
		binary = filepath.Join(e.binDir, binary)
	}
	p := e.newProcess("", o.Name)
	p.binary = binary
	p.args = o.Args
	p.netns = o.Netns
	p.restartOnCrash = o.RestartOnCrash

	e.extrasMu.Lock()
	defer e.extrasMu.Unlock()
	if e.stopping {
		return fmt.Errorf("starting process %s: the environment is stopping", o.Name)
	}
	for _, x := range e.extras {
		if x.name == p.name {
			return fmt.Errorf("starting process %s: a process of that name already exists", o.Name)
		}
	}
	if _, err := p.start(); err != nil {
		return err
	}
	e.extras = append(e.extras, p)
	return nil
}

// stopExtras stops every extra process concurrently and returns their errors, including exits
// nobody asked for.
func (e *Environment) stopExtras() error {
	e.extrasMu.Lock()
	e.stopping = true
	extras := e.extras
	e.extrasMu.Unlock()
	errs := []error{stopAll(extras, extraStopGrace)}
	for _, p := range extras {
		errs = append(errs, p.unexpectedExits())
	}
	return errors.Join(errs...)
}

// KubeconfigPath is where Start writes the admin kubeconfig of a cluster in an environment
// with state directory dir, for tools that inspect a running environment from another process.
func KubeconfigPath(dir, cluster string) string {
	return filepath.Join(dir, clustersDir, cluster, fileKubeconfig)
}
