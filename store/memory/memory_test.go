package memory_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/internal/keybuf"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return memory.New(memory.Options{}) })
}

func TestConformanceWithOneShard(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return memory.New(memory.Options{Shards: 1}) })
}

func TestEntriesAreBounded(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Options{Shards: 4, MaxEntries: 100})
	now := storetest.Base()
	l := gcra.Limit{Burst: 10, Count: 1, Period: time.Hour}
	out := make([]store.Result, 1)
	for i := range 1000 {
		op := store.Op{Key: fmt.Sprint("k", i), Algorithm: store.GCRA, Kind: store.Spend, Limit: l, Cost: 1}
		if err := s.Do(context.Background(), now, store.Batch{Ops: []store.Op{op}}, out); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Len(); got > 100 {
		t.Fatalf("got %d entries, want at most 100", got)
	}
}

func TestRefilledBucketsAreSwept(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Options{Shards: 1})
	now := storetest.Base()
	l := gcra.Limit{Burst: 10, Count: 10, Period: time.Second}
	out := make([]store.Result, 1)
	spend := func(at time.Time, key string) {
		op := store.Op{Key: key, Algorithm: store.GCRA, Kind: store.Spend, Limit: l, Cost: 1}
		if err := s.Do(context.Background(), at, store.Batch{Ops: []store.Op{op}}, out); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 1000 {
		spend(now, fmt.Sprint("old", i))
	}
	// A second later every old bucket is full again; new inserts sweep them.
	later := now.Add(time.Second)
	for i := range 1000 {
		spend(later, fmt.Sprint("new", i))
	}
	if got := s.Len(); got >= 1900 {
		t.Fatalf("got %d entries, want most of the 1000 refilled ones swept", got)
	}
}

func TestBadOperationsAreRefused(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Options{})
	bad := []store.Op{
		{Key: "a", Algorithm: store.GCRA, Kind: store.Spend, Limit: gcra.Limit{}, Cost: 1},
		{Key: "a", Algorithm: store.FixedWindow, Kind: store.Spend, Window: store.Window{Limit: 1, Length: 1500 * time.Millisecond}, Cost: 1},
		{Key: "a", Algorithm: 9, Kind: store.Spend, Cost: 1},
		{Key: "a", Algorithm: store.GCRA, Kind: 0, Limit: gcra.Limit{Burst: 1, Count: 1, Period: time.Second}},
		{Key: "a", Algorithm: store.GCRA, Kind: store.Spend, Limit: gcra.Limit{Burst: 1, Count: 1, Period: time.Second}, Cost: -1},
	}
	for i, op := range bad {
		err := s.Do(context.Background(), storetest.Base(), store.Batch{Ops: []store.Op{op}}, make([]store.Result, 1))
		if err == nil {
			t.Errorf("op %d: got nil error, want ErrBadBatch", i)
		}
	}
	if err := s.Do(context.Background(), storetest.Base(), store.Batch{Ops: make([]store.Op, 2)}, make([]store.Result, 1)); err == nil {
		t.Errorf("short output: got nil error, want one")
	}
}

func TestLongBatches(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Options{Shards: 4})
	now := storetest.Base()
	l := gcra.Limit{Burst: 1, Count: 1, Period: time.Hour}
	ops := make([]store.Op, 40) // more than the stack buffers hold
	for i := range ops {
		ops[i] = store.Op{Key: fmt.Sprint("long", i), Algorithm: store.GCRA, Kind: store.Spend, Limit: l, Cost: 1}
	}
	out := make([]store.Result, len(ops))
	for round, want := range []bool{true, false} {
		if err := s.Do(context.Background(), now, store.Batch{Ops: ops, AllOrNothing: true}, out); err != nil {
			t.Fatal(err)
		}
		for i, r := range out {
			if r.Allowed != want || r.Applied != want {
				t.Fatalf("round %d, op %d: got %+v, want allowed and applied %v", round, i, r, want)
			}
		}
	}
}

// A batch whose first write inserts a bucket, and with it sweeps expired
// ones, keeps the state of a later bucket of the batch that the sweep
// removed: it is found again before it is written.
func TestABatchSurvivesTheSweepOfItsOwnInsert(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Options{Shards: 1})
	ctx := context.Background()
	now := storetest.Base()
	l := gcra.Limit{Burst: 5, Count: 10, Period: time.Second}
	spend := func(key string, cost int64) store.Op {
		return store.Op{Key: key, Algorithm: store.GCRA, Kind: store.Spend, Limit: l, Cost: cost}
	}
	out := make([]store.Result, 2)
	// Seven buckets, full again a second later: the next insert, the
	// eighth, sweeps them.
	for i := range 7 {
		if err := s.Do(ctx, now, store.Batch{Ops: []store.Op{spend(fmt.Sprint("old", i), 1)}}, out); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(time.Second)
	// The new bucket first, then an expired one the sweep removes.
	if err := s.Do(ctx, now, store.Batch{Ops: []store.Op{spend("new", 1), spend("old3", 3)}}, out); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key  string
		want int64
	}{{"new", 4}, {"old3", 2}} {
		peek := store.Op{Key: tc.key, Algorithm: store.GCRA, Kind: store.Check, Limit: l}
		if err := s.Do(ctx, now, store.Batch{Ops: []store.Op{peek}}, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Remaining != tc.want {
			t.Errorf("%s after the batch: got %d remaining, want %d", tc.key, out[0].Remaining, tc.want)
		}
	}
}

// TestDoOneAnswersAsDo runs the same random operations through DoOne on
// one store and through Do, one-operation batches, on another, and checks
// that every answer is the same. (The buckets held may differ: each store
// has its own hash seed, so expired buckets are swept in another order.)
func TestDoOneAnswersAsDo(t *testing.T) {
	t.Parallel()
	one, batch := memory.New(memory.Options{Shards: 2}), memory.New(memory.Options{Shards: 2})
	r := rand.New(rand.NewPCG(3, 4))
	now := storetest.Base()
	clk := clock.NewFake(now)
	ctx := context.Background()
	out := make([]store.Result, 1)
	for step := range 5000 {
		op := store.Op{Key: fmt.Sprint("k", r.IntN(6)), Kind: store.Kind(1 + r.IntN(5)), Cost: int64(r.IntN(4))}
		if r.IntN(4) == 0 {
			op.Key += strings.Repeat("-long", 8)
		}
		if r.IntN(2) == 0 {
			op.Algorithm, op.Limit = store.GCRA, gcra.Limit{Burst: 5, Count: 2, Period: time.Second}
		} else {
			op.Algorithm, op.Window = store.FixedWindow, store.Window{Limit: 4, Length: time.Second}
		}
		now = clk.Add(time.Duration(r.IntN(60)) * time.Millisecond)
		got, err := one.DoOne(ctx, clk, op)
		if err != nil {
			t.Fatal(err)
		}
		if err := batch.Do(ctx, now, store.Batch{Ops: []store.Op{op}, AllOrNothing: true}, out); err != nil {
			t.Fatal(err)
		}
		if got != out[0] {
			t.Fatalf("step %d, %+v: DoOne answered %+v, Do %+v", step, op, got, out[0])
		}
	}
	op := store.Op{Key: "bad", Algorithm: store.GCRA, Kind: store.Spend}
	if _, err := one.DoOne(ctx, clk, op); !errors.Is(err, store.ErrBadBatch) {
		t.Fatalf("an invalid limit: got %v, want ErrBadBatch", err)
	}
}

// TestSpendGCRAAnswersAsDoOne runs the same random operations on two
// stores, through DoOne on one, and on the other through SpendGCRA,
// PrefetchGCRA and SpendGCRAHashed, or SpendGCRAHashed with the zero
// Hashed, in turn, for every GCRA spend and check (DoOne for the rest:
// refunds, resets, fixed windows on the same keys), and checks that every
// answer is the same.
// (The buckets held may differ, as in TestDoOneAnswersAsDo.)
func TestSpendGCRAAnswersAsDoOne(t *testing.T) {
	t.Parallel()
	fast, one := memory.New(memory.Options{Shards: 2}), memory.New(memory.Options{Shards: 2})
	r := rand.New(rand.NewPCG(5, 6))
	clk := clock.NewFake(storetest.Base())
	ctx := context.Background()
	limits := []gcra.Limit{{Burst: 5, Count: 2, Period: time.Second}, {Burst: 3, Count: 1, Period: 300 * time.Millisecond}}
	spent := 0
	for step := range 20_000 {
		op := store.Op{Key: fmt.Sprint("k", r.IntN(6)), Kind: store.Kind(1 + r.IntN(5)), Cost: int64(r.IntN(4))}
		switch r.IntN(4) {
		case 0:
			op.Key += strings.Repeat("-long", 8) // a wide bucket
		case 1:
			op.Key += strings.Repeat("-mid", 6) // 26 bytes, hashed by maphash
		}
		if r.IntN(4) != 0 {
			op.Algorithm, op.Limit = store.GCRA, limits[r.IntN(len(limits))]
		} else {
			op.Algorithm, op.Window = store.FixedWindow, store.Window{Limit: 4, Length: time.Second}
		}
		clk.Add(time.Duration(r.IntN(60)) * time.Millisecond)
		want, err := one.DoOne(ctx, clk, op)
		if err != nil {
			t.Fatal(err)
		}
		var got store.Result
		if op.Algorithm == store.GCRA && (op.Kind == store.Spend || op.Kind == store.Check) {
			spent++
			p, check := op.Limit.Params(), op.Kind == store.Check
			switch r.IntN(3) { // the three ways to the one bucket
			case 0:
				got.Allowed, got.Remaining, got.RetryIn, got.ResetIn = fast.SpendGCRA(clk, op.Key, p, op.Cost, check)
			case 1:
				at := fast.PrefetchGCRA(op.Key)
				got.Allowed, got.Remaining, got.RetryIn, got.ResetIn = fast.SpendGCRAHashed(at, clk, op.Key, p, op.Cost, check)
			default:
				got.Allowed, got.Remaining, got.RetryIn, got.ResetIn = fast.SpendGCRAHashed(memory.Hashed{}, clk, op.Key, p, op.Cost, check)
			}
			// The four values SpendGCRA answers with; what it wrote shows
			// in the answers after.
			want = store.Result{Allowed: want.Allowed, Remaining: want.Remaining, RetryIn: want.RetryIn, ResetIn: want.ResetIn}
		} else if got, err = fast.DoOne(ctx, clk, op); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("step %d, %+v: got %+v, DoOne answered %+v", step, op, got, want)
		}
	}
	if spent < 5000 {
		t.Fatalf("only %d spends and checks", spent)
	}
}

// TestSpendGCRAOnAFullStore checks that SpendGCRA, as DoOne, answers a
// new bucket that does not fit as a fresh one, keeps no state for it and
// counts it refused, while the live bucket keeps its own.
func TestSpendGCRAOnAFullStore(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Options{Shards: 1, MaxEntries: 1})
	clk := clock.NewFake(storetest.Base())
	p := gcra.Limit{Burst: 5, Count: 1, Period: time.Minute}.Params()
	if ok, left, _, _ := s.SpendGCRA(clk, "held", p, 2, false); !ok || left != 3 {
		t.Fatalf("first spend: allowed %v, %d remaining", ok, left)
	}
	for i := range 2 {
		if ok, left, _, _ := s.SpendGCRA(clk, "new", p, 1, false); !ok || left != 4 {
			t.Fatalf("spend %d on a bucket that does not fit: allowed %v, %d remaining, want allowed with 4", i, ok, left)
		}
	}
	if _, left, _, _ := s.SpendGCRA(clk, "held", p, 0, true); left != 3 {
		t.Fatalf("the held bucket: %d remaining, want 3", left)
	}
	if s.Len() != 1 || s.Refused() != 2 {
		t.Fatalf("%d buckets held, %d refused; want 1 and 2", s.Len(), s.Refused())
	}
}

// TestSpendGCRAShortAnswersAsSpendGCRA spends and checks on short keys,
// some prefixes of others, through SpendGCRAShort on one store and
// SpendGCRA on another, the clock moving so that buckets fill up again
// and are swept, and checks every answer is the same; and that DoOne
// finds the buckets SpendGCRAShort made under their keys.
func TestSpendGCRAShortAnswersAsSpendGCRA(t *testing.T) {
	t.Parallel()
	short, long := memory.New(memory.Options{Shards: 2}), memory.New(memory.Options{Shards: 2})
	r := rand.New(rand.NewPCG(9, 10))
	clk := clock.NewFake(storetest.Base())
	p := gcra.Limit{Burst: 4, Count: 2, Period: time.Second}.Params()
	for step := range 20_000 {
		// "3:17", and "3:1", its prefix, a bucket of its own.
		n := strconv.Itoa(r.IntN(40))
		key := "3:" + n[:min(len(n), 1+r.IntN(2))]
		if r.IntN(8) == 0 {
			key = strings.Repeat("k", r.IntN(keybuf.Max+1))
		}
		cost, check := int64(r.IntN(3)), r.IntN(4) == 0
		clk.Add(time.Duration(r.IntN(300)) * time.Millisecond)
		lo, hi := keybuf.Load(key)
		if r.IntN(2) == 0 {
			// Bytes past the key, which must be ignored.
			for b := len(key); b < keybuf.Max; b++ {
				junk := uint64(1+r.IntN(255)) << (8 * (b % 8))
				if b < 8 {
					lo |= junk
				} else {
					hi |= junk
				}
			}
		}
		// A prefetch changes nothing, whatever it is given.
		short.PrefetchShort(lo, hi, len(key))
		short.PrefetchShort(r.Uint64(), r.Uint64(), r.IntN(100)-50)
		var got, want [4]any
		got[0], got[1], got[2], got[3] = short.SpendGCRAShort(clk, lo, hi, len(key), p, cost, check)
		want[0], want[1], want[2], want[3] = long.SpendGCRA(clk, key, p, cost, check)
		if got != want {
			t.Fatalf("step %d, %q, cost %d, check %v: SpendGCRAShort answered %v, SpendGCRA %v", step, key, cost, check, got, want)
		}
	}
	for _, s := range []*memory.Store{short, long} {
		if s.Len() == 0 {
			t.Fatal("no bucket left to look up")
		}
	}
	for i := range 40 {
		key := "3:" + strconv.Itoa(i)
		op := store.Op{Key: key, Algorithm: store.GCRA, Kind: store.Check, Limit: gcra.Limit{Burst: 4, Count: 2, Period: time.Second}}
		a, err := short.DoOne(context.Background(), clk, op)
		if err != nil {
			t.Fatal(err)
		}
		b, err := long.DoOne(context.Background(), clk, op)
		if err != nil {
			t.Fatal(err)
		}
		if a != b {
			t.Fatalf("%q: DoOne answers %+v over SpendGCRAShort's buckets, %+v over SpendGCRA's", key, a, b)
		}
	}
}

// TestSpendGCRAShortRefusesLongKeys: a length past 16 bytes, or below
// zero, panics, naming it, rather than finding a bucket by part of a key.
func TestSpendGCRAShortRefusesLongKeys(t *testing.T) {
	s := memory.New(memory.Options{})
	p := gcra.Limit{Burst: 1, Count: 1, Period: time.Second}.Params()
	for _, n := range []int{17, 24, -1} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), strconv.Itoa(n)+" bytes") {
					t.Errorf("n = %d: recovered %v, want a panic naming the length", n, r)
				}
			}()
			s.SpendGCRAShort(clock.New(), 0, 0, n, p, 1, false)
		}()
	}
}

// TestDoOneKeepsNoReferenceToTheKey passes keys whose bytes the caller
// then overwrites, as store.Oner allows, and checks that the buckets are
// found again under their keys, and only under them.
func TestDoOneKeepsNoReferenceToTheKey(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Options{Shards: 1})
	now := clock.NewFake(storetest.Base())
	ctx := context.Background()
	for _, key := range []string{"short", strings.Repeat("long-key-", 8)} {
		buf := []byte(key)
		op := store.Op{Key: unsafe.String(unsafe.SliceData(buf), len(buf)), Algorithm: store.GCRA, Kind: store.Spend,
			Limit: gcra.Limit{Burst: 5, Count: 1, Period: time.Hour}, Cost: 2}
		if _, err := s.DoOne(ctx, now, op); err != nil {
			t.Fatal(err)
		}
		for i := range buf {
			buf[i] = 'x'
		}
		op.Key = key
		r, err := s.DoOne(ctx, now, op)
		if err != nil {
			t.Fatal(err)
		}
		if r.Remaining != 1 {
			t.Errorf("%q: the second spend of 2 left %d of 5, want 1: the bucket was not found again", key, r.Remaining)
		}
		op.Key = strings.Repeat("x", len(key))
		if r, _ := s.DoOne(ctx, now, op); r.Remaining != 3 {
			t.Errorf("%q: the overwritten bytes %q found a bucket with %d left, want a new one with 3", key, op.Key, r.Remaining)
		}
	}
}
