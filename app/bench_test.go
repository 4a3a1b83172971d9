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
	for _, client := range []string{"h2", "grpc"} {
		b, err := app.ParseBench([]string{"--addr", ta.GRPCAddr(), "--client", client, "--descriptors", "5", "--concurrency", "4", "--duration", "300ms", "--warmup", "50ms", "--keys", "100"}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		r, err := app.RunBench(context.Background(), b)
		if err != nil {
			t.Fatalf("RunBench --client %s: %v", client, err)
		}
		if r.Calls == 0 || r.P50 <= 0 || r.P99 < r.P50 || r.Max < r.P99 || r.OverLimit != 0 {
			t.Fatalf("--client %s: got %s, want calls, ordered percentiles, none over the limit", client, r)
		}
	}
	// Every call counted five descriptors against the store.
	_, body := ta.get(t, "http://"+ta.DebugAddr()+"/metrics")
	if want := "sluice_ratelimit_requests_total{code=\"OK\"}"; !strings.Contains(body, want) {
		t.Fatalf("metrics lack %s", want)
	}
}

// Both clients read the answers: with a limit of 5 per hour on one key,
// the first run has exactly 5 calls admitted, the second none.
func TestBenchCountsOverLimit(t *testing.T) {
	cfg := "domain: bench\ndescriptors:\n  - key: k0\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"
	// One worker goroutine: calls run on it and, while it is busy, on
	// goroutines of their own.
	ta := start(t, map[string]string{"bench.yaml": cfg}, func(o *app.Options) { o.GRPCWorkers = 1 })
	for _, client := range []string{"h2", "grpc"} {
		b, err := app.ParseBench([]string{"--addr", ta.GRPCAddr(), "--client", client, "--domain", "bench", "--concurrency", "2", "--duration", "200ms", "--warmup", "0s", "--keys", "1"}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		// Both clients ask about k0=v0: the second finds the bucket spent.
		r, err := app.RunBench(context.Background(), b)
		if err != nil {
			t.Fatalf("RunBench --client %s: %v", client, err)
		}
		want := int64(5) // the first run spends the bucket
		if client == "grpc" {
			want = 0
		}
		if admitted := r.Calls - r.OverLimit; r.Calls < 10 || admitted != want {
			t.Fatalf("--client %s: got %s, want %d calls admitted", client, r, want)
		}
	}
}

func TestBenchRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--descriptors", "0"}, {"--concurrency", "0"}, {"--duration", "0s"}, {"--duration", "2h"}, {"--client", "http"},
		{"--keys", "1000000000"}, {"--descriptors", "100000"}, {"--conns", "0"}, {"--warmup", "2h"}} {
		if _, err := app.ParseBench(args, io.Discard); err == nil {
			t.Errorf("ParseBench(%q): got nil, want an error", args)
		}
	}
}
