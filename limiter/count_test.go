package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/storetest"
)

// count runs one Count call and fails the test on error.
func count(t *testing.T, l *limiter.Limiter, txns ...limiter.Transaction) []limiter.Decision {
	t.Helper()
	out := make([]limiter.Decision, len(txns))
	if err := l.Count(context.Background(), txns, out); err != nil {
		t.Fatalf("Count: %v", err)
	}
	return out
}

func TestCountHasEnvoysSemantics(t *testing.T) {
	threePerMinute := limiter.Window{Limit: 3, Length: time.Minute}
	win := func(key string, hits int64, k limiter.Kind) limiter.Transaction {
		return limiter.Transaction{Key: key, Window: threePerMinute, Cost: hits, Kind: k}
	}
	t.Run("a fixed window counts every hit, over the limit or not", func(t *testing.T) {
		forEachBackend(t, func(t *testing.T, l *limiter.Limiter, clk *clock.Fake) {
			for i, want := range []struct {
				allowed   bool
				remaining int64
				count     int64
			}{{true, 2, 1}, {true, 1, 2}, {true, 0, 3}, {false, 0, 4}, {false, 0, 5}} {
				d := count(t, l, win("w", 1, 0))[0]
				if d.Allowed != want.allowed || d.Remaining != want.remaining || d.Count != want.count {
					t.Fatalf("hit %d: got %+v, want allowed %t, %d remaining, count %d", i+1, d, want.allowed, want.remaining, want.count)
				}
			}
		})
	})
	t.Run("one descriptor over its limit does not stop another from counting", func(t *testing.T) {
		forEachBackend(t, func(t *testing.T, l *limiter.Limiter, clk *clock.Fake) {
			count(t, l, win("full", 3, 0))
			got := count(t, l, win("full", 1, 0), win("free", 1, 0))
			if got[0].Allowed || !got[1].Allowed || got[1].Count != 1 {
				t.Fatalf("got %+v, want the full window over and the free one counted", got)
			}
		})
	})
	t.Run("a bucket named twice is counted twice, in order", func(t *testing.T) {
		forEachBackend(t, func(t *testing.T, l *limiter.Limiter, clk *clock.Fake) {
			got := count(t, l, win("twice", 2, 0), win("other", 1, 0), win("twice", 2, 0))
			if !got[0].Allowed || got[0].Count != 2 || got[2].Allowed || got[2].Count != 4 {
				t.Fatalf("got %+v, want 2 then 4 counted, the second over", got)
			}
			if got[0].Index != 0 || got[1].Index != 1 || got[2].Index != 2 {
				t.Fatalf("got indexes %d %d %d, want 0 1 2", got[0].Index, got[1].Index, got[2].Index)
			}
		})
	})
	t.Run("a peek and a refund leave the window as the hits say", func(t *testing.T) {
		forEachBackend(t, func(t *testing.T, l *limiter.Limiter, clk *clock.Fake) {
			count(t, l, win("p", 4, 0))
			if d := count(t, l, win("p", 0, limiter.CheckOnly))[0]; d.Allowed || d.Count != 4 {
				t.Fatalf("peek: got %+v, want over with count 4", d)
			}
			if d := count(t, l, win("p", 2, limiter.RefundBucket))[0]; !d.Allowed || d.Count != 2 || d.Remaining != 1 {
				t.Fatalf("refund 2: got %+v, want within the limit, count 2, 1 remaining", d)
			}
		})
	})
	t.Run("a GCRA refund is never over, and a cost past the burst never allowed", func(t *testing.T) {
		forEachBackend(t, func(t *testing.T, l *limiter.Limiter, clk *clock.Fake) {
			if d := count(t, l, txn("g", tenPerMin, 11, 0))[0]; d.Allowed {
				t.Fatalf("cost 11 of burst 10: got %+v, want denied", d)
			}
			if d := count(t, l, txn("g", tenPerMin, 3, limiter.RefundBucket))[0]; !d.Allowed || d.Remaining != 10 {
				t.Fatalf("refund on a full bucket: got %+v, want allowed with 10 remaining", d)
			}
		})
	})
	t.Run("a disabled transaction is allowed without a limit", func(t *testing.T) {
		forEachBackend(t, func(t *testing.T, l *limiter.Limiter, clk *clock.Fake) {
			d := count(t, l, limiter.Transaction{Key: "u", Disabled: true, Cost: 1 << 40})[0]
			if !d.Allowed || d.Remaining != math.MaxInt64 {
				t.Fatalf("got %+v, want allowed with no limit", d)
			}
		})
	})
}

func TestCountRefusesWhatItCannotCount(t *testing.T) {
	t.Parallel()
	l := limiter.New(memory.New(memory.Options{}), clock.NewFake(storetest.Base()))
	tests := []struct {
		name string
		txn  limiter.Transaction
		want error
	}{
		{name: "a window of a fraction of a second", txn: limiter.Transaction{Key: "k", Window: limiter.Window{Limit: 1, Length: 1500 * time.Millisecond}, Cost: 1}, want: limiter.ErrInvalidWindow},
		{name: "a window with a negative limit", txn: limiter.Transaction{Key: "k", Window: limiter.Window{Limit: -1, Length: time.Second}, Cost: 1}, want: limiter.ErrInvalidWindow},
		{name: "an invalid GCRA limit", txn: limiter.Transaction{Key: "k", Cost: 1}, want: gcra.ErrInvalidLimit},
		{name: "a negative cost", txn: txn("k", tenPerMin, -1, 0), want: gcra.ErrInvalidCost},
		{name: "an empty key", txn: txn("", tenPerMin, 1, 0), want: limiter.ErrEmptyKey},
		{name: "a spend-only transaction", txn: txn("k", tenPerMin, 1, limiter.SpendOnly), want: limiter.ErrInvalidKind},
		{name: "a reset", txn: txn("k", tenPerMin, 0, limiter.ResetBucket), want: limiter.ErrInvalidKind},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := l.Count(context.Background(), []limiter.Transaction{tt.txn}, make([]limiter.Decision, 1))
			if !errors.Is(err, tt.want) || !errors.Is(err, limiter.ErrInvalid) || limiter.KindOf(err) != limiter.Invalid {
				t.Fatalf("got %v, want an Invalid error wrapping %v", err, tt.want)
			}
		})
	}
}

func TestForRuleCountsAsTheRuleSays(t *testing.T) {
	t.Parallel()
	d, err := descriptors.Parse("d.yaml", []byte(`domain: d
descriptors:
  - key: window
    rate_limit: {unit: minute, requests_per_unit: 5, unit_multiplier: 2}
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 10, burst: 20}
  - key: free
    rate_limit: {unlimited: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := descriptors.New(d)
	if err != nil {
		t.Fatal(err)
	}
	match := func(key, value string) (*descriptors.Rule, []descriptors.Entry) {
		e := []descriptors.Entry{{Key: key, Value: value}}
		return cfg.Match("d", e), e
	}
	r, e := match("window", "a")
	if got, want := limiter.ForRule(r, e, 3), (limiter.Transaction{Key: "d_window_a_", Window: limiter.Window{Limit: 5, Length: 2 * time.Minute}, Cost: 3}); got != want {
		t.Errorf("window rule: got %+v, want %+v", got, want)
	}
	r, e = match("bucket", "b")
	if got, want := limiter.ForRule(r, e, 1), (limiter.Transaction{Key: "d_bucket_b_", Limit: gcra.Limit{Burst: 20, Count: 10, Period: time.Second}, Cost: 1}); got != want {
		t.Errorf("burst rule: got %+v, want %+v", got, want)
	}
	r, e = match("free", "c")
	if got := limiter.ForRule(r, e, 1); !got.Disabled {
		t.Errorf("unlimited rule: got %+v, want disabled", got)
	}

	// AppendForRule gives the same transactions, their keys one after
	// another in one array, in its spare capacity while they fit.
	buf := make([]byte, 0, 30)
	var got []limiter.Transaction
	for i, m := range [][2]string{{"window", "a"}, {"bucket", "b"}, {"free", "c"}, {"window", "a-much-longer-value-than-fits"}, {"bucket", "d"}} {
		r, e := match(m[0], m[1])
		before := len(buf)
		var txn limiter.Transaction
		txn, buf = limiter.AppendForRule(buf, r, e, int64(i))
		if want := limiter.ForRule(r, e, int64(i)); txn != want {
			t.Errorf("AppendForRule %v: got %+v, want ForRule's %+v", m, txn, want)
		}
		if !r.Unlimited && string(buf[before:]) != txn.Key {
			t.Errorf("AppendForRule %v: appended %q, key %q", m, buf[before:], txn.Key)
		}
		got = append(got, txn)
	}
	for i, want := range []string{"d_window_a_", "d_bucket_b_", "d.free", "d_window_a-much-longer-value-than-fits_", "d_bucket_d_"} {
		if got[i].Key != want {
			t.Errorf("after every append, transaction %d's key is %q, want %q", i, got[i].Key, want)
		}
	}
}

func TestKindOfClassifiesErrorsForTheFrontDoors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want limiter.Class
	}{
		{name: "an invalid request", err: limiter.Invalidf("cost", "bad cost"), want: limiter.Invalid},
		{name: "an invalid request, wrapped", err: fmt.Errorf("count: %w", limiter.Invalidf("", "bad")), want: limiter.Invalid},
		{name: "an unavailable store", err: fmt.Errorf("redis: %w", store.ErrUnavailable), want: limiter.Unavailable},
		{name: "an expired deadline", err: context.DeadlineExceeded, want: limiter.Unavailable},
		{name: "a caller gone", err: fmt.Errorf("x: %w", context.Canceled), want: limiter.Canceled},
		{name: "anything else", err: errors.New("boom"), want: limiter.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := limiter.KindOf(tt.err); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestAStoreErrorKeepsItsKind(t *testing.T) {
	t.Parallel()
	l := limiter.New(downStore{}, clock.NewFake(storetest.Base()))
	_, err := l.Spend(context.Background(), txn("k", tenPerMin, 1, 0))
	if limiter.KindOf(err) != limiter.Unavailable || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("spend: got %v, want Unavailable wrapping store.ErrUnavailable", err)
	}
	err = l.Count(context.Background(), []limiter.Transaction{txn("k", tenPerMin, 1, 0)}, make([]limiter.Decision, 1))
	if limiter.KindOf(err) != limiter.Unavailable {
		t.Fatalf("count: got %v, want Unavailable", err)
	}
}

func TestAtPutsThePositionFirst(t *testing.T) {
	t.Parallel()
	err := limiter.At(limiter.Invalidf("cost", "invalid cost -1"), "transactions", "transaction", 2)
	var e *limiter.Error
	if !errors.As(err, &e) || e.Field != "transactions[2].cost" || e.Error() != "transaction 2: invalid cost -1" || e.Kind != limiter.Invalid {
		t.Fatalf("got %#v, want field transactions[2].cost and message \"transaction 2: invalid cost -1\"", err)
	}
}

// downStore is a store whose backend cannot be reached.
type downStore struct{}

func (downStore) Do(context.Context, time.Time, store.Batch, []store.Result) error {
	return fmt.Errorf("redis: %w", store.ErrUnavailable)
}
func (downStore) Ping(context.Context) error { return store.ErrUnavailable }
func (downStore) Close() error               { return nil }

// callCountingStore counts the store calls and the largest batch.
type callCountingStore struct {
	store.Store
	calls, largest int
}

func (c *callCountingStore) Do(ctx context.Context, now time.Time, b store.Batch, out []store.Result) error {
	c.calls++
	c.largest = max(c.largest, len(b.Ops))
	return c.Store.Do(ctx, now, b, out)
}

func TestCountSplitsLargeRequestsIntoBoundedStoreCalls(t *testing.T) {
	t.Parallel()
	cs := &callCountingStore{Store: memory.New(memory.Options{})}
	l := limiter.New(cs, clock.NewFake(storetest.Base()))
	n := 2*limiter.MaxOpsPerCall + 10
	txns := make([]limiter.Transaction, n)
	for i := range txns {
		txns[i] = limiter.Transaction{Key: fmt.Sprint("k", i%(n-5)), Window: limiter.Window{Limit: 1, Length: time.Minute}, Cost: 1}
	}
	out := make([]limiter.Decision, n)
	if err := l.Count(context.Background(), txns, out); err != nil {
		t.Fatal(err)
	}
	if cs.largest > limiter.MaxOpsPerCall {
		t.Errorf("got a store call of %d operations, want at most %d", cs.largest, limiter.MaxOpsPerCall)
	}
	// Each of the first n-5 keys counted once (allowed); the last 5
	// repeat the first 5 keys (over).
	for i := range out {
		if want := i < n-5; out[i].Allowed != want {
			t.Fatalf("transaction %d: got allowed %t, want %t", i, out[i].Allowed, want)
		}
	}
}
