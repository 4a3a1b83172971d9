package peers

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/limits"
)

// BenchmarkSpendForLayer tells where limiter.SpendFor's time over the
// memory store's goes, with a million buckets and fresh keys (account
// ids, the README path's), as BenchmarkLimiterLayer does for
// limiter.Spend: interleaved in one process, each way reported by its
// median over the store's in the same turn. The ways:
//   - store: the store's SpendGCRA on the whole key ("3:<id>");
//   - limiter: limiter.Spend on it;
//   - words-made-before: the store's SpendGCRAShort on the key's words,
//     which limits.Set.KeyWords gave before timing (read from a table
//     at the call's index);
//   - store+keywords: KeyWords on the id, its answer left unused, then
//     the store's SpendGCRA on the whole key: KeyWords' cost alone;
//   - keywords+short: KeyWords, then SpendGCRAShort on its words, as
//     SpendFor does;
//   - spendfor: limiter.SpendFor.
//
// An id whose key KeyWords does not give (one in a million: "0", not an
// account id's natural form) goes through SpendFor in the ways that
// spend on KeyWords' words (words-made-before, keywords+short).
//
//	cd bench/peers && go test -run '^$' -bench SpendForLayer -benchtime 24000000x .
func BenchmarkSpendForLayer(b *testing.B) {
	s := sluiceStore(b)
	clk := clock.New()
	l := limiter.New(s, clk)
	lim := gcra.Limit{Burst: burst, Count: 1, Period: time.Hour}
	p, _ := lim.ValidParams()
	ctx := context.Background()
	set := readmeSet(b)
	spendFor := func(k string) bool {
		d, err := l.SpendFor(ctx, set, limits.NewOrdersPerAccount, k[2:], 1)
		return err == nil && d.Allowed
	}
	warm(b, spendFor, keys, nil)
	// The words of each call's key, in calling order; n == 0 where
	// KeyWords gives none.
	type words struct {
		lo, hi uint64
		n      int
	}
	made := make([]words, nKeys)
	for i, k := range fresh {
		if lo, hi, n, _, ok := set.KeyWords(limits.NewOrdersPerAccount, k[2:]); ok {
			made[i] = words{lo, hi, n}
		}
	}
	at := 0 // the call's index in fresh, set by interleave
	var sink uint64
	ways := []way{
		{"store", storeSpend(s, clk, p)},
		{"limiter", func(k string) bool {
			d, err := l.Spend(ctx, limiter.Transaction{Key: k, Limit: lim, Cost: 1})
			return err == nil && d.Allowed
		}},
		{"words-made-before", func(k string) bool {
			w := &made[at]
			if w.n == 0 {
				return spendFor(k)
			}
			a, _, _, _ := s.SpendGCRAShort(clk, w.lo, w.hi, w.n, p, 1, false)
			return a
		}},
		{"store+keywords", func(k string) bool {
			lo, hi, n, _, _ := set.KeyWords(limits.NewOrdersPerAccount, k[2:])
			sink += lo ^ hi ^ uint64(n)
			a, _, _, _ := s.SpendGCRA(clk, k, p, 1, false)
			return a
		}},
		{"keywords+short", func(k string) bool {
			lo, hi, n, pp, ok := set.KeyWords(limits.NewOrdersPerAccount, k[2:])
			if !ok {
				return spendFor(k)
			}
			a, _, _, _ := s.SpendGCRAShort(clk, lo, hi, n, pp, 1, false)
			return a
		}},
		{"spendfor", spendFor},
	}
	interleave(b, ways, fresh, &at)
	workSink += sink
}

// BenchmarkStoreWithWork is the memory store's SpendGCRA over a million
// buckets with fresh keys, with work(n) (bench/peers' work_test.go: n
// rounds of arithmetic needing no memory, about 27 instructions a round)
// before or after each decision, interleaved in one process with the
// store alone: the cliff BenchmarkSpendWithWork shows across runs, here
// paired turn by turn.
//
//	cd bench/peers && go test -run '^$' -bench StoreWithWork -benchtime 33000000x .
func BenchmarkStoreWithWork(b *testing.B) {
	s := sluiceStore(b)
	clk := clock.New()
	lim := gcra.Limit{Burst: burst, Count: 1, Period: time.Hour}
	p, _ := lim.ValidParams()
	spend := storeSpend(s, clk, p)
	warm(b, spend, keys, nil)
	var sink uint64
	ways := []way{{"store", spend}}
	for _, n := range []int{1, 2, 3, 4, 6} {
		ways = append(ways,
			way{"work" + strconv.Itoa(n) + "-before", func(k string) bool {
				sink += work(n, uint64(len(k)))
				return spend(k)
			}},
			way{"work" + strconv.Itoa(n) + "-after", func(k string) bool {
				a := spend(k)
				sink += work(n, uint64(len(k)))
				return a
			}})
	}
	interleave(b, ways, fresh, nil)
	workSink += sink
}
