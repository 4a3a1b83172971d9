package store

import (
	"time"

	"github.com/sluice-rl/sluice/window"
)

// State is a bucket's stored state: what a backend read before a batch, or
// what Evaluate asks it to put after. The zero value is a missing bucket,
// full (GCRA) or at zero (FixedWindow).
type State struct {
	// Exists reports that the bucket is stored. A GCRA state whose TAT is
	// at or before now, or a window state of an earlier window, counts as
	// missing whatever Exists says.
	Exists bool
	// TAT is a GCRA bucket's theoretical arrival time, in Unix nanoseconds.
	TAT int64
	// Start is a fixed window's first Unix second (window.Start).
	Start int64
	// Count is a fixed window's hit counter.
	Count int64
}

// Write is what applying an operation does to its bucket.
type Write uint8

const (
	// Keep leaves the bucket as it is.
	Keep Write = iota
	// Put stores the new state.
	Put
	// Remove deletes the bucket: it is full (GCRA) or at zero
	// (FixedWindow) again.
	Remove
)

// Decides reports whether op's decision counts toward its batch's: a GCRA
// Spend or Check. In an all-or-nothing batch, one such operation denied
// blocks the batch's writes.
func (op *Op) Decides() bool {
	return op.Algorithm == GCRA && (op.Kind == Spend || op.Kind == Check)
}

// Evaluate decides op at now on its bucket's prior state as if op were
// alone in its batch. It returns op's Result, what to do to the bucket, and
// the state to store when that is Put. Result.Applied is true when the
// write is not Keep, and for a fixed-window refund of a non-zero cost even
// on a missing bucket (which it leaves missing). op MUST be valid
// (Op.Validate). It is a pure function: no I/O, no allocation.
func (op *Op) Evaluate(now time.Time, prior State) (Result, Write, State) {
	var r Result
	w := op.evaluate(now.UnixNano(), &prior, &r)
	return r, w, prior
}

// EvaluateAt is Evaluate at nowNs, in Unix nanoseconds.
func (op *Op) EvaluateAt(nowNs int64, prior State) (Result, Write, State) {
	var r Result
	w := op.evaluate(nowNs, &prior, &r)
	return r, w, prior
}

// evaluate is Evaluate writing in place, for the batch's sake: st holds the
// prior state and receives the state to put (the zero State unless the
// write is Put), r receives the Result.
func (op *Op) evaluate(nowNs int64, st *State, r *Result) Write {
	if op.Algorithm == FixedWindow {
		return op.evaluateWindow(time.Unix(0, nowNs), st, r)
	}
	live := st.Exists && st.TAT > nowNs
	p := op.Limit.Params()
	switch op.Kind {
	case Reset:
		*r = Result{Allowed: true, Remaining: op.Limit.Burst, Applied: live}
		*st = State{}
		if live {
			return Remove
		}
		return Keep
	case Refund:
		if !live {
			*r = Result{Remaining: op.Limit.Burst}
			*st = State{}
			return Keep
		}
		g := p.Refund(nowNs, st.TAT, op.Cost)
		*r = Result{Allowed: g.Allowed, Remaining: g.Remaining, ResetIn: time.Duration(g.ResetIn), Applied: g.Allowed}
		switch {
		case !g.Allowed:
			*st = State{}
			return Keep
		case g.TAT <= nowNs:
			// Given back to full: the same as no bucket.
			*st = State{}
			return Remove
		}
		*st = State{Exists: true, TAT: g.TAT}
		return Put
	}
	tat := nowNs
	if live {
		tat = st.TAT
	}
	// Five results, not a gcra.Raw: the new TAT is not copied through
	// the stack behind the division for Remaining (Params.SpendValues).
	allowed, remaining, retryIn, resetIn, next := p.SpendValues(nowNs, tat, op.Cost)
	put := op.Kind != Check && allowed && op.Cost != 0
	*r = Result{
		Allowed:   allowed,
		Remaining: remaining,
		RetryIn:   time.Duration(retryIn),
		ResetIn:   time.Duration(resetIn),
		Applied:   put,
	}
	if !put {
		*st = State{}
		return Keep
	}
	*st = State{Exists: true, TAT: next}
	return Put
}

// evaluateWindow is evaluate for a FixedWindow op. Envoy counts every hit,
// over the limit or not; a denied result is over the limit until the window
// ends.
func (op *Op) evaluateWindow(now time.Time, st *State, r *Result) Write {
	length := int64(op.Window.Length / time.Second)
	start := window.Start(now, length)
	live := st.Exists && st.Start == start
	var count int64
	if live {
		count = st.Count
	}
	resetIn := window.ResetIn(now, length)
	w := Keep
	after := count
	switch op.Kind {
	case Reset:
		*r = Result{Allowed: true, Remaining: op.Window.Limit, ResetIn: resetIn, Applied: live}
		*st = State{}
		if live {
			return Remove
		}
		return Keep
	case Refund:
		after = max(count-op.Cost, 0)
		h := window.Hit(after, 0, op.Window.Limit)
		// Applied whenever something is asked back, by convention (the
		// Redis script's too); a missing bucket stays missing.
		*r = Result{Allowed: !h.Over, Remaining: h.Remaining, ResetIn: resetIn, Count: after, Applied: op.Cost != 0}
		if op.Cost != 0 && live {
			w = Put
		}
	case Check:
		h := window.Hit(count, op.Cost, op.Window.Limit)
		*r = Result{Allowed: !h.Over, Remaining: h.Remaining, ResetIn: resetIn, Count: count}
	default:
		h := window.Hit(count, op.Cost, op.Window.Limit)
		after = h.After
		*r = Result{Allowed: !h.Over, Remaining: h.Remaining, ResetIn: resetIn, Count: after, Applied: op.Cost != 0}
		if op.Cost != 0 {
			w = Put
		}
	}
	if !r.Allowed {
		r.RetryIn = resetIn
	}
	if w == Put {
		*st = State{Exists: true, Start: start, Count: after}
	} else {
		*st = State{}
	}
	return w
}

// Evaluate decides batch b at now, the batch's buckets in the states
// states[i] (the bucket of b.Ops[i]). It writes op i's Result into out[i],
// what to do to its bucket into writes[i], and the state to store (when
// writes[i] is Put) over states[i]. states, out and writes MUST each have
// room for len(b.Ops); the ops MUST be valid and name distinct buckets.
//
// Each op is decided as Op.Evaluate does. Then, in an all-or-nothing batch
// in which an op that Decides is denied, no GCRA bucket changes and no
// bucket is reset: those writes become Keep and their Results not Applied.
// Fixed-window hits and refunds are applied regardless, as Envoy counts
// every hit.
//
// It is a pure function and allocates nothing.
func Evaluate(now time.Time, b Batch, states []State, out []Result, writes []Write) {
	ops := b.Ops
	nowNs := now.UnixNano()
	denied := false
	for i := range ops {
		op := &ops[i]
		writes[i] = op.evaluate(nowNs, &states[i], &out[i])
		if op.Decides() && !out[i].Allowed {
			denied = true
		}
	}
	if !b.AllOrNothing || !denied {
		return
	}
	for i := range ops {
		if ops[i].Algorithm == GCRA || ops[i].Kind == Reset {
			out[i].Applied = false
			writes[i] = Keep
		}
	}
}
