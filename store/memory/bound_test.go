package memory_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/storetest"
)

// spend applies one spend of cost 1 to op's bucket at now and returns the
// answer.
func spend(t testing.TB, s *memory.Store, now time.Time, op store.Op) store.Result {
	t.Helper()
	op.Kind, op.Cost = store.Spend, 1
	out := make([]store.Result, 1)
	if err := s.Do(context.Background(), now, store.Batch{Ops: []store.Op{op}}, out); err != nil {
		t.Fatal(err)
	}
	return out[0]
}

func TestExhaustedBucketsSurviveASprayOfKeys(t *testing.T) {
	t.Parallel()
	// Each exhausted bucket allows one hit an hour and has had it; the
	// spray uses a day-long limit, so its buckets expire after the
	// exhausted ones: an eviction of the entry closest to expiry would pick
	// an exhausted bucket and let its caller in again.
	tests := []struct {
		name      string
		exhausted store.Op
		spray     store.Op
	}{
		{
			name:      "a GCRA bucket that denies stays denied",
			exhausted: store.Op{Algorithm: store.GCRA, Limit: gcra.Limit{Burst: 1, Count: 1, Period: time.Hour}},
			spray:     store.Op{Algorithm: store.GCRA, Limit: gcra.Limit{Burst: 1, Count: 1, Period: 24 * time.Hour}},
		},
		{
			name:      "a fixed window that denies stays denied",
			exhausted: store.Op{Algorithm: store.FixedWindow, Window: store.Window{Limit: 1, Length: time.Hour}},
			spray:     store.Op{Algorithm: store.FixedWindow, Window: store.Window{Limit: 1, Length: 24 * time.Hour}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := memory.New(memory.Options{Shards: 4, MaxEntries: 64})
			now := storetest.Base()
			victims := []string{"victim-a", "victim-b", "victim-c"}
			for _, v := range victims {
				op := tt.exhausted
				op.Key = v
				if r := spend(t, s, now, op); !r.Allowed {
					t.Fatalf("first hit on %s: got denied, want allowed", v)
				}
				if r := spend(t, s, now, op); r.Allowed {
					t.Fatalf("second hit on %s: got allowed, want denied", v)
				}
			}
			for i := range 10_000 {
				op := tt.spray
				op.Key = fmt.Sprint("spray-", i)
				spend(t, s, now.Add(time.Duration(i)*time.Microsecond), op)
			}
			later := now.Add(time.Second)
			for _, v := range victims {
				op := tt.exhausted
				op.Key = v
				if r := spend(t, s, later, op); r.Allowed {
					t.Errorf("%s after the spray: got allowed, want still denied", v)
				}
			}
			if got := s.Len(); got > 64 {
				t.Errorf("got %d entries, want at most 64", got)
			}
			if got := s.Refused(); got == 0 {
				t.Errorf("got %d refused buckets, want the spray's counted", got)
			}
		})
	}
}

func TestExpiredBucketsMakeRoom(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Options{Shards: 1, MaxEntries: 10})
	now := storetest.Base()
	short := store.Op{Algorithm: store.GCRA, Limit: gcra.Limit{Burst: 1, Count: 1, Period: time.Second}}
	for i := range 10 {
		short.Key = fmt.Sprint("old-", i)
		spend(t, s, now, short)
	}
	// A minute later every old bucket is full again: new ones take their
	// place and are kept, their second hit denied.
	later := now.Add(time.Minute)
	long := store.Op{Algorithm: store.GCRA, Limit: gcra.Limit{Burst: 1, Count: 1, Period: time.Hour}}
	for i := range 10 {
		long.Key = fmt.Sprint("new-", i)
		spend(t, s, later, long)
		if r := spend(t, s, later, long); r.Allowed {
			t.Fatalf("second hit on %s: got allowed, want denied (the bucket kept)", long.Key)
		}
	}
	if got := s.Refused(); got != 0 {
		t.Errorf("got %d refused, want 0: expired buckets should make room", got)
	}
}

func TestBytesAreBounded(t *testing.T) {
	t.Parallel()
	const maxBytes = 64 << 10
	tests := []struct {
		name   string
		keyLen int
	}{
		{name: "short keys stay within the byte budget", keyLen: 16},
		{name: "kilobyte keys stay within the byte budget", keyLen: 1024},
		{name: "keys longer than a shard's budget are never kept", keyLen: 32 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := memory.New(memory.Options{Shards: 4, MaxBytes: maxBytes})
			now := storetest.Base()
			pad := strings.Repeat("x", tt.keyLen)
			op := store.Op{Algorithm: store.GCRA, Limit: gcra.Limit{Burst: 5, Count: 5, Period: time.Hour}}
			for i := range 2000 {
				op.Key = fmt.Sprint(i, pad)[:tt.keyLen]
				if r := spend(t, s, now, op); !r.Allowed {
					t.Fatalf("first hit on key %d: got denied, want allowed (refused buckets answer as fresh)", i)
				}
			}
			if got := s.Bytes(); got > maxBytes {
				t.Errorf("got %d bytes, want at most %d", got, maxBytes)
			}
			var want int64
			if tt.keyLen < 8<<10 {
				want = 1
			}
			if got := int64(s.Len()); (got > 0) != (want > 0) {
				t.Errorf("got %d entries, want some kept: %v", got, want > 0)
			}
			if got := s.Bytes(); got != int64(s.Len())*(int64(tt.keyLen)+memory.EntryOverhead) {
				t.Errorf("got %d bytes for %d entries, want len(key)+%d each", got, s.Len(), memory.EntryOverhead)
			}
		})
	}
}

func TestByteAccountingFollowsRemoves(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Options{Shards: 2})
	now := storetest.Base()
	l := gcra.Limit{Burst: 5, Count: 5, Period: time.Hour}
	ctx := context.Background()
	out := make([]store.Result, 2)
	both := []store.Op{
		{Key: "same", Algorithm: store.GCRA, Kind: store.Spend, Limit: l, Cost: 1},
		{Key: "other", Algorithm: store.GCRA, Kind: store.Spend, Limit: l, Cost: 1},
	}
	if err := s.Do(ctx, now, store.Batch{Ops: both}, out); err != nil {
		t.Fatal(err)
	}
	if got, want := s.Bytes(), int64(len("same")+len("other")+2*memory.EntryOverhead); got != want {
		t.Errorf("after the batch: got %d bytes, want %d", got, want)
	}
	reset := []store.Op{
		{Key: "same", Algorithm: store.GCRA, Kind: store.Reset, Limit: l},
		{Key: "other", Algorithm: store.GCRA, Kind: store.Reset, Limit: l},
	}
	if err := s.Do(ctx, now, store.Batch{Ops: reset}, out); err != nil {
		t.Fatal(err)
	}
	if got := s.Bytes(); got != 0 || s.Len() != 0 {
		t.Errorf("after resets: got %d bytes in %d entries, want 0 in 0", got, s.Len())
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	s := memory.New(memory.Options{Shards: 1, MaxEntries: 2, Registerer: reg})
	now := storetest.Base()
	op := store.Op{Algorithm: store.GCRA, Limit: gcra.Limit{Burst: 1, Count: 1, Period: time.Second}}
	for _, k := range []string{"a", "b"} {
		op.Key = k
		spend(t, s, now, op)
	}
	// Two seconds on, a and b have expired: c and d take their room; e
	// finds none.
	for _, k := range []string{"c", "d", "e"} {
		op.Key = k
		spend(t, s, now.Add(2*time.Second), op)
	}
	want := map[string]float64{
		"sluice_memory_entries":         2,
		"sluice_memory_bytes":           float64(2 * (1 + memory.EntryOverhead)),
		"sluice_memory_mapped_bytes":    0, // tables of 8 slots, in Go's heap
		"sluice_memory_evictions_total": 2,
		"sluice_memory_refused_total":   1,
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				got[mf.GetName()] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				got[mf.GetName()] = m.GetCounter().GetValue()
			}
		}
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("%s: got %v, want %v", name, got[name], w)
		}
	}
}

// BenchmarkHeapPerEntry measures the heap a bucket takes besides its key
// (16 bytes here), to check EntryOverhead: it reports heap-B/entry.
func BenchmarkHeapPerEntry(b *testing.B) {
	for b.Loop() {
		perEntry := heapPerEntry(b, 200_000)
		b.ReportMetric(perEntry, "heap-B/entry")
	}
}

func TestHeapStaysWithinMaxBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap")
	}
	const maxBytes = 32 << 20
	for _, keyLen := range []int{16, 40, 60, 200, 1000} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := memory.New(memory.Options{MaxEntries: 1 << 24, MaxBytes: maxBytes})
		now := storetest.Base()
		op := store.Op{Algorithm: store.GCRA, Limit: gcra.Limit{Burst: 5, Count: 5, Period: time.Hour}}
		pad := strings.Repeat("k", keyLen)
		// Twice as many keys as fit.
		n := 2 * maxBytes / (keyLen + memory.EntryOverhead)
		for i := range n {
			op.Key = strings.Clone((strconv.Itoa(i) + pad)[:keyLen])
			spend(t, s, now, op)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		// The heap, and the tables mapped outside it (see Store.Mapped).
		heap := int64(after.HeapAlloc) - int64(before.HeapAlloc) + s.Mapped()
		t.Logf("%d-byte keys: %d buckets, %d bytes counted, %d bytes of heap and mapped tables (%d mapped)", keyLen, s.Len(), s.Bytes(), heap, s.Mapped())
		if heap > maxBytes*11/10 {
			t.Errorf("%d-byte keys: got %d bytes of heap and mapped tables, want at most MaxBytes %d and 10%%", keyLen, heap, maxBytes)
		}
		if s.Refused() == 0 {
			t.Errorf("%d-byte keys: got no refusals, want the store filled", keyLen)
		}
		runtime.KeepAlive(s)
	}
}

func TestHeapPerBucketIsWithinEntryOverhead(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap")
	}
	for _, n := range []int{30_000, 100_000, 150_000, 200_000} {
		got := heapPerEntry(t, n)
		t.Logf("%d buckets: %.0f bytes of heap and mapped tables per bucket besides its 16-byte key", n, got)
		if got > memory.EntryOverhead {
			t.Errorf("%d buckets: got %.0f bytes of heap and mapped tables per bucket besides its key, want at most EntryOverhead %d", n, got, memory.EntryOverhead)
		}
	}
}

// heapPerEntry fills a store with n buckets under 16-byte keys and returns
// the growth of the heap and of the tables mapped outside it
// (Store.Mapped) per bucket, less the key's 16 bytes.
func heapPerEntry(t testing.TB, n int) float64 {
	t.Helper()
	const keyLen = 16
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := memory.New(memory.Options{MaxEntries: 1 << 24, MaxBytes: 1 << 40})
	now := storetest.Base()
	op := store.Op{Algorithm: store.GCRA, Limit: gcra.Limit{Burst: 5, Count: 5, Period: time.Hour}}
	for i := range n {
		op.Key = fmt.Sprintf("%016d", i)
		spend(t, s, now, op)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if s.Len() != n {
		t.Fatalf("got %d buckets, want %d", s.Len(), n)
	}
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)+s.Mapped())/float64(n) - keyLen
}
