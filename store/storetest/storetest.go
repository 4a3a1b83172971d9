// Package storetest is the conformance suite every store.Store backend
// passes: the same scenarios, driven by one fake time, run against the
// in-memory store, Redis single node and Redis Cluster, and the fallback
// wrapper.
//
// A backend's test calls Run with a constructor:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { return memory.New(memory.Options{}) })
//	}
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/window"
)

// NewStore returns a store for one test. It MUST be empty of the keys the
// test uses; the suite closes it when the test ends.
type NewStore func(t *testing.T) store.Store

// Base is the suite's starting instant: on a whole hour (so windows of a
// second, a minute or an hour start there), two hours ahead of the real
// clock so that backends that set absolute expiries keep the keys.
func Base() time.Time {
	return time.Now().Truncate(time.Hour).Add(2 * time.Hour)
}

var twentyPerSecond = gcra.Limit{Burst: 20, Count: 20, Period: time.Second}

// Run runs every conformance scenario against stores made by newStore.
func Run(t *testing.T, newStore NewStore) {
	t.Helper()
	scenarios := []struct {
		name string
		run  func(t *testing.T, s store.Store)
	}{
		{"the seed's example admits a burst of 20 then one every 50ms", seedTimeline},
		{"a check decides like a spend but changes nothing", checkPersistsNothing},
		{"a peek with cost 0 sees the tokens left and takes none", peek},
		{"a refund gives back what was spent but never past full", refund},
		{"a reset makes the bucket full again", reset},
		{"an all-or-nothing batch spends nothing when one check is denied", allOrNothingDenied},
		{"an all-or-nothing batch spends everything when all are allowed", allOrNothingAllowed},
		{"a spend-only operation never changes the batch decision", spendOnly},
		{"a batch that is not all-or-nothing spends each allowed operation", independentBatch},
		{"a fixed window counts every hit and starts again at the next window", fixedWindow},
		{"a fixed window check peeks and a refund never goes below zero", fixedWindowCheckAndRefund},
		{"windows of two lengths on one key count apart", windowLengths},
		{"a bucket that has refilled behaves like a new one", refilledBucket},
		{"a cost far above the burst is denied and a huge refund fills the bucket", hugeCosts},
		{"a batch naming one bucket twice is refused", duplicateBucket},
		{"concurrent spends admit exactly the burst", concurrentSpends},
		{"concurrent window hits admit exactly the limit", concurrentWindow},
		{"random sequences give the pure functions' answers", property},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			s := newStore(t)
			t.Cleanup(func() { _ = s.Close() })
			sc.run(t, s)
		})
	}
}

func do(t *testing.T, s store.Store, now time.Time, b store.Batch) []store.Result {
	t.Helper()
	out := make([]store.Result, len(b.Ops))
	if err := s.Do(context.Background(), now, b, out); err != nil {
		t.Fatalf("Do: %v", err)
	}
	return out
}

func one(t *testing.T, s store.Store, now time.Time, op store.Op) store.Result {
	t.Helper()
	return do(t, s, now, store.Batch{Ops: []store.Op{op}})[0]
}

func gcraOp(key string, a store.Kind, l gcra.Limit, cost int64) store.Op {
	return store.Op{Key: key, Algorithm: store.GCRA, Kind: a, Limit: l, Cost: cost}
}

func windowOp(key string, a store.Kind, limit int64, length time.Duration, cost int64) store.Op {
	return store.Op{Key: key, Algorithm: store.FixedWindow, Kind: a, Window: store.Window{Limit: limit, Length: length}, Cost: cost}
}

func want(t *testing.T, step string, got store.Result, allowed bool, remaining int64, retryIn, resetIn time.Duration) {
	t.Helper()
	if got.Allowed != allowed || got.Remaining != remaining || got.RetryIn != retryIn || got.ResetIn != resetIn {
		t.Fatalf("%s: got allowed=%v remaining=%d retryIn=%s resetIn=%s, want allowed=%v remaining=%d retryIn=%s resetIn=%s",
			step, got.Allowed, got.Remaining, got.RetryIn, got.ResetIn, allowed, remaining, retryIn, resetIn)
	}
}

func seedTimeline(t *testing.T, s store.Store) {
	now := Base()
	ms := time.Millisecond
	for i := int64(1); i <= 20; i++ {
		r := one(t, s, now, gcraOp("seed", store.Spend, twentyPerSecond, 1))
		var retry time.Duration
		if i == 20 {
			retry = 50 * ms
		}
		want(t, fmt.Sprintf("request %d", i), r, true, 20-i, retry, time.Duration(i)*50*ms)
	}
	r := one(t, s, now, gcraOp("seed", store.Spend, twentyPerSecond, 1))
	want(t, "request 21", r, false, 0, 50*ms, time.Second)
	for k := 1; k <= 40; k++ {
		at := now.Add(time.Duration(k) * 50 * ms)
		r := one(t, s, at, gcraOp("seed", store.Spend, twentyPerSecond, 1))
		want(t, fmt.Sprintf("steady request %d", k), r, true, 0, 50*ms, time.Second)
		r = one(t, s, at, gcraOp("seed", store.Spend, twentyPerSecond, 1))
		want(t, fmt.Sprintf("second steady request %d", k), r, false, 0, 50*ms, time.Second)
	}
}

func checkPersistsNothing(t *testing.T, s store.Store) {
	now := Base()
	for range 3 {
		r := one(t, s, now, gcraOp("check", store.Check, twentyPerSecond, 5))
		want(t, "check", r, true, 15, 0, 250*time.Millisecond)
		if r.Applied {
			t.Fatalf("check: got Applied, want nothing changed")
		}
	}
	r := one(t, s, now, gcraOp("check", store.Spend, twentyPerSecond, 1))
	want(t, "spend after checks", r, true, 19, 0, 50*time.Millisecond)
}

func peek(t *testing.T, s store.Store) {
	now := Base()
	r := one(t, s, now, gcraOp("peek", store.Spend, twentyPerSecond, 0))
	want(t, "peek at a new bucket", r, true, 20, 0, 0)
	one(t, s, now, gcraOp("peek", store.Spend, twentyPerSecond, 3))
	r = one(t, s, now, gcraOp("peek", store.Spend, twentyPerSecond, 0))
	want(t, "peek after spending 3", r, true, 17, 0, 150*time.Millisecond)
	r = one(t, s, now, gcraOp("peek", store.Check, twentyPerSecond, 0))
	want(t, "check-peek after spending 3", r, true, 17, 0, 150*time.Millisecond)
}

func refund(t *testing.T, s store.Store) {
	now := Base()
	l := gcra.Limit{Burst: 10, Count: 10, Period: time.Second}
	r := one(t, s, now, gcraOp("refund-missing", store.Refund, l, 1))
	want(t, "refund on a missing bucket", r, false, 10, 0, 0)
	one(t, s, now, gcraOp("refund", store.Spend, l, 5))
	r = one(t, s, now, gcraOp("refund", store.Refund, l, 2))
	want(t, "refund 2 of 5", r, true, 7, 0, 300*time.Millisecond)
	r = one(t, s, now, gcraOp("refund", store.Refund, l, 10))
	want(t, "refund more than spent", r, true, 10, 0, 0)
	r = one(t, s, now, gcraOp("refund", store.Spend, l, 0))
	want(t, "peek after refunds", r, true, 10, 0, 0)
	one(t, s, now, gcraOp("refund", store.Spend, l, 1))
	r = one(t, s, now.Add(200*time.Millisecond), gcraOp("refund", store.Refund, l, 1))
	want(t, "refund on a bucket that has refilled", r, false, 10, 0, 0)
}

func hugeCosts(t *testing.T, s store.Store) {
	now := Base()
	l := gcra.Limit{Burst: 3, Count: 10, Period: time.Minute} // one token every 6s
	const maxCost = math.MaxInt64
	r := one(t, s, now, gcraOp("huge", store.Spend, l, maxCost))
	want(t, "spend of the largest cost", r, false, 3, math.MaxInt64, 0)
	r = one(t, s, now, gcraOp("huge", store.Spend, l, 4))
	want(t, "spend of one more than the burst", r, false, 3, 6*time.Second, 0)
	one(t, s, now, gcraOp("huge", store.Spend, l, 2))
	r = one(t, s, now, gcraOp("huge", store.Refund, l, maxCost))
	want(t, "refund of the largest cost", r, true, 3, 0, 0)
	r = one(t, s, now, gcraOp("huge", store.Spend, l, 3))
	want(t, "spend of the whole burst after the refund", r, true, 0, 18*time.Second, 18*time.Second)
}

func reset(t *testing.T, s store.Store) {
	now := Base()
	one(t, s, now, gcraOp("reset", store.Spend, twentyPerSecond, 20))
	r := one(t, s, now, gcraOp("reset", store.Spend, twentyPerSecond, 1))
	want(t, "spend on an empty bucket", r, false, 0, 50*time.Millisecond, time.Second)
	r = one(t, s, now, gcraOp("reset", store.Reset, twentyPerSecond, 0))
	if !r.Allowed || r.Remaining != 20 {
		t.Fatalf("reset: got %+v, want allowed with 20 remaining", r)
	}
	r = one(t, s, now, gcraOp("reset", store.Spend, twentyPerSecond, 1))
	want(t, "spend after reset", r, true, 19, 0, 50*time.Millisecond)
}

func allOrNothingDenied(t *testing.T, s store.Store) {
	now := Base()
	small := gcra.Limit{Burst: 1, Count: 1, Period: time.Second}
	one(t, s, now, gcraOp("aon-b", store.Spend, small, 1)) // b is now empty
	rs := do(t, s, now, store.Batch{AllOrNothing: true, Ops: []store.Op{
		gcraOp("aon-a", store.Spend, twentyPerSecond, 1),
		gcraOp("aon-b", store.Spend, small, 1),
		gcraOp("aon-c", store.SpendOnly, twentyPerSecond, 1),
	}})
	if !rs[0].Allowed || rs[1].Allowed {
		t.Fatalf("got a=%v b=%v, want a allowed and b denied", rs[0].Allowed, rs[1].Allowed)
	}
	for i, r := range rs {
		if r.Applied {
			t.Fatalf("op %d: got Applied in a denied all-or-nothing batch", i)
		}
	}
	r := one(t, s, now, gcraOp("aon-a", store.Spend, twentyPerSecond, 0))
	want(t, "a after the denied batch", r, true, 20, 0, 0)
	r = one(t, s, now, gcraOp("aon-c", store.Spend, twentyPerSecond, 0))
	want(t, "c after the denied batch", r, true, 20, 0, 0)
}

func allOrNothingAllowed(t *testing.T, s store.Store) {
	now := Base()
	rs := do(t, s, now, store.Batch{AllOrNothing: true, Ops: []store.Op{
		gcraOp("aoa-a", store.Spend, twentyPerSecond, 2),
		gcraOp("aoa-b", store.Spend, twentyPerSecond, 3),
		gcraOp("aoa-c", store.Check, twentyPerSecond, 4),
	}})
	for i, r := range rs {
		if !r.Allowed {
			t.Fatalf("op %d: got denied, want allowed", i)
		}
	}
	for _, c := range []struct {
		key  string
		left int64
	}{{"aoa-a", 18}, {"aoa-b", 17}, {"aoa-c", 20}} {
		r := one(t, s, now, gcraOp(c.key, store.Spend, twentyPerSecond, 0))
		if r.Remaining != c.left {
			t.Fatalf("%s: got %d remaining, want %d", c.key, r.Remaining, c.left)
		}
	}
}

func spendOnly(t *testing.T, s store.Store) {
	now := Base()
	small := gcra.Limit{Burst: 1, Count: 1, Period: time.Second}
	one(t, s, now, gcraOp("so-empty", store.Spend, small, 1))
	// The spend-only bucket is empty, yet the batch is allowed and the
	// checked bucket is spent.
	rs := do(t, s, now, store.Batch{AllOrNothing: true, Ops: []store.Op{
		gcraOp("so-a", store.Spend, twentyPerSecond, 1),
		gcraOp("so-empty", store.SpendOnly, small, 1),
		gcraOp("so-b", store.SpendOnly, twentyPerSecond, 5),
	}})
	if !rs[0].Allowed || !rs[0].Applied {
		t.Fatalf("checked op: got %+v, want allowed and applied", rs[0])
	}
	if rs[1].Allowed || rs[1].Applied {
		t.Fatalf("spend-only on an empty bucket: got %+v, want denied, not applied", rs[1])
	}
	if !rs[2].Allowed || !rs[2].Applied {
		t.Fatalf("spend-only with room: got %+v, want allowed and applied", rs[2])
	}
	r := one(t, s, now, gcraOp("so-b", store.Spend, twentyPerSecond, 0))
	want(t, "spend-only bucket afterwards", r, true, 15, 0, 250*time.Millisecond)
}

func independentBatch(t *testing.T, s store.Store) {
	now := Base()
	small := gcra.Limit{Burst: 1, Count: 1, Period: time.Second}
	one(t, s, now, gcraOp("ind-b", store.Spend, small, 1))
	rs := do(t, s, now, store.Batch{Ops: []store.Op{
		gcraOp("ind-a", store.Spend, twentyPerSecond, 1),
		gcraOp("ind-b", store.Spend, small, 1),
	}})
	if !rs[0].Allowed || !rs[0].Applied || rs[1].Allowed || rs[1].Applied {
		t.Fatalf("got %+v, want a allowed and applied, b denied and not applied", rs)
	}
}

func fixedWindow(t *testing.T, s store.Store) {
	now := Base() // on a minute boundary
	for i := int64(1); i <= 5; i++ {
		r := one(t, s, now.Add(time.Duration(i)*time.Second), windowOp("fw_", store.Spend, 5, time.Minute, 1))
		if !r.Allowed || r.Remaining != 5-i || r.Count != i || r.ResetIn != time.Minute-time.Duration(i)*time.Second {
			t.Fatalf("hit %d: got %+v, want allowed, %d remaining, count %d, reset in %s", i, r, 5-i, i, time.Minute-time.Duration(i)*time.Second)
		}
	}
	for i := int64(6); i <= 7; i++ {
		r := one(t, s, now.Add(10*time.Second), windowOp("fw_", store.Spend, 5, time.Minute, 1))
		if r.Allowed || r.Remaining != 0 || r.Count != i {
			t.Fatalf("hit %d: got %+v, want over limit with count %d (every hit counts)", i, r, i)
		}
	}
	r := one(t, s, now.Add(time.Minute), windowOp("fw_", store.Spend, 5, time.Minute, 2))
	if !r.Allowed || r.Count != 2 || r.Remaining != 3 || r.ResetIn != time.Minute {
		t.Fatalf("first hits of the next window: got %+v, want allowed with count 2, 3 remaining, reset in 1m", r)
	}
	r = one(t, s, now.Add(time.Minute), windowOp("fw-zero_", store.Spend, 0, time.Second, 1))
	if r.Allowed {
		t.Fatalf("a limit of 0: got allowed, want over")
	}
}

func fixedWindowCheckAndRefund(t *testing.T, s store.Store) {
	now := Base()
	one(t, s, now, windowOp("fwc_", store.Spend, 10, time.Hour, 4))
	r := one(t, s, now, windowOp("fwc_", store.Check, 10, time.Hour, 0))
	if !r.Allowed || r.Count != 4 || r.Remaining != 6 || r.Applied {
		t.Fatalf("peek: got %+v, want count 4, 6 remaining, nothing changed", r)
	}
	r = one(t, s, now, windowOp("fwc_", store.Refund, 10, time.Hour, 3))
	if !r.Allowed || r.Count != 1 || r.Remaining != 9 {
		t.Fatalf("refund 3: got %+v, want count 1, 9 remaining", r)
	}
	r = one(t, s, now, windowOp("fwc_", store.Refund, 10, time.Hour, 5))
	if r.Count != 0 || r.Remaining != 10 {
		t.Fatalf("refund past zero: got %+v, want count 0, 10 remaining", r)
	}
	r = one(t, s, now, windowOp("fwc_", store.Spend, 10, time.Hour, 1))
	if r.Count != 1 {
		t.Fatalf("hit after refunds: got count %d, want 1", r.Count)
	}
}

// windowLengths spends from one key's windows of an hour and of a minute
// in turn, as a rule and a request's limit override of another unit count
// the same descriptor: each window keeps its own count (in Redis each is
// a key of its own, the key and the window's start).
func windowLengths(t *testing.T, s store.Store) {
	now := Base().Add(90 * time.Second) // the hour began 90s ago, the minute 30s ago
	for i := int64(1); i <= 3; i++ {
		r := one(t, s, now, windowOp("fwl_", store.Spend, 10, time.Hour, 1))
		if r.Count != i || r.Remaining != 10-i || r.ResetIn != time.Hour-90*time.Second {
			t.Fatalf("hour window, hit %d: got %+v, want count %d, %d remaining, reset in 58m30s", i, r, i, 10-i)
		}
		r = one(t, s, now, windowOp("fwl_", store.Spend, 10, time.Minute, 2))
		if r.Count != 2*i || r.Remaining != 10-2*i || r.ResetIn != 30*time.Second {
			t.Fatalf("minute window, hits %d: got %+v, want count %d, %d remaining, reset in 30s", 2*i, r, 2*i, 10-2*i)
		}
	}
	r := one(t, s, now, windowOp("fwl_", store.Check, 10, time.Hour, 0))
	if r.Count != 3 {
		t.Fatalf("hour window, peek: got %+v, want count 3", r)
	}
}

func refilledBucket(t *testing.T, s store.Store) {
	now := Base()
	one(t, s, now, gcraOp("refill", store.Spend, twentyPerSecond, 20))
	later := now.Add(2 * time.Second)
	r := one(t, s, later, gcraOp("refill", store.Spend, twentyPerSecond, 1))
	want(t, "spend after refilling", r, true, 19, 0, 50*time.Millisecond)
}

func duplicateBucket(t *testing.T, s store.Store) {
	b := store.Batch{Ops: []store.Op{
		gcraOp("dup", store.Spend, twentyPerSecond, 1),
		gcraOp("dup", store.Spend, twentyPerSecond, 1),
	}}
	err := s.Do(context.Background(), Base(), b, make([]store.Result, 2))
	if !errors.Is(err, store.ErrBadBatch) {
		t.Fatalf("got %v, want ErrBadBatch", err)
	}
}

func concurrentSpends(t *testing.T, s store.Store) {
	admitExactly(t, s, gcraOp("conc", store.Spend, gcra.Limit{Burst: 50, Count: 1, Period: time.Hour}, 1), 50)
}

func concurrentWindow(t *testing.T, s store.Store) {
	admitExactly(t, s, windowOp("concw_", store.Spend, 70, time.Hour, 1), 70)
}

// admitExactly runs op from 64 goroutines, 5 times each, at one instant,
// and checks that exactly want were allowed.
func admitExactly(t *testing.T, s store.Store, op store.Op, want int64) {
	t.Helper()
	now := Base()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]store.Result, 1)
			for range 5 {
				if err := s.Do(context.Background(), now, store.Batch{Ops: []store.Op{op}}, out); err != nil {
					t.Errorf("Do: %v", err)
					return
				}
				if out[0].Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != want {
		t.Fatalf("got %d admitted, want exactly %d", got, want)
	}
}

// model is the pure-function reference a backend is compared with.
type model struct {
	tats   map[string]int64
	counts map[string][2]int64 // window start, count
}

func (m *model) apply(now time.Time, op store.Op) store.Result {
	if op.Algorithm == store.FixedWindow {
		r := m.window(now, op)
		if !r.Allowed {
			r.RetryIn = r.ResetIn // over the limit until the window ends
		}
		return r
	}
	return m.gcra(now, op)
}

func (m *model) window(now time.Time, op store.Op) store.Result {
	{ //nolint:gocritic // keeps the switch below at one indentation
		length := int64(op.Window.Length / time.Second)
		start := window.Start(now, length)
		var count int64
		if c, ok := m.counts[op.Key]; ok && c[0] == start {
			count = c[1]
		}
		reset := window.ResetIn(now, length)
		switch op.Kind {
		case store.Refund:
			count = max(count-op.Cost, 0)
			m.counts[op.Key] = [2]int64{start, count}
			h := window.Hit(count, 0, op.Window.Limit)
			return store.Result{Allowed: !h.Over, Remaining: h.Remaining, ResetIn: reset, Count: count}
		case store.Reset:
			delete(m.counts, op.Key)
			return store.Result{Allowed: true, Remaining: op.Window.Limit}
		case store.Check:
			h := window.Hit(count, op.Cost, op.Window.Limit)
			return store.Result{Allowed: !h.Over, Remaining: h.Remaining, ResetIn: reset, Count: count}
		default:
			h := window.Hit(count, op.Cost, op.Window.Limit)
			m.counts[op.Key] = [2]int64{start, h.After}
			return store.Result{Allowed: !h.Over, Remaining: h.Remaining, ResetIn: reset, Count: h.After}
		}
	}
}

func (m *model) gcra(now time.Time, op store.Op) store.Result {
	n := now.UnixNano()
	p := op.Limit.Params()
	tat, ok := m.tats[op.Key]
	if ok && tat <= n {
		delete(m.tats, op.Key)
		ok = false
	}
	switch op.Kind {
	case store.Reset:
		delete(m.tats, op.Key)
		return store.Result{Allowed: true, Remaining: op.Limit.Burst}
	case store.Refund:
		if !ok {
			return store.Result{Remaining: op.Limit.Burst}
		}
		r := p.Refund(n, tat, op.Cost)
		if r.Allowed {
			m.tats[op.Key] = r.TAT
		}
		return store.Result{Allowed: r.Allowed, Remaining: r.Remaining, ResetIn: time.Duration(r.ResetIn)}
	default:
		if !ok {
			tat = n
		}
		r := p.Spend(n, tat, op.Cost)
		if r.Allowed && op.Kind != store.Check && op.Cost > 0 {
			m.tats[op.Key] = r.TAT
		}
		return store.Result{Allowed: r.Allowed, Remaining: r.Remaining, RetryIn: time.Duration(r.RetryIn), ResetIn: time.Duration(r.ResetIn)}
	}
}

func property(t *testing.T, s store.Store) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 42))
	limits := []gcra.Limit{
		twentyPerSecond,
		{Burst: 7, Count: 3, Period: time.Second},            // an emission interval that does not divide
		{Burst: 300, Count: 300, Period: 180 * time.Minute},  // Boulder's NewOrdersPerAccount
		{Burst: 5, Count: 100, Period: 7 * time.Millisecond}, // tiny intervals
		{Burst: 100, Count: 1, Period: 24 * time.Hour * 365}, // the largest burst offset, gcra.MaxBurstOffset
	}
	actions := []store.Kind{store.Spend, store.Spend, store.Spend, store.Check, store.SpendOnly, store.Refund, store.Reset}
	// Keys of a few bytes, of 30 to 35 and of 60 to 65: a backend may keep
	// keys of each length in its own way (the memory store keeps the
	// second in a GCRA bucket's slot, but not in a fixed window's).
	pads := []string{"", strings.Repeat("m", 28), strings.Repeat("l", 58)}
	m := &model{tats: map[string]int64{}, counts: map[string][2]int64{}}
	now := Base().Add(time.Duration(rng.Int64N(int64(time.Second))))
	for i := range 900 {
		now = now.Add(time.Duration(rng.Int64N(int64(40 * time.Millisecond))))
		pad := pads[rng.IntN(len(pads))]
		var op store.Op
		if rng.IntN(4) == 0 {
			length := []time.Duration{time.Second, time.Minute}[rng.IntN(2)]
			op = windowOp(fmt.Sprintf("pw%d_%d_", rng.IntN(2), length/time.Second)+pad, actions[rng.IntN(len(actions))], 10, length, rng.Int64N(4))
		} else {
			k := rng.IntN(len(limits))
			l := limits[k]
			op = gcraOp(fmt.Sprintf("pg%d", k)+pad, actions[rng.IntN(len(actions))], l, rng.Int64N(min(l.Burst, 10)+1))
		}
		wantR := m.apply(now, op)
		got := one(t, s, now, op)
		got.Applied = false
		if op.Kind == store.Reset {
			// Only the decision matters for a reset; its timing fields are
			// the backend's to choose.
			got.ResetIn, wantR.ResetIn = 0, 0
		}
		if got != wantR {
			t.Fatalf("seed %d, step %d, %s %s cost %d at +%s: got %+v, want %+v", seed, i, op.Kind, op.Key, op.Cost, now.Sub(Base()), got, wantR)
		}
	}
}
