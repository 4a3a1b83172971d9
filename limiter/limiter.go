// Package limiter is Sluice's engine: the one way from a front door to a
// store. It turns transactions into store batches and the store's results
// into decisions, with either of two semantics:
//
//   - Key-value (Boulder) semantics, for Check, Spend, Refund, Reset and
//     Batch: a transaction names a bucket, the limit that applies to it and
//     a cost, and is one of check-and-spend, check-only, spend-only or
//     reset. A batch is all-or-nothing: when any checked transaction is
//     denied, nothing is spent. The batch's decision is the strictest of
//     its checked transactions': denied beats allowed, then the longer
//     RetryIn, then the fewer tokens remaining. Spend-only transactions
//     never change the decision.
//   - Envoy semantics, for Count: every transaction (one per request
//     descriptor) is counted on its own, over its limit or not, and a
//     request may count the same bucket more than once.
//
// A transaction counts against a GCRA limit (package gcra) or a fixed
// window (package window, Envoy's algorithm). ForBucket builds the
// transaction of a key-value limit (package limits) and ForRule the one of
// an Envoy descriptor rule (package descriptors), so front doors never
// build store operations themselves. The limiter tells the time by its
// clock; errors are *Error values whose Kind the front doors map to codes.
//
// A Limiter is safe for concurrent use.
package limiter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
	"unsafe"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/internal/keybuf"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/store"
	"github.com/sluice-rl/sluice/store/memory"
)

// MaxBatch is the largest number of transactions in one key-value batch.
const MaxBatch = 100

// ErrInvalid is matched (errors.Is) by every Invalid *Error, so callers can
// tell bad input with one check. The more specific sentinels below (and
// gcra.ErrInvalidCost, gcra.ErrInvalidLimit) are the causes of such errors.
var ErrInvalid = errors.New("invalid request")

// Sentinel causes of invalid requests.
var (
	ErrEmptyBatch      = fmt.Errorf("%w: empty batch", ErrInvalid)
	ErrBatchTooLarge   = fmt.Errorf("%w: batch has more than %d transactions", ErrInvalid, MaxBatch)
	ErrDuplicateBucket = fmt.Errorf("%w: duplicate bucket in batch", ErrInvalid)
	ErrInvalidKind     = fmt.Errorf("%w: invalid transaction kind", ErrInvalid)
	ErrEmptyKey        = fmt.Errorf("%w: empty bucket key", ErrInvalid)
	ErrInvalidWindow   = fmt.Errorf("%w: invalid window", ErrInvalid)
)

// Kind is what a transaction does to its bucket. It is the one kind enum of
// Sluice, shared with the stores (it is store.Kind); the zero value means
// CheckAndSpend in a Transaction.
type Kind = store.Kind

// The kinds.
const (
	// CheckAndSpend checks the bucket and, when the batch is allowed, spends.
	CheckAndSpend Kind = store.Spend
	// CheckOnly checks the bucket and never spends.
	CheckOnly Kind = store.Check
	// SpendOnly spends when the batch is allowed, without its own decision
	// counting.
	SpendOnly Kind = store.SpendOnly
	// RefundBucket gives the cost back to the bucket (Refund, and Envoy's
	// negative hits).
	RefundBucket Kind = store.Refund
	// ResetBucket makes the bucket full again.
	ResetBucket Kind = store.Reset
)

// ParseKind reads a kind as the HTTP API spells it: check_and_spend (also
// "" for the default), check_only, spend_only, refund or reset.
func ParseKind(s string) (Kind, error) {
	if s == "" {
		return CheckAndSpend, nil
	}
	for k := CheckAndSpend; k <= ResetBucket; k++ {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("%w %q, must be check_and_spend, check_only, spend_only, refund or reset", ErrInvalidKind, s)
}

// Window is a fixed-window limit: Limit hits per window of Length, a whole
// number of seconds, windows aligned to the Unix epoch (Envoy's algorithm).
type Window = store.Window

// Transaction is one request against one bucket. It counts against Limit
// (GCRA) unless Window.Length is set, when it counts in a fixed window.
type Transaction struct {
	// Key is the bucket key, e.g. "3:12345678". For a fixed window it is
	// the key without the window's start, which the store adds.
	Key string
	// Limit is the GCRA limit of the bucket. Ignored when Disabled, for
	// ResetBucket, and when Window is set.
	Limit gcra.Limit
	// Window, when its Length is above zero, makes the bucket a fixed
	// window instead of a GCRA bucket.
	Window Window
	// Disabled: no limit applies; the transaction is allowed without
	// touching the store.
	Disabled bool
	// Cost is the number of tokens or hits: 0 (a peek) up to Limit.Burst
	// for key-value calls, any number >= 0 for Count.
	Cost int64
	// Kind says what the transaction does; the zero value is CheckAndSpend.
	Kind Kind
	// Name and ID describe the bucket in error messages (the limit name and
	// the caller's id, such as NewOrdersPerAccount and "12345678");
	// optional.
	Name, ID string
}

// Decision is the answer to a transaction or a batch.
type Decision struct {
	// Allowed: the request may go ahead (for a key-value refund: something
	// was given back).
	Allowed bool
	// Remaining is the tokens (GCRA) or hits (fixed window) left;
	// math.MaxInt64 when no limit applied.
	Remaining int64
	// RetryIn is how long until the same request would be allowed.
	RetryIn time.Duration
	// ResetIn is how long until the bucket is full, or the window ends.
	ResetIn time.Duration
	// Count is, for a fixed window, the window's counter after the
	// transaction.
	Count int64
	// Cached reports a decision answered from the limiter's local
	// over-limit cache, without a store round trip (always denied; see
	// Options.LocalCacheBytes). A cached window's Count is the count last
	// seen plus the transaction's hits.
	Cached bool
	// Index is the transaction of the batch this decision came from, or -1
	// when no checked transaction applied a limit.
	Index int
}

// allowedDecision is the answer when no limit applies.
var allowedDecision = Decision{Allowed: true, Remaining: math.MaxInt64, Index: -1}

// Limiter applies transactions to a store. Create it with New.
type Limiter struct {
	store store.Store
	// oner is store when it answers single operations (store.Oner), for
	// the single-transaction calls; nil when not, or when traced.
	oner store.Oner
	// spender is store when it answers a single GCRA Spend or Check with
	// no operation to build (store.Spender), for Spend and Check; nil when
	// not, or when traced.
	spender store.Spender
	// mem is store when it is the memory store itself, for Spend, Check
	// and SpendFor; nil when not, or when traced.
	mem   *memory.Store
	clock clock.Clock
	cache *overLimitCache // nil when off
	// stopIncrement: Options.StopIncrementWhenOverLimit.
	stopIncrement bool
}

// New returns a Limiter over s, telling time by c; NewWithOptions takes
// optional settings too.
func New(s store.Store, c clock.Clock) *Limiter {
	o, _ := s.(store.Oner)
	sp, _ := s.(store.Spender)
	m, _ := s.(*memory.Store)
	return &Limiter{store: s, oner: o, spender: sp, mem: m, clock: c}
}

// Ping reports whether the limiter's store answers.
func (l *Limiter) Ping(ctx context.Context) error { return l.store.Ping(ctx) }

// Check reports whether txn would be allowed, spending nothing. Call it
// directly, as Spend.
func (l *Limiter) Check(ctx context.Context, txn Transaction) (Decision, error) {
	return l.single(ctx, txn.Key, txn, CheckOnly)
}

// Spend checks txn and, if allowed, spends its cost.
//
// Call it directly (l.Spend(ctx, limiter.Transaction{...})): the
// compiler then inlines it, and the key reaches the store in registers.
// A call it does not inline (through an interface, or from a closure the
// compiler copied while inlining the function that made it) passes the
// Transaction in memory, copied in a way the processor cannot forward,
// and each decision then waits for the previous one to end: about 90 to
// 150 ns more a decision over a million buckets (BenchmarkNotInlined in
// bench/peers; BENCHMARKS.md). SpendFor, whose arguments all travel in
// registers, costs the same either way.
func (l *Limiter) Spend(ctx context.Context, txn Transaction) (Decision, error) {
	return l.single(ctx, txn.Key, txn, CheckAndSpend)
}

// single answers txn, a Spend or Check (kind), with its own decision: a
// GCRA transaction the store.Spender answers when it is valid (its
// limit checked by gcra.Limit.ValidParams, with the one division the
// store needs), anything else through one, which also words the errors.
//
// Spend and Check stay small enough to be inlined, read txn's fields
// without taking its address, and pass its key on its own: the caller's
// Transaction is then built in place, and the key reaches the store's
// hash, and its prefetch of the bucket's slot, from the caller's
// registers. Taking txn's address in Spend made the caller copy it first
// in 16-byte moves from the 8-byte stores that built it, a copy the
// processor cannot forward from its store buffer: the next decision's
// key then waited for the previous decision's memory access to end, and
// a decision over a million buckets took about 80 ns more
// (BENCHMARKS.md). make vet fails when Spend or Check is no longer
// inlinable.
//
// Over the memory store itself it hashes the key and asks for its
// bucket first, before any check (memory.Store.PrefetchGCRA), then hands
// the hash to the store with the checked limit: the bucket's load
// overlaps the checks, and the key is hashed once. Over a million
// buckets that took 4 to 17 ns off a decision in BenchmarkPeers by the
// medians of alternated runs, the most with 57-byte keys, and 43 with
// 25-byte keys (BENCHMARKS.md, "The key hashed once, before the
// limiter's checks").
func (l *Limiter) single(ctx context.Context, key string, txn Transaction, kind Kind) (Decision, error) {
	if l.mem != nil {
		at := l.mem.PrefetchGCRA(key)
		if plainGCRA(key, txn.Disabled, txn.Window.Length, txn.Cost, txn.Limit.Burst) {
			if p, ok := txn.Limit.ValidParams(); ok {
				allowed, remaining, retryIn, resetIn := l.mem.SpendGCRAHashed(at, l.clock, key, p, txn.Cost, kind == CheckOnly)
				return Decision{Allowed: allowed, Remaining: remaining, RetryIn: retryIn, ResetIn: resetIn}, nil
			}
		}
		txn.Kind = kind
		return l.one(ctx, &txn)
	}
	if l.spender != nil && plainGCRA(key, txn.Disabled, txn.Window.Length, txn.Cost, txn.Limit.Burst) {
		if p, ok := txn.Limit.ValidParams(); ok {
			allowed, remaining, retryIn, resetIn := l.spender.SpendGCRA(l.clock, key, p, txn.Cost, kind == CheckOnly)
			return Decision{Allowed: allowed, Remaining: remaining, RetryIn: retryIn, ResetIn: resetIn}, nil
		}
	}
	txn.Kind = kind
	return l.one(ctx, &txn)
}

// plainGCRA reports whether a Spend or Check of key, from a transaction
// with these fields, is one a store.Spender answers once its limit is
// valid: enabled, a GCRA limit (no window), a key, and a cost from 0 to
// the burst. It takes the fields, not the Transaction: passed whole, the
// Transaction was copied into single's frame first.
func plainGCRA(key string, disabled bool, window time.Duration, cost, burst int64) bool {
	return !disabled && window == 0 && key != "" && cost >= 0 && cost <= burst
}

// SpendFor spends cost from the bucket of id under the limit name in set:
// set.Resolve and Spend in one call. An unknown name or a malformed id is
// an Invalid error (field "name" or "id") wrapping Resolve's. Over a store
// that answers single operations (store.Oner: the memory store) it
// allocates nothing for ids whose key needs no parsing of a domain name.
//
// Over the memory store itself it calls the store directly, with the key
// of an account id of up to 16 bytes in two registers (limits.Set.KeyWords
// and memory.Store.SpendGCRAShort: a key written to memory and read back
// at once by the store's hash waits for the stores before it), any other
// key (limits.Set.AppendKey) on its own stack: no pooled buffer, no Bucket,
// no call through an interface, which would make the key escape. With a
// million buckets that brevity is most of the speed: a decision's memory
// accesses overlap with the next decision's only while the work between
// them is short. About 270 instructions (about 20 ns of work) more
// between two decisions of Spend cost it 80 ns or more with a million
// buckets (BenchmarkSpendWithWork in bench/peers, BENCHMARKS.md).
//
// The most common case goes shorter still: a name passed as package
// limits' constant, taking account ids, which no override can apply to,
// and an id of at least 4 bytes whose key is at most 16. The name's entry
// (limits.Set.Short), the id's words and the key's are read inline, and
// the store is asked for the bucket's slot (memory.Store.PrefetchShort)
// before the id's bytes are checked, with no call before that one. Every
// other case, and an id that fails the checks, goes by spendForSet, which
// answers all of them.
func (l *Limiter) SpendFor(ctx context.Context, set *limits.Set, name, id string, cost int64) (Decision, error) {
	if l.mem != nil && set != nil {
		if k := set.Short(name); k != nil && k.OK && len(id) >= 4 && k.Len+len(id) <= keybuf.Max &&
			!set.MayOverrideShort(k) && cost >= 0 && cost <= k.Params.Burst {
			ilo, ihi := keybuf.Load4(id)
			lo, hi := keybuf.JoinNear(k.Lo, k.Hi, k.Len, ilo, ihi)
			n := k.Len + len(id)
			l.mem.PrefetchShort(lo, hi, n)
			// As KeyWords checks an account id: digits, no leading zero.
			if keybuf.Digits(ilo, ihi, len(id)) && byte(ilo) != '0' {
				allowed, remaining, retryIn, resetIn := l.mem.SpendGCRAShort(l.clock, lo, hi, n, k.Params, cost, false)
				return Decision{Allowed: allowed, Remaining: remaining, RetryIn: retryIn, ResetIn: resetIn}, nil
			}
		}
	}
	return l.spendForSet(ctx, set, name, id, cost)
}

// spendForSet is SpendFor for every name, id and cost, over every store.
func (l *Limiter) spendForSet(ctx context.Context, set *limits.Set, name, id string, cost int64) (Decision, error) {
	if l.mem != nil {
		// An account id's key in registers, from the Set to the store.
		// Its limit's Params were compiled with the Set: no division here.
		if lo, hi, n, p, ok := set.KeyWords(name, id); ok && cost >= 0 && cost <= p.Burst {
			allowed, remaining, retryIn, resetIn := l.mem.SpendGCRAShort(l.clock, lo, hi, n, p, cost, false)
			return Decision{Allowed: allowed, Remaining: remaining, RetryIn: retryIn, ResetIn: resetIn}, nil
		}
		// The key is not kept: the store copies what it keeps. 64 bytes
		// hold every key but those built from a domain name (an IPv6
		// address's is at most 45 bytes and its name's prefix).
		var buf [64]byte
		key, limit, enabled, err := set.AppendKey(buf[:0], name, id)
		if err == nil && enabled && len(key) > 0 && cost >= 0 && cost <= limit.Burst {
			// As single does for Spend. Written out here and in single,
			// not shared: a helper both call, one call more on the way
			// to the store, made limiter.Spend slower with a million
			// fresh keys (BENCHMARKS.md, tried and not kept).
			if p, ok := limit.ValidParams(); ok {
				allowed, remaining, retryIn, resetIn := l.mem.SpendGCRA(l.clock, unsafe.String(unsafe.SliceData(key), len(key)), p, cost, false)
				return Decision{Allowed: allowed, Remaining: remaining, RetryIn: retryIn, ResetIn: resetIn}, nil
			}
		}
		// Errors, no limit, a cost out of bounds: as any other store.
	}
	return l.spendFor(ctx, set, name, id, cost)
}

// spendFor is SpendFor over any other store, and for what the memory
// store's direct call does not answer (errors, no limit, a cost out of
// bounds): the bucket key built in the limiter's pooled scratch, which
// the store does not keep, and the transaction answered by one.
func (l *Limiter) spendFor(ctx context.Context, set *limits.Set, name, id string, cost int64) (Decision, error) {
	sc := scratchPool.Get().(*Scratch)
	defer sc.release()
	var b limits.Bucket
	key, err := set.AppendResolve(sc.key[:0], name, id, &b)
	sc.key = key[:0]
	if err != nil {
		return Decision{}, ResolveErr(err)
	}
	txn := Transaction{Limit: b.Limit, Disabled: !b.Enabled, Cost: cost, Kind: CheckAndSpend, Name: b.Name.Text, ID: id}
	if l.oner != nil {
		// The key's bytes stay in sc, unchanged, until this call returns;
		// the store copies what it keeps (store.Oner's contract), and
		// nothing else keeps the key: errors quote it into new strings.
		txn.Key = unsafe.String(unsafe.SliceData(key), len(key))
	} else {
		txn.Key = string(key)
	}
	return l.one(ctx, &txn)
}

// ResolveErr is the Invalid error for a failed limits.Set.Resolve: on
// field "name" for an unknown name, else on "id", wrapping err.
func ResolveErr(err error) error {
	field := "id"
	if errors.Is(err, limits.ErrUnknownName) {
		field = "name"
	}
	return InvalidErr(field, "", err)
}

// Reset makes the bucket of txn full again. Its decision is allowed, with
// the burst remaining.
func (l *Limiter) Reset(ctx context.Context, txn Transaction) (Decision, error) {
	txn.Kind = ResetBucket
	return l.one(ctx, &txn)
}

// ResetAll makes the bucket of each transaction full again, up to MaxBatch
// buckets, each named once, in one store call. Costs are ignored. The
// decision is allowed, with the least Remaining over the limited buckets
// (Index names its transaction; -1, with Remaining math.MaxInt64, when none
// is limited). The caller's transactions are left as they are.
func (l *Limiter) ResetAll(ctx context.Context, txns ...Transaction) (Decision, []Decision, error) {
	if err := ValidBatchSize(len(txns)); err != nil {
		return Decision{}, nil, err
	}
	var buf [ownTxns]Transaction
	txns = withKind(buf[:0], txns, ResetBucket)
	if err := validate(txns, true); err != nil {
		return Decision{}, nil, err
	}
	each := make([]Decision, len(txns))
	if err := l.apply(ctx, txns, each, false); err != nil {
		return Decision{}, nil, err
	}
	batch := Decision{Allowed: true, Remaining: math.MaxInt64, Index: -1}
	for i, d := range each {
		if !txns[i].Disabled && d.Remaining < batch.Remaining {
			batch.Remaining, batch.Index = d.Remaining, i
		}
	}
	return batch, each, nil
}

// one answers a single key-value transaction with its own decision.
func (l *Limiter) one(ctx context.Context, txn *Transaction) (Decision, error) {
	if l.oner != nil && !txn.Disabled {
		// No batch to build: the store answers the one operation.
		if err := validOne(txn); err != nil {
			return Decision{}, err
		}
		if l.cache != nil && txn.Kind == ResetBucket {
			l.cache.forget(txn.Key)
		}
		r, err := l.oner.DoOne(ctx, l.clock, op(txn))
		if err != nil {
			return Decision{}, storeError("apply batch: ", err)
		}
		return decision(&r, 0), nil
	}
	txns := [1]Transaction{*txn}
	var each [1]Decision
	if err := validate(txns[:], false); err != nil {
		return Decision{}, err
	}
	if err := l.apply(ctx, txns[:], each[:], true); err != nil {
		return Decision{}, err
	}
	return each[0], nil
}

// Validate checks a key-value batch against the rules: 1 to MaxBatch
// transactions, no bucket twice, known kinds, valid limits and costs
// between 0 and burst. A zero Kind becomes CheckAndSpend.
func Validate(txns []Transaction) error { return validate(txns, true) }

// ValidBatchSize reports a key-value batch of n transactions that is empty
// or larger than MaxBatch, so that a front door can refuse it before any
// other work.
func ValidBatchSize(n int) error {
	switch {
	case n == 0:
		return &Error{Kind: Invalid, Field: "transactions", Msg: fmt.Sprintf("empty batch, want 1 to %d transactions", MaxBatch), Err: ErrEmptyBatch}
	case n > MaxBatch:
		return &Error{Kind: Invalid, Field: "transactions", Msg: fmt.Sprintf("batch has %d transactions, at most %d allowed", n, MaxBatch), Err: ErrBatchTooLarge}
	}
	return nil
}

// ownTxns is how many transactions Batch, Refund and ResetAll copy on
// their own stack; a larger batch's copy is allocated.
const ownTxns = 8

// withKind returns a copy of txns, appended to buf, each of kind k, or
// when k is 0 of its own kind (CheckAndSpend for a zero one): a call
// works on its own copy and never writes to its caller's transactions,
// which the caller may use again, or share between goroutines.
func withKind(buf, txns []Transaction, k Kind) []Transaction {
	own := append(buf, txns...)
	for i := range own {
		switch {
		case k != 0:
			own[i].Kind = k
		case own[i].Kind == 0:
			own[i].Kind = CheckAndSpend
		}
	}
	return own
}

// validate is Validate; batch says whether messages name the transaction
// ("transaction 2: …"), as they do for a batch and not for a single call.
func validate(txns []Transaction, batch bool) error {
	if err := ValidBatchSize(len(txns)); err != nil {
		return err
	}
	for i := range txns {
		t := &txns[i]
		if err := validOne(t); err != nil {
			if batch {
				return At(err, "transactions", "transaction", i)
			}
			return err
		}
		if err := duplicate(txns[:i], t, i); err != nil {
			return err // its message names both transactions
		}
	}
	return nil
}

// validOne checks one transaction on its own: a zero Kind becomes
// CheckAndSpend, then validTransaction and validCost.
func validOne(t *Transaction) error {
	if t.Kind == 0 {
		t.Kind = CheckAndSpend
	}
	if err := validTransaction(t); err != nil {
		return err
	}
	return validCost(t)
}

// validTransaction checks what every transaction needs: a key, a known
// kind, a valid limit or window.
func validTransaction(t *Transaction) error {
	switch {
	case t.Key == "":
		return &Error{Kind: Invalid, Field: "key", Msg: "empty bucket key", Err: ErrEmptyKey}
	case t.Kind < CheckAndSpend || t.Kind > ResetBucket:
		return &Error{Kind: Invalid, Field: "kind", Msg: fmt.Sprintf("invalid kind %d", t.Kind), Err: ErrInvalidKind}
	case t.Disabled:
		return nil
	case t.Window.Length != 0:
		if t.Window.Length < time.Second || t.Window.Length%time.Second != 0 || t.Window.Limit < 0 {
			return &Error{Kind: Invalid, Field: "window",
				Msg: fmt.Sprintf("invalid window of %d per %s for bucket %s: the length must be a whole number of seconds and the limit >= 0", t.Window.Limit, t.Window.Length, t.Key),
				Err: ErrInvalidWindow}
		}
	case t.Kind != ResetBucket:
		if err := t.Limit.Valid(); err != nil {
			return InvalidErr("limit", fmt.Sprintf("%s: ", describe(t)), err)
		}
	}
	return nil
}

// validCost checks a key-value cost: >= 0, and at most the burst.
func validCost(t *Transaction) error {
	switch {
	case t.Kind == ResetBucket:
		return nil
	case t.Cost < 0:
		what := t.Name
		if what == "" {
			what = "bucket " + t.Key
		}
		return &Error{Kind: Invalid, Field: "cost", Msg: fmt.Sprintf("invalid cost %d for %s, must be >= 0", t.Cost, what), Err: gcra.ErrInvalidCost}
	case !t.Disabled && t.Window.Length == 0 && t.Cost > t.Limit.Burst:
		return &Error{Kind: Invalid, Field: "cost", Msg: fmt.Sprintf("invalid cost %d for %s, must be at most the burst %d", t.Cost, describe(t), t.Limit.Burst), Err: gcra.ErrInvalidCost}
	}
	return nil
}

// duplicate reports t, the i-th transaction, when one of before names its
// bucket too.
func duplicate(before []Transaction, t *Transaction, i int) error {
	for j := range before {
		if before[j].Key != t.Key {
			continue
		}
		msg := fmt.Sprintf("duplicate bucket: transactions %d and %d are both for bucket %s; a batch may name each bucket once", j, i, t.Key)
		if t.Name != "" {
			msg = fmt.Sprintf("duplicate bucket: transactions %d and %d (%s %s and %s) are both for bucket %s; a batch may name each bucket once",
				j, i, t.Name, limits.Quote(before[j].ID), limits.Quote(t.ID), t.Key)
		}
		return &Error{Kind: Invalid, Field: fmt.Sprintf("transactions[%d].id", i), Msg: msg, Err: ErrDuplicateBucket}
	}
	return nil
}

// describe names t's bucket for a message: `NewOrdersPerAccount "1234"`,
// or "bucket <key>" without a name.
func describe(t *Transaction) string {
	switch {
	case t.Name == "":
		return "bucket " + t.Key
	case t.ID == "":
		return t.Name
	}
	return t.Name + " " + limits.Quote(t.ID)
}

// Batch applies txns all-or-nothing and returns the batch's decision and one
// decision per transaction (a disabled transaction's is allowed with
// math.MaxInt64 remaining). Refund and reset transactions may not be part
// of a batch. A zero Kind is CheckAndSpend; the caller's transactions are
// left as they are.
func (l *Limiter) Batch(ctx context.Context, txns []Transaction) (Decision, []Decision, error) {
	if err := ValidBatchSize(len(txns)); err != nil {
		return Decision{}, nil, err
	}
	var buf [ownTxns]Transaction
	txns = withKind(buf[:0], txns, 0)
	if err := validate(txns, true); err != nil {
		return Decision{}, nil, err
	}
	for i := range txns {
		if k := txns[i].Kind; k == RefundBucket || k == ResetBucket {
			return Decision{}, nil, At(&Error{Kind: Invalid, Field: "kind",
				Msg: fmt.Sprintf("kind %s cannot be part of a batch, must be check_and_spend, check_only or spend_only", k), Err: ErrInvalidKind},
				"transactions", "transaction", i)
		}
	}
	each := make([]Decision, len(txns))
	if err := l.apply(ctx, txns, each, true); err != nil {
		return Decision{}, nil, err
	}
	batch := allowedDecision
	for i := range txns {
		if !txns[i].Disabled && (txns[i].Kind == CheckAndSpend || txns[i].Kind == CheckOnly) {
			batch = Stricter(batch, each[i])
		}
	}
	return batch, each, nil
}

// Scratch holds the store operations and results of a call, reused from
// call to call: nothing refers to them once the decisions are made. The
// limiter keeps a pool of them; a caller that pools its own request state
// (the Envoy front door) keeps one there and passes it to CountWith, which
// saves a second pool round trip per request. The zero value is ready. A
// Scratch is not safe for concurrent use.
type Scratch struct {
	ops     []store.Op
	results []store.Result
	// With the local cache or StopIncrementWhenOverLimit (see countLocal):
	idx []int      // the transaction of each op
	pre []store.Op // the peeks before counting
	// With SpendFor: the bucket key.
	key []byte
}

var scratchPool = sync.Pool{New: func() any { return new(Scratch) }}

// maxScratch bounds the arrays kept for reuse: an unusually large call
// leaves its arrays to the garbage collector.
const maxScratch = 64

// maxScratchKey bounds the key buffer kept for reuse: an id's key is
// usually under a hundred bytes, and at most about a kilobyte.
const maxScratchKey = 2 << 10

// sized returns a with length n, reusing its array when large enough.
func sized[T any](a []T, n int) []T {
	if cap(a) < n {
		return make([]T, n)
	}
	return a[:n]
}

// Reset drops what the arrays refer to and reports whether they are small
// enough to keep for reuse; when not, it lets them go.
func (sc *Scratch) Reset() bool {
	if max(cap(sc.ops), cap(sc.results), cap(sc.idx), cap(sc.pre)) > maxScratch || cap(sc.key) > maxScratchKey {
		sc.ops, sc.results, sc.idx, sc.pre, sc.key = nil, nil, nil, nil, nil
		return false
	}
	clear(sc.ops) // what the call used: the rest is already clear
	clear(sc.results)
	clear(sc.pre)
	sc.ops, sc.results, sc.idx, sc.pre = sc.ops[:0], sc.results[:0], sc.idx[:0], sc.pre[:0]
	return true
}

// load fills sc with the store operations of txns' enabled transactions,
// and room for their results, and returns the operations.
func (sc *Scratch) load(txns []Transaction) []store.Op {
	ops := sc.ops[:0]
	for i := range txns {
		if !txns[i].Disabled {
			ops = append(ops, op(&txns[i]))
		}
	}
	sc.ops = ops
	sc.results = sized(sc.results, len(ops))
	return ops
}

// spread writes each transaction's decision to out from the store's
// results, in order; a disabled transaction is allowed with no limit.
func (sc *Scratch) spread(txns []Transaction, out []Decision) {
	k := 0
	for i := range txns {
		if txns[i].Disabled {
			out[i] = allowedDecision
			out[i].Index = i
			continue
		}
		out[i] = decision(&sc.results[k], i)
		k++
	}
}

func (sc *Scratch) release() {
	if sc.Reset() {
		scratchPool.Put(sc)
	}
}

// op is the store operation of an enabled transaction.
func op(t *Transaction) store.Op {
	o := store.Op{Key: t.Key, Kind: t.Kind, Cost: t.Cost}
	if t.Window.Length != 0 {
		o.Algorithm, o.Window = store.FixedWindow, t.Window
	} else {
		o.Algorithm, o.Limit = store.GCRA, t.Limit
	}
	return o
}

// decision is a transaction's decision from its store result.
func decision(r *store.Result, i int) Decision {
	return Decision{Allowed: r.Allowed, Remaining: r.Remaining, RetryIn: r.RetryIn, ResetIn: r.ResetIn, Count: r.Count, Index: i}
}

// apply runs one store operation per enabled transaction, in one batch at
// the clock's now, and writes each transaction's decision to each; a
// disabled transaction is allowed with no limit and never reaches the
// store.
func (l *Limiter) apply(ctx context.Context, txns []Transaction, each []Decision, allOrNothing bool) error {
	what := "apply batch: "
	if !allOrNothing {
		what = "apply refund: "
	}
	if l.cache != nil {
		// A refund or reset may bring a bucket back under its limit.
		for i := range txns {
			if k := txns[i].Kind; k == RefundBucket || k == ResetBucket {
				l.cache.forget(txns[i].Key)
			}
		}
	}
	sc := scratchPool.Get().(*Scratch)
	defer sc.release()
	if ops := sc.load(txns); len(ops) > 0 {
		if err := l.store.Do(ctx, l.clock.Now(), store.Batch{Ops: ops, AllOrNothing: allOrNothing}, sc.results); err != nil {
			return storeError(what, err)
		}
	}
	sc.spread(txns, each)
	return nil
}

// Stricter returns the stricter of two decisions: a denied one beats an
// allowed one, then the longer RetryIn, then the fewer remaining; on a tie
// b, the one decided later in a batch, as Boulder's stricter picks.
func Stricter(a, b Decision) Decision {
	if a.Allowed != b.Allowed {
		if !a.Allowed {
			return a
		}
		return b
	}
	if a.RetryIn != b.RetryIn {
		if a.RetryIn > b.RetryIn {
			return a
		}
		return b
	}
	if b.Remaining <= a.Remaining {
		return b
	}
	return a
}

// Refund gives the cost of each transaction back to its bucket, never past
// full. A bucket that does not exist is left alone: like a full one, it
// gets nothing back, and its decision is not allowed, with the burst
// remaining. The decision is allowed when every bucket got something back;
// Remaining is the least and RetryIn and ResetIn the longest over the
// buckets. The caller's transactions are left as they are: the same ones
// can be spent again.
func (l *Limiter) Refund(ctx context.Context, txns ...Transaction) (Decision, []Decision, error) {
	if err := ValidBatchSize(len(txns)); err != nil {
		return Decision{}, nil, err
	}
	var buf [ownTxns]Transaction
	txns = withKind(buf[:0], txns, RefundBucket)
	if err := validate(txns, len(txns) > 1); err != nil {
		return Decision{}, nil, err
	}
	each := make([]Decision, len(txns))
	if err := l.apply(ctx, txns, each, false); err != nil {
		return Decision{}, nil, err
	}
	batch := Decision{Allowed: true, Remaining: math.MaxInt64, Index: -1}
	enabled := false
	for i, d := range each {
		if txns[i].Disabled {
			continue
		}
		enabled = true
		batch.Allowed = batch.Allowed && d.Allowed
		if d.Remaining < batch.Remaining {
			batch.Remaining, batch.Index = d.Remaining, i
		}
		batch.RetryIn = max(batch.RetryIn, d.RetryIn)
		batch.ResetIn = max(batch.ResetIn, d.ResetIn)
	}
	batch.Allowed = batch.Allowed && enabled
	return batch, each, nil
}
