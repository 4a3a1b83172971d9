// Package memory is the embedded, in-process Store: sharded maps, each shard
// under its own mutex, with the rate limit algorithm evaluated while the
// shard is locked. It is the default backend and needs no other process.
//
// Buckets that are full again (a GCRA TAT in the past, a window that has
// ended) are treated as missing and removed as the store comes across them;
// the number of entries is bounded, and at the bound the entry closest to
// expiry among a small random sample makes room.
package memory

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/store"
)

var _ store.Store = (*Store)(nil)

// Options configure a Store. The zero value gives the defaults.
type Options struct {
	// Shards is the number of independently locked maps, rounded up to a
	// power of two. Default 256; range 1 to 65536.
	Shards int
	// MaxEntries bounds the number of buckets kept, spread evenly over the
	// shards. Default 4,194,304 (about 400 MiB at most); minimum one per
	// shard.
	MaxEntries int
}

const (
	defaultShards     = 256
	defaultMaxEntries = 1 << 22
	// sampleSize is how many entries are looked at to choose a victim when a
	// shard is full.
	sampleSize = 8
	// sweepEvery and sweepBudget amortise the removal of expired entries:
	// every sweepEvery inserts into a shard, up to sweepBudget entries are
	// examined.
	sweepEvery  = 8
	sweepBudget = 16
)

// Store is the in-memory backend. Create it with New; it is safe for
// concurrent use.
type Store struct {
	shards []shard
	mask   uint64
	seed   maphash.Seed
}

type shard struct {
	mu      sync.Mutex       // protects buckets and inserts
	buckets map[string]entry // bucket key → state
	inserts int              // inserts since the last sweep
	max     int              // bound on len(buckets)
	_       [40]byte         // keep neighbouring shards' locks off one cache line
}

// entry is a bucket's state. For GCRA buckets tat is the theoretical arrival
// time; for fixed windows start is the window's first Unix second and count
// its counter. exp is the Unix nanosecond at which the bucket is full again
// and may be dropped.
type entry struct {
	exp   int64
	tat   int64
	start int64
	count int64
}

// New returns an empty Store.
func New(o Options) *Store {
	n := o.Shards
	if n <= 0 {
		n = defaultShards
	}
	if n > 1<<16 {
		n = 1 << 16
	}
	p := 1
	for p < n {
		p <<= 1
	}
	max := o.MaxEntries
	if max <= 0 {
		max = defaultMaxEntries
	}
	per := max / p
	if per < 1 {
		per = 1
	}
	s := &Store{shards: make([]shard, p), mask: uint64(p - 1), seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].buckets = make(map[string]entry)
		s.shards[i].max = per
	}
	return s
}

// Len returns the number of buckets held, expired ones included until they
// are swept.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.buckets)
		sh.mu.Unlock()
	}
	return n
}

// Ping always succeeds: the store is in the process.
func (s *Store) Ping(context.Context) error { return nil }

// Close drops every bucket. The store must not be used afterwards.
func (s *Store) Close() error {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		clear(sh.buckets)
		sh.mu.Unlock()
	}
	return nil
}

func (s *Store) shardOf(key string) int {
	return int(maphash.String(s.seed, key) & s.mask)
}

// Do applies b at now. The shards the batch touches are locked in ascending
// order, so batches never deadlock and each is applied as if alone; under
// the locks, store.Evaluate decides the batch.
func (s *Store) Do(_ context.Context, now time.Time, b store.Batch, out []store.Result) error {
	if err := b.Check(out); err != nil {
		return err
	}
	ops := b.Ops
	if len(ops) == 0 {
		return nil
	}
	nowNs := now.UnixNano()
	if len(ops) == 1 {
		// One op is its own batch: nothing for all-or-nothing to block.
		op := &ops[0]
		sh := &s.shards[s.shardOf(op.Key)]
		sh.mu.Lock()
		st, present := sh.get(op.Key, nowNs)
		r, w, next := op.Evaluate(now, st)
		out[0] = r
		sh.do(w, op, next, present, nowNs)
		sh.mu.Unlock()
		return nil
	}
	return s.doMany(b, now, nowNs, out)
}

// doMany is Do for batches of more than one operation.
func (s *Store) doMany(b store.Batch, now time.Time, nowNs int64, out []store.Result) error {
	ops := b.Ops
	var idxBuf [32]int
	idx := idxBuf[:0]
	if len(ops) > len(idxBuf) {
		idx = make([]int, 0, len(ops))
	}
	for i := range ops {
		idx = append(idx, s.shardOf(ops[i].Key))
	}
	// Lock each distinct shard once, in ascending order.
	var lockBuf [32]int
	locks := append(lockBuf[:0], idx...)
	sortInts(locks)
	locks = dedupe(locks)
	for _, l := range locks {
		s.shards[l].mu.Lock()
	}
	defer func() {
		for _, l := range locks {
			s.shards[l].mu.Unlock()
		}
	}()

	var (
		stBuf [32]store.State
		wBuf  [32]store.Write
		pBuf  [32]bool
	)
	states, writes, present := stBuf[:], wBuf[:], pBuf[:]
	if len(ops) > len(stBuf) {
		states = make([]store.State, len(ops))
		writes = make([]store.Write, len(ops))
		present = make([]bool, len(ops))
	}
	for i := range ops {
		states[i], present[i] = s.shards[idx[i]].get(ops[i].Key, nowNs)
	}
	store.Evaluate(now, b, states, out, writes)
	for i := range ops {
		s.shards[idx[i]].do(writes[i], &ops[i], states[i], present[i], nowNs)
	}
	return nil
}

// do carries out w for op's bucket, next being the state to put. requires
// sh.mu held.
func (sh *shard) do(w store.Write, op *store.Op, next store.State, present bool, nowNs int64) {
	switch w {
	case store.Put:
		// The bucket may be dropped once it is full again: past its TAT,
		// or at the end of its window.
		exp := next.TAT
		if op.Algorithm == store.FixedWindow {
			exp = (next.Start + int64(op.Window.Length/time.Second)) * int64(time.Second)
		}
		sh.put(op.Key, entry{exp: exp, tat: next.TAT, start: next.Start, count: next.Count}, present, nowNs)
	case store.Remove:
		delete(sh.buckets, op.Key)
	}
}

// get returns the state of key, missing when the map holds no entry or an
// expired one (full again); present reports an entry in the map, live or
// expired (an expired entry is left for put to overwrite, or for a sweep).
// requires sh.mu held.
func (sh *shard) get(key string, nowNs int64) (st store.State, present bool) {
	e, present := sh.buckets[key]
	if !present || e.exp <= nowNs {
		return store.State{}, present
	}
	return store.State{Exists: true, TAT: e.tat, Start: e.start, Count: e.count}, true
}

// put stores e under key; present says whether the map holds key already.
// A new key makes room first when the shard is full. requires sh.mu held.
func (sh *shard) put(key string, e entry, present bool, nowNs int64) {
	if present {
		sh.buckets[key] = e
		return
	}
	sh.inserts++
	if sh.inserts >= sweepEvery {
		sh.inserts = 0
		sh.sweep(nowNs, sweepBudget)
	}
	if len(sh.buckets) >= sh.max {
		sh.evict(nowNs)
	}
	sh.buckets[key] = e
}

// sweep examines up to budget entries from a random point and removes the
// expired ones. requires sh.mu held.
func (sh *shard) sweep(nowNs int64, budget int) {
	for k, e := range sh.buckets {
		if e.exp <= nowNs {
			delete(sh.buckets, k)
		}
		budget--
		if budget == 0 {
			return
		}
	}
}

// evict removes one entry: an expired one if the sample holds one, else the
// one in the sample closest to expiry. requires sh.mu held.
func (sh *shard) evict(nowNs int64) {
	var victim string
	best := int64(0)
	n := 0
	for k, e := range sh.buckets {
		if e.exp <= nowNs {
			victim = k
			break
		}
		if n == 0 || e.exp < best {
			victim, best = k, e.exp
		}
		n++
		if n == sampleSize {
			break
		}
	}
	delete(sh.buckets, victim)
}

// sortInts sorts a in place: insertion sort for the usual short batch,
// slices.Sort for a long one.
func sortInts(a []int) {
	if len(a) > 32 {
		slices.Sort(a)
		return
	}
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// dedupe removes repeats from a sorted slice.
func dedupe(a []int) []int {
	if len(a) == 0 {
		return a
	}
	n := 1
	for i := 1; i < len(a); i++ {
		if a[i] != a[n-1] {
			a[n] = a[i]
			n++
		}
	}
	return a[:n]
}
