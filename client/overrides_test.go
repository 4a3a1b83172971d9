package client_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/store/memory"
)

// dialWithOverrides starts the key-value API with runtime overrides and the
// admin token "s3cret" over gRPC, with the limits of the examples, and
// returns a client of it.
func dialWithOverrides(t *testing.T) *client.Client {
	t.Helper()
	d, err := limits.ParseDefaults("defaults.yaml", []byte(defaultsYAML))
	if err != nil {
		t.Fatal(err)
	}
	files, err := limits.New(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC))
	lim := limiter.New(memory.New(memory.Options{}), clk)
	quiet := slog.New(slog.DiscardHandler)
	ov := server.NewOverrides(server.OverridesOptions{Limiter: lim, Files: func() *limits.Set { return files }, Clock: clk, Logger: quiet})
	kv := server.NewKV(server.KVOptions{Limiter: lim, Clock: clk, Limits: ov.Limits, Overrides: ov, Admin: server.AdminAuth{Token: "s3cret"}, Logger: quiet})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	sluicev1.RegisterLimitsServer(srv, kv)
	sluicev1.RegisterOverridesServer(srv, kv.OverridesGRPC())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	c, err := client.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestRuntimeOverridesThroughTheClient(t *testing.T) {
	t.Parallel()
	c := dialWithOverrides(t)
	ctx := context.Background()
	admin := client.WithAdminToken(ctx, "s3cret")
	want := client.Override{Name: "NewOrdersPerAccount", ID: "555", Burst: 1000, Count: 1000, Period: 3 * time.Hour, Comment: "migration"}

	t.Run("a call without the token is refused", func(t *testing.T) {
		if _, err := c.PutOverride(ctx, want); !client.IsForbidden(err) {
			t.Errorf("PutOverride: got %v, want PermissionDenied", err)
		}
		if _, err := c.Overrides(client.WithAdminToken(ctx, "guess")); !client.IsForbidden(err) {
			t.Errorf("Overrides with a wrong token: got %v, want PermissionDenied", err)
		}
	})
	t.Run("a spend above the default is allowed once the override is set", func(t *testing.T) {
		got, err := c.PutOverride(admin, want)
		if err != nil {
			t.Fatalf("PutOverride: %v", err)
		}
		if got.Key != "3:555" || got.Burst != 1000 || got.Period != 3*time.Hour || got.Comment != "migration" || !got.Updated.Equal(time.Date(2026, 11, 23, 15, 0, 0, 0, time.UTC)) {
			t.Errorf("got %+v, want the override with key 3:555 and the server's time", got)
		}
		d, err := c.Spend(ctx, "NewOrdersPerAccount", "555", 500)
		if err != nil || !d.Allowed || d.Limit.Source != client.SourceOverride {
			t.Errorf("Spend of 500: got %+v, %v, want allowed by the override", d, err)
		}
	})
	t.Run("the override is listed and read back", func(t *testing.T) {
		list, err := c.Overrides(admin)
		if err != nil || len(list) != 1 || list[0].Key != "3:555" {
			t.Errorf("Overrides: got %+v, %v, want 3:555", list, err)
		}
		if o, err := c.Override(admin, "NewOrdersPerAccount", "555"); err != nil || o.Count != 1000 {
			t.Errorf("Override: got %+v, %v, want count 1000", o, err)
		}
	})
	t.Run("a bad limit is refused naming the field", func(t *testing.T) {
		bad := want
		bad.Period = 0
		_, err := c.PutOverride(admin, bad)
		if !client.IsInvalid(err) || !strings.Contains(err.Error(), "runtime override: invalid period 0s for NewOrdersPerAccount, must be > 0") {
			t.Errorf("got %v, want InvalidArgument naming the period", err)
		}
	})
	t.Run("a deleted override is gone and the default applies", func(t *testing.T) {
		if _, err := c.DeleteOverride(admin, "NewOrdersPerAccount", "555"); err != nil {
			t.Fatalf("DeleteOverride: %v", err)
		}
		if _, err := c.Override(admin, "NewOrdersPerAccount", "555"); !client.IsNotFound(err) {
			t.Errorf("Override after delete: got %v, want NotFound", err)
		}
		d, err := c.Check(ctx, "NewOrdersPerAccount", "555", 0)
		if err != nil || d.Limit.Source != client.SourceDefault || d.Limit.Burst != 300 {
			t.Errorf("Check: got %+v, %v, want the default burst 300", d, err)
		}
	})
}
