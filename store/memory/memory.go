// Package memory is the embedded, in-process Store: sharded maps, each shard
// under its own mutex, with the rate limit algorithm evaluated while the
// shard is locked. It is the default backend and needs no other process.
//
// Buckets that are full again (a GCRA TAT in the past, a window that has
// ended) are treated as missing and removed as the store comes across them.
//
// The store is bounded twice, per shard: in entries (Options.MaxEntries)
// and in bytes (Options.MaxBytes, each bucket counted as the length of its
// key plus EntryOverhead). A new bucket that does not fit makes room only
// by removing buckets that hold no state worth keeping: expired ones,
// which are also the full ones (nothing spent, the same as missing), found
// in a scan of at most evictScan entries. A live bucket is never evicted:
// forgetting one that is denying a caller would let that caller unblock
// itself by sending many distinct keys. When no room can be made, the new
// bucket's operation is still answered, as for a fresh bucket, but its
// state is not kept (it is refused, and counted): every bucket already
// held keeps its state, so no caller can reset its own exhausted bucket by
// spraying keys; the cost is that new keys go unlimited until buckets
// expire and make room.
package memory

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/store"
)

var _ store.Store = (*Store)(nil)

// Options configure a Store. The zero value gives the defaults.
type Options struct {
	// Shards is the number of independently locked maps, rounded up to a
	// power of two. Default 256; range 1 to 65536.
	Shards int
	// MaxEntries bounds the number of buckets kept, spread evenly over the
	// shards. Default 4,194,304; minimum one per shard. At about 100 bytes
	// of heap per bucket plus its key (see EntryOverhead), MaxBytes is
	// usually the bound reached first.
	MaxEntries int
	// MaxBytes bounds the bytes the buckets take, spread evenly over the
	// shards: each bucket counts len(key) + EntryOverhead. Default
	// 268,435,456 (256 MiB); minimum EntryOverhead+64 per shard. The heap
	// the store holds stays within about MaxBytes: filled to a 32 MiB
	// budget with 16- to 1000-byte keys it held 24 to 34 MiB of heap
	// (TestHeapStaysWithinMaxBytes; long keys round up to Go's size
	// classes).
	MaxBytes int64
	// Registerer, when not nil, receives the store's metrics:
	// sluice_memory_entries, sluice_memory_bytes,
	// sluice_memory_evictions_total{reason} and
	// sluice_memory_refused_total. Nil registers nothing. New panics when
	// Registerer already holds them: registering two stores on one
	// registry is a programmer's bug.
	Registerer prometheus.Registerer
}

// EntryOverhead is the bytes counted for each bucket besides its key: the
// index's map slot (a 16-byte string header and a 4-byte slot number,
// padded to 24), the map's control bytes and spare capacity (its tables
// grow by doubling, so they are between half and seven eighths full), the
// 32-byte entry in the slab (which grows by doubling too, and keeps freed
// slots for reuse), and the key's allocation rounding. Measured on amd64
// with Go 1.26 at 70 bytes per bucket besides the key's own bytes
// (BenchmarkHeapPerEntry; 74 with the entries in the map itself, before
// the slab); 112 keeps the accounting on the safe side.
const EntryOverhead = 112

const (
	defaultShards     = 256
	defaultMaxEntries = 1 << 22
	defaultMaxBytes   = 256 << 20
	// evictScan is how many entries are looked at, at most, for expired
	// ones when a new bucket does not fit.
	evictScan = 32
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

	docs overrideDocs // runtime overrides, see overrides.go
}

type shard struct {
	mu sync.Mutex // protects the fields below but max and maxBytes
	// index finds a bucket's state in slab; free lists the slab's unused
	// slots. One map lookup finds a bucket, whose state is then changed
	// in place: a map of small values stays compact, and a decision costs
	// one hash and one probe, not a read and a write.
	index    map[string]uint32 // bucket key → its slot in slab
	slab     []entry
	free     []uint32
	bytes    int64    // sum of cost(key) over buckets
	inserts  int      // inserts since the last sweep
	expired  int64    // expired buckets removed, in total
	refused  int64    // new buckets not kept for want of room, in total
	max      int      // bound on len(buckets)
	maxBytes int64    // bound on bytes
	_        [64]byte // keep neighbouring shards' locks off one cache line
}

// cost is the bytes a bucket under key counts towards MaxBytes.
func cost(key string) int64 { return int64(len(key)) + EntryOverhead }

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
	maxBytes := o.MaxBytes
	if maxBytes <= 0 {
		maxBytes = defaultMaxBytes
	}
	perBytes := maxBytes / int64(p)
	if perBytes < EntryOverhead+64 {
		perBytes = EntryOverhead + 64
	}
	s := &Store{shards: make([]shard, p), mask: uint64(p - 1), seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].index = make(map[string]uint32)
		s.shards[i].max = per
		s.shards[i].maxBytes = perBytes
	}
	if o.Registerer != nil {
		s.register(o.Registerer)
	}
	return s
}

// register adds the store's metrics to reg. They are read from the shards
// at scrape time, so the hot path updates nothing but shard fields.
func (s *Store) register(reg prometheus.Registerer) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_memory_entries",
			Help: "Buckets the memory store holds, expired ones included until they are removed.",
		}, func() float64 { return float64(s.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_memory_bytes",
			Help: "Bytes the memory store's buckets count towards --memory-max-bytes: each bucket's key length plus a fixed overhead.",
		}, func() float64 { return float64(s.Bytes()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "sluice_memory_evictions_total",
			Help:        "Buckets the memory store removed without being asked, by reason: expired (full again, so holding nothing worth keeping). Live buckets are never evicted.",
			ConstLabels: prometheus.Labels{"reason": "expired"},
		}, func() float64 { return float64(s.sum(func(sh *shard) int64 { return sh.expired })) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_memory_refused_total",
			Help: "New buckets whose operation was answered as for a fresh bucket but whose state the memory store did not keep, because it was at --memory-max-entries or --memory-max-bytes with no expired bucket to remove.",
		}, func() float64 { return float64(s.sum(func(sh *shard) int64 { return sh.refused })) }),
	)
}

// sum adds f over the shards, each read under its lock.
func (s *Store) sum(f func(*shard) int64) int64 {
	var n int64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += f(sh)
		sh.mu.Unlock()
	}
	return n
}

// Bytes returns the bytes the buckets held count towards MaxBytes.
func (s *Store) Bytes() int64 { return s.sum(func(sh *shard) int64 { return sh.bytes }) }

// Refused returns how many new buckets were answered but not kept because
// their shard was full of live buckets.
func (s *Store) Refused() int64 { return s.sum(func(sh *shard) int64 { return sh.refused }) }

// Len returns the number of buckets held, expired ones included until they
// are swept.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.index)
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
		clear(sh.index)
		sh.slab, sh.free = nil, nil
		sh.bytes = 0
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
		st, slot := sh.get(op.Key, nowNs)
		r, w, next := op.Evaluate(now, st)
		out[0] = r
		sh.do(w, op, next, slot, nowNs)
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
	)
	states, writes := stBuf[:], wBuf[:]
	if len(ops) > len(stBuf) {
		states = make([]store.State, len(ops))
		writes = make([]store.Write, len(ops))
	}
	for i := range ops {
		states[i], _ = s.shards[idx[i]].get(ops[i].Key, nowNs)
	}
	store.Evaluate(now, b, states, out, writes)
	for i := range ops {
		// An earlier write of the batch may have inserted a bucket and
		// swept expired ones, freeing (and reusing) the slot found above:
		// find the bucket again.
		sh := &s.shards[idx[i]]
		slot := -1
		if j, ok := sh.index[ops[i].Key]; ok {
			slot = int(j)
		}
		sh.do(writes[i], &ops[i], states[i], slot, nowNs)
	}
	return nil
}

// do carries out w for op's bucket, next being the state to put; slot is
// the bucket's slot in the slab, or -1 when the shard holds none. requires
// sh.mu held.
func (sh *shard) do(w store.Write, op *store.Op, next store.State, slot int, nowNs int64) {
	switch w {
	case store.Put:
		// The bucket may be dropped once it is full again: past its TAT,
		// or at the end of its window.
		exp := next.TAT
		if op.Algorithm == store.FixedWindow {
			exp = (next.Start + int64(op.Window.Length/time.Second)) * int64(time.Second)
		}
		e := entry{exp: exp, tat: next.TAT, start: next.Start, count: next.Count}
		if slot >= 0 {
			sh.slab[slot] = e
			return
		}
		sh.put(op.Key, e, nowNs)
	case store.Remove:
		if slot >= 0 {
			sh.drop(op.Key, slot)
		}
	}
}

// get returns the state of key, missing when the shard holds no entry or
// an expired one (full again), and the entry's slot in the slab, live or
// expired, or -1 when there is none (an expired entry is left for do to
// overwrite, or for a sweep). requires sh.mu held.
func (sh *shard) get(key string, nowNs int64) (st store.State, slot int) {
	i, ok := sh.index[key]
	if !ok {
		return store.State{}, -1
	}
	e := &sh.slab[i]
	if e.exp <= nowNs {
		return store.State{}, int(i)
	}
	return store.State{Exists: true, TAT: e.tat, Start: e.start, Count: e.count}, int(i)
}

// put stores e under key, which the shard does not hold. It makes room
// first when the shard is full, by removing expired buckets only; when
// that is not enough the new key is not stored, and counted as refused.
// requires sh.mu held.
func (sh *shard) put(key string, e entry, nowNs int64) {
	sh.inserts++
	if sh.inserts >= sweepEvery {
		sh.inserts = 0
		sh.sweep(nowNs, sweepBudget)
	}
	c := cost(key)
	if !sh.fits(c) && !sh.makeRoom(nowNs, c) {
		sh.refused++
		return
	}
	var slot uint32
	if n := len(sh.free); n > 0 {
		slot, sh.free = sh.free[n-1], sh.free[:n-1]
		sh.slab[slot] = e
	} else {
		slot = uint32(len(sh.slab))
		sh.slab = append(sh.slab, e)
	}
	sh.index[key] = slot
	sh.bytes += c
}

// drop deletes key, held in slot, and frees the slot. requires sh.mu held.
func (sh *shard) drop(key string, slot int) {
	delete(sh.index, key)
	sh.slab[slot] = entry{}
	sh.free = append(sh.free, uint32(slot))
	sh.bytes -= cost(key)
}

// fits reports whether a new bucket costing c bytes fits. requires sh.mu
// held.
func (sh *shard) fits(c int64) bool {
	return len(sh.index) < sh.max && sh.bytes+c <= sh.maxBytes
}

// sweep examines up to budget entries from a random point and removes the
// expired ones. requires sh.mu held.
func (sh *shard) sweep(nowNs int64, budget int) {
	for k, i := range sh.index {
		if sh.slab[i].exp <= nowNs {
			sh.remove(k, i)
		}
		budget--
		if budget == 0 {
			return
		}
	}
}

// makeRoom removes expired buckets among up to evictScan entries, from a
// random point, until a new bucket costing c bytes fits, and reports
// whether it does. Live buckets are never removed. requires sh.mu held.
func (sh *shard) makeRoom(nowNs int64, c int64) bool {
	n := 0
	for k, i := range sh.index {
		if sh.slab[i].exp <= nowNs {
			sh.remove(k, i)
			if sh.fits(c) {
				return true
			}
		}
		n++
		if n == evictScan {
			break
		}
	}
	return sh.fits(c)
}

// remove deletes the expired bucket under key, in slot, and counts it.
// requires sh.mu held.
func (sh *shard) remove(key string, slot uint32) {
	sh.drop(key, int(slot))
	sh.expired++
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
