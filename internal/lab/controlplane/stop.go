package controlplane

import (
	"fmt"
	"time"
)

// StopProcess stops the process that StartProcess started under name for good: it is not
// restarted even with RestartOnCrash, and Stop does not report its exit. A grace of zero
// kills it with SIGKILL, as a node dying would; otherwise it gets SIGTERM and grace to exit.
// Meant for fault-injection tests (a gateway node going away). Stopping a process that has
// already exited is not an error.
func (e *Environment) StopProcess(name string, grace time.Duration) error {
	e.extrasMu.Lock()
	var p *process
	for _, x := range e.extras {
		if x.name == name {
			p = x
			break
		}
	}
	e.extrasMu.Unlock()
	if p == nil {
		return fmt.Errorf("stopping process %s: no such process was started with StartProcess (check the name)", name)
	}
	return p.stop(grace)
}

// ProcessPID returns the PID of the current run of the process StartProcess started under
// name, for callers that must reach into it (the holder of a node's mount namespace, entered
// through /proc/<pid>/ns/mnt). It fails if the process is not running.
func (e *Environment) ProcessPID(name string) (int, error) {
	e.extrasMu.Lock()
	defer e.extrasMu.Unlock()
	for _, x := range e.extras {
		if x.name == name {
			if r := x.current(); r != nil {
				return r.cmd.Process.Pid, nil
			}
			return 0, fmt.Errorf("process %s is not running", name)
		}
	}
	return 0, fmt.Errorf("no process %s was started with StartProcess (check the name)", name)
}
