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
