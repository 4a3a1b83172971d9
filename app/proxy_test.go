package app_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/clock"
)

func TestProxyEndToEnd(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello from "+r.URL.Path)
	}))
	defer upstream.Close()
	cfgPath := filepath.Join(t.TempDir(), "adaptive.yaml")
	if err := os.WriteFile(cfgPath, []byte("maxRate: 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := app.ParseProxy([]string{"--upstream", upstream.URL, "--config", cfgPath}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	x, err := app.NewProxy(p, app.Deps{Clock: clock.NewFake(time.Unix(1_800_000_000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := x.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	}()
	c := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) (int, string, http.Header) {
		resp, err := c.Get("http://" + x.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	for i := range 5 {
		if code, body, _ := get("/page"); code != 200 || body != "hello from /page" {
			t.Fatalf("request %d: got %d %q, want the upstream's answer", i, code, body)
		}
	}
	code, body, h := get("/page")
	if code != http.StatusTooManyRequests || !strings.Contains(body, "Whoa, Slow Down There!") || h.Get("Retry-After") == "" {
		t.Fatalf("6th request: got %d %q, want 429 with the friendly page and Retry-After", code, body)
	}
	if code, _, _ := get("/api/other"); code != 200 {
		t.Fatalf("another URL: got %d, want 200 (its own budget)", code)
	}
}

func TestParseProxyRejectsBadUpstream(t *testing.T) {
	for _, args := range [][]string{nil, {"--upstream", "not a url"}, {"--upstream", "/relative"}} {
		if _, err := app.ParseProxy(args, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), "--upstream") {
			t.Errorf("ParseProxy(%q): got %v, want an error naming --upstream", args, err)
		}
	}
}

func TestParseProxyUpstreamTimeout(t *testing.T) {
	noEnv := func(string) string { return "" }
	p, err := app.ParseProxy([]string{"--upstream", "http://127.0.0.1:9000"}, noEnv, io.Discard)
	if err != nil || p.UpstreamTimeout != time.Minute {
		t.Fatalf("default: got %s, %v; want 1m", p.UpstreamTimeout, err)
	}
	p, err = app.ParseProxy([]string{"--upstream", "http://127.0.0.1:9000"}, func(k string) string {
		if k == "SLUICE_UPSTREAM_TIMEOUT" {
			return "0s"
		}
		return ""
	}, io.Discard)
	if err != nil || p.UpstreamTimeout != 0 {
		t.Fatalf("SLUICE_UPSTREAM_TIMEOUT=0s: got %s, %v; want 0", p.UpstreamTimeout, err)
	}
	_, err = app.ParseProxy([]string{"--upstream", "http://127.0.0.1:9000", "--upstream-timeout", "-1s"}, noEnv, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--upstream-timeout") {
		t.Errorf("--upstream-timeout -1s: got %v, want an error naming the flag", err)
	}
}

// The adaptive limiter's shared windows need a store that decides with the
// caller's now, which Redis's server clock does not: sluice proxy refuses
// that combination however it is given.
func TestParseProxyRefusesRedisServerClock(t *testing.T) {
	t.Parallel()
	base := []string{"--upstream", "http://127.0.0.1:9000", "--redis-addr", "127.0.0.1:6379"}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr bool
	}{
		{name: "the server clock with the redis store is refused", args: []string{"--store", "redis", "--redis-clock", "server"}, wantErr: true},
		{name: "the same from environment variables is refused", env: map[string]string{"SLUICE_STORE": "redis", "SLUICE_REDIS_CLOCK": "server"}, wantErr: true},
		{name: "a flag and a variable together are refused", args: []string{"--store", "redis"}, env: map[string]string{"SLUICE_REDIS_CLOCK": "server"}, wantErr: true},
		{name: "the local clock with the redis store is accepted", args: []string{"--store", "redis", "--redis-clock", "local"}},
		{name: "the redis store's default clock is accepted", args: []string{"--store", "redis"}},
		{name: "a flag for local wins over a variable for server", args: []string{"--store", "redis", "--redis-clock", "local"}, env: map[string]string{"SLUICE_REDIS_CLOCK": "server"}},
		{name: "the server clock is ignored with the memory store", args: []string{"--redis-clock", "server"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := app.ParseProxy(append(append([]string{}, base...), tt.args...), func(k string) string { return tt.env[k] }, io.Discard)
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatal("got no error, want one refusing --redis-clock server")
			}
			for _, want := range []string{"--redis-clock server", "SLUICE_REDIS_CLOCK", "--store redis", "SLUICE_STORE", "--redis-clock local"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("got %q, want it to name %s", err, want)
				}
			}
		})
	}
}

func TestNewProxyRefusesRedisServerClock(t *testing.T) {
	t.Parallel()
	p, err := app.ParseProxy([]string{"--upstream", "http://127.0.0.1:9000", "--store", "redis", "--redis-addr", "127.0.0.1:6379"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// Options built in code skip ParseProxy; NewProxy refuses them before
	// it connects to Redis.
	p.Store.Redis.Clock = "server"
	x, err := app.NewProxy(p, app.Deps{})
	if err == nil {
		_ = x.Shutdown(context.Background())
		t.Fatal("NewProxy with --redis-clock server: got no error, want a refusal")
	}
	if !strings.Contains(err.Error(), "--redis-clock server") {
		t.Errorf("got %q, want it to name --redis-clock server", err)
	}
}

func TestParseProxyShutdownTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    time.Duration
		wantErr string // a substring of the error; empty: no error
	}{
		{name: "the default is serve's 10s", want: 10 * time.Second},
		{name: "the flag sets it", args: []string{"--shutdown-timeout", "30s"}, want: 30 * time.Second},
		{name: "the environment variable sets it", env: map[string]string{"SLUICE_SHUTDOWN_TIMEOUT": "2s"}, want: 2 * time.Second},
		{name: "the flag wins over the variable", args: []string{"--shutdown-timeout", "500ms"}, env: map[string]string{"SLUICE_SHUTDOWN_TIMEOUT": "2s"}, want: 500 * time.Millisecond},
		{name: "zero is refused", args: []string{"--shutdown-timeout", "0s"}, wantErr: "--shutdown-timeout: 0s must be positive"},
		{name: "a negative timeout is refused", args: []string{"--shutdown-timeout", "-1s"}, wantErr: "--shutdown-timeout: -1s must be positive"},
		{name: "a zero variable is refused", env: map[string]string{"SLUICE_SHUTDOWN_TIMEOUT": "0"}, wantErr: "--shutdown-timeout: 0s must be positive"},
		{name: "a variable that is no duration is refused", env: map[string]string{"SLUICE_SHUTDOWN_TIMEOUT": "soon"}, wantErr: `SLUICE_SHUTDOWN_TIMEOUT="soon"`},
		{name: "a flag that is no duration is refused", args: []string{"--shutdown-timeout", "soon"}, wantErr: "-shutdown-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"--upstream", "http://127.0.0.1:9000"}, tt.args...)
			p, err := app.ParseProxy(args, func(k string) string { return tt.env[k] }, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || p.Store.ShutdownTimeout != tt.want {
				t.Fatalf("got %s, %v; want %s", p.Store.ShutdownTimeout, err, tt.want)
			}
		})
	}
}

// An idle proxy stops at once, though clients connected and sent nothing
// (net/http alone would wait 5 s for each).
func TestProxyIdleShutdownIsFast(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()
	cfgPath := filepath.Join(t.TempDir(), "adaptive.yaml")
	if err := os.WriteFile(cfgPath, []byte("maxRate: 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := app.ParseProxy([]string{"--upstream", upstream.URL, "--config", cfgPath}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	x, err := app.NewProxy(p, app.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{x.Addr(), x.DebugAddr()} {
		c, err := net.Dial("tcp", addr) // connected, silent
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	time.Sleep(50 * time.Millisecond) // let the servers accept them
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	began := time.Now()
	if err := x.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("an idle proxy took %s to shut down, want well under net/http's 5 s wait for a silent connection", took)
	}
}
