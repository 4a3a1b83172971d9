package memory

import (
	"context"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/store"
)

// TestPrefetchFindsTheHomeSlot checks that the address a decision
// prefetches, from what the shard publishes, is its bucket's home slot
// or, for a wide bucket, its home entry, as the tables grow, as buckets
// are removed and swept (the tables shrinking) and after Close empties
// them: a stale one would only cost speed, which no other test sees.
func TestPrefetchFindsTheHomeSlot(t *testing.T) {
	s := New(Options{Shards: 1})
	sh := &s.shards[0]
	clk := clock.NewFake(time.Unix(1e9, 0))
	key := func(i int) string {
		if i%2 == 0 {
			return fmt.Sprint("k", i)
		}
		return fmt.Sprintf("%060d", i)
	}
	check := func(when string, from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			h, _ := s.hash(key(i))
			if isWide(len(key(i))) {
				if got, want := prefetchedWide(sh, h); got != want {
					t.Fatalf("%s, key %d: prefetched entry %#x, home entry at %#x", when, i, got, want)
				}
			} else if got, want := prefetched(sh, h); got != want {
				t.Fatalf("%s, key %d: prefetched %#x, home slot at %#x", when, i, got, want)
			}
		}
	}
	check("new", 0, 10)
	op := store.Op{Algorithm: store.GCRA, Kind: store.Spend, Limit: gcra.Limit{Burst: 5, Count: 1, Period: time.Hour}, Cost: 1}
	do := func(kind store.Kind, i int) {
		t.Helper()
		op.Key, op.Kind = key(i), kind
		if _, err := s.DoOne(context.Background(), clk, op); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 1000 {
		do(store.Spend, i)
		if i&(i+1) == 0 || i == 999 {
			check(fmt.Sprintf("after %d buckets, %d slots, %d wide", i+1, len(sh.tab.slots), len(sh.tab.wide.e)), 0, i+1)
		}
	}
	for i := range 990 {
		do(store.Reset, i)
		if i%100 == 99 || i == 989 {
			// A sweep shrinks the tables.
			sh.mu.Lock()
			sh.sweep(clock.UnixNano(clk), sweepBudget)
			sh.mu.Unlock()
			check(fmt.Sprintf("after %d removed, %d slots, %d wide", i+1, len(sh.tab.slots), len(sh.tab.wide.e)), i+1, 1000)
		}
	}
	if size := len(sh.tab.wide.e); size > minShrunk {
		t.Fatalf("%d wide entries for %d buckets: want them shrunk", size, sh.tab.wide.n)
	}
	checkWide(t, &sh.tab)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check("after Close", 0, 10)
}

// prefetched returns the address prefetchSlot(h) asks for in sh, and that
// of the bucket's home slot.
func prefetched(sh *shard, h uint64) (got, want uintptr) {
	got = sh.slotsAt.Load() + uintptr(h>>sh.slotsShift.Load())*unsafe.Sizeof(slot{})
	return got, uintptr(unsafe.Pointer(&sh.tab.slots[sh.tab.home(h)]))
}

// prefetchedWide returns the address prefetchWide(h) asks for first in
// sh, and that of the wide bucket's home entry, or of an entry of noWide
// when the shard has none.
func prefetchedWide(sh *shard, h uint64) (got, want uintptr) {
	got = sh.wideAt.Load() + uintptr(h>>sh.wideShift.Load())*unsafe.Sizeof(wide{})
	if w := &sh.tab.wide; len(w.e) > 0 {
		return got, uintptr(unsafe.Pointer(&w.e[w.home(h)]))
	}
	return got, uintptr(unsafe.Pointer(&noWide[h>>63]))
}

// TestExpiredBucketsGiveTheirMemoryBack makes 5,000 buckets, lets them
// expire, and keeps making short-lived ones: the sweeps remove the expired
// buckets and the shard's table shrinks, with the live buckets still
// found and the prefetched address still each bucket's home slot.
func TestExpiredBucketsGiveTheirMemoryBack(t *testing.T) {
	s := New(Options{Shards: 1})
	sh := &s.shards[0]
	clk := clock.NewFake(time.Unix(1e9, 0))
	ctx := context.Background()
	spend := func(key string, period time.Duration) store.Result {
		t.Helper()
		r, err := s.DoOne(ctx, clk, store.Op{Key: key, Algorithm: store.GCRA, Kind: store.Spend,
			Limit: gcra.Limit{Burst: 2, Count: 1, Period: period}, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for i := range 5000 {
		spend(fmt.Sprint("old-", i), time.Second)
	}
	big := len(sh.tab.slots)
	spend("kept", time.Hour)
	clk.Advance(2 * time.Second)
	for i := range 20000 {
		clk.Advance(2 * time.Millisecond)
		spend(fmt.Sprint("new-", i), time.Millisecond)
	}
	if small := len(sh.tab.slots); small*8 > big || sh.tab.n*8 > small && small > minShrunk {
		t.Fatalf("%d slots for 5,000 buckets, then %d slots for %d buckets: want at most an eighth", big, small, sh.tab.n)
	}
	if r := spend("kept", time.Hour); r.Remaining != 0 {
		t.Errorf("the live bucket: %d left, want 0 (its first spend kept)", r.Remaining)
	}
	h, _ := s.hash("kept")
	if got, want := prefetched(sh, h); got != want {
		t.Errorf("after shrinking: prefetched %#x, home slot at %#x", got, want)
	}
}

// TestChurnSettlesTheTable spends, round and round, on 1,000 keys whose
// buckets are full again before their key comes round: every spend finds
// its bucket expired or already swept away, the way a shard churns
// through short-lived buckets. Once the sweeps have shrunk the table, it
// must keep its size: a table shrunk below what one sweep reaches grows
// again at once, allocating and moving every slot each time. It runs
// with keys kept in slots and with keys of wide buckets, whose table
// must settle too.
func TestChurnSettlesTheTable(t *testing.T) {
	for _, pad := range []int{0, 50} {
		s := New(Options{Shards: 1})
		sh := &s.shards[0]
		clk := clock.NewFake(time.Unix(1e9, 0))
		ctx := context.Background()
		key := func(i int) string { return fmt.Sprintf("k-%0*d", pad, i%1000) }
		size := func() int {
			if isWide(len(key(0))) {
				return len(sh.tab.wide.e)
			}
			return len(sh.tab.slots)
		}
		spend := func(i int) {
			t.Helper()
			clk.Advance(time.Millisecond)
			_, err := s.DoOne(ctx, clk, store.Op{Key: key(i), Algorithm: store.GCRA, Kind: store.Spend,
				Limit: gcra.Limit{Burst: 1, Count: 1, Period: time.Millisecond}, Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
		}
		for i := range 20000 {
			spend(i)
		}
		was, resized := size(), 0
		for i := range 20000 {
			spend(i)
			if size() != was {
				was = size()
				resized++
			}
		}
		if resized > 0 || was == 0 {
			t.Errorf("%d-byte keys: the table changed size %d times in 20,000 spends of churn, now %d entries for %d buckets; want it settled", len(key(0)), resized, was, sh.tab.count())
		}
	}
}

// TestAKeyHoldsABucketOfEachKind spends from keys as GCRA buckets, then as
// fixed windows of an hour, then of a minute, and again, twice each time:
// a key's GCRA bucket and its windows of each length are buckets apart,
// as in Redis (where a window is the key and the window's start), so each
// round goes on from the same kind's last round, and the shard holds
// every key three times, its wide buckets and long keys' records exactly
// those of its buckets, each wide bucket counting its second line's bytes.
// Once the minute has ended, its windows start afresh in the buckets they
// had. The keys' lengths are kept in the slot by either kind (10), in the
// slot by a GCRA bucket and in a wide one by a fixed window (30, 40), in
// a wide bucket by either kind (41, 60, 88), and in the long keys (89,
// 100).
func TestAKeyHoldsABucketOfEachKind(t *testing.T) {
	for _, n := range []int{10, 30, 40, 41, 60, 88, 89, 100} {
		s := New(Options{Shards: 1})
		clk := clock.NewFake(time.Unix(1_700_000_000, 0))
		ctx := context.Background()
		g := store.Op{Algorithm: store.GCRA, Kind: store.Spend, Limit: gcra.Limit{Burst: 7, Count: 1, Period: time.Hour}, Cost: 1}
		hour := store.Op{Algorithm: store.FixedWindow, Kind: store.Spend, Window: store.Window{Limit: 5, Length: time.Hour}, Cost: 1}
		minute := store.Op{Algorithm: store.FixedWindow, Kind: store.Spend, Window: store.Window{Limit: 4, Length: time.Minute}, Cost: 1}
		keys := make([]string, 300)
		for i := range keys {
			keys[i] = fmt.Sprintf("%0*d", n, i)
		}
		sh := &s.shards[0]
		spend := func(round int, op store.Op, limit, before int64) {
			t.Helper()
			for _, k := range keys {
				op.Key = k
				for spent := before + 1; spent <= before+2; spent++ {
					r, err := s.DoOne(ctx, clk, op)
					if err != nil {
						t.Fatal(err)
					}
					if !r.Allowed || r.Remaining != limit-spent {
						t.Fatalf("%d-byte key %q, round %d (%v, %s), spend %d: got %+v, want %d remaining", n, k, round, op.Algorithm, op.Window.Length, spent, r, limit-spent)
					}
				}
			}
		}
		kept := func(round int, kinds int, bytes int64) {
			t.Helper()
			if want := int64(len(keys)) * bytes; sh.tab.count() != kinds*len(keys) || sh.bytes != want {
				t.Fatalf("%d-byte keys, round %d: %d buckets of %d bytes, want %d of %d", n, round, sh.tab.count(), sh.bytes, kinds*len(keys), want)
			}
			checkLong(t, &sh.tab)
			checkWide(t, &sh.tab)
		}
		gcraBytes, windowBytes := cost(n, false), cost(n, true)
		spend(0, g, 7, 0)
		kept(0, 1, gcraBytes)
		spend(1, hour, 5, 0)
		kept(1, 2, gcraBytes+windowBytes)
		spend(2, minute, 4, 0)
		kept(2, 3, gcraBytes+2*windowBytes)
		spend(3, g, 7, 2)
		spend(4, hour, 5, 2)
		spend(5, minute, 4, 2)
		kept(5, 3, gcraBytes+2*windowBytes)
		clk.Add(time.Minute)
		spend(6, minute, 4, 0)
		kept(6, 3, gcraBytes+2*windowBytes)
		if wide, want := sh.tab.wide.n, len(keys)*(wideKinds(n)); wide != want {
			t.Fatalf("%d-byte keys: %d wide buckets, want %d", n, wide, want)
		}
	}
}

// wideKinds is how many of a key of n bytes' three buckets in
// TestAKeyHoldsABucketOfEachKind are wide: its GCRA bucket's and its two
// windows'.
func wideKinds(n int) int {
	k := 0
	if wideFor(n, false) {
		k++
	}
	if wideFor(n, true) {
		k += 2
	}
	return k
}

// TestShardLayout checks what shard's layout promises: a whole number of
// cache lines, and everything a decision on a bucket in cache reads of
// its shard (the lock, the published tables, the slots' place and shift)
// within its first line.
func TestShardLayout(t *testing.T) {
	var sh shard
	want := uintptr(256) // shardPad's sizes
	if unsafe.Sizeof(uintptr(0)) == 4 {
		want = 192
	}
	if size := unsafe.Sizeof(sh); size%64 != 0 || size != want {
		t.Errorf("a shard is %d bytes, want %d, a whole number of 64-byte lines", size, want)
	}
	hot := map[string]uintptr{
		"mu":         unsafe.Offsetof(sh.mu) + unsafe.Sizeof(sh.mu),
		"slotsAt":    unsafe.Offsetof(sh.slotsAt) + unsafe.Sizeof(sh.slotsAt),
		"wideAt":     unsafe.Offsetof(sh.wideAt) + unsafe.Sizeof(sh.wideAt),
		"slotsShift": unsafe.Offsetof(sh.slotsShift) + unsafe.Sizeof(sh.slotsShift),
		"wideShift":  unsafe.Offsetof(sh.wideShift) + unsafe.Sizeof(sh.wideShift),
		"tab.slots":  unsafe.Offsetof(sh.tab) + unsafe.Offsetof(sh.tab.slots) + unsafe.Sizeof(sh.tab.slots),
		"tab.shift":  unsafe.Offsetof(sh.tab) + unsafe.Offsetof(sh.tab.shift) + unsafe.Sizeof(sh.tab.shift),
	}
	for name, end := range hot {
		if end > 64 {
			t.Errorf("shard.%s ends at byte %d, past the first line", name, end)
		}
	}
}

// TestSpendGCRALeavesAWindowApart: SpendGCRA on a key that has a fixed
// window makes the key's GCRA bucket beside it, whether the two kinds keep
// the key in one place (10, 60 bytes) or in two (30: the window in a wide
// bucket, the GCRA bucket in a slot); the window spent after it goes on
// from its count.
func TestSpendGCRALeavesAWindowApart(t *testing.T) {
	for _, n := range []int{10, 30, 60} {
		s := New(Options{Shards: 1})
		sh := &s.shards[0]
		clk := clock.NewFake(time.Unix(1_700_000_000, 0))
		ctx := context.Background()
		key := fmt.Sprintf("%0*d", n, 7)
		w := store.Op{Key: key, Algorithm: store.FixedWindow, Kind: store.Spend, Window: store.Window{Limit: 4, Length: time.Hour}, Cost: 1}
		spendWindow := func(want int64) {
			t.Helper()
			r, err := s.DoOne(ctx, clk, w)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Allowed || r.Remaining != want {
				t.Fatalf("%d-byte key, window: got %+v, want %d remaining", n, r, want)
			}
		}
		spendWindow(3)
		spendWindow(2)
		lim := gcra.Limit{Burst: 5, Count: 1, Period: time.Hour}
		for want := int64(4); want >= 3; want-- {
			if ok, left, _, _ := s.SpendGCRA(clk, key, lim.Params(), 1, false); !ok || left != want {
				t.Fatalf("%d-byte key, GCRA: allowed %v with %d remaining, want %d", n, ok, left, want)
			}
		}
		if got, want := sh.tab.count(), 2; got != want {
			t.Fatalf("%d-byte key: %d buckets, want %d", n, got, want)
		}
		if got, want := sh.bytes, cost(n, false)+cost(n, true); got != want {
			t.Fatalf("%d-byte key: %d bytes counted, want %d", n, got, want)
		}
		spendWindow(1)
		if got := sh.tab.count(); got != 2 {
			t.Fatalf("%d-byte key: %d buckets after the window again, want 2", n, got)
		}
	}
}
