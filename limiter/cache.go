package limiter

import (
	"context"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/window"
)

// Options are a Limiter's optional settings. The zero value is what New
// gives: no local cache, every hit counted.
type Options struct {
	// LocalCacheBytes, when above zero, turns on the local over-limit
	// cache of Count (envoyproxy/ratelimit's LOCAL_CACHE_SIZE_IN_BYTES):
	// a bucket found over its limit is answered over the limit from
	// memory, with no store round trip, until its fixed window ends (a
	// GCRA bucket: for as long as the store would deny the same cost),
	// its decision marked Cached. Meanwhile a cached window's counter is
	// not incremented, as envoyproxy/ratelimit's is not; a cached
	// decision's Count is the count last seen plus its hits. A refund of
	// a bucket makes the cache forget it. The cache takes this many bytes
	// once, in entries of 64 bytes (at least one), whatever the number of
	// keys; when full, a new entry replaces one that has ended, else the
	// one ending soonest of the 8 it may take, and a bucket no longer in
	// the cache is simply asked of the store again. Zero or less: off, the
	// default, and no lookups at all.
	LocalCacheBytes int
	// StopIncrementWhenOverLimit (envoyproxy/ratelimit's
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT) makes Count leave a
	// request's other counters alone when one of its descriptors is over
	// its limit: when one is in the local cache, the others are only
	// peeked; else, with two or more counted descriptors, Count first peeks
	// them all (one more store round trip) and, if any would go over its
	// limit, counts only those and peeks the others. Default false.
	StopIncrementWhenOverLimit bool
}

// NewWithOptions returns a Limiter over s, telling time by c, with the
// optional settings o.
func NewWithOptions(s store.Store, c clock.Clock, o Options) *Limiter {
	l := New(s, c)
	if o.LocalCacheBytes > 0 {
		l.cache = newOverLimitCache(o.LocalCacheBytes)
	}
	l.stopIncrement = o.StopIncrementWhenOverLimit
	return l
}

// StopsIncrementWhenOverLimit reports Options.StopIncrementWhenOverLimit:
// whether a Count call's transactions are counted together, as one
// request's, and so must not be merged with another request's.
func (l *Limiter) StopsIncrementWhenOverLimit() bool { return l.stopIncrement }

// overLimitCache remembers the buckets Count found over their limit, in a
// fixed array of slots allocated once: its memory is the size it was given,
// whatever the number of keys, and holds no pointer for the garbage
// collector to scan. A key is known by two 64-bit hashes of it (seeded per
// cache, so that no caller can aim collisions at it); the slots form sets
// of up to 8, a key's set chosen by its first hash; a new entry takes an
// empty slot of its set, else one that no longer answers, else the one
// that ends soonest. It is safe for concurrent use.
type overLimitCache struct {
	slots  []slot
	ways   int // slots per set
	sets   uint64
	s1, s2 maphash.Seed
	locks  [64]sync.Mutex // lock i protects the sets whose number is i mod 64
	// forgets counts the refunds that made the cache forget a key: a
	// decision made while one ran is not remembered, as it may be stale.
	forgets atomic.Uint64
}

// slot is one entry: 64 bytes.
type slot struct {
	h1, h2 uint64 // the key's hashes
	// from is when the decision was made and until when it ends (a
	// window's end, a GCRA bucket's TAT), Unix nanoseconds.
	from, until int64
	// A window's limit, length and count, or a GCRA limit's burst, count
	// and period.
	a, b, x int64
	alg     uint8   // 0: empty; 'w' (fixed window) or 'g' (GCRA)
	_       [7]byte // to 64 bytes where int64 is aligned to 4 bytes too (386, arm)
}

// slotSize is the bytes of a slot, the unit of the cache's size.
const slotSize = int(unsafe.Sizeof(slot{}))

// A slot is 64 bytes on every platform.
const _, _ = uint(slotSize - 64), uint(64 - slotSize)

func newOverLimitCache(bytes int) *overLimitCache {
	n := max(bytes/slotSize, 1)
	ways := min(n, 8)
	c := &overLimitCache{ways: ways, sets: uint64(n / ways), s1: maphash.MakeSeed(), s2: maphash.MakeSeed()}
	c.slots = make([]slot, int(c.sets)*ways)
	return c
}

// set returns the slots of key's set, locked, with the key's hashes; the
// caller unlocks the returned mutex.
func (c *overLimitCache) set(key string) ([]slot, *sync.Mutex, uint64, uint64) {
	h1, h2 := maphash.String(c.s1, key), maphash.String(c.s2, key)
	i := h1 % c.sets
	mu := &c.locks[i%uint64(len(c.locks))]
	mu.Lock()
	return c.slots[int(i)*c.ways : int(i+1)*c.ways], mu, h1, h2
}

// lookup reports the cached decision of t, a CheckAndSpend or CheckOnly
// transaction, at at: over the limit, as the store would answer it, when
// t's bucket is in the cache with the same limit and is still over it. An
// entry that does not answer is dropped; the key's entries for other
// limits, or windows of another length, are other entries, and stay.
func (c *overLimitCache) lookup(t *Transaction, at time.Time) (Decision, bool) {
	set, mu, h1, h2 := c.set(t.Key)
	defer mu.Unlock()
	for i := range set {
		e := &set[i]
		if e.h1 != h1 || e.h2 != h2 || e.alg == 0 {
			continue
		}
		d, ok, stale := e.decide(t, at)
		if stale {
			*e = slot{}
		}
		if ok {
			return d, true
		}
	}
	return Decision{}, false
}

// holds reports whether e is the entry of t's bucket and limit: the same
// kind, limit and window length (the key's hashes aside). A key counted
// with several windows or limits (a rule's, and a request's override of
// it) has an entry for each.
func (e *slot) holds(t *Transaction) bool {
	if t.Window.Length != 0 {
		return e.alg == 'w' && t.Window.Limit == e.a && int64(t.Window.Length) == e.b
	}
	return e.alg == 'g' && t.Limit == (gcra.Limit{Burst: e.a, Count: e.b, Period: time.Duration(e.x)})
}

// decide is lookup's answer from e, an entry of t's key, and whether the
// entry is to be dropped: it has ended, or it is t's and t is to go to
// the store and may change the bucket.
func (e *slot) decide(t *Transaction, at time.Time) (d Decision, ok, stale bool) {
	now := at.UnixNano()
	if now >= e.until {
		return Decision{}, false, true
	}
	if now < e.from || !e.holds(t) {
		return Decision{}, false, false
	}
	if t.Window.Length != 0 {
		// The window's count is over its limit: any hit, and any peek,
		// is over until the window ends. Count is the count last seen,
		// plus the hits for a spend, as the store would have counted
		// them had it been asked (it is not: the counter stays as it
		// was, as envoyproxy/ratelimit's does).
		x := e.x
		if t.Kind == CheckAndSpend {
			x += min(t.Cost, math.MaxInt64-x)
		}
		left := window.ResetIn(at, e.b/int64(time.Second)) // whole seconds, as the store says
		return Decision{Remaining: 0, RetryIn: left, ResetIn: left, Count: x, Cached: true}, true, false
	}
	// The bucket's TAT is until, unless another caller has spent since,
	// which only makes the answer stricter than the store's: decide as
	// the store would on that TAT. When that allows, the transaction goes
	// to the store; a spend there moves the TAT, so the entry is dropped.
	g := t.Limit.Params().Spend(now, e.until, t.Cost)
	if g.Allowed {
		return Decision{}, false, t.Kind == CheckAndSpend && t.Cost > 0
	}
	return Decision{Remaining: g.Remaining, RetryIn: time.Duration(g.RetryIn), ResetIn: time.Duration(g.ResetIn), Cached: true}, true, false
}

// remember stores the denied decision d of t, made at at, when it means
// the bucket stays over its limit: a fixed window whose count is over the
// limit, or a GCRA bucket with a TAT after at.
func (c *overLimitCache) remember(t *Transaction, at time.Time, d *Decision) {
	if d.Allowed || d.ResetIn <= 0 {
		return
	}
	now := at.UnixNano()
	e := slot{from: now, until: now + int64(d.ResetIn)}
	if t.Window.Length != 0 {
		if d.Count <= t.Window.Limit {
			return // a peek of more hits than fit: not over by itself
		}
		length := int64(t.Window.Length / time.Second)
		e.until = (window.Start(at, length) + length) * int64(time.Second)
		e.alg, e.a, e.b, e.x = 'w', t.Window.Limit, int64(t.Window.Length), d.Count
	} else {
		e.alg, e.a, e.b, e.x = 'g', t.Limit.Burst, t.Limit.Count, int64(t.Limit.Period)
	}
	set, mu, h1, h2 := c.set(t.Key)
	defer mu.Unlock()
	e.h1, e.h2 = h1, h2
	victim := -1
	for i := range set {
		if s := &set[i]; s.h1 == h1 && s.h2 == h2 && s.holds(t) {
			victim = i
			break
		}
	}
	if victim < 0 {
		// An empty slot, or one that has ended, else the one that ends
		// soonest.
		end := int64(math.MaxInt64)
		for i := range set {
			s := &set[i]
			if s.alg == 0 || s.until <= now {
				victim = i
				break
			}
			if s.until < end {
				victim, end = i, s.until
			}
		}
	}
	set[victim] = e
}

// forget drops key from the cache.
func (c *overLimitCache) forget(key string) {
	set, mu, h1, h2 := c.set(key)
	defer mu.Unlock()
	for i := range set {
		if set[i].h1 == h1 && set[i].h2 == h2 {
			set[i] = slot{}
		}
	}
}

// entries is the number of slots in use, for tests.
func (c *overLimitCache) entries() int {
	n := 0
	for i := range c.slots {
		mu := &c.locks[(uint64(i/c.ways))%uint64(len(c.locks))]
		mu.Lock()
		if c.slots[i].alg != 0 {
			n++
		}
		mu.Unlock()
	}
	return n
}

// countLocal is count with the local cache or StopIncrementWhenOverLimit:
// the transactions are valid, and out has room for them.
func (l *Limiter) countLocal(ctx context.Context, sc *Scratch, at time.Time, txns []Transaction, out []Decision) error {
	c := l.cache
	var forgets uint64
	if c != nil {
		forgets = c.forgets.Load()
	}
	ops, idx := sc.ops[:0], sc.idx[:0]
	cached := false
	for i := range txns {
		t := &txns[i]
		if t.Disabled {
			out[i] = allowedDecision
			out[i].Index = i
			continue
		}
		if c != nil {
			if t.Kind == RefundBucket {
				c.forget(t.Key)
			} else if d, ok := c.lookup(t, at); ok {
				d.Index = i
				out[i] = d
				cached = true
				continue
			}
		}
		ops = append(ops, op(t))
		idx = append(idx, i)
	}
	sc.ops, sc.idx = ops, idx
	if len(ops) == 0 {
		return nil
	}
	sc.results = sized(sc.results, len(ops))
	// A bucket named twice may change after the decision of its first
	// transaction: nothing of such a request is remembered but a fixed
	// window over its limit, as envoyproxy/ratelimit caches the key a hit
	// of the request took over. Its later hits only add to the window,
	// and are remembered after it (with the count the store answers last);
	// a refund of it in the request forgets it below. (A GCRA bucket's
	// later spend would move its TAT, and the cached answer's wait.)
	_, _, dup := store.Duplicate(ops)
	if l.stopIncrement {
		if err := l.stopOverLimit(ctx, sc, at, cached, dup); err != nil {
			return storeError("", err)
		}
	}
	if err := l.do(ctx, at, ops, sc.results, dup); err != nil {
		return storeError("", err)
	}
	refunded := false
	for k, i := range idx {
		out[i] = decision(&sc.results[k], i)
		t := &txns[i]
		switch {
		case t.Kind == RefundBucket:
			refunded = true
			if t.Window.Length == 0 {
				out[i].Allowed = true // a GCRA refund only gives capacity back
			}
		case c != nil && !out[i].Allowed && (!dup || t.Window.Length != 0):
			if c.forgets.Load() == forgets {
				c.remember(t, at, &out[i])
			}
		}
	}
	if refunded && c != nil {
		// Forget again, after the store applied the refunds: a decision
		// remembered meanwhile may predate them.
		for k, i := range idx {
			if ops[k].Kind == RefundBucket {
				c.forget(txns[i].Key)
			}
		}
		c.forgets.Add(1)
	}
	return nil
}

// stopOverLimit turns the counted operations of sc.ops that must not
// count into peeks of zero hits, as StopIncrementWhenOverLimit says: all
// of them when cached (a transaction of the request was answered over the
// limit from the cache), else, when one is counted beside another counted
// or peeked one, the ones that would not go over their limit when some
// other would, or some peeked one is past its limit (found with a first
// round trip of peeks), as envoyproxy/ratelimit does.
func (l *Limiter) stopOverLimit(ctx context.Context, sc *Scratch, at time.Time, cached, dup bool) error {
	ops := sc.ops
	spends, peeks := 0, 0
	for k := range ops {
		switch ops[k].Kind {
		case CheckAndSpend:
			spends++
		case CheckOnly:
			peeks++
		}
	}
	// A spend alone is counted whatever it finds; one beside others is
	// spared when another (a peek too: its count plus no hits) is past
	// its limit.
	if spends == 0 || (!cached && spends+peeks < 2) {
		return nil
	}
	if !cached {
		pre := append(sc.pre[:0], ops...)
		for k := range pre {
			pre[k].Kind = CheckOnly
		}
		sc.pre = pre
		if err := l.do(ctx, at, pre, sc.results, dup); err != nil {
			return err
		}
		over := false
		for k := range pre {
			if sc.results[k].Allowed {
				continue
			}
			switch ops[k].Kind {
			case CheckAndSpend:
				over = true
				ops[k].Kind = spendOver // counted below
			case CheckOnly:
				over = true
			}
		}
		if !over {
			return nil
		}
	}
	for k := range ops {
		switch ops[k].Kind {
		case CheckAndSpend:
			ops[k].Kind, ops[k].Cost = CheckOnly, 0
		case spendOver:
			ops[k].Kind = CheckAndSpend
		}
	}
	return nil
}

// spendOver marks, inside stopOverLimit only, a counted operation that
// would go over its limit.
const spendOver Kind = 255

// do applies ops at at, in rounds when some name one bucket (dup).
func (l *Limiter) do(ctx context.Context, at time.Time, ops []store.Op, results []store.Result, dup bool) error {
	if dup {
		return l.rounds(ctx, at, ops, results)
	}
	return l.chunked(ctx, at, ops, results)
}
