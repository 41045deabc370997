// Package webdriver drives a headless Chromium through chromedriver with the W3C WebDriver
// HTTP protocol, for tests of pages served on loopback. It covers what such tests need
// (navigate, run a script, find and click an element, take a screenshot) in a few requests,
// so no browser-automation module is needed.
package webdriver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// Options configure Start.
type Options struct {
	// Dir receives chromedriver's log and Chromium's profile. Required.
	Dir string
	// Width and Height are the window's size. Optional, 1400×1000.
	Width, Height int
}

// Browser is one chromedriver process with one session of a headless Chromium.
type Browser struct {
	driver  *exec.Cmd
	base    string
	session string
	http    *http.Client
}

// chromiumArgs keep the browser headless and on loopback: it runs as root in tests (no
// sandbox then), must not reach any service of its own (updates, sync, safe browsing...), and
// resolves no name but localhost, so a page can only load from the address it was given.
var chromiumArgs = []string{
	"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
	"--no-first-run", "--no-default-browser-check", "--disable-background-networking",
	"--disable-component-update", "--disable-sync", "--disable-default-apps", "--disable-extensions",
	"--disable-domain-reliability", "--disable-client-side-phishing-detection", "--metrics-recording-only",
	"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1, EXCLUDE [::1]",
}

// Start runs chromedriver (from PATH, Debian's chromium-driver) on a free loopback port and
// opens a session of Debian's chromium.
func Start(ctx context.Context, opts Options) (*Browser, error) {
	driverPath, err := exec.LookPath("chromedriver")
	if err != nil {
		return nil, fmt.Errorf("chromedriver is not installed (run hack/install-deps.sh): %w", err)
	}
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		return nil, fmt.Errorf("chromium is not installed (run hack/install-deps.sh): %w", err)
	}
	if opts.Width == 0 || opts.Height == 0 {
		opts.Width, opts.Height = 1400, 1000
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(opts.Dir, "chromedriver.log")
	// chromedriver accepts connections from loopback only unless --allowed-ips says more.
	cmd := exec.Command(driverPath, "--port="+strconv.Itoa(port), "--log-path="+logPath)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting chromedriver: %w", err)
	}
	b := &Browser{driver: cmd, base: "http://127.0.0.1:" + strconv.Itoa(port), http: &http.Client{Timeout: 60 * time.Second}}
	if err := b.waitReady(ctx); err != nil {
		b.Close()
		return nil, fmt.Errorf("%w (log: %s)", err, logPath)
	}
	profile := filepath.Join(opts.Dir, "chromium-profile")
	if err := os.MkdirAll(profile, 0o700); err != nil {
		b.Close()
		return nil, err
	}
	args := append([]string{fmt.Sprintf("--window-size=%d,%d", opts.Width, opts.Height), "--user-data-dir=" + profile}, chromiumArgs...)
	var created struct {
		SessionID string `json:"sessionId"`
	}
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName":        "chrome",
		"goog:chromeOptions": map[string]any{"binary": chromium, "args": args},
	}}}
	if err := b.call(ctx, http.MethodPost, "/session", caps, &created); err != nil {
		b.Close()
		return nil, fmt.Errorf("opening a Chromium session: %w (log: %s)", err, logPath)
	}
	b.session = "/session/" + created.SessionID
	return b, nil
}

// Navigate loads url and waits for its load event.
func (b *Browser) Navigate(ctx context.Context, url string) error {
	return b.call(ctx, http.MethodPost, b.session+"/url", map[string]any{"url": url}, nil)
}

// Execute runs script (a function body; arguments in `arguments`) in the page and decodes
// what it returns into out, when out is not nil.
func (b *Browser) Execute(ctx context.Context, script string, out any, args ...any) error {
	if args == nil {
		args = []any{}
	}
	var raw json.RawMessage
	if err := b.call(ctx, http.MethodPost, b.session+"/execute/sync", map[string]any{"script": script, "args": args}, &raw); err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

// Click finds the first element matching a CSS selector and clicks it as a user would:
// scrolled into view, at its centre, failing if something else covers it.
func (b *Browser) Click(ctx context.Context, selector string) error {
	var found map[string]string
	if err := b.call(ctx, http.MethodPost, b.session+"/element", map[string]any{"using": "css selector", "value": selector}, &found); err != nil {
		return fmt.Errorf("finding %s: %w", selector, err)
	}
	// The W3C element reference key.
	id := found["element-6066-11e4-a52e-4f735466cecf"]
	if err := b.call(ctx, http.MethodPost, b.session+"/element/"+id+"/click", map[string]any{}, nil); err != nil {
		return fmt.Errorf("clicking %s: %w", selector, err)
	}
	return nil
}

// Screenshot returns a PNG of the window.
func (b *Browser) Screenshot(ctx context.Context) ([]byte, error) {
	var encoded string
	if err := b.call(ctx, http.MethodGet, b.session+"/screenshot", nil, &encoded); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(encoded)
}

// Close ends the session and chromedriver (which ends Chromium).
func (b *Browser) Close() {
	if b.session != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = b.call(ctx, http.MethodDelete, b.session, nil, nil)
		cancel()
	}
	_ = b.driver.Process.Kill()
	_ = b.driver.Wait()
}

func (b *Browser) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		var status struct {
			Ready bool `json:"ready"`
		}
		err := b.call(ctx, http.MethodGet, "/status", nil, &status)
		if err == nil && status.Ready {
			return nil
		}
		if err == nil {
			err = errors.New("it reports not ready")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chromedriver not ready after 20s: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// call sends one WebDriver command and decodes its "value" into out.
func (b *Browser) call(ctx context.Context, method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.base+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var reply struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil {
		return fmt.Errorf("%s %s: %s: decoding the reply: %w", method, path, resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK {
		var werr struct {
			Error   string `json:"error"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(reply.Value, &werr)
		return fmt.Errorf("%s %s: %s: %s: %s", method, path, resp.Status, werr.Error, werr.Message)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(reply.Value, out)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port for chromedriver: %w", err)
	}
	defer ln.Close()
	addr, ok := ln.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("finding a free port for chromedriver: not a TCP address")
	}
	return addr.Port, nil
}
