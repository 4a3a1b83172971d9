package app_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/app"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/memory"
)

// gateStore is a memory store whose Do waits until the gate opens, so a
// test can hold calls in flight. It is a real store with a pause, not a
// stand-in for a network service.
type gateStore struct {
	*memory.Store
	entered chan struct{}
	gate    chan struct{}
	closed  atomic.Bool
}

func (g *gateStore) Do(ctx context.Context, now time.Time, b store.Batch, out []store.Result) error {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.gate
	return g.Store.Do(ctx, now, b, out)
}

func (g *gateStore) Close() error {
	g.closed.Store(true)
	return g.Store.Close()
}

func TestGracefulShutdown(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "basic.yaml"), []byte(basicConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	o := app.Defaults()
	o.ConfigPath = dir
	o.GRPCAddr, o.HTTPAddr, o.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	o.LogLevel = "error"
	gs := &gateStore{Store: memory.New(memory.Options{}), entered: make(chan struct{}, 1), gate: make(chan struct{})}
	a, err := app.New(o, app.Deps{Logger: app.NewLogger(o, os.Stderr), Clock: clock.NewFake(time.Unix(1_800_000_000, 0)), Store: gs})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "basic", Descriptors: []*rlcommon.RateLimitDescriptor{desc("ip", "1.1.1.1")}}

	// One call in flight, held in the store.
	inflight := make(chan error, 1)
	go func() {
		resp, err := client.ShouldRateLimit(context.Background(), req)
		if err == nil && resp.OverallCode != rlsv3.RateLimitResponse_OK {
			err = errors.New("in-flight call was not OK")
		}
		inflight <- err
	}()
	<-gs.entered

	shutdown := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shutdown <- a.Shutdown(ctx)
	}()

	// New connections are refused once the listeners close.
	eventually(t, "the gRPC listener to close", func() bool {
		c, err := net.DialTimeout("tcp", a.GRPCAddr(), 200*time.Millisecond)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
	eventually(t, "the HTTP listener to close", func() bool {
		c, err := net.DialTimeout("tcp", a.HTTPAddr(), 200*time.Millisecond)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
	select {
	case err := <-shutdown:
		t.Fatalf("shutdown finished (%v) with a call still in flight", err)
	default:
	}
	if gs.closed.Load() {
		t.Fatal("the store was closed with a call still in flight")
	}

	// Let the in-flight call finish: it succeeds, then shutdown completes.
	close(gs.gate)
	if err := <-inflight; err != nil {
		t.Fatalf("in-flight call: %v", err)
	}
	if err := <-shutdown; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if !gs.closed.Load() {
		t.Fatal("the store was not closed")
	}
}

func TestShutdownTwiceIsHarmless(t *testing.T) {
	ta := start(t, map[string]string{"basic.yaml": basicConfig}, nil)
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := ta.Shutdown(ctx)
		cancel()
		if i == 0 && err != nil {
			t.Fatalf("first Shutdown: %v", err)
		}
	}
}
