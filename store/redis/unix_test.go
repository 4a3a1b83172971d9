package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/redis/redistest"
	"github.com/sluice-rl/sluice/store/storetest"
)

func TestUnixSocket(t *testing.T) {
	srv := redistest.StartSingle(t, redistest.WithUnixSocket())
	s := newStore(t, redis.Options{Addrs: []string{srv.Socket}, SocketType: redis.Unix})
	now := base
	op := store.Op{Key: "unix", Algorithm: store.FixedWindow, Kind: store.Spend, Window: store.Window{Limit: 2, Length: 60e9}, Cost: 1}
	for i, want := range []bool{true, true, false} {
		if r := do(t, s, now, store.Batch{Ops: []store.Op{op}})[0]; r.Allowed != want {
			t.Fatalf("hit %d over the socket: got allowed=%v, want %v", i+1, r.Allowed, want)
		}
	}
	// The count is in the server the socket leads to: read it over TCP.
	keys, err := srv.Do("KEYS", "unix*")
	if err != nil {
		t.Fatal(err)
	}
	if got := len(keys.([]any)); got != 1 {
		t.Fatalf("got %d keys over TCP, want 1", got)
	}
}

func TestUnixSocketConformance(t *testing.T) {
	srv := redistest.StartSingle(t, redistest.WithUnixSocket())
	storetest.Run(t, func(t *testing.T) store.Store {
		if _, err := srv.Do("FLUSHALL"); err != nil {
			t.Fatal(err)
		}
		return newStore(t, redis.Options{Addrs: []string{srv.Socket}, SocketType: redis.Unix})
	})
}

func TestUnixSocketOptions(t *testing.T) {
	tests := []struct {
		name    string
		o       redis.Options
		wantErr string
	}{
		{name: "a unix socket in cluster mode is refused", o: redis.Options{Addrs: []string{"/tmp/x.sock"}, SocketType: redis.Unix, Mode: redis.Cluster}, wantErr: "needs mode single"},
		{name: "two socket paths are refused", o: redis.Options{Addrs: []string{"/tmp/a.sock", "/tmp/b.sock"}, SocketType: redis.Unix}, wantErr: "exactly one socket path"},
		{name: "an unknown socket type is refused", o: redis.Options{Addrs: []string{"127.0.0.1:1"}, SocketType: "udp"}, wantErr: `unknown socket type "udp"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := redis.New(context.Background(), tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
	t.Run("a socket nobody listens on is unavailable", func(t *testing.T) {
		_, err := redis.New(context.Background(), redis.Options{Addrs: []string{t.TempDir() + "/none.sock"}, SocketType: redis.Unix})
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("got error %v, want one wrapping store.ErrUnavailable", err)
		}
	})
}
