// Package dashboardtest reads what the dashboard page shows in a browser, for the tests of
// the page against a fixed view (internal/dashboard) and against a lab (internal/lab).
package dashboardtest

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/octopus-mcs/octopus/internal/browser"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// Page is what the page draws, read from its DOM.
type Page struct {
	// Updates counts the views the page has drawn.
	Updates  int
	Hub      string
	Clusters map[string]string // ID → heartbeat
	Gateways map[string]string // cluster → liveness
	// Tunnels are the drawn halves, "from>to" → state.
	Tunnels  map[string]string
	Services map[string]string // namespace/name → "exporters|importers"
	// Details is the cluster whose conditions are shown, and Conditions its rows
	// ("Object/Type" → status).
	Details    string
	Conditions map[string]string
}

// readScript collects Page's fields from the data attributes the page sets (app.js).
const readScript = `
const all = (sel, f) => Object.fromEntries([...document.querySelectorAll(sel)].map(f));
const hub = document.querySelector("[data-hub]");
const details = document.getElementById("details");
return {
  Updates: Number(document.body.dataset.updates || 0),
  Hub: hub ? hub.dataset.hub : "",
  Clusters: all("[data-cluster]:not(#details)", e => [e.dataset.cluster, e.dataset.heartbeat]),
  Gateways: all("[data-gateway]", e => [e.dataset.gateway, e.dataset.liveness]),
  Tunnels: all("line.tunnel", e => [e.dataset.from + ">" + e.dataset.to, e.dataset.state]),
  Services: all("[data-service]", e => [e.dataset.service, e.dataset.exporters + "|" + e.dataset.importers]),
  Details: details.dataset.cluster || "",
  Conditions: all("#details [data-condition]", e => [e.dataset.condition, e.dataset.status]),
};`

// Read reads the page.
func Read(ctx context.Context, b *browser.Browser) (Page, error) {
	var p Page
	if err := b.Execute(ctx, readScript, &p); err != nil {
		return Page{}, fmt.Errorf("reading the page: %w", err)
	}
	return p, nil
}

// Wait reads the page until ok accepts it (nil error) or timeout passes, and returns the
// last page read.
func Wait(ctx context.Context, t testing.TB, b *browser.Browser, timeout time.Duration, what string, ok func(Page) error) Page {
	t.Helper()
	var p Page
	err := testenv.Poll(t, 250*time.Millisecond, timeout, func() error {
		var err error
		if p, err = Read(ctx, b); err != nil {
			return err
		}
		return ok(p)
	})
	if err != nil {
		t.Fatalf("the page did not show %s: %v; last read: %+v", what, err, p)
	}
	return p
}

// Screenshot saves a PNG of the page as name in the test's artifact directory (kept with
// go test -artifacts) and logs the path.
func Screenshot(ctx context.Context, t *testing.T, b *browser.Browser, name string) string {
	t.Helper()
	png, err := b.Screenshot(ctx)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the dashboard: %s", path)
	return path
}

// Start starts a browser for the test, closed at its end.
func Start(ctx context.Context, t *testing.T) *browser.Browser {
	t.Helper()
	b, err := browser.Start(ctx, browser.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// Expect returns an error naming the differences between got and want.
func Expect(what string, got, want map[string]string) error {
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		w := want[k]
		if g, ok := got[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s %s missing (want %s)", what, k, w))
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("%s %s is %s, want %s", what, k, g, w))
		}
	}
	if len(diffs) > 0 {
		return fmt.Errorf("%s", strings.Join(diffs, "; "))
	}
	return nil
}
