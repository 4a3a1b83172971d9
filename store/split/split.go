// Package split is a store.Store that keeps short fixed windows in a store
// of their own: envoyproxy/ratelimit's per-second Redis (REDIS_PERSECOND),
// which takes the counters of limits whose unit is SECOND off the main
// Redis.
//
// # Routing
//
// An operation goes to the per-second store when it is a fixed window
// shorter than one minute (PerSecond): a limit of unit second, with any
// unit_multiplier under 60. Everything else goes to the main store: longer
// windows, and every GCRA bucket (the key-value limits, which
// envoyproxy/ratelimit does not have), so that an all-or-nothing
// key-value batch stays within one store and keeps that store's atomicity.
// envoyproxy/ratelimit routes by the unit alone and has no
// unit_multiplier; for a multiplier of 1 the two rules agree. A window of
// 60 seconds or more is the main store's whatever its unit was written as
// (second × 60 and minute × 1 are the same window).
//
// # Batches
//
// A batch whose operations all go to one store is passed to it as it is.
// Otherwise it is cut in two, each half keeping its operations' order, the
// two halves run concurrently, and the Results are put back in the batch's
// order. Each half is atomic in its own store; the halves share no bucket.
//
// All-or-nothing holds exactly as store.Batch says, because only GCRA
// operations decide a batch and they all go to the main store: the
// per-second half holds only fixed-window operations, whose hits and
// refunds are applied whatever the batch decides. The one exception is a
// fixed-window Reset, which an all-or-nothing batch denied by a GCRA
// operation must not apply: when the per-second half has a Reset and the
// main half an operation that decides, the main half runs first and, if it
// denied the batch, those resets are not sent (their Results say so, as
// store.Evaluate's would).
//
// # Failures
//
// When either half fails, Do returns its error (ErrUnavailable from an
// unreachable store stays wrapped); the other half may have applied its
// operations, as a batch across Redis Cluster slots may. Ping asks both
// stores; Close closes both.
package split

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/store"
)

var _ store.Store = (*Store)(nil)

// Store routes each operation to the main or the per-second store. Create
// it with New; it is safe for concurrent use when both stores are.
type Store struct {
	store.ForwardOverrides // to main

	main, perSecond store.Store
}

// New returns a Store sending short fixed windows (PerSecond) to perSecond
// and everything else to main. Both are required; the Store owns them
// (Close closes them).
func New(main, perSecond store.Store) (*Store, error) {
	if main == nil || perSecond == nil {
		return nil, errors.New("split: both a main and a per-second store are required")
	}
	return &Store{ForwardOverrides: store.ForwardOverrides{To: main}, main: main, perSecond: perSecond}, nil
}

// PerSecond reports whether op goes to the per-second store: a fixed window
// shorter than one minute.
func PerSecond(op *store.Op) bool {
	return op.Algorithm == store.FixedWindow && op.Window.Length > 0 && op.Window.Length < time.Minute
}

// Do applies b, each operation in the store PerSecond picks; see the
// package doc for what holds when a batch spans both.
func (s *Store) Do(ctx context.Context, now time.Time, b store.Batch, out []store.Result) error {
	ops := b.Ops
	if len(out) < len(ops) {
		return fmt.Errorf("%w: %d results for %d operations", store.ErrBadBatch, len(out), len(ops))
	}
	fast := 0
	for i := range ops {
		if PerSecond(&ops[i]) {
			fast++
		}
	}
	switch fast {
	case 0:
		return s.main.Do(ctx, now, b, out)
	case len(ops):
		if err := s.perSecond.Do(ctx, now, b, out); err != nil {
			return fmt.Errorf("per-second store: %w", err)
		}
		return nil
	}
	// The batch spans both stores: refuse what either would refuse before
	// either changes anything.
	if err := b.Check(out); err != nil {
		return err
	}
	h := cut(b, fast)
	if b.AllOrNothing && h.fastResets && h.slowDecides {
		// Resets must wait for the main half's decision.
		if err := s.main.Do(ctx, now, h.slow, h.slowOut); err != nil {
			return err
		}
		if denied(h.slow, h.slowOut) {
			if err := s.perSecondWithoutResets(ctx, now, &h); err != nil {
				return err
			}
		} else if err := s.perSecond.Do(ctx, now, h.fast, h.fastOut); err != nil {
			return fmt.Errorf("per-second store: %w", err)
		}
		h.merge(out)
		return nil
	}
	errc := make(chan error, 1)
	go func() { errc <- s.perSecond.Do(ctx, now, h.fast, h.fastOut) }()
	errMain := s.main.Do(ctx, now, h.slow, h.slowOut)
	if err := <-errc; err != nil {
		return errors.Join(errMain, fmt.Errorf("per-second store: %w", err))
	}
	if errMain != nil {
		return errMain
	}
	h.merge(out)
	return nil
}

// perSecondWithoutResets runs the per-second half of a denied
// all-or-nothing batch with its resets left out: a Reset's Result is then
// what store.Evaluate gives a reset it does not apply.
func (s *Store) perSecondWithoutResets(ctx context.Context, now time.Time, h *halves) error {
	keep := make([]store.Op, 0, len(h.fast.Ops))
	var at []int // indexes into h.fast.Ops of keep's ops
	for i := range h.fast.Ops {
		op := &h.fast.Ops[i]
		if op.Kind == store.Reset {
			r, _, _ := op.Evaluate(now, store.State{})
			r.Applied = false
			h.fastOut[i] = r
			continue
		}
		keep = append(keep, *op)
		at = append(at, i)
	}
	if len(keep) == 0 {
		return nil
	}
	res := make([]store.Result, len(keep))
	if err := s.perSecond.Do(ctx, now, store.Batch{Ops: keep, AllOrNothing: true}, res); err != nil {
		return fmt.Errorf("per-second store: %w", err)
	}
	for k, i := range at {
		h.fastOut[i] = res[k]
	}
	return nil
}

// denied reports whether an operation of b that decides was denied.
func denied(b store.Batch, out []store.Result) bool {
	for i := range b.Ops {
		if b.Ops[i].Decides() && !out[i].Allowed {
			return true
		}
	}
	return false
}

// halves is a batch cut in two.
type halves struct {
	fast, slow       store.Batch
	fastOut, slowOut []store.Result
	fastAt, slowAt   []int // the batch's index of each half's ops
	fastResets       bool  // the per-second half has a Reset
	slowDecides      bool  // the main half has an op that decides
}

// cut splits b into its per-second half (fast of its ops) and its main
// half.
func cut(b store.Batch, fast int) halves {
	n := len(b.Ops)
	ops := make([]store.Op, n)
	at := make([]int, n)
	res := make([]store.Result, n)
	h := halves{
		fast:    store.Batch{Ops: ops[:0:fast], AllOrNothing: b.AllOrNothing},
		slow:    store.Batch{Ops: ops[fast:fast], AllOrNothing: b.AllOrNothing},
		fastAt:  at[:0:fast],
		slowAt:  at[fast:fast],
		fastOut: res[:fast],
		slowOut: res[fast:],
	}
	for i := range b.Ops {
		op := &b.Ops[i]
		if PerSecond(op) {
			h.fast.Ops = append(h.fast.Ops, *op)
			h.fastAt = append(h.fastAt, i)
			h.fastResets = h.fastResets || op.Kind == store.Reset
			continue
		}
		h.slow.Ops = append(h.slow.Ops, *op)
		h.slowAt = append(h.slowAt, i)
		h.slowDecides = h.slowDecides || op.Decides()
	}
	return h
}

// merge puts both halves' Results into out in the batch's order.
func (h *halves) merge(out []store.Result) {
	for k, i := range h.fastAt {
		out[i] = h.fastOut[k]
	}
	for k, i := range h.slowAt {
		out[i] = h.slowOut[k]
	}
}

// Ping reports whether both stores answer.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.main.Ping(ctx); err != nil {
		return err
	}
	if err := s.perSecond.Ping(ctx); err != nil {
		return fmt.Errorf("per-second store: %w", err)
	}
	return nil
}

// Close closes both stores.
func (s *Store) Close() error {
	return errors.Join(s.main.Close(), s.perSecond.Close())
}
