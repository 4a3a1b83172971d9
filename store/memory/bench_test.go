package memory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/internal/keybuf"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/memory"
)

const benchKeys = 1_000_000

var benchKeyList = func() []string {
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "1:10.0." + strconv.Itoa(i/65536) + "." + strconv.Itoa(i%65536)
	}
	return keys
}()

var benchLimit = gcra.Limit{Burst: 20, Count: 20, Period: time.Second}

// populated returns a store holding a bucket for every key of
// benchKeyList, each spent once under benchLimit at the time it returns:
// the benchmarks then measure decisions, not inserts.
func populated() (*memory.Store, time.Time) {
	s := memory.New(memory.Options{})
	now := time.Unix(1_800_000_000, 0)
	ops := []store.Op{{Algorithm: store.GCRA, Kind: store.Spend, Limit: benchLimit, Cost: 1}}
	out := make([]store.Result, 1)
	for _, k := range benchKeyList {
		ops[0].Key = k
		_ = s.Do(context.Background(), now, store.Batch{Ops: ops}, out)
	}
	return s, now
}

// BenchmarkDecision is one check-and-spend decision on the memory store,
// cycling over 1,000,000 distinct buckets. Compare with gcra's
// BenchmarkSpend: the ratio is the cost of the store around the algorithm.
func BenchmarkDecision(b *testing.B) {
	s, now := populated()
	ctx := context.Background()
	ops := []store.Op{{Algorithm: store.GCRA, Kind: store.Spend, Limit: benchLimit, Cost: 1}}
	out := make([]store.Result, 1)
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		ops[0].Key = benchKeyList[i]
		if err := s.Do(ctx, now, store.Batch{Ops: ops}, out); err != nil {
			b.Fatal(err)
		}
		i++
		if i == benchKeys {
			i = 0
			now = now.Add(time.Second)
		}
	}
}

// BenchmarkDecisionHotKey is the same decision on one bucket that stays in
// cache: the store's own overhead without memory misses.
func BenchmarkDecisionHotKey(b *testing.B) {
	s := memory.New(memory.Options{})
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	ops := []store.Op{{Key: "1:10.0.0.1", Algorithm: store.GCRA, Kind: store.Spend, Limit: gcra.Limit{Burst: 1000, Count: 1000, Period: time.Second}, Cost: 1}}
	out := make([]store.Result, 1)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		if err := s.Do(ctx, now, store.Batch{Ops: ops}, out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecisionParallel runs decisions from every core over 1,000,000
// distinct buckets.
func BenchmarkDecisionParallel(b *testing.B) {
	s := memory.New(memory.Options{})
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ops := []store.Op{{Algorithm: store.GCRA, Kind: store.Spend, Limit: benchLimit, Cost: 1}}
		out := make([]store.Result, 1)
		i := int(next.Add(7919)) % benchKeys
		for pb.Next() {
			ops[0].Key = benchKeyList[i]
			if err := s.Do(ctx, now, store.Batch{Ops: ops}, out); err != nil {
				b.Fatal(err)
			}
			i++
			if i == benchKeys {
				i = 0
			}
		}
	})
}

// BenchmarkBatch5 is an all-or-nothing batch of five check-and-spends.
func BenchmarkBatch5(b *testing.B) {
	s := memory.New(memory.Options{})
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	ops := make([]store.Op, 5)
	for i := range ops {
		ops[i] = store.Op{Key: benchKeyList[i], Algorithm: store.GCRA, Kind: store.Spend, Limit: gcra.Limit{Burst: 1000, Count: 1000, Period: time.Second}, Cost: 1}
	}
	out := make([]store.Result, 5)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(5 * time.Millisecond)
		if err := s.Do(ctx, now, store.Batch{Ops: ops, AllOrNothing: true}, out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBatch5ManyBuckets is an all-or-nothing batch of 5 decisions (an
// Envoy request of 5 descriptors, or a key-value batch) over 1,000,000
// distinct buckets, most of them not in cache.
func BenchmarkBatch5ManyBuckets(b *testing.B) {
	s, now := populated()
	ctx := context.Background()
	ops := make([]store.Op, 5)
	for i := range ops {
		ops[i] = store.Op{Algorithm: store.GCRA, Kind: store.Spend, Limit: benchLimit, Cost: 1}
	}
	out := make([]store.Result, 5)
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		for j := range ops {
			ops[j].Key = benchKeyList[i]
			i += 7919 // a prime: the 5 buckets far apart, every bucket in turn
			if i >= benchKeys {
				i -= benchKeys
				now = now.Add(time.Second / 5)
			}
		}
		if err := s.Do(ctx, now, store.Batch{Ops: ops, AllOrNothing: true}, out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSprayFullStore is a decision on a new key while every shard is
// full of live buckets: the scan for expired ones finds none, and the new
// bucket is answered but not kept.
func BenchmarkSprayFullStore(b *testing.B) {
	s := memory.New(memory.Options{MaxEntries: 256 * 64})
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	ops := []store.Op{{Algorithm: store.GCRA, Kind: store.Spend, Limit: gcra.Limit{Burst: 1, Count: 1, Period: time.Hour}, Cost: 1}}
	out := make([]store.Result, 1)
	for i := range 256 * 256 { // fill every shard with live buckets
		ops[0].Key = benchKeyList[i]
		_ = s.Do(ctx, now, store.Batch{Ops: ops}, out)
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 256 * 256
	for b.Loop() {
		ops[0].Key = benchKeyList[i]
		if err := s.Do(ctx, now, store.Batch{Ops: ops}, out); err != nil {
			b.Fatal(err)
		}
		i++
		if i == benchKeys {
			i = 256 * 256
		}
	}
}

// BenchmarkSpendGCRAKeyInBuffer is SpendGCRA over a million buckets, asked
// for in a shuffled order, each call's key a string of its own laid out in
// calling order (bench/peers's fresh keys): first the key as the caller
// has it, then the same key copied into a reused buffer just before the
// call, then written into the buffer by keybuf.Append in one 16-byte
// store, as limits.Set.AppendKey writes it for limiter.SpendFor. The
// difference is what hashing a key written a moment before costs, and
// what one store wins back (BENCHMARKS.md).
func BenchmarkSpendGCRAKeyInBuffer(b *testing.B) {
	keys := slices.Clone(benchKeyList)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	all := strings.Join(keys, "")
	for i, off := 0, 0; i < len(keys); i++ {
		n := len(keys[i])
		keys[i], off = all[off:off+n], off+n
	}
	s := memory.New(memory.Options{})
	clk := clock.New()
	p := gcra.Limit{Burst: 100_000, Count: 1, Period: time.Hour}.Params()
	for _, k := range keys {
		s.SpendGCRA(clk, k, p, 1, false)
	}
	b.Run("caller's key", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if ok, _, _, _ := s.SpendGCRA(clk, keys[i%benchKeys], p, 1, false); !ok {
				b.Fatal("denied")
			}
		}
	})
	b.Run("key copied into a buffer", func(b *testing.B) {
		buf := make([]byte, 0, 64)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			buf = append(buf[:0], keys[i%benchKeys]...)
			if ok, _, _, _ := s.SpendGCRA(clk, unsafe.String(unsafe.SliceData(buf), len(buf)), p, 1, false); !ok {
				b.Fatal("denied")
			}
		}
	})
	b.Run("key written in one store", func(b *testing.B) {
		// The keys are "1:" and up to 13 bytes more: one store each.
		buf := make([]byte, 0, 64)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			k := keys[i%benchKeys]
			buf = keybuf.Append(buf[:0], k[:2], k[2:])
			if ok, _, _, _ := s.SpendGCRA(clk, unsafe.String(unsafe.SliceData(buf), len(buf)), p, 1, false); !ok {
				b.Fatal("denied")
			}
		}
	})
}

// BenchmarkNewBucketsBesideWide makes a new GCRA bucket under a 36-byte
// key per decision, in a store already holding 1,048,576 wide buckets
// (57-byte keys): what a new bucket under a key whose place depends on
// its kind (a GCRA bucket in a slot, a window wide) costs while the other
// table is large.
func BenchmarkNewBucketsBesideWide(b *testing.B) {
	s := memory.New(memory.Options{MaxBytes: 1 << 31, MaxEntries: 1 << 23})
	defer s.Close()
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	p := benchLimit.Params()
	for i := range 1 << 20 {
		s.SpendGCRA(clk, fmt.Sprintf("%057d", i), p, 1, false)
	}
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = fmt.Sprintf("%036d", i*7919)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		s.SpendGCRA(clk, keys[i], p, 1, false)
	}
}
