package app_test

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/memory"
)

// heldStore is a memory store whose calls wait until the gate opens, and
// that counts the calls that reached it.
type heldStore struct {
	*memory.Store
	reached atomic.Int32
	gate    chan struct{}
}

func (h *heldStore) Do(ctx context.Context, now time.Time, b store.Batch, out []store.Result) error {
	h.reached.Add(1)
	<-h.gate
	return h.Store.Do(ctx, now, b, out)
}

// Past --grpc-max-concurrent-streams a further call on the same
// connection waits at the client; it never reaches the store.
func TestGRPCMaxConcurrentStreams(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "basic.yaml"), []byte(basicConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	o := app.Defaults()
	o.ConfigPath = dir
	o.GRPCAddr, o.HTTPAddr, o.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	o.LogLevel = "error"
	o.GRPCMaxConcurrentStreams = 2
	hs := &heldStore{Store: memory.New(memory.Options{}), gate: make(chan struct{})}
	a, err := app.New(o, app.Deps{Logger: app.NewLogger(o, os.Stderr), Clock: clock.NewFake(time.Unix(1_800_000_000, 0)), Store: hs})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	opened := false
	open := func() {
		if !opened {
			opened = true
			close(hs.gate)
		}
	}
	defer func() {
		open()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	}()
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "basic", Descriptors: []*rlcommon.RateLimitDescriptor{desc("ip", "1.1.1.1")}}
	done := make(chan error, 2)
	for range 2 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := client.ShouldRateLimit(ctx, req)
			done <- err
		}()
	}
	eventually(t, "two calls held in the store", func() bool { return hs.reached.Load() == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := client.ShouldRateLimit(ctx, req); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a third call past 2 streams: got %v, want DeadlineExceeded", err)
	}
	if got := hs.reached.Load(); got != 2 {
		t.Errorf("calls that reached the store: got %d, want 2", got)
	}
	open()
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("a held call once released: got %v, want an answer", err)
		}
	}
}
