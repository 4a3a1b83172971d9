package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/clock"
)

// lockedBuffer is a bytes.Buffer safe for the servers' goroutines.
type lockedBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// net/http's own log lines (here a TLS handshake error) go through the
// service's logger: with JSON logs, every line is JSON (issue 17, item 7).
func TestNetHTTPLogLinesGoThroughTheServiceLogger(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir, "log")
	cfg := filepath.Join(dir, "config")
	if err := os.MkdirAll(cfg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg, "basic.yaml"), []byte(basicConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	o := app.Defaults()
	o.ConfigPath = cfg
	o.GRPCAddr, o.HTTPAddr, o.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	o.TLSCert, o.TLSKey = p.serverCert, p.serverKey
	var logs lockedBuffer
	a, err := app.New(o, app.Deps{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Clock: clock.NewFake(time.Unix(1_800_000_000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	})
	// Plain HTTP to the TLS port: net/http logs a handshake error.
	if resp, err := http.Get("http://" + a.HTTPAddr() + "/healthcheck"); err == nil {
		resp.Body.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), "TLS handshake error") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "TLS handshake error") {
		t.Fatalf("the handshake error was not logged through the service's logger; logs:\n%s", logs.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("a log line is not JSON: %q", line)
		}
	}
}
