// Package memory is the embedded, in-process Store: sharded hash tables,
// each shard under its own mutex, with the rate limit algorithm evaluated
// while the shard is locked. It is the default backend and needs no other
// process. A bucket's key (up to 40 bytes for a GCRA bucket, 24 for a
// fixed window) and state share one 64-byte slot of its shard's table, so
// that a decision reads and changes its bucket in one memory access
// (table.go). A longer key, of up to 88 bytes, makes its bucket a wide
// one: a slot and a second line beside it, in a table of 128-byte entries
// of its own, the two lines loaded at once (wide.go). A longer one still
// is kept in its shard's buffer of long keys, an access more, after the
// slot's (longkeys.go).
//
// Buckets that are full again (a GCRA TAT in the past, a window that has
// ended) are treated as missing and removed as the store comes across them.
//
// The store is bounded twice, per shard: in entries (Options.MaxEntries)
// and in bytes (Options.MaxBytes, each bucket counted as the length of its
// key plus EntryOverhead, and LineOverhead more for a wide bucket). A new
// bucket that does not fit makes room only by removing buckets that hold
// no state worth keeping: expired ones,
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
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/internal/keybuf"
	"github.com/sluice-rl/sluice/store"
)

var _ store.Spender = (*Store)(nil)

// Options configure a Store. The zero value gives the defaults.
type Options struct {
	// Shards is the number of independently locked maps, rounded up to a
	// power of two. Default 256; range 1 to 65536.
	Shards int
	// MaxEntries bounds the number of buckets kept, spread evenly over the
	// shards. Default 4,194,304; minimum one per shard. At about 110 to 140
	// bytes of heap per bucket (see EntryOverhead), MaxBytes is usually
	// the bound reached first.
	MaxEntries int
	// MaxBytes bounds the bytes the buckets take, spread evenly over the
	// shards: each bucket counts len(key) + EntryOverhead, and
	// LineOverhead more for a wide bucket (a key of 41 to 88 bytes, or a
	// fixed window's of 25 to 88).
	// Default
	// 268,435,456 (256 MiB); minimum EntryOverhead+64 per shard. The heap
	// the store holds stays within about MaxBytes: filled to a 32 MiB
	// budget with 16- to 1000-byte keys it held 16 to 34 MiB of heap
	// (TestHeapStaysWithinMaxBytes; the buffer of a shard's keys longer
	// than their slots and wide buckets keep has up to an eighth more
	// room than they need).
	MaxBytes int64
	// Registerer, when not nil, receives the store's metrics:
	// sluice_memory_entries, sluice_memory_bytes,
	// sluice_memory_evictions_total{reason} and
	// sluice_memory_refused_total. Nil registers nothing. New panics when
	// Registerer already holds them: registering two stores on one
	// registry is a programmer's bug.
	Registerer prometheus.Registerer
}

// EntryOverhead is the bytes counted for each bucket besides its key: its
// 64-byte slot in the shard's table, which grows by doubling when three
// quarters full and so is between three eighths and three quarters full
// (85 to 171 bytes a bucket, the key included up to 40 bytes for a GCRA
// bucket, 24 for a fixed window); a longer key adds a second line (see
// LineOverhead) or its copy, rounded up to 8 bytes, and an 8-byte header
// (longkeys.go). Measured on amd64 with Go 1.26 at 96 to 125 bytes per
// bucket besides a 16-byte key
// (TestHeapPerBucketIsWithinEntryOverhead); 160 keeps the heap within
// MaxBytes but for the moment after a table doubles.
const EntryOverhead = 160

// LineOverhead is the bytes counted, besides EntryOverhead, for a wide
// bucket, whose key is 41 to 88 bytes long (25 to 88 for a fixed window):
// the second 64-byte line of its 128-byte entry, which keeps the key's
// bytes past its first 40 and a fixed window's state, in a table that,
// as the slots', is between three eighths and three quarters full but
// for the moments after it doubles (85 to 171 bytes a line).
const LineOverhead = 128

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
	secret [4]uint64 // hashShort's
	mem    *arena    // the shards' larger tables, or nil

	docs overrideDocs // runtime overrides, see overrides.go
}

// shard is one of a Store's independently locked tables, its fields
// padded to a whole number of cache lines: a decision on a bucket in
// cache reads and writes only the first line of its shard (the lock, the
// published tables and the slots' place and shift), and neighbouring
// shards' locks are never on one line (TestShardLayout checks both; see
// shardPad).
type shard struct {
	mu sync.Mutex // protects the fields below but max, maxBytes and the published ones
	// slotsAt and slotsShift publish where tab's slots are and its shift,
	// so that a decision can start loading its bucket's slot before it
	// reads the clock and takes mu (see DoOne). Stored under mu when the
	// slots move, loaded without it: a stale pair only makes a useless
	// prefetch.
	slotsAt atomic.Uintptr
	// wideAt and wideShift are slotsAt and slotsShift for tab's wide
	// buckets, or for noWide while there are none.
	wideAt     atomic.Uintptr
	slotsShift atomic.Uint32
	wideShift  atomic.Uint32
	// tab holds the buckets, each with its key and state in one slot: a
	// decision reads and changes its bucket in one memory access.
	tab      table
	bytes    int64 // sum of costAt over buckets
	inserts  int   // inserts since the last sweep
	expired  int64 // expired buckets removed, in total
	refused  int64 // new buckets not kept for want of room, in total
	max      int   // bound on len(buckets)
	maxBytes int64 // bound on bytes
	_        [shardPad]byte
}

// shardPad fills a shard to 256 bytes with 64-bit pointers and to 192
// with 32-bit ones (TestShardLayout), so that no two shards share a cache
// line. It is written out, not computed from the fields' sizes: through an
// embedded struct, shard's fields cost the inliner more, and prefetchSlot
// was no longer inlined (68bad68).
const shardPad = 24 + 28*(8-unsafe.Sizeof(uintptr(0)))/4

// publish stores where tab's slots and wide buckets are, for
// prefetchSlot and prefetchWide. requires sh.mu held, or no other user
// yet.
func (sh *shard) publish() {
	sh.slotsAt.Store(uintptr(unsafe.Pointer(unsafe.SliceData(sh.tab.slots))))
	sh.slotsShift.Store(uint32(sh.tab.shift))
	if w := &sh.tab.wide; len(w.e) > 0 {
		sh.wideAt.Store(uintptr(unsafe.Pointer(unsafe.SliceData(w.e))))
		sh.wideShift.Store(uint32(w.shift))
	} else {
		sh.wideAt.Store(uintptr(unsafe.Pointer(&noWide[0])))
		sh.wideShift.Store(63)
	}
	sh.tab.moved, sh.tab.wide.moved = false, false
}

// noWide is where prefetchWide looks in a shard with no wide buckets:
// entries that are always there, so that it needs no test first.
var noWide [2]wide

// publishMoved publishes tab's slots and wide buckets if either moved
// since they were last published. requires sh.mu held.
func (sh *shard) publishMoved() {
	if sh.tab.moved || sh.tab.wide.moved {
		sh.publish()
	}
}

// prefetchSlot starts loading the home slot of the bucket whose hash is h,
// without waiting for it and without the lock.
func (sh *shard) prefetchSlot(h uint64) {
	prefetch(sh.slotsAt.Load() + uintptr(h>>sh.slotsShift.Load())*unsafe.Sizeof(slot{}))
}

// prefetchSlotCalled is prefetchSlot, called, not inlined, where
// SpendGCRA and SpendGCRAShort ask for their slot. Inlined there (as
// from 68bad68 to 1f05d4e) a decision on a million buckets with the
// caller's own key strings took 60 to 110 ns more, by the medians of
// alternated runs, and the other rows did not move; the cause is not
// known (BENCHMARKS.md, "At 020139d"; checked again in "At 53ad096 and
// 286057f": 259 against 351 ns). Do, DoOne and doMany inline it.
//
//go:noinline
func (sh *shard) prefetchSlotCalled(h uint64) { sh.prefetchSlot(h) }

// prefetchWide starts loading both lines of the home entry of the wide
// bucket whose hash is h, as prefetchSlot does a slot.
func (sh *shard) prefetchWide(h uint64) {
	at := sh.wideAt.Load() + uintptr(h>>sh.wideShift.Load())*unsafe.Sizeof(wide{})
	prefetch(at)
	prefetch(at + unsafe.Offsetof(wide{}.rest))
}

// cost is the bytes a bucket under a key of n bytes, of the kind given,
// counts towards MaxBytes.
func cost(n int, window bool) int64 {
	if wideFor(n, window) {
		return int64(n) + EntryOverhead + LineOverhead
	}
	return int64(n) + EntryOverhead
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
	for i := range s.secret {
		s.secret[i] = rand.Uint64()
	}
	s.mem = newArena()
	if s.mem != nil {
		// Every use of a table goes through its shard, in the array
		// s.shards: once that is unreachable, no table is used again.
		runtime.AddCleanup(&s.shards[0], (*arena).release, s.mem)
	}
	for i := range s.shards {
		s.shards[i].tab = newTable(s.mem)
		s.shards[i].publish()
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
			Help: "Bytes the memory store's buckets count towards --memory-max-bytes: each bucket's key length plus a fixed overhead, and a second for a wide bucket (a key of 41 to 88 bytes, or a fixed window's of 25 to 88).",
		}, func() float64 { return float64(s.Bytes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_memory_mapped_bytes",
			Help: "Bytes of the memory store's tables held outside Go's heap, in mappings with transparent huge pages asked for (Linux; the process may hold up to 10 MiB more for them): memory that go_memstats_* leave out and process_resident_memory_bytes counts.",
		}, func() float64 { return float64(s.Mapped()) }),
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

// Mapped returns the bytes of the store's tables held outside Go's heap:
// on Linux, its tables of 64 KiB or more, in memory mapped with
// transparent huge pages asked for (see arena); elsewhere, and in builds
// with the race detector, none. Go's memory statistics leave these bytes
// out. The process may hold up to 10 MiB more for them: 2 MiB for each of
// the five sizes of tables below 2 MiB.
func (s *Store) Mapped() int64 { return int64(s.mem.used()) }

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
		n += sh.tab.count()
		sh.mu.Unlock()
	}
	return n
}

// Ping always succeeds: the store is in the process.
func (s *Store) Ping(context.Context) error { return nil }

// Close drops every bucket and gives the store's tables back at once
// (those outside Go's heap included, see Mapped). The store must not be
// used afterwards. A store dropped without Close gives them back once the
// collector finds it unreachable.
func (s *Store) Close() error {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.tab.clear()
		sh.publish()
		sh.bytes = 0
		sh.mu.Unlock()
	}
	return nil
}

// hash returns key's hash, with its low bit set (a slot's mark of being
// taken), and the index of the shard that holds it, chosen by the low
// bits (the table within the shard uses the top ones).
//
// A key of up to keybuf.Max bytes is hashed from its bytes as two words
// (hashShort), so that SpendGCRAShort can find its bucket from the words
// alone; one of up to 24 bytes from three, here; a longer one with
// maphash.
//
// A key of keybuf.Max+1 to 24 bytes: its first 16 bytes as two words and
// its last 8 as a third (overlapping the second for a key of fewer than
// 24), mixed as hashShort mixes its words, then the third word, then the
// length, each in a multiply of its own: every word goes through two
// multiplies at least, as in hashShort (with the third word and the
// length in one multiply, keys that differ only in their last bytes
// crowded some homes: TestShortKeysSpread). Three loads and three
// multiplies for keys as common as an enum and a long number, or a
// tenant and a user. They are written out here, not called: with a
// million fresh keys of 17 to 24 bytes, limiter.Spend serially took
// about 150 ns, against about 185 with them in a function of their own
// (BENCHMARKS.md, "Keys of 17 to 24 bytes hashed inline"). Two more loads
// and a multiply on this path cost as much, which is why keys of 25 bytes
// and more still go to maphash.
func (s *Store) hash(key string) (uint64, int) {
	switch n := len(key); {
	case n <= keybuf.Max:
		if n >= 4 {
			// Inlined, where Load is a call: with a million fresh keys
			// of 3 to 9 bytes, limiter.Spend serially took 7–35 ns less
			// (BENCHMARKS.md, "A short key read inline").
			lo, hi := keybuf.Load4(key)
			return s.hashShort(lo, hi, n)
		}
		lo, hi := keybuf.Load(key)
		return s.hashShort(lo, hi, n)
	case n <= inlineWindowKey:
		b := unsafe.Slice(unsafe.StringData(key), n)
		w0 := binary.LittleEndian.Uint64(b)
		w1 := binary.LittleEndian.Uint64(b[8:])
		w2 := binary.LittleEndian.Uint64(b[n-8:])
		a, c := bits.Mul64(w0^s.secret[0], w1^s.secret[1])
		d, e := bits.Mul64(a^c^s.secret[2], w2^s.secret[3])
		f, g := bits.Mul64(d^e^s.secret[0], uint64(n)^s.secret[1])
		h := f ^ g
		return h | 1, int((h >> 1) & s.mask)
	}
	h := maphash.String(s.seed, key)
	return h | 1, int((h >> 1) & s.mask)
}

// opHash is hash for op's bucket. A FixedWindow bucket's hash holds its
// window's length too, so that windows of different lengths on one key
// (a rule's, and a request's limit override of another unit) are buckets
// of their own, as in Redis, where each window is a key of its own (the
// key and the window's start). Two lengths' hashes differ by a nonzero
// multiple of 2 (the length in seconds times an odd number, doubled, which
// no length up to 2^62 seconds maps to 0), in bits that every slot and
// entry compares before the key: neither bucket is ever found as the
// other, nor as the key's GCRA bucket.
func (s *Store) opHash(op *store.Op) (uint64, int) {
	h, i := s.hash(op.Key)
	if op.Algorithm == store.FixedWindow {
		h ^= uint64(op.Window.Length/time.Second) * 0x9e3779b97f4a7c15 << 1
		i = int((h >> 1) & s.mask)
	}
	return h, i
}

// hashShort is hash for a key of n <= keybuf.Max bytes given as
// keybuf.Words gives it: the words, each xored with a secret of the
// Store's, multiplied into 128 bits, and the halves xored together and
// multiplied again with the length, as wyhash does. The secrets are
// random, so that keys cannot be chosen to collide.
func (s *Store) hashShort(lo, hi uint64, n int) (uint64, int) {
	a, b := bits.Mul64(lo^s.secret[0], hi^s.secret[1])
	c, d := bits.Mul64(a^b^s.secret[2], uint64(n)^s.secret[3])
	h := c ^ d
	return h | 1, int((h >> 1) & s.mask)
}

// Do applies b at now. The shards the batch touches are locked in ascending
// order, so batches never deadlock and each is applied as if alone; under
// the locks, store.Evaluate decides the batch.
func (s *Store) Do(_ context.Context, now time.Time, b store.Batch, out []store.Result) error {
	ops := b.Ops
	if len(ops) == 1 {
		// One op is its own batch: nothing for all-or-nothing to block.
		// Its slot is asked for before the checks, which then overlap the
		// load.
		h, i := s.opHash(&ops[0])
		sh := &s.shards[i]
		// (Each decision's two prefetches and the test between them are
		// written out where they are made: a helper doing all three is
		// too large to be inlined.)
		if wideFor(len(ops[0].Key), ops[0].Algorithm == store.FixedWindow) {
			sh.prefetchWide(h)
		} else {
			sh.prefetchSlot(h)
		}
		if err := b.Check(out); err != nil {
			return err
		}
		out[0] = s.oneIn(sh, h, now.UnixNano(), &ops[0])
		return nil
	}
	if err := b.Check(out); err != nil {
		return err
	}
	if len(ops) == 0 {
		return nil
	}
	return s.doMany(b, now, now.UnixNano(), out)
}

// DoOne answers op alone at clk's time, as Do does for a batch of op
// alone. It keeps no reference to op.Key: a key that fits a slot is copied
// into it, a longer one is copied once, when its bucket is made.
//
// It asks the processor for the bucket's slot first and reads the clock
// after: the clock read is ordered (it waits for the loads before it), so
// reading it first would leave the slot's load, most often from memory
// when there are many buckets, to start only after it.
func (s *Store) DoOne(_ context.Context, clk clock.Clock, op store.Op) (store.Result, error) {
	h, i := s.opHash(&op)
	sh := &s.shards[i]
	if wideFor(len(op.Key), op.Algorithm == store.FixedWindow) {
		sh.prefetchWide(h)
	} else {
		sh.prefetchSlot(h)
	}
	if err := op.Validate(); err != nil {
		return store.Result{}, err
	}
	return s.oneIn(sh, h, clock.UnixNano(clk), &op), nil
}

// SpendGCRA answers a GCRA Spend or Check its caller has checked
// (store.Spender) as DoOne answers the operation, with no Op to build or
// check: what the limiter's Spend and Check cost over this store is this.
// It is get, Op.Evaluate and do for that one kind of operation, written
// out (TestSpendGCRAAnswersAsDoOne): helpers shared with do and get, too
// large to be inlined, made a decision in cache slower. As DoOne, it asks
// for the bucket's slot before it reads the clock.
func (s *Store) SpendGCRA(clk clock.Clock, key string, p gcra.Params, cost int64, check bool) (allowed bool, remaining int64, retryIn, resetIn time.Duration) {
	h, i := s.hash(key)
	sh := &s.shards[i]
	if isWide(len(key)) {
		sh.prefetchWide(h)
		return s.spendWide(sh, h, clk, key, p, cost, check)
	}
	sh.prefetchSlotCalled(h)
	return s.spendSlot(sh, h, clk, key, p, cost, check)
}

// Hashed is where a key's GCRA bucket lies in a Store: the key's hash and
// shard, as PrefetchGCRA found them, for SpendGCRAHashed. The zero Hashed
// is valid and names no key: SpendGCRAHashed then hashes the key itself.
type Hashed struct {
	h uint64 // the key's hash (never 0), or 0 in the zero Hashed
	i int    // the key's shard
}

// PrefetchGCRA hashes key and asks the processor for the memory of its
// GCRA bucket, without waiting for it and without a lock, for a caller
// that has checks to make before it calls SpendGCRAHashed with the
// answer: the bucket's load then overlaps the checks, and the key is
// hashed once (limiter.Spend and Check; BENCHMARKS.md, "The key hashed
// once, before the limiter's checks"). It changes nothing.
func (s *Store) PrefetchGCRA(key string) Hashed {
	h, i := s.hash(key)
	sh := &s.shards[i]
	if isWide(len(key)) {
		sh.prefetchWide(h)
	} else {
		sh.prefetchSlot(h)
	}
	return Hashed{h, i}
}

// SpendGCRAHashed is SpendGCRA for key, at being PrefetchGCRA(key)'s
// answer on this Store or the zero Hashed. Given a Hashed of another key
// or Store, it answers from, and may make, a bucket that key is not
// found in afterwards.
func (s *Store) SpendGCRAHashed(at Hashed, clk clock.Clock, key string, p gcra.Params, cost int64, check bool) (allowed bool, remaining int64, retryIn, resetIn time.Duration) {
	if at.h == 0 || uint(at.i) >= uint(len(s.shards)) {
		at.h, at.i = s.hash(key)
	}
	sh := &s.shards[at.i]
	if isWide(len(key)) {
		return s.spendWide(sh, at.h, clk, key, p, cost, check)
	}
	return s.spendSlot(sh, at.h, clk, key, p, cost, check)
}

// spendSlot is SpendGCRA for a key whose bucket is a slot (not isWide),
// in its shard sh, h being the key's hash, once the slot is asked for.
func (s *Store) spendSlot(sh *shard, h uint64, clk clock.Clock, key string, p gcra.Params, cost int64, check bool) (allowed bool, remaining int64, retryIn, resetIn time.Duration) {
	nowNs := clock.UnixNano(clk)
	sh.mu.Lock()
	slot, ok := sh.tab.findSlot(h, key)
	slot, tat := sh.tab.gcraTAT(slot, ok, nowNs)
	granted, rem, retry, reset, next := p.SpendValues(nowNs, tat, cost)
	put := granted && !check && cost != 0
	if put && slot < 0 {
		slot = sh.put(h, key, false, nowNs)
	}
	if put && slot >= 0 {
		sh.tab.setTAT(slot, next)
	}
	sh.mu.Unlock()
	return granted, rem, time.Duration(retry), time.Duration(reset)
}

// spendWide is SpendGCRA for a key whose bucket is wide (isWide), in its
// shard sh, h being the key's hash, once both lines are asked for.
func (s *Store) spendWide(sh *shard, h uint64, clk clock.Clock, key string, p gcra.Params, cost int64, check bool) (allowed bool, remaining int64, retryIn, resetIn time.Duration) {
	nowNs := clock.UnixNano(clk)
	sh.mu.Lock()
	i, ok := sh.tab.wide.find(h, key)
	tat := nowNs
	if e := &sh.tab.wide; ok && e.e[i].exp > nowNs {
		tat = e.e[i].exp
	}
	granted, rem, retry, reset, next := p.SpendValues(nowNs, tat, cost)
	if put := granted && !check && cost != 0; put {
		r := i | wideRef
		if !ok {
			r = sh.put(h, key, false, nowNs)
		}
		if r >= 0 {
			sh.tab.at(r).exp = next
		}
	}
	sh.mu.Unlock()
	return granted, rem, time.Duration(retry), time.Duration(reset)
}

// PrefetchShort asks for the slot of the bucket whose key SpendGCRAShort
// would be given as (lo, hi, n), without waiting for it: for a caller
// that has the key's words before it has checked them, so that the slot's
// load overlaps the checks (limiter.SpendFor). It changes nothing: given
// an n out of range, it asks for some slot, which does no harm.
func (s *Store) PrefetchShort(lo, hi uint64, n int) {
	lo, hi = keybuf.Trim(lo, hi, n)
	h, i := s.hashShort(lo, hi, n)
	s.shards[i].prefetchSlot(h)
}

// SpendGCRAShort is SpendGCRA for a key of n bytes, 0 to 16, given as two
// words: byte i of the key is byte i of lo, little-endian, for i < 8,
// else byte i-8 of hi; the words' bytes past the key are ignored. The
// caller builds the key in registers and the store hashes and finds it
// there, where a key written to memory and read back at once could wait
// for the stores before it to reach the cache (limiter.SpendFor;
// BENCHMARKS.md). The key's bytes are written out only for a new bucket.
// It panics if n is out of range.
func (s *Store) SpendGCRAShort(clk clock.Clock, lo, hi uint64, n int, p gcra.Params, cost int64, check bool) (allowed bool, remaining int64, retryIn, resetIn time.Duration) {
	if uint(n) > keybuf.Max {
		panic("memory: SpendGCRAShort of a key of " + strconv.Itoa(n) + " bytes, not 0 to 16")
	}
	lo, hi = keybuf.Trim(lo, hi, n)
	h, i := s.hashShort(lo, hi, n)
	sh := &s.shards[i]
	sh.prefetchSlotCalled(h)
	nowNs := clock.UnixNano(clk)
	sh.mu.Lock()
	slot, ok := sh.tab.findShort(h, lo, hi, n)
	slot, tat := sh.tab.gcraTAT(slot, ok, nowNs)
	granted, rem, retry, reset, next := p.SpendValues(nowNs, tat, cost)
	put := granted && !check && cost != 0
	if put && slot < 0 {
		var key [keybuf.Max]byte
		keybuf.Put(&key, lo, hi)
		slot = sh.put(h, unsafe.String(&key[0], n), false, nowNs)
	}
	if put && slot >= 0 {
		sh.tab.setTAT(slot, next)
	}
	sh.mu.Unlock()
	return granted, rem, time.Duration(retry), time.Duration(reset)
}

// oneIn applies the valid op, whose hash is h, alone in its shard sh at
// nowNs, and returns its Result.
func (s *Store) oneIn(sh *shard, h uint64, nowNs int64, op *store.Op) store.Result {
	sh.mu.Lock()
	st, slot := sh.get(h, op, nowNs)
	r, w, next := op.EvaluateAt(nowNs, st)
	sh.do(w, h, op, next, slot, nowNs)
	sh.mu.Unlock()
	return r
}

// doMany is Do for batches of more than one operation.
func (s *Store) doMany(b store.Batch, now time.Time, nowNs int64, out []store.Result) error {
	ops := b.Ops
	var (
		idxBuf  [32]int
		hashBuf [32]uint64
	)
	idx, hashes := idxBuf[:0], hashBuf[:0]
	if len(ops) > len(idxBuf) {
		idx, hashes = make([]int, 0, len(ops)), make([]uint64, 0, len(ops))
	}
	for i := range ops {
		h, shard := s.opHash(&ops[i])
		hashes = append(hashes, h)
		idx = append(idx, shard)
		// Ask for every bucket's slot (or entry) before waiting on any:
		// their loads from memory overlap.
		if wideFor(len(ops[i].Key), ops[i].Algorithm == store.FixedWindow) {
			s.shards[shard].prefetchWide(h)
		} else {
			s.shards[shard].prefetchSlot(h)
		}
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
		states[i], _ = s.shards[idx[i]].get(hashes[i], &ops[i], nowNs)
	}
	store.Evaluate(now, b, states, out, writes)
	for i := range ops {
		// An earlier write of the batch may have inserted or removed a
		// bucket, growing the table or moving buckets: find the bucket
		// again.
		sh := &s.shards[idx[i]]
		slot := -1
		if j, ok := sh.tab.find(hashes[i], ops[i].Key, ops[i].Algorithm == store.FixedWindow); ok {
			slot = j
		}
		sh.do(writes[i], hashes[i], &ops[i], states[i], slot, nowNs)
	}
	return nil
}

// do carries out w for op's bucket, whose hash is h, next being the state
// to put; slot is the bucket's ref in the table, or -1 when the shard
// holds none. requires sh.mu held.
func (sh *shard) do(w store.Write, h uint64, op *store.Op, next store.State, slot int, nowNs int64) {
	switch w {
	case store.Put:
		window := op.Algorithm == store.FixedWindow
		if slot < 0 {
			if slot = sh.put(h, op.Key, window, nowNs); slot < 0 {
				return
			}
		}
		// The bucket may be dropped once it is full again: past its TAT,
		// or at the end of its window.
		e := sh.tab.at(slot)
		if window {
			e.exp = (next.Start + int64(op.Window.Length/time.Second)) * int64(time.Second)
			sh.tab.setWindow(slot, next.Start, next.Count)
		} else {
			e.exp = next.TAT
		}
	case store.Remove:
		if slot >= 0 {
			sh.drop(slot)
		}
	}
}

// get returns the state of op's bucket, whose hash is h (Store.opHash):
// missing when the shard holds none or an expired one (full again); and
// the bucket's ref in the table, live or not, or -1 when there is none
// (an expired bucket is left for do to overwrite, or for a sweep).
// requires sh.mu held.
func (sh *shard) get(h uint64, op *store.Op, nowNs int64) (st store.State, slot int) {
	i, ok := sh.tab.find(h, op.Key, op.Algorithm == store.FixedWindow)
	if !ok {
		return store.State{}, -1
	}
	e := sh.tab.at(i)
	switch {
	case e.exp <= nowNs:
		return store.State{}, i
	case e.isWindow():
		start, count := sh.tab.window(i)
		return store.State{Exists: true, Start: start, Count: count}, i
	}
	return store.State{Exists: true, TAT: e.exp}, i
}

// put adds a bucket under key, with hash h, a FixedWindow bucket when
// window, else a GCRA one, which the shard does not hold, and returns its
// ref. When the shard is full it makes
// room by removing expired buckets only; when that is not enough the new
// key is not stored, counted as refused, and put returns -1. requires
// sh.mu held.
func (sh *shard) put(h uint64, key string, window bool, nowNs int64) int {
	sh.inserts++
	if sh.inserts >= sweepEvery {
		sh.inserts = 0
		sh.sweep(nowNs, sweepBudget)
	}
	c := cost(len(key), window)
	if !sh.fits(c) && !sh.makeRoom(nowNs, c) {
		sh.refused++
		return -1
	}
	i := sh.tab.insert(h, key, window)
	sh.publishMoved() // the table grew, even if the key then found no room
	if i < 0 {
		sh.refused++
		return -1
	}
	sh.bytes += c
	return i
}

// drop deletes the bucket at ref r. requires sh.mu held.
func (sh *shard) drop(r int) {
	s := sh.tab.at(r)
	sh.bytes -= cost(s.keyLen(), s.isWindow())
	sh.tab.remove(r)
}

// fits reports whether a new bucket costing c bytes fits. requires sh.mu
// held.
func (sh *shard) fits(c int64) bool {
	return sh.tab.count() < sh.max && sh.bytes+c <= sh.maxBytes
}

// sweep examines up to budget buckets, from where the last sweep stopped,
// and removes the expired ones. requires sh.mu held.
func (sh *shard) sweep(nowNs int64, budget int) {
	sh.scan(nowNs, budget, func() bool { return false })
}

// makeRoom removes expired buckets among up to evictScan buckets, from
// where the last sweep stopped, until a new bucket costing c bytes fits,
// and reports whether it does. Live buckets are never removed. requires
// sh.mu held.
func (sh *shard) makeRoom(nowNs int64, c int64) bool {
	sh.scan(nowNs, evictScan, func() bool { return sh.fits(c) })
	return sh.fits(c)
}

// slotsPerBucket bounds the slots a scan looks at: that many for each
// bucket of its budget, so that a sparse table is not walked end to end.
const slotsPerBucket = 4

// scan examines up to budget buckets (and at most slotsPerBucket times
// as many entries) of the table's slots, from its cursor on, then as many
// of its wide buckets, from theirs, removing the expired ones, until done
// reports true after a removal; then it shrinks either table if it has
// become sparse. requires sh.mu held.
func (sh *shard) scan(nowNs int64, budget int, done func() bool) {
	t := &sh.tab
	if !scanEntries(sh, t.slots, &t.cursor, 0, nowNs, budget, done) && t.wide.n > 0 {
		scanEntries(sh, t.wide.e, &t.wide.cursor, wideRef, nowNs, budget, done)
	}
	shrunk := t.n*8 < len(t.slots) && t.shrink()
	if t.wide.n*8 < len(t.wide.e) && t.wide.shrink(t.mem) {
		shrunk = true
	}
	if shrunk {
		sh.publish()
	}
}

// scanEntries is scan over one of sh's tables, a, its slots (ref 0) or
// its wide buckets (wideRef), from *cursor on, leaving *cursor where it
// stopped, and reports whether done did.
func scanEntries[E any, P interface {
	hashed[E]
	base() *slot
}](sh *shard, a []E, cursor *int, ref int, nowNs int64, budget int, done func() bool) bool {
	m := len(a) - 1
	i := *cursor & m
	stopped := false
	for slots := slotsPerBucket * budget; budget > 0 && slots > 0; slots-- {
		e := P(&a[i]).base()
		if e.hash == 0 {
			i = (i + 1) & m
			continue
		}
		budget--
		if e.exp > nowNs {
			i = (i + 1) & m
			continue
		}
		// Removing may move the next bucket into i: look at i again.
		sh.drop(i | ref)
		sh.expired++
		if done() {
			stopped = true
			break
		}
	}
	*cursor = i
	return stopped
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
