package nriplugin

import (
	"context"
	"errors"
	"testing"

	"github.com/go-logr/logr/testr"
)

// TestReadinessFollowsTheRegistration: the plugin is ready once containerd synchronized it
// during an attempt to register, and a Synchronize that returns after the connection was lost
// (containerd gave up waiting for it) does not make it ready again.
func TestReadinessFollowsTheRegistration(t *testing.T) {
	p, err := New(testConfig, &fakePods{}, &fakeInterfaces{inPlace: map[string]bool{}}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	synchronize := func() {
		if _, err := p.Synchronize(context.Background(), nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Ready(); !errors.Is(err, errNotRegistered) {
		t.Fatalf("Ready before any registration = %v, want %v", err, errNotRegistered)
	}
	p.registration.set(errRegistering)
	if err := p.Ready(); !errors.Is(err, errRegistering) {
		t.Fatalf("Ready while registering = %v, want %v", err, errRegistering)
	}
	synchronize()
	if err := p.Ready(); err != nil {
		t.Fatalf("Ready once synchronized = %v", err)
	}
	lost := errors.New("containerd closed the connection")
	p.registration.set(lost)
	synchronize()
	if err := p.Ready(); !errors.Is(err, lost) {
		t.Fatalf("Ready after a late Synchronize of a lost connection = %v, want %v", err, lost)
	}
}
