package client_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/store"
)

// downStore is a store.Store whose backend cannot be reached.
type downStore struct{}

func (downStore) Do(context.Context, time.Time, store.Batch, []store.Result) error {
	return fmt.Errorf("redis: %w", store.ErrUnavailable)
}
func (downStore) Ping(context.Context) error { return store.ErrUnavailable }
func (downStore) Close() error               { return nil }

func TestClientReportsErrorsAsTheServerClassifiesThem(t *testing.T) {
	t.Parallel()
	c := dialSluice(t)

	// A server whose store is down, reached through New over a connection
	// the test owns.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defaults, err := limits.ParseDefaults("defaults.yaml", []byte(defaultsYAML))
	if err != nil {
		t.Fatal(err)
	}
	set, err := limits.New(defaults, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	sluicev1.RegisterLimitsServer(srv, server.NewKV(server.KVOptions{
		Limiter: limiter.New(downStore{}, clock.NewFake(time.Unix(0, 0))),
		Limits:  func() *limits.Set { return set },
	}))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	down := client.New(conn)
	if err := down.Close(); err != nil {
		t.Errorf("Close of a Client made by New: got %v, want nil", err)
	}

	ctx := context.Background()
	tests := []struct {
		name            string
		call            func() error
		wantInvalid     bool
		wantUnavailable bool
	}{
		{name: "a valid spend is no error", call: func() error {
			_, err := c.Spend(ctx, "NewOrdersPerAccount", "1", 1)
			return err
		}},
		{name: "a malformed id is invalid", wantInvalid: true, call: func() error {
			_, err := c.Spend(ctx, "NewOrdersPerAccount", "x", 1)
			return err
		}},
		{name: "a cost over the burst is invalid", wantInvalid: true, call: func() error {
			_, err := c.Check(ctx, "NewRegistrationsPerIPAddress", "10.0.0.1", 21)
			return err
		}},
		{name: "a batch naming one bucket twice is invalid", wantInvalid: true, call: func() error {
			_, _, err := c.Batch(ctx,
				client.Transaction{Name: "NewOrdersPerAccount", ID: "1", Cost: 1},
				client.Transaction{Name: "NewOrdersPerAccount", ID: "1", Cost: 1, Kind: client.CheckOnly})
			return err
		}},
		{name: "a spend against a store that is down is unavailable", wantUnavailable: true, call: func() error {
			_, err := down.Spend(ctx, "NewOrdersPerAccount", "1", 1)
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if got := client.IsInvalid(err); got != tt.wantInvalid {
				t.Errorf("IsInvalid(%v): got %v, want %v", err, got, tt.wantInvalid)
			}
			if got := client.IsUnavailable(err); got != tt.wantUnavailable {
				t.Errorf("IsUnavailable(%v): got %v, want %v", err, got, tt.wantUnavailable)
			}
			if (err != nil) != (tt.wantInvalid || tt.wantUnavailable) {
				t.Errorf("got error %v, want error %v", err, tt.wantInvalid || tt.wantUnavailable)
			}
		})
	}
}

func TestSpendOnlyTransactionsDoNotDecideTheBatch(t *testing.T) {
	t.Parallel()
	c := dialSluice(t)
	ctx := context.Background()
	if _, err := c.Spend(ctx, "NewRegistrationsPerIPAddress", "10.0.0.1", 20); err != nil {
		t.Fatal(err)
	}
	d, each, err := c.Batch(ctx,
		client.Transaction{Name: "NewRegistrationsPerIPAddress", ID: "10.0.0.1", Cost: 1, Kind: client.SpendOnly},
		client.Transaction{Name: "NewOrdersPerAccount", ID: "12345678", Cost: 1},
	)
	if err != nil {
		t.Fatal(err)
	}
	want := client.Decision{Allowed: true, Remaining: 299, ResetIn: 18 * time.Second,
		Limit: client.Limit{Burst: 300, Count: 600, Period: 180 * time.Minute, Source: client.SourceOverride}, Bucket: "3:12345678"}
	if d != want {
		t.Errorf("batch decision: got %+v, want %+v", d, want)
	}
	if len(each) != 2 || each[0].Allowed || each[0].Limit.Source != client.SourceDefault {
		t.Errorf("results: got %+v, want the spend-only one denied under the default limit", each)
	}
}

func TestSourceNamesReadAsTheHTTPAPISpellsThem(t *testing.T) {
	t.Parallel()
	for s, want := range map[client.Source]string{
		client.SourceNone: "none", client.SourceDefault: "default", client.SourceOverride: "override", client.Source(9): "source(9)",
	} {
		if got := s.String(); got != want {
			t.Errorf("Source(%d).String(): got %q, want %q", int(s), got, want)
		}
	}
}

func TestABatchRefusesKindsItCannotCarry(t *testing.T) {
	t.Parallel()
	c, err := client.Dial("127.0.0.1:1") // never dialled: the batch is refused first
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, k := range []client.Kind{limiter.RefundBucket, limiter.ResetBucket, 42} {
		_, _, err := c.Batch(context.Background(), client.Transaction{Name: "NewOrdersPerAccount", ID: "1", Cost: 1, Kind: k})
		if err == nil || !strings.Contains(err.Error(), "cannot be part of a batch") {
			t.Errorf("kind %s: got %v, want it refused as not part of a batch", k, err)
		}
	}
}

func TestBatchRefundAndResetGiveTokensBack(t *testing.T) {
	t.Parallel()
	c := dialSluice(t)
	ctx := context.Background()
	for _, id := range []string{"10.0.0.7", "10.0.0.8"} {
		if d, err := c.Spend(ctx, "NewRegistrationsPerIPAddress", id, 20); err != nil || !d.Allowed {
			t.Fatalf("spend on %s: %+v %v", id, d, err)
		}
	}
	txns := []client.Transaction{
		{Name: "NewRegistrationsPerIPAddress", ID: "10.0.0.7", Cost: 5},
		{Name: "NewRegistrationsPerIPAddress", ID: "10.0.0.8", Cost: 3},
	}
	d, each, err := c.BatchRefund(ctx, txns...)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed || d.Remaining != 3 || len(each) != 2 || each[0].Remaining != 5 || each[1].Remaining != 3 {
		t.Errorf("BatchRefund: got %+v %+v, want allowed, 5 and 3 back, combined 3", d, each)
	}
	d, each, err = c.BatchReset(ctx, txns...)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed || len(each) != 2 || each[0].Remaining != 20 || each[1].Remaining != 20 {
		t.Errorf("BatchReset: got %+v %+v, want both buckets full (20)", d, each)
	}
	txns[0].Kind = client.CheckOnly
	if _, _, err := c.BatchReset(ctx, txns...); err == nil || !strings.Contains(err.Error(), "leave it zero") {
		t.Errorf("BatchReset with a kind: got %v, want it refused", err)
	}
}

// dialSluice starts a Sluice on the seed limits and returns a client of
// it; both stop when the test ends.
func dialSluice(t *testing.T) *client.Client {
	t.Helper()
	addr, stop := startSluice()
	t.Cleanup(stop)
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
