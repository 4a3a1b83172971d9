package peers

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/memory"
)

// BenchmarkLimiterLayer tells what limiter.Spend costs over the memory
// store's own SpendGCRA, with a million buckets and fresh keys, and
// where: it answers from one store, turn by turn in slices of 100,000
// decisions, in eight ways:
//   - store: the store's SpendGCRA, called directly;
//   - limiter: limiter.Spend;
//   - by-value: a copy of the fast path of the limiter's single, written
//     out here, calling the store through store.Spender as single does,
//     taking the Transaction by value and returning a Decision, as single
//     does;
//   - scalars: the same, taking the fields it reads one by one;
//   - noctx: scalars without the context.Context parameter;
//   - nodecision: scalars returning whether the call was allowed, not a
//     Decision;
//   - fields-first: scalars with the key, the limit and the cost first
//     among its parameters;
//   - fields-first+txn: fields-first taking a Transaction by value
//     besides, which it does not read.
//
// Each is reported as the median ns per decision over its slices
// (store-ns, limiter-ns, and so on), and each but the store's by the
// median of its slices' ns over the store's in the same turn
// (limiter-over-store-ns, and so on). The turns are interleaved in one
// process, so that a drift of the machine, which moved a row of
// BenchmarkPeers by up to 50% between runs on the VM of BENCHMARKS.md's
// section "On a new VM at 86a3d8b", falls on the eight alike.
//
//	cd bench/peers && go test -run '^$' -bench LimiterLayer -benchtime 16000000x .
func BenchmarkLimiterLayer(b *testing.B) {
	s := sluiceStore(b)
	clk := clock.New()
	l := limiter.New(s, clk)
	lim := gcra.Limit{Burst: burst, Count: 1, Period: time.Hour}
	p, _ := lim.ValidParams()
	ctx := context.Background()
	warm(b, func(key string) bool {
		d, err := l.Spend(ctx, limiter.Transaction{Key: key, Limit: lim, Cost: 1})
		return err == nil && d.Allowed
	}, keys, nil)
	var sp store.Spender = s
	ways := []way{
		{"store", storeSpend(s, clk, p)},
		{"limiter", func(k string) bool {
			d, err := l.Spend(ctx, limiter.Transaction{Key: k, Limit: lim, Cost: 1})
			return err == nil && d.Allowed
		}},
		{"by-value", func(k string) bool {
			d, err := byValue(sp, clk, ctx, k, limiter.Transaction{Key: k, Limit: lim, Cost: 1}, limiter.CheckAndSpend)
			return err == nil && d.Allowed
		}},
		{"noctx", func(k string) bool {
			d, err := noCtx(sp, clk, k, lim, 1, false, limiter.CheckAndSpend)
			return err == nil && d.Allowed
		}},
		{"nodecision", func(k string) bool {
			a, err := noDecision(sp, clk, ctx, k, lim, 1, false, limiter.CheckAndSpend)
			return err == nil && a
		}},
		{"fields-first", func(k string) bool {
			d, err := fieldsFirst(k, lim, 1, sp, clk, ctx, false, limiter.CheckAndSpend)
			return err == nil && d.Allowed
		}},
		{"fields-first+txn", func(k string) bool {
			d, err := fieldsFirstTxn(k, lim, 1, sp, clk, ctx, false, limiter.CheckAndSpend, limiter.Transaction{Key: k, Limit: lim, Cost: 1})
			return err == nil && d.Allowed
		}},
		{"scalars", func(k string) bool {
			d, err := scalars(sp, clk, ctx, k, lim, 1, false, limiter.CheckAndSpend)
			return err == nil && d.Allowed
		}},
	}
	interleave(b, ways, fresh, nil)
}

// storeSpend is the layer benchmarks' first way: a spend of 1 under p by
// the memory store's own SpendGCRA, called directly.
func storeSpend(s *memory.Store, clk clock.Clock, p gcra.Params) func(key string) bool {
	return func(k string) bool { a, _, _, _ := s.SpendGCRA(clk, k, p, 1, false); return a }
}

// way is one way of making a decision, for interleave.
type way struct {
	name string
	one  func(key string) bool
}

// interleave times ways over calls, turn by turn in slices of 100,000
// decisions, until b.N decisions in all, and reports each way's median
// ns per decision over its slices (<name>-ns) and, for every way but the
// first, the median of its slices' ns over the first's in the same turn
// (<name>-over-<first>-ns): in one process, so that a drift of the
// machine falls on every way alike. When at is not nil, it is set to
// each call's index in calls before the call.
func interleave(b *testing.B, ways []way, calls []string, at *int) {
	const slice = 100_000
	ns := make([][]float64, len(ways))
	pos := 0
	b.ResetTimer()
	for done := 0; done < b.N; {
		for w, way := range ways {
			start := time.Now()
			for range slice {
				if at != nil {
					*at = pos & (nKeys - 1)
				}
				if !way.one(calls[pos&(nKeys-1)]) {
					b.Fatalf("%s: refused", way.name)
				}
				pos++
			}
			ns[w] = append(ns[w], float64(time.Since(start).Nanoseconds())/slice)
			done += slice
		}
	}
	for w, way := range ways {
		if w > 0 {
			// Paired with the first way's slice of the same turn (ns[0]
			// in turn order: median sorts a copy).
			over := make([]float64, len(ns[w]))
			for i := range over {
				over[i] = ns[w][i] - ns[0][i]
			}
			b.ReportMetric(median(over), way.name+"-over-"+ways[0].name+"-ns")
		}
		b.ReportMetric(median(ns[w]), way.name+"-ns")
	}
}

// median returns the median of a, leaving a in its order.
func median(a []float64) float64 {
	s := slices.Clone(a)
	slices.Sort(s)
	return s[len(s)/2]
}

// byValue is limiter.Limiter.single's fast path, the Transaction by value.
//
//go:noinline
func byValue(sp store.Spender, clk clock.Clock, ctx context.Context, key string, txn limiter.Transaction, kind limiter.Kind) (limiter.Decision, error) {
	if !txn.Disabled && txn.Window.Length == 0 && key != "" && txn.Cost >= 0 && txn.Cost <= txn.Limit.Burst {
		if p, ok := txn.Limit.ValidParams(); ok {
			allowed, remaining, retryIn, resetIn := sp.SpendGCRA(clk, key, p, txn.Cost, kind == limiter.CheckOnly)
			return limiter.Decision{Allowed: allowed, Remaining: remaining, RetryIn: retryIn, ResetIn: resetIn}, nil
		}
	}
	return limiter.Decision{}, ctx.Err()
}

// scalars is byValue with the fields its fast path reads passed one by one.
//
//go:noinline
func scalars(sp store.Spender, clk clock.Clock, ctx context.Context, key string, lim gcra.Limit, cost int64, disabled bool, kind limiter.Kind) (limiter.Decision, error) {
	if !disabled && key != "" && cost >= 0 && cost <= lim.Burst {
		if p, ok := lim.ValidParams(); ok {
			allowed, remaining, retryIn, resetIn := sp.SpendGCRA(clk, key, p, cost, kind == limiter.CheckOnly)
			return limiter.Decision{Allowed: allowed, Remaining: remaining, RetryIn: retryIn, ResetIn: resetIn}, nil
		}
	}
	return limiter.Decision{}, ctx.Err()
}

//go:noinline
func noCtx(sp store.Spender, clk clock.Clock, key string, lim gcra.Limit, cost int64, disabled bool, kind limiter.Kind) (limiter.Decision, error) {
	if !disabled && key != "" && cost >= 0 && cost <= lim.Burst {
		if p, ok := lim.ValidParams(); ok {
			allowed, remaining, retryIn, resetIn := sp.SpendGCRA(clk, key, p, cost, kind == limiter.CheckOnly)
			return limiter.Decision{Allowed: allowed, Remaining: remaining, RetryIn: retryIn, ResetIn: resetIn}, nil
		}
	}
	return limiter.Decision{}, nil
}

//go:noinline
func noDecision(sp store.Spender, clk clock.Clock, ctx context.Context, key string, lim gcra.Limit, cost int64, disabled bool, kind limiter.Kind) (bool, error) {
	if !disabled && key != "" && cost >= 0 && cost <= lim.Burst {
		if p, ok := lim.ValidParams(); ok {
			allowed, _, _, _ := sp.SpendGCRA(clk, key, p, cost, kind == limiter.CheckOnly)
			return allowed, nil
		}
	}
	return false, ctx.Err()
}

// fieldsFirst is scalars with the fields its fast path reads first, so
// that they come in registers: the key, the limit and the cost.
//
//go:noinline
func fieldsFirst(key string, lim gcra.Limit, cost int64, sp store.Spender, clk clock.Clock, ctx context.Context, disabled bool, kind limiter.Kind) (limiter.Decision, error) {
	if !disabled && key != "" && cost >= 0 && cost <= lim.Burst {
		if p, ok := lim.ValidParams(); ok {
			allowed, remaining, retryIn, resetIn := sp.SpendGCRA(clk, key, p, cost, kind == limiter.CheckOnly)
			return limiter.Decision{Allowed: allowed, Remaining: remaining, RetryIn: retryIn, ResetIn: resetIn}, nil
		}
	}
	return limiter.Decision{}, ctx.Err()
}

// fieldsFirstTxn is fieldsFirst with a Transaction by value besides, as
// single takes one for its way through one: its fast path never reads it.
//
//go:noinline
func fieldsFirstTxn(key string, lim gcra.Limit, cost int64, sp store.Spender, clk clock.Clock, ctx context.Context, disabled bool, kind limiter.Kind, txn limiter.Transaction) (limiter.Decision, error) {
	if !disabled && key != "" && cost >= 0 && cost <= lim.Burst {
		if p, ok := lim.ValidParams(); ok {
			allowed, remaining, retryIn, resetIn := sp.SpendGCRA(clk, key, p, cost, kind == limiter.CheckOnly)
			return limiter.Decision{Allowed: allowed, Remaining: remaining, RetryIn: retryIn, ResetIn: resetIn}, nil
		}
	}
	return limiter.Decision{Count: txn.Cost}, ctx.Err()
}
