// Package store defines the storage contract every Sluice backend meets: a
// batch of operations on buckets, applied atomically with the rate limit
// algorithm evaluated inside the backend's critical section, so concurrent
// callers never over-admit.
//
// Backends live in subpackages (store/memory, store/redis); the conformance
// suite in store/storetest runs the same scenarios against each of them.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
)

// Algorithm says how a bucket counts.
type Algorithm uint8

const (
	// GCRA buckets keep a theoretical arrival time (package gcra).
	GCRA Algorithm = iota + 1
	// FixedWindow buckets keep a counter per epoch-aligned window (package
	// window), as envoyproxy/ratelimit does.
	FixedWindow
)

// Kind is what an operation does to its bucket. It is Sluice's one kind
// enum: limiter.Kind and client.Kind are this type, and each wire format
// translates to it at its edge. The zero value is not a valid kind.
type Kind uint8

const (
	// Spend takes Cost tokens (GCRA) or adds Cost hits (FixedWindow). Its
	// decision counts toward the batch's decision.
	Spend Kind = iota + 1
	// Check decides exactly as Spend would but never changes the bucket.
	Check
	// SpendOnly takes Cost tokens when it can, without its decision counting
	// toward the batch's decision. In an all-or-nothing batch it is applied
	// only when the batch is allowed.
	SpendOnly
	// Refund gives Cost tokens back (GCRA, never past a full bucket; Allowed
	// reports whether anything was given back) or removes Cost hits
	// (FixedWindow, never below zero; Allowed reports whether the count is
	// within the limit afterwards). A missing bucket is left missing.
	Refund
	// Reset deletes the bucket: it is full again. Its Result is allowed
	// with Remaining equal to the burst (GCRA) or the limit (FixedWindow).
	Reset
)

// String names the kind as Sluice's HTTP API spells a transaction's
// kind: check_and_spend, check_only, spend_only, refund, reset.
func (k Kind) String() string {
	switch k {
	case Spend:
		return "check_and_spend"
	case Check:
		return "check_only"
	case SpendOnly:
		return "spend_only"
	case Refund:
		return "refund"
	case Reset:
		return "reset"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Window is a fixed-window limit: Limit hits per window of Length. Length
// is a whole number of seconds.
type Window struct {
	Limit  int64
	Length time.Duration
}

// Op is one operation of a batch.
type Op struct {
	// Key names the bucket. For FixedWindow buckets it is the key without
	// the window; the backend adds the window start.
	Key       string
	Algorithm Algorithm
	Kind      Kind
	// Limit is the GCRA limit; it MUST be valid for GCRA operations.
	Limit gcra.Limit
	// Window is the fixed-window limit; Length MUST be positive for
	// FixedWindow operations.
	Window Window
	// Cost is the number of tokens or hits, >= 0. Cost 0 peeks.
	Cost int64
}

// Result is the outcome of one Op.
type Result struct {
	// Allowed: the operation was within the limit (Spend, Check, SpendOnly),
	// or gave capacity back (Refund). Reset is always allowed.
	Allowed bool
	// Remaining tokens (GCRA) or hits (FixedWindow) after the operation.
	Remaining int64
	// RetryIn is how long until an operation of the same cost would be
	// allowed; zero when one would be allowed now.
	RetryIn time.Duration
	// ResetIn is how long until the bucket is full (GCRA) or the window ends
	// (FixedWindow).
	ResetIn time.Duration
	// Count is, for FixedWindow, the window's counter after the operation.
	Count int64
	// Applied says whether the bucket was changed by this operation.
	Applied bool
}

// Batch is a list of operations applied together.
type Batch struct {
	Ops []Op
	// AllOrNothing: when any Spend or Check operation of the batch is denied,
	// no operation of the batch changes any bucket. Fixed-window hits are
	// not subject to it (Envoy counts every hit).
	AllOrNothing bool
}

// Store holds bucket state and applies batches to it.
//
// Implementations MUST be safe for concurrent use, MUST evaluate each batch
// as if alone (no other batch interleaves between reading and writing a
// bucket), and MUST NOT block longer than ctx allows. A missing bucket is
// full (GCRA) or at zero (FixedWindow).
type Store interface {
	// Do applies b at now and writes one Result per operation into out,
	// which MUST have room for len(b.Ops). A batch MUST NOT name the same
	// bucket twice. On error, no Result may be relied on; errors from an
	// unreachable backend wrap ErrUnavailable.
	Do(ctx context.Context, now time.Time, b Batch, out []Result) error
	// Ping reports whether the store answers.
	Ping(ctx context.Context) error
	// Close releases the store's resources. Do MUST NOT be called after it.
	Close() error
}

// Oner is a Store that also answers a single operation on its own, with
// no batch to build: DoOne(ctx, clk, op) answers as Do does for a batch
// of op alone at clk's time, read once, as late as the store can (after
// it has asked for the bucket's memory), and returns its Result. It MUST
// NOT keep op.Key, or any string sharing its bytes, after it returns: the
// caller may build the key in memory it reuses. The limiter uses it for
// its single-transaction calls when the store has it.
type Oner interface {
	Store
	DoOne(ctx context.Context, clk clock.Clock, op Op) (Result, error)
}

// Spender is a Store that also answers a single GCRA Spend or Check with
// no operation to build or check: SpendGCRA(clk, key, p, cost, check)
// answers as DoOne does for the Op{Key: key, Algorithm: GCRA, Kind: Spend
// (Check when check), Limit: l, Cost: cost}, where p is l.Params(), and
// returns its Result's Allowed, Remaining, RetryIn and ResetIn. The
// caller MUST have checked what DoOne would: key not empty, l valid
// (gcra.Limit.ValidParams gives p and says so) and cost between 0 and
// l.Burst; the store checks nothing, so that the decision is the least
// work it can be. It keeps no reference to key, as Oner. The limiter uses
// it for Spend and Check when the store has it.
//
// It returns four values, not a Result: Go keeps a struct of more than
// four fields in memory, and copying one through a call's results costs
// the processor a store it cannot forward (see limiter's single).
type Spender interface {
	Oner
	SpendGCRA(clk clock.Clock, key string, p gcra.Params, cost int64, check bool) (allowed bool, remaining int64, retryIn, resetIn time.Duration)
}

// ErrUnavailable reports a backend that cannot be reached or did not answer
// in time.
var ErrUnavailable = errors.New("store unavailable")

// ErrBadBatch reports a batch a store refuses: a repeated bucket, an unknown
// algorithm or kind, or an output slice that is too short.
var ErrBadBatch = errors.New("bad batch")

// Validate reports an operation no backend accepts, wrapping ErrBadBatch:
// an unknown algorithm or kind, an invalid GCRA limit (a Reset needs
// none), a window that is not a whole number of seconds, a negative cost.
func (op *Op) Validate() error {
	switch op.Algorithm {
	case GCRA:
		if op.Kind != Reset {
			if err := op.Limit.Valid(); err != nil {
				return fmt.Errorf("%w: bucket %q: %w", ErrBadBatch, op.Key, err)
			}
		}
	case FixedWindow:
		if op.Window.Length < time.Second || op.Window.Length%time.Second != 0 {
			return fmt.Errorf("%w: bucket %q: window length %s is not a whole number of seconds", ErrBadBatch, op.Key, op.Window.Length)
		}
	default:
		return fmt.Errorf("%w: bucket %q: unknown algorithm %d", ErrBadBatch, op.Key, op.Algorithm)
	}
	if op.Kind < Spend || op.Kind > Reset {
		return fmt.Errorf("%w: bucket %q: unknown kind %d", ErrBadBatch, op.Key, op.Kind)
	}
	if op.Cost < 0 {
		return fmt.Errorf("%w: bucket %q: negative cost %d", ErrBadBatch, op.Key, op.Cost)
	}
	return nil
}

// Check returns the error, wrapping ErrBadBatch, with which every store
// refuses b: out shorter than the batch, an invalid operation (see
// Op.Validate), a bucket named twice.
func (b Batch) Check(out []Result) error {
	if len(out) < len(b.Ops) {
		return fmt.Errorf("%w: %d results for %d operations", ErrBadBatch, len(out), len(b.Ops))
	}
	for i := range b.Ops {
		if err := b.Ops[i].Validate(); err != nil {
			return err
		}
	}
	if _, i, dup := Duplicate(b.Ops); dup {
		return fmt.Errorf("%w: bucket %q named twice", ErrBadBatch, b.Ops[i].Key)
	}
	return nil
}

// Duplicate reports the first operation of ops whose bucket an earlier one
// names too: the indexes of both, and ok. It costs O(n) for large batches.
func Duplicate(ops []Op) (first, second int, ok bool) {
	if len(ops) <= 16 {
		for i := 1; i < len(ops); i++ {
			for j := range i {
				if ops[j].Key == ops[i].Key {
					return j, i, true
				}
			}
		}
		return 0, 0, false
	}
	seen := make(map[string]int, len(ops))
	for i := range ops {
		if j, dup := seen[ops[i].Key]; dup {
			return j, i, true
		}
		seen[ops[i].Key] = i
	}
	return 0, 0, false
}

// OverrideStore is an optional interface of a Store: it keeps the
// key-value limit overrides set at runtime (package limits, RuntimeSpec)
// beside the buckets, as opaque documents by override key, so that every
// service sharing the store sees them and they outlive a restart where the
// backend does. The documents are small (well under 1 KiB) and few (at
// most thousands).
//
// Implementations MUST be safe for concurrent use and MUST NOT block longer
// than ctx allows; errors from an unreachable backend wrap ErrUnavailable.
// A wrapper store (fallback, split) implements it by passing the calls to
// the store that holds the buckets, and answers ErrUnsupported when that
// store does not implement it.
type OverrideStore interface {
	// Overrides returns every document, by key; none is an empty map and
	// no error.
	Overrides(ctx context.Context) (map[string][]byte, error)
	// SaveOverride stores doc under key, replacing any document there.
	SaveOverride(ctx context.Context, key string, doc []byte) error
	// DeleteOverride removes the document under key and reports whether
	// there was one.
	DeleteOverride(ctx context.Context, key string) (bool, error)
}

// ErrUnsupported reports a store that does not keep runtime overrides (see
// OverrideStore).
var ErrUnsupported = errors.New("the store does not keep runtime overrides")

// ForwardOverrides implements OverrideStore for a wrapper store by passing
// every call to the store it names, the one that holds the buckets (a
// fallback's primary, a split's main store), and answering ErrUnsupported
// when that store does not keep overrides. Embed it in the wrapper.
type ForwardOverrides struct {
	To Store
}

var _ OverrideStore = ForwardOverrides{}

// to returns the named store as an OverrideStore, or ErrUnsupported.
func (f ForwardOverrides) to() (OverrideStore, error) {
	if o, ok := f.To.(OverrideStore); ok {
		return o, nil
	}
	return nil, fmt.Errorf("%w: %T", ErrUnsupported, f.To)
}

// Overrides implements OverrideStore.
func (f ForwardOverrides) Overrides(ctx context.Context) (map[string][]byte, error) {
	o, err := f.to()
	if err != nil {
		return nil, err
	}
	return o.Overrides(ctx)
}

// SaveOverride implements OverrideStore.
func (f ForwardOverrides) SaveOverride(ctx context.Context, key string, doc []byte) error {
	o, err := f.to()
	if err != nil {
		return err
	}
	return o.SaveOverride(ctx, key, doc)
}

// DeleteOverride implements OverrideStore.
func (f ForwardOverrides) DeleteOverride(ctx context.Context, key string) (bool, error) {
	o, err := f.to()
	if err != nil {
		return false, err
	}
	return o.DeleteOverride(ctx, key)
}
