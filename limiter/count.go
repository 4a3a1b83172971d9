package limiter

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"github.com/sluice-rl/sluice/descriptors"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/store"
)

// ForBucket is the key-value transaction that spends cost from bucket b
// (see limits.Set.Resolve), for the caller's id; set its Kind for anything
// but a check-and-spend.
func ForBucket(b limits.Bucket, id string, cost int64) Transaction {
	return Transaction{Key: b.Key, Limit: b.Limit, Disabled: !b.Enabled, Cost: cost, Name: b.Name.Text, ID: id}
}

// ForRule is the transaction that counts cost hits of the request
// descriptor entries, which rule r matched: a GCRA bucket when r has a
// burst, else one of Envoy's fixed windows of r's length, both under
// envoyproxy/ratelimit's counter key (descriptors.Rule.CacheKey). An
// unlimited rule gives a Disabled transaction.
func ForRule(r *descriptors.Rule, entries []descriptors.Entry, cost int64) Transaction {
	if r.Unlimited {
		return Transaction{Key: r.StatsKey, Disabled: true, Cost: cost}
	}
	return forRule(r, r.CacheKey(entries), cost)
}

// AppendForRule is ForRule with the counter key appended to dst, in its
// spare capacity when it fits (see descriptors.Rule.CacheKeyLen), rather
// than in an allocation of its own: it returns the transaction, whose
// Key is the bytes appended, and the extended slice. The caller must
// never write those bytes again: a store's Do may keep the key.
func AppendForRule(dst []byte, r *descriptors.Rule, entries []descriptors.Entry, cost int64) (Transaction, []byte) {
	if r.Unlimited {
		return Transaction{Key: r.StatsKey, Disabled: true, Cost: cost}, dst
	}
	more := r.AppendCacheKey(dst, entries)
	key := more[len(dst):]
	return forRule(r, unsafe.String(unsafe.SliceData(key), len(key)), cost), more
}

// forRule is the transaction of a limited rule r under key.
func forRule(r *descriptors.Rule, key string, cost int64) Transaction {
	t := Transaction{Key: key, Cost: cost}
	if r.Burst > 0 {
		t.Limit = gcra.Limit{Burst: int64(r.Burst), Count: int64(r.RequestsPerUnit), Period: r.Window()}
	} else {
		t.Window = Window{Limit: int64(r.RequestsPerUnit), Length: r.Window()}
	}
	return t
}

// Count applies each transaction on its own, as Envoy counts the
// descriptors of a request, and writes one decision per transaction to out,
// which must have room for len(txns):
//
//   - a CheckAndSpend transaction is counted whether or not it, or another
//     transaction of the call, is over its limit (a fixed window counts
//     every hit; a GCRA bucket spends only when the hits fit);
//   - CheckOnly peeks (Envoy's hits_addend of 0);
//   - RefundBucket takes the hits back (Envoy's negative hits); its
//     decision is allowed unless the bucket is over its limit afterwards;
//   - a cost above a GCRA burst is never allowed;
//   - the same bucket may be named more than once: the transactions on it
//     are applied in order, as envoyproxy/ratelimit's pipelined INCRBYs
//     are, in as few store calls as the most repeated bucket needs (one
//     for the usual request).
//
// Disabled transactions are allowed with no limit and never reach the
// store. There is no bound on len(txns); front doors bound requests. A
// zero Kind is CheckAndSpend, and Count writes it so into txns (unlike
// Batch, which works on a copy: Count is the Envoy service's path, and
// its callers build their transactions for the one call).
func (l *Limiter) Count(ctx context.Context, txns []Transaction, out []Decision) error {
	return l.CountAt(ctx, l.clock.Now(), txns, out)
}

// CountWith is Count with the caller's Scratch, which it leaves Reset.
func (l *Limiter) CountWith(ctx context.Context, sc *Scratch, txns []Transaction, out []Decision) error {
	defer sc.Reset()
	return l.count(ctx, sc, l.clock.Now(), txns, out)
}

// CountWithAt is CountWith at the instant at, the clock's now when at is
// zero: a caller that takes now itself can record the instant its
// decisions used (the request log of server.RLS).
func (l *Limiter) CountWithAt(ctx context.Context, sc *Scratch, at time.Time, txns []Transaction, out []Decision) error {
	defer sc.Reset()
	if at.IsZero() {
		at = l.clock.Now()
	}
	return l.count(ctx, sc, at, txns, out)
}

// CountAt is Count at the instant at instead of the clock's now, for a
// caller that keeps windows of its own and must name the window a fixed
// window operation falls in (the adaptive limiter's shared slots). It needs
// a store that uses the caller's time (see store/redis's ClockServer).
func (l *Limiter) CountAt(ctx context.Context, at time.Time, txns []Transaction, out []Decision) error {
	sc := scratchPool.Get().(*Scratch)
	defer sc.release()
	return l.count(ctx, sc, at, txns, out)
}

// count is Count at at, working in sc.
func (l *Limiter) count(ctx context.Context, sc *Scratch, at time.Time, txns []Transaction, out []Decision) error {
	if len(out) < len(txns) {
		return &Error{Kind: Internal, Msg: fmt.Sprintf("%d decisions for %d transactions", len(out), len(txns))}
	}
	for i := range txns {
		t := &txns[i]
		if t.Kind == 0 {
			t.Kind = CheckAndSpend
		}
		if err := validCount(t); err != nil {
			return At(err, "transactions", "transaction", i)
		}
	}
	if l.cache != nil || l.stopIncrement {
		return l.countLocal(ctx, sc, at, txns, out)
	}
	if ops := sc.load(txns); len(ops) > 0 {
		_, _, dup := store.Duplicate(ops)
		if err := l.do(ctx, at, ops, sc.results, dup); err != nil {
			return storeError("", err)
		}
	}
	sc.spread(txns, out)
	for i := range txns {
		if t := &txns[i]; t.Kind == RefundBucket && t.Window.Length == 0 && !t.Disabled {
			// A GCRA refund only gives capacity back: never over.
			out[i].Allowed = true
		}
	}
	return nil
}

// validCount checks a transaction for Count: a key, a kind Count knows, a
// valid limit or window, a cost >= 0.
func validCount(t *Transaction) error {
	if err := validTransaction(t); err != nil {
		return err
	}
	switch {
	case t.Kind != CheckAndSpend && t.Kind != CheckOnly && t.Kind != RefundBucket:
		return &Error{Kind: Invalid, Field: "kind", Msg: fmt.Sprintf("kind %s cannot be counted, must be check_and_spend, check_only or refund", t.Kind), Err: ErrInvalidKind}
	case t.Cost < 0:
		return &Error{Kind: Invalid, Field: "cost", Msg: fmt.Sprintf("invalid cost %d for %s, must be >= 0", t.Cost, describe(t)), Err: gcra.ErrInvalidCost}
	}
	return nil
}

// MaxOpsPerCall is the most operations Count sends to the store in one
// call: a larger request is split into calls of at most this many, one
// after another, so that no single Redis script or pipeline holds the
// server for more than a few milliseconds (Envoy's windows are counted one
// by one, so the split changes no answer).
const MaxOpsPerCall = 256

// chunked applies ops (no bucket twice) at at in calls of at most
// MaxOpsPerCall operations.
func (l *Limiter) chunked(ctx context.Context, at time.Time, ops []store.Op, results []store.Result) error {
	for len(ops) > 0 {
		n := min(len(ops), MaxOpsPerCall)
		if err := l.store.Do(ctx, at, store.Batch{Ops: ops[:n]}, results[:n]); err != nil {
			return err
		}
		ops, results = ops[n:], results[n:]
	}
	return nil
}

// rounds applies ops, some of which name one bucket, in rounds: round k
// holds the k-th operation on each bucket.
func (l *Limiter) rounds(ctx context.Context, at time.Time, ops []store.Op, results []store.Result) error {
	// occ[i] is how many earlier operations name ops[i]'s bucket.
	seen := make(map[string]int, len(ops))
	occ := make([]int, len(ops))
	n := 0
	for i := range ops {
		occ[i] = seen[ops[i].Key]
		seen[ops[i].Key]++
		n = max(n, occ[i]+1)
	}
	idx := make([]int, 0, len(ops))
	batch := make([]store.Op, 0, len(ops))
	out := make([]store.Result, len(ops))
	for r := range n {
		idx, batch = idx[:0], batch[:0]
		for i := range ops {
			if occ[i] == r {
				idx = append(idx, i)
				batch = append(batch, ops[i])
			}
		}
		if err := l.chunked(ctx, at, batch, out[:len(batch)]); err != nil {
			return err
		}
		for k, i := range idx {
			results[i] = out[k]
		}
	}
	return nil
}
