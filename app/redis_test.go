package app_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/store/redis/redistest"
)

const sharedConfig = `
domain: shared
descriptors:
  - key: window
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: smooth
    rate_limit: {unit: hour, requests_per_unit: 1, burst: 70}
`

// startOnRedis starts n services sharing one Redis deployment.
func startOnRedis(t *testing.T, n int, mode string, addrs []string) []rlsv3.RateLimitServiceClient {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "shared.yaml"), []byte(sharedConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	var clients []rlsv3.RateLimitServiceClient
	now := time.Now().Truncate(time.Hour).Add(2 * time.Hour)
	for range n {
		o := app.Defaults()
		o.ConfigPath = dir
		o.GRPCAddr, o.HTTPAddr, o.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "off"
		o.LogLevel = "error"
		o.Store = "redis"
		o.Redis.Mode = mode
		o.Redis.Addrs = addrs
		o.Redis.Timeout = 2 * time.Second
		o.Redis.KeyPrefix = "t:"
		a, err := app.New(o, app.Deps{Logger: app.NewLogger(o, os.Stderr), Clock: clock.NewFake(now)})
		if err != nil {
			t.Fatalf("app.New: %v", err)
		}
		if err := a.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = a.Shutdown(ctx)
		})
		conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		clients = append(clients, rlsv3.NewRateLimitServiceClient(conn))
	}
	return clients
}

// admitted sends calls requests for key from 64 concurrent callers spread
// over the servers and counts the OK answers.
func admitted(t *testing.T, clients []rlsv3.RateLimitServiceClient, key string, calls int) int64 {
	t.Helper()
	var ok, failed atomic.Int64
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[w%len(clients)]
			for next.Add(1) <= int64(calls) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shared", Descriptors: []*rlcommon.RateLimitDescriptor{desc(key, "x")}})
				cancel()
				if err != nil {
					failed.Add(1)
					continue
				}
				if resp.OverallCode == rlsv3.RateLimitResponse_OK {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d calls failed", n)
	}
	return ok.Load()
}

func TestThreeServersShareOneRedisExactly(t *testing.T) {
	srv := redistest.StartSingle(t)
	clients := startOnRedis(t, 3, "single", []string{srv.Addr})
	if got := admitted(t, clients, "window", 300); got != 100 {
		t.Errorf("fixed window: got %d admitted, want exactly 100", got)
	}
	if got := admitted(t, clients, "smooth", 300); got != 70 {
		t.Errorf("GCRA: got %d admitted, want exactly 70", got)
	}
	keys, err := srv.Do("KEYS", "t:*")
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.Join(toStrings(keys), " "); !strings.Contains(s, "t:shared_window_x_") {
		t.Errorf("Redis keys %q lack the envoyproxy-style window key", s)
	}
}

func TestThreeServersShareOneRedisClusterExactly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cl := redistest.StartCluster(t, 3)
	clients := startOnRedis(t, 3, "cluster", cl.Addrs())
	if got := admitted(t, clients, "window", 300); got != 100 {
		t.Errorf("fixed window: got %d admitted, want exactly 100", got)
	}
	if got := admitted(t, clients, "smooth", 300); got != 70 {
		t.Errorf("GCRA: got %d admitted, want exactly 70", got)
	}
}

func toStrings(v any) []string {
	switch x := v.(type) {
	case []any:
		var out []string
		for _, e := range x {
			out = append(out, toStrings(e)...)
		}
		return out
	case []string:
		return x
	case string:
		return []string{x}
	}
	return nil
}

func TestRedisOutageFollowsThePolicyAndRecovers(t *testing.T) {
	for _, tc := range []struct {
		policy string
		wantOK bool // the answer while Redis is down
	}{
		{policy: "allow", wantOK: true},
		{policy: "deny", wantOK: false},
		{policy: "local", wantOK: true},
		{policy: "error"},
	} {
		t.Run("on-store-error "+tc.policy, func(t *testing.T) {
			srv := redistest.StartSingle(t)
			ta := start(t, map[string]string{"shared.yaml": sharedConfig}, func(o *app.Options) {
				o.Store, o.Redis.Addrs, o.Redis.Timeout, o.OnStoreError = "redis", []string{srv.Addr}, 200*time.Millisecond, tc.policy
			})
			health := func() int { code, _ := ta.get(t, "http://"+ta.HTTPAddr()+"/healthcheck"); return code }
			call := func() (*rlsv3.RateLimitResponse, error, time.Duration) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				t0 := time.Now()
				resp, err := ta.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shared", Descriptors: []*rlcommon.RateLimitDescriptor{desc("window", "x")}})
				return resp, err, time.Since(t0)
			}
			if resp, err, _ := call(); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				t.Fatalf("before the outage: got %v, %v", resp, err)
			}
			srv.Kill()
			for i := range 5 {
				resp, err, took := call()
				if took > 2*time.Second {
					t.Fatalf("call %d during the outage took %s, want it bounded by the 200ms store timeout", i, took)
				}
				switch {
				case tc.policy == "error":
					if err == nil {
						t.Fatalf("call %d: got %v, want an error", i, resp)
					}
				case err != nil:
					t.Fatalf("call %d: got %v, want an answer by policy", i, err)
				case (resp.OverallCode == rlsv3.RateLimitResponse_OK) != tc.wantOK:
					t.Fatalf("call %d: got %v, want OK=%v", i, resp.OverallCode, tc.wantOK)
				}
			}
			// As envoyproxy/ratelimit: a policy that answers for Redis
			// (fails open) keeps the service healthy.
			wantCode := 503
			if tc.policy == "allow" || tc.policy == "local" {
				wantCode = 200
			}
			if code := health(); code != wantCode {
				t.Fatalf("healthcheck during the outage: got %d, want %d", code, wantCode)
			}
			srv.Restart()
			eventually(t, "decisions to resume", func() bool {
				resp, err, _ := call()
				return err == nil && resp.OverallCode == rlsv3.RateLimitResponse_OK && resp.Statuses[0].CurrentLimit != nil && health() == 200
			})
		})
	}
}

// One request is one Redis round trip whatever the number of descriptors,
// fixed windows and GCRA buckets alike.
func TestOneRedisRoundTripPerRequest(t *testing.T) {
	srv := redistest.StartSingle(t)
	client := startOnRedis(t, 1, "single", []string{srv.Addr})[0]
	for _, n := range []int{1, 5, 12} {
		req := &rlsv3.RateLimitRequest{Domain: "shared"}
		for i := range n {
			key := []string{"window", "smooth"}[i%2]
			req.Descriptors = append(req.Descriptors, &rlcommon.RateLimitDescriptor{
				Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: key, Value: fmt.Sprintf("rt%d-%d", n, i)}}})
		}
		ask := func() {
			t.Helper()
			resp, err := client.ShouldRateLimit(context.Background(), req)
			if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetStatuses()) != n {
				t.Fatalf("%d descriptors: got %v, %v; want OK with %d statuses", n, resp, err, n)
			}
		}
		ask() // connections up, the script loaded
		// A keep-alive PING can fall in between: the fewest of a few tries.
		best := int64(1 << 62)
		for range 5 {
			before := srv.Reads()
			ask()
			best = min(best, srv.Reads()-before-1)
		}
		if best != 1 {
			t.Errorf("%d descriptors: %d reads by Redis per request, want 1 round trip", n, best)
		}
	}
}
