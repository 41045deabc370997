package nodeagent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Container logs are kept in the CRI log format that kubelets read (one entry a line:
// "<RFC 3339 nano time> <stdout|stderr> <F|P> <content>"), so `kubectl logs --timestamps`
// and --since work from the time each line was written; P marks a fragment of a line longer
// than logLineMax.
const (
	logLineMax  = 16 << 10
	tagFull     = "F"
	tagPartial  = "P"
	streamOut   = "stdout"
	streamErr   = "stderr"
	logDrainMax = 2 * time.Second
	// logPollInterval is how often a followed log is checked for new lines.
	logPollInterval = 100 * time.Millisecond
)

// runLogPath names the log file of a container's run n (0 is the first), as the kubelet's
// <container>/<restartCount>.log.
func runLogPath(dir string, n int32) string {
	return filepath.Join(dir, strconv.Itoa(int(n))+".log")
}

// logWriter writes a container run's stdout and stderr into one log file, line by line.
type logWriter struct {
	mu sync.Mutex
	f  *os.File
	wg sync.WaitGroup
}

func newLogWriter(path string) (*logWriter, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &logWriter{f: f}, nil
}

// pipes returns the write ends to give the process as stdout and stderr; the caller closes
// them once the process has started.
func (w *logWriter) pipes() (stdout, stderr *os.File, err error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		_, _ = outR.Close(), outW.Close()
		return nil, nil, err
	}
	w.wg.Add(2)
	go w.copy(outR, streamOut)
	go w.copy(errR, streamErr)
	return outW, errW, nil
}

// copy turns one stream into log entries until every writer has closed it.
func (w *logWriter) copy(r *os.File, stream string) {
	defer w.wg.Done()
	defer r.Close()
	br := bufio.NewReaderSize(r, logLineMax)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			tag := tagFull
			if errors.Is(err, bufio.ErrBufferFull) {
				tag = tagPartial
			}
			w.entry(stream, tag, bytes.TrimSuffix(line, []byte("\n")))
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// note logs a line of the agent's own about the container, on stderr.
func (w *logWriter) note(msg string) { w.entry(streamErr, tagFull, []byte(msg)) }

func (w *logWriter) entry(stream, tag string, content []byte) {
	var b bytes.Buffer
	b.Grow(len(content) + 48)
	b.WriteString(time.Now().UTC().Format(time.RFC3339Nano))
	b.WriteString(" " + stream + " " + tag + " ")
	b.Write(content)
	b.WriteByte('\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = w.f.Write(b.Bytes()) // a full disk must not stop the container; nothing to report to
}

// close waits for the streams to end (briefly: a daemon the container started in another
// process group may hold them for good) and closes the file.
func (w *logWriter) close() {
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(logDrainMax):
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.f.Close()
}

// logEntry is one parsed line of a log file.
type logEntry struct {
	time    time.Time
	stream  string
	partial bool
	content []byte
}

func parseLogEntry(line []byte) (logEntry, error) {
	fields := bytes.SplitN(line, []byte(" "), 4)
	if len(fields) < 3 {
		return logEntry{}, fmt.Errorf("malformed log line %q", line)
	}
	ts, err := time.Parse(time.RFC3339Nano, string(fields[0]))
	if err != nil {
		return logEntry{}, fmt.Errorf("malformed log time in %q: %w", line, err)
	}
	e := logEntry{time: ts, stream: string(fields[1]), partial: string(fields[2]) == tagPartial}
	if len(fields) == 4 {
		e.content = fields[3]
	}
	return e, nil
}

// logOptions are the containerLogs query parameters the lab honours.
type logOptions struct {
	follow     bool
	timestamps bool
	tailLines  int64 // < 0: all
	since      time.Time
	limitBytes int64 // <= 0: no limit
}

// errLogLimit ends a log request that reached limitBytes.
var errLogLimit = errors.New("log byte limit reached")

// logPrinter writes entries as the kubelet does: a partial entry continues on the next, and
// with timestamps each line starts with the time of its first entry.
type logPrinter struct {
	w          io.Writer
	o          logOptions
	written    int64
	midLine    bool
	pendingErr error
}

func (p *logPrinter) print(e logEntry) error {
	if !p.o.since.IsZero() && e.time.Before(p.o.since) {
		p.midLine = e.partial
		return nil
	}
	var b bytes.Buffer
	if p.o.timestamps && !p.midLine {
		b.WriteString(e.time.Format(time.RFC3339Nano) + " ")
	}
	b.Write(e.content)
	if !e.partial {
		b.WriteByte('\n')
	}
	p.midLine = e.partial
	out := b.Bytes()
	if p.o.limitBytes > 0 && p.written+int64(len(out)) > p.o.limitBytes {
		out = out[:p.o.limitBytes-p.written]
		p.pendingErr = errLogLimit
	}
	n, err := p.w.Write(out)
	p.written += int64(n)
	if err != nil {
		return err
	}
	return p.pendingErr
}

// writeLogs copies the log file at path to w. With follow it then waits for more until live
// reports that the run writing the file has ended (and the rest is copied) or ctx ends.
func writeLogs(ctx context.Context, w io.Writer, path string, o logOptions, live func() bool, flush func()) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening container log: %w", err)
	}
	defer f.Close()
	p := &logPrinter{w: w, o: o}
	r := bufio.NewReader(f)
	var pending []byte // a line being written: no newline yet

	readLines := func() ([]logEntry, error) {
		var entries []logEntry
		for {
			chunk, err := r.ReadBytes('\n')
			pending = append(pending, chunk...)
			if err != nil {
				if errors.Is(err, io.EOF) {
					return entries, nil
				}
				return entries, err
			}
			e, perr := parseLogEntry(bytes.TrimSuffix(pending, []byte("\n")))
			pending = nil // e.content points into it
			if perr != nil {
				continue // a line the agent did not write; skip, as the kubelet does
			}
			entries = append(entries, e)
		}
	}
	entries, err := readLines()
	if err != nil {
		return fmt.Errorf("reading container log: %w", err)
	}
	if o.tailLines >= 0 {
		entries = tail(entries, o.tailLines)
	}
	for _, e := range entries {
		if err := p.print(e); err != nil {
			return ignoreLimit(err)
		}
	}
	flush()
	if !o.follow {
		return nil
	}
	for {
		ended := !live() // read before the final read so no line is lost
		entries, err := readLines()
		if err != nil {
			return fmt.Errorf("reading container log: %w", err)
		}
		for _, e := range entries {
			if err := p.print(e); err != nil {
				return ignoreLimit(err)
			}
		}
		if len(entries) > 0 {
			flush()
		}
		if ended {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(logPollInterval):
		}
	}
}

func ignoreLimit(err error) error {
	if errors.Is(err, errLogLimit) {
		return nil
	}
	return err
}

// tail keeps the entries of the last n lines (a line is partial entries plus a full one).
func tail(entries []logEntry, n int64) []logEntry {
	if n == 0 {
		return nil
	}
	lines := int64(0)
	for i := len(entries) - 1; i >= 0; i-- {
		if !entries[i].partial {
			lines++
			if lines > n {
				return entries[i+1:]
			}
		}
	}
	return entries
}
