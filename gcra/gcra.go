// Package gcra implements the Generic Cell Rate Algorithm exactly as Let's
// Encrypt's Boulder does: integer nanoseconds, one number of state per bucket
// (the theoretical arrival time, TAT), and floor division for the tokens
// remaining.
//
// Everything here is a pure function of (now, limit, state, cost): no I/O, no
// locks and no clock. The functions are safe for concurrent use.
package gcra

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Limit is a token bucket: it holds at most Burst tokens and refills at
// Count tokens every Period. The zero value is not a valid limit; see Valid.
type Limit struct {
	Burst  int64
	Count  int64
	Period time.Duration
}

// ErrInvalidLimit reports a limit whose burst, count or period is not
// positive, whose emission interval (Period/Count) rounds to zero, or whose
// burst offset is over MaxBurstOffset.
var ErrInvalidLimit = errors.New("invalid limit")

// MaxBurstOffset is the longest an empty bucket may take to fill
// (EmissionInterval * Burst): 100 years. A TAT is at most now plus twice
// the burst offset, and it must stay within the Unix nanoseconds an int64
// holds (until the year 2262).
const MaxBurstOffset = 100 * 365 * 24 * time.Hour

// ErrInvalidCost reports a cost below zero or above the limit's burst.
var ErrInvalidCost = errors.New("invalid cost")

// Valid reports whether l can be used: burst, count and period positive, at
// least one nanosecond between tokens, and at most MaxBurstOffset for an
// empty bucket to fill. The error wraps ErrInvalidLimit.
func (l Limit) Valid() error {
	switch {
	case l.Burst <= 0:
		return fmt.Errorf("%w: burst %d, must be > 0", ErrInvalidLimit, l.Burst)
	case l.Count <= 0:
		return fmt.Errorf("%w: count %d, must be > 0", ErrInvalidLimit, l.Count)
	case l.Period <= 0:
		return fmt.Errorf("%w: period %s, must be > 0", ErrInvalidLimit, l.Period)
	case int64(l.Period) < l.Count: // Period/Count would round to 0
		return fmt.Errorf("%w: period %s / count %d is less than 1ns", ErrInvalidLimit, l.Period, l.Count)
	case fillsTooSlowly(l.Burst, l.EmissionInterval()):
		return fmt.Errorf("%w: burst %d at one token every %s takes more than %s to fill", ErrInvalidLimit, l.Burst, l.EmissionInterval(), MaxBurstOffset)
	}
	return nil
}

// fillsTooSlowly reports burst * interval > MaxBurstOffset, both positive,
// as burst > MaxBurstOffset/interval does but with a multiplication in
// place of a division: Valid runs on every decision.
func fillsTooSlowly(burst int64, interval time.Duration) bool {
	hi, lo := bits.Mul64(uint64(burst), uint64(interval))
	return hi != 0 || lo > uint64(MaxBurstOffset)
}

// ValidCost reports whether cost is allowed for l: 0 (a peek) up to Burst.
// The error wraps ErrInvalidCost.
func (l Limit) ValidCost(cost int64) error {
	if cost < 0 || cost > l.Burst {
		return fmt.Errorf("%w: cost %d, must be between 0 and burst %d", ErrInvalidCost, cost, l.Burst)
	}
	return nil
}

// EmissionInterval is the time between two tokens, Period/Count, in whole
// nanoseconds (Boulder's integer division).
func (l Limit) EmissionInterval() time.Duration {
	return time.Duration(int64(l.Period) / l.Count)
}

// BurstOffset is the time an empty bucket takes to fill: EmissionInterval *
// Burst.
func (l Limit) BurstOffset() time.Duration {
	return l.EmissionInterval() * time.Duration(l.Burst)
}

// Decision is the outcome of one Spend or Refund.
type Decision struct {
	// Allowed says whether the request may go ahead (Spend) or whether any
	// capacity was given back (Refund).
	Allowed bool
	// Remaining is the number of whole tokens left after the operation.
	Remaining int64
	// RetryIn is how long until a request of the same cost would be allowed;
	// zero when one would be allowed now.
	RetryIn time.Duration
	// ResetIn is how long until the bucket is full again.
	ResetIn time.Duration
	// TAT is the theoretical arrival time after the operation: the instant
	// the bucket is full again. Store it as the bucket's new state when
	// Allowed (an unchanged TAT needs no write).
	TAT time.Time
}

// Spend takes cost tokens from the bucket whose state is tat, at now. A zero
// tat means the bucket does not exist yet (it is full). A cost of 0 peeks
// without taking anything; a cost above the burst is always denied, its
// RetryIn saturating at the longest Duration. The caller validates l
// (Limit.Valid); Spend does not panic on an invalid limit but its answer is
// then meaningless.
func Spend(now time.Time, l Limit, tat time.Time, cost int64) Decision {
	p := l.Params()
	n := now.UnixNano()
	d := p.Spend(n, unixNano(tat, n), cost)
	return d.decision(now, n)
}

// Refund gives cost tokens back to the bucket whose state is tat, at now. A
// bucket that is already full (tat zero or not after now) gets nothing and
// the decision is not allowed; otherwise the TAT moves back by cost tokens,
// never before now.
func Refund(now time.Time, l Limit, tat time.Time, cost int64) Decision {
	if tat.IsZero() {
		// No bucket: it is full and there is nothing to give back.
		return Decision{Remaining: l.Burst}
	}
	n := now.UnixNano()
	return l.Params().Refund(n, tat.UnixNano(), cost).decision(now, n)
}

func unixNano(tat time.Time, now int64) int64 {
	if tat.IsZero() {
		return now
	}
	return tat.UnixNano()
}

// Params is a limit compiled for the hot path: the emission interval and
// burst offset precomputed, everything in int64 nanoseconds. The zero value
// is not useful; build one with Limit.Params. Safe for concurrent use.
// Spend and Refund take an EmissionInterval below 1 ns (only a Params
// built by hand has one) as 1 ns: their answers are then meaningless, but
// they never divide by zero.
type Params struct {
	Burst            int64
	EmissionInterval int64 // nanoseconds between tokens
	BurstOffset      int64 // nanoseconds for an empty bucket to fill
}

// Params compiles l. An invalid limit yields an emission interval of at
// least 1ns so that nothing divides by zero.
func (l Limit) Params() Params {
	var e int64 = 1
	if l.Count > 0 && int64(l.Period)/l.Count > 0 {
		e = int64(l.Period) / l.Count
	}
	return Params{Burst: l.Burst, EmissionInterval: e, BurstOffset: e * l.Burst}
}

// ValidParams returns l's Params and true when l is valid (Valid returns
// nil), and false when it is not. It makes Valid's checks with the one
// division Params needs, for the hot path; Valid says what is wrong.
func (l Limit) ValidParams() (Params, bool) {
	if l.Burst <= 0 || l.Count <= 0 || int64(l.Period) < l.Count {
		return Params{}, false
	}
	e := int64(l.Period) / l.Count
	if fillsTooSlowly(l.Burst, time.Duration(e)) {
		return Params{}, false
	}
	return Params{Burst: l.Burst, EmissionInterval: e, BurstOffset: e * l.Burst}, true
}

// Raw is a decision in int64 nanoseconds, as the stores compute it.
type Raw struct {
	Allowed   bool
	Remaining int64
	RetryIn   int64 // nanoseconds
	ResetIn   int64 // nanoseconds
	TAT       int64 // Unix nanoseconds after the operation
}

// Spend is Spend in nanoseconds: now and tat are Unix nanoseconds, and a tat
// at or before now means a full bucket.
func (p Params) Spend(now, tat, cost int64) Raw {
	allowed, remaining, retryIn, resetIn, newTAT := p.SpendValues(now, tat, cost)
	return Raw{Allowed: allowed, Remaining: remaining, RetryIn: retryIn, ResetIn: resetIn, TAT: newTAT}
}

// SpendValues is Spend with Raw's fields as its results, for the memory
// store's hot path. A Raw returned by value is written to the caller's
// stack and copied there in 16-byte moves (Go keeps structs of more than
// four fields in memory), which wait for the 8-byte writes before them:
// the new TAT, which the store writes back before it unlocks the bucket's
// shard, then waits for the copy, and so for the division that gives
// Remaining. As separate results, each is ready when computed.
func (p Params) SpendValues(now, tat, cost int64) (allowed bool, remaining, retryIn, resetIn, newTAT int64) {
	p.EmissionInterval = max(p.EmissionInterval, 1)
	tatU := tat
	if now > tatU {
		tatU = now
	}
	if cost > p.Burst {
		// More than the bucket holds: never allowed. cost*E may overflow,
		// so the retry saturates.
		// retry is <= 0 unless the TAT was set by a larger limit.
		retry := tatU - p.BurstOffset - now
		if cost > (math.MaxInt64-max(retry, 0))/p.EmissionInterval {
			retry = math.MaxInt64
		} else {
			retry += cost * p.EmissionInterval
		}
		return false, (now - (tatU - p.BurstOffset)) / p.EmissionInterval, retry, tatU - now, tatU
	}
	inc := p.EmissionInterval * cost
	next := tatU + inc
	diff := now - (next - p.BurstOffset)
	if diff < 0 {
		// Not enough tokens for this cost: deny and leave the TAT alone.
		return false, (now - (tatU - p.BurstOffset)) / p.EmissionInterval, -diff, tatU - now, tatU
	}
	var retry int64
	if diff < inc {
		retry = inc - diff
	}
	return true, diff / p.EmissionInterval, retry, next - now, next
}

// Refund is Refund in nanoseconds: a tat before now means a full bucket.
func (p Params) Refund(now, tat, cost int64) Raw {
	p.EmissionInterval = max(p.EmissionInterval, 1)
	if now > tat {
		// The TAT is in the past: the bucket is full, nothing to give back.
		return Raw{Remaining: p.Burst, TAT: tat}
	}
	newTAT := now
	if cost <= (tat-now)/p.EmissionInterval { // cost*E cannot overflow
		newTAT = tat - p.EmissionInterval*cost
	}
	return Raw{
		Allowed:   newTAT != tat,
		Remaining: (now - (newTAT - p.BurstOffset)) / p.EmissionInterval,
		ResetIn:   newTAT - now,
		TAT:       newTAT,
	}
}

// decision converts r to a Decision whose TAT keeps now's location.
func (r Raw) decision(now time.Time, n int64) Decision {
	return Decision{
		Allowed:   r.Allowed,
		Remaining: r.Remaining,
		RetryIn:   time.Duration(r.RetryIn),
		ResetIn:   time.Duration(r.ResetIn),
		TAT:       now.Add(time.Duration(r.TAT - n)),
	}
}
