package split_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/redis/redistest"
	"github.com/sluice-rl/sluice/store/split"
	"github.com/sluice-rl/sluice/store/storetest"
)

func newSplit(t testing.TB, main, perSecond store.Store) *split.Store {
	t.Helper()
	s, err := split.New(main, perSecond)
	if err != nil {
		t.Fatalf("split.New: %v", err)
	}
	return s
}

func do(t testing.TB, s store.Store, now time.Time, b store.Batch) []store.Result {
	t.Helper()
	out := make([]store.Result, len(b.Ops))
	if err := s.Do(context.Background(), now, b, out); err != nil {
		t.Fatalf("Do: %v", err)
	}
	return out
}

func windowOp(key string, k store.Kind, limit int64, length time.Duration, cost int64) store.Op {
	return store.Op{Key: key, Algorithm: store.FixedWindow, Kind: k, Window: store.Window{Limit: limit, Length: length}, Cost: cost}
}

func gcraOp(key string, k store.Kind, l gcra.Limit, cost int64) store.Op {
	return store.Op{Key: key, Algorithm: store.GCRA, Kind: k, Limit: l, Cost: cost}
}

var tenPerSecond = gcra.Limit{Burst: 10, Count: 10, Period: time.Second}

func TestConformanceWithTwoMemoryStores(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return newSplit(t, memory.New(memory.Options{}), memory.New(memory.Options{}))
	})
}

func TestConformanceWithTwoRedisServers(t *testing.T) {
	main, perSecond := redistest.StartSingle(t), redistest.StartSingle(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		return newSplit(t, redisStore(t, main), redisStore(t, perSecond))
	})
}

// redisStore flushes srv and returns a store on it.
func redisStore(t testing.TB, srv *redistest.Server) store.Store {
	t.Helper()
	srv.MustDo("FLUSHALL")
	s, err := redis.New(context.Background(), redis.Options{Addrs: []string{srv.Addr}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	return s
}

func TestPerSecond(t *testing.T) {
	tests := []struct {
		name string
		op   store.Op
		want bool
	}{
		{name: "a one-second window is per-second", op: windowOp("k", store.Spend, 1, time.Second, 1), want: true},
		{name: "a 59-second window (unit second, multiplier 59) is per-second", op: windowOp("k", store.Spend, 1, 59*time.Second, 1), want: true},
		{name: "a one-minute window is not", op: windowOp("k", store.Spend, 1, time.Minute, 1), want: false},
		{name: "an hour window is not", op: windowOp("k", store.Spend, 1, time.Hour, 1), want: false},
		{name: "a GCRA bucket of one second is not", op: gcraOp("k", store.Spend, tenPerSecond, 1), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := split.PerSecond(&tt.op); got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestRoutesEachOperation checks where each bucket lands by asking the two
// stores directly.
func TestRoutesEachOperation(t *testing.T) {
	main, perSecond := memory.New(memory.Options{}), memory.New(memory.Options{})
	s := newSplit(t, main, perSecond)
	now := storetest.Base()
	ops := []store.Op{
		windowOp("sec_", store.Spend, 5, time.Second, 2),
		gcraOp("kv", store.Spend, tenPerSecond, 3),
		windowOp("min_", store.Spend, 5, time.Minute, 4),
	}
	rs := do(t, s, now, store.Batch{Ops: ops})
	for i, want := range []int64{3, 7, 1} {
		if rs[i].Remaining != want {
			t.Fatalf("op %d (%s): got remaining %d, want %d (results out of order?)", i, ops[i].Key, rs[i].Remaining, want)
		}
	}
	tests := []struct {
		name      string
		in        store.Store
		op        store.Op
		wantCount int64
	}{
		{name: "the one-second window is counted in the per-second store", in: perSecond, op: windowOp("sec_", store.Check, 5, time.Second, 0), wantCount: 2},
		{name: "the one-second window is not in the main store", in: main, op: windowOp("sec_", store.Check, 5, time.Second, 0), wantCount: 0},
		{name: "the one-minute window is counted in the main store", in: main, op: windowOp("min_", store.Check, 5, time.Minute, 0), wantCount: 4},
		{name: "the one-minute window is not in the per-second store", in: perSecond, op: windowOp("min_", store.Check, 5, time.Minute, 0), wantCount: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := do(t, tt.in, now, store.Batch{Ops: []store.Op{tt.op}})[0].Count; got != tt.wantCount {
				t.Fatalf("got count %d, want %d", got, tt.wantCount)
			}
		})
	}
	t.Run("the GCRA bucket is in the main store", func(t *testing.T) {
		if got := do(t, main, now, store.Batch{Ops: []store.Op{gcraOp("kv", store.Check, tenPerSecond, 0)}})[0].Remaining; got != 7 {
			t.Fatalf("got remaining %d, want 7", got)
		}
		if got := do(t, perSecond, now, store.Batch{Ops: []store.Op{gcraOp("kv", store.Check, tenPerSecond, 0)}})[0].Remaining; got != 10 {
			t.Fatalf("per-second store: got remaining %d, want 10 (untouched)", got)
		}
	})
}

// TestMixedBatchesMatchOneStore runs random batches that span both stores
// against a split of two stores and against one store alone: every Result
// must be the same.
func TestMixedBatchesMatchOneStore(t *testing.T) {
	t.Run("with two memory stores", func(t *testing.T) {
		mixedBatches(t, newSplit(t, memory.New(memory.Options{}), memory.New(memory.Options{})))
	})
	t.Run("with two Redis servers", func(t *testing.T) {
		main, perSecond := redistest.StartSingle(t), redistest.StartSingle(t)
		mixedBatches(t, newSplit(t, redisStore(t, main), redisStore(t, perSecond)))
	})
}

func mixedBatches(t *testing.T, s store.Store) {
	t.Helper()
	defer s.Close()
	one := memory.New(memory.Options{})
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 7))
	kinds := []store.Kind{store.Spend, store.Spend, store.Spend, store.Check, store.SpendOnly, store.Refund, store.Reset}
	now := storetest.Base()
	for step := range 400 {
		now = now.Add(time.Duration(rng.Int64N(int64(150 * time.Millisecond))))
		b := store.Batch{AllOrNothing: rng.IntN(2) == 0}
		for k, n := 0, 1+rng.IntN(5); k < n; k++ {
			kind := kinds[rng.IntN(len(kinds))]
			switch rng.IntN(3) {
			case 0:
				b.Ops = append(b.Ops, windowOp(fmt.Sprintf("s%d_", k), kind, 6, time.Second, rng.Int64N(3)))
			case 1:
				b.Ops = append(b.Ops, windowOp(fmt.Sprintf("m%d_", k), kind, 20, time.Minute, rng.Int64N(3)))
			default:
				// A small bucket, so that all-or-nothing batches are often denied.
				b.Ops = append(b.Ops, gcraOp(fmt.Sprintf("g%d", k), kind, gcra.Limit{Burst: 3, Count: 2, Period: time.Second}, rng.Int64N(5)))
			}
		}
		got, want := do(t, s, now, b), do(t, one, now, b)
		for i := range b.Ops {
			if got[i] != want[i] {
				t.Fatalf("seed %d, step %d, op %d (%s %s, all-or-nothing %v): got %+v, want %+v",
					seed, step, i, b.Ops[i].Kind, b.Ops[i].Key, b.AllOrNothing, got[i], want[i])
			}
		}
	}
}

func TestDeniedAllOrNothingBatchKeepsPerSecondWindows(t *testing.T) {
	perSecond := memory.New(memory.Options{})
	s := newSplit(t, memory.New(memory.Options{}), perSecond)
	now := storetest.Base()
	do(t, s, now, store.Batch{Ops: []store.Op{windowOp("sec_", store.Spend, 5, time.Second, 3)}})
	rs := do(t, s, now, store.Batch{AllOrNothing: true, Ops: []store.Op{
		gcraOp("kv", store.Spend, tenPerSecond, 11), // denied: more than the burst
		windowOp("sec_", store.Reset, 5, time.Second, 0),
		windowOp("hit_", store.Spend, 5, time.Second, 1),
	}})
	if rs[0].Allowed {
		t.Fatal("the over-burst spend: got allowed, want denied")
	}
	if !rs[1].Allowed || rs[1].Applied || rs[1].Remaining != 5 {
		t.Fatalf("the reset: got %+v, want allowed, not applied, remaining 5", rs[1])
	}
	if !rs[2].Applied || rs[2].Count != 1 {
		t.Fatalf("the window hit: got %+v, want applied with count 1 (hits count whatever the batch decides)", rs[2])
	}
	if got := do(t, perSecond, now, store.Batch{Ops: []store.Op{windowOp("sec_", store.Check, 5, time.Second, 0)}})[0].Count; got != 3 {
		t.Fatalf("the reset window: got count %d, want 3 (the denied batch must not reset it)", got)
	}
}

func TestUnavailableHalf(t *testing.T) {
	srv := redistest.StartSingle(t)
	perSecond := redisStore(t, srv)
	s := newSplit(t, memory.New(memory.Options{}), perSecond)
	defer s.Close()
	now := storetest.Base()
	srv.Kill()
	tests := []struct {
		name    string
		ops     []store.Op
		wantErr bool
	}{
		{name: "a batch of main-store buckets only still answers", ops: []store.Op{gcraOp("kv", store.Spend, tenPerSecond, 1)}},
		{name: "a per-second bucket is unavailable", ops: []store.Op{windowOp("sec_", store.Spend, 5, time.Second, 1)}, wantErr: true},
		{name: "a batch spanning both is unavailable", ops: []store.Op{gcraOp("kv", store.Spend, tenPerSecond, 1), windowOp("sec_", store.Spend, 5, time.Second, 1)}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := make([]store.Result, len(tt.ops))
			err := s.Do(context.Background(), now, store.Batch{Ops: tt.ops}, out)
			if tt.wantErr != (err != nil) || (err != nil && !errors.Is(err, store.ErrUnavailable)) {
				t.Fatalf("got error %v, want error wrapping store.ErrUnavailable: %v", err, tt.wantErr)
			}
		})
	}
	if err := s.Ping(context.Background()); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Ping: got %v, want an error wrapping store.ErrUnavailable", err)
	}
}

func TestRefusesBadBatchesSpanningBoth(t *testing.T) {
	main, perSecond := memory.New(memory.Options{}), memory.New(memory.Options{})
	s := newSplit(t, main, perSecond)
	now := storetest.Base()
	// The same name as a GCRA bucket (main) and a one-second window (per
	// second): neither store alone sees the repeat.
	b := store.Batch{Ops: []store.Op{
		windowOp("same", store.Spend, 5, time.Second, 1),
		gcraOp("same", store.Spend, tenPerSecond, 1),
	}}
	out := make([]store.Result, 2)
	if err := s.Do(context.Background(), now, b, out); !errors.Is(err, store.ErrBadBatch) {
		t.Fatalf("got %v, want an error wrapping store.ErrBadBatch", err)
	}
	if got := do(t, perSecond, now, store.Batch{Ops: []store.Op{windowOp("same", store.Check, 5, time.Second, 0)}})[0].Count; got != 0 {
		t.Fatalf("the refused batch counted %d hits, want 0", got)
	}
	if _, err := split.New(main, nil); err == nil {
		t.Fatal("split.New without a per-second store: got no error, want one")
	}
}
