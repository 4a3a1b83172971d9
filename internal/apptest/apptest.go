// Package apptest starts a whole Sluice service for tests that drive one
// from outside (the app's own tests, the sluice command's, the load
// generator's, the Envoy example's): loopback ports the system picks,
// shut down when the test ends.
package apptest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/clock"
)

// Options returns the service's defaults with every listener on a free
// loopback port and logging only errors.
func Options() app.Options {
	o := app.Defaults()
	o.GRPCAddr, o.HTTPAddr, o.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	o.LogLevel = "error"
	return o
}

// Run builds and starts a service from o, on clk (nil: the real clock),
// and shuts it down when t ends, failing t if the shutdown fails.
func Run(t testing.TB, o app.Options, clk clock.Clock) *app.App {
	t.Helper()
	a, err := app.New(o, app.Deps{Logger: app.NewLogger(o, os.Stderr), Clock: clk})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	if err := a.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := a.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return a
}

// Start runs a service (Options, then Run) whose config directory holds
// files (name → content); tweak, when not nil, changes the options first.
func Start(t testing.TB, files map[string]string, tweak func(*app.Options), clk clock.Clock) *app.App {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o := Options()
	o.ConfigPath = dir
	if tweak != nil {
		tweak(&o)
	}
	return Run(t, o, clk)
}
