package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/redis/redistest"
	"github.com/sluice-rl/sluice/store/storetest"
)

// backend makes a store for one test.
type backend struct {
	name     string
	newStore func(t *testing.T) store.Store
}

// backends lists the stores every limiter test runs on: the memory store
// and Redis (a real redis-server per test; skipped without one unless
// SLUICE_REQUIRE_REDIS=1).
var backends = []backend{
	{"memory", func(t *testing.T) store.Store { return memory.New(memory.Options{}) }},
	{"redis", func(t *testing.T) store.Store {
		srv := redistest.StartSingle(t)
		s, err := redis.New(context.Background(), redis.Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
}

// forEachBackend runs fn once per backend with a fresh limiter and fake
// clock, and once more per backend with the local over-limit cache on:
// the answers must not change.
func forEachBackend(t *testing.T, fn func(t *testing.T, l *limiter.Limiter, clk *clock.Fake)) {
	t.Helper()
	for _, b := range backends {
		for _, o := range []struct {
			name string
			opts limiter.Options
		}{{"", limiter.Options{}}, {" with the local cache", withCache}} {
			t.Run(b.name+o.name, func(t *testing.T) {
				s := b.newStore(t)
				t.Cleanup(func() { _ = s.Close() })
				clk := clock.NewFake(storetest.Base())
				fn(t, limiter.NewWithOptions(s, clk, o.opts), clk)
			})
		}
	}
}

var (
	perSecond20 = gcra.Limit{Burst: 20, Count: 20, Period: time.Second}
	onePerHour  = gcra.Limit{Burst: 1, Count: 1, Period: time.Hour}
	tenPerMin   = gcra.Limit{Burst: 10, Count: 10, Period: time.Minute}
)

func txn(key string, l gcra.Limit, cost int64, k limiter.Kind) limiter.Transaction {
	return limiter.Transaction{Key: key, Limit: l, Cost: cost, Kind: k}
}

func TestSeedTimeline(t *testing.T) {
	forEachBackend(t, func(t *testing.T, l *limiter.Limiter, clk *clock.Fake) {
		ctx := context.Background()
		for i := int64(1); i <= 20; i++ {
			d, err := l.Spend(ctx, txn("1:172.23.45.22", perSecond20, 1, 0))
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed || d.Remaining != 20-i {
				t.Fatalf("request %d: got %+v, want allowed with %d remaining", i, d, 20-i)
			}
		}
		d, _ := l.Spend(ctx, txn("1:172.23.45.22", perSecond20, 1, 0))
		if d.Allowed || d.RetryIn != 50*time.Millisecond {
			t.Fatalf("request 21: got %+v, want denied, retry in 50ms", d)
		}
		for k := range 20 {
			clk.Add(50 * time.Millisecond)
			if d, _ := l.Spend(ctx, txn("1:172.23.45.22", perSecond20, 1, 0)); !d.Allowed {
				t.Fatalf("steady request %d: got denied, want allowed", k)
			}
		}
	})
}

func TestBatchRules(t *testing.T) {
	ctx := context.Background()
	t.Run("a denied check stops every spend of the batch", func(t *testing.T) {
		forEachBackend(t, func(t *testing.T, l *limiter.Limiter, clk *clock.Fake) {
			if _, err := l.Spend(ctx, txn("b", onePerHour, 1, 0)); err != nil {
				t.Fatal(err)
			}
			d, each, err := l.Batch(ctx, []limiter.Transaction{
				txn("a", perSecond20, 1, limiter.CheckAndSpend),
				txn("b", onePerHour, 1, limiter.CheckAndSpend),
				txn("c", perSecond20, 1, limiter.SpendOnly),
			})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed || d.Index != 1 {
				t.Fatalf("got %+v, want denied by transaction 1", d)
			}
			if !each[0].Allowed || each[1].Allowed {
				t.Fatalf("got each %+v, want a allowed and b denied", each)
			}
			for _, key := range []string{"a", "c"} {
				if d, _ := l.Check(ctx, txn(key, perSecond20, 0, 0)); d.Remaining != 20 {
					t.Fatalf("%s: got %d remaining, want 20 (nothing spent)", key, d.Remaining)
				}
			}
		})
	})
	t.Run("denied beats an allowed decision with a longer retryIn", func(t *testing.T) {
		forEachBackend(t, func(t *testing.T, l *limiter.Limiter, clk *clock.Fake) {
			// Empty a 20/s bucket: the next request waits 50ms.
			if _, err := l.Spend(ctx, txn("short", perSecond20, 20, 0)); err != nil {
				t.Fatal(err)
			}
			// Spending the last token of a 1/hour bucket is allowed, with a
			// retryIn of an hour for the next one.
			d, each, err := l.Batch(ctx, []limiter.Transaction{
				txn("long", onePerHour, 1, limiter.CheckOnly),
				txn("short", perSecond20, 1, limiter.CheckOnly),
			})
			if err != nil {
				t.Fatal(err)
			}
			if !each[0].Allowed || each[0].RetryIn != time.Hour {
				t.Fatalf("long: got %+v, want allowed with retryIn 1h", each[0])
			}
			if d.Allowed || d.RetryIn != 50*time.Millisecond || d.Index != 1 {
				t.Fatalf("batch: got %+v, want the denied decision (retry in 50ms)", d)
			}
		})
	})
	t.Run("among denied decisions the longer retryIn wins", func(t *testing.T) {
		forEachBackend(t, func(t *testing.T, l *limiter.Limiter, clk *clock.Fake) {
			_, _ = l.Spend(ctx, txn("x", perSecond20, 20, 0))
			_, _ = l.Spend(ctx, txn("y", tenPerMin, 10, 0))
			d, _, err := l.Batch(ctx, []limiter.Transaction{txn("x", perSecond20, 1, 0), txn("y", tenPerMin, 1, 0)})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed || d.RetryIn != 6*time.Second {
				t.Fatalf("got %+v, want denied with retryIn 6s", d)
			}
		})
	})
	t.Run("among equal retryIn the fewer remaining wins", func(t *testing.T) {
		forEachBackend(t, func(t *testing.T, l *limiter.Limiter, clk *clock.Fake) {
			_, _ = l.Spend(ctx, txn("p", perSecond20, 5, 0))
			d, _, err := l.Batch(ctx, []limiter.Transaction{txn("q", perSecond20, 1, 0), txn("p", perSecond20, 1, 0)})
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed || d.Remaining != 14 || d.Index != 1 {
				t.Fatalf("got %+v, want allowed with 14 remaining from transaction 1", d)
			}
		})
	})
	t.Run("spend-only never changes the decision", func(t *testing.T) {
		forEachBackend(t, func(t *testing.T, l *limiter.Limiter, clk *clock.Fake) {
			_, _ = l.Spend(ctx, txn("empty", onePerHour, 1, 0))
			d, _, err := l.Batch(ctx, []limiter.Transaction{
				txn("ok", perSecond20, 1, limiter.CheckAndSpend),
				txn("empty", onePerHour, 1, limiter.SpendOnly),
				txn("big", tenPerMin, 9, limiter.SpendOnly),
			})
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed || d.Remaining != 19 {
				t.Fatalf("got %+v, want allowed with 19 remaining (spend-only ignored)", d)
			}
			if c, _ := l.Check(ctx, txn("big", tenPerMin, 0, 0)); c.Remaining != 1 {
				t.Fatalf("spend-only bucket: got %d remaining, want 1 (it was spent)", c.Remaining)
			}
		})
	})
	t.Run("check-only never persists", func(t *testing.T) {
		forEachBackend(t, func(t *testing.T, l *limiter.Limiter, clk *clock.Fake) {
			for range 5 {
				d, err := l.Check(ctx, txn("co", perSecond20, 20, 0))
				if err != nil || !d.Allowed {
					t.Fatalf("got %+v, %v; want allowed", d, err)
				}
			}
		})
	})
	t.Run("on a tie the later transaction's decision is the batch's", func(t *testing.T) {
		// As Boulder's stricter: equal in allowed, retryIn and remaining,
		// the one decided last wins, with its resetIn.
		forEachBackend(t, func(t *testing.T, l *limiter.Limiter, clk *clock.Fake) {
			if _, err := l.Spend(ctx, txn("first", onePerHour, 1, 0)); err != nil {
				t.Fatal(err)
			}
			clk.Add(10 * time.Minute)
			if _, err := l.Spend(ctx, txn("second", onePerHour, 1, 0)); err != nil {
				t.Fatal(err)
			}
			// Two peeks of empty buckets: allowed, 0 remaining, no wait.
			d, _, err := l.Batch(ctx, []limiter.Transaction{
				txn("first", onePerHour, 0, limiter.CheckOnly),
				txn("second", onePerHour, 0, limiter.CheckOnly),
			})
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed || d.Remaining != 0 || d.RetryIn != 0 || d.Index != 1 || d.ResetIn != time.Hour {
				t.Fatalf("got %+v, want allowed with 0 remaining, transaction 1's decision (reset in 1h)", d)
			}
		})
	})
	t.Run("a batch with no checked transaction is allowed", func(t *testing.T) {
		forEachBackend(t, func(t *testing.T, l *limiter.Limiter, clk *clock.Fake) {
			d, _, err := l.Batch(ctx, []limiter.Transaction{txn("s", perSecond20, 1, limiter.SpendOnly)})
			if err != nil || !d.Allowed || d.Remaining != math.MaxInt64 {
				t.Fatalf("got %+v, %v; want allowed with no limit", d, err)
			}
		})
	})
	t.Run("a disabled transaction is allowed without a check", func(t *testing.T) {
		forEachBackend(t, func(t *testing.T, l *limiter.Limiter, clk *clock.Fake) {
			d, err := l.Spend(ctx, limiter.Transaction{Key: "9:1.2.3.4", Disabled: true, Cost: 1000})
			if err != nil || !d.Allowed || d.Remaining != math.MaxInt64 {
				t.Fatalf("got %+v, %v; want allowed with no limit", d, err)
			}
		})
	})
}

func TestRefundAndReset(t *testing.T) {
	ctx := context.Background()
	forEachBackend(t, func(t *testing.T, l *limiter.Limiter, clk *clock.Fake) {
		_, _ = l.Spend(ctx, txn("r", tenPerMin, 5, 0))
		d, _, err := l.Refund(ctx, txn("r", tenPerMin, 2, 0))
		if err != nil || !d.Allowed || d.Remaining != 7 {
			t.Fatalf("refund 2: got %+v, %v; want allowed with 7 remaining", d, err)
		}
		d, _, _ = l.Refund(ctx, txn("r", tenPerMin, 10, 0))
		if !d.Allowed || d.Remaining != 10 {
			t.Fatalf("refund past full: got %+v, want allowed, capped at 10", d)
		}
		d, _, _ = l.Refund(ctx, txn("r", tenPerMin, 1, 0))
		if d.Allowed {
			t.Fatalf("refund on a full bucket: got allowed, want not allowed")
		}
		_, _ = l.Spend(ctx, txn("r", tenPerMin, 10, 0))
		if d, _ := l.Reset(ctx, txn("r", tenPerMin, 0, 0)); !d.Allowed {
			t.Fatalf("reset: got %+v, want allowed", d)
		}
		if d, _ := l.Check(ctx, txn("r", tenPerMin, 0, 0)); d.Remaining != 10 {
			t.Fatalf("after reset: got %d remaining, want 10", d.Remaining)
		}
	})
}

func TestInvalidBatches(t *testing.T) {
	t.Parallel()
	l := limiter.New(memory.New(memory.Options{}), clock.NewFake(storetest.Base()))
	many := make([]limiter.Transaction, limiter.MaxBatch+1)
	for i := range many {
		many[i] = txn(fmt.Sprint("k", i), perSecond20, 1, 0)
	}
	tests := []struct {
		name string
		txns []limiter.Transaction
		want error
	}{
		{name: "an empty batch is refused", txns: nil, want: limiter.ErrEmptyBatch},
		{name: "more than 100 transactions are refused", txns: many, want: limiter.ErrBatchTooLarge},
		{name: "a bucket named twice is refused", txns: []limiter.Transaction{txn("d", perSecond20, 1, 0), txn("d", perSecond20, 1, limiter.CheckOnly)}, want: limiter.ErrDuplicateBucket},
		{name: "a negative cost is refused", txns: []limiter.Transaction{txn("n", perSecond20, -1, 0)}, want: gcra.ErrInvalidCost},
		{name: "a cost above the burst is refused", txns: []limiter.Transaction{txn("n", perSecond20, 21, 0)}, want: gcra.ErrInvalidCost},
		{name: "an unknown kind is refused", txns: []limiter.Transaction{txn("n", perSecond20, 1, 9)}, want: limiter.ErrInvalidKind},
		{name: "an empty key is refused", txns: []limiter.Transaction{txn("", perSecond20, 1, 0)}, want: limiter.ErrEmptyKey},
		{name: "an invalid limit is refused", txns: []limiter.Transaction{txn("z", gcra.Limit{}, 1, 0)}, want: gcra.ErrInvalidLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := l.Batch(context.Background(), tt.txns)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
	// Nothing of the refused batches was spent.
	if d, _ := l.Check(context.Background(), txn("k0", perSecond20, 0, 0)); d.Remaining != 20 {
		t.Fatalf("after refused batches: got %d remaining, want 20", d.Remaining)
	}
}

func TestKinds(t *testing.T) {
	t.Parallel()
	for _, k := range []limiter.Kind{limiter.CheckAndSpend, limiter.CheckOnly, limiter.SpendOnly, limiter.ResetBucket} {
		got, err := limiter.ParseKind(k.String())
		if err != nil || got != k {
			t.Errorf("ParseKind(%q): got %v, %v; want %v", k.String(), got, err, k)
		}
	}
	if _, err := limiter.ParseKind("spend_twice"); !errors.Is(err, limiter.ErrInvalidKind) {
		t.Errorf("ParseKind(spend_twice): got %v, want ErrInvalidKind", err)
	}
}
