package limiter_test

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
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

// BenchmarkAgainstGCRA is DESIGN.md's first performance target side by
// side: an in-process decision on the memory store within 2x of a bare
// gcra.Spend call, zero allocations. The ways, interleaved in one run,
// slice by slice, each called through the same kind of closure:
//   - gcra: gcra.Spend on a TAT held in a variable, the time moved on by
//     an addition (gcra's own BenchmarkSpend): the bare call;
//   - gcra+now: the same at time.Now(), the clock read included;
//   - spend-1: limiter.Spend on one bucket;
//   - spend-1024: limiter.Spend over 1,024 buckets, in turn (in cache);
//   - spendfor-1024: limiter.SpendFor over 1,024 account ids, the
//     README's path.
//
// Each way reports its median ns a decision over the slices (<way>-ns)
// and that median over gcra's (<way>-x, the target's ratio).
//
//	go test -run '^$' -bench AgainstGCRA -benchtime 30000000x ./limiter
func BenchmarkAgainstGCRA(b *testing.B) {
	lim := gcra.Limit{Burst: 1_000_000_000, Count: 1_000_000_000, Period: time.Second}
	set := defaultsSet(b, "NewOrdersPerAccount: {burst: 1000000000, count: 1000000000, period: 1s}\n")
	l := limiter.New(memory.New(memory.Options{}), clock.New())
	ctx := context.Background()
	const n = 1024
	keys, ids := make([]string, n), make([]string, n)
	for i := range n {
		ids[i] = strconv.Itoa(100_000 + i)
		keys[i] = "3:" + ids[i]
	}
	now := time.Now()
	var tat, tatNow time.Time // each gcra way's own bucket
	ways := []struct {
		name string
		one  func(i int) bool
	}{
		{"gcra", func(int) bool {
			now = now.Add(time.Microsecond)
			d := gcra.Spend(now, lim, tat, 1)
			tat = d.TAT
			return d.Allowed
		}},
		{"gcra+now", func(int) bool {
			d := gcra.Spend(time.Now(), lim, tatNow, 1)
			tatNow = d.TAT
			return d.Allowed
		}},
		{"spend-1", func(int) bool {
			d, err := l.Spend(ctx, limiter.Transaction{Key: keys[0], Limit: lim, Cost: 1})
			return err == nil && d.Allowed
		}},
		{"spend-1024", func(i int) bool {
			d, err := l.Spend(ctx, limiter.Transaction{Key: keys[i&(n-1)], Limit: lim, Cost: 1})
			return err == nil && d.Allowed
		}},
		{"spendfor-1024", func(i int) bool {
			d, err := l.SpendFor(ctx, set, limits.NewOrdersPerAccount, ids[i&(n-1)], 1)
			return err == nil && d.Allowed
		}},
	}
	const slice = 200_000
	ns := make([][]float64, len(ways))
	b.ReportAllocs()
	b.ResetTimer()
	for done, i := 0, 0; done < b.N; {
		for w, way := range ways {
			start := time.Now()
			for range slice {
				if !way.one(i) {
					b.Fatalf("%s: refused", way.name)
				}
				i++
			}
			ns[w] = append(ns[w], float64(time.Since(start).Nanoseconds())/slice)
			done += slice
		}
	}
	bare := median(ns[0])
	for w, way := range ways {
		m := median(ns[w])
		b.ReportMetric(m, way.name+"-ns")
		if w > 0 {
			b.ReportMetric(m/bare, way.name+"-x")
		}
	}
}

// median returns the median of a, sorting it.
func median(a []float64) float64 {
	slices.Sort(a)
	return a[len(a)/2]
}
