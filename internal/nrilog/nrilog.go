// Package nrilog sends the logs of an NRI plugin stub (github.com/containerd/nri) to a
// logr.Logger. The secondary network's NRI plugin (internal/secondarynet/nriplugin) and the
// lab's nodes (internal/lab/realnode) both run a stub; this is the one adapter they share.
package nrilog

import (
	"context"
	"fmt"

	"github.com/containerd/nri/pkg/log"
	"github.com/go-logr/logr"
)

// Logger is an NRI log.Logger writing to a logr.Logger: the stub's debug and info lines at
// verbosity 1, its warnings as info lines, its errors as errors.
type Logger struct{ log logr.Logger }

var _ log.Logger = Logger{}

// New returns a Logger writing to l.
func New(l logr.Logger) Logger { return Logger{l} }

// Debugf logs NRI's debug lines at verbosity 1.
func (l Logger) Debugf(_ context.Context, format string, args ...any) {
	l.log.V(1).Info(fmt.Sprintf(format, args...))
}

// Infof logs NRI's info lines at verbosity 1: NRI is chatty about every plugin event.
func (l Logger) Infof(_ context.Context, format string, args ...any) {
	l.log.V(1).Info(fmt.Sprintf(format, args...))
}

// Warnf logs NRI's warnings as info lines.
func (l Logger) Warnf(_ context.Context, format string, args ...any) {
	l.log.Info(fmt.Sprintf(format, args...))
}

// Errorf logs NRI's errors as errors.
func (l Logger) Errorf(_ context.Context, format string, args ...any) {
	l.log.Error(nil, fmt.Sprintf(format, args...))
}
