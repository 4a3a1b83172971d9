package memory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/memory"
)

// BenchmarkWindowKeyLengths is a fixed window's spend, the Envoy
// service's decision on this store, through DoOne over 1,000,000 buckets
// made first, at key lengths each side of where the store keeps a fixed
// window's key: in its slot up to 24 bytes, in a wide bucket from 25 to
// 88 (from 41 before 2026-11-28's change: 25 to 40 in the long keys'
// buffer), in the long keys' buffer past 88. The
// buckets are visited in a shuffled order, each call with a copy of its
// key, the copies laid out in calling order, as a service builds each
// request's key from the request.
func BenchmarkWindowKeyLengths(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{24, 25, 40, 41, 57, 88, 89} {
		b.Run("length-"+strconv.Itoa(n), func(b *testing.B) {
			keys := make([]string, benchKeys)
			for i := range keys {
				keys[i] = fmt.Sprintf("%0*d", n, i)
			}
			s := memory.New(memory.Options{MaxBytes: 1 << 30}) // every bucket kept
			defer s.Close()
			clk := clock.NewFake(time.Unix(1_800_000_000, 0))
			op := store.Op{Algorithm: store.FixedWindow, Kind: store.Spend, Window: store.Window{Limit: 1 << 40, Length: time.Hour}, Cost: 1}
			for _, k := range keys {
				op.Key = k
				if _, err := s.DoOne(ctx, clk, op); err != nil {
					b.Fatal(err)
				}
			}
			if got := s.Len(); got != benchKeys {
				b.Fatalf("%d buckets held, want %d", got, benchKeys)
			}
			calls := make([]string, benchKeys)
			for j, i := range rand.New(rand.NewPCG(1, 2)).Perm(benchKeys) {
				calls[j] = strings.Clone(keys[i])
			}
			keys = nil
			b.ReportAllocs()
			b.ResetTimer()
			j := 0
			for b.Loop() {
				op.Key = calls[j]
				if _, err := s.DoOne(ctx, clk, op); err != nil {
					b.Fatal(err)
				}
				if j++; j == benchKeys {
					j = 0
				}
			}
		})
	}
}
