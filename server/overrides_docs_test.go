package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/store/memory"
)

// TestLimitsDocRuntimeOverrideExamples runs every curl command of
// docs/limits.md (the worked example of runtime overrides), in order,
// against a real HTTP server with examples/limits, the admin token
// "s3cret" and a stopped clock, and checks each answer against the output
// the doc shows.
func TestLimitsDocRuntimeOverrideExamples(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed; the docs/limits.md examples need it to run as written")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("sh is not installed; the docs/limits.md examples are shell commands")
	}
	examples := docExamples(t, "../docs/limits.md")
	if len(examples) < 8 {
		t.Fatalf("got %d curl examples in docs/limits.md, want at least 8", len(examples))
	}
	set, err := limits.Load("../examples/limits/defaults.yaml", "../examples/limits/overrides.yaml")
	if err != nil {
		t.Fatalf("load example limits: %v", err)
	}
	clk := clock.NewFake(time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC))
	lim := limiter.New(memory.New(memory.Options{}), clk)
	quiet := slog.New(slog.DiscardHandler)
	ov := server.NewOverrides(server.OverridesOptions{Limiter: lim, Files: func() *limits.Set { return set }, Clock: clk, Logger: quiet})
	kv := server.NewKV(server.KVOptions{Limiter: lim, Clock: clk, Limits: ov.Limits, Overrides: ov, Admin: server.AdminAuth{Token: "s3cret"}, Logger: quiet})
	mux := http.NewServeMux()
	mux.Handle("/v1/", server.KVHTTPHandler(kv))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := lis.Addr().String()

	for _, ex := range examples {
		where := fmt.Sprintf("docs/limits.md:%d: %s", ex.line, ex.command)
		if !strings.Contains(ex.command, "localhost:8080") {
			t.Errorf("%s: the command must talk to localhost:8080", where)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, sh, "-c", strings.ReplaceAll(ex.command, "localhost:8080", addr)).Output()
		cancel()
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		if ex.lang == "json" {
			if diff := jsonDiff(t, out, []byte(ex.output)); diff != "" {
				t.Errorf("%s:\n%s", where, diff)
			}
			continue
		}
		checkHTTPOutput(t, where, string(out), ex.output)
	}
}
