// Package clock provides the time source for Sluice: an interface, the real
// clock, and a fake clock that tests advance by hand.
//
// Nothing outside this package calls time.Now; every component takes a Clock
// so that one fake clock can drive a whole test.
package clock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Clock tells the time. Implementations MUST be safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// Real is the wall clock. The zero value is ready to use, by pointer, and
// safe for concurrent use.
//
// Now reads the wall clock at most every resync; in between, it adds the
// monotonic time elapsed since that reading, one clock read instead of
// time.Now's two (a decision of the memory store spends a third of its
// time reading the clock otherwise). The two clocks advance at one rate —
// NTP's slewing speeds or slows both — so the times are time.Now's, but
// for a step of the wall clock (set by hand, or stepped by NTP), which Now
// follows within resync.
type Real struct {
	anchor atomic.Pointer[anchor] // the last reading of the wall clock
}

// anchor is a reading of the wall clock, t, with its Unix nanoseconds.
type anchor struct {
	t  time.Time
	ns int64
}

// resync is how long Now goes without reading the wall clock.
const resync = 100 * time.Millisecond

// Now returns the current time.
func (r *Real) Now() time.Time {
	if a := r.anchor.Load(); a != nil {
		// time.Since reads only the monotonic clock.
		if d := time.Since(a.t); d >= 0 && d < resync {
			return a.t.Add(d)
		}
	}
	return r.read().t
}

// UnixNano returns Now().UnixNano(), without making a time.Time.
func (r *Real) UnixNano() int64 {
	if a := r.anchor.Load(); a != nil {
		if d := time.Since(a.t); d >= 0 && d < resync {
			return a.ns + int64(d)
		}
	}
	return r.read().ns
}

// read reads the wall clock and makes it the anchor.
func (r *Real) read() *anchor {
	t := time.Now()
	a := &anchor{t: t, ns: t.UnixNano()}
	r.anchor.Store(a)
	return a
}

// UnixNano returns c's time in Unix nanoseconds: c.Now().UnixNano(), the
// real clock's without making a time.Time.
func UnixNano(c Clock) int64 {
	if r, ok := c.(*Real); ok {
		return r.UnixNano()
	}
	return c.Now().UnixNano()
}

// New returns the real clock.
func New() Clock { return &Real{} }

// Fake is a clock that moves only when told to. The zero value starts at the
// zero time; NewFake sets a useful start. It is safe for concurrent use.
type Fake struct {
	mu  sync.Mutex // protects now
	now time.Time
}

// NewFake returns a fake clock set to start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the fake clock's current time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Add moves the clock forward by d (backwards if d is negative) and returns
// the new time.
func (f *Fake) Add(d time.Duration) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	return f.now
}

// Advance is Add, under the name other fake clocks use.
func (f *Fake) Advance(d time.Duration) time.Time { return f.Add(d) }

// Set moves the clock to t.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t
}

// UntilDeadline reports how long remains before ctx's deadline, and
// whether it has one. Context deadlines are kept in wall-clock time by
// package context whatever Clock a component runs on, so this reads the
// wall clock: it is the one place outside Real that does.
func UntilDeadline(ctx context.Context) (time.Duration, bool) {
	d, ok := ctx.Deadline()
	if !ok {
		return 0, false
	}
	return time.Until(d), true
}

// Ended reports whether ctx is done: cancelled, or past its deadline. It
// also catches a deadline that has passed a moment before the context's own
// timer marks it done, which libraries that check deadlines themselves can
// see first.
func Ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	left, ok := UntilDeadline(ctx)
	return ok && left <= 0
}
