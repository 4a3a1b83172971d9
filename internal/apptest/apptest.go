// Package apptest starts a whole Sluice service for the tests of the
// packages that drive one from outside (the sluice command, the load
// generator): loopback ports the system picks, the given domain files,
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

// Start runs a service whose config directory holds files (name →
// content), with every listener on a free loopback port and logging only
// errors; tweak, when not nil, changes the options first, and clk, when
// not nil, is its clock. The service shuts down when t ends.
func Start(t testing.TB, files map[string]string, tweak func(*app.Options), clk clock.Clock) *app.App {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o := app.Defaults()
	o.ConfigPath = dir
	o.GRPCAddr, o.HTTPAddr, o.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	o.LogLevel = "error"
	if tweak != nil {
		tweak(&o)
	}
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
