package ovnic

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
)

// fakeProcess is a process that exits when signalled (or when the test says so).
type fakeProcess struct {
	pid     int
	argv    []string
	done    chan struct{}
	once    sync.Once
	err     error
	signals []os.Signal
	// ignoreTERM makes it survive SIGTERM, as a hung ovn-ic would.
	ignoreTERM bool
}

func (p *fakeProcess) Signal(sig os.Signal) error {
	p.signals = append(p.signals, sig)
	if sig == syscall.SIGTERM && p.ignoreTERM {
		return nil
	}
	p.exit(errors.New("signal: " + sig.String()))
	return nil
}

func (p *fakeProcess) exit(err error) { p.once.Do(func() { p.err = err; close(p.done) }) }

func (p *fakeProcess) Done() <-chan struct{} { return p.done }
func (p *fakeProcess) Err() error            { return p.err }
func (p *fakeProcess) PID() int              { return p.pid }

var _ Process = (*fakeProcess)(nil)

// fakeStarter records every start.
type fakeStarter struct {
	started    []*fakeProcess
	fail       error
	ignoreTERM bool
}

func (f *fakeStarter) start(argv []string) (Process, error) {
	if f.fail != nil {
		return nil, f.fail
	}
	p := &fakeProcess{pid: 100 + len(f.started), argv: argv, done: make(chan struct{}), ignoreTERM: f.ignoreTERM}
	f.started = append(f.started, p)
	return p, nil
}

// logLines collects the supervisor's log messages.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, args)
}

func (l *logLines) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.Join(l.lines, "\n")
	l.lines = nil
	return s
}

const (
	endpointsA = `{"icNB":"ssl:10.0.0.1:6645,ssl:10.0.0.2:6645","icSB":"ssl:10.0.0.1:6646,ssl:10.0.0.2:6646"}`
	endpointsB = `{"icNB":"ssl:10.0.1.1:6645","icSB":"ssl:10.0.1.1:6646"}`
)

// TestSupervisorSync drives the supervisor's file watch one read at a time: each step changes
// the file (or not), syncs once, and states what runs afterwards and what the log says.
func TestSupervisorSync(t *testing.T) {
	type step struct {
		name string
		// file: nil leaves the file as it is, "" removes it, else its new content.
		file *string
		// starts is the number of processes started so far; running the endpoints of the one
		// running ("" none); stopped the indexes of those stopped so far.
		starts  int
		running string
		stopped []int
		log     string
	}
	str := func(s string) *string { return &s }
	none := str("")
	waitMsg := "Waiting for the IC endpoints file"
	tests := []struct {
		name  string
		steps []step
	}{
		{"no file: nothing starts, the wait is said once", []step{
			{name: "first read", starts: 0, log: waitMsg},
			{name: "second read", starts: 0},
		}},
		{"first file starts ovn-ic on its endpoints", []step{
			{name: "none yet", log: waitMsg},
			{name: "written", file: str(endpointsA), starts: 1, running: "ssl:10.0.0.1:6646,ssl:10.0.0.2:6646", log: "Started ovn-ic"},
		}},
		{"same content rewritten: no restart", []step{
			{name: "written", file: str(endpointsA), starts: 1, running: "ssl:10.0.0.1:6646,ssl:10.0.0.2:6646", log: "Started ovn-ic"},
			{name: "rewritten", file: str(endpointsA), starts: 1, running: "ssl:10.0.0.1:6646,ssl:10.0.0.2:6646"},
			// Same endpoints, other formatting: still no restart.
			{name: "reformatted", file: str(strings.ReplaceAll(endpointsA, ",\"", ", \"")), starts: 1, running: "ssl:10.0.0.1:6646,ssl:10.0.0.2:6646"},
		}},
		{"changed content: one restart, old and new logged", []step{
			{name: "A", file: str(endpointsA), starts: 1, running: "ssl:10.0.0.1:6646,ssl:10.0.0.2:6646", log: "Started ovn-ic"},
			{name: "B", file: str(endpointsB), starts: 2, running: "ssl:10.0.1.1:6646", stopped: []int{0},
				log: `"Restarting ovn-ic on changed IC endpoints" "oldICNB"="ssl:10.0.0.1:6645,ssl:10.0.0.2:6645" "newICNB"="ssl:10.0.1.1:6645" "oldICSB"="ssl:10.0.0.1:6646,ssl:10.0.0.2:6646" "newICSB"="ssl:10.0.1.1:6646"`},
			{name: "B read again", starts: 2, running: "ssl:10.0.1.1:6646", stopped: []int{0}},
		}},
		{"malformed file keeps the running one and says why", []step{
			{name: "A", file: str(endpointsA), starts: 1, running: "ssl:10.0.0.1:6646,ssl:10.0.0.2:6646", log: "Started ovn-ic"},
			{name: "half a file", file: str(`{"icNB":"ssl:10.0.1.1:66`), starts: 1, running: "ssl:10.0.0.1:6646,ssl:10.0.0.2:6646",
				log: "Ignored a malformed IC endpoints file"},
			{name: "no IC SB", file: str(`{"icNB":"ssl:10.0.1.1:6645"}`), starts: 1, running: "ssl:10.0.0.1:6646,ssl:10.0.0.2:6646",
				log: "icSB is empty"},
			{name: "a host without method", file: str(`{"icNB":"10.0.1.1","icSB":"ssl:10.0.1.1:6646"}`), starts: 1, running: "ssl:10.0.0.1:6646,ssl:10.0.0.2:6646",
				log: `not an OVSDB endpoint`},
			{name: "unknown field", file: str(`{"icNB":"ssl:a:1","icSB":"ssl:a:2","ic-db-host":"x"}`), starts: 1, running: "ssl:10.0.0.1:6646,ssl:10.0.0.2:6646",
				log: `unknown field`},
			{name: "fixed to B", file: str(endpointsB), starts: 2, running: "ssl:10.0.1.1:6646", stopped: []int{0}, log: "Restarting ovn-ic"},
		}},
		{"malformed first file: nothing starts", []step{
			{name: "garbage", file: str("ic-db-host=10.0.0.1"), starts: 0, log: "Ignored a malformed IC endpoints file"},
			{name: "then A", file: str(endpointsA), starts: 1, running: "ssl:10.0.0.1:6646,ssl:10.0.0.2:6646", log: "Started ovn-ic"},
		}},
		{"file removed: ovn-ic keeps running", []step{
			{name: "A", file: str(endpointsA), starts: 1, running: "ssl:10.0.0.1:6646,ssl:10.0.0.2:6646", log: "Started ovn-ic"},
			{name: "removed", file: none, starts: 1, running: "ssl:10.0.0.1:6646,ssl:10.0.0.2:6646"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "ic-endpoints.json")
			starter := &fakeStarter{}
			logs := &logLines{}
			s := &Supervisor{File: file, Argv: []string{"ovn-ic", "--unixctl=/run/x.ctl"}, Start: starter.start,
				Log: funcr.New(logs.add, funcr.Options{})}
			for _, st := range tt.steps {
				switch {
				case st.file == nil:
				case *st.file == "":
					if err := os.Remove(file); err != nil {
						t.Fatal(err)
					}
				default:
					if err := os.WriteFile(file, []byte(*st.file), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.sync(); err != nil {
					t.Fatalf("%s: sync: %v", st.name, err)
				}
				log := logs.take()
				if len(starter.started) != st.starts {
					t.Fatalf("%s: %d processes started, want %d (log: %s)", st.name, len(starter.started), st.starts, log)
				}
				var stopped []int
				for i, p := range starter.started {
					select {
					case <-p.done:
						stopped = append(stopped, i)
						if !slices.Equal(p.signals, []os.Signal{syscall.SIGTERM}) {
							t.Errorf("%s: process %d got signals %v, want SIGTERM", st.name, i, p.signals)
						}
					default:
					}
				}
				if !slices.Equal(stopped, st.stopped) {
					t.Errorf("%s: stopped %v, want %v", st.name, stopped, st.stopped)
				}
				running := ""
				if s.proc != nil {
					running = s.running.SB
					last := starter.started[len(starter.started)-1]
					if s.proc != last {
						t.Errorf("%s: the supervisor runs process %d, not the last started", st.name, s.proc.PID())
					}
					wantArgs := []string{"--ic-nb-db=" + s.running.NB, "--ic-sb-db=" + s.running.SB}
					if !slices.Equal(last.argv[len(last.argv)-2:], wantArgs) || last.argv[0] != "ovn-ic" {
						t.Errorf("%s: started %q, want ovn-ic's command line ending in %q", st.name, last.argv, wantArgs)
					}
				}
				if running != st.running {
					t.Errorf("%s: running on IC SB %q, want %q", st.name, running, st.running)
				}
				if !strings.Contains(log, st.log) || (st.log == "" && log != "") {
					t.Errorf("%s: log %q, want it to contain %q", st.name, log, st.log)
				}
			}
		})
	}
}

// TestSupervisorRun: Run starts, stops on cancel (SIGTERM, then SIGKILL for a process that
// ignores it), and returns ovn-ic's own exit as an error so that the container restarts.
func TestSupervisorRun(t *testing.T) {
	tests := []struct {
		name       string
		ignoreTERM bool
		// exit makes the process exit by itself instead of the context being cancelled.
		exit    bool
		wantErr string
		signals []os.Signal
	}{
		{name: "cancelled: SIGTERM", signals: []os.Signal{syscall.SIGTERM}},
		{name: "cancelled, SIGTERM ignored: SIGKILL", ignoreTERM: true, signals: []os.Signal{syscall.SIGTERM, syscall.SIGKILL}},
		{name: "ovn-ic exits by itself", exit: true, wantErr: "ovn-ic (IC NB ssl:10.0.1.1:6645, IC SB ssl:10.0.1.1:6646) exited: crashed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "ic-endpoints.json")
			if err := os.WriteFile(file, []byte(endpointsB), 0o644); err != nil {
				t.Fatal(err)
			}
			started := make(chan *fakeProcess, 1)
			starter := &fakeStarter{ignoreTERM: tt.ignoreTERM}
			s := &Supervisor{File: file, Argv: []string{"ovn-ic"}, Poll: 10 * time.Millisecond, StopGrace: 50 * time.Millisecond,
				Start: func(argv []string) (Process, error) {
					p, err := starter.start(argv)
					started <- p.(*fakeProcess)
					return p, err
				}}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			p := <-started
			if tt.exit {
				p.exit(errors.New("crashed"))
			} else {
				cancel()
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return")
			}
			if gotErr := ""; err != nil {
				gotErr = err.Error()
				if gotErr != tt.wantErr {
					t.Errorf("Run: %q, want %q", gotErr, tt.wantErr)
				}
			} else if tt.wantErr != "" {
				t.Errorf("Run: nil, want %q", tt.wantErr)
			}
			if !slices.Equal(p.signals, tt.signals) {
				t.Errorf("signals %v, want %v", p.signals, tt.signals)
			}
			if len(starter.started) != 1 {
				t.Errorf("%d processes started, want 1", len(starter.started))
			}
		})
	}
}

// TestWriteEndpointsFile: atomic, unchanged content not rewritten, invalid endpoints refused.
func TestWriteEndpointsFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "ic-endpoints.json")
	a := Endpoints{NB: "ssl:10.0.0.1:6645", SB: "ssl:10.0.0.1:6646"}
	for i, tt := range []struct {
		e           Endpoints
		changed     bool
		wantErr     string
		wantContent Endpoints
	}{
		{e: a, changed: true, wantContent: a},
		{e: a, changed: false, wantContent: a},
		{e: Endpoints{NB: "ssl:10.0.0.2:6645", SB: "ssl:10.0.0.2:6646"}, changed: true, wantContent: Endpoints{NB: "ssl:10.0.0.2:6645", SB: "ssl:10.0.0.2:6646"}},
		{e: Endpoints{NB: "ssl:10.0.0.3:6645"}, wantErr: "icSB is empty", wantContent: Endpoints{NB: "ssl:10.0.0.2:6645", SB: "ssl:10.0.0.2:6646"}},
	} {
		before := inode(t, file)
		changed, err := WriteEndpointsFile(file, tt.e)
		if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Fatalf("write %d: %v, want error %q", i, err, tt.wantErr)
		}
		if changed != tt.changed {
			t.Errorf("write %d: changed %v, want %v", i, changed, tt.changed)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseEndpoints(data)
		if err != nil || got != tt.wantContent {
			t.Errorf("write %d: file holds %+v (%v), want %+v", i, got, err, tt.wantContent)
		}
		// A write renames a new file over the old one: an unchanged inode is no write.
		if after := inode(t, file); !tt.changed && after != before {
			t.Errorf("write %d: the file was rewritten although unchanged", i)
		}
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) != 1 {
			t.Errorf("write %d: directory holds %v (%v); want the file alone, no temporary left", i, entries, err)
		}
	}
}

// inode is file's inode number, 0 if it does not exist.
func inode(t *testing.T, file string) uint64 {
	t.Helper()
	fi, err := os.Stat(file)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestProbe: while the endpoints file is missing the probe passes without asking ovn-ic
// (there is none yet); once it exists, the probe is ovn-ic's answer.
func TestProbe(t *testing.T) {
	tests := []struct {
		name        string
		file        string // its content; "" for none
		argv        []string
		wantWaiting bool
		wantErr     string
	}{
		{name: "no file: waiting, the command not run", argv: []string{"false"}, wantWaiting: true},
		{name: "file, ovn-ic answers", file: endpointsB, argv: []string{"true"}},
		{name: "file, ovn-ic does not answer", file: endpointsB, argv: []string{"false"}, wantErr: "exit status 1"},
		// An ovn-ic of an earlier good file may be running, and a hung one must fail.
		{name: "malformed file, ovn-ic does not answer", file: "{not json", argv: []string{"false"}, wantErr: "exit status 1"},
		{name: "malformed file, ovn-ic of an earlier file answers", file: "{not json", argv: []string{"true"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "ic-endpoints.json")
			if tt.file != "" {
				if err := os.WriteFile(file, []byte(tt.file), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			waiting, err := Probe(t.Context(), file, tt.argv)
			if waiting != tt.wantWaiting {
				t.Errorf("waiting %v, want %v", waiting, tt.wantWaiting)
			}
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("probe: %v, want error %q", err, tt.wantErr)
			}
		})
	}
}
