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
// prefetches, from what the shard publishes, is its bucket's home slot,
// as the table grows and after Close empties it: a stale one would only
// cost speed, which no other test sees.
func TestPrefetchFindsTheHomeSlot(t *testing.T) {
	s := New(Options{Shards: 1})
	sh := &s.shards[0]
	clk := clock.NewFake(time.Unix(1e9, 0))
	check := func(when string, n int) {
		t.Helper()
		for i := range n {
			h, _ := s.hash(fmt.Sprint("k", i))
			got := sh.slotsAt.Load() + uintptr(h>>sh.slotsShift.Load())*unsafe.Sizeof(slot{})
			want := uintptr(unsafe.Pointer(&sh.tab.slots[sh.tab.home(h)]))
			if got != want {
				t.Fatalf("%s, key %d of %d: prefetched %#x, home slot at %#x", when, i, n, got, want)
			}
		}
	}
	check("new", 10)
	op := store.Op{Algorithm: store.GCRA, Kind: store.Spend, Limit: gcra.Limit{Burst: 5, Count: 1, Period: time.Hour}, Cost: 1}
	for i := range 1000 {
		op.Key = fmt.Sprint("k", i)
		if _, err := s.DoOne(context.Background(), clk, op); err != nil {
			t.Fatal(err)
		}
		if i&(i+1) == 0 || i == 999 {
			check(fmt.Sprintf("after %d buckets, %d slots", i+1, len(sh.tab.slots)), i+1)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check("after Close", 10)
}
