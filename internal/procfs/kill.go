package procfs

import (
	"errors"
	"fmt"
	"syscall"
	"time"
)

// KillUntilGone SIGKILLs every process list returns, and lists again, until list returns none
// (a process may fork while its siblings are being killed), or fails after timeout. where
// says in errors what the processes are ("in lab namespaces"). list should leave out zombies
// (Alive): they are gone but for their parent's wait.
func KillUntilGone(list func() ([]int, error), where string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids, err := list()
		if err != nil || len(pids) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v %s are still alive %s after SIGKILL", pids, where, timeout)
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("killing process %d %s: %w", pid, where, err)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}
