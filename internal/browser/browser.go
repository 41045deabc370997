// Package browser drives a headless Chromium (Debian's chromium) over the Chrome DevTools
// Protocol with github.com/chromedp/chromedp, for tests of pages served on loopback: navigate,
// run a script, click an element, take a screenshot. chromedp starts the browser itself and
// talks to it through a pipe, so no chromedriver runs (docs/operations.md says why chromedp
// replaced the project's own WebDriver client).
package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/chromedp/chromedp"
)

// Options configure Start.
type Options struct {
	// Dir receives Chromium's profile. Required.
	Dir string
	// Width and Height are the window's size. Optional, 1400×1000.
	Width, Height int
}

// Browser is one headless Chromium with one tab.
type Browser struct {
	// tab is chromedp's context of the tab; each call runs in a child of it.
	tab context.Context
	// cancel ends the tab, then the browser.
	cancel func()
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

// Start runs Debian's chromium (from PATH) with a profile in opts.Dir and opens its tab. The
// browser outlives ctx, which bounds only the start; Close ends it.
func Start(ctx context.Context, opts Options) (*Browser, error) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		return nil, fmt.Errorf("chromium is not installed (run hack/install-deps.sh): %w", err)
	}
	if opts.Width == 0 || opts.Height == 0 {
		opts.Width, opts.Height = 1400, 1000
	}
	profile := filepath.Join(opts.Dir, "chromium-profile")
	if err := os.MkdirAll(profile, 0o700); err != nil {
		return nil, err
	}
	// Only our flags, not chromedp's defaults: the list above is what the tests were
	// written against.
	allocOpts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium), chromedp.UserDataDir(profile), chromedp.WindowSize(opts.Width, opts.Height),
	}
	for _, arg := range chromiumArgs {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		if hasValue {
			allocOpts = append(allocOpts, chromedp.Flag(name, value))
		} else {
			allocOpts = append(allocOpts, chromedp.Flag(name, true))
		}
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), allocOpts...)
	tab, cancelTab := chromedp.NewContext(alloc)
	b := &Browser{tab: tab, cancel: func() { cancelTab(); cancelAlloc() }}
	// The first action starts the browser, which lives as long as the context that action
	// ran in: the tab's own, not a child bounded by ctx (ctx ending first ends the browser).
	stop := context.AfterFunc(ctx, b.cancel)
	err = chromedp.Do(tab, chromedp.Navigate("about:blank"))
	if !stop() || err != nil {
		b.Close()
		return nil, fmt.Errorf("starting chromium: %w", errors.Join(err, ctx.Err()))
	}
	return b, nil
}

// Navigate loads url and waits for its load event.
func (b *Browser) Navigate(ctx context.Context, url string) error {
	return b.do(ctx, chromedp.Navigate(url))
}

// Execute runs script (a function body, as WebDriver's execute/sync takes it) in the page and
// decodes what it returns into out, when out is not nil.
func (b *Browser) Execute(ctx context.Context, script string, out any) error {
	call, cancel := b.call(ctx)
	defer cancel()
	raw, err := chromedp.Run(call, chromedp.Evaluate[[]byte]("(() => {\n"+script+"\n})()"))
	if err != nil || out == nil {
		return err
	}
	if len(raw) == 0 { // undefined: the script returned nothing
		raw = []byte("null")
	}
	return json.Unmarshal(raw, out)
}

// Click finds the first element matching a CSS selector, once it is visible, and clicks it as
// a user would: scrolled into view, a mouse press and release at its centre.
func (b *Browser) Click(ctx context.Context, selector string) error {
	if err := b.do(ctx, chromedp.Click(chromedp.CSS(selector))); err != nil {
		return fmt.Errorf("clicking %s: %w", selector, err)
	}
	return nil
}

// Screenshot returns a PNG of the window.
func (b *Browser) Screenshot(ctx context.Context) ([]byte, error) {
	call, cancel := b.call(ctx)
	defer cancel()
	return chromedp.Run(call, chromedp.CaptureScreenshot())
}

// Close ends the browser.
func (b *Browser) Close() { b.cancel() }

// call is a child of the tab's context that also ends with ctx: chromedp runs actions in its
// own context, the caller bounds them with its.
func (b *Browser) call(ctx context.Context) (context.Context, context.CancelFunc) {
	call, cancel := context.WithCancel(b.tab)
	stop := context.AfterFunc(ctx, cancel)
	return call, func() { stop(); cancel() }
}

func (b *Browser) do(ctx context.Context, a chromedp.Action[chromedp.Void]) error {
	call, cancel := b.call(ctx)
	defer cancel()
	return chromedp.Do(call, a)
}
