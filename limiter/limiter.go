// Package limiter turns rate limit requests into store batches and store
// results into decisions.
//
// It follows Let's Encrypt Boulder's key-value semantics: a transaction
// names a bucket, the limit that applies to it and a cost, and is one of
// check-and-spend, check-only, spend-only or reset. A batch is
// all-or-nothing: when any checked transaction is denied, nothing is spent.
// The batch's decision is the strictest of its checked transactions':
// denied beats allowed, then the longer RetryIn, then the fewer tokens
// remaining. Spend-only transactions never change the decision.
//
// A Limiter is safe for concurrent use.
package limiter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluice-rl/sluice/clock"
	"github.com/sluice-rl/sluice/gcra"
	"github.com/sluice-rl/sluice/store"
)

// MaxBatch is the largest number of transactions in one batch.
const MaxBatch = 100

// ErrInvalid is wrapped by every error the limiter returns for bad input, so
// the front doors can answer InvalidArgument or 400 with one check. The more
// specific sentinels below (and gcra.ErrInvalidCost, gcra.ErrInvalidLimit)
// are wrapped too.
var ErrInvalid = errors.New("invalid request")

// Sentinel errors for invalid requests.
var (
	ErrEmptyBatch      = fmt.Errorf("%w: empty batch", ErrInvalid)
	ErrBatchTooLarge   = fmt.Errorf("%w: batch has more than %d transactions", ErrInvalid, MaxBatch)
	ErrDuplicateBucket = fmt.Errorf("%w: duplicate bucket in batch", ErrInvalid)
	ErrInvalidKind     = fmt.Errorf("%w: invalid transaction kind", ErrInvalid)
	ErrEmptyKey        = fmt.Errorf("%w: empty bucket key", ErrInvalid)
)

// Kind is what a transaction does.
type Kind uint8

const (
	// CheckAndSpend checks the bucket and, when the batch is allowed, spends.
	CheckAndSpend Kind = iota + 1
	// CheckOnly checks the bucket and never spends.
	CheckOnly
	// SpendOnly spends when the batch is allowed, without its own decision
	// counting.
	SpendOnly
	// ResetBucket makes the bucket full again.
	ResetBucket
)

// String returns the kind's name as the API spells it.
func (k Kind) String() string {
	switch k {
	case CheckAndSpend:
		return "check_and_spend"
	case CheckOnly:
		return "check_only"
	case SpendOnly:
		return "spend_only"
	case ResetBucket:
		return "reset"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ParseKind reads a kind name: check_and_spend (also "" for the default),
// check_only, spend_only or reset.
func ParseKind(s string) (Kind, error) {
	switch s {
	case "", "check_and_spend":
		return CheckAndSpend, nil
	case "check_only":
		return CheckOnly, nil
	case "spend_only":
		return SpendOnly, nil
	case "reset":
		return ResetBucket, nil
	}
	return 0, fmt.Errorf("%w %q, must be check_and_spend, check_only, spend_only or reset", ErrInvalidKind, s)
}

// Transaction is one request against one bucket.
type Transaction struct {
	// Key is the bucket key, e.g. "3:12345678".
	Key string
	// Limit applies to the bucket. Ignored when Disabled.
	Limit gcra.Limit
	// Disabled: no limit applies; the transaction is allowed without
	// touching the store.
	Disabled bool
	// Cost is the number of tokens, between 0 (a peek) and Limit.Burst.
	Cost int64
	// Kind says what the transaction does; the zero value is CheckAndSpend.
	Kind Kind
}

// Decision is the answer to a transaction or a batch.
type Decision struct {
	Allowed bool
	// Remaining is the tokens left; math.MaxInt64 when no limit applied.
	Remaining int64
	// RetryIn is how long until the same request would be allowed.
	RetryIn time.Duration
	// ResetIn is how long until the bucket is full.
	ResetIn time.Duration
	// Index is the transaction of the batch this decision came from, or -1
	// when no checked transaction applied a limit.
	Index int
}

// allowedDecision is the answer when no limit applies.
var allowedDecision = Decision{Allowed: true, Remaining: math.MaxInt64, Index: -1}

// Limiter applies transactions to a store. Create it with New.
type Limiter struct {
	store store.Store
	clock clock.Clock
}

// New returns a Limiter over s, telling time by c.
func New(s store.Store, c clock.Clock) *Limiter {
	return &Limiter{store: s, clock: c}
}

// Store returns the limiter's store.
func (l *Limiter) Store() store.Store { return l.store }

// Clock returns the limiter's clock.
func (l *Limiter) Clock() clock.Clock { return l.clock }

// Check reports whether txn would be allowed, spending nothing.
func (l *Limiter) Check(ctx context.Context, txn Transaction) (Decision, error) {
	txn.Kind = CheckOnly
	d, _, err := l.Batch(ctx, []Transaction{txn})
	return d, err
}

// Spend checks txn and, if allowed, spends its cost.
func (l *Limiter) Spend(ctx context.Context, txn Transaction) (Decision, error) {
	txn.Kind = CheckAndSpend
	d, _, err := l.Batch(ctx, []Transaction{txn})
	return d, err
}

// Reset makes the bucket of txn full again.
func (l *Limiter) Reset(ctx context.Context, txn Transaction) (Decision, error) {
	txn.Kind = ResetBucket
	d, _, err := l.Batch(ctx, []Transaction{txn})
	return d, err
}

// Validate checks a batch against the rules: 1 to MaxBatch transactions, no
// bucket twice, known kinds, valid limits and costs between 0 and burst.
func Validate(txns []Transaction) error {
	if len(txns) == 0 {
		return ErrEmptyBatch
	}
	if len(txns) > MaxBatch {
		return fmt.Errorf("%w: got %d", ErrBatchTooLarge, len(txns))
	}
	for i := range txns {
		t := &txns[i]
		if t.Key == "" {
			return fmt.Errorf("transaction %d: %w", i, ErrEmptyKey)
		}
		if t.Kind == 0 {
			t.Kind = CheckAndSpend
		}
		if t.Kind > ResetBucket {
			return fmt.Errorf("transaction %d: %w %d", i, ErrInvalidKind, t.Kind)
		}
		if !t.Disabled && t.Kind != ResetBucket {
			if err := t.Limit.Valid(); err != nil {
				return fmt.Errorf("%w: transaction %d (%s): %w", ErrInvalid, i, t.Key, err)
			}
			if err := t.Limit.ValidCost(t.Cost); err != nil {
				return fmt.Errorf("%w: transaction %d (%s): %w", ErrInvalid, i, t.Key, err)
			}
		}
		for j := range i {
			if txns[j].Key == t.Key {
				return fmt.Errorf("%w: %q in transactions %d and %d", ErrDuplicateBucket, t.Key, j, i)
			}
		}
	}
	return nil
}

// Batch applies txns all-or-nothing and returns the batch's decision and one
// decision per transaction (a disabled transaction's is allowed with
// math.MaxInt64 remaining).
func (l *Limiter) Batch(ctx context.Context, txns []Transaction) (Decision, []Decision, error) {
	if err := Validate(txns); err != nil {
		return Decision{}, nil, err
	}
	each, err := l.apply(ctx, txns, action, true)
	if err != nil {
		return Decision{}, nil, fmt.Errorf("apply batch: %w", err)
	}
	batch := allowedDecision
	for i := range txns {
		if !txns[i].Disabled && (txns[i].Kind == CheckAndSpend || txns[i].Kind == CheckOnly) {
			batch = Stricter(batch, each[i])
		}
	}
	return batch, each, nil
}

// apply runs one store operation per enabled transaction, in one batch, and
// returns each transaction's decision; a disabled transaction is allowed
// with no limit and never reaches the store.
func (l *Limiter) apply(ctx context.Context, txns []Transaction, act func(Kind) store.Action, allOrNothing bool) ([]Decision, error) {
	ops := make([]store.Op, 0, len(txns))
	for i := range txns {
		t := &txns[i]
		if !t.Disabled {
			ops = append(ops, store.Op{Key: t.Key, Algorithm: store.GCRA, Action: act(t.Kind), Limit: t.Limit, Cost: t.Cost})
		}
	}
	results := make([]store.Result, len(ops))
	if len(ops) > 0 {
		if err := l.store.Do(ctx, l.clock.Now(), store.Batch{Ops: ops, AllOrNothing: allOrNothing}, results); err != nil {
			return nil, err
		}
	}
	each := make([]Decision, len(txns))
	k := 0
	for i := range txns {
		if txns[i].Disabled {
			each[i] = allowedDecision
		} else {
			r := results[k]
			k++
			each[i] = Decision{Allowed: r.Allowed, Remaining: r.Remaining, RetryIn: r.RetryIn, ResetIn: r.ResetIn}
		}
		each[i].Index = i
	}
	return each, nil
}

func action(k Kind) store.Action {
	switch k {
	case CheckOnly:
		return store.Check
	case SpendOnly:
		return store.SpendOnly
	case ResetBucket:
		return store.Reset
	}
	return store.Spend
}

// Stricter returns the stricter of two decisions: a denied one beats an
// allowed one, then the longer RetryIn, then the fewer remaining.
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
	if b.Remaining < a.Remaining {
		return b
	}
	return a
}

// Refund gives the cost of each transaction back to its bucket, never past
// full. Buckets that do not exist are left alone. The decision is allowed
// when every existing bucket got something back; Remaining is the least
// and RetryIn and ResetIn the longest over the buckets.
func (l *Limiter) Refund(ctx context.Context, txns ...Transaction) (Decision, []Decision, error) {
	for i := range txns {
		txns[i].Kind = CheckAndSpend // validated like a spend
	}
	if err := Validate(txns); err != nil {
		return Decision{}, nil, err
	}
	each, err := l.apply(ctx, txns, func(Kind) store.Action { return store.Refund }, false)
	if err != nil {
		return Decision{}, nil, fmt.Errorf("apply refund: %w", err)
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
