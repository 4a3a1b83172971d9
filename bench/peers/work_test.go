package peers

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/store/memory"
)

// workSink keeps work's results alive.
var workSink uint64

// work is n rounds of arithmetic on four independent values, needing no
// memory: the stand-in for a caller's (or a limiter's own) work between
// two decisions.
//
//go:noinline
func work(n int, s uint64) uint64 {
	a, b, c, d := s, s+1, s+2, s+3
	for range n {
		a ^= a << 13
		b ^= b >> 7
		c ^= c << 17
		d ^= d >> 11
		a ^= a >> 7
		b ^= b << 17
		c ^= c >> 5
		d ^= d << 3
	}
	return a ^ b ^ c ^ d
}

// BenchmarkSpendWithWork is limiter.Spend over the million buckets with
// work(n) between decisions, beside work(n) alone: how much of a
// decision's memory accesses the processor overlaps with the next
// decision's, while it can run ahead to them. When the work between
// decisions outgrows that window, a decision costs its memory accesses in
// full plus the work, not the larger of the two. (Why limiter.SpendFor
// does the least it can before the store: BENCHMARKS.md.)
func BenchmarkSpendWithWork(b *testing.B) {
	for _, n := range []int{0, 10, 20, 40, 80} {
		b.Run("work-alone/"+strconv.Itoa(n), func(b *testing.B) {
			var s uint64
			for i := 0; b.Loop(); i++ {
				s += work(n, uint64(i))
			}
			workSink += s
		})
		for _, v := range []struct {
			name string
			keys []string
		}{{"same-keys", keys}, {"fresh-keys", fresh}} {
			b.Run("spend+work-"+v.name+"/"+strconv.Itoa(n), func(b *testing.B) {
				l := limiter.New(memory.New(memory.Options{}), clock.New())
				lim := gcra.Limit{Burst: burst, Count: 1, Period: time.Hour}
				ctx := context.Background()
				for _, k := range keys {
					if d, err := l.Spend(ctx, limiter.Transaction{Key: k, Limit: lim, Cost: 1}); err != nil || !d.Allowed {
						b.Fatalf("the first call for %s: %+v, %v", k, d, err)
					}
				}
				var s uint64
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					d, err := l.Spend(ctx, limiter.Transaction{Key: v.keys[i&(nKeys-1)], Limit: lim, Cost: 1})
					if err != nil || !d.Allowed {
						b.Fatal("refused")
					}
					s += work(n, uint64(i))
				}
				workSink += s
			})
		}
	}
}
