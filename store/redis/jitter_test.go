package redis_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/storetest"
)

func TestExpirationJitterSpreadsWindowTTLs(t *testing.T) {
	t.Parallel()
	const keys = 50
	length := time.Minute
	for _, tt := range []struct {
		name             string
		opts             redis.Options
		wantMin, wantMax int64 // TTLs in seconds
		wantSpread       bool
	}{
		{name: "without jitter a window key lives for its length", opts: redis.Options{}, wantMin: 59, wantMax: 60},
		{name: "with jitter the script adds 0 to 30 seconds", opts: redis.Options{ExpirationJitter: 30 * time.Second}, wantMin: 59, wantMax: 90, wantSpread: true},
		{name: "with jitter envoyproxy/ratelimit's commands add 0 to 30 seconds", opts: redis.Options{EnvoyCompatible: true, ExpirationJitter: 30 * time.Second}, wantMin: 59, wantMax: 90, wantSpread: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, s := single(t, tt.opts)
			now := storetest.Base()
			var b store.Batch
			for i := range keys {
				b.Ops = append(b.Ops, store.Op{Key: "j" + strconv.Itoa(i) + "_", Algorithm: store.FixedWindow, Kind: store.Spend, Window: store.Window{Limit: 10, Length: length}, Cost: 1})
			}
			// Twice: the second hits leave the script's expiry alone, and
			// renew envoyproxy/ratelimit's (with a new jitter).
			for range 2 {
				for _, r := range do(t, s, now, b) {
					if !r.Allowed {
						t.Fatalf("got %+v, want allowed", r)
					}
				}
			}
			lo, hi := int64(1<<62), int64(0)
			for i := range keys {
				key := "j" + strconv.Itoa(i) + "_" + strconv.FormatInt(now.Unix(), 10)
				if got := srv.MustDo("GET", key); got != "2" {
					t.Fatalf("GET %s: got %v, want 2", key, got)
				}
				ttl, ok := srv.MustDo("TTL", key).(int64)
				if !ok {
					t.Fatalf("TTL %s: not an integer", key)
				}
				lo, hi = min(lo, ttl), max(hi, ttl)
			}
			if lo < tt.wantMin || hi > tt.wantMax {
				t.Errorf("got TTLs from %d to %d seconds, want within %d to %d", lo, hi, tt.wantMin, tt.wantMax)
			}
			if spread := hi-lo > 5; spread != tt.wantSpread {
				t.Errorf("got TTLs from %d to %d seconds: spread %t, want %t", lo, hi, spread, tt.wantSpread)
			}
		})
	}
}

func TestExpirationJitterOutOfRangeIsRefused(t *testing.T) {
	t.Parallel()
	for _, j := range []time.Duration{-time.Second, 25 * time.Hour} {
		_, err := redis.New(context.Background(), redis.Options{Addrs: []string{"127.0.0.1:1"}, ExpirationJitter: j})
		if err == nil {
			t.Errorf("jitter %s: got no error, want one", j)
		}
	}
}
