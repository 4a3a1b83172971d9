package bench_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/internal/apptest"
	"github.com/sluice-rl/sluice/internal/bench"
)

// startSluice starts a Sluice service with cfg as its only descriptor
// file, on free loopback ports and with a fake clock that stands still on
// an hour boundary. tweak may change the options.
func startSluice(t *testing.T, cfg string, tweak func(*app.Options)) *app.App {
	t.Helper()
	return apptest.Start(t, map[string]string{"bench.yaml": cfg}, tweak, clock.NewFake(time.Unix(1_800_000_000, 0)))
}

func TestBenchAgainstARunningServer(t *testing.T) {
	cfg, err := os.ReadFile("../../examples/config/bench.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a := startSluice(t, string(cfg), nil)
	for _, client := range []string{"h2", "grpc"} {
		o, err := bench.ParseOptions([]string{"--addr", a.GRPCAddr(), "--client", client, "--descriptors", "5", "--concurrency", "4", "--duration", "300ms", "--warmup", "50ms", "--keys", "100"}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		r, err := bench.Run(context.Background(), o)
		if err != nil {
			t.Fatalf("Run --client %s: %v", client, err)
		}
		if r.Calls == 0 || r.P50 <= 0 || r.P99 < r.P50 || r.Max < r.P99 || r.OverLimit != 0 {
			t.Fatalf("--client %s: got %s, want calls, ordered percentiles, none over the limit", client, r)
		}
	}
	// Every call counted five descriptors against the store.
	body := getBody(t, "http://"+a.DebugAddr()+"/metrics")
	if want := "sluice_ratelimit_requests_total{code=\"OK\"}"; !strings.Contains(body, want) {
		t.Fatalf("metrics lack %s", want)
	}
}

// A server that knows no limit for the requests is refused: every call
// would be a no-op. --allow-unlimited measures it anyway.
func TestBenchRefusesAServerWithoutTheLimits(t *testing.T) {
	a := startSluice(t, "domain: other\ndescriptors:\n  - {key: k0, rate_limit: {unit: second, requests_per_unit: 5}}\n", nil)
	o, err := bench.ParseOptions([]string{"--addr", a.GRPCAddr(), "--duration", "100ms", "--warmup", "0s", "--concurrency", "2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, err = bench.Run(context.Background(), o)
	if !errors.Is(err, bench.ErrNoLimit) || !strings.Contains(err.Error(), `domain "bench"`) {
		t.Fatalf("unknown domain: got %v, want ErrNoLimit naming the domain", err)
	}
	o.AllowUnlimited = true
	if r, err := bench.Run(context.Background(), o); err != nil || r.Calls == 0 {
		t.Fatalf("--allow-unlimited: got %s, %v; want calls measured", r, err)
	}
	o.AllowUnlimited, o.Domain = false, "other"
	if r, err := bench.Run(context.Background(), o); err != nil || r.Calls == 0 {
		t.Fatalf("--domain other: got %s, %v; want calls measured", r, err)
	}
}

// Both clients read the answers: with a limit of 5 per hour on one key,
// the first run has exactly 5 calls admitted, the second none.
func TestBenchCountsOverLimit(t *testing.T) {
	cfg := "domain: bench\ndescriptors:\n  - key: k0\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"
	// One worker goroutine: calls run on it and, while it is busy, on
	// goroutines of their own.
	a := startSluice(t, cfg, func(o *app.Options) { o.GRPCWorkers = 1 })
	for _, client := range []string{"h2", "grpc"} {
		o, err := bench.ParseOptions([]string{"--addr", a.GRPCAddr(), "--client", client, "--domain", "bench", "--concurrency", "2", "--duration", "200ms", "--warmup", "0s", "--keys", "1"}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		// Both clients ask about k0=v0: the second finds the bucket spent.
		r, err := bench.Run(context.Background(), o)
		if err != nil {
			t.Fatalf("Run --client %s: %v", client, err)
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
		if _, err := bench.ParseOptions(args, io.Discard); err == nil {
			t.Errorf("ParseOptions(%q): got nil, want an error", args)
		}
	}
}

// getBody returns the body of a GET of url.
func getBody(t *testing.T, url string) string {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
