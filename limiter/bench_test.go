package limiter_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/store/memory"
)

// benchKeys is how many buckets the limiter benchmarks spread over.
const benchKeys = 1 << 20

// BenchmarkSpend is the README's library path: limiter.Spend over the
// memory store, one decision per call on 1,048,576 buckets, serial and
// with RunParallel.
func BenchmarkSpend(b *testing.B) {
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "3:" + strconv.Itoa(i)
	}
	lim := gcra.Limit{Burst: 1_000_000_000, Count: 1_000_000_000, Period: time.Second}
	run := func(b *testing.B, parallel bool) {
		l := limiter.New(memory.New(memory.Options{}), clock.New())
		ctx := context.Background()
		b.ReportAllocs()
		if !parallel {
			for i := 0; b.Loop(); i++ {
				d, err := l.Spend(ctx, limiter.Transaction{Key: keys[i%benchKeys], Limit: lim, Cost: 1})
				if err != nil || !d.Allowed {
					b.Fatalf("got %+v, %v, want allowed", d, err)
				}
			}
			return
		}
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := int(next.Add(1)) * 7919
			for pb.Next() {
				d, err := l.Spend(ctx, limiter.Transaction{Key: keys[i%benchKeys], Limit: lim, Cost: 1})
				if err != nil || !d.Allowed {
					b.Errorf("got %+v, %v, want allowed", d, err)
					return
				}
				i++
			}
		})
	}
	b.Run("serial", func(b *testing.B) { run(b, false) })
	b.Run("parallel", func(b *testing.B) { run(b, true) })
}

// BenchmarkCount is the Envoy path, limiter.Count over the memory store,
// on one fixed window, with the local cache off and on: "within" counts
// windows that are never over; "over" floods one window over its limit,
// which the cache answers without the store.
func BenchmarkCount(b *testing.B) {
	for _, bc := range []struct {
		name  string
		opts  limiter.Options
		limit int64
	}{
		{name: "within, no cache", limit: 1 << 62},
		{name: "within, with the cache", opts: limiter.Options{LocalCacheBytes: 1 << 20}, limit: 1 << 62},
		{name: "over, no cache", limit: 0},
		{name: "over, with the cache", opts: limiter.Options{LocalCacheBytes: 1 << 20}, limit: 0},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l := limiter.NewWithOptions(memory.New(memory.Options{}), clock.New(), bc.opts)
			txns := []limiter.Transaction{{Key: "domain_key_value_", Window: limiter.Window{Limit: bc.limit, Length: time.Hour}, Cost: 1}}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				out := make([]limiter.Decision, 1)
				in := make([]limiter.Transaction, 1)
				for pb.Next() {
					copy(in, txns)
					if err := l.Count(ctx, in, out); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkBatchAndRefund is the key-value calls that take several
// transactions, over the memory store, on buckets in cache: Batch of 3,
// then Refund of 1 and of 3, each on the caller's same transactions.
func BenchmarkBatchAndRefund(b *testing.B) {
	lim := gcra.Limit{Burst: 1_000_000, Count: 1_000, Period: time.Second}
	txns := []limiter.Transaction{{Key: "a", Limit: lim, Cost: 1}, {Key: "b", Limit: lim, Cost: 1}, {Key: "c", Limit: lim, Cost: 1}}
	l := limiter.New(memory.New(memory.Options{}), clock.New())
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		call func() error
	}{
		{"Batch of 3", func() error { _, _, err := l.Batch(ctx, txns); return err }},
		{"Refund of 1", func() error { _, _, err := l.Refund(ctx, txns[0]); return err }},
		{"Refund of 3", func() error { _, _, err := l.Refund(ctx, txns...); return err }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.call(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
