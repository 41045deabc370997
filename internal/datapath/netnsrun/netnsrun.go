// Package netnsrun runs a function on a thread inside another network namespace, for the
// data-plane writers that act on a namespace other than their process's (a node's, a VPC
// gateway's): netlink sockets and the nft binary they start take the thread's namespace.
package netnsrun

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// In runs fn on the calling goroutine's thread inside the network namespace at path and
// returns the thread to its own namespace afterwards. fn's error is returned; failing to
// return the thread is an error of its own, and that thread is never reused (it stays locked
// and exits with the goroutine rather than serve others in the wrong namespace).
func In(path string, fn func() error) error {
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("opening network namespace %s: %w", path, err)
	}
	defer target.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return fmt.Errorf("getting the current network namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(target); err != nil {
		return fmt.Errorf("entering network namespace %s: %w", path, err)
	}
	fnErr := fn()
	if err := netns.Set(orig); err != nil {
		// A second lock outlives the deferred unlock: the goroutine ends locked, and the
		// runtime then terminates the thread.
		runtime.LockOSThread()
		return fmt.Errorf("returning from network namespace %s: %w", path, err)
	}
	return fnErr
}
