package app_test

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/app"
)

func TestBenchAgainstARunningServer(t *testing.T) {
	cfg, err := os.ReadFile("../examples/bench/bench.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ta := start(t, map[string]string{"bench.yaml": string(cfg)}, nil)
	b, err := app.ParseBench([]string{"--addr", ta.GRPCAddr(), "--descriptors", "5", "--concurrency", "4", "--duration", "300ms", "--warmup", "50ms", "--keys", "100"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r, err := app.RunBench(context.Background(), b)
	if err != nil {
		t.Fatalf("RunBench: %v", err)
	}
	if r.Calls == 0 || r.P50 <= 0 || r.P99 < r.P50 || r.Max < r.P99 {
		t.Fatalf("got %s, want calls and ordered percentiles", r)
	}
	// Every call counted five descriptors against the store.
	_, body := ta.get(t, "http://"+ta.DebugAddr()+"/metrics")
	if want := "sluice_ratelimit_requests_total{code=\"OK\"}"; !strings.Contains(body, want) {
		t.Fatalf("metrics lack %s", want)
	}
}

func TestBenchRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--descriptors", "0"}, {"--concurrency", "0"}, {"--duration", "0s"}, {"--duration", "2h"}} {
		if _, err := app.ParseBench(args, io.Discard); err == nil {
			t.Errorf("ParseBench(%q): got nil, want an error", args)
		}
	}
}
