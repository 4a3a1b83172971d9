package memory

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/store"
)

// pastMaxKeyLen is a key one byte longer than maxKeyLen (512 MiB), made
// once for the tests that need it.
var pastMaxKeyLen = sync.OnceValue(func() string { return strings.Repeat("k", maxKeyLen+1) })

// bigHash is the hash the table test gives the long keys: fnv would take
// seconds over 512 MiB under the race detector, and the table takes any.
const bigHash = 0x9e3779b97f4a7c15

// TestTableRefusesAKeyPastMaxKeyLen: a key longer than maxKeyLen, of
// either kind of bucket, is not inserted, and the table is as it was. It
// fails if the length check goes: the key's length would not fit in
// slot.klen's bits, and it would be kept in table.long.
func TestTableRefusesAKeyPastMaxKeyLen(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 512 MiB")
	}
	over := pastMaxKeyLen()
	tab := newTable(nil)
	held := []string{"a", strings.Repeat("b", inlineKey+1), strings.Repeat("c", 300)}
	for i, k := range held {
		tab.at(tab.insert(fnv(k, false, 0), k, false)).exp = int64(i + 1)
	}
	for _, window := range []bool{false, true} {
		if i := tab.insert(bigHash, over, window); i != -1 {
			t.Fatalf("window %v: a key of %d bytes inserted at %d, want -1", window, len(over), i)
		}
		if tab.count() != len(held) {
			t.Fatalf("window %v: %d buckets after the refusal, want %d", window, tab.count(), len(held))
		}
		if _, ok := tab.find(bigHash, over, window); ok {
			t.Fatalf("window %v: the refused key is found", window)
		}
	}
	for i, k := range held {
		j, ok := tab.find(fnv(k, false, 0), k, false)
		if !ok {
			t.Fatalf("%d-byte key: not found", len(k))
		}
		if got := tab.at(j).exp; got != int64(i+1) {
			t.Fatalf("%d-byte key: state %d, want %d", len(k), got, i+1)
		}
	}
}

// TestStoreAnswersAKeyPastMaxKeyLen: through the store, a key longer than
// maxKeyLen is answered as a fresh bucket, by SpendGCRA and by DoOne for
// both algorithms, its state not kept and the refusal counted, while a
// held bucket keeps its own. (Under the default byte bound the shard
// refuses such a key before the table sees it; the test above checks the
// table's own bound.)
func TestStoreAnswersAKeyPastMaxKeyLen(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 512 MiB")
	}
	over := pastMaxKeyLen()
	s := New(Options{Shards: 1})
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	lim := gcra.Limit{Burst: 5, Count: 1, Period: time.Minute}
	if ok, left, _, _ := s.SpendGCRA(clk, "held", lim.Params(), 2, false); !ok || left != 3 {
		t.Fatalf("held: allowed %v, %d remaining; want allowed with 3", ok, left)
	}
	for i := range 2 {
		if ok, left, _, _ := s.SpendGCRA(clk, over, lim.Params(), 1, false); !ok || left != 4 {
			t.Fatalf("SpendGCRA %d: allowed %v, %d remaining; want allowed with 4", i, ok, left)
		}
		r, err := s.DoOne(context.Background(), clk, store.Op{Key: over, Kind: store.Spend, Algorithm: store.GCRA, Limit: lim, Cost: 1})
		if err != nil || !r.Allowed || r.Remaining != 4 {
			t.Fatalf("DoOne GCRA %d: %+v, %v; want allowed with 4", i, r, err)
		}
		r, err = s.DoOne(context.Background(), clk, store.Op{Key: over, Kind: store.Spend, Algorithm: store.FixedWindow, Window: store.Window{Limit: 3, Length: time.Minute}, Cost: 1})
		if err != nil || !r.Allowed || r.Remaining != 2 {
			t.Fatalf("DoOne FixedWindow %d: %+v, %v; want allowed with 2", i, r, err)
		}
	}
	if _, left, _, _ := s.SpendGCRA(clk, "held", lim.Params(), 0, true); left != 3 {
		t.Fatalf("held: %d remaining, want 3", left)
	}
	if s.Len() != 1 || s.Refused() != 6 {
		t.Fatalf("%d buckets held, %d refused; want 1 and 6", s.Len(), s.Refused())
	}
}
