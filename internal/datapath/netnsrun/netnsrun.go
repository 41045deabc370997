// Package netnsrun runs a function on a thread inside another network namespace, for the
// data-plane writers that act on a namespace other than their process's (a node's, a VPC
// gateway's): netlink sockets and the nft binary they start take the thread's namespace.
package netnsrun

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// In runs fn on a thread inside the network namespace at path; see InNamespace.
func In(path string, fn func() error) error {
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("opening network namespace %s: %w", path, err)
	}
	defer target.Close()
	return InNamespace(target, path, fn)
}

// InNamespace runs fn on a thread inside the network namespace target (named name in errors)
// and waits for it. fn's error is returned; failing to return the thread to its own namespace
// is an error of its own.
func InNamespace(target netns.NsHandle, name string, fn func() error) error {
	return onThread(func() error {
		if err := netns.Set(target); err != nil {
			return fmt.Errorf("entering network namespace %s: %w", name, err)
		}
		return nil
	}, "network namespace "+name, fn)
}

// InNew runs fn on a thread inside a new network namespace, passing the path that names it
// while fn runs (its thread's /proc entry: bind-mount it to keep the namespace), and waits for
// it. Nothing else holds the namespace: it is gone after fn unless fn kept it.
func InNew(fn func(self string) error) error {
	var self string
	return onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unsharing a network namespace: %w", err)
		}
		self = fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		return nil
	}, "the new network namespace", func() error { return fn(self) })
}

// onThread runs enter and then fn on a goroutine of its own, locked to its thread, and then
// returns the thread to the namespace it had. enter must leave the thread where it was when
// it fails.
//
// Never on the caller's goroutine: a thread that could not be returned must serve nobody
// again, and a goroutine that ends locked takes its thread with it; on the caller's, the caller
// would go on on that thread, in the wrong namespace, for as long as it lives. Nor does the
// thread simply end after every run: a thread's end kills the children it started with
// Pdeathsig (a test's daemons), and fn's thread may have started some.
func onThread(enter func() error, what string, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("getting the current network namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := enter(); err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		fnErr := fn()
		if err := netns.Set(orig); err != nil {
			// Left locked: the thread ends with this goroutine.
			done <- errors.Join(fnErr, fmt.Errorf("returning from %s: %w", what, err))
			return
		}
		runtime.UnlockOSThread()
		done <- fnErr
	}()
	return <-done
}
