package nodeagent

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// writeLog writes a log file through a logWriter, from the given stdout and stderr data.
func writeLog(t *testing.T, stdout, stderr string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "0.log")
	w, err := newLogWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	out, errw, err := w.pipes()
	if err != nil {
		t.Fatal(err)
	}
	// One stream after the other, so the order of entries is known.
	if _, err := out.WriteString(stdout); err != nil {
		t.Fatal(err)
	}
	_ = out.Close()
	time.Sleep(50 * time.Millisecond)
	if _, err := errw.WriteString(stderr); err != nil {
		t.Fatal(err)
	}
	_ = errw.Close()
	w.close()
	return path
}

func TestLogs(t *testing.T) {
	long := strings.Repeat("x", logLineMax+10)
	path := writeLog(t, "one\ntwo\n"+long+"\nlast without newline", "err1\n")
	for _, tc := range []struct {
		name string
		o    logOptions
		want string
	}{
		{"all, partial lines joined", logOptions{tailLines: -1}, "one\ntwo\n" + long + "\nlast without newline\nerr1\n"},
		{"tail 2", logOptions{tailLines: 2}, "last without newline\nerr1\n"},
		{"tail 3 spans a split line", logOptions{tailLines: 3}, long + "\nlast without newline\nerr1\n"},
		{"tail 0", logOptions{tailLines: 0}, ""},
		{"limit bytes", logOptions{tailLines: -1, limitBytes: 6}, "one\ntw"},
		{"since the future", logOptions{tailLines: -1, since: time.Now().Add(time.Hour)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeLogs(context.Background(), &b, path, tc.o, func() bool { return false }, func() {}); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Errorf("got %q, want %q", trim(b.String()), trim(tc.want))
			}
		})
	}
	t.Run("timestamps once per line", func(t *testing.T) {
		var b bytes.Buffer
		if err := writeLogs(context.Background(), &b, path, logOptions{tailLines: 3, timestamps: true}, func() bool { return false }, func() {}); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		if len(lines) != 3 {
			t.Fatalf("got %d lines: %q", len(lines), trim(b.String()))
		}
		for i, want := range []string{long, "last without newline", "err1"} {
			ts, rest, _ := strings.Cut(lines[i], " ")
			if _, err := time.Parse(time.RFC3339Nano, ts); err != nil || rest != want {
				t.Errorf("line %d = %q, want a time and %q", i, trim(lines[i]), trim(want))
			}
		}
	})
}

func TestLogsFollow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	w, err := newLogWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := w.pipes()
	if err != nil {
		t.Fatal(err)
	}
	var live atomic.Bool
	live.Store(true)
	var b safeBuffer
	done := make(chan error)
	go func() {
		done <- writeLogs(context.Background(), &b, path, logOptions{tailLines: -1, follow: true}, live.Load, func() {})
	}()
	for i, line := range []string{"a\n", "b\n", "c\n"} {
		_, _ = out.WriteString(line)
		want := "a\nb\nc\n"[:2*(i+1)]
		deadline := time.Now().Add(5 * time.Second)
		for b.String() != want && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if got := b.String(); got != want {
			t.Fatalf("followed %q, want %q", got, want)
		}
	}
	_ = out.Close()
	w.close()
	live.Store(false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not end when the run ended")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}

func trim(s string) string {
	if len(s) > 80 {
		return s[:40] + "..." + s[len(s)-40:]
	}
	return s
}

type safeBuffer struct {
	mu  chan struct{}
	buf bytes.Buffer
}

func (s *safeBuffer) lock() {
	if s.mu == nil {
		s.mu = make(chan struct{}, 1)
	}
	s.mu <- struct{}{}
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.lock()
	defer func() { <-s.mu }()
	return s.buf.Write(p)
}

func (s *safeBuffer) String() string { s.lock(); defer func() { <-s.mu }(); return s.buf.String() }
