package app_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/internal/apptest"
)

// testApp is a running service on free loopback ports with a fake clock.
type testApp struct {
	*app.App
	clock  *clock.Fake
	dir    string
	client rlsv3.RateLimitServiceClient
	http   *http.Client
}

// start writes files (name → content) into a config directory and starts
// a service on it. tweak may change the options.
func start(t *testing.T, files map[string]string, tweak func(*app.Options)) *testApp {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o := apptest.Options()
	o.ConfigPath = dir
	o.ReloadDelay = 20 * time.Millisecond
	if tweak != nil {
		tweak(&o)
	}
	clk := clock.NewFake(time.Unix(1_800_000_000, 0)) // on an hour boundary
	a := apptest.Run(t, o, clk)
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &testApp{App: a, clock: clk, dir: dir, client: rlsv3.NewRateLimitServiceClient(conn), http: &http.Client{Timeout: 5 * time.Second}}
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// ask calls ShouldRateLimit for domain with the descriptors.
func (ta *testApp) ask(t *testing.T, domain string, ds ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	return ta.askReq(t, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
}

func (ta *testApp) askReq(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := ta.client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}
